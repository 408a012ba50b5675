"""The report's columns and summary keys: one record each, read by every layer and face.

A column is written by exactly one layer (``cost``: the priced op, ``verdict``: its roofline
against a chip, ``measured``: the profiler join) and read by name everywhere else. It is public
(``Report.ops``: what a person reads, sorts and gates on) or a model internal (``internal``: a
count only the time model reads, such as XLA:TPU's tiling steps or the vector unit's elements,
kept in the side table ``Report.internals`` so a saved report is judged again on another chip
with the same numbers). Its dtype decides how a report file is read back; its unit and meaning
are docs/method.md's column tables (``tests/test_docs.py`` holds the tables, this module and a
real report to each other). Only the
standard library: the cost layer, the report and the TensorBoard plugin all import it.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypedDict

Layer = Literal["cost", "verdict", "measured"]
Dtype = Literal["text", "int", "float", "bool"]


class Column(NamedTuple):
    """One column of ``Report.ops``."""

    name: str
    dtype: Dtype
    unit: str
    meaning: str
    layer: Layer
    internal: bool = False  # only the time model reads it: Report.internals, not Report.ops


def _c(
    name: str, dtype: Dtype, unit: str, meaning: str, layer: Layer, internal: bool = False
) -> Column:
    return Column(name, dtype, unit, meaning, layer, internal)


# What sets an op's ``t_bound_s`` (the ``bound`` column): the first three are the roofline's
# times; ``unknown``: no price (or no rate), ``none``: no time at all.
BOUNDS = ("compute", "memory", "communication", "unknown", "none")

# What sets an op's ``t_expected_s`` above its ``t_bound_s`` (the ``expected_by`` column; empty
# where the bound does): each a calibrated effect of the chip's ``[calibrated]`` section.
EXPECTED_EFFECTS = {
    "loop": "its elements through a TPU vector loop at the rate XLA:TPU charges "
    "(`calibrated.loop_elements`; decode's reduced stream at `calibrated.reduced_stream`)",
    "fill": "a TPU fill's elements at the rate XLA:TPU charges (`calibrated.fill`)",
    "xlu": "a standalone TPU reduce's elements across the lanes (`calibrated.lane_reduce`)",
    "floor": "the per-op floor (`calibrated.op_floor`: XLA:TPU's least charge; on a GPU the "
    "shortest kernel measured)",
    "pipeline": "XLA:TPU's matmul pipeline: its operand stream, tiling loop steps and the vector "
    "passes around a K split (`calibrated.matmul_stream`, `tile_step`, `*_passes`)",
    "loop_reads": "a vector loop's HBM reads beyond its fitted loop's, after it "
    "(`calibrated.loop_reads`)",
    "major_reduce": "a deep-buffered reduce over major dimensions (`calibrated.major_reduce`)",
    "depthwise": "a TPU depthwise convolution's taps on the vector unit "
    "(`calibrated.depthwise_taps`)",
    "expanded": "the elements a TPU fusion expands and folds inside itself "
    "(`calibrated.expanded_elements`)",
    "sublane_fold": "the results of a TPU fusion folding an expansion's sublanes in column "
    "strips (`calibrated.sublane_fold`)",
    "second_pass": "a TPU fusion's loop passing twice over an array it folds over a whole row "
    "and then uses (`calibrated.loop_elements`)",
    "folded_product": "a matmul's product its own TPU fusion folds, one 32-bit value an element "
    "(`calibrated.folded_product`)",
    "relayout": "a TPU copy moving its lanes, per element of each side in HBM "
    "(`calibrated.relayout`)",
    "weight_load": "a TPU matmul's weight tiles loaded into the MXUs, per held element whatever "
    "its rows, and a per-op overhead (`calibrated.weight_load`, `weight_load_overhead`)",
    "matmul_rate": "its matrix-unit work at the share of the peak the chip's matmul kernels "
    "reached where measured (`calibrated.matmul_efficiency`)",
    "memory_rate": "its HBM bytes at the share of the bandwidth the chip's streaming ops reached "
    "where measured (`calibrated.memory_efficiency`)",
    "occupancy": "a GPU kernel XLA generates for a fusion that is no matmul: its HBM bytes at "
    "the bandwidth its resident warps keep in flight, in proportion to its `occupancy` (Little's "
    "law: without a software pipeline, the bytes in flight are each warp's loads), up to the "
    "streams' share (`calibrated.occupancy_bandwidth`)",
    "kernel_rate": "a fused kernel's matrix work (cuDNN's flash attention) at the share of its bound "
    "such kernels reached where measured (`calibrated.kernel_efficiency`)",
    "conv_rate": "a cuDNN convolution at the share of its bound cuDNN's convolutions of its class "
    "reached where measured (`calibrated.conv_efficiency`; a K of no whole number of the tensor "
    "cores' K steps: `conv_narrow_efficiency`)",
    "launch": "a GPU stream's idle time before each of the kernel's runs, on top of them: the "
    "host's launch (`calibrated.launch_gap`)",
    "dcn": "a multi-slice transfer over the data-centre network at the share of the DCN egress "
    "and the time per ring step over the slices measured on whole steps "
    "(`calibrated.dcn_efficiency`, `dcn_step`)",
}

# Names a report written before the bound and the expectation were split used, and theirs now
# (``Report.read`` renames them; such a report lacks the bound's columns and is judged again).
RENAMED: dict[str, str] = {
    "t_roofline_s": "t_expected_s",
    "step_time_lower_s": "step_time_serial_s",
    "step_time_scheduled_s": "step_expected_s",
}

# The codes of ``xla_gap``: why XLA:TPU's estimate of an op sits outside the roofline's reach.
BELOW_MEMORY_FLOOR = "below_memory_floor"  # the one code for an estimate under the op's bytes
XLA_GAPS = {
    BELOW_MEMORY_FLOOR: "XLA's estimate is below the time the op's own bytes take at its "
    "placement's bandwidth: no lower bound can sit under it; left out of agreement statistics",
    "tiny_op": "XLA charges each op a fixed overhead; the op's work is a small part of it",
    "mxu_padding": "N or K far below the MXU width: XLA pays for whole tiles",
    "mxu_weight_loads": "few rows (M) per weight tile: XLA charges each K×N tile's load",
    "vector_matmul": "a matrix-vector product (depthwise convolution): no MXU, vector loop",
    "layout_change": "a transpose or layout-changing copy: XLA charges more than its bytes",
    "lane_reduction": "a reduction across lanes: XLA charges more than its elements",
    "major_reduction": "a reduction over dimensions other than the lanes that the chip's "
    "`calibrated.major_reduce` rate does not price (a prefetched operand, a sublane fold, no rate): XLA "
    "charges up to 8 results a cycle per core, several times the same sum as slices and adds",
    "unexplained": "no unit the model has explains XLA's time",
}

COLUMNS: tuple[Column, ...] = (
    # -- cost: what the op is and what it costs, per device and per step (cost/extractors.py) -----
    _c("name", "text", "", "the instruction, as in the HLO text", "cost"),
    _c("opcode", "text", "", "its opcode", "cost"),
    _c("computation", "text", "", "the computation it is in", "cost"),
    _c("count", "float", "executions",
       "times the op runs in one step (loop trip counts multiplied in)", "cost"),
    _c("flops", "float", "operations", "FLOPs; see cost-model.md for each opcode", "cost"),
    _c("transcendentals", "float", "operations",
       "`exp`, `log`, `tanh`, ... counted apart from FLOPs", "cost"),
    _c("bytes_accessed", "float", "bytes", "HBM traffic: operands read and results written", "cost"),
    _c("comm_bytes", "float", "bytes", "what this device sends over its links", "cost"),
    _c("vmem_bytes", "float", "bytes",
       "the part of `bytes_accessed` in arrays XLA keeps in a TPU's VMEM (`S(1)`)", "cost"),
    _c("unknown", "bool", "", "the op could not be priced (its FLOPs are not claimed)", "cost"),
    _c("lower_bound", "bool", "",
       "the op's count is a lower bound (it runs in a loop whose trip count is unknown: its body "
       "is counted once)", "cost"),
    _c("upper_bound", "bool", "",
       "the op's count may be high: a value its work depends on is not in the text (an attention "
       "kernel's mask or lengths, a grouped matmul's group sizes), so every candidate is counted",
       "cost"),
    _c("fusion_kind", "text", "", "a fusion's kind", "cost"),
    _c("dtype", "text", "", "the dtype it computes in (a matmul's input type)", "cost"),
    _c("precision", "text", "",
       "a matmul's precision for f32 inputs (`default`, `high`, `highest`, or a `dot_…` "
       "algorithm); empty for other ops", "cost"),
    _c("shape", "text", "", "the result shape", "cost"),
    _c("op_name", "text", "", "the JAX name scope", "cost"),
    _c("source", "text", "",
       "the innermost Python `file:line` of the op (often inside a framework: "
       "`flax/nnx/nn/linear.py`)", "cost"),
    _c("user_source", "text", "",
       "`path:line (function)` of the first frame of the op's stack that is the user's own code: "
       "not an installed package (site-packages, dist-packages), the standard library, or JAX, "
       "Flax, Optax, Equinox and the like (`hlo_roofline.hlo.attribution.LIBRARIES`; see "
       "[frameworks.md](frameworks.md)). Empty for ops the compiler added (copies, async slices) "
       "and for parameters", "cost"),
    _c("note", "text", "", "why a number is what it is (a lower bound, a branch not counted, ...)",
       "cost"),
    _c("fused_ops", "text", "", "the ops inside a fusion", "cost"),
    _c("collective", "text", "", "the collective an op performs", "cost"),
    _c("group_size", "int", "devices", "its replica-group size", "cost"),
    _c("replica_group", "text", "",
       "its first group of device ids and the program's device count (`0-3 of 32`); a permute's "
       "pairs", "cost"),
    _c("waits_for", "text", "", "an async done's start (the op whose transfer it waits for)",
       "cost"),
    _c("offload", "text", "",
       "the core an async op's program runs on where not the TensorCore: `sparsecore` (XLA:TPU's "
       "SparseCore offload of a collective, gather or scatter, queued apart from the TensorCore's "
       "transfers)", "cost"),
    _c("mm_batch", "int", "elements",
       "a matmul's batch: the product of the dims both operands batch over", "cost"),
    _c("mm_m", "int", "elements", "a matmul's lhs rows (M) per batch element", "cost"),
    _c("mm_n", "int", "elements", "a matmul's rhs columns (N) per batch element", "cost"),
    _c("mm_k", "int", "elements",
       "a matmul's contracting size (K) per batch element; `mm_k > 0` marks matmul-class rows",
       "cost"),
    _c("mm_lhs_bytes", "float", "bytes",
       "bytes per element of a matmul's lhs as it crosses HBM (a fused convert's input type)",
       "cost", internal=True),
    _c("mm_rhs_bytes", "float", "bytes", "bytes per element of a matmul's rhs as it crosses HBM",
       "cost", internal=True),
    _c("mm_out_bytes", "float", "bytes",
       "bytes per element of a matmul's result as written (after a fused convert)", "cost",
       internal=True),
    _c("mm_split_k", "int", "",
       "how many slices XLA:GPU split the contracting dim into (split-K: that many of `mm_batch` "
       "are slices of K, summed by a reduction after); 1 for other matmuls", "cost",
       internal=True),
    _c("xla_cycles", "float", "cycles",
       "XLA:TPU's own cost-model estimate for the op (`estimated_cycles` in its "
       "`backend_config`)", "cost", internal=True),
    _c("tile_steps", "float", "steps",
       "steps of the tiling loop XLA:TPU compiled the op into (the product of its "
       "`window_config.iteration_bounds`: one per tile of a matmul fusion's result, and of K "
       "where K is split), per step; 0 where the compiler wrote none", "cost",
       internal=True),
    _c("tile_reread_bytes", "float", "bytes",
       "HBM bytes a TPU matmul fusion's tiling loop reads beyond one read of each operand: an "
       "operand tile is fetched again each time the loop moves to another of its tiles (the "
       "`window_config`'s last dimension innermost; docs/cost-model.md), per step", "cost",
       internal=True),
    _c("tile_k_steps", "float", "steps",
       "steps a TPU matmul fusion's tiling loop takes along K per tile of its result "
       "(`tile_steps` over the result's windows), where K is split 4 or more ways; 1 where it "
       "keeps K whole; 0 otherwise",
       "cost", internal=True),
    _c("epilogue_elements", "float", "elements",
       "elements of the arrays of a K-split TPU matmul fusion's result size that its vector unit "
       "passes once a result tile is finished: its results (the first is the f32 accumulator's "
       "pass) and the fused operands only the epilogue reads (docs/cost-model.md), per step; "
       "where K is whole, those arrays and an operand the fusion relays, once per fetch of its "
       "window; 0 otherwise", "cost", internal=True),
    _c("prologue_elements", "float", "elements",
       "elements of a TPU matmul fusion's left operand that its vector unit computes inside the "
       "fusion, once per fetch of the operand's window, where the tiling loop splits K 4 or more "
       "ways (docs/cost-model.md); 0 otherwise", "cost", internal=True),
    _c("prefetch_for", "text", "",
       "on an async HBM→VMEM copy (`copy-start`): the ops that read what it prefetches; its HBM "
       "read is charged to them, the copy row takes no time", "cost"),
    _c("call_stack", "text", "",
       "every frame of the op's Python stack, innermost first, one `path:line (function)` a line "
       "(`Report.stack(name)` gives the list). In JSON an index into the file's `call_stacks`, "
       "the distinct stacks", "cost"),
    _c("layer_caller", "text", "",
       "for an op made inside a generic layer (Flax `Dense`/`DenseGeneral`/`nnx.Linear`, Equinox "
       "`Linear`, MaxText `linears.py`): the user's line that called the layer, and the layer's "
       "name scope in brackets (`attention.py:212 (__call__) [query]`), so a rollup by it "
       "separates q, k, v, out and the MLP's projections; for any other op its `user_source`",
       "cost"),
    _c("vector_elements", "float", "elements",
       "elements the op's loop passes through a vector unit: its largest array (a matmul's result "
       "in 32-bit words; its operands stream into the MXU), per step; 0 for ops that move data by "
       "DMA", "cost", internal=True),
    _c("lane_reduced_elements", "float", "elements",
       "elements a standalone `reduce` folds across the lanes (its operand's minor-most dimension "
       "is reduced), per step", "cost", internal=True),
    _c("major_reduced_elements", "float", "elements",
       "elements a `reduce`, or a fusion's reduces, fold over dimensions other than the lanes (the "
       "sublanes or a major dimension: a top-2 dispatch's two slots, experts, rows; none folds its "
       "operand's minor-most dimension), per step; information only: no rate prices it", "cost",
       internal=True),
    _c("major_reduce_results", "float", "elements",
       "results the op's reduces write by folding major dimensions only (neither lanes nor "
       "sublanes: a top-2 dispatch's two slots) where XLA:TPU pipelines its loop deep "
       "(`window_config.buffering_level` ≥ 6), per step; priced at the chip's `calibrated.major_reduce` "
       "rate; 0 elsewhere", "cost", internal=True),
    _c("reduced_stream_words", "float", "elements",
       "32-bit words of a TPU matmul's wide operand streamed through the vector registers "
       "(`vector_elements` is these) where its fusion also reduces the product (a decode step's "
       "attention scores fused with their mask and max), per step; priced at the chip's "
       "`calibrated.reduced_stream` rate where it has one, else at the loop rate; 0 elsewhere", "cost",
       internal=True),
    _c("depthwise_taps", "float", "operations",
       "multiply-adds of the op's depthwise convolutions (one input feature per group: each output "
       "element once per tap of its window), which run on a TPU's vector unit, per step; priced at "
       "the chip's `calibrated.depthwise_taps` rate by the expected model; 0 elsewhere", "cost",
       internal=True),
    _c("expanded_elements", "float", "elements",
       "elements of an array a fusion expands and folds inside itself (larger than any array it "
       "reads or writes, reduced over its lanes or sublanes: a selective scan's `[B, L, D, N]` "
       "summed over N), in 32-bit words (16-bit values two to a word), which its loop computes "
       "though no boundary array holds them, per step; "
       "priced at the chip's `calibrated.expanded_elements` rate by the expected model; 0 "
       "elsewhere", "cost", internal=True),
    _c("sublane_fold_results", "float", "elements",
       "result elements, in 32-bit words, of a fusion that folds such an expansion over its "
       "sublanes (its second-minor dimension) in a loop XLA:TPU tiled into column strips "
       "(`window_config.output_window_bounds`: one 128-lane tile wide, one index of every "
       "dimension above the rows), which assembles each result register from folded rows, per "
       "step; priced at the chip's `calibrated.sublane_fold` rate by the expected model, in "
       "place of `expanded_elements`; 0 elsewhere", "cost", internal=True),
    _c("second_pass_elements", "float", "elements",
       "elements, in 32-bit words, of an array a fusion computes, folds over a whole row (a "
       "row-spanning `reduce-window`: a softmax's row sum) and then uses elementwise, where it "
       "streams an operand from HBM: its loop passes over them a second time once the row is "
       "folded, per step; priced at the chip's loop rate by the expected model; 0 elsewhere",
       "cost", internal=True),
    _c("folded_product_elements", "float", "elements",
       "elements of a matmul's product that its own fusion folds (a reduce computed from the "
       "product: attention's scores and their row max), which the fold passes through a TPU's "
       "vector unit one 32-bit value each, per step; priced at the chip's "
       "`calibrated.folded_product` rate by the expected model; 0 elsewhere", "cost",
       internal=True),
    _c("relaid_elements", "float", "elements",
       "elements, as their layouts' tiles store them (padded lanes included), of the arrays a "
       "copy that moves its lanes (its result's minor-most dimension not its operand's: a "
       "transpose laid out as a relayout) reads from and writes to HBM, per step; priced at the "
       "chip's `calibrated.relayout` rate by the expected model; 0 elsewhere", "cost",
       internal=True),
    _c("loop", "text", "",
       "the while loops the op runs in, outermost first (`while.3/while.7`; a `lax.scan` or "
       "`fori_loop` is one `while`); empty outside any loop. `Report.loops()` and the summary's "
       "`loops` give each loop's trip count and its figures per iteration", "cost"),
    _c("kernel_mxu_flops", "float", "operations",
       "the part of `flops` a custom kernel runs on a matrix unit (an attention kernel's QKᵀ and "
       "PV products, from its shapes), priced at the MXU/tensor-core peak; 0 for other ops (a "
       "dot or convolution's matrix-unit work is its `mm_*` geometry)", "cost",
       internal=True),
    # -- verdict: the op against one chip (verdict.classify) ----------------------------------
    _c("intensity", "float", "FLOP/B", "the op's arithmetic intensity: flops ÷ bytes", "verdict"),
    _c("critical_intensity", "float", "FLOP/B",
       "its ridge: its peak ÷ the bandwidth its bytes move at", "verdict"),
    _c("bound", "text", "",
       "which time sets `t_bound_s`: `compute`, `memory`, `communication`; `none`, `unknown`",
       "verdict"),
    _c("t_compute_s", "float", "s",
       "time on the slowest unit the op uses (`compute_unit`; see the roofline times above)",
       "verdict"),
    _c("compute_unit", "text", "",
       "the unit that sets `t_compute_s`: `mxu` (matmul FLOPs, N and K padded to the MXU width on "
       "a TPU), `vector` (FLOPs at the vector peak), `eup` (transcendentals)", "verdict"),
    _c("t_memory_s", "float", "s", "bytes ÷ the bandwidth they move at", "verdict"),
    _c("t_comm_s", "float", "s", "link time of the op's collective", "verdict"),
    _c("t_bound_s", "float", "s",
       "the bound: the largest of the three, from hardware facts only (published peaks and "
       "bandwidths, MXU tiles); no run of the op is faster", "verdict"),
    _c("t_expected_s", "float", "s",
       "the expectation: `t_bound_s` and every calibrated effect of the chip (XLA:TPU's "
       "charges, the per-op floor: docs/cost-model.md), never below the bound", "verdict"),
    _c("expected_by", "text", "",
       "what sets `t_expected_s` above `t_bound_s`: "
       + ", ".join(f"`{code}`" for code in EXPECTED_EFFECTS)
       + "; empty where the bound does", "verdict"),
    _c("share", "float", "",
       "`t_expected_s` ÷ Σ `t_expected_s` (`step_time_serial_s`: the ops one after another)",
       "verdict"),
    _c("t_exposed_s", "float", "s",
       "time the compute stream waited for this op's transfer in the scheduled step (a "
       "synchronous collective: all of it)", "verdict"),
    _c("hint", "text", "",
       "what would move a matmul across the ridge, in words (rendered from `hint_reason`, "
       "`ridge_m`, `ridge_k`, `mxu_waste` and `bound`)", "verdict"),
    _c("hint_reason", "text", "",
       "the hint as a code: `ridge_m`, `ridge_k`, `unreachable`, `batched_weights`, `split_k`, "
       "`vector_loop`, `prefetch`, `no_rate`; empty for ops without a hint", "verdict"),
    _c("ridge_m", "float", "elements",
       "the lhs rows M (per batch element) at which the matmul reaches its ridge; NaN if none; "
       "below 1 where every M reaches it",
       "verdict"),
    _c("ridge_k", "float", "elements",
       "the contracting size K (per batch element) at which it would, where no M does; NaN "
       "otherwise", "verdict"),
    _c("mxu_waste", "float", "",
       "share of the matrix unit's work lost to padding N and K to its width (`mxu` in the chip "
       "database); 0 when none", "verdict"),
    _c("xla_estimate_s", "float", "s",
       "`xla_cycles` ÷ the chip's clock: shown beside the roofline, never used in it (see "
       "[validation.md](validation.md))", "verdict"),
    _c("xla_gap", "text", "",
       "where XLA:TPU's estimate is below the op's own memory time (`below_memory_floor`: its "
       "bytes at its placement's bandwidth, the prefetches it reads not charged), or over twice "
       "the roofline: the likely reason ("
       + ", ".join(f"`{code}`" for code in XLA_GAPS if code != BELOW_MEMORY_FLOOR)
       + "), else empty", "verdict"),
    _c("roof_flops_per_s", "float", "FLOP/s",
       "the op's compute roof: `flops` ÷ `t_compute_s`, the rate its binding unit (`roof_unit`) "
       "reaches on this op; NaN without FLOPs", "verdict"),
    _c("roof_bytes_per_s", "float", "B/s",
       "the op's memory roof: `bytes_accessed` ÷ `t_memory_s`, the HBM bandwidth (VMEM's for "
       "bytes XLA placed there); NaN without bytes", "verdict"),
    _c("roof_unit", "text", "",
       "the roof the op's bound point (flops ÷ `t_bound_s`) lies on: its `compute_unit`, `hbm`, "
       "`vmem` (most of its memory time), `link` (communication); empty for ops without time",
       "verdict"),
    # -- measured: the profiler join (measured.join, efficiency.add_efficiency) -----------------
    _c("measured_s", "float", "s", "median over steps of the op's time in one step", "measured"),
    _c("measured_p10_s", "float", "s", "10th percentile of that per-step time", "measured"),
    _c("measured_p90_s", "float", "s", "90th percentile of that per-step time", "measured"),
    _c("measured_count", "float", "executions", "executions per step seen in the trace",
       "measured"),
    _c("occupancy", "float", "",
       "the share of an SM's warp slots the op's GPU kernels keep resident, as the trace "
       "records it (CUPTI's theoretical occupancy: from each kernel's registers, block and shared "
       "memory, compile facts), weighted by their time; NaN where none is recorded. The expected "
       "model reads it (`expected_by` `occupancy`)", "measured"),
    _c("achieved_flops_per_s", "float", "FLOP/s", "`flops / measured_s`", "measured"),
    _c("achieved_bytes_per_s", "float", "B/s", "`bytes_accessed / measured_s`", "measured"),
    _c("efficiency", "float", "", "`t_bound_s / measured_s`: the share of the bound reached",
       "measured"),
    _c("measurement_problem", "text", "",
       "empty, or why an op measured faster than its roof", "measured"),
    _c("measurement_cause", "text", "",
       "that cause as a code: `too_short`, `in_cache`, `host_roof_low`, `roof_low`; else empty",
       "measured"),
)  # fmt: skip

BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}


def names(
    layer: Layer | None = None, dtype: Dtype | None = None, internal: bool | None = None
) -> tuple[str, ...]:
    """The columns a layer writes (or all), of one dtype (or any), public or internal (or both),
    in the report's order."""
    return tuple(
        c.name
        for c in COLUMNS
        if (layer is None or c.layer == layer)
        and (dtype is None or c.dtype == dtype)
        and (internal is None or c.internal == internal)
    )


