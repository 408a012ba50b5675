"""Where a step's arguments go: abstract arrays placed on a compile-only target's devices (or the
caller's mesh), the per-device inputs the compiled program takes, the mesh the collective model
places devices by, and the warning for a multi-device target given a program that shards nothing.
Every function takes the parsed :class:`~hlo_roofline.targets.Target` (a string is parsed once, by
:func:`place_args` alone, for callers outside the analysis)."""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import warnings

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from hlo_roofline import targets
from hlo_roofline.hlo.ir import Module, Shape
from hlo_roofline.judge import memory
from hlo_roofline.report import Report


def context_mesh() -> jax.sharding.Mesh | None:
    """The concrete mesh the caller's JAX context holds (``jax.set_mesh``, ``use_mesh``, a
    ``with mesh:`` block), or None: unsharded arguments go on it, as ``jit`` itself would."""
    mesh = None
    get_mesh = getattr(jax.sharding, "get_mesh", None)
    if get_mesh is not None:
        with contextlib.suppress(Exception):
            mesh = get_mesh()
    if not isinstance(mesh, jax.sharding.Mesh) or mesh.empty:
        try:  # the older ``with mesh:`` resource environment
            from jax._src.mesh import thread_resources

            mesh = thread_resources.env.physical_mesh
        except (ImportError, AttributeError):
            return None
    return mesh if isinstance(mesh, jax.sharding.Mesh) and not mesh.empty else None


def place_args(args, target: str | targets.Target | None, by_jit: bool = False):
    """Abstract array arguments, placed for the target unless already sharded on it: replicated on
    the caller's context mesh when it is the target's (what ``jit`` does in that context), else on
    the target's first device; ``by_jit`` (the step has ``in_shardings``) leaves them to jit."""
    if target is None:
        return args
    devices = targets.parse_target(target).devices
    own = {d.id for d in devices}

    def on_target(mesh) -> bool:
        return isinstance(mesh, jax.sharding.Mesh) and (
            {d.id for d in mesh.devices.flat} <= own
            and mesh.devices.flat[0].platform == devices[0].platform
        )

    mesh = context_mesh()
    if mesh is None or not on_target(mesh):
        mesh = jax.sharding.Mesh([devices[0]], ("_",))
    default = NamedSharding(mesh, PartitionSpec())

    def place(x):
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            return x
        sharding = getattr(x, "sharding", None)
        placed = isinstance(sharding, NamedSharding) and on_target(sharding.mesh)
        if not placed and by_jit:
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding if placed else default)

    return map_arrays(place, args)


def map_arrays(place, args):
    """``place`` applied to every array leaf of ``args``, keeping each framework's own view of its
    objects: Flax NNX modules and optimizers go through ``nnx.split`` and ``nnx.merge`` together,
    so a variable two of them share (tied weights, an optimizer's model) stays one variable. The
    arguments themselves are left as they are: their copies carry the new leaves."""
    nnx = loaded("flax.nnx")
    is_node = getattr(getattr(nnx, "graph", None), "is_graph_node", None)
    if is_node is None:
        return jax.tree_util.tree_map(place, args)
    leaves, tree = jax.tree_util.tree_flatten(args, is_leaf=is_node)
    nodes = [i for i, leaf in enumerate(leaves) if is_node(leaf)]
    if nodes:
        graphdef, state = nnx.split(tuple(leaves[i] for i in nodes))
        merged = nnx.merge(graphdef, jax.tree_util.tree_map(place, state))
        for i, node in zip(nodes, merged, strict=True):
            leaves[i] = node
    leaves = [leaf if is_node(leaf) else jax.tree_util.tree_map(place, leaf) for leaf in leaves]
    return jax.tree_util.tree_unflatten(tree, leaves)


def loaded(name: str):
    """The module ``name`` if the user's program has imported it, else None: a framework the
    step does not use is never imported here."""
    return sys.modules.get(name)


