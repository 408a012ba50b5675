"""The sharding explorer, live: candidates, constraints, workers that import the user's make_step,
a process pool and a Dask LocalCluster giving the same table, errors as rows, the CLI.

The live sweeps are tiny (a one-layer MLP, 3 layouts of v5e:2x2); the book's rules are checked on
committed fixtures in test_explore_book.py.
"""

from __future__ import annotations

import concurrent.futures
import math
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from hlo_roofline import cli, explorer
from hlo_roofline.cli import explore as cli_explore
from hlo_roofline.explorer.step import make_step_from, make_step_reference

MLP = FIXTURES / "explore" / "mlp.py"
TARGET = "v5e:2x2"
AXES = ("data", "tensor")
KNOBS = {"batch": [64]}
NUMBERS = [
    "step_s",
    "lower_s",
    "upper_s",
    "compute_s",
    "comm_s",
    "exposed_comm_s",
    "hbm_per_device",
]


def test_factorizations_are_every_ordered_product():
    for n, k in [(64, 3), (12, 2), (1, 3), (7, 2)]:
        found = explorer.factorizations(n, k)
        assert len(set(found)) == len(found)
        assert all(math.prod(f) == n and len(f) == k for f in found)
        brute = [
            f for f in __import__("itertools").product(range(1, n + 1), repeat=k)
            if math.prod(f) == n
        ]  # fmt: skip
        assert sorted(found) == sorted(brute)
    # 64 = 2^6 over 3 axes: C(6 + 2, 2) = 28 ordered factorizations
    assert len(explorer.factorizations(64, 3)) == 28


def test_constraints_prune_and_say_why():
    kept, pruned = explorer.candidates(
        "v5p:4x4x4",
        ("data", "fsdp", "tensor"),
        {"batch": [8, 16]},
        {"divides": {"tensor": 16}, "maximum": {"data": 8}, "fixed": {"fsdp": 4}},
    )
    sizes = {tuple(dict(c.sizes).values()) for c in kept}
    # fsdp 4, tensor divides 16, data <= 8; and the topology: libtpu lays a mesh axis along
    # whole torus axes of 4, so 2 × 4 × 8 and 8 × 4 × 2 do not map onto 4x4x4
    assert sizes == {(1, 4, 16), (4, 4, 4)}
    assert len(kept) == 2 * len(sizes)  # crossed with both batch values
    reasons = {tuple(s.values()): why for s, why in pruned}
    assert reasons[(2, 4, 8)].startswith("does not map onto v5p:4x4x4")
    assert reasons[(8, 4, 2)].startswith("does not map onto v5p:4x4x4")
    assert "maximum 8" in reasons[(16, 4, 1)]
    assert "fsdp must be 4" in reasons[(1, 1, 64)]
    limited, over = explorer.candidates("v5p:4x4x4", ("data", "tensor"), None, {"limit": 3})
    assert len(limited) == 3 and any("limit" in why for _, why in over)
    with pytest.raises(ValueError, match="unknown constraints"):
        explorer.Constraints.of({"maximun": {}})


def test_torus_axes_of_a_mesh_axis():
    """n_axes: a v5p:4x4x4 mesh axis of 4 lies along one torus axis, of 16 across two, of 64
    across all three (where the book's bandwidth multiplies)."""
    kept, _ = explorer.candidates("v5p:4x4x4", ("a", "b"), None, {"fixed": {"a": 4}})
    assert dict(kept[0].n_axes) == {"a": 1, "b": 2}
    kept, _ = explorer.candidates("v5p:4x4x4", ("a", "b"), None, {"fixed": {"a": 64}})
    assert dict(kept[0].n_axes)["a"] == 3


def test_book_constants_from_the_chip_database():
    from hlo_roofline import chips

    k = explorer.book_constants("v5p")
    v5p = chips.get("v5p")
    assert v5p.peak_flops("bf16") == k.C and k.W_ici == v5p.ici.link_bidirectional
    assert k.ratio == pytest.approx(2550, rel=0.01)  # the book's "ICI operational intensity"


