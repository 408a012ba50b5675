"""The error of malformed HLO text, and the source line it points into (one owner for the parser,
its lexer and its verifier)."""

from __future__ import annotations


class HloParseError(ValueError):
    """Malformed HLO text; ``line`` and ``column`` are 1-based, ``text`` is the offending line."""

    def __init__(self, message: str, line: int = 0, column: int = 0, text: str = "") -> None:
        self.message, self.line, self.column, self.text = message, line, column, text
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"line {self.line}:{self.column}: " if self.line else ""
        if not self.text:
            return where + self.message
        snippet = self.text if len(self.text) <= 200 else self.text[: max(self.column, 1) + 80]
        return f"{where}{self.message}\n  {snippet}\n  {' ' * max(self.column - 1, 0)}^"


class SourceLine:
    """One source line and its number, for errors that point at the right column. An instruction
    whose attribute value XLA printed with line breaks in it is one ``SourceLine`` of several lines:
    an error names the line and column its position falls on."""

    __slots__ = ("number", "text")

    def __init__(self, number: int, text: str) -> None:
        self.number, self.text = number, text

    def error(
        self, message: str, pos: int, cls: type[HloParseError] = HloParseError
    ) -> HloParseError:
        text = self.text
        if "\n" not in text:
            return cls(message, self.number, pos + 1, text)
        begin = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", begin)
        physical = text[begin : end if end >= 0 else len(text)]
        return cls(message, self.number + text.count("\n", 0, begin), pos - begin + 1, physical)


def line_text(text: str, number: int) -> str:
    """Line ``number`` (1-based) of ``text``, for an error message."""
    lines = text.split("\n")
    return lines[number - 1].rstrip() if 0 < number <= len(lines) else ""