def matmul_rows(ops):
    """Which rows of a report's table are matmul-class (a dot, a convolution, a fusion or library
    call around one): ``mm_k > 0``, the one definition the judges, the gates and the faces use. A
    NumPy mask; a table from before the column has none."""
    if "mm_k" not in ops:
        return ops.index.isin(())
    return ops["mm_k"].to_numpy() > 0


COST_COLUMNS = names("cost")  # every column the cost layer writes, public and internal
PUBLIC_COST_COLUMNS = names("cost", internal=False)  # those of Report.ops
INTERNAL_COLUMNS = names(internal=True)  # those of Report.internals, the time model's alone
VERDICT_COLUMNS = names("verdict")
MEASURED_COLUMNS = names("measured")
TEXT_COLUMNS = names(dtype="text")
INT_COLUMNS = names(dtype="int")
BOOL_COLUMNS = names(dtype="bool")

# The hint's fields beside its text (reports written before them have the text alone).
HINT_FIELDS = ("hint_reason", "ridge_m", "ridge_k", "mxu_waste")
# The roof behind each verdict (reports written before them lack them; faces show them where
# present).
ROOF_FIELDS = ("roof_flops_per_s", "roof_bytes_per_s", "roof_unit")
# The bound's own time and what sets the expectation above it: reports judged before the two
# models were split lack them (their `t_roofline_s` reads as `t_expected_s`); faces show such a
# report without them, as the expectation alone.
SPLIT_FIELDS = ("t_bound_s", "expected_by")
# The codes of ``hint_reason`` (its column's meaning lists them; ``hints.hint_text`` words
# them); a report read back holds no other (``report.validate``).
HINT_REASONS = (
    "ridge_m", "ridge_k", "unreachable", "batched_weights", "split_k", "vector_loop", "prefetch",
    "no_rate",
)  # fmt: skip


