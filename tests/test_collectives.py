"""Collectives in the forms XLA:TPU and XLA:GPU emit, each priced once, as the kind it is.

The oracle is an analytic count written here from the HLO text alone (its own regexes, not the
package's parser): with N devices in a group and B bytes in, an all-reduce sends 2·B·(N−1)/N, a
reduce-scatter and an all-to-all B·(N−1)/N, an all-gather B·(N−1) (its output less its own shard),
a permute B. XLA:TPU's all-reduce-scatter fusions are recognised by the emitter the compiler names
in their backend_config, its async collective fusions by their ``AsyncCollectiveStart`` root.
"""

from __future__ import annotations

import gzip
import math
import re

import pandas as pd
import pytest
from conftest import FIXTURES

from hlo_roofline.cost import rows, walk
from hlo_roofline.hlo import parse

ITEM = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8}
ARRAY = re.compile(r"\b(" + "|".join(ITEM) + r")\[([\d,]*)\]")
LINE = re.compile(r"^\s*(?:ROOT )?%(\S+) = (.*?) ([a-z][a-z0-9-]*)\((.*?)\)(.*)$")
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

FILES = [
    *(f"collectives/{n}.hlo.txt.gz" for n in
      ("fsdp_v5p", "fsdp_v5e", "fsdp_h100", "windowed_v5p", "windowed_h100")),
    *(f"{p}/{t}.hlo.txt" for p in ("fsdp_train_step", "dp_train_step", "ppermute", "all_to_all")
      for t in ("tpu_v5e", "tpu_v5p", "h100")),
]  # fmt: skip


def logical(text: str) -> pd.DataFrame:
    """The roofline rows with arrays at their logical size (the report pads TPU arrays to their
    layout's tiles; the analytic count here is of the shapes as written)."""
    module = parse(text)
    return pd.DataFrame(rows(module, walk(module, "roofline", pad_to_tiles=False)))


def read(path: str) -> str:
    full = FIXTURES / path
    return gzip.open(full, "rt").read() if path.endswith(".gz") else full.read_text()


def nbytes(shape_text: str) -> int:
    return sum(ITEM[t] * math.prod(int(d) for d in dims.split(",") if d)
               for t, dims in ARRAY.findall(shape_text))  # fmt: skip


def group_size(attrs_text: str) -> int:
    """Devices in the first group, from the explicit, iota or mesh form (0: none written)."""
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=", attrs_text)
    if iota:
        return int(iota.group(1).split(",")[-1])
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\] \{([^}]*)\}", attrs_text)
    if mesh:
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", mesh.group(1)))
        return math.prod(int(sizes[a]) for a in re.findall(r"'(\w+)'", mesh.group(2)))
    explicit = re.search(r"replica_groups=\{\{([\d,]*)\}", attrs_text)
    return len(explicit.group(1).split(",")) if explicit else 0


class Text:
    """Instructions by name and computations by name, read with this file's regexes."""

    def __init__(self, text: str) -> None:
        self.instr: dict[str, tuple[str, str, list[str], str]] = {}
        self.comps: dict[str, list[str]] = {}
        comp = None
        for line in text.splitlines():
            head = re.match(r"^(?:ENTRY )?%(\S+) .*\{$", line)
            if head and not line.startswith(" "):
                comp = self.comps.setdefault(head.group(1), [])
                continue
            m = LINE.match(line)
            if m and comp is not None:
                name, shape, opcode, operands, rest = m.groups()
                self.instr[name] = (shape, opcode, re.findall(r"%([\w.\-]+)", operands), rest)
                comp.append(name)

    def operand_bytes(self, name: str) -> int:
        return sum(nbytes(self.instr[o][0]) for o in self.instr[name][2])

    def expected(self, name: str) -> tuple[str, float, int] | None:
        """(kind, bytes sent per execution, group size: 0 where the text writes no groups) of the
        op ``name`` if it launches a collective."""
        _, opcode, _, rest = self.instr[name]
        if opcode == "fusion":
            body = re.search(r"calls=%([\w.\-]+)", rest).group(1)
            inner = [n for n in self.comps[body] if self.instr[n][1] in COLLECTIVES]
            if "AllReduceScatterFusion" in rest:  # the compiler's own name for the emitter
                (ar,) = inner
                n = group_size(self.instr[ar][3])
                return "reduce-scatter", self.operand_bytes(ar) * (n - 1) / n, n
            root = self.instr[self.comps[body][-1]]
            if "AsyncCollectiveStart" not in root[3]:
                return None
            inner = inner[:1]
            name, opcode = inner[0], self.instr[inner[0]][1]
        else:
            opcode = opcode.removesuffix("-start")
            if opcode not in COLLECTIVES:
                return None
        b = self.operand_bytes(name)
        n = group_size(self.instr[name][3])
        sent = {
            "all-reduce": 2 * b * (n - 1) / max(n, 1),
            "all-gather": b * (n - 1),
            "reduce-scatter": b * (n - 1) / max(n, 1),
            "all-to-all": b * (n - 1) / max(n, 1),
            "collective-permute": b,
        }[opcode]
        return opcode, sent, n


