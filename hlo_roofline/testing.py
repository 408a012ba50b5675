"""Roofline rules as pytest assertions: the CI gate of ``hlo-roofline check`` inside a test suite.

::

    from hlo_roofline.testing import assert_roofline

    def test_matmul_is_compute_bound():
        assert_roofline(step, x, w, chip="v5e", select="dot_general", require="compute")

The rules are those of :mod:`hlo_roofline.check` (``select``, ``exclude``, ``kind``,
``exclude_kind``, ``min_share``, ``require``, ``max_memory_share``, ``min_coverage``, ``max_hbm``,
``max_regression`` with ``baseline``); a failure raises :class:`AssertionError` whose message is the
violation table.
"""

from __future__ import annotations

import os
from pathlib import Path

from hlo_roofline import api
from hlo_roofline.check import Rules, check, violation_table
from hlo_roofline.report import Report

__all__ = ["assert_roofline"]


def assert_roofline(
    fn,
    *args,
    chip=None,
    target: str | None = None,
    cost_model: str = "roofline",
    jit_kwargs: dict | None = None,
    baseline: Report | str | Path | None = None,
    cache: bool | str | os.PathLike = True,
    **rules,
) -> Report:
    """Compile ``fn(*args)`` as :func:`hlo_roofline.analyze` does and apply ``rules``; or, given a
    :class:`Report` in place of ``fn`` (from ``analyze_hlo``, ``analyze_dump``, ``Report.read``),
    apply them to it (judged against ``chip`` if one is named).

    ``chip`` and ``target`` mean what they mean there: ``target="h100"`` compiles for an H100 and
    judges against it, ``chip="v5e"`` compiles compile-only for a v5e. The optimized HLO is cached
    on disk (``cache=False`` compiles regardless), so a test suite does not recompile an unchanged
    step. Returns the report, so a test can look further; raises :class:`AssertionError` listing
    each violating op and the rule it broke. ``baseline`` is a :class:`Report` or a report file.
    """
    if baseline is not None:
        rules["baseline"] = baseline
    rule_set = Rules.from_mapping(rules, origin="assert_roofline")
    if rule_set.empty:
        raise TypeError(
            "assert_roofline needs at least one rule (require=, max_memory_share=, ...)"
        )
    if isinstance(fn, Report):
        report = _judged(fn, args, chip, target, jit_kwargs)
    else:
        report = api.analyze(
            fn,
            *args,
            chip=chip,
            target=target,
            cost_model=cost_model,
            cache=cache,
            jit_kwargs=jit_kwargs,
        )
    if report.chip is None:
        raise TypeError(
            "assert_roofline needs a chip to judge against: pass chip= or target= "
            "(this machine's device is not in the chip database)"
        )
    base = Report.read(baseline) if isinstance(baseline, str | Path) else baseline
    result = check(report, rule_set, base)
    if not result.passed:
        what, table = "failed", result.table()
        if result.undecided:  # a lower bound under the limit: not a pass either
            what, table = "could not be decided", violation_table(result.unknown)
        raise AssertionError(
            f"roofline check {what} on {report.summary.get('chip_name', report.chip)} "
            f"({rule_set.describe()}):\n{table}"
        )
    return report


def _judged(report: Report, args: tuple, chip, target, jit_kwargs) -> Report:
    """A report given to assert_roofline: nothing to compile, so no arguments, target or jit
    keywords; judged against ``chip`` where one is named, else as it is."""
    extra = [name for name, given in (("arguments", args), ("target=", target),
                                      ("jit_kwargs=", jit_kwargs)) if given]  # fmt: skip
    if extra:
        raise TypeError(
            f"assert_roofline(report, ...) checks a report already compiled: {', '.join(extra)} "
            "would compile a step (pass the step itself to compile it)"
        )
    return report.classify(chip) if chip is not None else report
