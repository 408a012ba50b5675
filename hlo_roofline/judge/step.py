"""The step as a whole: the summary's chip, times, MFU and roofs, the loops a step runs
(:func:`loop_table`), what it recomputes (remat) and its MFU against the user's model FLOPs."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from hlo_roofline.chips import Chip
from hlo_roofline.schema import BOUNDS, matmul_rows

RIDGE_DTYPES = ("bf16", "fp8", "int8", "tf32", "fp32")


def chip_summary(
    ops: pd.DataFrame, chip: Chip, step: float, upper: float, step_bound: float, expected: float
) -> dict:
    """The summary's chip, its roofs and the step's MFU: at most ``flops / (peak · step_bound)``
    (no run reaches more), expected ``flops / (peak · expected)``; ``time_share`` splits the
    serial step (Σ ``t_expected_s``, ``step``) by each op's bound."""
    bound = ops["bound"].to_numpy()
    time_by_bound = grouped_sums(bound, ops["t_expected_s"].to_numpy(dtype=float))
    # MFU against the peak most matmul FLOPs run at (their dtype and precision; bf16 without any)
    priced = matmul_rows(ops) & (bound != "unknown")
    pairs = zip(ops["dtype"].to_numpy()[priced], ops["precision"].to_numpy()[priced], strict=True)
    matmul_flops = grouped_sums(list(pairs), ops["flops"].to_numpy(dtype=float)[priced])
    mfu_dtype, mfu_precision = ("bf16", "")
    if matmul_flops and max(matmul_flops.values()) > 0:  # the first largest, keys in order
        mfu_dtype, mfu_precision = max(sorted(matmul_flops), key=matmul_flops.__getitem__)
    peak = chip.matmul_peak(str(mfu_dtype), str(mfu_precision) or "default")
    flops = float(ops["flops"].sum())
    roofs = {}
    for dtype in RIDGE_DTYPES:
        if chip.has_rate(dtype):
            rate = chip.peak(dtype)
            roofs[dtype] = {"peak_flops": rate, "critical_intensity": chip.ridge(rate)}
    roofs["vector"] = {
        "peak_flops": chip.vector_peak(),
        "critical_intensity": chip.ridge(chip.vector_peak()),
    }
    in_vmem = "vmem_bytes" in ops and float(ops["vmem_bytes"].sum()) > 0  # a second memory roof
    return {
        "chip": chip.key,
        "chip_name": chip.name,
        "chip_profile": chip.profile,
        "step_bound_s": step_bound,
        "step_time_serial_s": step,
        "step_time_upper_s": upper,
        "mfu_upper_bound": flops / (peak * step_bound) if step_bound else 0.0,
        "mfu_expected": flops / (peak * expected) if expected else 0.0,
        "mfu_dtype": (
            f"{mfu_dtype} ({mfu_precision} precision)"
            if mfu_dtype == "f32" and mfu_precision not in ("", "default")
            else str(mfu_dtype)
        ),
        "time_share": {b: time_by_bound.get(b, 0.0) / step if step else 0.0 for b in BOUNDS[:4]},
        "hbm_bandwidth": chip.hbm_bandwidth,
        "vmem_bandwidth": chip.vmem_bandwidth if in_vmem else None,
        "roofs": roofs,
    }


# Past this many rows pandas' grouped sum costs less than adding them up one by one in Python.
_GROUPBY_ROWS = 512


def grouped_sums(keys, values: np.ndarray) -> dict:
    """The sum of ``values`` per key (missing keys and NaN values skipped), exactly as pandas'
    ``groupby(keys).sum()`` adds them: in row order, with its compensated (Kahan) adding. A few
    rows, one by one in Python, where the groupby's fixed cost is most of a small module's
    judging; many, by pandas."""
    if len(values) > _GROUPBY_ROWS:
        sums = pd.Series(values).groupby(_group_keys(keys)).sum()
        return {key: float(total) for key, total in sums.items()}
    totals: dict = {}
    compensations: dict = {}
    for key, value in zip(keys, values.tolist(), strict=True):
        if value != value or _is_missing(key):
            continue
        total, compensation = totals.get(key, 0.0), compensations.get(key, 0.0)
        y = value - compensation
        t = total + y
        compensation = t - total - y
        compensations[key] = 0.0 if compensation != compensation else compensation  # ±inf
        totals[key] = t
    return totals


