"""MaxText's own train step as an explorer entry: ``explore --maxtext CONFIG.yml [key=value ...]``.

Each candidate is MaxText's real train step, built as ``maxtext.trainers.pre_train.train_compile``
builds it (pyconfig from the config and its command-line overrides, the ``compile_topology`` mesh,
the abstract train state, its shardings and donation), for a TPU topology, compile-only. The
candidate's mesh becomes MaxText's ``ici_<axis>_parallelism`` (every other ``ici_*`` is 1: the
explored axes own the layout), its knobs become config overrides (``per_device_batch_size``,
``remat_policy``, any key of the config), and MaxText builds its own mesh over the same topology.
The work a step does is MaxText's: ``global_batch_size_to_train_on × max_target_length`` tokens
and ``calculate_tflops_training_per_device`` × 10¹² × devices model FLOPs, so candidates that
change the batch rank by throughput.

MaxText is never a dependency of hlo_roofline: it is imported from the user's environment when
an exploration starts (:class:`MaxTextMissing` where it is not importable). Everything a user can
get wrong (the config file, axes without an ``ici_*_parallelism``, knob and override names, a
config MaxText refuses for a knob's value) is found before anything compiles. The compiler flags
of the config's script go in as the explorer's own (``--libtpu-flag``, ``--flags FILE.toml``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import math
import os
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hlo_roofline.explorer.layouts import did_you_mean
from hlo_roofline.explorer.status import Refused
from hlo_roofline.text import one_line

if TYPE_CHECKING:
    from hlo_roofline.explorer.results import Exploration
    from hlo_roofline.targets import Target

# What every candidate's config gets: compile-only needs no data and writes nothing (as
# fixtures/maxtext/steps.py and fixtures/published/generate.py build MaxText's steps).
COMPILE_ONLY = {
    "dataset_type": "synthetic",
    "enable_checkpointing": "false",
    "base_output_directory": os.path.join(tempfile.gettempdir(), "hlo_roofline_maxtext"),
}

# train_compile.main's own additions: its PRNG (set in each worker) and the libtpu flag that
# lets SPMD partition that generator.
RNG_LIBTPU_FLAG = "--xla_tpu_spmd_rng_bit_generator_unsafe=true"

# What MaxText's pyconfig raises for a config it refuses (its asserts, its checks of values and
# of their types): a refusal of that layout and those knobs, not a crash.
CONFIG_REFUSALS = (ValueError, AssertionError, TypeError)


def mesh_key(axis: str) -> str:
    """The MaxText config key that sets a mesh axis's size within a slice."""
    return f"ici_{axis}_parallelism"


# Keys the exploration owns: the topology is the target's, the mesh the candidate's.
OWNED = ("compile_topology", "compile_topology_num_slices", "run_name")


class MaxTextMissing(ImportError):
    """MaxText is not importable from this Python."""


def maxtext_spec() -> importlib.machinery.ModuleSpec | None:
    """Where MaxText's package is, without importing it; None where it is not installed. A folder
    named ``maxtext`` on the path without an ``__init__.py`` (a checkout's, a fixtures folder)
    is a namespace package, not MaxText: no origin."""
    try:
        spec = importlib.util.find_spec("maxtext")
    except (ImportError, ValueError):
        return None
    return spec if spec is not None and spec.origin is not None else None


def require_maxtext() -> None:
    """A :class:`MaxTextMissing` saying how to fix it, where ``import maxtext`` would fail."""
    if maxtext_spec() is None:
        raise MaxTextMissing(
            f"MaxText is not importable from this Python ({sys.executable}): --maxtext builds "
            "MaxText's own train step, so run hlo-roofline from MaxText's environment (pip "
            "install hlo-roofline there) or install MaxText here (pip install 'maxtext[tpu]')"
        )


def _configs_dir() -> Path | None:
    """MaxText's packaged configs folder (without importing MaxText)."""
    spec = maxtext_spec()
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "configs"


def resolve_config(config: str | os.PathLike) -> Path:
    """The config file: a path, or a name inside MaxText's configs folder (``base.yml``,
    ``models/llama2-7b.yml``); a ValueError where neither exists."""
    path = Path(config)
    if path.is_file():
        return path.resolve()
    folder = _configs_dir()
    if folder is not None and (folder / path).is_file():
        return (folder / path).resolve()
    where = f" nor in MaxText's configs folder {folder}" if folder is not None else ""
    raise ValueError(f"no MaxText config {config}: not a file{where}")