def _closure(f: int):
    """A make_step no worker can import: cloudpickle carries it by value."""
    path = str(MLP)

    def make(mesh, batch):
        from hlo_roofline.explorer.step import make_step_from

        return make_step_from(("file", path, "make_mlp_step"))(mesh, batch=batch, d=128, f=f, layers=1)

    return make


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory):
    cache = tmp_path_factory.mktemp("explore-cache")
    assert make_step_reference(f"{MLP}:tiny") == ("file", str(MLP), "tiny")  # imported by path
    result = explorer.explore(
        f"{MLP}:tiny", TARGET, axes=AXES, knobs=KNOBS, jobs=2, cache=cache, tokens_per_step=64
    )
    return result, cache


def test_process_pool_sweep(pool_run):
    result, cache = pool_run
    table = result.table
    assert len(table) == 3 and set(table["status"]) == {"ok"}
    assert sorted(table["rank"]) == [1, 2, 3]
    assert table["tokens_per_s_per_chip"].is_monotonic_decreasing  # ranked by throughput
    for _, row in table.iterrows():
        report = result.reports[row["candidate"]]
        assert row["step_s"] == report.summary["step_expected_s"]
        assert row["lower_s"] == report.summary["step_bound_s"] <= row["step_s"]
        assert row["upper_s"] == report.summary["step_time_upper_s"]
        assert row["comm_s"] == pytest.approx(report.ops["t_comm_s"].sum())
        assert row["tokens_per_s_per_chip"] == pytest.approx(64 / row["step_s"] / 4)
        assert row["mfu_upper_bound"] == report.summary["mfu_upper_bound"]
        assert math.isnan(row["mfu_model"])  # no model FLOPs given
        assert row["why"].startswith("compiled: ")
    dp = table[table["data"] == 4].iloc[0]
    assert "book T1: B/X = 16 tokens" in dp["why"]  # 64 tokens over 4 chips
    entries = sorted(Path(cache).glob("*.hlo.txt"))
    assert len(entries) == 3  # one compile per candidate, kept


def test_a_rerun_compiles_nothing(pool_run):
    """Resumable: the second run finds every program in the cache (no new entry, same table)."""
    first, cache = pool_run
    before = {p.name: p.stat().st_mtime_ns for p in Path(cache).glob("*.hlo.txt")}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        again = explorer.explore(
            f"{MLP}:tiny", TARGET, axes=AXES, knobs=KNOBS, executor=pool, cache=cache,
            tokens_per_step=64, progress=False,
        )  # fmt: skip
    after = {p.name: p.stat().st_mtime_ns for p in Path(cache).glob("*.hlo.txt")}
    assert after == before
    assert again.table[NUMBERS].equals(first.table[NUMBERS])


def test_dask_local_cluster_gives_the_same_table(pool_run, tmp_path):
    """A closure (pickled by value) on two Dask worker processes: the pool's table again."""
    distributed = pytest.importorskip("distributed")
    first, _ = pool_run
    make = _closure(256)
    assert make_step_reference(make)[0] == "pickle"
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
            env={"HLO_ROOFLINE_CACHE_DIR": str(tmp_path)},  # the CLI's run below: no recompile
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        result = explorer.explore(
            make, TARGET, axes=AXES, knobs=KNOBS, executor=client, cache=tmp_path,
            tokens_per_step=64, progress=False,
        )  # fmt: skip
        csv = tmp_path / "cli.csv"  # the CLI on the same cluster: --scheduler ADDRESS
        cli_run = CliRunner().invoke(
            cli.main,
            ["explore", f"{MLP}:tiny", "--target", TARGET, "--axes", "data,tensor",
             "--knob", "batch=64", "--scheduler", cluster.scheduler_address, "--csv", str(csv)],
        )  # fmt: skip
    assert cli_run.exit_code == 0, cli_run.output
    by_cli = pd.read_csv(csv)
    assert list(by_cli["candidate"]) == list(first.table["candidate"])
    assert by_cli["step_s"].tolist() == pytest.approx(first.table["step_s"].tolist())
    assert list(result.table["candidate"]) == list(first.table["candidate"])
    for column in NUMBERS:
        assert result.table[column].tolist() == pytest.approx(first.table[column].tolist())


