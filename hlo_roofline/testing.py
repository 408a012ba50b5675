"""Roofline rules as pytest assertions: the CI gate of ``hlo-roofline check`` inside a test suite.

::

    from hlo_roofline.testing import assert_roofline

    def test_matmul_is_compute_bound():
        assert_roofline(step, x, w, chip="v5e", select="dot_general", require="compute")

The rules are those of :mod:`hlo_roofline.check` (``select``, ``min_share``, ``require``,
``max_memory_share``, ``min_coverage``, ``max_regression`` with ``baseline``); a failure raises
:class:`AssertionError` whose message is the violation table.
"""

from __future__ import annotations

from pathlib import Path

from hlo_roofline import api
from hlo_roofline.check import Rules, check
from hlo_roofline.report import Report

__all__ = ["assert_roofline"]


def assert_roofline(
    fn,
    *args,
    chip,
    target: str | None = None,
    cost_model: str = "roofline",
    jit_kwargs: dict | None = None,
    baseline: Report | str | Path | None = None,
    **rules,
) -> Report:
    """Compile ``fn(*args)`` for ``chip`` (compile-only where a target exists) and apply ``rules``.

    Returns the report, so a test can look further; raises :class:`AssertionError` listing each
    violating op and the rule it broke. ``baseline`` is a :class:`Report` or a report file.
    """
    if baseline is not None:
        rules["baseline"] = baseline
    rule_set = Rules.from_mapping(rules, origin="assert_roofline")
    if rule_set.empty:
        raise TypeError(
            "assert_roofline needs at least one rule (require=, max_memory_share=, ...)"
        )
    report = api.analyze(
        fn, *args, chip=chip, target=target, cost_model=cost_model, **(jit_kwargs or {})
    )
    base = Report.read(baseline) if isinstance(baseline, str | Path) else baseline
    result = check(report, rule_set, base)
    if not result.passed:
        raise AssertionError(
            f"roofline check failed on {report.summary.get('chip_name', report.chip)} "
            f"({rule_set.describe()}):\n{result.table()}"
        )
    return report