@pytest.mark.parametrize("path", FILES)
def test_each_collective_priced_once_as_its_kind(path):
    text = read(path)
    oracle = Text(text)
    ops = logical(text)
    ops = ops[ops["count"] > 0]
    seen = 0
    for row in ops.itertuples():
        want = oracle.expected(row.name)
        per_run = row.comm_bytes / row.count
        if want is None:
            assert per_run == 0, f"{row.name} ({row.opcode}) is not a collective's launch"
            assert row.collective == "", row.name
            continue
        seen += 1
        kind, sent, n = want
        assert row.collective == kind, row.name
        assert per_run == pytest.approx(sent, rel=1e-9), row.name
        if n:  # a permute names pairs, not groups
            assert row.group_size == n, row.name
    assert seen


def test_all_reduce_scatter_fusion_present_in_real_tpu_fsdp_step():
    """XLA:TPU writes FSDP gradient reduce-scatters as all-reduce-scatter fusions (on a 2×4 mesh:
    one over the fsdp axis of 4, then an all-reduce over the data axis of 2)."""
    text = read("collectives/fsdp_v5p.hlo.txt.gz")
    assert re.search(r'"emitter":"\w*AllReduceScatterFusion"', text)
    ops = logical(text)
    scatter = ops[ops.collective == "reduce-scatter"]
    assert len(scatter) and (scatter.opcode == "fusion").all()
    assert set(scatter.group_size) == {4}
    # it scatters the whole bf16 gradient of every weight: (512·1024 + 1024·1024 + 1024·256)·2 bytes
    assert scatter.comm_bytes.sum() == pytest.approx(
        (512 * 1024 + 1024 * 1024 + 1024 * 256) * 2 * 3 / 4
    )


def test_gpu_fsdp_step_has_native_reduce_scatter():
    ops = logical(read("collectives/fsdp_h100.hlo.txt.gz"))
    scatter = ops[ops.collective == "reduce-scatter"]
    assert len(scatter) and scatter.opcode.str.startswith("reduce-scatter").all()


@pytest.mark.parametrize(("name", "loop_trips", "shards"), [
    ("windowed_v5p", 2, 18), ("windowed_h100", 1, 17),
])  # fmt: skip
def test_windowed_einsum_permutes_counted_per_iteration(name, loop_trips, shards):
    """A collective matmul over 8 devices moves x [2048,1024] bf16 in shards of 256 rows
    (524288 bytes) by permutes inside loops. Counted from the text: on v5p (bidirectional, unrolled
    twice: 8 / 2 / 2 = 2 trips) one permute before each loop, 4 per trip of each loop: 1 + 8 + 8 + 1
    = 18 shards; on H100 (fully unrolled) 8 in the all-gather loop, 9 in the reduce-scatter one
    (one of them a combined permute of 2 buffers) = 17. The matmuls keep exactly the FLOPs of the
    unwindowed ones, 2 · 2·2048·1024·512."""
    ops = logical(read(f"collectives/{name}.hlo.txt.gz"))
    assert set(ops[ops.comm_bytes > 0].collective) == {"collective-permute"}
    assert ops.comm_bytes.sum() == pytest.approx(shards * 2048 // 8 * 1024 * 2)
    bodies = ops[ops.computation.str.contains(r"(?:windowed|decomposed)\w*_body", regex=True)]
    assert len(bodies) and set(bodies["count"]) == {loop_trips}
    matmul = ops[ops.mm_m > 0]
    per_run = 2 * matmul.mm_batch.clip(lower=1) * matmul.mm_m * matmul.mm_n * matmul.mm_k
    dot_flops = (per_run * matmul["count"]).sum()
    assert dot_flops == 2 * 2 * 2048 * 1024 * 512
