"""What the explorer ranks on, and what it records beside the ranking.

Throughput, not step time, when a knob changes the work: tokens (an expression of the knobs, or
what make_step returns beside its step), else model FLOPs, else the compiled program's FLOP/s;
step time only among candidates doing the same work. The API and the CLI rank alike. Compiler
flags per exploration reach every report, and candidates compiled under different flags are never
ranked together. Explorations written to one logdir keep to their own directories.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from hlo_roofline import cli, explorer
from hlo_roofline.explorer.workers import _worker_environment

MLP = FIXTURES / "explore" / "mlp.py"
TARGET = "v5e:2x2"
AXES = ("data", "tensor")


def _table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"status": "ok", **r} for r in rows])


def test_a_knob_that_changes_the_work_ranks_by_throughput():
    """The issue's case: batch 32768 and 131072 with tokens per step a function of the batch.
    The large batch takes 3.2× the step for 4× the tokens: it is the faster layout per token,
    and ranks first, where ranking by step time (or by one number of tokens for both) put every
    large-batch layout last."""
    rows = [
        {"candidate": "small", "batch": 32768, "step_s": 1.0, "tokens_per_s_per_chip": 32768 / 1.0},
        {"candidate": "large", "batch": 131072, "step_s": 3.2,
         "tokens_per_s_per_chip": 131072 / 3.2},
    ]  # fmt: skip
    ranked = explorer.rank(_table(rows), ["batch"])
    assert explorer.rank_by(_table(rows), ["batch"]) == "tokens_per_s_per_chip"
    assert list(ranked["candidate"]) == ["large", "small"]
    assert ranked.iloc[1]["gap_to_best"] == pytest.approx((131072 / 3.2) / 32768 - 1)


def test_without_tokens_the_programs_flop_rate_not_the_step():
    rows = [
        {"candidate": "small", "batch": 8, "step_s": 1.0, "flops_per_s_per_chip": 1e12},
        {"candidate": "large", "batch": 32, "step_s": 3.0, "flops_per_s_per_chip": 1.3e12},
    ]
    assert explorer.rank_by(_table(rows), ["batch"]) == explorer.FLOPS_COLUMN
    assert list(explorer.rank(_table(rows), ["batch"])["candidate"]) == ["large", "small"]
    same = [{**r, "batch": 8} for r in rows]  # the same work: the shorter step is the better
    assert explorer.rank_by(_table(same), ["batch"]) == explorer.STEP_COLUMN
    assert list(explorer.rank(_table(same), ["batch"])["candidate"]) == ["small", "large"]
    flops = [{**r, "model_flops_per_s_per_chip": v} for r, v in zip(rows, (2e12, 1e12), strict=True)]
    assert explorer.rank_by(_table(flops), ["batch"]) == "model_flops_per_s_per_chip"
    assert list(explorer.rank(_table(flops), ["batch"])["candidate"]) == ["small", "large"]


def test_different_compiler_flags_are_never_ranked_together():
    rows = [
        {"candidate": "a", "step_s": 1.0, "flags": ""},
        {"candidate": "b", "step_s": 2.0, "flags": ""},
        {"candidate": "c", "step_s": 1.5, "flags": "XLA_FLAGS=--x"},
    ]
    ranked = explorer.rank(_table(rows)).set_index("candidate")
    assert ranked.loc["a", "rank"] == 1 and ranked.loc["b", "rank"] == 2
    assert ranked.loc["c", "rank"] == 1 and ranked.loc["c", "gap_to_best"] == 0


@pytest.mark.parametrize(
    "text, knobs, value",
    [
        ("batch*2048", {"batch": 8}, 16384.0),
        ("6 * 1.3e9 * (batch // 2) ** 2", {"batch": 4}, 6 * 1.3e9 * 4),
        ("-batch + 3*batch", {"batch": 5}, 10.0),
        ("1e3", {}, 1000.0),
    ],
)
def test_knob_expressions(text, knobs, value):
    assert explorer.KnobExpression(text, knobs)(**knobs) == pytest.approx(value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("__import__('os').system('true')", "only numbers, knob names"),
        ("batch.bit_length()", "only numbers, knob names"),
        ("[1][0]", "only numbers"),
        ("True", "only numbers"),
        ("bach * 2", "'bach' is not a knob (knobs: batch); did you mean 'batch'?"),
        ("batch *", "is not an expression"),
        ("batch / 0", "division by zero"),
        ("batch - 8", "must be a finite number above 0"),
        ("10.0 ** 400", "must be a finite number above 0"),
    ],
)
def test_knob_expressions_refuse_what_is_not_arithmetic(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        explorer.KnobExpression(text, ["batch"], "tokens_per_step")(batch=8)


def test_a_text_knob_is_no_number_in_an_expression():
    with pytest.raises(ValueError, match="knob policy='full' is no number"):
        explorer.KnobExpression("policy * 2", ["policy"])(policy="full")


# -- live: a knob-varying exploration, the API and the CLI alike ---------------------------------

WORK = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(MLP.parent)!r})
    from mlp import make_mlp_step

    def make_step(mesh, batch: int = 64):
        fn, args, jit_kwargs = make_mlp_step(mesh, batch=batch, d=128, f=256, layers=1)
        return fn, args, jit_kwargs, {{"tokens": batch}}
""")


