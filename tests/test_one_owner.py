"""Facts with one owner stay with it: the file-writing scheme (``_atomic``), JSON safety
(``_json``), the cost models' names (``cost.COST_MODELS``), and the CLI's commands share helpers
through ``cli/_common`` only, never each other's private names.

Read from the source with ``ast`` (the project's own modules, not the tests), as
tests/test_layering.py reads imports.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from hlo_roofline import _atomic, _json
from hlo_roofline.cli import _common

PACKAGE = ROOT / "hlo_roofline"
CLI = PACKAGE / "cli"
# Commands may import from these: the shared helpers and the text they print.
SHARED = {"hlo_roofline.cli._common", "hlo_roofline.cli.render"}


def _sources(root: Path):
    for path in sorted(root.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def _calls(tree: ast.AST) -> set[str]:
    """Dotted names of the functions a module calls (``os.replace``, ``tempfile.mkstemp``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, func = [], node.func
            while isinstance(func, ast.Attribute):
                parts.append(func.attr)
                func = func.value
            if isinstance(func, ast.Name):
                out.add(".".join([func.id, *reversed(parts)]))
    return out


WRITE_SCHEMES = {"os.replace", "os.rename", "tempfile.mkstemp", "tempfile.NamedTemporaryFile"}


def test_only_atomic_renames_temporary_files():
    found = {
        str(path.relative_to(ROOT)): sorted(_calls(tree) & WRITE_SCHEMES)
        for path, tree in _sources(PACKAGE)
        if path.name != "_atomic.py" and _calls(tree) & WRITE_SCHEMES
    }
    assert not found, f"temporary-file schemes outside hlo_roofline/_atomic.py: {found}"


def test_only_json_defines_json_safety():
    defined = [
        str(path.relative_to(ROOT))
        for path, tree in _sources(PACKAGE)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "json_safe"
    ]
    assert defined == ["hlo_roofline/_json.py"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": math.nan, "b": [1.0, math.inf, -math.inf]}, {"a": None, "b": [1.0, None, None]}),
        ((np.float32(0.5), np.int64(3), np.bool_(True)), [0.5, 3, True]),
        ({"x": np.float64("nan"), "y": "text", "z": None}, {"x": None, "y": "text", "z": None}),
    ],
)
def test_json_safety_writes_what_strict_parsers_read(value, expected):
    text = _json.dumps(value)
    assert json.loads(text) == expected
    assert "NaN" not in text and "Infinity" not in text
    assert all(
        type(v) in (int, float, bool, str, type(None)) for v in _leaves(_json.json_safe(value))
    )


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def test_a_probe_leaves_nothing_and_says_why_it_cannot_write(tmp_path):
    assert _atomic.unwritable(tmp_path / "new" / "dir") is None
    assert list((tmp_path / "new" / "dir").iterdir()) == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert _atomic.unwritable(blocker / "sub")  # a file where a folder should be


def test_the_cli_takes_the_cost_models_names_from_their_owner():
    from hlo_roofline import cost

    assert _common.COST_MODELS is cost.COST_MODELS


# explore's command is its owner's to move to the public name (``one_line``).
PENDING = {("explore.py", "_one_line")}


def test_commands_import_no_other_commands_and_no_private_names():
    bad = []
    for path, tree in _sources(CLI):
        if path.name in ("__init__.py", "_common.py", "render.py"):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                "hlo_roofline.cli"
            ):
                continue
            if node.module not in SHARED:
                bad.append(f"{path.name} imports {node.module}")
            bad += [
                f"{path.name} imports {node.module}.{a.name}"
                for a in node.names
                if a.name.startswith("_") and (path.name, a.name) not in PENDING
            ]
    assert not bad, bad


def test_the_architecture_page_names_the_rule_decorator_that_exists():
    """docs/architecture.md's "Add a cost rule" names the decorator the cost modules use."""
    import re

    from hlo_roofline.cost import base

    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page[page.index("## Add a cost rule") :].split("\n## ")[0]
    named = set(re.findall(r"`cost\.base\.(\w+)`", section)) | set(
        re.findall(r"`@(\w+)\(", section)
    )
    assert named, "the section names no decorator"
    used = {
        d.func.id
        for path, tree in _sources(PACKAGE / "cost")
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for d in node.decorator_list
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Name)
    }
    for name in named:
        assert callable(getattr(base, name, None)) and name in used, name
