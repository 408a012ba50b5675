"""A large, realistic optimized-HLO module for the benchmark: ``generate_module(100_000)``.

The text looks like an ``--xla_dump_to`` file of a sharded transformer train step that was unrolled:
one ``while`` loop per layer (a scan over micro-batches, with XLA's ``known_trip_count``) whose body
runs matmul fusions, a GELU fusion, a layer-norm fusion with a reduce, an all-reduce and async
all-gather pairs (replica groups in the list and iota forms), and an entry that slices each layer's
weights out of stacked parameters. Like a dump file it prints operands in long form
(``bf16[256,1024]{1,0} %x``), ``/*index=N*/`` comments in long tuples, metadata with ``op_name`` and
``stack_frame_id`` on almost every line, stack-frame tables, and TPU tiled layouts
(``{1,0:T(8,128)(2,1)}``) on every third layer. XLA's own parser accepts it (the benchmark checks).

Run it alone to write a module: ``.venv/bin/python benchmarks/generate.py 100000 > big.hlo.txt``.
"""

from __future__ import annotations

import sys

B, D, H, SHARDS = 256, 1024, 4096, 4  # tokens per shard, model width, MLP width, devices


def _layout(rank: int, tiled: bool, bf16: bool) -> str:
    minor_to_major = ",".join(str(d) for d in range(rank - 1, -1, -1))
    if rank == 0:
        return "{:T(128)}" if tiled else ""
    if not tiled:
        return "{" + minor_to_major + "}"
    tiles = "T(8,128)(2,1)" if bf16 else ("T(8,128)" if rank > 1 else "T(256)")
    return "{" + minor_to_major + ":" + tiles + "}"