def test_a_failing_candidate_is_a_row_not_an_exception():
    def make(mesh, batch):
        if mesh.shape["tensor"] == 4:
            raise RuntimeError("no layout for tensor=4\nsecond line")
        return _closure(256)(mesh, batch)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = explorer.explore(
            make, TARGET, axes=AXES, knobs=KNOBS, executor=pool, cache=False, progress=False
        )
    bad = result.table[result.table["tensor"] == 4].iloc[0]
    assert bad["status"] == explorer.STATUS_ERROR == "error"
    assert bad["error"] == "RuntimeError: no layout for tensor=4"
    assert "no layout for tensor=4\nsecond line" in bad["traceback"]  # the user's, kept whole
    assert "in make" in bad["traceback"]
    assert not result.complete and list(result.failed["candidate"]) == [bad["candidate"]]
    assert pd.isna(bad["rank"])
    assert result.reports[bad["candidate"]] is None
    assert (result.table["status"] == "ok").sum() == 2
    text = cli_explore.table_text(result)  # the CLI prints it: dashes where nothing is known
    assert "error: RuntimeError: no layout for tensor=4" in text


def test_progress_bar_and_eta():
    import io

    stream = io.StringIO()
    bar = explorer.Progress(4, stream)
    for _ in range(4):
        bar.step("x")
    lines = stream.getvalue().split("\r")
    assert "1/4 compiled" in lines[1] and "ETA" in lines[1] and lines[-1].endswith("\n")