def internal_default(name: str) -> object:
    """The value an internal column holds where the op has none of its own (most ops: one that
    is no TPU matmul fusion, vector loop, reduce, ...): empty text, NaN where the column is
    nullable, else 0. ``Report.internals`` stores only the other values of a column."""
    column = BY_NAME[name]
    if column.dtype == "text":
        return ""
    return float("nan") if name in NULLABLE_COLUMNS else 0


def ordered(columns) -> list[str]:
    """``columns`` in the schema's order, any it does not know (a user's own) after them."""
    given = list(columns)
    known = set(given)
    return [c.name for c in COLUMNS if c.name in known] + [c for c in given if c not in BY_NAME]


def markdown_table(layers: tuple[Layer, ...] = ("cost", "verdict"), internal: bool = False) -> str:
    """docs/method.md's column tables: one row per public column of ``layers`` (``Report.ops``),
    or with ``internal``, per model internal (``Report.internals``)."""
    lines = ["| column | unit | meaning |", "|---|---|---|"]
    for c in COLUMNS:
        if c.layer in layers and c.internal == internal:
            lines.append(f"| `{c.name}` | {c.unit} | {c.meaning} |")
    return "\n".join(lines)


# -- the summary ---------------------------------------------------------------------------------


class CostSummary(TypedDict):
    """What pricing the module says of it (``cost.summarize``)."""

    cost_model: str  # "roofline" or "xla"
    flops: float  # Σ over ops, per step and device
    transcendentals: float
    bytes_accessed: float
    comm_bytes: float
    coverage: float  # share of executed ops (bookkeeping aside) that could be priced
    unknown_ops: list[str]  # names of the ops that could not be priced
    lower_bound: bool  # some count is a lower bound (a loop with an unknown trip count)
    notes: list[str]  # every distinct note of the ops


