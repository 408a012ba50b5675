"""``explore ENTRY --target T --axes a,b,c``: compile every layout of a step, print them ranked.

Exit 0 when every candidate has an answer (ok, does not fit, refused), 1 when any failed
unexpectedly (an error in the user's code, a crashed or hung worker: the exploration is
incomplete), 2 when none compiled or the input is bad. ``explore --show CANDIDATE RESULT`` prints
one candidate's row of a written exploration, with its traceback.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
import pandas as pd

from hlo_roofline import entries, explorer, targets
from hlo_roofline._atomic import unwritable
from hlo_roofline.cli._common import (
    CONTEXT,
    InputError,
    PathOrUrl,
    no_cache_option,
    one_line,
    output_errors,
)
from hlo_roofline.text import format_seconds, format_table

_WORDS = {"true": True, "false": False, "none": None}


def _value(text: str):
    """A knob value as Python reads it: ``True``/``False``/``None`` (any case), int, float, else
    the string itself."""
    if text.lower() in _WORDS:
        return _WORDS[text.lower()]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_knobs(specs: tuple[str, ...], kinds: dict[str, type] | None = None) -> dict[str, list]:
    """``("batch=8,16", "adam=False")`` → ``{"batch": [8, 16], "adam": [False]}``; a knob
    whose parameter is a ``str`` (``kinds``, from make_step's signature) keeps its text."""
    knobs: dict[str, list] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        if not sep or not name.isidentifier() or not values:
            raise InputError(f"--knob {spec!r} is not NAME=V1,V2,... (e.g. batch=8,16,32)")
        if name in knobs:
            raise InputError(f"--knob {name} is given twice: list its values once (NAME=V1,V2)")
        text = (kinds or {}).get(name) is str
        knobs[name] = [v if text else _value(v) for v in values.split(",")]
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


RANKED_BY = {
    "tokens_per_s_per_chip": "tokens/s per chip",
    "model_flops_per_s_per_chip": "model FLOP/s per chip",
    "flops_per_s_per_chip": "the compiled program's FLOP/s per chip (the knobs change the work: "
    "give --tokens-per-step or --model-flops to rank by yours)",
    "step_s": "step time (every candidate does the same work)",
}


def table_text(exploration: explorer.Exploration, width: int = 100) -> str:
    """The ranked table: rank, layout, knobs, predicted step, throughput, the book's per-pass
    matmul and collective times, bound, fit; then each row's why."""
    rows = []
    # MFU against the user's model FLOPs where given (--model-flops), else the program's bound
    table = exploration.table
    given = "mfu_model" in table and table["mfu_model"].notna().any()
    mfu_column, mfu_header = ("mfu_model", "MFU") if given else ("mfu_upper_bound", "MFU ≤")
    knob_columns = explorer.knob_columns(table, exploration.axes)
    by = explorer.rank_by(table, exploration.knobs)
    for _, r in table.iterrows():
        ok = _known(r.get("step_s"))
        row = {"rank": str(r["rank"]) if _known(r["rank"]) else ""}
        row.update({a: str(r[a]) for a in exploration.axes})
        row.update({k: str(r[k]) for k in knob_columns})
        row["step ≈"] = format_seconds(r["step_s"]) if ok else "—"
        row["step ≥"] = format_seconds(r["lower_s"]) if _known(r.get("lower_s")) else "—"
        tps = r.get("tokens_per_s_per_chip")
        row["tok/s/chip"] = f"{tps:,.0f}" if _known(tps) and math.isfinite(tps) else "—"
        if by in ("flops_per_s_per_chip", "model_flops_per_s_per_chip"):
            rate = r.get(by)
            row["TFLOP/s/chip"] = f"{rate / 1e12:.3g}" if _known(rate) else "—"
        gap = r.get("gap_to_best")
        row["vs best"] = (
            f"+{gap:.0%}" if _known(gap) and gap > 0 else ("best" if _known(gap) else "—")
        )
        for short in explorer.PASSES.values():
            mm, comm = r.get(f"matmul_{short}_s"), r.get(f"collective_{short}_s")
            row[f"{short} mm|coll"] = (
                f"{format_seconds(mm)}|{format_seconds(comm)}" if _known(mm) and _known(comm)
                else "—"
            )  # fmt: skip
        share = r.get("exposed_comm_share")
        row["exposed"] = f"{share:.0%}" if ok and _known(share) else "—"
        mfu = r.get(mfu_column)
        row[mfu_header] = f"{mfu:.0%}" if _known(mfu) else "—"
        hbm = r.get("hbm_per_device")
        row["HBM/dev"] = f"{hbm / 1e9:.3g} GB" if _known(hbm) and hbm else "—"
        row["status"] = explorer.status_text(r["status"])
        rows.append(row)
    right = {"rank", "step ≈", "step ≥", "tok/s/chip", "TFLOP/s/chip", "vs best", "exposed",
             mfu_header, "HBM/dev", "fwd mm|coll", "bwd mm|coll", *exploration.axes}  # fmt: skip
    lines = [format_table(rows, right=right), "", f"ranked by {RANKED_BY.get(by, by)}"]
    for _, r in table.iterrows():
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
    if exploration.flags:
        lines.append("compiler flags: " + "; ".join(
            f"{kind} {' '.join(flags)}" for kind, flags in exploration.flags.items()
        ))  # fmt: skip
    if exploration.pruned:
        lines.append(f"{len(exploration.pruned)} layouts pruned, e.g. " + _pruned_text(exploration))
    return "\n".join(lines)


def _pruned_text(exploration: explorer.Exploration, n: int = 3) -> str:
    return "; ".join(
        f"{'×'.join(str(s) for s in sizes.values())}: {why}"
        for sizes, why in exploration.pruned[:n]
    )


def _known(value) -> bool:
    """Not missing (None, NaN or pandas' NA, as a row of a failed candidate holds)."""
    return value is not None and not pd.isna(value)


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


def show_text(table: pd.DataFrame, name: str) -> str:
    """One candidate's row in full: status, why, error and the user's traceback."""
    from hlo_roofline.check import RuleError, match_layout

    try:
        r = match_layout(table, name)
    except RuleError as exc:
        raise InputError(one_line(exc)) from None
    lines = [f"{r['candidate']}: {explorer.status_text(explorer.status_of(r['status']))}"]
    for key in ("why", "error", "flags"):
        value = r.get(key)
        if isinstance(value, str) and value:
            lines.append(f"{key}: {value}")
    trace = r.get("traceback")
    lines.append(trace.rstrip() if isinstance(trace, str) and trace else "(no traceback)")
    return "\n".join(lines)


def _looks_like_result(entry: str) -> bool:
    """ENTRY names a written exploration (``--show``), not a step."""
    path = Path(entry)
    return path.is_dir() or (path.suffix in (".json", ".csv") and path.is_file())


@click.command(
    "explore",
    context_settings=CONTEXT,
    short_help="Compile every sharding layout of a step for a target; rank them.",
)
@click.argument("entry", metavar="FILE.py:NAME | KEY=VALUE...", nargs=-1)
@click.option("--maxtext", "maxtext_config", metavar="CONFIG.yml",
              help="Explore MaxText's own train step for this config (a file, or a name in "
                   "MaxText's configs folder); the arguments are its KEY=VALUE overrides and the "
                   "knobs are config keys. Needs MaxText importable.")  # fmt: skip
@click.option("--target", help="Compile-only target, e.g. v5p:4x4x4.")
@click.option(
    "--axes",
    default="data,fsdp,tensor",
    show_default=True,
    help="Mesh axis names, comma-separated.",
)
@click.option("--knob", "knob_specs", multiple=True, metavar="NAME=V1,V2",
              help="A keyword of NAME and the values to try (repeatable; True/False/None, "
                   "numbers, else text).")  # fmt: skip
@click.option("--jobs", type=click.IntRange(min=1), help="Worker processes (default: CPU count).")
@click.option("--scheduler", metavar="ADDRESS", help="A Dask scheduler to compile on.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Kill a candidate that has no result after this long (timed out).")  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), help="At most this many candidates.")
@click.option("--fixed", "fixed_specs", multiple=True, metavar="AXIS=N",
              help="This axis has only size N (repeatable).")  # fmt: skip