def config_keys(config: Path) -> dict[str, Any]:
    """The config's keys and values, its ``base_config`` chain merged as MaxText's pyconfig
    merges it (a relative base beside the config, else in MaxText's configs folder)."""
    import yaml

    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the MaxText config {config}: {one_line(exc)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"the MaxText config {config} is not a mapping of keys")
    base = data.get("base_config")
    if not base:
        return data
    base_path = Path(base)
    if not base_path.is_absolute():
        beside = config.parent / base_path
        folder = _configs_dir()
        base_path = beside if beside.is_file() or folder is None else folder / base_path
    if not base_path.is_file():
        raise ValueError(f"{config}: its base_config {base} is not found")
    return {**config_keys(base_path), **data}


def mesh_axes(keys: Iterable[str]) -> list[str]:
    """The mesh axes a config knows: those with an ``ici_<axis>_parallelism`` key."""
    return [k[4:-12] for k in keys if k.startswith("ici_") and k.endswith("_parallelism")]


def value_text(value) -> str:
    """A knob's value as MaxText's command line takes it (``true``/``false`` for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def check(
    keys: Mapping[str, Any],
    axes: Sequence[str],
    knobs: Mapping[str, Iterable],
    overrides: Mapping[str, str],
) -> None:
    """A ValueError, before anything compiles, for an axis the config has no
    ``ici_<axis>_parallelism`` for, a knob or override that is no key of the config, a key the
    exploration owns (the topology, the mesh), or a key given both as a knob and an override."""
    known_axes = mesh_axes(keys)
    for axis in axes:
        if mesh_key(axis) not in keys:
            raise ValueError(
                f"MaxText has no mesh axis {axis!r} (no {mesh_key(axis)} in the config); its "
                f"axes: {', '.join(known_axes)}" + did_you_mean(axis, known_axes)
            )
    for what, names in (("knob", knobs), ("override", overrides)):
        for name in names:
            if name in OWNED or name in {mesh_key(a) for a in known_axes}:
                hint = (
                    "--axes and --fixed/--maximum choose the layout"
                    if name.startswith("ici_")
                    else "the target sets it"
                )
                raise ValueError(f"the {what} {name} is set by the exploration: {hint}")
            if name not in keys:
                raise ValueError(
                    f"the {what} {name!r} is no key of the MaxText config"
                    + did_you_mean(name, keys)
                )
    both = set(knobs) & set(overrides)
    if both:
        raise ValueError(f"{', '.join(sorted(both))} given both as a knob and an override")


def candidate_overrides(
    sizes: Mapping[str, int],
    knobs: Mapping[str, Any],
    axes_known: Iterable[str],
) -> dict[str, str]:
    """One candidate's overrides: every ``ici_*_parallelism`` the config knows is 1 but the
    candidate's axes (their sizes), then the knobs as text."""
    out = {mesh_key(axis): "1" for axis in axes_known}
    out.update({mesh_key(axis): str(int(size)) for axis, size in sizes.items()})
    out.update({name: value_text(value) for name, value in knobs.items()})
    return out


def run_name(sizes: Mapping[str, int], knobs: Mapping[str, Any]) -> str:
    parts = [f"{a}{s}" for a, s in sizes.items()] + [f"{k}-{v}" for k, v in knobs.items()]
    return "explore_" + "_".join(parts).replace("/", "-")


def compile_topology(target: Target, specs: Mapping[str, Any] | None = None) -> str:
    """MaxText's name of the target's topology (``v5p:4x4x4`` → ``v5p-128``), from MaxText's own
    table (``accelerator_to_spec_map``): same chip, same shape. A ValueError where MaxText has
    none."""
    if target.platform != "tpu":
        raise ValueError(
            f"--maxtext explores TPU targets (MaxText's compile_topology); {target.spec} is not one"
        )
    if specs is None:
        from maxtext.utils import accelerator_to_spec_map

        specs = accelerator_to_spec_map.UserFacingNameToSystemCharacteristics
    found = [
        name for name, s in specs.items()
        if getattr(s, "platform", "") == "tpu"
        and str(getattr(s, "topology_name", "")).partition(":")[2] == target.topology
        and _chip_of(name) == target.chip
    ]  # fmt: skip
    if not found:
        raise ValueError(
            f"MaxText's topologies have no {target.chip} slice of shape {target.topology} "
            "(maxtext.utils.accelerator_to_spec_map)"
        )
    name = sorted(found, key=len)[0]
    devices = getattr(specs[name], "devices_per_slice", None)
    if devices is not None and devices != target.device_count:
        raise ValueError(
            f"MaxText compiles {name} as {devices} devices; the target {target.spec} has "
            f"{target.device_count} (its chips' cores as devices): the layouts would not match"
        )
    return name


def _chip_of(maxtext_name: str) -> str:
    """The chip database's key of a MaxText topology name (``v5litepod-256`` → ``v5e``)."""
    family = maxtext_name.rsplit("-", 1)[0]
    return {"v5litepod": "v5e", "tpu7x": "7x"}.get(family, family)