def test_cli_explore(pool_run, tmp_path, monkeypatch):
    _, cache = pool_run
    monkeypatch.setenv("HLO_ROOFLINE_CACHE_DIR", str(cache))
    csv = tmp_path / "t.csv"
    result = CliRunner().invoke(
        cli.main,
        ["explore", f"{MLP}:tiny", "--target", TARGET, "--axes", "data,tensor",
         "--knob", "batch=64", "--jobs", "1", "--tokens-per-step", "64",
         "--logdir", str(tmp_path / "logs"), "--csv", str(csv), "--model-flops", "3.84e8",
         "--json", str(tmp_path / "t.json")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "tok/s/chip" in result.stdout and "C/W_ici" in result.stdout
    assert " MFU " in result.stdout.splitlines()[0]  # the model FLOPs' MFU, not the bound
    doc = __import__("json").loads((tmp_path / "t.json").read_text())
    c = explorer.book_constants("v5e").C
    for row in doc["rows"]:  # --model-flops is the whole step's: each device does a quarter
        assert row["mfu_model"] == pytest.approx(3.84e8 / 4 / (row["step_s"] * c))
    assert csv.read_text().count("\n") == 4
    # the exploration keeps to its own directory of the logdir: 3 runs and the table
    assert [p.name for p in (tmp_path / "logs").iterdir()] == ["tiny@v5e-2x2"]
    runs = sorted(p.name for p in (tmp_path / "logs" / "tiny@v5e-2x2").iterdir())
    assert len(runs) == 4 and "hlo_roofline_explore.json" in runs
    assert "vs best" in result.stdout and "best" in result.stdout.split("vs best")[1]


def test_cli_constraints(pool_run, monkeypatch):
    """--fixed, --maximum, --divides prune as the API's constraints do (the one layout left is in
    the cache: nothing compiles)."""
    _, cache = pool_run
    monkeypatch.setenv("HLO_ROOFLINE_CACHE_DIR", str(cache))
    result = CliRunner().invoke(
        cli.main,
        ["explore", f"{MLP}:tiny", "--target", TARGET, "--axes", "data,tensor",
         "--knob", "batch=64", "--jobs", "1", "--maximum", "data=2", "--divides", "tensor=2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.endswith(" ok")]
    assert len(rows) == 1 and rows[0].split()[1:3] == ["2", "2"]  # data 2 × tensor 2 only
    assert "2 layouts pruned" in result.stdout


def test_model_flops_reach_the_reports_summary(pool_run):
    """``model_flops`` (the whole step's, a function of the knobs) goes to each candidate's
    analyze per device; the row's MFU is the summary's, never computed again. A re-run on the
    same cache: no compile."""
    _, cache = pool_run
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        result = explorer.explore(
            f"{MLP}:tiny", TARGET, axes=AXES, knobs=KNOBS, executor=pool, cache=cache,
            model_flops=lambda batch: 6 * batch * 1e6, progress=False,
        )  # fmt: skip
    for _, row in result.table.iterrows():
        s = result.reports[row["candidate"]].summary
        assert s["model_flops"] == pytest.approx(6 * 64 * 1e6 / 4)  # per device of 4
        assert row["mfu_model"] == s["mfu_model"]
        assert s["mfu_model"] == pytest.approx(
            s["model_flops"] / (s["step_expected_s"] * result.constants.C)
        )
        assert row["mfu_upper_bound"] == s["mfu_upper_bound"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["nofile.py:f", "--target", TARGET], "no such file"),
        (["x", "--target", TARGET], "is not FILE.py:NAME"),
        ([f"{MLP}:tiny", "--target", "v9z:1x1"], ""),
        ([f"{MLP}:tiny", "--target", TARGET, "--knob", "batch"], "NAME=V1,V2"),
        ([f"{MLP}:tiny", "--target", TARGET, "--fixed", "data"], "is not AXIS=N"),
        ([f"{MLP}:tiny", "--target", TARGET, "--maximum", "data=0"], "is not AXIS=N"),
        ([f"{MLP}:tiny", "--target", TARGET, "--divides", "pipe=2"], "is not one of --axes"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args, message):
    result = CliRunner().invoke(cli.main, ["explore", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and message in result.output


def test_why_states_the_books_thresholds():
    """The rules in ``why``, with v5p's C/W_ici = 2,550: T1 per batch axis span, T2 on the model
    axis (n_axes·F/2550), T3 for FSDP×TP (2·2550²/F)."""
    k = explorer.book_constants("v5p")
    c = explorer.Candidate(
        (("data", 1), ("fsdp", 4), ("tensor", 16)),
        (),
        (("data", 0), ("fsdp", 1), ("tensor", 2)),
    )
    row = {"status": "ok", "bound": "communication", "exposed_comm_share": 0.25}
    text = explorer.why(row, c, k, tokens=4 * 16 * 100, hidden=8192)
    threshold = 2 * 8192 / k.ratio  # 6.43: a tensor axis of 16 over two torus axes is past it
    assert f"= {threshold:.3g} ⇒ communication-bound on the model axis" in text
    assert "tensor axis 16 >" in text
    assert f"B/X = 1,600 tokens ≤ C/(W_ici·1) = {k.ratio:,.0f}" in text  # 6,400 tokens / fsdp 4
    assert f"2·(C/W_ici)²/F = {2 * k.ratio**2 / 8192:,.0f}" in text
    big = explorer.why(row, c, k, tokens=4 * 16 * 10_000, hidden=8192)
    assert "⇒ compute-bound over fsdp" in big and "⇒ compute-bound (FSDP×TP)" in big


def test_how_a_worker_finds_make_step():
    """By module path when its module is importable, by file path when it was loaded from a file
    no package holds, by value (cloudpickle) otherwise; each resolves to the same function."""
    ref = make_step_reference(explorer.factorizations)
    assert ref == ("module", "hlo_roofline.explorer.layouts", "factorizations")
    assert make_step_from(ref) is explorer.factorizations
    from_file = make_step_from(("file", str(MLP), "make_mlp_step"))
    assert make_step_reference(from_file) == ("file", str(MLP), "make_mlp_step")
    assert make_step_reference("pkg.mod:make") == ("module", "pkg.mod", "make")
    kind, data = make_step_reference(lambda mesh: None)
    assert kind == "pickle" and callable(make_step_from((kind, data)))
    with pytest.raises(ValueError, match=r"FILE\.py:NAME"):
        make_step_reference("no_colon")