class VerdictSummary(TypedDict):
    """What judging the module against a chip says of it (``verdict.classify``)."""

    chip: str  # the chip's key in the database
    chip_name: str
    chip_profile: str  # "vendor" or "book" numbers
    # the bound: the step no schedule can beat. Each compute unit, memory and link queue is busy
    # at least the sum of its ops' t_bound_s; the step is at least the busiest. Facts only.
    step_bound_s: float
    mfu_upper_bound: float  # Σ flops ÷ (peak(mfu_dtype) · step_bound_s): no run reaches more
    # Σ t_expected_s: the expected ops one after another, each overlapping its own terms (`share`
    # and `time_share` are of it). Neither bound nor expectation of the step: XLA also hides
    # transfers behind other ops.
    step_time_serial_s: float
    step_time_upper_s: float  # Σ max(t_compute + t_memory + t_comm, t_expected): no overlap
    # the expected ops with perfect overlap between them too: max(Σ t_expected_s of the compute
    # stream's ops, Σ of each transfer engine's); ≤ step_expected_s always
    step_time_min_s: float
    mfu_dtype: str  # the dtype (and precision) most matmul FLOPs run at
    time_share: dict[str, float]  # step_time_serial_s (Σ per-op time) split by bound
    floor_share: float  # the part of the step's lower bound that is ops held at the per-op floor
    hbm_bandwidth: float  # B/s
    vmem_bandwidth: float | None  # B/s, where some bytes sit in a TPU's VMEM
    roofs: dict[str, dict[str, float]]  # per rate class: peak_flops and critical_intensity
    step_expected_s: float  # the expectation: the expected ops with the overlap XLA scheduled
    mfu_expected: float  # Σ flops ÷ (peak(mfu_dtype) · step_expected_s)
    comm_time_s: float  # Σ t_expected_s of the collectives
    exposed_comm_s: float  # Σ t_exposed_s: communication the compute stream waited for
    exposed_comm_share: float  # exposed_comm_s ÷ step_expected_s
    # the host's dispatch of one step and its wait for the outputs (a GPU's, calibrated; 0 where
    # none is): a step that waits for its outputs takes it on top of step_expected_s, a loop
    # that dispatches the next step meanwhile hides it
    host_dispatch_s: float
    topology: dict | None  # where the devices sit (interconnect.Topology.to_dict)
    # each while loop (lax.scan, fori_loop), slowest first: name (its `loop` path), parent,
    # trip_count, iterations per step, time_per_iteration_s, flops_per_iteration,
    # bytes_per_iteration, t_expected_s and share (of step_time_serial_s), nested loops included
    loops: list[dict]
    remat_flops: float  # Σ flops of the ops inside a rematted computation (jax.checkpoint)
    remat_flops_share: float  # remat_flops ÷ Σ flops
    remat_time_s: float  # Σ t_expected_s of those ops
    remat_time_share: float  # remat_time_s ÷ step_time_serial_s
    model_flops: float | None  # the user's analytic FLOPs per device and step (--model-flops)
    mfu_model: float | None  # model_flops ÷ (step_expected_s · the bf16 peak)
    hlo_flops_per_model_flop: float | None  # Σ flops ÷ model_flops


