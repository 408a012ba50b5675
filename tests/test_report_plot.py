"""The chart draws one roof per distinct peak: rate classes at the same peak share a line whose
label names them all (v5p's bf16 and fp8 at 459 TFLOP/s drew as a bf16 line hidden under an fp8
one)."""

from __future__ import annotations

import re
import warnings

import matplotlib
import pytest
from conftest import FIXTURES

from hlo_roofline import analyze_hlo, chips


def _legend(path) -> list[str]:
    """The roof labels of an SVG drawn with text kept as text."""
    labels = re.findall(r"<text[^>]*>([^<]*roof)</text>", path.read_text())
    return [label.strip() for label in labels]


@pytest.mark.parametrize("chip", ["v5p", "h100", "v5e"])
def test_equal_roofs_are_one_line_named_for_both(chip, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = analyze_hlo(FIXTURES / "mlp_bf16" / "tpu_v5e.hlo.txt", chip=chip)
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        labels = _legend(report.plot(tmp_path / "chart.svg"))
    # the rate classes the summary has, grouped by their peak (to the GFLOP/s)
    spec = chips.get(chip).per_device()
    by_peak: dict[float, list[str]] = {}
    for name, roof in report.summary["roofs"].items():
        by_peak.setdefault(round(roof["peak_flops"] / 1e9), []).append(name)
    expected = sorted(" = ".join(names) + " roof" for names in by_peak.values())
    roofs = sorted(label for label in labels if label != "VMEM roof")
    assert roofs == expected
    if chip == "v5p":  # bf16 and fp8 both run at 459 TFLOP/s on v5p
        assert spec.peak_flops("bf16") == spec.peak_flops("fp8")
        assert "bf16 = fp8 roof" in roofs and "bf16 roof" not in roofs