class _Layer:
    """Prints the computations of one layer; ``shape(dtype, dims)`` follows the layer's layout."""

    def __init__(self, index: int, n_layers: int, frames: int) -> None:
        self.i = index
        self.tiled = index % 3 == 0
        self.n_layers = n_layers
        self.frames = frames
        self.frame = (index * 7) % frames
        self.lines: list[str] = []
        self.count = 0

    def shape(self, dtype: str, *dims: int) -> str:
        layout = _layout(len(dims), self.tiled, dtype == "bf16")
        return f"{dtype}[{','.join(map(str, dims))}]{layout}"

    def meta(self, scope: str, offset: int = 0) -> str:
        frame = 1 + (self.frame + offset) % self.frames
        scope = f"jit(train_step)/jit(main)/transpose(jvp(transformer))/layer_{self.i}/{scope}"
        return f'metadata={{op_name="{scope}" stack_frame_id={frame}}}'

    def instr(self, name: str, shape: str, op: str, operands: list[tuple[str, str]], rest: str = "",
              root: bool = False) -> str:  # fmt: skip
        """One instruction line; operands are (shape, name) pairs, printed in long form."""
        self.count += 1
        args = ", ".join(
            (f"/*index={k}*/" if k and k % 5 == 0 else "") + f"{s} %{n}"
            for k, (s, n) in enumerate(operands)
        )
        head = "  ROOT " if root else "  "
        return f"{head}%{name} = {shape} {op}({args}){', ' + rest if rest else ''}"

    def leaf(self, name: str, shape: str, op: str, payload: str) -> str:
        """A parameter or constant line: ``%name = shape op(payload)``."""
        self.count += 1
        return f"  %{name} = {shape} {op}({payload})"

    def computation(self, header: str, body: list[str]) -> None:
        self.lines += [header + " {", *body, "}", ""]

    def emit(self) -> list[str]:
        i, s = self.i, self.shape
        x_bf, x_f = s("bf16", B, D), s("f32", B, D)
        h_bf, h_f = s("bf16", B, H), s("f32", B, H)
        w1, w2 = s("bf16", D, H), s("bf16", H, D)
        w1_shard = s("bf16", D // SHARDS, H)
        scalar_f, scalar_i, row_f = s("f32"), s("s32"), s("f32", B)
        pred = "pred[]"

        # fused matmul: bf16 x bf16 -> f32 accumulate -> bf16
        self.computation(
            f"%fused_dot.{i} (param_0.{i}: bf16[{B},{D}], param_1.{i}: bf16[{D},{H}]) "
            f"-> bf16[{B},{H}]",
            [
                self.leaf(f"param_0.{i}", x_bf, "parameter", "0"),
                self.leaf(f"param_1.{i}", w1, "parameter", "1"),
                self.instr(f"dot.{i}", h_f, "dot", [(x_bf, f"param_0.{i}"), (w1, f"param_1.{i}")],
                           "lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                           + self.meta("mlp/up/dot_general", 1)),
                self.instr(f"convert.{i}", h_bf, "convert", [(h_f, f"dot.{i}")],
                           self.meta("mlp/up/convert_element_type", 1), root=True),
            ],
        )  # fmt: skip
        # GELU (tanh form) in f32
        g = f"gelu.{i}"
        self.computation(
            f"%fused_gelu.{i} (param_0.g{i}: bf16[{B},{H}]) -> bf16[{B},{H}]",
            [
                self.leaf(f"param_0.g{i}", h_bf, "parameter", "0"),
                self.instr(f"{g}.cvt", h_f, "convert", [(h_bf, f"param_0.g{i}")],
                           self.meta("mlp/gelu/convert_element_type", 2)),
                self.leaf(f"{g}.c", scalar_f, "constant", "0.5"),
                self.instr(f"{g}.half", h_f, "broadcast", [(scalar_f, f"{g}.c")],
                           "dimensions={}, " + self.meta("mlp/gelu/mul", 2)),
                self.instr(f"{g}.cube", h_f, "multiply", [(h_f, f"{g}.cvt"), (h_f, f"{g}.cvt")],
                           self.meta("mlp/gelu/integer_pow", 2)),
                self.instr(f"{g}.tanh", h_f, "tanh", [(h_f, f"{g}.cube")],
                           self.meta("mlp/gelu/tanh", 2)),
                self.instr(f"{g}.add", h_f, "add", [(h_f, f"{g}.tanh"), (h_f, f"{g}.half")],
                           self.meta("mlp/gelu/add", 2)),
                self.instr(f"{g}.mul", h_f, "multiply", [(h_f, f"{g}.add"), (h_f, f"{g}.cvt")],
                           self.meta("mlp/gelu/mul", 2)),
                self.instr(f"{g}.out", h_bf, "convert", [(h_f, f"{g}.mul")],
                           self.meta("mlp/gelu/convert_element_type", 2), root=True),
            ],
        )  # fmt: skip
        # second matmul
        self.computation(
            f"%fused_dot2.{i} (param_0.d{i}: bf16[{B},{H}], param_1.d{i}: bf16[{H},{D}]) "
            f"-> bf16[{B},{D}]",
            [
                self.leaf(f"param_0.d{i}", h_bf, "parameter", "0"),
                self.leaf(f"param_1.d{i}", w2, "parameter", "1"),
                self.instr(f"dot2.{i}", x_f, "dot", [(h_bf, f"param_0.d{i}"), (w2, f"param_1.d{i}")],
                           "lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                           + self.meta("mlp/down/dot_general", 3)),
                self.instr(f"convert2.{i}", x_bf, "convert", [(x_f, f"dot2.{i}")],
                           self.meta("mlp/down/convert_element_type", 3), root=True),
            ],
        )  # fmt: skip
        # residual + layer norm statistics: a two-output fusion with a reduce
        n = f"norm.{i}"
        self.computation(
            f"%fused_norm.{i} (param_0.n{i}: bf16[{B},{D}], param_1.n{i}: bf16[{B},{D}]) "
            f"-> (bf16[{B},{D}], f32[{B}])",
            [
                self.leaf(f"param_0.n{i}", x_bf, "parameter", "0"),
                self.leaf(f"param_1.n{i}", x_bf, "parameter", "1"),
                self.instr(f"{n}.res", x_bf, "add", [(x_bf, f"param_0.n{i}"), (x_bf, f"param_1.n{i}")],
                           self.meta("add", 4)),
                self.instr(f"{n}.cvt", x_f, "convert", [(x_bf, f"{n}.res")],
                           self.meta("layer_norm/convert_element_type", 4)),
                self.instr(f"{n}.sq", x_f, "multiply", [(x_f, f"{n}.cvt"), (x_f, f"{n}.cvt")],
                           self.meta("layer_norm/square", 4)),
                self.leaf(f"{n}.zero", scalar_f, "constant", "0"),
                self.instr(f"{n}.sum", row_f, "reduce", [(x_f, f"{n}.sq"), (scalar_f, f"{n}.zero")],
                           "dimensions={1}, to_apply=%add_f32, " + self.meta("layer_norm/reduce_sum", 4)),
                self.instr(f"{n}.rsqrt", row_f, "rsqrt", [(row_f, f"{n}.sum")],
                           self.meta("layer_norm/rsqrt", 4)),
                self.instr(f"{n}.out", f"({x_bf}, {row_f})", "tuple",
                           [(x_bf, f"{n}.res"), (row_f, f"{n}.rsqrt")], root=True),
            ],
        )  # fmt: skip
        # loop counter and loop condition helpers
        self.computation(
            f"%wrapped_add.{i} (a.{i}: s32[], b.{i}: s32[]) -> s32[]",
            [
                self.leaf(f"a.{i}", scalar_i, "parameter", "0"),
                self.leaf(f"b.{i}", scalar_i, "parameter", "1"),
                self.instr(f"inc.{i}", scalar_i, "add", [(scalar_i, f"a.{i}"), (scalar_i, f"b.{i}")],
                           self.meta("while/body/add"), root=True),
            ],
        )  # fmt: skip
        # the loop body: state is (counter, x, w1 shard, w2, w1 full, norm rows)
        state = [scalar_i, x_bf, w1_shard, w2, w1, row_f]
        state_type = "(" + ", ".join(_strip_layout(t) for t in state) + ")"
        state_shape = "(" + ", ".join(state) + ")"
        body = f"body_arg.{i}"
        groups = "replica_groups={{0,1,2,3}}" if i % 2 else "replica_groups=[1,4]<=[4]"
        ag_shape = f"({w1_shard}, {w1})"
        norm_shape = f"({x_bf}, {row_f})"
        self.computation(
            f"%body.{i} ({body}: {state_type}) -> {state_type}",
            [
                self.leaf(body, state_shape, "parameter", "0"),
                *[
                    self.instr(f"gte.{i}.{k}", t, "get-tuple-element", [(state_shape, body)], f"index={k}")
                    for k, t in enumerate(state)
                ],
                self.leaf(f"one.{i}", scalar_i, "constant", "1"),
                self.instr(f"next.{i}", scalar_i, "fusion",
                           [(scalar_i, f"gte.{i}.0"), (scalar_i, f"one.{i}")],
                           f"kind=kLoop, calls=%wrapped_add.{i}, " + self.meta("while/body/add")),
                self.instr(f"ag-start.{i}", ag_shape, "all-gather-start", [(w1_shard, f"gte.{i}.2")],
                           f"channel_id={2 * i + 1}, {groups}, dimensions={{0}}, use_global_device_ids=true, "
                           + self.meta("mlp/up/all_gather", 1)),
                self.instr(f"ag-done.{i}", w1, "all-gather-done", [(ag_shape, f"ag-start.{i}")],
                           self.meta("mlp/up/all_gather", 1)),
                self.instr(f"up.{i}", h_bf, "fusion", [(x_bf, f"gte.{i}.1"), (w1, f"ag-done.{i}")],
                           f"kind=kOutput, calls=%fused_dot.{i}, " + self.meta("mlp/up/dot_general", 1)
                           + ', backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],'
                           '"fusion_backend_config":{"kind":"__triton_gemm"},"force_earliest_schedule":false}'),
                self.instr(f"gelu.{i}", h_bf, "fusion", [(h_bf, f"up.{i}")],
                           f"kind=kLoop, calls=%fused_gelu.{i}, " + self.meta("mlp/gelu/tanh", 2) + _QUEUE),
                self.instr(f"down.{i}", x_bf, "fusion", [(h_bf, f"gelu.{i}"), (w2, f"gte.{i}.3")],
                           f"kind=kOutput, calls=%fused_dot2.{i}, " + self.meta("mlp/down/dot_general", 3)
                           + _QUEUE),
                self.instr(f"ar.{i}", x_bf, "all-reduce", [(x_bf, f"down.{i}")],
                           f"channel_id={2 * i + 2}, {groups}, use_global_device_ids=true, "
                           "to_apply=%add_bf16, " + self.meta("mlp/down/psum", 3)),
                self.instr(f"norm.{i}", norm_shape, "fusion", [(x_bf, f"ar.{i}"), (x_bf, f"gte.{i}.1")],
                           f"kind=kInput, calls=%fused_norm.{i}, " + self.meta("layer_norm/reduce_sum", 4)
                           + _QUEUE),
                self.instr(f"x.{i}", x_bf, "get-tuple-element", [(norm_shape, f"norm.{i}")], "index=0"),
                self.instr(f"rows.{i}", row_f, "get-tuple-element", [(norm_shape, f"norm.{i}")], "index=1"),
                self.instr(f"out.{i}", state_shape, "tuple",
                           [(scalar_i, f"next.{i}"), (x_bf, f"x.{i}"), (w1_shard, f"gte.{i}.2"),
                            (w2, f"gte.{i}.3"), (w1, f"ag-done.{i}"), (row_f, f"rows.{i}")], root=True),
            ],
        )  # fmt: skip
        cond = f"cond_arg.{i}"
        self.computation(
            f"%cond.{i} ({cond}: {state_type}) -> pred[]",
            [
                self.leaf(cond, state_shape, "parameter", "0"),
                self.instr(f"ci.{i}", scalar_i, "get-tuple-element", [(state_shape, cond)], "index=0"),
                self.leaf(f"limit.{i}", scalar_i, "constant", "4"),
                self.instr(f"lt.{i}", pred, "compare", [(scalar_i, f"ci.{i}"), (scalar_i, f"limit.{i}")],
                           "direction=LT, " + self.meta("while/cond/lt"), root=True),
            ],
        )  # fmt: skip
        return self.lines

    def entry_lines(self, x_prev: str, x_prev_shape: str) -> tuple[list[str], str, str]:
        """The entry's part for this layer: weight slices, the loop, its result."""
        i, s, L = self.i, self.shape, self.n_layers
        x_bf, row_f = s("bf16", B, D), s("f32", B)
        w1_shard, w2, w1 = s("bf16", D // SHARDS, H), s("bf16", H, D), s("bf16", D, H)
        scalar_i = s("s32")
        stacked1 = f"bf16[{L},{D // SHARDS},{H}]{_layout(3, False, True)}"
        stacked2 = f"bf16[{L},{H},{D}]{_layout(3, False, True)}"
        state = [scalar_i, x_bf, w1_shard, w2, w1, row_f]
        state_shape = "(" + ", ".join(state) + ")"
        lines = [
            self.instr(f"w1s.{i}", f"bf16[1,{D // SHARDS},{H}]{_layout(3, self.tiled, True)}", "slice",
                       [(stacked1, "w1_stacked")], f"slice={{[{i}:{i + 1}], [0:{D // SHARDS}], [0:{H}]}}, "
                       + self.meta("slice")),
            self.instr(f"w1.{i}", w1_shard, "bitcast", [(f"bf16[1,{D // SHARDS},{H}]", f"w1s.{i}")]),
            self.instr(f"w2s.{i}", f"bf16[1,{H},{D}]{_layout(3, self.tiled, True)}", "slice",
                       [(stacked2, "w2_stacked")], f"slice={{[{i}:{i + 1}], [0:{H}], [0:{D}]}}, "
                       + self.meta("slice")),
            self.instr(f"w2.{i}", w2, "bitcast", [(f"bf16[1,{H},{D}]", f"w2s.{i}")]),
            self.instr(f"wfull.{i}", w1, "broadcast", [(s("bf16"), "zero_bf16")], "dimensions={}"),
            self.instr(f"rows0.{i}", row_f, "broadcast", [(s("f32"), "zero_f32")], "dimensions={}"),
            self.instr(f"init.{i}", state_shape, "tuple",
                       [(scalar_i, "zero_s32"), (x_prev_shape, x_prev), (w1_shard, f"w1.{i}"),
                        (w2, f"w2.{i}"), (w1, f"wfull.{i}"), (row_f, f"rows0.{i}")]),
            self.instr(f"while.{i}", state_shape, "while", [(state_shape, f"init.{i}")],
                       f"condition=%cond.{i}, body=%body.{i}, " + self.meta("while")
                       + ', backend_config={"known_trip_count":{"n":"4"}}'),
            self.instr(f"xo.{i}", x_bf, "get-tuple-element", [(state_shape, f"while.{i}")], "index=1"),
        ]  # fmt: skip
        return lines, f"xo.{i}", x_bf


_QUEUE = ', backend_config={"operation_queue_id":"0","wait_on_operation_queues":[]}'


def _strip_layout(shape: str) -> str:
    """``bf16[8,128]{1,0:T(8,128)}`` -> ``bf16[8,128]`` (computation signatures carry no layout)."""
    return shape.split("{", 1)[0]


def generate_module(instructions: int = 100_000, frames: int = 200) -> str:
    """An HLO module text with at least ``instructions`` instructions (deterministic)."""
    probe = _Layer(0, 1, frames)
    probe.emit()
    probe.entry_lines("x", "bf16[1]")
    n_layers = max(1, -(-(instructions - 10) // probe.count))
    out = [
        f"HloModule jit_train_step, is_scheduled=true, entry_computation_layout="
        f"{{(bf16[{B},{D}]{{1,0}}, bf16[{n_layers},{D // SHARDS},{H}]{{2,1,0}}, "
        f"bf16[{n_layers},{H},{D}]{{2,1,0}})->bf16[{B},{D}]{{1,0}}}}, num_partitions={SHARDS}, "
        'frontend_attributes={fingerprint_before_lhs="3f1c0a5e"}',
        "",
        "FileNames",
        '1 "/home/user/project/model/transformer.py"',
        '2 "/home/user/project/train.py"',
        "",
        "FunctionNames",
        *[f'{k} "layer_fn_{k}"' for k in range(1, frames + 1)],
        "",
        "FileLocations",
        *[
            f"{k} {{file_name_id={1 + k % 2} function_name_id={k} line={10 + k} end_line={10 + k} "
            f"column=4 end_column=40}}"
            for k in range(1, frames + 1)
        ],
        "",
        "StackFrames",
        *[
            f"{k} {{file_location_id={k} parent_frame_id={max(1, k - 1)}}}"
            for k in range(1, frames + 1)
        ],
        "",
        "",
        "%add_f32 (lhs: f32[], rhs: f32[]) -> f32[] {",
        "  %lhs = f32[] parameter(0)",
        "  %rhs = f32[] parameter(1)",
        "  ROOT %sum = f32[] add(f32[] %lhs, f32[] %rhs)",
        "}",
        "",
        "%add_bf16 (xb: bf16[], yb: bf16[]) -> bf16[] {",
        "  %xb = bf16[] parameter(0)",
        "  %yb = bf16[] parameter(1)",
        "  ROOT %sumb = bf16[] add(bf16[] %xb, bf16[] %yb)",
        "}",
        "",
    ]
    entry: list[str] = [
        f"ENTRY %main (x_in: bf16[{B},{D}], w1_stacked: bf16[{n_layers},{D // SHARDS},{H}], "
        f"w2_stacked: bf16[{n_layers},{H},{D}]) -> bf16[{B},{D}] {{",
        f"  %x_in = bf16[{B},{D}]{{1,0}} parameter(0), sharding={{devices=[4,1]<=[4]}}, "
        'metadata={op_name="x"}',
        f"  %w1_stacked = bf16[{n_layers},{D // SHARDS},{H}]{{2,1,0}} parameter(1), "
        "sharding={devices=[1,4,1]<=[4]}, metadata={op_name=\"params['w1']\"}",
        f"  %w2_stacked = bf16[{n_layers},{H},{D}]{{2,1,0}} parameter(2), "
        "sharding={replicated}, metadata={op_name=\"params['w2']\"}",
        "  %zero_s32 = s32[] constant(0)",
        "  %zero_bf16 = bf16[] constant(0)",
        "  %zero_f32 = f32[] constant(0)",
    ]
    x, x_shape = "x_in", f"bf16[{B},{D}]{{1,0}}"
    for i in range(n_layers):
        layer = _Layer(i, n_layers, frames)
        out += layer.emit()
        lines, x, x_shape = layer.entry_lines(x, x_shape)
        entry += lines
    entry.append(f"  ROOT %result = bf16[{B},{D}]{{1,0}} copy({x_shape} %{x})")
    entry.append("}")
    return "\n".join(out + entry) + "\n"


_FLAT_OPS = ("add", "multiply", "exponential", "maximum", "negate", "subtract", "tanh", "divide")


def generate_flat_module(instructions: int = 200_000) -> str:
    """A module as flat as HLO gets (deterministic): one entry computation of ``instructions``
    elementwise ops on one small array, short lines as ``compiled.as_text()`` prints them, no
    metadata, no layouts past the default, no stack frames: the most instructions per byte of
    text, so the most memory per byte (each instruction is an object and a row however short
    its line)."""
    shape = "f32[1024]{0}"
    lines = [
        "HloModule jit_flat, is_scheduled=true, entry_computation_layout="
        "{(f32[1024]{0}, f32[1024]{0})->f32[1024]{0}}",
        "",
        "ENTRY %main.0 (x.1: f32[1024], y.2: f32[1024]) -> f32[1024] {",
        f"  %x.1 = {shape} parameter(0)",
        f"  %y.2 = {shape} parameter(1)",
    ]
    names = ["x.1", "y.2"]
    for k in range(3, instructions + 1):
        op = _FLAT_OPS[k % len(_FLAT_OPS)]
        name = f"{op}.{k}"
        if op in ("exponential", "negate", "tanh"):
            operands = f"%{names[-1]}"
        else:
            operands = f"%{names[-1]}, %{names[-2 - k % 7 if len(names) > 8 else -2]}"
        root = "ROOT " if k == instructions else ""
        lines.append(f"  {root}%{name} = {shape} {op}({operands})")
        names.append(name)
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    flat = len(sys.argv) > 2 and sys.argv[2] == "--flat"
    sys.stdout.write(generate_flat_module(size) if flat else generate_module(size))