def names_a_topology(target: targets.Target | None) -> bool:
    """``"v5e:2x2"`` chooses its devices; ``"v5e"`` (a chip's default slice) and "local" (None)
    do not: only a chosen multi-device target is warned about a program that shards nothing.
    Asked of the resolved target, so a string and the Target parsed from it answer alike."""
    return target is not None and target.named_topology


class UnshardedProgramWarning(UserWarning):
    """A multi-device target got a program that shards nothing: each device runs all of it."""


def warn_if_unsharded(
    report: Report, module: Module, target: targets.Target | None, inputs, lowered
) -> None:
    """A step compiled for several devices whose program is one device's (no partitions), or
    partitioned with nothing split: every input and output whole on each device and no
    collective. A mesh or sharding that was meant to hold was not there (a ``jax.set_mesh``
    outside the trace, say), and the figures are the whole step's on each device. The module's
    header facts are the parser's (its partitions, its result shape), not read again here."""
    if target is None or target.device_count <= 1:
        return
    partitions = module.num_partitions
    if partitions > 1:
        if any(b.shape != b.global_shape for b in inputs):
            return
        if "collective" in report.ops and (report.ops["collective"] != "").any():
            return
        whole = sum(math.prod(o.shape) for o in jax.tree_util.tree_leaves(lowered.out_info))
        if _elements(module.entry.root.shape) < whole:
            return
        what = f"partitioned {partitions} ways with nothing split (no collective)"
    else:
        what = "compiled for one device"
    warnings.warn(
        f"{target} has {target.device_count} devices but the program is {what}: "
        "nothing is sharded, so the figures are the whole step's on one device. Shard the "
        "arguments (NamedSharding), or trace in the mesh context the step expects "
        "(jax.set_mesh; a CLI step yields from inside it)",
        UnshardedProgramWarning,
        stacklevel=4,  # the caller of analyze() (or of a roofline-wrapped step)
    )


def _elements(shape: Shape) -> int:
    """Elements of every array of a (tuple) shape: ``(f32[2,3], s32[])`` → 7."""
    return sum(math.prod(leaf.dims) for leaf in shape.leaves())


def mesh_of(*placed) -> jax.sharding.Mesh | None:
    """The mesh the step's arguments are sharded on (the largest, if several): it places the
    devices of the collective model exactly (TPU torus coordinates, GPU hosts)."""
    meshes = [
        x.sharding.mesh
        for x in jax.tree_util.tree_leaves(placed)
        if isinstance(getattr(x, "sharding", None), NamedSharding)
        and x.sharding.mesh.devices.size > 1  # not the one-device default place_args gives
    ]
    return max(meshes, key=lambda m: m.devices.size, default=None)


def step_inputs(step, lowered, placed) -> tuple[list[memory.Buffer], int]:
    """The step's array inputs per device, named by their place in the arguments, and the bytes
    of those an output could reuse if they were donated (same shape and type, not donated).

    The program's own inputs (``args_info``) are the truth; each is named after the caller's
    argument it is, matched in order (:func:`_matched`): static arguments are skipped, a Python
    number is an input too. A framework's wrapper that passes jit its own split of them, in
    another order (Equinox's ``filter_jit`` with arrays in the function), has each named by its
    place in what the wrapper passed."""
    names = _parameter_names(step)
    given = [
        (_argument_name(path, names), x)
        for path, x in jax.tree_util.tree_flatten_with_path(placed)[0]
        if (hasattr(x, "shape") and hasattr(x, "dtype")) or _is_number(x)
    ]
    compiled = [
        (path, info)
        for path, info in jax.tree_util.tree_flatten_with_path(lowered.args_info)[0]
        if hasattr(info, "donated")
    ]
    donated = [info.donated for _, info in compiled]
    leaves = _matched(given, [info for _, info in compiled])
    if leaves is None and compiled:
        wrapper = getattr(step, "__name__", "step")
        leaves = [
            (f"{wrapper}{jax.tree_util.keystr(path)}", jax.ShapeDtypeStruct(info.shape, info.dtype))
            for path, info in compiled
        ]
    elif leaves is None:  # this jax does not say: the caller's arrays, none known donated
        leaves = [(name, x) for name, x in given if not _is_number(x)]
        donated = [False] * len(leaves)
    outputs = _signatures(jax.tree_util.tree_leaves(lowered.out_info))
    signatures = _signatures([x for _, x in leaves])
    for signature, was_donated in zip(signatures, donated, strict=True):
        if was_donated and signature in outputs:  # that output already reuses this input
            outputs.remove(signature)
    compiled_with = _in_shardings(lowered, len(leaves))
    buffers, donatable = [], 0
    for i, ((name, x), signature, was_donated) in enumerate(
        zip(leaves, signatures, donated, strict=True)
    ):
        sharding = getattr(x, "sharding", None) or compiled_with[i]
        shape = tuple(sharding.shard_shape(x.shape)) if sharding is not None else tuple(x.shape)
        size = math.prod(shape) * element_bytes(x.dtype)
        dtype = "float0" if x.dtype == jax.dtypes.float0 else str(x.dtype)
        buffers.append(
            memory.Buffer(
                name, "parameter", size, f"{dtype}{list(shape)}", f"{dtype}{list(x.shape)}"
            )
        )
        if not was_donated and signature in outputs:
            outputs.remove(signature)
            donatable += size
    return buffers, donatable