# The memory fit's verdicts (``memory.judge``), as codes; ``memory.verdict_text`` words them.
FIT_VERDICTS = ("fits", "tight", "does_not_fit", "unknown")
FitVerdict = Literal["fits", "tight", "does_not_fit", "unknown"]
# Its remedies' codes (``memory.advice_text`` words each, with its numbers).
ADVICE_CODES = ("donate", "shard_over", "shard_to_room", "shard_not_enough", "no_slice", "remat")
# An explorer row's status (``explorer.row``; ``check.explore_gate`` reads them): an answer about
# the layout, or a failure that leaves the exploration incomplete; and the codes of tables
# written before these (words, one "compile_error" for every failure).
EXPLORE_ANSWERS = ("ok", "does_not_fit", "refused")
EXPLORE_FAILURES = ("error", "crashed", "timed_out", "not_run")
EXPLORE_FORMER_STATUSES = {
    "compile_error": "error", "compile error": "error", "does not fit": "does_not_fit",
    "timed out": "timed_out", "not run": "not_run",
}  # fmt: skip


class Advice(TypedDict, total=False):
    """One remedy for a step that does not fit: its code and the figures its words need."""

    code: str  # one of ADVICE_CODES
    saves_bytes: float  # donate: what donating the updated inputs saves per device
    temporaries_bytes: float  # remat: the temporaries, of need_bytes
    need_bytes: float
    state_bytes: float  # shard_*: parameters and optimizer state per device (what shards)
    fixed_bytes: float  # the rest, assumed not to shrink
    fixed_split: bool  # the rest is known to be temporaries and activations (outputs known)
    room_bytes: float  # shard_to_room: what the state may take per device
    devices: int  # shard_over: the devices now, the slice's, its shape, the need after
    slice_devices: int
    slice_shape: str
    per_device_bytes: float