@dataclass(frozen=True)
class MaxTextStep:
    """The explorer's ``make_step`` for one MaxText config: ``step(mesh, **knobs)`` builds MaxText's
    train step for the mesh's axis sizes and the knobs (in a worker). Plain data, pickled to
    the workers (the default pool and Dask alike)."""

    config: str  # the config file's path
    overrides: tuple[tuple[str, str], ...]  # the user's key=value, as MaxText's command line
    topology: str  # MaxText's compile_topology
    axes_known: tuple[str, ...]  # every mesh axis the config has an ici_* key for

    def argv(self, sizes: Mapping[str, int], knobs: Mapping[str, Any]) -> list[str]:
        """The command line ``train_compile`` would get for this candidate."""
        values = {
            **COMPILE_ONLY,
            **dict(self.overrides),
            **candidate_overrides(sizes, knobs, self.axes_known),
            "compile_topology": self.topology,
            "compile_topology_num_slices": "1",
            "run_name": run_name(sizes, knobs),
        }
        return ["train_compile", self.config, *(f"{k}={v}" for k, v in values.items())]

    def config_of(self, sizes: Mapping[str, int], knobs: Mapping[str, Any]):
        """MaxText's pyconfig of a candidate (what it prints kept off stdout)."""
        from maxtext.configs import pyconfig
        from maxtext.trainers.pre_train import train_compile

        xla_flags = os.environ.get("XLA_FLAGS")
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                config = pyconfig.initialize(self.argv(sizes, knobs))
                train_compile.validate_config(config)
        finally:  # pyconfig sets XLA_FLAGS to its HLO dump's flags where it is empty: the
            # workers would inherit them (every compile dumped, its flags not the exploration's)
            if xla_flags is None:
                os.environ.pop("XLA_FLAGS", None)
            else:
                os.environ["XLA_FLAGS"] = xla_flags
        return config

    def __call__(self, mesh, **knobs):
        """(step, args, {}) of MaxText's train step for ``mesh``'s shape: what
        ``train_compile.main`` compiles, lowered under its mesh and logical axis rules."""
        import jax
        from maxtext.trainers.pre_train import train, train_compile
        from maxtext.utils import maxtext_utils, sharding

        jax.config.update("jax_default_prng_impl", "unsafe_rbg")  # as train_compile.main
        sizes = {str(a): int(s) for a, s in mesh.shape.items()}
        try:
            config = self.config_of(sizes, knobs)
        except CONFIG_REFUSALS as exc:
            raise Refused(f"MaxText's config refuses it: {one_line(exc)}") from None
        maxtext_mesh = train_compile.get_topology_mesh(config)
        args, kwargs, state_shardings, _, model = train_compile.get_shaped_inputs(
            maxtext_mesh, config
        )
        params_shardings, state_shardings = sharding.maybe_update_params_sharding_with_opt(
            config, state_shardings
        )
        input_shardings = sharding.build_zero1_input_state_mesh_shardings(
            config, state_shardings, params_shardings
        )
        data_sharding = sharding.get_input_data_sharding(config, maxtext_mesh)
        func, in_shard, out_shard, static, donate = (
            maxtext_utils.get_functional_train_with_signature(
                train.train_step, data_sharding, input_shardings, model, config, params_shardings
            )
        )
        jitted = jax.jit(func, in_shardings=in_shard, out_shardings=out_shard,
                         static_argnums=static, donate_argnums=donate)  # fmt: skip
        return _InMaxTextContext(jitted, maxtext_mesh, config, dict(kwargs)), tuple(args), {}


class _InMaxTextContext:
    """A jitted step whose ``lower`` runs under MaxText's mesh and logical axis rules, as
    ``train_compile.jit_and_compile`` traces it."""

    __name__ = "train_step"

    def __init__(self, jitted, mesh, config, kwargs: dict) -> None:
        self.jitted, self.mesh, self.config, self.kwargs = jitted, mesh, config, kwargs

    def _context(self):
        import jax
        from flax.core.spmd import logical_axis_rules

        stack = contextlib.ExitStack()
        stack.enter_context(jax.set_mesh(self.mesh))
        if getattr(self.config, "enable_diloco", False):
            stack.enter_context(self.mesh)
        stack.enter_context(logical_axis_rules(self.config.logical_axis_rules))
        return stack

    def lower(self, *args, **kwargs):
        with self._context():
            return self.jitted.lower(*args, **{**self.kwargs, **kwargs})

    def __call__(self, *args, **kwargs):
        with self._context():
            return self.jitted(*args, **{**self.kwargs, **kwargs})


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``("per_device_batch_size=6", "attention=flash")`` → a dict; a ValueError for an item
    that is not KEY=VALUE or a key given twice."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"MaxText override {item!r} is not KEY=VALUE (e.g. attention=flash)")
        if key in out:
            raise ValueError(f"MaxText override {key} is given twice")
        out[key] = value
    return out


