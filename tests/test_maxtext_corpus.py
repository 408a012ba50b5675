"""A real client's programs: MaxText 0.2.5's train step and a Flax NNX train step, compiled
compile-only by their own tools (``fixtures/maxtext/generate.py``, ``fixtures/nnx/generate.py``)
and held to the numbers those tools state: MaxText's ``calculate_tflops_training_per_device``, the
compiler's ``memory_analysis()``, and the HLO's own collective instructions, counted here
independently of ``hlo_roofline/hlo``. Reads only committed files; compiles nothing.

Some configs need fixes made on other branches (the name of each test says what it checks; the
comment at ``NEEDS`` says which fix a fixture waits for). They are plain tests, not xfails: they
fail until those branches are merged.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import re
import shutil
import warnings
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_hints import assert_hints_agree

import hlo_roofline as hr

CORPUS = [FIXTURES / "maxtext", FIXTURES / "nnx"]
RECORDS = sorted(p for folder in CORPUS for p in folder.glob("*.json"))
MAXTEXT = [p for p in RECORDS if p.parent.name == "maxtext"]
DUMPS = sorted((FIXTURES / "maxtext").glob("*.dump"))

# What each fixture waits for, from the helpers working in parallel (for the coordinator):
#   parser  - splash attention's multi-line frontend_attributes={kernel_metadata={...}} (every
#             MaxText TPU config), and `%x#N` operands in --xla_dump_to files (every dump)
#   kernels - Pallas (tpu_custom_call) splash attention and megablox gmm priced, not unknown
#   gates   - the all-reduce-scatter kCustom fusions priced as the reduce-scatter they are
#   sparsecore - MaxText's embedding gather offloaded to SparseCore (`gather_offload_async_start`
#             custom-call-start/-update/-done) priced: no helper owns it yet
NEEDS = {
    "default_v5p8": "parser, kernels, gates, sparsecore",
    "llama2_7b_v5e16": "parser, kernels, gates",
    "mixtral_8x7b_v5p8": "parser, kernels (splash and megablox gmm), gates, sparsecore",
    "default_h100x8": "parser (its dump only)",
    "fsdp_v5p": "gates",
}
CHIP_OF = {"v5p": "v5p", "v5e": "v5e", "a3": "h100"}  # MaxText's compile_topology → chip


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def _record(path: Path) -> dict:
    return json.loads(path.read_text())


@functools.cache
def _text(path: Path) -> str:
    with gzip.open(path.with_name(path.stem + ".hlo.txt.gz"), "rt") as f:
        return f.read()


@functools.cache
def _report(path: Path) -> hr.Report:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hr.analyze_hlo(_text(path))


def _chip(record: dict) -> str:
    topology = record.get("topology") or record["target"]
    return CHIP_OF[re.split(r"[-:]", topology)[0]]


def dot_flops(ops) -> float:
    """2·batch·M·N·K of every matmul row, times its executions: the matmuls' own work (a row's
    ``flops`` also holds the elementwise work fused around the dot). Not the matmuls XLA:TPU
    makes of a cumsum (MoE routing's reduce-window becomes a triangular 128×128×128 matmul):
    they are not the model's matmuls MaxText counts."""
    mm = ops[(ops["mm_k"] > 0) & ~ops["op_name"].str.contains("reduce-window", regex=False)]
    return float((2.0 * mm["mm_batch"] * mm["mm_m"] * mm["mm_n"] * mm["mm_k"] * mm["count"]).sum())


# -- MaxText's model arithmetic, from the config the JSON records -------------------------------


def layer_forward_flops(c: dict) -> dict[str, float]:
    """Forward matmul FLOPs of one decoder layer per device, term by term as MaxText's
    calculate_tflops_training_per_device writes them (dense FFN or routed experts)."""
    tokens = c["per_device_batch_size"] * c["max_target_length"]
    e, d, hq, hkv = c["emb_dim"], c["head_dim"], c["num_query_heads"], c["num_kv_heads"]
    experts = c["num_experts"] > 1
    mlp = c["moe_mlp_dim"] if experts else c["mlp_dim"]
    per_token = c["num_experts_per_tok"] if experts else 1
    return {
        "qkv": 2 * tokens * e * (hq + 2 * hkv) * d,
        "out_proj": 2 * tokens * e * hq * d,
        "gate": 2 * tokens * e * c["num_experts"] if experts else 0.0,
        "ffn_in": 2 * tokens * mlp * e * len(c["mlp_activations"]) * per_token,
        "ffn_out": 2 * tokens * mlp * e * per_token,
        # QK^T and PV over every (query, key) pair: what XLA's dots compute without a kernel
        "attention_full": 4 * tokens * c["max_target_length"] * hq * d,
    }


def experts_in_kernels(c: dict) -> bool:
    """Dropless MoE with megablox: the experts' matmuls are Pallas grouped matmuls, not dots."""
    return c["num_experts"] > 1 and c["sparse_matmul"] and c["megablox"]


def attention_in_kernels(c: dict) -> bool:
    """attention=flash on TPU is Pallas splash attention, not dots."""
    return c["attention"] == "flash" and c["hardware"] == "tpu"


def remat_recompute_flops(c: dict, dots_only: bool = True) -> float:
    """The matmul FLOPs MaxText's remat policy recomputes in the backward pass, per device
    (``dots_only``: those that run as XLA dots, not in a Pallas kernel).

    ``full`` saves nothing but each layer's input (the scan carry): the backward recomputes the
    layer's forward, except the FFN's output projection, whose result only feeds the next layer
    (whose input is saved), so XLA drops its recomputation as dead code. ``minimal`` saves every
    matmul without batch dimensions (all the weight matmuls); attention's batched dots, and any
    kernel (a kernel is not a dot), are recomputed.
    """
    f = layer_forward_flops(c)
    attention = f["attention_full"]
    if attention_in_kernels(c):  # the kernel skips the masked blocks: MaxText's causal half
        attention = 0.0 if dots_only else attention / 2
    ffn_in = 0.0 if dots_only and experts_in_kernels(c) else f["ffn_in"]
    layers = c["num_decoder_layers"]
    if c["remat_policy"] == "full":
        return layers * (f["qkv"] + f["out_proj"] + f["gate"] + ffn_in + attention)
    if c["remat_policy"] == "minimal":
        return layers * attention
    raise NotImplementedError(f"derive the recomputed share of remat_policy={c['remat_policy']}")


def kernel_flops(record: dict) -> float:
    """The work MaxText counts (×3 for forward and backward) that runs in Pallas kernels, plus
    what remat recomputes of it: splash attention, megablox's expert matmuls."""
    c, tflops = record["config"], record["tflops_training_per_device"]
    f = layer_forward_flops(c)
    work = 0.0
    if attention_in_kernels(c):
        work += tflops["attention"] * 1e12
    if experts_in_kernels(c):
        work += 3 * c["num_decoder_layers"] * (f["ffn_in"] + f["ffn_out"])
    return work + remat_recompute_flops(c, dots_only=False) - remat_recompute_flops(c)


def expected_dot_flops(record: dict) -> float:
    """MaxText's learnable-weight FLOPs (forward + backward, ×3), plus the attention dots where
    attention is XLA dots (they compute every pair: twice MaxText's causal count), plus what
    remat recomputes, less the experts' matmuls where megablox kernels do them."""
    c = record["config"]
    tflops = record["tflops_training_per_device"]
    expected = tflops["learnable_weight"] * 1e12
    if not attention_in_kernels(c):
        expected += 2 * tflops["attention"] * 1e12
    if experts_in_kernels(c):
        f = layer_forward_flops(c)
        expected -= 3 * c["num_decoder_layers"] * (f["ffn_in"] + f["ffn_out"])
    return expected + remat_recompute_flops(c)


# -- the HLO's own collectives, counted without hlo_roofline/hlo ----------------------------------

_INSTR = re.compile(r"^\s+(?:ROOT\s+)?%(?P<name>[^\s=]+)\s*=\s*(?P<rest>.*)$")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%(?P<name>[^\s(]+)\s*\(.*\{\s*$")
_END = re.compile(r"^\}(?:,\s*execution_thread=\S+)?\s*$")
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "ragged-all-to-all",
               "collective-permute", "collective-broadcast")  # fmt: skip


def _opcode(rest: str) -> str:
    """The opcode after an instruction's result shape (a tuple shape has parentheses)."""
    end = rest.index(" ")
    if rest.startswith("("):
        depth = 0
        for end, ch in enumerate(rest, start=1):  # noqa: B007 (the end is the loop's result)
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0:
                break
    return rest[end:].strip().split("(", 1)[0]


def computations(text: str) -> dict[str, list[tuple[str, str, str]]]:
    """computation → [(instruction, opcode, the instruction's full text)]; lines that continue an
    instruction (a multi-line attribute) are joined to it."""
    comps: dict[str, list[tuple[str, str, str]]] = {}
    current = None
    for line in text.splitlines():
        if current is None:
            header = _HEADER.match(line)
            if header:
                current = comps.setdefault(header["name"], [])
            continue
        if _END.match(line):
            current = None
            continue
        instr = _INSTR.match(line)
        if instr:
            current.append((instr["name"], _opcode(instr["rest"]), line))
        elif current:
            name, opcode, body = current[-1]
            current[-1] = (name, opcode, body + line)
    return comps


def entry_name(text: str) -> str:
    return re.search(r"^ENTRY\s+%([^\s(]+)", text, re.M)[1]


def _trip_count(comps: dict, line: str) -> int:
    """A while's trip count: XLA:GPU states it (``known_trip_count``); a TPU scan's condition
    compares its counter with one integer constant."""
    known = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
    if known:
        return int(known[1])
    condition = comps[re.search(r"condition=%([^\s,]+)", line)[1]]
    constants = [int(m[1]) for _, op, text in condition if op == "constant"
                 for m in [re.search(r"constant\((-?\d+)\)", text)] if m]  # fmt: skip
    assert len(constants) == 1, f"not a counted loop: {constants}"
    return constants[0]


def collective_counts(text: str) -> dict[str, float]:
    """Executions per step of each collective kind, from the HLO text alone.

    XLA:TPU v5e splits an async collective into a start fusion, fusions computing with its
    result and a done fusion, each holding a copy of the collective with the same channel id and
    ``chain_id``: those are one transfer. Other collectives count apart, even where they share
    a channel id (shard_map's collectives all have channel 1). An async start and its done are
    one transfer.
    A fusion whose computation performs a collective is that collective (XLA:TPU's
    all-reduce-scatter fusion, an all-reduce then a partition-id dynamic-slice, is a
    reduce-scatter); a while body counts trip-count times.
    """
    comps = computations(text)
    counts: dict[str, float] = {}

    def kind_of(opcode: str) -> str | None:
        base = opcode.removesuffix("-start")
        return base if base in COLLECTIVES else None

    def transfer_id(line: str, name: str) -> str:
        chain = re.search(r'chain_id="(\d+)"', line)
        channel = re.search(r"channel_id=(\d+)", line)
        return f"{channel[1]}/{chain[1]}" if chain and channel else name

    def fused(comp: str) -> tuple[str, str] | None:
        found = [(kind_of(op), transfer_id(line, name)) for name, op, line in comps[comp]
                 if kind_of(op)]  # fmt: skip
        if not found:
            return None
        (kind, chan), *others = found
        assert all(k == kind for k, _ in others), f"{comp} holds several collectives"
        return ("reduce-scatter" if comp.startswith("all-reduce-scatter") else kind), chan

    def walk(comp: str, times: float) -> None:
        seen: set[tuple[str, str]] = set()
        for name, opcode, line in comps[comp]:
            calls = re.search(r"calls=%([^\s,]+)", line)
            transfer = None
            if opcode == "while":
                body = re.search(r"body=%([^\s,]+)", line)[1]
                walk(body, times * _trip_count(comps, line))
            elif opcode == "fusion" and calls:
                transfer = fused(calls[1])
            elif opcode in ("call", "async-start") and calls:
                walk(calls[1], times)
            elif kind_of(opcode):
                transfer = kind_of(opcode), name
            if transfer and transfer not in seen:
                seen.add(transfer)
                counts[transfer[0]] = counts.get(transfer[0], 0.0) + times

    walk(entry_name(text), 1.0)
    return counts


# -- the tests ------------------------------------------------------------------------------------


def test_the_corpus_is_there():
    """The four MaxText configs and the NNX step; each a JSON with its HLO beside it."""
    assert {p.stem for p in MAXTEXT} >= {"default_v5p8", "llama2_7b_v5e16", "mixtral_8x7b_v5p8"}
    assert (FIXTURES / "nnx" / "fsdp_v5p.json") in RECORDS
    for path in RECORDS:
        assert path.with_name(path.stem + ".hlo.txt.gz").is_file()
        assert path.stem in NEEDS, f"say in NEEDS what {path.stem} waits for"


@pytest.mark.parametrize("path", RECORDS, ids=_id)
def test_every_op_is_priced(path):
    """The optimized HLO parses and every executed op is priced (see NEEDS for what it takes)."""
    summary = _report(path).summary
    assert summary["unknown_ops"] == []
    assert summary["coverage"] == 1.0
    assert not summary["lower_bound"]  # every loop's trip count is known


@pytest.mark.parametrize("path", RECORDS, ids=_id)
def test_matmul_flops_are_maxtexts(path):
    """Σ 2·batch·M·N·K over the matmul rows = MaxText's learnable-weight TFLOPs × 1e12 (plus the
    attention dots where attention is not a kernel) plus what the config's remat policy
    recomputes; for the NNX step, 3× the forward matmuls of its shapes. Both sides count the
    same products exactly, so the tolerance is rounding (1e-6): a missed loop trip, a
    double-counted async op or a matmul priced as something else is far larger.

    The share under ``rematted_computation`` (JAX's name for what ``jax.checkpoint``
    recomputes) is the remat term on its own."""
    record = _record(path)
    ops = _report(path).ops
    if "config" not in record:  # the NNX step
        s = record["shapes"]
        tokens = s["batch"] * (s["seq"] - 1) / record["num_devices"]
        weights = s["layers"] * 2 * s["d_model"] * s["d_ff"] + s["d_model"] * s["vocab"]
        assert dot_flops(ops) == pytest.approx(3 * 2 * tokens * weights, rel=1e-6)
        return
    assert dot_flops(ops) == pytest.approx(expected_dot_flops(record), rel=1e-6)
    remat = ops[ops["op_name"].str.contains("rematted_computation", regex=False)]
    assert dot_flops(remat) == pytest.approx(remat_recompute_flops(record["config"]), rel=1e-6,
                                             abs=1.0)  # fmt: skip


KERNELS = [p for p in MAXTEXT if kernel_flops(_record(p)) > 0]


@pytest.mark.parametrize("path", KERNELS, ids=_id)
def test_pallas_kernels_do_maxtexts_work(path):
    """The Pallas calls (splash attention, megablox's grouped matmuls) are priced, at no less
    than the work MaxText counts for them and at most 3× it: splash computes whole blocks on
    the causal diagonal (up to 2× the causal half at these block sizes) and its backward
    recomputes the scores in both its dq and its dkv kernel; megablox pads each expert's group
    of tokens to its tile."""
    ops = _report(path).ops
    pallas = ops[ops["op_name"].str.contains("pallas_call", regex=False)]
    assert len(pallas) > 0 and not pallas["unknown"].any()
    priced = float((pallas["flops"]).sum())
    work = kernel_flops(_record(path))
    assert work <= priced <= 3 * work


@pytest.mark.parametrize("path", MAXTEXT, ids=_id)
def test_remat_recomputes_what_the_policy_says(path):
    """Every policy recomputes something under ``rematted_computation`` (elementwise work, a
    kernel's forward; the generator counted those instructions in the text with a plain regex);
    among them are matmul rows exactly when the policy recomputes matmuls."""
    record = _record(path)
    c = record["config"]
    ops = _report(path).ops
    remat = ops[ops["op_name"].str.contains("rematted_computation", regex=False)]
    assert record["remat_recomputed_instructions"] > 0 and len(remat) > 0
    recomputes = remat_recompute_flops(c) > 0
    assert (remat["mm_k"] > 0).any() == recomputes


@pytest.mark.parametrize("path", RECORDS, ids=_id)
def test_hbm_need_against_the_compilers(path):
    """From the text alone the report knows the step's inputs and outputs and what donation
    aliases; the compiler's memory_analysis counts the same buffers as allocated. They agree
    within 0.1%: the compiler rounds each buffer up to its tiles (a TPU scalar takes a whole
    tile), the text counts elements. The text's need, without temporaries, is a lower bound of
    the compiler's argument + output − alias + temp."""
    memory = _report(path).summary["memory"]
    stats = _record(path)["memory_analysis"]
    assert memory["arguments_bytes"] == pytest.approx(stats["argument_size_in_bytes"], rel=1e-3)
    assert memory["outputs_bytes"] == pytest.approx(stats["output_size_in_bytes"], rel=1e-3)
    assert memory["aliased_bytes"] == pytest.approx(stats["alias_size_in_bytes"], rel=1e-3)
    compiler_need = (stats["argument_size_in_bytes"] + stats["output_size_in_bytes"]
                     - stats["alias_size_in_bytes"] + stats["temp_size_in_bytes"])  # fmt: skip
    assert memory["need_bytes"] <= compiler_need
    assert memory["temporaries_bytes"] is None and not memory["complete"]


@pytest.mark.parametrize("path", RECORDS, ids=_id)
def test_collectives_are_the_hlos(path):
    """Executions per step of each collective kind, report against the HLO counted here."""
    ops = _report(path).ops
    rows = ops[ops["collective"] != ""]
    got = rows.groupby("collective")["count"].sum().to_dict()
    expected = collective_counts(_text(path))
    assert expected, "a sharded train step has collectives"
    assert got == pytest.approx(expected)


@pytest.mark.parametrize("path", RECORDS, ids=_id)
def test_no_hint_contradicts_its_row(path):
    """On the chip compiled for, every hint names its row's bound (as test_hints checks for the
    small fixtures)."""
    record = _record(path)
    ops = _report(path).classify(_chip(record)).ops
    assert assert_hints_agree(ops, _id(path)) > 0


@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.name)
def test_the_dump_directory_is_the_same_program(dump, tmp_path):
    """The trimmed ``--xla_dump_to`` directory, unpacked as XLA wrote it: ``analyze_dump`` finds
    the one train step, prices every op, and counts the same matmul work as ``as_text()``."""
    for f in dump.iterdir():
        target = tmp_path / f.name.removesuffix(".gz")
        if f.suffix == ".gz":
            with gzip.open(f, "rb") as src, target.open("wb") as out:
                shutil.copyfileobj(src, out)
        else:
            shutil.copy(f, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reports = hr.analyze_dump(tmp_path)
    assert len(reports) == 1 and "jit_train_step" in next(iter(reports))
    (report,) = reports.values()
    assert report.summary["coverage"] == 1.0
    record = dump.with_name(dump.name.removesuffix(".dump") + ".json")
    assert dot_flops(report.ops) == pytest.approx(dot_flops(_report(record).ops), rel=1e-9)


def test_the_collective_counter_counts():
    """The independent counter on a hand-written module: a while of 3 trips holding an
    all-gather start/done pair and an all-reduce-scatter fusion, and one all-to-all outside."""
    text = """HloModule m, is_scheduled=true

%all-reduce-scatter.1 (p: f32[8]) -> f32[2] {
  %p = f32[8]{0} parameter(0)
  %ar = f32[8]{0} all-reduce(%p), replica_groups={{0,1,2,3}}, to_apply=%add
  %pid = u32[] partition-id()
  ROOT %ds = f32[2]{0} dynamic-slice(%ar, %pid), dynamic_slice_sizes={2}
}

%cond (c: (s32[], f32[8])) -> pred[] {
  %c = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (b: (s32[], f32[8])) -> (s32[], f32[8]) {
  %b = (s32[], f32[8]{0}) parameter(0)
  %x = f32[8]{0} get-tuple-element(%b), index=1
  %ags = (f32[2]{0}, f32[8]{0}) all-gather-start(%x), dimensions={0}
  %agd = f32[8]{0} all-gather-done(%ags)
  %rs = f32[2]{0} fusion(%agd), kind=kCustom, calls=%all-reduce-scatter.1
  ROOT %t = (s32[], f32[8]{0}) tuple(%i, %agd)
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %w = (s32[], f32[8]{0}) while(%a), condition=%cond, body=%body
  %x = f32[8]{0} get-tuple-element(%w), index=1
  ROOT %y = f32[8]{0} all-to-all(%x), dimensions={0}
}
"""
    assert collective_counts(text) == {"all-gather": 3.0, "reduce-scatter": 3.0, "all-to-all": 1.0}


def test_maxtexts_own_numbers_are_consistent():
    """The recorded MaxText figures add up (total = weights + attention) and the per-layer terms
    above rebuild MaxText's learnable-weight count from the config (so the remat share is
    derived from the same arithmetic MaxText uses)."""
    for path in MAXTEXT:
        record = _record(path)
        c, tflops = record["config"], record["tflops_training_per_device"]
        assert tflops["total"] == pytest.approx(tflops["learnable_weight"] + tflops["attention"])
        f = layer_forward_flops(c)
        tokens = c["per_device_batch_size"] * c["max_target_length"]
        unembed = 2 * tokens * c["emb_dim"] * c["vocab_size"]
        layer = f["qkv"] + f["out_proj"] + f["gate"] + f["ffn_in"] + f["ffn_out"]
        weights = 3 * (c["num_decoder_layers"] * layer + unembed)
        assert weights == pytest.approx(tflops["learnable_weight"] * 1e12, rel=1e-9), path.stem
        causal = c["num_decoder_layers"] * f["attention_full"] / 2
        assert 3 * causal == pytest.approx(tflops["attention"] * 1e12, rel=1e-9), path.stem
        assert math.isclose(c["gradient_accumulation_steps"], 1)