class MemoryFit(TypedDict):
    """``memory_fit``: the step's need against one device's HBM (``memory.judge``)."""

    verdict: FitVerdict
    need_bytes: float
    capacity_bytes: float
    reserved_bytes: float | None
    used_fraction: float
    advice: list[Advice]


# What an HLO text or dump may not say that its compile knew (``report.missing``), as codes, and
# which figure each leaves off and which way: XLA:TPU's per-fusion tiling (``window_config``,
# written in code generation: a dump's ``after_optimizations`` module lacks it) leaves the step
# time low; the devices' places in a TPU torus (inferred as the chip's usual slice, in id order,
# where neither a mesh nor the dump's device assignment gives them) leave the communication time
# off either way (which links a group spans depends on the order); the temporaries (HLO text
# alone; a TPU dump's lack those code generation adds) leave the need low. The faces word them
# (``report.missing_text``).
MISSING_FACTS = ("tiling", "device_coordinates", "temporaries")
MISSING_LEANS: dict[str, tuple[str, str]] = {
    "tiling": ("step_time", "low"),
    "device_coordinates": ("comm_time", "either"),
    "temporaries": ("need", "low"),
}


class MemorySummary(TypedDict, total=False):
    """What the memory layer and the API add (``memory``, ``api``)."""

    memory: dict | None  # the need per device and its parts (memory.from_*)
    memory_fit: MemoryFit | None  # None without a chip or figures
    compiled_for: str  # the target, or "local" (api.labelled)
    how: str  # a sentence: what was compiled for what, and why
    compiler_flags: dict[str, str]  # XLA_FLAGS / LIBTPU_INIT_ARGS it compiled under (explorer)
    ops_before_optimization: bool  # a refused program's ops, as lowered (compile.refused)
    missing: list[str]  # MISSING_FACTS codes: what the HLO did not say (report.missing)


