"""``python -m hlo_roofline.calibrate``: the chip database's measured calibrations are what the
command fits from the committed fixtures, and each fit reads only its fitting half."""

from __future__ import annotations

import pytest

from hlo_roofline import calibrate, chips


@pytest.fixture(scope="module")
def fits():
    return calibrate.fits()


def test_the_database_holds_what_the_command_fits(fits):
    text = chips.DATA_FILE.read_text()
    assert calibrate.written(text, fits) == text, (
        "data/chips.toml's calibration is stale: run python -m hlo_roofline.calibrate --write"
    )


def test_each_fit_is_a_calibrated_number_of_its_chip(fits):
    for fit in fits:
        source = chips.get(fit.chip).source_of(f"calibrated.{fit.key}")
        assert source.kind == "calibrated" and source.fitted_on == fit.fitted_on, fit
        assert chips.get(fit.chip, "book").calibration.values() == {}


def test_the_fits_are_measurements_not_the_peak(fits):
    """An efficiency is a share of the bound's rate: above 0, at most 1 (no run beats the
    bound); each fitting sample within a factor of two of the fit it made, but where the samples
    are known to spread wider (below), each within a factor of 2.5."""
    for fit in fits:
        if fit.key.endswith("_efficiency"):
            assert 0 < fit.value <= 1, fit
        spread = 2.5 if (fit.chip, fit.key) in WIDE else 2
        assert all(1 / spread <= r <= spread for r in fit.residuals), fit


# Fits whose samples spread past a factor of two, and why.
WIDE = {
    # cuDNN picks an algorithm per convolution's shape: 0.18-0.92 of the bound
    **{(chip, "conv_efficiency"): "cuDNN's algorithm per shape" for chip in ("h100-sxm", "h200")},
    # the host's dispatch of a step: the decode loop's runs twice the line through the rest
    **{(chip, key): "the host's time, its loop" for chip in ("h100-sxm", "h200")
       for key in ("dispatch", "dispatch_per_argument")},
}  # fmt: skip


def test_writing_changes_only_the_fitted_values():
    text = chips.DATA_FILE.read_text()
    moved = [calibrate.Fit("h200", "matmul_efficiency", 0.5, "fixtures/measured_gpu", ())]
    changed = calibrate.written(text, moved)
    diff = [(a, b) for a, b in zip(text.splitlines(), changed.splitlines(), strict=True) if a != b]
    assert len(diff) == 1 and "value = 0.5," in diff[0][1]
    with pytest.raises(ValueError, match="has no nothing"):
        calibrate.written(text, [calibrate.Fit("h200", "nothing", 1.0, "", ())])


def test_each_gpu_fit_holds_on_the_other_card(fits):
    """The H100 and the H200 share their SMs, tensor cores, cuDNN and driver, and differ in HBM:
    what one card's traces fit, the other's (which that fit never read) agree with within 15%,
    but for the convolutions bound by HBM (the narrow stem's share of a faster HBM's roof) and
    the host's dispatch (each card was lent with a host of its own)."""
    by_card = {
        chip: {fit.key: fit.value for fit in fits if fit.chip == chip}
        for chip in calibrate.CARDS.values()
    }
    h100, h200 = by_card.values()
    assert set(h100) == set(h200) >= {"launch_gap", "kernel_efficiency", "conv_efficiency"}
    for key in h100.keys() - {"conv_narrow_efficiency", "dispatch", "dispatch_per_argument"}:
        assert h200[key] == pytest.approx(h100[key], rel=0.15), key
