"""A step named on a command line: ``FILE.py:NAME`` or ``package.module:NAME``.

The one reader of that syntax, so that every command (``analyze``, ``check``, ``explore``) and the
explorer's workers accept the same names and refuse the rest with the same words.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

FORMS = "FILE.py:NAME or package.module:NAME"


@dataclass(frozen=True)
class EntryName:
    """Where ``NAME`` is defined: a Python file's path or an importable module's dotted name."""

    where: str
    name: str
    is_file: bool

    def import_module(self) -> ModuleType:
        """The module named (not a file: those are imported by path, see ``cli``). Its import's
        own error, an ImportError, says what is missing."""
        return importlib.import_module(self.where)


def parse_entry(text: str) -> EntryName:
    """``text`` read as one of :data:`FORMS`; a ValueError that names them where it is neither.

    A file is what ends in ``.py``, contains a path separator or exists here; anything else is
    a module's dotted name (``maxtext.train:make_step``)."""
    where, sep, name = text.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise ValueError(f"{text!r} is not {FORMS} (e.g. steps.py:matmul_step)")
    is_file = where.endswith(".py") or "/" in where or "\\" in where or Path(where).exists()
    if not is_file and not all(part.isidentifier() for part in where.split(".")):
        raise ValueError(f"{text!r} is not {FORMS}: {where!r} is neither a .py file nor a module")
    return EntryName(where, name, is_file)