@click.option("--maximum", "maximum_specs", multiple=True, metavar="AXIS=N",
              help="This axis is at most N (repeatable).")  # fmt: skip
@click.option("--divides", "divides_specs", multiple=True, metavar="AXIS=N",
              help="This axis's size divides N, e.g. tensor=16 for 16 heads (repeatable).")  # fmt: skip
@click.option("--tokens-per-step", metavar="EXPR",
              help="Tokens a step, all chips: a number or an expression of the knobs "
                   "('batch*2048'). Ranks by tokens/s per chip.")  # fmt: skip
@click.option("--hidden", type=click.IntRange(min=1), help="The MLP's F, for the book's TP rules.")
@click.option("--model-flops", metavar="EXPR",
              help="The model's FLOPs a step, all chips: a number or an expression of the "
                   "knobs. MFU against them.")  # fmt: skip
@click.option("--xla-flag", "xla_flags", multiple=True, metavar="--FLAG[=V]",
              help="An XLA flag for every candidate's compile (repeatable).")  # fmt: skip
@click.option("--libtpu-flag", "libtpu_flags", multiple=True, metavar="--FLAG[=V]",
              help="A libtpu flag for every candidate's compile (repeatable).")  # fmt: skip
@click.option("--flags", "flags_path", type=click.Path(path_type=Path), metavar="FILE.toml",
              help='Compiler flags from TOML: xla = ["--..."], libtpu = ["--..."].')  # fmt: skip
