"""``make_step``, before any compile and in a worker: its signature checked against the knobs
(names and kinds, with close matches), an unguarded ``explore()`` in its file refused, and how a
worker finds it again (by module, by file, or pickled by value)."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import inspect
import pickle
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hlo_roofline.entries import parse_entry
from hlo_roofline.explorer.layouts import did_you_mean, is_number
from hlo_roofline.text import one_line


@dataclass(frozen=True)
class _Parameter:
    name: str
    has_default: bool
    default: Any = None  # the default's value where it is a literal
    annotation: str = ""


def _parameters_of(function) -> list[_Parameter] | None:
    """make_step's parameters after the mesh, or None where it takes any keyword."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    out = []
    for p in list(signature.parameters.values())[1:]:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            return None
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        annotation = p.annotation
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        text = "" if annotation is inspect.Parameter.empty else text or str(annotation)
        default = None if p.default is inspect.Parameter.empty else p.default
        out.append(_Parameter(p.name, p.default is not inspect.Parameter.empty, default, text))
    return out


def _parameters_in_file(path: str, qualname: str) -> list[_Parameter] | None:
    """The parameters of ``qualname`` in the file at ``path``, read from its syntax tree (the
    file is not run); a ValueError when the file does not define that name."""
    tree = _syntax_tree(path)
    _refuse_unguarded_explore(tree, path)
    top = qualname.split(".")[0]
    defined: dict[str, ast.AST] = {}
    star = False
    for node in tree.body:
        for name, value in _top_level_names(node):
            defined[name] = value
        star |= isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
    if top not in defined:
        if star:  # a name from `import *` cannot be seen without running the file
            return None
        functions = sorted(n for n, v in defined.items() if isinstance(v, ast.FunctionDef))
        raise ValueError(
            f"{path} defines no {top!r}"
            + did_you_mean(top, defined)
            + (f" (its functions: {', '.join(functions)})" if functions else "")
        )
    node = defined[top]
    bound: set[str] = set()
    partial = getattr(node, "value", None)  # NAME = functools.partial(a_def, keyword=...)
    if (
        qualname == top
        and isinstance(partial, ast.Call)
        and ast.unparse(partial.func) in ("functools.partial", "partial")
        and len(partial.args) == 1
        and isinstance(partial.args[0], ast.Name)
        and isinstance(defined.get(partial.args[0].id), ast.FunctionDef)
        and all(k.arg is not None for k in partial.keywords)
    ):
        bound = {k.arg for k in partial.keywords if k.arg}
        node = defined[partial.args[0].id]
    elif qualname != top:
        return None
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None  # a method, an import or an assignment: checked where it is called
    args = node.args
    if args.kwarg is not None:
        return None
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True))[1:]
    pairs += list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    out = []
    for arg, default in pairs:
        value = None
        if default is not None:
            with contextlib.suppress(
                ValueError, TypeError, SyntaxError, MemoryError, RecursionError
            ):
                value = ast.literal_eval(default)
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if arg.arg in bound:  # given by the partial: a default the knobs may override
            out.append(_Parameter(arg.arg, True, value, annotation))
        else:
            out.append(_Parameter(arg.arg, default is not None, value, annotation))
    return out


def _top_level_names(node: ast.AST) -> list[tuple[str, ast.AST]]:
    """The names a module-level statement binds (defs, classes, assignments, imports)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [(node.name, node)]
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [(n.id, node) for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [((a.asname or a.name).split(".")[0], node) for a in node.names if a.name != "*"]
    if isinstance(node, ast.If | ast.Try | ast.With):  # guarded definitions (try: import ...)
        return [pair for child in ast.iter_child_nodes(node) for pair in _top_level_names(child)]
    return []


def _refuse_unguarded_explore(tree: ast.Module, path: str, otherwise: str = "") -> None:
    """A worker runs the top level of the file it loads ``make_step`` from: a call to explore
    there (not under ``if __name__ == "__main__":``) would start an exploration in every worker."""
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for call in ast.walk(node):
            if isinstance(call, ast.Call):
                name = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
                if name == "explore":
                    raise ValueError(
                        f"{path}:{call.lineno} calls explore() at the top level: each worker "
                        "loads this file to find make_step and would run it again. Put the call "
                        'under `if __name__ == "__main__":` (or '
                        + (otherwise or "pass make_step itself, not FILE.py:NAME")
                        + ": make_step then goes to the workers by value)"
                    )


def check_knobs(parameters: list[_Parameter] | None, knobs: Mapping[str, Iterable], what: str):
    """Every knob is a parameter of make_step, of its parameter's type (from its default or its
    annotation: ``bool``, ``int``, ``float``, ``str``), and no parameter without a default is
    left without a knob. A ValueError saying which, before anything compiles."""
    if parameters is None:
        return
    by_name = {p.name: p for p in parameters}
    for name, values in knobs.items():
        if name not in by_name:
            raise ValueError(
                f"{what} has no parameter {name!r} for the knob {name}="
                f" (its parameters after the mesh: {', '.join(by_name) or 'none'})"
                + did_you_mean(name, by_name)
            )
        kind = _kind(by_name[name])
        for value in values:
            if kind is not None and not _is_kind(value, kind, by_name[name]):
                raise ValueError(
                    f"knob {name}={value!r} is a {type(value).__name__}, not the "
                    f"{kind.__name__} {what}'s {name} takes"
                    + (f" (default {by_name[name].default!r})" if by_name[name].has_default else "")
                )
    missing = [p.name for p in parameters if not p.has_default and p.name not in knobs]
    if missing:
        raise ValueError(
            f"{what} needs {', '.join(missing)} but no knob gives "
            f"{'it' if len(missing) == 1 else 'them'} (knobs={{{missing[0]!r}: [...]}}, "
            f"--knob {missing[0]}=...)"
        )


def _kind(parameter: _Parameter) -> type | None:
    """The type a parameter's default or plain annotation says (None: no telling)."""
    if parameter.has_default and parameter.default is not None:
        kind = type(parameter.default)
        return kind if kind in (bool, int, float, str) else None
    words = {w.strip() for w in parameter.annotation.replace("Optional[", "").strip("]").split("|")}
    words.discard("None")
    if len(words) == 1:
        return {"bool": bool, "int": int, "float": float, "str": str}.get(words.pop())
    return None


