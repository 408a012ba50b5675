"""The hint fields of a matmul (``hint_reason``, ``ridge_m``, ``ridge_k``, ``mxu_waste``) and the
words rendered from them: against the book's crossovers ("How to Scale Your Model": docs/book.md), the
model's own verdict at the sizes a hint names, and every committed fixture on five chips."""

from __future__ import annotations

import math
import warnings

import pytest
from conftest import FIXTURES, SLOW
from test_verdicts import V5E_BOOK, _s8_matmul, dot_module

import hlo_roofline as hr
from hlo_roofline import chips

CHIPS = ("v5e", "v5p", "v6e", "h100", "b200")
# (lhs, rhs, result, fused convert of the rhs)
TYPES = [
    ("bf16", "bf16", "bf16", False),
    ("s8", "s8", "s32", False),  # int8 in, int32 out: 1, 1 and 4 bytes per element
    ("bf16", "s8", "bf16", True),  # int8 weights converted inside the fusion
    ("f32", "f32", "f32", False),
]


def _matmul(report):
    ops = report.model_frame()
    return ops[ops["mm_k"] > 0].iloc[0]


def _analyze(text, chip):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hr.analyze_hlo(text, chip=chip)


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize(("lhs", "rhs", "out", "fused"), TYPES)
def test_the_verdict_flips_at_the_hinted_rows(chip, lhs, rhs, out, fused):
    """x[M,4096] @ w[4096,8192]: compute-bound at ⌈ridge_m⌉ rows, memory-bound one row fewer;
    and the ridge is the same whichever M the hint is read at (exact, not an average over the
    op's bytes that drifts with M)."""

    def at(m):
        return _matmul(_analyze(dot_module(m, 4096, 8192, lhs, rhs, out, fused), chip))

    small, large = at(16), at(4096)
    assert small.hint_reason == large.hint_reason == "ridge_m"
    assert small.ridge_m == pytest.approx(large.ridge_m, rel=1e-9)
    ridge = math.ceil(small.ridge_m)
    assert (at(ridge).bound, at(ridge - 1).bound) == ("compute", "memory")


@pytest.mark.parametrize("chip", CHIPS)
def test_int8_to_int32_ridge_is_the_exact_root(chip):
    """2MNK / (MK + KN + 4MN) = ridge (s8 operands, s32 result) solved for M by hand."""
    ridge = chips.get(chip).critical_intensity("int8")
    k, n = 4096, 8192
    expected = ridge * k * n / (2 * n * k - ridge * (k + 4 * n))
    got = _matmul(_analyze(dot_module(64, k, n, "s8", "s8", "s32"), chip))
    assert got.ridge_m == pytest.approx(expected, rel=1e-9)


def test_book_r3_r4_crossovers():
    """bf16 (R3) and int8 with an int8 result (R4) on v5e: B ≈ 255.2 for D = F = 8192, and the
    book's 240 once the weights dwarf the activations."""
    bf16 = _matmul(_analyze(dot_module(64, 8192, 8192), V5E_BOOK))
    int8 = _matmul(_analyze(dot_module(64, 8192, 8192, "s8", "s8", "s8"), V5E_BOOK))
    assert bf16.ridge_m == pytest.approx(255.2, abs=0.1)
    assert int8.ridge_m == pytest.approx(255.2, abs=0.3)
    huge = _matmul(_analyze(dot_module(64, 1 << 24, 1 << 24), V5E_BOOK))
    assert huge.ridge_m == pytest.approx(240.2, abs=0.1)


@pytest.mark.parametrize(("d", "book"), [(8192, 127.6), (4096, 136.1), (1024, 226.3)])
def test_book_r5_int8_weights_crossover(d, book):
    """bf16[B,D] · convert(int8[D,F]) → bf16: the book's exact bytes 2BD + DF + 2BF. The model
    also counts the fused convert's D·F operations as work, which moves the ridge 0.4% lower."""
    fused = _matmul(_analyze(dot_module(64, d, d, rhs="s8", fuse_convert=True), V5E_BOOK))
    assert (fused.mm_lhs_bytes, fused.mm_rhs_bytes, fused.mm_out_bytes) == (2, 1, 2)
    assert fused.ridge_m == pytest.approx(book, rel=0.006)
    assert fused.ridge_m < book