def _group_keys(keys):
    """``keys`` as pandas groups by them: an array, or for pairs, one array per element."""
    if len(keys) and isinstance(keys[0], tuple):
        return [np.asarray([key[i] for key in keys], dtype=object) for i in range(len(keys[0]))]
    return np.asarray(keys, dtype=object) if not isinstance(keys, np.ndarray) else keys


def _is_missing(key) -> bool:
    """Whether a group key is one pandas drops (NaN or None, alone or in a tuple)."""
    parts = key if isinstance(key, tuple) else (key,)
    return any(part is None or (isinstance(part, float) and part != part) for part in parts)


LOOP_FIELDS = ("parent", "trip_count", "iterations", "ops", "flops", "bytes_accessed",
               "t_expected_s", "share", "flops_per_iteration", "bytes_per_iteration",
               "time_per_iteration_s")  # fmt: skip


def loop_table(ops: pd.DataFrame) -> pd.DataFrame:
    """Each while loop (a ``lax.scan`` over layers is one), indexed by its ``loop`` path: its
    trip count, iterations per step, totals over everything it runs (nested loops included) and
    those totals per iteration: one layer of a scanned stack.

    From the rows alone: every op of a loop's body runs ``iterations`` times per step (its
    ``count``; the condition's ops once more), so the least positive count among the rows
    directly in the loop is its iterations, and over its parent's the trip count. A loop whose
    trip count is unknown (its rows are ``lower_bound``: counted once) has none. The times are
    there once the report is classified."""
    rows = _loop_rows(ops)
    if not rows:
        return pd.DataFrame(columns=list(LOOP_FIELDS), index=pd.Index([], name="loop"))
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(LOOP_FIELDS))
    table.index.name = "loop"
    if "t_expected_s" in ops:
        table = table.sort_values("t_expected_s", ascending=False, kind="stable")
    return table