def _is_kind(value, kind: type, parameter: _Parameter) -> bool:
    if value is None:
        return (
            parameter.has_default and parameter.default is None
        ) or "None" in parameter.annotation
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return is_number(value)
    return isinstance(value, kind)


def parameters_of_step(make_step, reference: tuple) -> list[_Parameter] | None:
    """make_step's parameters, found before any worker starts: a ValueError for a file or module
    that does not define it (with the names that are close)."""
    if not isinstance(make_step, str):
        return _parameters_of(make_step)
    kind, where, qualname = reference
    if kind == "file":
        if not Path(where).is_file():
            raise ValueError(f"no such file: {where}")
        return _parameters_in_file(where, qualname)
    try:
        value: Any = importlib.import_module(where)
    except ImportError as exc:
        raise ValueError(f"cannot import {where}: {one_line(exc)}") from None
    for part in qualname.split("."):
        if not hasattr(value, part):
            known = [n for n in dir(value) if not n.startswith("_")]
            raise ValueError(f"{where} has no {qualname!r}" + did_you_mean(part, known))
        value = getattr(value, part)
    if not callable(value):
        raise ValueError(f"{where}:{qualname} is a {type(value).__name__}, not a function")
    return _parameters_of(value)


def parameter_kinds(make_step) -> dict[str, type]:
    """The type of each of make_step's knobs that its signature tells (``batch: int``,
    ``policy="full"``): how the CLI reads a knob's text. A ValueError where it is not found."""
    parameters = parameters_of_step(make_step, make_step_reference(make_step)) or []
    return {p.name: kind for p in parameters if (kind := _kind(p)) is not None}


def make_step_reference(make_step) -> tuple:
    """How a worker finds ``make_step``: ("module", name, qualname), ("file", path, qualname) or
    ("pickle", bytes) for what neither reaches (closures, lambdas, ``__main__``)."""
    if isinstance(make_step, str):
        named = parse_entry(make_step)
        if named.is_file:
            return ("file", str(Path(named.where).resolve()), named.name)
        return ("module", named.where, named.name)
    if not inspect.isroutine(make_step) and not inspect.isclass(make_step):
        # a callable object of an importable class (explorer.maxtext.MaxTextStep, a partial of
        # a module's function) goes by plain pickle; one that names __main__ would not unpickle
        # in a worker (cloudpickle below takes it by value)
        with contextlib.suppress(pickle.PicklingError, TypeError, AttributeError):
            data = pickle.dumps(make_step)
            if b"__main__" not in data:
                return ("pickle", data)
    qualname = getattr(make_step, "__qualname__", "")
    module = sys.modules.get(getattr(make_step, "__module__", None) or "")
    if "<" not in qualname and module is not None and module.__name__ != "__main__":
        file = getattr(module, "__file__", None)
        if _importable(module.__name__):
            return ("module", module.__name__, qualname)
        if file:
            path = str(Path(file).resolve())
            _refuse_unguarded_explore(_syntax_tree(path), path)
            return ("file", path, qualname)
    try:
        import cloudpickle
    except ImportError:
        script = getattr(module, "__file__", None) if module is not None else None
        if "<" not in qualname and script and Path(script).is_file():
            # a script's function without cloudpickle: the worker loads the script by path (its
            # top level runs there, under another __name__), so an unguarded explore() is refused
            path = str(Path(script).resolve())
            _refuse_unguarded_explore(_syntax_tree(path), path, "install cloudpickle")
            return ("file", path, qualname)
        raise ValueError(
            f"{qualname or make_step!r} cannot be imported by a worker (a closure, a lambda or "
            "in __main__) and cloudpickle is not installed: define it at module level in a file"
        ) from None
    return ("pickle", cloudpickle.dumps(make_step))


def _syntax_tree(path: str) -> ast.Module:
    try:
        return ast.parse(Path(path).read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise ValueError(f"cannot read {path}: {one_line(exc)}") from None


def _importable(name: str) -> bool:
    """Whether another process can import ``name``: its top-level package is found by the import
    system itself (not merely present in ``sys.modules``, as a module loaded from a file path is)."""
    top = name.partition(".")[0]
    if top in sys.builtin_module_names:
        return True
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        with contextlib.suppress(Exception):
            if find(top, None) is not None:
                return True
    return False


_files: dict[str, Any] = {}


def make_step_from(reference: tuple) -> Callable:
    kind = reference[0]
    if kind == "pickle":
        return pickle.loads(reference[1])
    if kind == "module":
        value: Any = importlib.import_module(reference[1])
    else:
        path = reference[1]
        module = _files.get(path)
        if module is None:
            name = "_hlo_roofline_explore_" + re.sub(r"\W", "_", path)
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            sys.path.insert(0, str(Path(path).parent))
            try:
                spec.loader.exec_module(module)
            finally:
                sys.path.remove(str(Path(path).parent))
            _files[path] = module
        value = module
    for part in reference[2].split("."):
        value = getattr(value, part)
    return value
