"""Attribution: which model part, pass, function and line of the user's code an op belongs to.

One owner for what an op's metadata says about where it came from: its stack frames and their
text (``file:line (function)``), which frame is the user's own line rather than a library's
(:data:`LIBRARIES`, installed packages, the standard library), the line that called a generic
layer (:data:`LAYER_MODULES`), and, from ``op_name``, the model scope, the autodiff pass and the
function. It reads decoded :class:`Metadata` (``attrs.metadata`` decodes an instruction's).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Sequence

from hlo_roofline.hlo.ir import Metadata, Module, StackFrame


def metadata_source(meta: Metadata, module: Module) -> str:
    """``file:line`` that decoded metadata points at ('' if unknown)."""
    if meta.source_file:
        return f"{meta.source_file}:{meta.source_line}"
    frame = module.frames.get(meta.stack_frame_id)
    return f"{frame.file}:{frame.line}" if frame else ""


def frames_of(meta: Metadata, module: Module) -> list[StackFrame]:
    """The stack frames that decoded metadata points at, innermost first.

    Without a StackFrames table (older HLO) the op's ``source_file:source_line`` is the one frame.
    """
    out: list[StackFrame] = []
    frame_id = meta.stack_frame_id
    seen: set[int] = set()
    while frame_id and frame_id in module.frames and frame_id not in seen:
        seen.add(frame_id)
        frame = module.frames[frame_id]
        out.append(frame)
        frame_id = frame.parent
    if not out and meta.source_file:
        out.append(StackFrame(meta.source_file, "", meta.source_line, 0))
    return out


def frame_text(frame: StackFrame) -> str:
    """``file:line (function)``, or ``file:line`` when the function is not known."""
    where = f"{frame.file}:{frame.line}"
    return f"{where} ({frame.function})" if frame.function else where


_FRAME_TEXT = re.compile(r"^(?P<file>.*):(?P<line>\d+)(?: \((?P<function>.*)\))?$")


def parse_frame(text: str) -> StackFrame | None:
    """A ``file:line (function)`` string (one line of :func:`stack`) back as a frame."""
    found = _FRAME_TEXT.match(text)
    if found is None:
        return None
    return StackFrame(found["file"], found["function"] or "", int(found["line"]), 0)


# Packages whose frames are never "the user's line": JAX and the frameworks built on it, and this
# tool. Any installed package (site-packages, dist-packages) and the standard library are library
# code too, so these matter where one is run from a source checkout (``pip install -e``).
LIBRARIES = ("jax", "jaxlib", "flax", "optax", "equinox", "haiku", "chex", "orbax", "hlo_roofline")
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
_STDLIB = re.compile(r"[/\\]lib[/\\]python3[\d.]*t?[/\\]|^<frozen ")
# The project's examples are models, like the user's own (they are what `make demo` analyzes).
_EXAMPLES = re.compile(r"[/\\]hlo_roofline[/\\]examples[/\\][^/\\]+\.py$")


def _is_path(entry: str) -> bool:
    return "/" in entry or "\\" in entry


@functools.lru_cache(maxsize=256)
def _library_dirs(entry: str) -> tuple[str, ...]:
    """Where a library lives: a file or directory as given (it has a slash), or where the package
    of that name is installed here (found without importing it; nothing if it is not installed)."""
    if _is_path(entry):
        return (entry if entry.endswith(".py") else entry.rstrip("/\\") + os.sep,)
    try:
        spec = importlib.util.find_spec(entry)
    except (ImportError, ValueError):
        return ()
    if spec is None or not spec.submodule_search_locations:
        return ()
    return tuple(os.path.join(d, "") for d in spec.submodule_search_locations)


def is_library(
    path: str, libraries: Sequence[str] = LIBRARIES, user_packages: Sequence[str] = ()
) -> bool:
    """Whether a frame's file is library code rather than the user's: a file or directory given
    in ``libraries``, an installed package, the standard library, or a package named in
    ``libraries`` (where it is installed here) — unless it is inside one of ``user_packages``
    (package names or directories): the user's own code even when installed (MaxText in
    site-packages, driven by a script)."""
    # a module's ops share a few dozen files over thousands of frames: each answered once
    return _is_library(path, tuple(libraries), tuple(user_packages))


@functools.lru_cache(maxsize=8192)
def _is_library(path: str, libraries: tuple[str, ...], user_packages: tuple[str, ...]) -> bool:
    def inside(entries) -> bool:
        return any(path.startswith(d) for entry in entries for d in _library_dirs(entry))

    if user_packages and inside(user_packages):
        return False
    if inside(e for e in libraries if _is_path(e)):
        return True
    if _EXAMPLES.search(path):
        return False
    if _INSTALLED.search(path) or _STDLIB.search(path):
        return True
    return inside(e for e in libraries if not _is_path(e))


def user_frame(
    frames: Sequence[StackFrame],
    libraries: Sequence[str] = LIBRARIES,
    user_packages: Sequence[str] = (),
) -> StackFrame | None:
    """The innermost frame that is the user's own code (None when every frame is a library's)."""
    return next(
        (f for f in frames if f.file and not is_library(f.file, libraries, user_packages)), None
    )


def user_source_of(call_stack: str, libraries: Sequence[str] = LIBRARIES) -> str:
    """The ``user_source`` of a ``call_stack`` text (one ``file:line (function)`` a line), found
    again treating ``libraries`` as library code (see :func:`is_library`)."""
    frames = [f for f in map(parse_frame, call_stack.split("\n")) if f] if call_stack else []
    user = user_frame(frames, libraries)
    return frame_text(user) if user else ""


# Modules of generic layers (a dense / linear projection) that every projection of a model calls:
# the line inside them says nothing about which projection an op belongs to, the line that calls
# them does (``q = self.query(x)``). Matched against a frame's file, installed or not.
LAYER_MODULES = re.compile(
    r"[/\\](?:flax[/\\]linen[/\\]linear|flax[/\\]nnx[/\\]nn[/\\]linear"
    r"|equinox[/\\]nn[/\\]_linear|haiku[/\\]_src[/\\]basic"
    r"|(?i:maxtext)[/\\]layers[/\\]linears|praxis[/\\]layers[/\\]linears)\.py$"
)
_TRANSFORM = re.compile(r"^\w+\(.*\)$")  # jit(f), jvp(Model), transpose(jvp(Model))


def layer_caller(
    frames: Sequence[StackFrame],
    op_name: str,
    libraries: Sequence[str] = LIBRARIES,
    user_packages: Sequence[str] = (),
) -> str:
    """Where the user's code called the generic layer an op comes from: the innermost user frame
    outside the layer, and, for an op made inside a layer, the layer's name scope in brackets
    (``attention.py:212 (__call__) [query]``: Flax and MaxText name each projection). The layer
    is the frames in :data:`LAYER_MODULES` of its class (``DenseGeneral.__call__``) and of the
    module's functions; another class of such a module that is the user's code (MaxText's
    ``MlpBlock`` calling its ``wi`` and ``wo`` in ``linears.py``) is the caller. For an op made
    outside any layer it is its ``user_source``; '' when no frame is the user's."""
    in_layer, layer = False, ""  # layer: the class of the innermost layer method on the stack
    for frame in frames:
        if not frame.file:
            continue
        user = not is_library(frame.file, libraries, user_packages)
        if LAYER_MODULES.search(frame.file):
            owner = _method_class(frame.function)
            if not (user and layer and owner and owner != layer):
                in_layer, layer = True, layer or owner
                continue
        elif not user:
            continue
        scope = _layer_scope(op_name) if in_layer else ""
        return f"{frame_text(frame)} [{scope}]" if scope else frame_text(frame)
    return ""


