"""benchmarks/fixture_reports.py, the check that a refactor changes no report: it writes the same
bytes twice, judges each fixture on the chip its path names, and shows a changed number."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import fixture_reports


def test_the_chip_is_the_one_the_path_names():
    assert fixture_reports.chip_of(ROOT / "fixtures/mlp_bf16/tpu_v5e.hlo.txt") == "v5e"
    assert fixture_reports.chip_of(ROOT / "fixtures/attention/h100.hlo.txt") == "h100"
    assert fixture_reports.chip_of(ROOT / "fixtures/tpu_heldout/x.7x.hlo.txt.gz") == "7x"
    assert fixture_reports.chip_of(ROOT / "fixtures/mlp_f32/cpu.hlo.txt") is None


def test_two_runs_write_the_same_bytes_and_a_changed_model_shows(tmp_path, monkeypatch):
    first, second, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert fixture_reports.write_all(first, limit=4) == 4
    fixture_reports.write_all(second, limit=4)
    written = sorted(p.name for p in first.iterdir())
    assert len(written) == 8 and not any(name.endswith(".error") for name in written)
    assert written == sorted(p.name for p in second.iterdir())
    assert all((first / n).read_bytes() == (second / n).read_bytes() for n in written)
    # the same programs judged on another chip: every report's numbers move
    monkeypatch.setattr(fixture_reports, "chip_of", lambda path: "v6e")
    fixture_reports.write_all(other, limit=4)
    assert all((first / n).read_bytes() != (other / n).read_bytes() for n in written)