@pytest.fixture(scope="module")
def varying(tmp_path_factory):
    cache = tmp_path_factory.mktemp("rank-cache")
    result = explorer.explore(
        f"{MLP}:tiny", TARGET, axes=AXES, knobs={"batch": [64, 256]}, jobs=2, cache=cache,
        tokens_per_step="batch", progress=False,
    )  # fmt: skip
    return result, cache


def test_the_api_and_the_cli_rank_a_knob_varying_exploration_alike(varying, tmp_path, monkeypatch):
    result, cache = varying
    table = result.table
    assert explorer.rank_by(table, ["batch"]) == "tokens_per_s_per_chip"
    assert table["tokens_per_s_per_chip"].is_monotonic_decreasing
    assert (table["tokens_per_step"] == table["batch"]).all()
    for _, row in table.iterrows():
        assert row["tokens_per_s_per_chip"] == pytest.approx(row["batch"] / row["step_s"] / 4)
    monkeypatch.setenv("HLO_ROOFLINE_CACHE_DIR", str(cache))
    csv = tmp_path / "cli.csv"
    run = CliRunner().invoke(
        cli.main,
        ["explore", f"{MLP}:tiny", "--target", TARGET, "--axes", "data,tensor", "--knob",
         "batch=64,256", "--tokens-per-step", "batch", "--jobs", "1", "--csv", str(csv)],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert "ranked by tokens/s per chip" in run.stdout
    assert list(pd.read_csv(csv)["candidate"]) == list(table["candidate"])


def test_make_step_returns_its_own_work(varying, tmp_path):
    """tokens returned beside (fn, args, jit_kwargs): the same ranking as the expression."""
    result, cache = varying
    (tmp_path / "work.py").write_text(WORK)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        own = explorer.explore(
            f"{tmp_path / 'work.py'}:make_step", TARGET, axes=AXES, knobs={"batch": [64, 256]},
            executor=pool, cache=cache, progress=False,
        )  # fmt: skip
    assert list(own.table["candidate"]) == list(result.table["candidate"])
    assert own.table["tokens_per_s_per_chip"].tolist() == pytest.approx(
        result.table["tokens_per_s_per_chip"].tolist()
    )


def test_without_work_the_cli_ranks_by_the_programs_flop_rate(varying, monkeypatch):
    _, cache = varying
    monkeypatch.setenv("HLO_ROOFLINE_CACHE_DIR", str(cache))
    run = CliRunner().invoke(
        cli.main,
        ["explore", f"{MLP}:tiny", "--target", TARGET, "--axes", "data,tensor", "--knob",
         "batch=64,256", "--jobs", "1"],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    assert "ranked by the compiled program's FLOP/s per chip" in run.stdout
    assert "TFLOP/s/chip" in run.stdout.splitlines()[0]


def test_the_book_line_agrees_with_the_per_pass_columns(varying):
    """Each row's per-pass words restate its columns: the matmuls' time against the collectives'
    time of the same pass, the quantities the book's T1–T3 compare."""
    result, _ = varying
    for _, row in result.table.iterrows():
        report = result.reports[row["candidate"]]
        assert row["matmul_bwd_s"] + row["matmul_fwd_s"] <= report.ops["t_compute_s"].sum()
        for short in explorer.PASSES.values():  # the exposed part of a pass's collective time
            assert 0 <= row[f"exposed_{short}_s"] <= row[f"collective_{short}_s"] + 1e-15
        exposed = row["exposed_fwd_s"] + row["exposed_bwd_s"]
        assert exposed <= report.summary["exposed_comm_s"] * (1 + 1e-9)
        for name, short in explorer.PASSES.items():
            mm, comm = row[f"matmul_{short}_s"], row[f"collective_{short}_s"]
            if mm > 0:
                side = "compute" if mm >= comm else "communication"
                assert f"{name} matmuls" in row["why"]
                assert f"⇒ {side}-bound" in row["why"].split(f"{name} matmuls")[1].split(";")[0]
        if "book T1" in row["why"]:  # T1 is about the backward pass: its verdict sits beside it
            book = row["why"].split("book T1")[1].split("⇒ ")[1].split("-bound")[0]
            compiled = "compute" if row["matmul_bwd_s"] >= row["collective_bwd_s"] else "communication"
            assert book == compiled, row["why"]


def test_compiler_flags_reach_every_report(varying):
    """--xla-flag goes to every worker's XLA_FLAGS and into the report's summary and the row; on
    an executor whose workers lack it, the candidate fails saying so."""
    _, cache = varying
    flag = "--xla_dump_hlo_pass_re=nothing_matches_this"
    result = explorer.explore(
        f"{MLP}:tiny", TARGET, axes=AXES, knobs={"batch": [64]}, jobs=1, cache=cache,
        constraints={"fixed": {"data": 4}}, xla_flags=[flag], progress=False,
    )  # fmt: skip
    row = result.table.iloc[0]
    assert row["status"] == "ok" and flag in row["flags"]
    assert flag in result.reports[row["candidate"]].summary["compiler_flags"]["XLA_FLAGS"]
    assert result.document()["flags"] == {"xla": [flag]}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        lacking = explorer.explore(
            f"{MLP}:tiny", TARGET, axes=AXES, knobs={"batch": [64]}, executor=pool, cache=cache,
            constraints={"fixed": {"data": 4}}, xla_flags=[flag], progress=False,
        )  # fmt: skip
    assert lacking.table.iloc[0]["status"] == explorer.STATUS_ERROR
    assert "environment lacks the compiler flag(s)" in lacking.table.iloc[0]["error"]


def test_flags_from_toml(tmp_path):
    (tmp_path / "f.toml").write_text('xla = ["--a=1"]\nlibtpu = ["--b"]\n')
    assert explorer.read_flags_file(tmp_path / "f.toml") == {"xla": ["--a=1"], "libtpu": ["--b"]}
    (tmp_path / "bad.toml").write_text('xla = "--a"\n')
    with pytest.raises(ValueError, match="must be a list"):
        explorer.read_flags_file(tmp_path / "bad.toml")
    (tmp_path / "other.toml").write_text('gpu = ["--a"]\n')
    with pytest.raises(ValueError, match="unknown key"):
        explorer.read_flags_file(tmp_path / "other.toml")
    env = _worker_environment({"XLA_FLAGS": ["--x"]})
    assert env["XLA_FLAGS"].split()[-1] == "--x"


# -- one logdir, several explorations ------------------------------------------------------------


def _exploration(name: str, labels: list[str], varying) -> explorer.Exploration:
    result, _ = varying
    keep = result.table[result.table["candidate"].isin(labels)]
    reports = {label: result.reports[label] for label in labels}
    return explorer.Exploration(
        keep, reports, [], result.constants, result.target, result.axes, name=name
    )


def test_explorations_in_one_logdir_are_isolated(varying, tmp_path):
    """Before: two explorations into one logdir mixed their runs (a row could open another
    exploration's report). Now each writes its own directory; writing one again removes the
    runs it no longer has; the gate asks which one a logdir of several means."""
    result, _ = varying
    labels = list(result.table["candidate"])
    _exploration("first", labels, varying).write_tensorboard(tmp_path)
    _exploration("second", labels[:2], varying).write_tensorboard(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first", "second"]
    second = json.loads((tmp_path / "second" / "hlo_roofline_explore.json").read_text())
    assert [r["candidate"] for r in second["rows"]] == labels[:2]
    with pytest.raises(explorer.ExplorationError, match="holds 2 explorations"):
        explorer.read_table(tmp_path)
    assert len(explorer.read_table(tmp_path / "first")) == len(labels)
    _exploration("first", labels[:1], varying).write_tensorboard(tmp_path)
    runs = sorted(p.name for p in (tmp_path / "first").iterdir() if p.is_dir())
    assert runs == [labels[0]]  # the others' runs are gone with their rows
    assert explorer.default_name(f"{MLP}:tiny", "v5e:2x2") == "tiny@v5e-2x2"


def test_a_refused_program_has_no_step(tmp_path):
    """A program the compiler refuses (out of memory) is a report without ops: its row does not
    fit, with no step time (NaN, not 0.0) and no rank."""
    import gzip

    from hlo_roofline.report import Report

    here = FIXTURES / "explore" / "fit"
    table = pd.read_csv(here / "table.csv")
    refused = table[table["step_s"].fillna(0) == 0]
    assert len(refused), "the fit sweep has refused programs"
    label = refused.iloc[0]["candidate"]
    with gzip.open(here / f"{label}.json.gz", "rt") as f:
        report = Report.from_dict(json.load(f))
    assert report.ops.empty
    sizes = (("data", 64), ("fsdp", 1), ("tensor", 1), ("rest", 1))
    knobs = tuple((k, v) for k, v in refused.iloc[0].items()
                  if k in ("batch", "d", "f", "layers", "optimizer"))  # fmt: skip
    candidate = explorer.Candidate(sizes, knobs)
    row = explorer.row(candidate, {"status": "ok", "error": "", "compile_s": 1.0}, report,
                       explorer.book_constants("v5p"))  # fmt: skip
    assert row["status"] == explorer.STATUS_NO_FIT
    assert math.isnan(row["step_s"]) and math.isnan(row["exposed_comm_share"])
    assert "refused by the compiler" in row["why"]
    assert Path(here).is_dir()


def test_the_gate_compares_a_layout_with_the_best_under_its_own_flags():
    from hlo_roofline import check as gate

    rows = [
        {"candidate": "a", "data": 1, "step_s": 1.0, "flags": ""},
        {"candidate": "b", "data": 2, "step_s": 2.0, "flags": ""},
        {"candidate": "c", "data": 1, "step_s": 0.5, "flags": "XLA_FLAGS=--x"},
    ]
    table = explorer.rank(_table(rows))
    result = gate.explore_gate(table, "b", 150)
    assert result.best == "a" and result.gap == pytest.approx(1.0) and result.passed