def test_book_r8_weights_in_vmem_crossover():
    """The VMEM question: compute-bound once B > 11 (10.96 with exact bytes and the book's 22 ×
    HBM bandwidth for VMEM; the database's VMEM figure puts the ridge at 21.9 FLOP/B, not 21.8)."""
    dot = _matmul(_analyze(_s8_matmul(10, "{1,0:S(1)}"), V5E_BOOK))
    assert 10 < dot.ridge_m < 11
    assert dot.ridge_m == pytest.approx(10.96, abs=0.03)


def _batched(batch: int, m: int, d: int = 8192, f: int = 8192) -> str:
    """int8[B,M,D] ·_D int8[B,D,F]: every batch element brings its own weights (book R6)."""
    return f"""HloModule r6
ENTRY %e (x: s8[{batch},{m},{d}], w: s8[{batch},{d},{f}]) -> s8[{batch},{m},{f}] {{
  %x = s8[{batch},{m},{d}]{{2,1,0}} parameter(0)
  %w = s8[{batch},{d},{f}]{{2,1,0}} parameter(1)
  ROOT %d = s8[{batch},{m},{f}]{{2,1,0}} dot(%x, %w), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
}}
"""


def test_per_batch_weights_advise_rows_per_batch_element_not_a_larger_batch():
    """R6: growing the batch leaves the intensity where it is; the rows each batch element
    multiplies with its weights (M) is what reaches the ridge, at the M the hint names."""
    one_row = _matmul(_analyze(_batched(128, 1), V5E_BOOK))
    assert one_row.bound == "memory" and one_row.hint_reason == "batched_weights"
    assert "whatever the batch" in one_row.hint and "per batch element" in one_row.hint
    twice = _matmul(_analyze(_batched(256, 1), V5E_BOOK))
    assert twice.intensity == pytest.approx(one_row.intensity) and twice.bound == "memory"
    ridge = math.ceil(one_row.ridge_m)
    assert _matmul(_analyze(_batched(4, ridge), V5E_BOOK)).bound == "compute"
    assert _matmul(_analyze(_batched(4, ridge - 1), V5E_BOOK)).bound == "memory"


@pytest.mark.parametrize("chip", ["h100", "b200"])
def test_split_k_gemm_is_told_the_rows_that_would_make_it_compute_bound(chip):
    """XLA:GPU compiles f16 [64,4096] × [4096,8192] as a gemm fusion batched over 4 slices of K
    (bitcasts of x and w) and a reduction of the partial sums. Its batch is not per-batch weights:
    at B = 512 the same GEMM (compiled unsplit) is compute-bound, and the hint says so."""
    report = hr.analyze_hlo(FIXTURES / "split_k_gemm" / "h100.hlo.txt", chip=chip)
    gemm = _matmul(report)
    assert (gemm.mm_batch, gemm.mm_k, gemm.mm_split_k) == (4, 1024, 4)
    assert gemm.bound == "memory" and gemm.hint_reason == "split_k"
    assert gemm.ridge_m < 512 and "cannot" not in gemm.hint
    assert _matmul(_analyze(dot_module(512, 4096, 8192, "f16", "f16", "f16"), chip)).bound == (
        "compute"
    )