@click.option("--name", help="The exploration's directory in --logdir (default NAME@TARGET).")
@click.option("--show", "show_name", metavar="CANDIDATE",
              help="Print this candidate's row with its traceback (ENTRY: a written result, "
                   "or after a run).")  # fmt: skip
@click.option("--logdir", type=PathOrUrl(file_okay=False, path_type=Path),
              help="Write every report here.")  # fmt: skip
@click.option("--csv", "csv_path", type=PathOrUrl(dir_okay=False, path_type=Path),
              help="Write the table as CSV.")  # fmt: skip
@click.option("--json", "json_path", type=PathOrUrl(dir_okay=False, path_type=Path),
              help="... as JSON.")  # fmt: skip
@no_cache_option
def explore_command(
    entry, maxtext_config, target, axes, knob_specs, jobs, scheduler, timeout, limit, fixed_specs,
    maximum_specs, divides_specs, tokens_per_step, hidden, model_flops, xla_flags, libtpu_flags,
    flags_path, name, show_name, logdir, csv_path, json_path, no_cache,
) -> None:  # fmt: skip
    """Compile ENTRY(mesh, **knobs) for every factorization of the target's devices over the
    axes (and every knob value); print them ranked, each with the book's reason.

    Exit 0 when every candidate has an answer (ok, does not fit, refused); 1 when any failed
    (an error, a crash, a time-out: see its traceback with --show); 2 when none compiled.

    \b
    Example:
      $ hlo-roofline explore steps.py:make_step --target v5p:4x4x4 \\
          --axes data,fsdp,tensor --knob batch=8,16,32 --tokens-per-step 'batch*2048' \\
          --timeout 600 --logdir runs/explore
      $ hlo-roofline explore --show data4_fsdp1_tensor16_batch=8 runs/explore/make_step@v5p-4x4x4
      $ hlo-roofline explore --maxtext base.yml global_parameter_scale=32 attention=flash \\
          --target v5p:4x4x4 --axes fsdp,tensor --maximum tensor=8 \\
          --knob per_device_batch_size=6 --knob remat_policy=minimal,full --jobs 1
    """
    if maxtext_config is not None:
        overrides, entry = entry, None
    elif len(entry) > 1:
        raise InputError(
            f"one step to explore, not {len(entry)} ({' '.join(entry)}): KEY=VALUE arguments "
            "are --maxtext's overrides"
        )
    else:
        entry = entry[0] if entry else None
    output = next((p for p in (json_path, csv_path, logdir) if p is not None), None)
    if show_name is not None and (entry is None or _looks_like_result(entry)):
        source = entry if entry is not None else output  # explore --show NAME --json x.json
        if source is None:
            raise InputError("--show CANDIDATE reads a written exploration: name it (RESULT)")
        try:
            table = explorer.read_table(source)
        except explorer.ExplorationError as exc:
            raise InputError(one_line(exc)) from None
        click.echo(show_text(table, show_name))
        return
    if entry is None and maxtext_config is None:
        raise InputError(f"give the step to explore, {entries.FORMS}")
    if target is None:
        raise InputError("--target is required to explore a step (e.g. --target v5p:4x4x4)")
    if entry is not None:
        try:
            named = entries.parse_entry(entry)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        if named.is_file and not Path(named.where).is_file():
            raise InputError(f"no such file: {named.where}")
    try:
        target = targets.parse_target(target)  # read once: explore() and its workers take it
    except targets.TargetError as exc:
        raise InputError(one_line(exc)) from None
    _writable(logdir, csv_path, json_path)  # asked before minutes of compiling, not after
    names = tuple(a.strip() for a in axes.split(",") if a.strip())
    try:
        kinds = explorer.parameter_kinds(entry) if entry is not None else {}
    except ValueError as exc:
        raise InputError(one_line(exc)) from None
    knobs = parse_knobs(knob_specs, kinds)
    constraints = {
        "limit": limit,
        "fixed": parse_sizes("--fixed", fixed_specs, names),
        "maximum": parse_sizes("--maximum", maximum_specs, names),
        "divides": parse_sizes("--divides", divides_specs, names),
    }
    try:
        flags = explorer.read_flags_file(flags_path) if flags_path is not None else {}
        flags = explorer.compiler_flags(
            [*flags.get("xla", []), *xla_flags], [*flags.get("libtpu", []), *libtpu_flags]
        )
    except ValueError as exc:
        raise InputError(one_line(exc)) from None
    if maxtext_config is not None:
        if tokens_per_step is not None or model_flops is not None:
            raise InputError("--maxtext counts the work from the config: drop --tokens-per-step "
                             "and --model-flops")  # fmt: skip
        try:
            from hlo_roofline.explorer import maxtext

            maxtext.require_maxtext()
            maxtext_overrides = maxtext.parse_overrides(overrides)
        except (ValueError, ImportError) as exc:
            raise InputError(one_line(exc)) from None
    client = _client(scheduler) if scheduler else None
    common = {
        "axes": names,
        "knobs": knobs,
        "constraints": constraints,
        "executor": client,
        "jobs": jobs,
        "cache": not no_cache,
        "hidden": hidden,
        "timeout": timeout,
        "xla_flags": flags.get("xla", ()),
        "libtpu_flags": flags.get("libtpu", ()),
        "name": name,
    }
    try:
        if maxtext_config is not None:
            result = maxtext.explore_maxtext(
                maxtext_config, target, overrides=maxtext_overrides, **common
            )
        else:
            result = explorer.explore(
                entry,
                target,
                tokens_per_step=_number_or_expression(tokens_per_step),
                model_flops=_number_or_expression(model_flops),
                **common,
            )
    except (ValueError, ImportError, TypeError, targets.TargetUnavailableError) as exc:
        raise InputError(one_line(exc)) from None
    finally:
        if client is not None:
            client.close()
    if result.table.empty:
        raise InputError(
            f"no layout of {target} over {', '.join(names)} passes the constraints: "
            + (_pruned_text(result, 5) if result.pruned else "none")
        )
    click.echo(table_text(result))
    folder = None
    if logdir is not None:
        with output_errors(logdir):
            table = result.write_tensorboard(logdir)[-1]  # a Path, or a URL's text
            folder = table.parent if isinstance(table, Path) else table.rpartition("/")[0]
        click.echo(f"wrote {len(result.reports)} reports and the table to {folder}", err=True)
    if csv_path is not None:
        with output_errors(csv_path):
            result.to_csv(csv_path)
    if json_path is not None:
        with output_errors(json_path):
            result.to_json(json_path)
    if show_name is not None:
        click.echo("\n" + show_text(result.table, show_name))
    _exit(result, json_path or csv_path or folder)