def _method_class(function: str) -> str:
    """``DenseGeneral.__call__`` → ``DenseGeneral``; '' for a function or a closure."""
    owner, _, _ = function.rpartition(".")
    return "" if not owner or "<locals>" in owner else owner


def _layer_scope(op_name: str) -> str:
    """The innermost name scope of an op (``.../attn/query/dot_general`` → ``query``); '' when the
    op has none besides JAX's transforms."""
    parts = op_name.split("/")[:-1]  # the last part is the primitive
    scope = parts[-1] if parts else ""
    return "" if not scope or _TRANSFORM.match(scope) else scope


def metadata_columns(
    meta: Metadata,
    module: Module,
    stacks: dict[tuple[str, int, int], tuple[str, str, str, str]],
    callers: dict[tuple[str, int, int, str], str],
    user_packages: tuple[str, ...] = (),
) -> tuple[str, str, str, str, str]:
    """(op_name, source, user_source, call_stack, layer_caller) of decoded metadata.

    ``source`` is the innermost frame (often inside a framework: ``flax/nnx/nn/linear.py``);
    ``user_source`` the innermost frame of the user's own code; ``call_stack`` every frame, innermost
    first, one ``file:line (function)`` a line; ``layer_caller`` the line that called a generic
    layer (:func:`layer_caller`). Most depend only on the op's source line and stack frame,
    which many ops with different names share: ``stacks`` keeps them by those; ``callers`` keeps
    the ``layer_caller`` of ops inside a layer by those and the op's name.
    """
    where = (meta.source_file, meta.source_line, meta.stack_frame_id)
    found = stacks.get(where)
    if found is None:
        frames = frames_of(meta, module)
        user = user_frame(frames, user_packages=user_packages)
        in_layer = any(f.file and LAYER_MODULES.search(f.file) for f in frames)
        found = stacks[where] = (
            metadata_source(meta, module),
            frame_text(user) if user else "",
            "\n".join(map(frame_text, frames)),
            "" if in_layer else frame_text(user) if user else "",
        )
    caller = found[3]
    if not caller and found[1]:  # inside a layer: its caller and its scope, by op name too
        key = (*where, meta.op_name)
        caller = callers.get(key)
        if caller is None:
            frames = frames_of(meta, module)
            caller = callers[key] = layer_caller(frames, meta.op_name, user_packages=user_packages)
    return (meta.op_name, found[0], found[1], found[2], caller)


