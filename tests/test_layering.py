"""The house's layering: data flows one way (docs/architecture.md), and no import closes a cycle.

Every import counts, function-local ones included: a cycle hidden inside a function is still a
cycle for whoever reads the code. ``from hlo_roofline import chips`` is an import of
``hlo_roofline.chips`` (the package's own names load lazily).
"""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys

from conftest import ROOT

PACKAGES = {"hlo_roofline": ROOT / "hlo_roofline", "hlo_roofline_tensorboard": ROOT / "plugin"}

# Lowest first; a module may import its own layer and the layers before it, never a later one.
LAYERS = [
    (
        "base",
        [
            "hlo_roofline._jax_env",
            "hlo_roofline._gc",
            "hlo_roofline._atomic",
            "hlo_roofline._json",
            "hlo_roofline._frame",
            "hlo_roofline.logdir",
            "hlo_roofline.schema",
            "hlo_roofline.text",
        ],
    ),
    ("text → IR", ["hlo_roofline.hlo", "hlo_roofline.hlo.*"]),
    ("prices", ["hlo_roofline.cost", "hlo_roofline.cost.*", "hlo_roofline.cost.tpu*"]),
    ("chip data", ["hlo_roofline.chips", "hlo_roofline.chips.*"]),
    (
        "judgments",
        [
            "hlo_roofline.judge",
            "hlo_roofline.judge.*",
            "hlo_roofline.host",
        ],
    ),
    ("the result", ["hlo_roofline.evidence", "hlo_roofline.report", "hlo_roofline.plot"]),
    ("comparisons", ["hlo_roofline.diff", "hlo_roofline.check"]),
    (
        "compiling and measuring",
        [
            "hlo_roofline.targets",
            "hlo_roofline.entries",
            "hlo_roofline.dumps",
            "hlo_roofline.cache",
            "hlo_roofline.placement",
            "hlo_roofline.compile",
            "hlo_roofline.api",
            "hlo_roofline.xplane",
            "hlo_roofline.measured",
            "hlo_roofline.measured.*",
        ],
    ),
    (
        "faces",
        [
            "hlo_roofline",
            "hlo_roofline.cli",
            "hlo_roofline.cli.*",
            "hlo_roofline.testing",
            "hlo_roofline.demo",
            "hlo_roofline.explorer",
            "hlo_roofline.explorer.*",
            "hlo_roofline.calibrate",
            "hlo_roofline.examples",
            "hlo_roofline.examples.*",
            "hlo_roofline_tensorboard",
            "hlo_roofline_tensorboard.*",
        ],
    ),
]


def modules() -> dict[str, object]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports(name: str, path, known: dict) -> set[str]:
    """The project's modules ``name`` imports anywhere in its body."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + is_package]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            submodules = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
            out.update(submodules)
            if len(submodules) < len(node.names) and module in known:
                out.add(module)
    out.discard(name)
    return out


def layer_of(name: str) -> int:
    for index, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return index
    raise AssertionError(f"{name} is in no layer: add it to LAYERS and to docs/architecture.md")


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_import_goes_down_the_layers():
    upward = [
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, deps in sorted(graph().items())
        for b in sorted(deps)
        if layer_of(b) > layer_of(a)
    ]
    assert not upward, "\n".join(upward)


def cycles_of(edges: dict[str, set[str]]) -> list[str]:
    """Every import cycle of a module graph, each as ``a → b → a``."""
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append(" → ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_import_cycles():
    cycles = cycles_of(graph())
    assert not cycles, "\n".join(cycles)


# The explorer package's modules, each importing only those before it (explorer/__init__.py).
EXPLORER_ORDER = ["status", "layouts", "book", "step", "workers", "ranking", "results", "run", "maxtext"]


def test_the_explorer_modules_import_only_those_before_them():
    edges = graph()
    found = {n.rpartition(".")[2] for n in edges if n.startswith("hlo_roofline.explorer.")}
    assert found == set(EXPLORER_ORDER), "a new explorer module: give it its place here"
    later = [
        f"explorer.{a} imports explorer.{b}"
        for i, a in enumerate(EXPLORER_ORDER)
        for b in EXPLORER_ORDER[i + 1 :]
        if f"hlo_roofline.explorer.{b}" in edges[f"hlo_roofline.explorer.{a}"]
    ]
    assert not later, "\n".join(later)
    assert "hlo_roofline.explorer" not in {
        d for n in found for d in edges[f"hlo_roofline.explorer.{n}"]
    }


# An ES module's static imports: `import ... from "./x.js"` (and `export ... from`).
_JS_IMPORT = re.compile(r"""^\s*(?:import|export)\b[^;]*?\bfrom\s*["']\./([\w.-]+\.js)["']""", re.M)


def test_the_tabs_modules_import_no_cycle():
    """The tab's ES modules (plugin/static) import one another without a cycle: a view calls the
    page through state.js's ``actions``, never by importing index.js."""
    static = ROOT / "plugin" / "static"
    edges = {p.name: set(_JS_IMPORT.findall(p.read_text())) for p in static.glob("*.js")}
    assert edges["compare.js"] and edges["index.js"]  # the pattern reads real imports
    assert all(target in edges for targets in edges.values() for target in targets)
    cycles = cycles_of(edges)
    assert not cycles, "\n".join(cycles)


def test_the_package_and_its_ir_load_light():
    """``import hlo_roofline`` loads no JAX or pandas, ``hlo_roofline.hlo`` no pandas either."""
    code = (
        "import sys, hlo_roofline, hlo_roofline.hlo; "
        "print(sorted(m for m in ('jax', 'pandas', 'google.protobuf') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_host_chip_is_known_through_the_package():
    """``chips.get("host")`` works from ``from hlo_roofline import chips`` alone (the database
    does not import what measures the host; the package loads it with the database)."""
    code = (
        "from hlo_roofline import chips; import sys; "
        "print(chips.resolve('v5e'), chips.registry._providers.get('host') is not None)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["v5e", "True"]