def test_no_row_count_helps_names_the_contracting_size():
    """8192×256 · 256×256: no M reaches the ridge; the K named is where the verdict flips."""
    hint = _matmul(_analyze(dot_module(8192, 256, 256), V5E_BOOK))
    assert hint.hint_reason == "ridge_k" and math.isnan(hint.ridge_m)
    k = math.ceil(hint.ridge_k)
    for longer in (k, k + 1, k + 100):  # from it on (the MXU pads K: never less work)
        assert _matmul(_analyze(dot_module(8192, longer, 256), V5E_BOOK)).bound == "compute"
    whole_tiles = (k - 1) // 128 * 128  # below it, a K of whole MXU tiles is memory-bound
    assert _matmul(_analyze(dot_module(8192, whole_tiles, 256), V5E_BOOK)).bound == "memory"


def _fixture_reports():
    for path in sorted(FIXTURES.glob("*/*.hlo.txt")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield path, hr.analyze_hlo(path)


def assert_hints_agree(ops, where: str) -> int:
    """The bound a hint names is its row's, and a row with a ridge M is compute-bound exactly
    when it has that many rows; the number of hinted rows checked."""
    checked = 0
    hinted = ops[ops["hint_reason"].isin(["ridge_m", "ridge_k", "unreachable",
                                           "batched_weights", "split_k"])]  # fmt: skip
    for op in hinted.itertuples():
        other = "memory" if op.bound == "compute" else "compute"
        here = f"{where}: {op.name}: {op.hint}"
        assert op.hint.startswith(f"{op.bound}-bound"), here
        assert f"{other}-bound" not in op.hint, here
        if op.hint_reason != "split_k" and op.bound != "communication":
            if not math.isnan(op.ridge_m):  # the rows at which the verdict flips
                past = op.mm_m >= op.ridge_m * (1 - 1e-9)
                assert past == (op.bound == "compute"), here
            elif not math.isnan(op.ridge_k):  # no M helps: then K does, or nothing
                assert op.bound == "memory" and op.mm_k < op.ridge_k, here
        checked += 1
    return checked


@SLOW
def test_a_hint_never_contradicts_its_rows_bound():
    """Every committed fixture judged on five chips: the bound a hint names is the row's, and a
    row with a ridge M is compute-bound exactly when it has that many rows."""
    checked = 0
    for path, report in _fixture_reports():
        if not (report.model_frame()["mm_k"] > 0).any():
            continue
        for chip in CHIPS:
            ops = report.classify(chip).model_frame()
            checked += assert_hints_agree(ops, f"{path.relative_to(FIXTURES)} on {chip}")
    assert checked > 500


@pytest.mark.parametrize("n", [8, 16])
def test_a_ridge_below_one_row_is_every_m_not_m_zero(n):
    """x[M,2] @ w[2,N] with N and K far below v5e's 128-wide MXU (N at least 8: fewer columns
    would stream through the array instead, compute.streams_columns): the
    padded MXU work (2·128·128 per row) outweighs the bytes (2·(2 + N) per row) at any M, so the
    ridge M is below one row. The hint says every M reaches the ridge (the
    model's own verdict at M=1 agrees), never "M≈0", and the CLI's column says ``any``."""
    from hlo_roofline.cli.render import _rows

    one = _matmul(_analyze(dot_module(1, 2, n), "v5e"))
    assert one.bound == "compute"  # one row already past the ridge
    op = _matmul(_analyze(dot_module(2048, 2, n), "v5e"))
    assert op.bound == "compute" and op.ridge_m < 1
    assert "every M reaches the ridge" in op.hint and "M≈" not in op.hint
    assert _rows(op.ridge_m) == "any"


@SLOW
def test_no_fixture_hint_names_m_zero():
    """Across every committed fixture on five chips, a hint names a ridge M of at least one row."""
    named = 0
    for _, report in _fixture_reports():
        for chip in CHIPS:
            ops = report.classify(chip).model_frame()
            hints = ops.loc[ops["hint"].str.contains("M≈", regex=False), ["hint", "ridge_m"]]
            assert (hints["ridge_m"] >= 1).all(), hints[hints["ridge_m"] < 1].to_string()
            assert not hints["hint"].str.contains("M≈0[ ;)]|M≈0$", regex=True).any()
            named += len(hints)
    assert named > 0