class MeasuredSummary(TypedDict, total=False):
    """What the profiler join adds (``measured.join``, ``measured.measure``)."""

    measured_step_s: float  # the step's median wall time in the trace
    measured_coverage: float  # share of the step's time in ops the report has
    measured_op_s: float  # Σ measured_s
    measured_steps: int  # steps measured
    measured_steps_from: str  # how the steps were found in the trace
    measured_devices: list[str]  # the trace's device planes the ops ran on
    measured_overlap: bool  # ops overlapped in the trace (Σ measured_s ≠ the step)
    measured_unmatched_ops: list[str]  # event names the embedded HLO does not have
    measured_renamed_ops: dict[str, str]  # event names given to an op (measured.renames)
    measured_problems: int  # ops that measured faster than their roof
    measured_trace: str  # the trace file read
    measured_program: str  # the program of the trace the report is
    measured_other_programs: dict[str, float]  # the other programs' measured_op_s
    measured_host_roof_remeasured: bool  # the host's rates were measured again


class Summary(CostSummary, VerdictSummary, MemorySummary, MeasuredSummary, total=False):
    """A report's summary (``Report.summary``): the cost keys, the verdict keys once judged, the
    memory and the API's labels, and the measured keys of a measured report. Every key a layer
    writes is declared here (``tests/test_report_summary.py`` holds real reports to it)."""


