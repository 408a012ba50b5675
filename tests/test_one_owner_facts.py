"""Facts the cost layer writes as text reach the judges typed, from one owner each: a report's
``replica_group`` (cost.collectives.device_group) and ``shape`` (cost.facts.shape_of) texts are
never parsed by a judge, the module's header facts are the parser's, and a roof's critical
intensity has one formula (Chip.ridge)."""

from __future__ import annotations

import pytest
from conftest import ROOT

import hlo_roofline as hr
from hlo_roofline import chips
from hlo_roofline.cost import collectives, facts
from hlo_roofline.hlo import parser

COLLECTIVE_FIXTURES = [
    ROOT / "fixtures" / "collectives" / "fsdp_h100.hlo.txt.gz",
    ROOT / "fixtures" / "fsdp_train_step" / "tpu_v5e.hlo.txt",
    ROOT / "fixtures" / "ppermute" / "tpu_v5e.hlo.txt",
    ROOT / "fixtures" / "multislice",
]


def _collective_reports():
    for path in COLLECTIVE_FIXTURES:
        files = sorted(path.glob("*.hlo.txt*")) if path.is_dir() else [path]
        for file in files:
            yield hr.analyze_file(file)


def test_the_typed_groups_the_judges_read_are_what_the_text_says():
    """Each group text a fixture's rows hold: the typed value it was written from equals the
    text read back (as a report from a file is), so a judged and a re-read report agree."""
    texts = {
        text for report in _collective_reports() for text in report.ops["replica_group"] if text
    }
    assert any(">" in t for t in texts) and any("-" in t for t in texts)  # permutes and groups
    written = {text: collectives.device_group(text) for text in texts}
    collectives._WRITTEN.clear()
    for text, group in written.items():
        assert group is not None and group.text == text
        assert collectives.device_group(text) == group  # read back from the text alone


def test_no_judge_parses_a_column_of_a_report_it_was_given(monkeypatch):
    """Judging an analyzed report reads the shapes and groups the cost layer typed: no judge
    holds a parser of them, and with the parsers broken the verdicts are the same."""
    import importlib
    import pkgutil

    import hlo_roofline.judge

    for info in pkgutil.iter_modules(hlo_roofline.judge.__path__):
        module = importlib.import_module(f"hlo_roofline.judge.{info.name}")
        for parser_name in ("parse_shape", "parse_group_text", "dcn_slices", "parse_module"):
            assert not hasattr(module, parser_name), f"judge.{info.name} has {parser_name}"
    path = ROOT / "fixtures" / "fsdp_train_step" / "tpu_v5e.hlo.txt"
    report = hr.analyze_file(path)
    before = report.classify("v5e").ops

    def refuse(*args, **kwargs):
        raise AssertionError("a judge parsed a column")

    monkeypatch.setattr(collectives, "parse_group_text", refuse)
    monkeypatch.setattr(facts, "parse_shape", refuse)
    monkeypatch.setattr(parser, "parse_shape", refuse)
    from hlo_roofline.judge import compute

    compute.hbm_result_bytes.cache_clear()
    after = report.classify("v5e").ops
    assert before.equals(after)


def test_a_report_read_back_has_its_texts_typed_by_the_same_owner(tmp_path):
    path = ROOT / "fixtures" / "fsdp_train_step" / "tpu_v5e.hlo.txt"
    report = hr.analyze_file(path, chip="v5e")
    report.to_csv(tmp_path / "r.csv")
    collectives._WRITTEN.clear()
    facts._SHAPES.clear()
    again = hr.Report.read(tmp_path / "r.csv").classify("v5e")
    assert again.ops["t_comm_s"].tolist() == report.ops["t_comm_s"].tolist()
    assert facts._SHAPES  # the shapes the judges asked for, read back once each


@pytest.mark.parametrize("name", ["v5e", "h100"])
def test_the_summary_roofs_are_the_chips_critical_intensity(name):
    chip = chips.get(name)
    report = hr.analyze_file(ROOT / "fixtures" / "mlp_bf16" / "h100.hlo.txt", chip=name)
    for dtype, roof in report.summary["roofs"].items():
        if dtype != "vector":
            assert roof["critical_intensity"] == chip.critical_intensity(dtype)
    assert report.summary["roofs"]["vector"]["critical_intensity"] == chip.ridge(chip.vector_peak())