def _signatures(arrays) -> list[tuple[tuple[int, ...], str]]:
    return [(tuple(x.shape), str(x.dtype)) for x in arrays]


def _is_number(x) -> bool:
    """A Python scalar ``jit`` traces into a 0-d array (``bool[]`` for ``True``, as ``f32[]`` for
    ``0.5``), where it is not static."""
    return isinstance(x, bool | int | float | complex) and not isinstance(x, jax.Array)


def _matched(given: list, compiled: list) -> list | None:
    """Each of the program's inputs paired, in order, with the caller's argument of its shape and
    type (a Python number as the array jit makes of it); the arguments left over are static.
    None where they do not line up."""
    matched, at = [], 0
    for info in compiled:
        wanted = (tuple(info.shape), str(info.dtype))
        while at < len(given):
            name, x = given[at]
            at += 1
            if _is_number(x):
                x = jax.ShapeDtypeStruct((), jnp.result_type(x))
            if (tuple(x.shape), str(x.dtype)) == wanted:
                matched.append((name, x))
                break
        else:
            return None
    return matched


def _in_shardings(lowered, count: int) -> list:
    """The sharding jit lowered each array input with (its ``in_shardings`` where the argument
    had none), or Nones where this jax does not say."""
    try:
        found = list(lowered._lowering.compile_args["in_shardings"])
    except (AttributeError, KeyError, TypeError):
        return [None] * count
    if len(found) != count:
        return [None] * count
    return [s if hasattr(s, "shard_shape") else None for s in found]


def element_bytes(dtype) -> int:
    """Bytes of one element as the device stores it: a typed PRNG key's (``key<fry>``) is its key
    data's (two uint32), any other extended dtype its physical element's; ``float0`` (the gradient
    of an integer input) holds nothing but is passed as a bool (the compiler counts 1 byte)."""
    dtype = getattr(dtype, "dtype", dtype)
    if dtype == jax.dtypes.float0:
        return 1
    if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype))
            return math.prod(data.shape) * data.dtype.itemsize
        physical = dtype._rules.physical_element_aval(dtype)  # no public form
        return math.prod(physical.shape) * physical.dtype.itemsize
    return jnp.dtype(dtype).itemsize


def _parameter_names(step) -> list[str]:
    try:
        return list(inspect.signature(step).parameters)
    except (TypeError, ValueError):
        return []


def _argument_name(path, names: list[str]) -> str:
    """``m['w']`` for the leaf ``['w']`` of the step's argument ``m`` (``args[1]['w']`` if the
    step's signature does not say)."""
    (group, *rest) = path
    if group.idx == 1:  # keyword arguments: their names are the first key
        return jax.tree_util.keystr(tuple(rest)).removeprefix("['").replace("']", "", 1)
    index, *inner = rest
    name = names[index.idx] if index.idx < len(names) else f"args[{index.idx}]"
    return name + jax.tree_util.keystr(tuple(inner))