SUMMARY_KEYS: tuple[str, ...] = tuple(Summary.__annotations__)


# -- what a value may be: how a report read back is checked (``report.validate``) ----------------

# Numeric columns that are empty (NaN) where they do not apply: an op without bytes has no
# intensity, a non-matmul no ridge, an op XLA did not estimate no estimate, an op the trace did
# not see no measurement. Every other numeric cell of a report holds a finite number.
NULLABLE_COLUMNS: frozenset[str] = frozenset({
    "intensity", "ridge_m", "ridge_k", "mxu_waste", "xla_cycles", "xla_estimate_s",
    "roof_flops_per_s", "roof_bytes_per_s",
    *(c.name for c in COLUMNS if c.layer == "measured"),
})  # fmt: skip
# Numeric columns that are a part of a whole.
FRACTION_COLUMNS: frozenset[str] = frozenset({"share"})
# Columns a report judged on a chip cannot lack to be shown or gated: every verdict column but
# the hint (free text, and its fields, which reports written before them lack).
VERDICT_CORE: tuple[str, ...] = tuple(
    c
    for c in VERDICT_COLUMNS
    if c != "hint" and c not in HINT_FIELDS and c not in ROOF_FIELDS and c not in SPLIT_FIELDS
)
# Summary keys that are numbers no smaller than 0 (seconds, bytes, FLOPs), and those that are
# fractions of a whole.
SUMMARY_AMOUNTS: tuple[str, ...] = (
    "flops", "transcendentals", "bytes_accessed", "comm_bytes", "step_bound_s",
    "step_time_serial_s", "step_time_upper_s", "step_expected_s", "comm_time_s", "exposed_comm_s",
    "hbm_bandwidth", "host_dispatch_s",
)  # fmt: skip
SUMMARY_FRACTIONS: tuple[str, ...] = (
    "coverage", "floor_share", "exposed_comm_share", "mfu_upper_bound", "mfu_expected",
)  # fmt: skip

# -- what a report read back must agree with: its summary against its rows (``evidence``) -------

# Summary keys that are the sum of a column over the rows: key -> (column, rows summed: "all",
# or "collective" for the rows whose ``collective`` is set). A renamed or added total is one line.
SUMMARY_SUMS: dict[str, tuple[str, str]] = {
    "flops": ("flops", "all"),
    "transcendentals": ("transcendentals", "all"),
    "bytes_accessed": ("bytes_accessed", "all"),
    "comm_bytes": ("comm_bytes", "all"),
    "step_time_serial_s": ("t_expected_s", "all"),
    "comm_time_s": ("t_expected_s", "collective"),
    "exposed_comm_s": ("t_exposed_s", "collective"),
}
# Summary keys that are one summary number over another (0 where the second is 0).
SUMMARY_RATIOS: dict[str, tuple[str, str]] = {
    "exposed_comm_share": ("exposed_comm_s", "step_expected_s"),
    "remat_flops_share": ("remat_flops", "flops"),
    "remat_time_share": ("remat_time_s", "step_time_serial_s"),
}
# Columns that are another column over a summary number: ``share`` is t_expected_s of the step.
ROW_SHARES: dict[str, tuple[str, str]] = {"share": ("t_expected_s", "step_time_serial_s")}
# The summary's times of the step as scheduled, walked again from the rows' expected times
# (``verdict``'s walk): key -> (the walk's field, the summary key it is never below, or None).
SUMMARY_SCHEDULE: dict[str, tuple[str, str | None]] = {
    "step_expected_s": ("step_s", "step_bound_s"),
    "step_time_min_s": ("least_s", None),
}
# Summary keys written together, added to judged reports since their version began: a summary that
# has one of a group has all of it (an edit that drops ``step_bound_s`` to slip the step past its
# check is refused), and one written before the group has none (read as it is).
SUMMARY_GROUPS: tuple[tuple[str, ...], ...] = (
    ("step_bound_s", "mfu_expected", "host_dispatch_s"),
    ("step_time_min_s", "loops"),
    ("remat_flops", "remat_flops_share", "remat_time_s", "remat_time_share"),
    ("model_flops", "mfu_model", "hlo_flops_per_model_flop"),
)
# The unit time a row's ``bound`` names: the largest of the three where the bound is one of them.
BOUND_TIMES: dict[str, str] = {
    "compute": "t_compute_s", "memory": "t_memory_s", "communication": "t_comm_s",
}  # fmt: skip
