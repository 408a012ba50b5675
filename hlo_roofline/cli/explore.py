"""``explore ENTRY --target T --axes a,b,c``: compile every layout of a step, print them ranked."""

from __future__ import annotations

import math
from pathlib import Path

import click
import pandas as pd

from hlo_roofline import explorer, targets
from hlo_roofline.cli._common import CONTEXT, InputError, no_cache_option, one_line
from hlo_roofline.text import format_seconds, format_table


def _value(text: str):
    """A knob value as Python reads it: int, float, else the string itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_knobs(specs: tuple[str, ...]) -> dict[str, list]:
    """``("batch=8,16", "f=1024")`` → ``{"batch": [8, 16], "f": [1024]}``."""
    knobs: dict[str, list] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not name.isidentifier() or not values:
            raise InputError(f"--knob {spec!r} is not NAME=V1,V2,... (e.g. batch=8,16,32)")
        knobs[name] = [_value(v) for v in values.split(",")]
    return knobs


def parse_sizes(flag: str, specs: tuple[str, ...], axes: tuple[str, ...]) -> dict[str, int]:
    """``("tensor=16",)`` → ``{"tensor": 16}``: one constraint per axis, a positive integer."""
    sizes: dict[str, int] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not value.isdigit() or int(value) < 1:
            raise InputError(f"{flag} {spec!r} is not AXIS=N (e.g. tensor=16)")
        if name not in axes:
            raise InputError(f"{flag} {spec!r}: {name!r} is not one of --axes {','.join(axes)}")
        sizes[name] = int(value)
    return sizes


def table_text(exploration: explorer.Exploration, width: int = 100) -> str:
    """The ranked table: rank, layout, knobs, predicted step, tokens/s per chip, bound, fit."""
    rows = []
    # MFU against the user's model FLOPs where given (--model-flops), else the program's bound
    table = exploration.table
    given = "mfu_model" in table and table["mfu_model"].notna().any()
    mfu_column, mfu_header = ("mfu_model", "MFU") if given else ("mfu_upper_bound", "MFU ≤")
    knob_columns = [
        c for c in exploration.table.columns
        if c not in exploration.axes and c not in _KNOWN and not c.startswith(explorer.SPAN_PREFIXES)
    ]  # fmt: skip
    for _, r in exploration.table.iterrows():
        ok = _known(r.get("step_s"))
        row = {"rank": str(r["rank"]) if _known(r["rank"]) else ""}
        row.update({a: str(r[a]) for a in exploration.axes})
        row.update({k: str(r[k]) for k in knob_columns})
        row["step ≈"] = format_seconds(r["step_s"]) if ok else "—"
        row["step ≥"] = format_seconds(r["lower_s"]) if _known(r.get("lower_s")) else "—"
        tps = r.get("tokens_per_s_per_chip")
        row["tok/s/chip"] = f"{tps:,.0f}" if _known(tps) and math.isfinite(tps) else "—"
        gap = r.get("gap_to_best")
        row["vs best"] = (
            f"+{gap:.0%}" if _known(gap) and gap > 0 else ("best" if _known(gap) else "—")
        )
        row["exposed"] = f"{r['exposed_comm_share']:.0%}" if ok else "—"
        mfu = r.get(mfu_column)
        row[mfu_header] = f"{mfu:.0%}" if _known(mfu) else "—"
        hbm = r.get("hbm_per_device")
        row["HBM/dev"] = f"{hbm / 1e9:.3g} GB" if _known(hbm) and hbm else "—"
        row["status"] = explorer.status_text(r["status"])
        rows.append(row)
    right = {"rank", "step ≈", "step ≥", "tok/s/chip", "vs best", "exposed", mfu_header, "HBM/dev"}
    right |= set(exploration.axes)
    lines = [format_table(rows, right=right), ""]
    for _, r in exploration.table.iterrows():
        lines.append(f"{r['candidate']}: {r['why']}")
    k = exploration.constants
    if k.gpu:
        lines.append(
            f"book constants ({k.chip}): C = {k.C:.3g} FLOP/s, W_GPU = {k.W_ici:.3g} B/s, "
            f"C/W_GPU = {k.ratio:,.0f}"
            + (f", W_node = {k.W_node:.3g} B/s, C/W_node = {k.node_ratio:,.0f}" if k.W_node else "")
        )
    elif k.ratio:
        lines.append(
            f"book constants ({k.chip}): C = {k.C:.3g} FLOP/s, W_ici = {k.W_ici:.3g} B/s, "
            f"C/W_ici = {k.ratio:,.0f}"
        )
    if exploration.pruned:
        lines.append(f"{len(exploration.pruned)} layouts pruned, e.g. " + "; ".join(
            f"{'×'.join(str(s) for s in sizes.values())}: {why}"
            for sizes, why in exploration.pruned[:3]
        ))  # fmt: skip
    return "\n".join(lines)


def _known(value) -> bool:
    """Not missing (None, NaN or pandas' NA, as a row of a failed candidate holds)."""
    return value is not None and not pd.isna(value)


_KNOWN = explorer.ROW_COLUMNS


def _client(address: str):
    try:
        from distributed import Client
    except ImportError:
        raise InputError(
            "--scheduler needs Dask distributed: pip install 'hlo_roofline[dask]'"
        ) from None
    try:
        return Client(address, timeout="20s")
    except Exception as exc:
        raise InputError(f"cannot reach the Dask scheduler {address}: {one_line(exc)}") from None


@click.command(
    "explore",
    context_settings=CONTEXT,
    short_help="Compile every sharding layout of a step for a target; rank them.",
)
@click.argument("entry", metavar="FILE.py:NAME")
@click.option("--target", required=True, help="Compile-only target, e.g. v5p:4x4x4.")
@click.option(
    "--axes", default="data,fsdp,tensor", show_default=True, help="Mesh axis names, comma-separated."
)
@click.option("--knob", "knob_specs", multiple=True, metavar="NAME=V1,V2",
              help="A keyword of NAME and the values to try (repeatable).")  # fmt: skip
@click.option("--jobs", type=click.IntRange(min=1), help="Worker processes (default: CPU count).")
@click.option("--scheduler", metavar="ADDRESS", help="A Dask scheduler to compile on.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many candidates.")
@click.option("--fixed", "fixed_specs", multiple=True, metavar="AXIS=N",
              help="This axis has only size N (repeatable).")  # fmt: skip
@click.option("--maximum", "maximum_specs", multiple=True, metavar="AXIS=N",
              help="This axis is at most N (repeatable).")  # fmt: skip
@click.option("--divides", "divides_specs", multiple=True, metavar="AXIS=N",
              help="This axis's size divides N, e.g. tensor=16 for 16 heads (repeatable).")  # fmt: skip
@click.option("--tokens-per-step", type=click.IntRange(min=1), help="For tokens/s per chip.")
@click.option("--hidden", type=click.IntRange(min=1), help="The MLP's F, for the book's TP rules.")
@click.option("--model-flops", type=click.FloatRange(min=0, min_open=True), metavar="FLOPS",
              help="The model's FLOPs a step, all chips together: MFU against them.")  # fmt: skip
@click.option("--logdir", type=click.Path(path_type=Path), help="Write every report here.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), help="Write the table as CSV.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="... as JSON.")
@no_cache_option
def explore_command(
    entry, target, axes, knob_specs, jobs, scheduler, limit, fixed_specs, maximum_specs,
    divides_specs, tokens_per_step, hidden, model_flops, logdir, csv_path, json_path, no_cache,
) -> None:  # fmt: skip
    """Compile ENTRY(mesh, **knobs) for every factorization of the target's devices over the
    axes (and every knob value); print them ranked, each with the book's reason.

    \b
    Example:
      $ hlo-roofline explore steps.py:make_step --target v5p:4x4x4 \\
          --axes data,fsdp,tensor --knob batch=8,16,32 --logdir runs/explore
    """
    file, sep, name = entry.rpartition(":")
    if not sep or not name.isidentifier():
        raise InputError(f"{entry!r} is not FILE.py:NAME (or package.module:NAME)")
    if file.endswith(".py") and not Path(file).is_file():
        raise InputError(f"no such file: {file}")
    try:
        target = targets.parse_target(target).spec
    except targets.TargetError as exc:
        raise InputError(one_line(exc)) from None
    names = tuple(a.strip() for a in axes.split(",") if a.strip())
    knobs = parse_knobs(knob_specs)
    constraints = {
        "limit": limit,
        "fixed": parse_sizes("--fixed", fixed_specs, names),
        "maximum": parse_sizes("--maximum", maximum_specs, names),
        "divides": parse_sizes("--divides", divides_specs, names),
    }
    client = _client(scheduler) if scheduler else None
    try:
        result = explorer.explore(
            entry,
            target,
            axes=names,
            knobs=knobs,
            constraints=constraints,
            executor=client,
            jobs=jobs,
            cache=not no_cache,
            tokens_per_step=tokens_per_step,
            hidden=hidden,
            model_flops=model_flops,
        )
    except (ValueError, ImportError, targets.TargetUnavailableError) as exc:
        raise InputError(one_line(exc)) from None
    finally:
        if client is not None:
            client.close()
    if result.table.empty:
        raise InputError(f"no layout of {target} over {', '.join(names)} passes the constraints")
    click.echo(table_text(result))
    if logdir is not None:
        result.write_tensorboard(logdir)
        click.echo(f"wrote {len(result.reports)} reports to {logdir}", err=True)
    if csv_path is not None:
        result.to_csv(csv_path)
    if json_path is not None:
        result.to_json(json_path)