def _number_or_expression(text: str | None):
    """A plain number as a float (an expression of no knob), else the expression's text."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def _exit(result: explorer.Exploration, written) -> None:
    """Exit 2 when no candidate compiled, 1 when any failed unexpectedly (incomplete)."""
    statuses = result.table["status"].map(explorer.status_of)
    failed = result.failed
    if failed.empty and statuses.isin([explorer.STATUS_OK, explorer.STATUS_NO_FIT]).any():
        return
    listed = "; ".join(
        f"{r['candidate']} ({explorer.status_text(r['status'])}: {r['error']})"
        for _, r in failed.head(3).iterrows()
    )
    where = f" {written}" if written else " RESULT (write one with --json/--logdir)"
    hint = f"; see one's traceback: hlo-roofline explore --show CANDIDATE{where}"
    if not statuses.isin([explorer.STATUS_OK, explorer.STATUS_NO_FIT]).any():
        why = f"{len(failed)} failed, e.g. {listed}{hint}" if len(failed) else "every one refused"
        click.echo(f"error: no candidate compiled ({why})", err=True)
        raise SystemExit(2)
    click.echo(
        f"error: the exploration is incomplete: {len(failed)} of {len(result.table)} candidates "
        f"failed, e.g. {listed}{hint}",
        err=True,
    )
    raise SystemExit(1)


def _writable(logdir, csv_path, json_path) -> None:
    """Each output's folder takes files (a URL: its filesystem is installed), or exit 2 now."""
    for path, folder in ((logdir, logdir), (csv_path, None), (json_path, None)):
        if path is None:
            continue
        if folder is None:
            folder = path if isinstance(path, str) else Path(path).parent
        problem = unwritable(folder)
        if problem is not None:
            raise InputError(f"cannot write {path}: {problem}")
