"""HLO text → IR (Module → Computation → Instruction).

``parse(text)`` reads HLO text, ``parse(pathlib.Path(...))`` or ``parse_file(path)`` a file: a
string is text, however short (a one-line string that names a file is still read as one, with a
``DeprecationWarning``: that was a guess, kept for the callers that relied on it).
"""

from __future__ import annotations

import os
import warnings

from hlo_roofline.hlo.files import parse_file
from hlo_roofline.hlo.ir import Computation, Instruction, Layout, Metadata, Module, Shape
from hlo_roofline.hlo.parser import HloParseError, parse_module, parse_shape

__all__ = [
    "Computation",
    "HloParseError",
    "Instruction",
    "Layout",
    "Metadata",
    "Module",
    "Shape",
    "parse",
    "parse_file",
    "parse_module",
    "parse_shape",
]


def parse(text: str | os.PathLike) -> Module:
    """Parse HLO text; a :class:`pathlib.Path` (any ``os.PathLike``) is read as a file.

    Malformed text is an :class:`HloParseError` at line:column, whatever it looks like (a
    one-line string is never taken for a path unless such a file exists, and then with a
    ``DeprecationWarning``: pass a ``Path`` or call :func:`parse_file`)."""
    if isinstance(text, os.PathLike):
        return parse_file(text)
    if not isinstance(text, str):
        raise TypeError(f"parse() takes HLO text or a pathlib.Path, not {type(text).__name__}")
    if "\n" not in text and "HloModule" not in text and _is_file(text.strip()):
        warnings.warn(
            "parse(str) of a file's path is deprecated: a string is HLO text; pass "
            "pathlib.Path(path) or call parse_file(path)",
            DeprecationWarning,
            stacklevel=2,
        )
        return parse_file(text.strip())
    return parse_module(text)


def _is_file(name: str) -> bool:
    """Whether ``name`` names an existing file (False for a string no file can have: a NUL)."""
    try:
        return bool(name) and os.path.isfile(name)
    except (OSError, ValueError):
        return False