def explore_maxtext(
    config: str | os.PathLike,
    target: str | Target,
    overrides: Mapping[str, Any] | None = None,
    axes: Sequence[str] = ("fsdp", "tensor"),
    knobs: Mapping[str, Iterable] | None = None,
    constraints=None,
    libtpu_flags: Iterable[str] = (),
    name: str | None = None,
    **explore_kwargs,
) -> Exploration:
    """Explore MaxText's train step for ``config`` (a file, or a name in MaxText's configs
    folder) with ``overrides`` (its command line's ``key=value``) on a TPU ``target``: every
    layout over ``axes`` (MaxText's mesh axes: ``data``, ``fsdp``, ``tensor``, ...) crossed with
    ``knobs`` (config keys: ``{"remat_policy": ["minimal", "full"]}``), ranked by tokens per
    second per chip. ``libtpu_flags`` are the config script's ``LIBTPU_INIT_ARGS``; the rest of
    the keywords go to :func:`~hlo_roofline.explorer.explore` (``executor``, ``jobs``,
    ``timeout``, ``xla_flags``, ``cache``...).

    Raises :class:`MaxTextMissing` where MaxText is not importable, and a ValueError for any
    input MaxText or the explorer refuses, before anything compiles."""
    from hlo_roofline import targets
    from hlo_roofline.explorer.run import explore

    require_maxtext()
    for given in ("tokens_per_step", "model_flops"):
        if explore_kwargs.get(given) is not None:
            raise ValueError(f"{given} comes from the MaxText config: do not give it")
    spec = targets.parse_target(target)
    path = resolve_config(config)
    keys = config_keys(path)
    overrides = {k: value_text(v) for k, v in (overrides or {}).items()}
    knobs = {k: list(v) if not isinstance(v, str) else [v] for k, v in (knobs or {}).items()}
    axes = tuple(axes)
    check(keys, axes, knobs, overrides)
    step = MaxTextStep(
        str(path), tuple(overrides.items()), compile_topology(spec), tuple(mesh_axes(keys))
    )
    # MaxText's mesh builder splits torus axes where the config says so: the candidates follow
    split = value_text(overrides.get("allow_split_physical_axes", keys.get(
        "allow_split_physical_axes", False))).lower() == "true"  # fmt: skip
    if "allow_split_physical_axes" in knobs:
        raise ValueError("allow_split_physical_axes chooses the layouts: give it as an override")
    work = _work(step, spec, axes, knobs, constraints, split)
    libtpu = [*libtpu_flags]
    if RNG_LIBTPU_FLAG not in libtpu:
        libtpu.append(RNG_LIBTPU_FLAG)

    def tokens(**values) -> float:
        return work[_key(values)][0]

    def model_flops(**values) -> float:
        return work[_key(values)][1]

    return explore(
        step, spec, axes=axes, knobs=knobs, constraints=constraints, libtpu_flags=libtpu,
        tokens_per_step=tokens, model_flops=model_flops, allow_split_physical_axes=split,
        name=name if name is not None else f"maxtext-{path.stem}@{spec.spec}".replace(":", "-"),
        **explore_kwargs,
    )  # fmt: skip


def _key(knobs: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, value_text(v)) for k, v in knobs.items()))


def _work(
    step: MaxTextStep, target: Target, axes, knobs, constraints, split: bool
) -> dict[tuple, tuple]:
    """Each knob combination's (tokens, model FLOPs) a step, all devices, from MaxText's config
    of its first candidate layout MaxText takes (the work does not depend on the layout; a layout
    it refuses is that candidate's ``refused`` row); a knob combination it refuses on every
    layout is a ValueError here, before anything compiles."""
    from maxtext.utils import maxtext_utils

    from hlo_roofline.explorer.layouts import candidates

    found, _ = candidates(target, axes, knobs, constraints, split)
    out: dict[tuple, tuple] = {}
    refused: dict[tuple, str] = {}  # a knob combination's first refusal, while no layout took it
    for c in found:
        key = _key(dict(c.knobs))
        if key in out:
            continue
        sizes = dict(c.sizes)
        try:
            config = step.config_of(sizes, dict(c.knobs))
        except CONFIG_REFUSALS as exc:  # this layout's: another may take the combination
            refused.setdefault(key, f"MaxText refuses the config of {c.label}: {one_line(exc)}")
            continue
        refused.pop(key, None)

        devices = math.prod(sizes.values())
        with contextlib.redirect_stdout(io.StringIO()):
            total_tflops, _, _ = maxtext_utils.calculate_tflops_training_per_device(config)
        tokens = float(config.global_batch_size_to_train_on) * float(config.max_target_length)
        out[key] = (tokens, float(total_tflops) * 1e12 * devices)
    if refused:  # every layout of a knob combination refused: nothing of it can compile
        raise ValueError(next(iter(refused.values())))
    return out
