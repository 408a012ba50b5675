"""``hlo_roofline.hlo.parse``: a string is HLO text, a ``pathlib.Path`` a file; nothing guessed."""

from __future__ import annotations

import warnings

import pytest

from hlo_roofline.hlo import HloParseError, parse, parse_file

TEXT = "HloModule m\n\nENTRY e {\n  ROOT p = f32[8]{0} parameter(0)\n}\n"


def test_text_and_a_path_each_parse_as_what_they_are(tmp_path):
    path = tmp_path / "m.hlo.txt"
    path.write_text(TEXT)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither form warns
        from_text, from_path, from_file = parse(TEXT), parse(path), parse_file(path)
    for module in (from_text, from_path, from_file):
        assert [i.opcode for i in module.entry.instructions] == ["parameter"]


@pytest.mark.parametrize("text", ["m.hlo.txt", "\x00\xff", "x" * 5000, "ENTRY e {"])
def test_a_one_line_string_is_text_and_its_error_is_a_parse_error(text, tmp_path, monkeypatch):
    """Not a path: no ``embedded null byte``, no ``File name too long``, no file looked for."""
    monkeypatch.chdir(tmp_path)  # no such file here
    with pytest.raises(HloParseError) as caught:
        parse(text)
    assert "cannot read" not in str(caught.value)
    assert caught.value.line == 1


def test_a_string_naming_a_file_still_reads_it_with_a_deprecation(tmp_path, monkeypatch):
    (tmp_path / "m.hlo.txt").write_text(TEXT)
    monkeypatch.chdir(tmp_path)
    with pytest.deprecated_call(match=r"pathlib\.Path"):
        module = parse("m.hlo.txt")
    assert module.entry.root.name == "p"


def test_anything_else_is_a_type_error():
    with pytest.raises(TypeError, match=r"pathlib\.Path"):
        parse(TEXT.encode())  # type: ignore[arg-type]