# -- model parts from op_name and the user's line -------------------------------------------------

# Path components of an op_name that are program structure, not the model's names: control flow,
# calls and transformations (``while/body``, ``closed_call``, ``remat``, ``cond/branch_1_fun``).
_STRUCTURE = frozenset({
    "while", "body", "cond", "closed_call", "core_call", "call", "remat", "checkpoint",
    "rematted_computation", "scan", "shard_map", "xla_call", "xla_pmap", "pmap", "named_call",
    "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "run_state", "vmap", "eval_jaxpr",
})  # fmt: skip
_BRANCH = re.compile(r"branch_\d+_fun")
_WRAPPED = re.compile(r"(?P<wrapper>[\w.-]+)\((?P<inner>.*)\)$", re.DOTALL)
_FUNCTIONS = ("jit", "pjit")  # jit(f): a function boundary (user_function says which), not a scope


def _components(op_name: str) -> list[str]:
    """op_name split at the slashes outside parentheses (``jvp(a/b)`` stays whole)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(op_name):
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif char == "/" and depth == 0:
            parts.append(op_name[start:i])
            start = i + 1
    parts.append(op_name[start:])
    return parts


def _scope_part(part: str) -> str:
    while (found := _WRAPPED.match(part)) is not None:
        if found["wrapper"] in _FUNCTIONS:
            return ""
        part = found["inner"]
    if "/" in part:  # a scope inside a transformation: jvp(model/block)
        return "/".join(filter(None, map(_scope_part, _components(part))))
    if part in _STRUCTURE or _BRANCH.fullmatch(part) or "->" in part:  # "->": an einsum's spec
        return ""
    return part


# ``lax.scan`` reads each iteration's slice of its inputs and writes each iteration's outputs into
# the stacked buffers with these helpers, named directly in the loop's body: no model scope covers
# them, yet in a scanned stack of layers they are a large share of the step (each layer's saved
# activations written in the forward pass and read back in the backward).
_SCAN_INDEXING = frozenset({"jit(dynamic_index_in_dim)", "jit(dynamic_update_index_in_dim)"})
SCAN_STACKING = "(scan stacking)"


def scope_of(op_name: str) -> str:
    """The named scopes an op ran under: ``jax.named_scope`` names and Flax Linen module paths,
    without transformations, control flow and the primitive itself. A scan's own slicing and
    stacking of its per-iteration inputs and outputs is the scope :data:`SCAN_STACKING`, under the
    scopes the scan ran in.

    ``jit(train_step)/transpose(jvp())/while/body/closed_call/attention/scores/exp`` →
    ``attention/scores``; ``jit(step)/jvp(LM)/Block_0/Dense_1/dot_general`` →
    ``LM/Block_0/Dense_1``; ``jit(step)/jvp()/while/body/jit(dynamic_update_index_in_dim)/
    dynamic_update_slice`` → ``(scan stacking)``; a parameter's op_name (``params['w']``) → ``""``.
    """
    parts = _components(op_name)
    if len(parts) < 2:
        return ""
    stacking = next(
        (i for i in range(1, len(parts)) if parts[i] in _SCAN_INDEXING and parts[i - 1] == "body"),
        None,
    )
    if stacking is not None:
        return "/".join(filter(None, [*map(_scope_part, parts[: stacking - 1]), SCAN_STACKING]))
    return "/".join(filter(None, map(_scope_part, parts[:-1])))


def pass_of(op_name: str) -> str:
    """``backward`` for an op of a gradient (under ``transpose``), ``forward`` for one of the
    differentiated function (under ``jvp``), ``""`` for the rest (the optimizer, or a step that
    takes no gradient)."""
    if "transpose(" in op_name:
        return "backward"
    return "forward" if "jvp(" in op_name else ""


_LINE = re.compile(r":\d+(?= \(|$)")


def function_of(user_source: str) -> str:
    """``path (function)`` of a ``path:line (function)``: every line of one function together."""
    return _LINE.sub("", user_source, count=1)