def _loop_rows(ops: pd.DataFrame) -> dict[str, dict]:
    """:func:`loop_table`'s rows by loop path, in the order of their paths.

    Each path's rows are found through the distinct ``loop`` values (a step has hundreds of loops
    over tens of thousands of rows): which values lie in a path's subtree is decided once per
    value, and a row is inside when its value is; the sums run over the rows in row order."""
    if "loop" not in ops:
        return {}
    loop = ops["loop"].to_numpy()
    if not (loop != "").any():
        return {}
    values, codes = np.unique(loop.astype(str), return_inverse=True)
    codes = codes.reshape(-1)
    count = ops["count"].to_numpy(dtype=float)
    short = ops["lower_bound"].to_numpy(dtype=bool)
    found = [v for v in values if v]
    paths = sorted(
        {"/".join(p.split("/")[: i + 1]) for p in found for i in range(p.count("/") + 1)}
    )
    code_of = {value: code for code, value in enumerate(values)}
    sums = {c: ops[c].to_numpy(dtype=float) for c in ("flops", "bytes_accessed", "t_expected_s")
            if c in ops}  # fmt: skip
    timed = "t_expected_s" in ops
    step = float(ops["t_expected_s"].sum()) if timed else 0.0

    def direct(path: str) -> np.ndarray:
        """The rows directly in ``path`` (none when no row names it: a loop of loops)."""
        code = code_of.get(path)
        return codes == code if code is not None else np.zeros(len(codes), dtype=bool)

    def iterations(path: str) -> float:
        if not path:
            return 1.0
        runs = count[direct(path) & (count > 0)]
        return float(runs.min()) if len(runs) else 0.0

    rows = {}
    for path in paths:
        parent = path.rpartition("/")[0]
        runs, outer = iterations(path), iterations(parent)
        member = np.fromiter((v == path or v.startswith(path + "/") for v in values), bool)
        inside = member[codes]
        unknown = bool(short[direct(path)].any())
        totals = {c: float(column[inside].sum()) for c, column in sums.items()}
        time_s = totals.get("t_expected_s", math.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            rows[path] = {
                "parent": parent,
                "trip_count": math.nan if unknown or not outer else runs / outer,
                "iterations": runs,
                "ops": int(inside.sum()),
                "flops": totals["flops"],
                "bytes_accessed": totals["bytes_accessed"],
                "t_expected_s": time_s,
                "share": time_s / step if step else math.nan,
                "flops_per_iteration": totals["flops"] / runs if runs else math.nan,
                "bytes_per_iteration": totals["bytes_accessed"] / runs if runs else math.nan,
                "time_per_iteration_s": time_s / runs if runs else math.nan,
            }
    return rows


def loops_summary(ops: pd.DataFrame) -> list[dict]:
    """The summary's ``loops``: :func:`loop_table` as records, slowest first."""
    rows = _loop_rows(ops)
    if "t_expected_s" in ops:  # as loop_table sorts them: descending, stable, NaN last

        def slowest_first(name: str) -> tuple[bool, float]:
            time_s = rows[name]["t_expected_s"]
            return (math.isnan(time_s), -time_s if not math.isnan(time_s) else 0.0)

        rows = {name: rows[name] for name in sorted(rows, key=slowest_first)}
    keep = ("trip_count", "iterations", "time_per_iteration_s", "flops_per_iteration",
            "bytes_per_iteration", "t_expected_s", "share")  # fmt: skip
    return [
        {"name": name, "parent": row["parent"],
         **{k: None if not math.isfinite(row[k]) else float(row[k]) for k in keep}}
        for name, row in rows.items()
    ]  # fmt: skip


REMAT = "rematted_computation"  # the name scope JAX gives what jax.checkpoint recomputes


def remat_summary(ops: pd.DataFrame, step: float) -> dict[str, float]:
    """What the backward pass recomputes (``jax.checkpoint``/``remat``): the FLOPs and roofline
    time of the ops whose ``op_name`` lies inside a rematted computation, and their shares of the
    step's FLOPs and of Σ ``t_expected_s`` (a fusion counts wholly where its own op_name is)."""
    if "op_name" not in ops:  # a report without names: nothing known to be recomputed
        inside = np.zeros(len(ops), dtype=bool)
    else:
        names = ops["op_name"].to_numpy()
        inside = np.fromiter((REMAT in str(name) for name in names), bool, len(names))
    flops = ops["flops"].to_numpy(dtype=float)
    remat_flops, total = float(flops[inside].sum()), float(flops.sum())
    remat_time = float(ops["t_expected_s"].to_numpy(dtype=float)[inside].sum())
    return {
        "remat_flops": remat_flops,
        "remat_flops_share": remat_flops / total if total else 0.0,
        "remat_time_s": remat_time,
        "remat_time_share": remat_time / step if step else 0.0,
    }


def check_model_flops(model_flops) -> float | None:
    """A model FLOP count as a float; ValueError unless it is a positive finite number."""
    if model_flops is None:
        return None
    try:
        value = float(model_flops)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(model_flops, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"model_flops must be a positive number of FLOPs, not {model_flops!r}")
    return value


def model_flops_summary(
    hlo_flops: float, model_flops: float | None, chip: Chip, step_scheduled: float
) -> dict[str, float | None]:
    """MFU against the user's own FLOP count: ``model_flops / (step as scheduled × bf16 peak)``
    (MaxText's convention: its MFU is against the bf16 peak), and how many FLOPs the compiled
    program runs per model FLOP (above 1: rematerialization, padding, the optimizer, ...)."""
    model_flops = check_model_flops(model_flops)
    if model_flops is None:
        return {"model_flops": None, "mfu_model": None, "hlo_flops_per_model_flop": None}
    peak = chip.peak("bf16")
    return {
        "model_flops": model_flops,
        "mfu_model": model_flops / (step_scheduled * peak) if step_scheduled else None,
        "hlo_flops_per_model_flop": hlo_flops / model_flops,
    }
