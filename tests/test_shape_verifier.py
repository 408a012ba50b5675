"""HLO whose shapes contradict each other is refused at parse time, never priced (issue 40).

The parser's verifier holds what the cost model reads to XLA's shape inference: dot and
convolution dimension numbers, elementwise operands, reduce dimensions, slice, pad and concatenate
bounds, gather and scatter dimension numbers, tuple indices. The oracles: every committed module
(compiled by XLA, so consistent) parses; mutations of real fixture instructions that break a rule
by construction (a dimension index out of range or onto a dimension of another size, a bound past
its dimension, an operand of another shape) are each an ``HloParseError`` on the mutated line;
mutations that keep the shapes consistent (contracting pairs reordered, a reduce's dimensions
reordered, a stride of 1 spelled out, interior padding of 0 spelled out) parse and are priced as
the unmutated module is."""

from __future__ import annotations

import gzip
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from conftest import SLOW

from hlo_roofline import analyze_hlo
from hlo_roofline.hlo import HloParseError, parse_module

ROOT = Path(__file__).resolve().parent.parent
MAX_TEXT = 400_000  # small modules: each mutation parses the whole module again
PER_KIND_PER_FILE = 1


def _texts() -> dict[str, str]:
    listed = subprocess.run(
        ["git", "ls-files", "fixtures"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    texts = {}
    for name in listed:
        if not name.endswith((".hlo.txt", ".hlo.txt.gz", "after_optimizations.txt")):
            continue
        data = (ROOT / name).read_bytes()
        texts[name] = (gzip.decompress(data) if name.endswith(".gz") else data).decode()
    return texts


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return _texts()


def test_every_committed_module_passes_the_verifier(texts):
    """XLA compiled every one of them: none is refused (parser_syntax holds deliberate errors in
    files named for them)."""
    refused = []
    for name, text in texts.items():
        try:
            parse_module(text)
        except HloParseError as exc:
            refused.append(f"{name}: {exc.message}")
    assert not refused, refused[:5]
    assert len(texts) > 400


def test_the_issue_case_is_refused_with_line_and_column():
    text = (ROOT / "fixtures/scan10/h100.hlo.txt").read_text()
    line = next(i for i, raw in enumerate(text.split("\n")) if "lhs_contracting_dims={1}" in raw)
    mutated = text.replace("lhs_contracting_dims={1}", "lhs_contracting_dims={2}", 1)
    with pytest.raises(HloParseError) as caught:
        parse_module(mutated)
    assert caught.value.line == line + 1
    assert caught.value.column == mutated.split("\n")[line].find("lhs_contracting_dims=") + 1


# -- mutations ------------------------------------------------------------------------------------


def _set(attr: str, values) -> str:
    return f"{attr}={{{','.join(map(str, values))}}}"


def _replace_attr(line: str, attr: str, new: str) -> str | None:
    match = re.search(rf"\b{re.escape(attr)}=(\{{[^}}]*\}}|[^,\s}}]+)", line)
    if match is None:
        return None
    return line[: match.start()] + new + line[match.end() :]


def _broken(instr, line: str) -> list[tuple[str, str]]:
    """(kind, mutated line): changes that contradict the operand shapes by construction."""
    from hlo_roofline.hlo.attrs import dot_dims, ints

    op = instr.opcode
    out: list[tuple[str, str]] = []
    operands = [o.shape for o in instr.operands]
    if op == "dot" and "sparsity" not in line and all(s.is_array for s in operands[:2]):
        lhs, rhs = operands[0].dims, operands[1].dims
        d = dot_dims(instr)
        for k, j in enumerate(d.rhs_contracting):
            others = [x for x in range(len(lhs) + 1) if x >= len(lhs) or lhs[x] != rhs[j]]
            for other in others[:2]:
                changed = list(d.lhs_contracting)
                changed[k] = other
                new = _replace_attr(line, "lhs_contracting_dims", _set("lhs_contracting_dims",
                                                                         changed))  # fmt: skip
                if new:
                    out.append(("dot contracting", new))
            if rhs:
                new = _replace_attr(line, "rhs_contracting_dims",
                                    _set("rhs_contracting_dims", [len(rhs)]))  # fmt: skip
                if new:
                    out.append(("dot contracting out of range", new))
        if d.lhs_batch:
            new = _replace_attr(line, "rhs_batch_dims", _set("rhs_batch_dims", d.rhs_batch[1:]))
            if new:
                out.append(("dot batch count", new))
    elif op == "convolution" and "feature_group_count" not in line and operands[0].is_array:
        new = line.replace("convolution(", "convolution(", 1)
        labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", line)
        if labels and len(labels.group(1)) == len(operands[0].dims):
            lhs = labels.group(1)
            b, f = lhs.index("b"), lhs.index("f")
            if operands[0].dims[b] != operands[0].dims[f]:
                swapped = list(lhs)
                swapped[b], swapped[f] = "f", "b"
                new = line.replace(labels.group(0), labels.group(0).replace(lhs, "".join(swapped)))
                out.append(("convolution labels", new))
            out.append(("convolution groups", line.replace(
                "dim_labels=", "feature_group_count=7, dim_labels=", 1)))  # fmt: skip
    elif op in ("add", "multiply", "subtract", "maximum", "minimum", "divide"):
        for other in instr.computation.instructions:
            if other is instr or other.line >= instr.line or not other.shape.is_array:
                continue
            if other.shape.dims != instr.shape.dims and other.shape.dims and instr.operands:
                name = instr.operands[0].name
                head, sep, tail = line.partition(f"{op}(")
                mutated = tail.replace(f"%{name}", f"%{other.name}", 1)
                if sep and mutated != tail and f"%{other.name}" in mutated:
                    out.append(("elementwise operand", head + sep + mutated))
                break
    elif op == "reduce" and operands and operands[0].is_array:
        rank = len(operands[0].dims)
        new = _replace_attr(line, "dimensions", _set("dimensions", [rank]))
        if new:
            out.append(("reduce dimension out of range", new))
        kept = ints(instr, "dimensions")
        free = [i for i in range(rank) if i not in kept]
        if free and instr.shape.is_array and operands[0].dims[free[0]] != 1:
            new = _replace_attr(line, "dimensions", _set("dimensions", [*kept, free[0]]))
            if new:
                out.append(("reduce dimensions vs result", new))
    elif op == "slice" and operands and operands[0].is_array:
        match = re.search(r"slice=\{\[(\d+):(\d+)", line)
        if match and operands[0].dims:
            bound = operands[0].dims[0]
            new = line[: match.start(2)] + str(bound + 1) + line[match.end(2) :]
            out.append(("slice past its dimension", new))
            if int(match.group(2)) > int(match.group(1)) + 1:
                shorter = str(int(match.group(2)) - 1)
                out.append(("slice vs result", line[: match.start(2)] + shorter
                            + line[match.end(2) :]))  # fmt: skip
    elif op == "pad":
        match = re.search(r"padding=(-?\d+)_", line)
        if match:
            value = str(int(match.group(1)) + 1)
            out.append(("pad vs result", line[: match.start(1)] + value + line[match.end(1) :]))
    elif op == "concatenate" and operands and operands[0].is_array:
        rank = len(operands[0].dims)
        axis = ints(instr, "dimensions")
        new = _replace_attr(line, "dimensions", _set("dimensions", [rank]))
        if new:
            out.append(("concatenate dimension out of range", new))
        for other in range(rank):
            if (
                axis
                and other != axis[0]
                and any(
                    s.dims[other] != operands[0].dims[other] or s.dims[axis[0]] != 0
                    for s in operands
                )
            ):
                new = _replace_attr(line, "dimensions", _set("dimensions", [other]))
                if new:
                    out.append(("concatenate along another dimension", new))
                break
    elif op == "gather" and operands and operands[0].is_array:
        sizes = ints(instr, "slice_sizes")
        if sizes:
            bigger = [*sizes]
            bigger[0] = operands[0].dims[0] + 1
            new = _replace_attr(line, "slice_sizes", _set("slice_sizes", bigger))
            if new:
                out.append(("gather slice size", new))
        new = _replace_attr(
            line, "index_vector_dim", f"index_vector_dim={len(operands[1].dims) + 1}"
        )
        if new:
            out.append(("gather index_vector_dim", new))
        new = _replace_attr(line, "start_index_map", _set("start_index_map",
                                                          [len(operands[0].dims)]))  # fmt: skip
        if new:
            out.append(("gather start_index_map", new))
    elif op == "scatter" and operands and operands[0].is_array:
        rank = len(operands[0].dims)
        new = _replace_attr(line, "inserted_window_dims", _set("inserted_window_dims", [rank]))
        if new:
            out.append(("scatter inserted_window_dims", new))
        new = _replace_attr(line, "scatter_dims_to_operand_dims",
                            _set("scatter_dims_to_operand_dims", [rank, rank]))  # fmt: skip
        if new:
            out.append(("scatter dims to operand", new))
    elif op == "get-tuple-element" and operands and operands[0].is_tuple:
        count = len(operands[0].tuple_shapes)
        new = _replace_attr(line, "index", f"index={count}")
        if new:
            out.append(("tuple index out of range", new))
        index = int(re.search(r"index=(\d+)", line).group(1)) if "index=" in line else None
        for k, element in enumerate(operands[0].tuple_shapes):
            if (
                index is not None
                and k != index
                and (element.dtype != instr.shape.dtype or element.dims != instr.shape.dims)
            ):
                out.append(("tuple index onto another shape", _replace_attr(line, "index",
                                                                            f"index={k}")))  # fmt: skip
                break
    elif op == "transpose" and operands and operands[0].is_array:
        perm = list(ints(instr, "dimensions"))
        dims = operands[0].dims
        pairs = [(a, b) for a in range(len(perm)) for b in range(a + 1, len(perm))
                 if dims[perm[a]] != dims[perm[b]]]  # fmt: skip
        if pairs:
            a, b = pairs[0]
            swapped = [*perm]
            swapped[a], swapped[b] = swapped[b], swapped[a]
            new = _replace_attr(line, "dimensions", _set("dimensions", swapped))
            if new:
                out.append(("transpose permutation vs result", new))
        if perm:
            new = _replace_attr(line, "dimensions", _set("dimensions", [*perm[:-1], len(perm)]))
            if new:
                out.append(("transpose not a permutation", new))
    elif op == "broadcast" and operands and operands[0].is_array and operands[0].dims:
        dims = list(ints(instr, "dimensions"))
        out_dims = instr.shape.dims
        if len(dims) == len(operands[0].dims):
            wrong = [d for d in range(len(out_dims)) if out_dims[d] != operands[0].dims[0]]
            if wrong:
                new = _replace_attr(line, "dimensions", _set("dimensions", [wrong[0], *dims[1:]]))
                if new:
                    out.append(("broadcast onto another size", new))
            new = _replace_attr(line, "dimensions", _set("dimensions", dims[:-1]))
            if new:
                out.append(("broadcast dimension count", new))
    elif op == "dynamic-slice" and operands and operands[0].is_array and operands[0].dims:
        sizes = list(ints(instr, "dynamic_slice_sizes"))
        if sizes:
            sizes[0] = operands[0].dims[0] + 1
            new = _replace_attr(line, "dynamic_slice_sizes", _set("dynamic_slice_sizes", sizes))
            if new:
                out.append(("dynamic-slice size past its dimension", new))
    elif op == "reduce-window":
        match = re.search(r"window=\{size=(\d+)", line)
        if match and operands and operands[0].is_array and operands[0].dims:
            bigger = str(operands[0].dims[0] + int(match.group(1)) + 1)
            out.append(("reduce-window size vs result",
                        line[: match.start(1)] + bigger + line[match.end(1) :]))  # fmt: skip
    return out


def _kept(instr, line: str) -> list[tuple[str, str]]:
    """(kind, mutated line): changes XLA accepts that leave every shape and price as it was."""
    from hlo_roofline.hlo.attrs import dot_dims, ints

    out: list[tuple[str, str]] = []
    if instr.opcode == "dot" and "sparsity" not in line:
        d = dot_dims(instr)
        if len(d.lhs_contracting) > 1:
            new = _replace_attr(line, "lhs_contracting_dims",
                                _set("lhs_contracting_dims", d.lhs_contracting[::-1]))  # fmt: skip
            new = new and _replace_attr(new, "rhs_contracting_dims",
                                        _set("rhs_contracting_dims", d.rhs_contracting[::-1]))  # fmt: skip
            if new:
                out.append(("dot contracting pairs reordered", new))
    if instr.opcode == "reduce":
        dims = ints(instr, "dimensions")
        if len(dims) > 1:
            new = _replace_attr(line, "dimensions", _set("dimensions", dims[::-1]))
            if new:
                out.append(("reduce dimensions reordered", new))
    if instr.opcode == "slice":
        new = re.sub(r"\[(\d+):(\d+)\]", r"[\1:\2:1]", line, count=1)
        if new != line:
            out.append(("slice stride 1 spelled out", new))
    if instr.opcode == "transpose" and instr.operands and instr.operands[0].shape.is_array:
        perm = list(ints(instr, "dimensions"))
        dims = instr.operands[0].shape.dims
        pairs = [(a, b) for a in range(len(perm)) for b in range(a + 1, len(perm))
                 if dims[perm[a]] == dims[perm[b]]]  # fmt: skip
        if pairs:
            a, b = pairs[0]
            perm[a], perm[b] = perm[b], perm[a]
            new = _replace_attr(line, "dimensions", _set("dimensions", perm))
            if new:
                out.append(("transpose of equal dimensions swapped", new))
    if instr.opcode in ("add", "multiply", "convert", "broadcast") and "metadata={" in line:
        new = re.sub(r", metadata=\{[^{}]*\}", "", line, count=1)
        if new != line:
            out.append(("metadata dropped", new))
    if instr.opcode == "pad":
        new = re.sub(r"padding=(-?\d+)_(-?\d+)(?=[x,}\s])", r"padding=\1_\2_0", line, count=1)
        if new != line:
            out.append(("pad interior 0 spelled out", new))
    return out


def _mutations(texts: dict[str, str], make) -> list[tuple[str, str, int, str]]:
    """(file, kind, line number, mutated module text) over every small fixture."""
    found = []
    for name, text in texts.items():
        if len(text) > MAX_TEXT or "parser_syntax" in name:
            continue
        module = parse_module(text)
        lines = text.split("\n")
        per_kind: Counter = Counter()
        for computation in module.computations.values():
            for instr in computation.instructions:
                number = instr.line
                line = lines[number - 1]
                if f"%{instr.name} = " not in line and f"{instr.name} = " not in line:
                    continue  # a get-tuple-element the parser made for a compact "%x#N"
                for kind, new in make(instr, line):
                    if new is None or new == line or per_kind[kind] >= PER_KIND_PER_FILE:
                        continue
                    per_kind[kind] += 1
                    mutated = "\n".join([*lines[: number - 1], new, *lines[number:]])
                    found.append((name, kind, number, mutated))
    return found


def test_shape_inconsistent_mutations_are_all_refused(texts):
    mutations = _mutations(texts, _broken)
    kinds = Counter(kind for _, kind, _, _ in mutations)
    priced = []
    for name, kind, number, mutated in mutations:
        try:
            parse_module(mutated)
        except HloParseError as exc:
            assert exc.line == number, (name, kind, exc.line, number, exc.message)
            continue
        priced.append(f"{name}:{number} {kind}")
    print(f"{len(mutations)} shape-inconsistent mutations of {len(kinds)} kinds: {dict(kinds)}")
    assert len(mutations) >= 100 and len(kinds) >= 24, kinds
    assert not priced, f"{len(priced)} of {len(mutations)} priced: {priced[:8]}"


def test_consistent_mutations_are_priced_as_before(texts):
    mutations = _mutations(texts, _kept)
    kinds = Counter(kind for _, kind, _, _ in mutations)
    wrong = []
    originals: dict[str, dict] = {}
    for name, kind, number, mutated in mutations:
        if name not in originals:
            originals[name] = analyze_hlo(texts[name]).summary
        summary = analyze_hlo(mutated).summary
        before = originals[name]
        if any(summary[k] != before[k] for k in ("flops", "bytes_accessed", "transcendentals")):
            wrong.append(f"{name}:{number} {kind}")
    print(f"{len(mutations)} consistent mutations of {len(kinds)} kinds: {dict(kinds)}")
    assert len(mutations) >= 50 and len(kinds) >= 5, kinds
    assert not wrong, wrong[:8]


# -- XLA's own verifier as the oracle -------------------------------------------------------------

# XLA's tooling in jaxlib: its HLO parser, then StableHLO's verifier on the module it imports. Its
# parser aborts the process (a CHECK) on some malformed text, so it runs in a child, restarted past
# the text it died on (that text counts as refused).
_XLA_WORKER = """
import pickle, sys
from jaxlib import _hlo
from jax._src.interpreters import mlir
from jax._src.lib import xla_client as xc
from jax._src.lib.mlir import ir
ctx = mlir.make_ir_context()
texts = pickle.load(open(sys.argv[1], "rb"))
for i in range(int(sys.argv[2]), len(texts)):
    print("start", i, flush=True)
    try:
        proto = _hlo.hlo_module_from_text(texts[i]).as_serialized_hlo_module_proto()
        with ctx:
            ok = ir.Module.parse(xc._xla.mlir.hlo_to_stablehlo(proto)).operation.verify()
    except Exception:
        ok = False
    print("done", i, int(bool(ok)), flush=True)
"""


def _xla_accepts(texts: list[str], tmp_path: Path) -> list[bool]:
    import pickle
    import sys

    worker, items = tmp_path / "xla_worker.py", tmp_path / "texts.pkl"
    worker.write_text(_XLA_WORKER)
    items.write_bytes(pickle.dumps(texts))
    verdicts: dict[int, bool] = {}
    start = 0
    while start < len(texts):
        done = subprocess.run([sys.executable, str(worker), str(items), str(start)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        began = None
        for line in done.stdout.splitlines():
            word, index, *ok = line.split()
            if word == "start":
                began = int(index)
            else:
                verdicts[int(index)] = ok == ["1"]
        if began is None:
            raise AssertionError(done.stderr[-2000:])
        verdicts.setdefault(began, False)  # it died on this one
        start = max(verdicts) + 1
    return [verdicts[i] for i in range(len(texts))]


# Kinds XLA's StableHLO import takes as they are: a get-tuple-element's declared shape is replaced
# by the element's there (XLA's HloVerifier refuses the mismatch; this route does not run it).
_XLA_IMPORT_IGNORES = {"tuple index onto another shape"}


@SLOW  # XLA's parser and StableHLO's verifier in a child process (a minute or two)
def test_xla_refuses_the_mutations_we_refuse_and_accepts_the_fixtures_we_accept(texts, tmp_path):
    sample: dict[str, str] = {}
    for name, kind, _, mutated in _mutations(texts, _broken):
        if kind not in _XLA_IMPORT_IGNORES and "cpu" in name:
            sample.setdefault(kind, mutated)
    small = {n: t for n, t in texts.items() if len(t) < 200_000 and "parser_syntax" not in n}
    fixtures = sorted(small)[::8]
    verdicts = _xla_accepts([*sample.values(), *(small[n] for n in fixtures)], tmp_path)
    accepted = [k for k, ok in zip(sample, verdicts, strict=False) if ok]
    assert len(sample) >= 10 and not accepted, accepted
    xla_fine = [n for n, ok in zip(fixtures, verdicts[len(sample) :], strict=True) if ok]
    assert len(xla_fine) > len(fixtures) / 2
    for name in xla_fine:
        parse_module(small[name])  # ours accepts what XLA accepts


# -- hand-written modules, one pair per rule: XLA refuses the first and accepts the second --------

_ADD = """%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
"""
_CMP = """%cmp (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %l = pred[] compare(%a, %b), direction=LT
}
"""


def _while(cond_root: str) -> str:
    """A loop's condition and body, the condition's root ``cond_root`` (``%lt = <shape> ...``)."""
    return f"""%cond (c: (s32[], f32[4])) -> {cond_root.split()[2]} {{
  %c = (s32[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(10)
  ROOT {cond_root}
}}
%body (b: (s32[], f32[4])) -> (s32[], f32[4]) {{
  ROOT %b = (s32[], f32[4]) parameter(0)
}}
"""


def _module(lines: list[str], head: str = "") -> str:
    """A module whose entry holds ``lines``, the last its root (the entry's first line is 5)."""
    body = "\n".join(f"  {'ROOT ' if k == len(lines) - 1 else ''}{line}"
                     for k, line in enumerate(lines))  # fmt: skip
    return f"HloModule m\n\n{head}\nENTRY %main {{\n{body}\n}}\n"


# (rule, the attribute or opcode the column points at, refused entry lines, accepted neighbour's)
_RULE_CASES = [
    ("tuple element shape", "tuple(",
     ["%x = f32[4,8] parameter(0)", "%t = (f32[4,9]) tuple(%x)"],
     ["%x = f32[4,8]{0,1} parameter(0)", "%k = token[] after-all()",
      "%t = (f32[4,8]{1,0}, token[]) tuple(%x, %k)"], ""),
    ("tuple element type", "tuple(",
     ["%x = f32[4,8] parameter(0)", "%t = (s32[4,8]) tuple(%x)"],
     ["%x = s32[4,8] parameter(0)", "%t = (s32[4,8]) tuple(%x)"], ""),
    ("dynamic-slice index count", "dynamic-slice(",
     ["%x = f32[8,8] parameter(0)", "%i = s32[] parameter(1)",
      "%d = f32[2,8] dynamic-slice(%x, %i), dynamic_slice_sizes={2,8}"],
     ["%x = f32[8,8] parameter(0)", "%i = s32[] parameter(1)",
      "%d = f32[2,8] dynamic-slice(%x, %i, %i), dynamic_slice_sizes={2,8}"], ""),
    ("dynamic-update-slice index count", "dynamic-update-slice(",
     ["%x = f32[8,8] parameter(0)", "%u = f32[2,8] parameter(1)", "%i = s32[] constant(1)",
      "%d = f32[8,8] dynamic-update-slice(%x, %u, %i)"],
     ["%x = f32[8,8] parameter(0)", "%u = f32[2,8] parameter(1)", "%i = s32[] constant(1)",
      "%d = f32[8,8] dynamic-update-slice(%x, %u, %i, %i)"], ""),
    ("add element types", "add(",
     ["%x = f32[8] parameter(0)", "%y = s32[8] parameter(1)", "%c = f32[8] add(%x, %y)"],
     ["%x = s32[8]{0} parameter(0)", "%y = s32[8] parameter(1)", "%c = s32[8] add(%x, %y)"], ""),
    ("compare element types", "compare(",
     ["%x = f32[8] parameter(0)", "%y = s32[8] parameter(1)",
      "%c = pred[8] compare(%x, %y), direction=LT"],
     ["%x = f32[8]{0} parameter(0)", "%y = f32[8] parameter(1)",
      "%c = pred[8] compare(%x, %y), direction=LT"], ""),
    ("concatenate element types", "concatenate(",
     ["%x = f32[8] parameter(0)", "%y = s32[8] parameter(1)",
      "%c = f32[16] concatenate(%x, %y), dimensions={0}"],
     ["%x = s32[8] parameter(0)", "%y = s32[8] parameter(1)",
      "%c = s32[16] concatenate(%x, %y), dimensions={0}"], ""),
    ("iota dimension", "iota_dimension=",
     ["%x = f32[4,8] iota(), iota_dimension=2"], ["%x = f32[4,8] iota(), iota_dimension=1"], ""),
    ("reverse dimension", "dimensions=",
     ["%x = f32[4,8] parameter(0)", "%r = f32[4,8] reverse(%x), dimensions={2}"],
     ["%x = f32[4,8] parameter(0)", "%r = f32[4,8] reverse(%x), dimensions={1,0}"], ""),
    ("reverse result", "reverse(",
     ["%x = f32[4,8] parameter(0)", "%r = f32[8,4] reverse(%x), dimensions={0}"],
     ["%x = f32[4,8] parameter(0)", "%r = f32[4,8] reverse(%x), dimensions={}"], ""),
    ("sort dimension", "dimensions=",
     ["%x = f32[8] parameter(0)", "%s = f32[8] sort(%x), dimensions={1}, to_apply=%cmp"],
     ["%x = f32[8] parameter(0)", "%s = f32[8] sort(%x), dimensions={0}, to_apply=%cmp"], _CMP),
    ("sort result", "sort(",
     ["%x = f32[8] parameter(0)", "%s = f32[9] sort(%x), dimensions={0}, to_apply=%cmp"],
     ["%x = f32[8] parameter(0)", "%s = f32[8]{0} sort(%x), dimensions={0}, to_apply=%cmp"],
     _CMP),
    ("gather offset_dims order", "offset_dims=",
     ["%x = f32[10,6,5] parameter(0)", "%i = s32[3,1] parameter(1)",
      "%g = f32[3,6,5] gather(%x, %i), offset_dims={2,1}, collapsed_slice_dims={0}, "
      "start_index_map={0}, index_vector_dim=1, slice_sizes={1,6,5}"],
     ["%x = f32[10,6,5] parameter(0)", "%i = s32[3,1] parameter(1)",
      "%g = f32[3,6,5] gather(%x, %i), offset_dims={1,2}, collapsed_slice_dims={0}, "
      "start_index_map={0}, index_vector_dim=1, slice_sizes={1,6,5}"], ""),
    ("gather batching sizes", "start_indices_batching_dims=",
     ["%x = f32[4,10,6] parameter(0)", "%i = s32[5,3,1] parameter(1)",
      "%g = f32[5,3,6] gather(%x, %i), offset_dims={2}, collapsed_slice_dims={1}, "
      "start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, "
      "index_vector_dim=2, slice_sizes={1,1,6}"],
     ["%x = f32[4,10,6] parameter(0)", "%i = s32[3,4,1] parameter(1)",
      "%g = f32[3,4,6] gather(%x, %i), offset_dims={2}, collapsed_slice_dims={1}, "
      "start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={1}, "
      "index_vector_dim=2, slice_sizes={1,1,6}"], ""),
    ("scatter batching sizes", "scatter_indices_batching_dims=",
     ["%x = f32[4,10,6] parameter(0)", "%i = s32[5,3,1] parameter(1)", "%u = f32[5,3,6] parameter(2)",
      "%s = f32[4,10,6] scatter(%x, %i, %u), update_window_dims={2}, inserted_window_dims={1}, "
      "input_batching_dims={0}, scatter_indices_batching_dims={0}, "
      "scatter_dims_to_operand_dims={1}, index_vector_dim=2, to_apply=%add"],
     ["%x = f32[4,10,6] parameter(0)", "%i = s32[4,3,1] parameter(1)", "%u = f32[4,3,6] parameter(2)",
      "%s = f32[4,10,6] scatter(%x, %i, %u), update_window_dims={2}, inserted_window_dims={1}, "
      "input_batching_dims={0}, scatter_indices_batching_dims={0}, "
      "scatter_dims_to_operand_dims={1}, index_vector_dim=2, to_apply=%add"], _ADD),
    ("scatter inserted_window_dims order", "inserted_window_dims=",
     ["%x = f32[10,6,5] parameter(0)", "%i = s32[3,2] parameter(1)", "%u = f32[3,5] parameter(2)",
      "%s = f32[10,6,5] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={1,0}, "
      "scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=%add"],
     ["%x = f32[10,6,5] parameter(0)", "%i = s32[3,2] parameter(1)", "%u = f32[3,5] parameter(2)",
      "%s = f32[10,6,5] scatter(%x, %i, %u), update_window_dims={1}, inserted_window_dims={0,1}, "
      "scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=%add"], _ADD),
    ("convolution batch_group_count", "batch_group_count=",
     ["%x = f32[4,8,8,3] parameter(0)", "%k = f32[3,3,3,3] parameter(1)",
      "%c = f32[2,6,6,3] convolution(%x, %k), window={size=3x3}, dim_labels=b01f_01io->b01f, "
      "batch_group_count=2"],
     ["%x = f32[4,8,8,3] parameter(0)", "%k = f32[3,3,3,4] parameter(1)",
      "%c = f32[2,6,6,4] convolution(%x, %k), window={size=3x3}, dim_labels=b01f_01io->b01f, "
      "batch_group_count=2"], ""),
    ("select scalar branch", "select(",
     ["%p = pred[8] parameter(0)", "%x = f32[8] parameter(1)", "%y = f32[] parameter(2)",
      "%c = f32[8] select(%p, %x, %y)"],
     ["%p = pred[] parameter(0)", "%x = f32[8] parameter(1)", "%y = f32[8] parameter(2)",
      "%c = f32[8] select(%p, %x, %y)"], ""),
    ("clamp scalar operand", "clamp(",
     ["%lo = f32[8] parameter(0)", "%x = f32[] parameter(1)", "%hi = f32[8] parameter(2)",
      "%c = f32[8] clamp(%lo, %x, %hi)"],
     ["%lo = f32[] parameter(0)", "%x = f32[8] parameter(1)", "%hi = f32[8] parameter(2)",
      "%c = f32[8] clamp(%lo, %x, %hi)"], ""),
    ("map operand shapes", "map(",
     ["%x = f32[8] parameter(0)", "%y = f32[4] parameter(1)",
      "%m = f32[8] map(%x, %y), dimensions={0}, to_apply=%add"],
     ["%x = f32[8] parameter(0)", "%y = f32[8] parameter(1)",
      "%m = f32[8] map(%x, %y), dimensions={0}, to_apply=%add"], _ADD),
    ("all-reduce shape", "all-reduce(",
     ["%x = f32[8] parameter(0)", "%a = f32[16] all-reduce(%x), replica_groups={}, to_apply=%add"],
     ["%x = f32[8] parameter(0)", "%y = f32[4] parameter(1)",
      "%a = (f32[8], f32[4]) all-reduce(%x, %y), replica_groups={}, to_apply=%add"], _ADD),
    ("all-gather size", "dimensions=",
     ["%x = f32[8,4] parameter(0)",
      "%a = f32[13,4] all-gather(%x), replica_groups={{0,1}}, dimensions={0}"],
     ["%x = f32[8,4] parameter(0)",
      "%a = f32[16,4] all-gather(%x), replica_groups={{0,1}}, dimensions={0}"], ""),
    ("all-gather dimension", "dimensions=",
     ["%x = f32[8] parameter(0)",
      "%a = f32[16] all-gather(%x), replica_groups={{0,1}}, dimensions={3}"],
     ["%x = f32[8,4] parameter(0)",
      "%a = f32[8,8] all-gather(%x), replica_groups={{0,1}}, dimensions={1}"], ""),
    ("reduce-scatter shape", "dimensions=",
     ["%x = f32[8,4] parameter(0)", "%a = f32[4,5] reduce-scatter(%x), replica_groups={{0,1}}, "
      "dimensions={0}, to_apply=%add"],
     ["%x = f32[8,4] parameter(0)", "%a = f32[4,4] reduce-scatter(%x), replica_groups={{0,1}}, "
      "dimensions={0}, to_apply=%add"], _ADD),
    ("all-to-all shape", "all-to-all(",
     ["%x = f32[8] parameter(0)", "%y = f32[8] parameter(1)",
      "%a = (f32[8], f32[9]) all-to-all(%x, %y), replica_groups={{0,1}}"],
     ["%x = f32[8] parameter(0)", "%a = f32[8] all-to-all(%x), replica_groups={{0,1}}, "
      "dimensions={0}"], ""),
    ("collective-permute shape", "collective-permute(",
     ["%x = f32[8] parameter(0)",
      "%a = f32[9] collective-permute(%x), source_target_pairs={{0,1},{1,0}}"],
     ["%x = f32[8] parameter(0)",
      "%a = f32[8] collective-permute(%x), source_target_pairs={{0,1},{1,0}}"], ""),
    ("while condition not pred[]", "condition=",
     ["%x = (s32[], f32[4]) parameter(0)",
      "%w = (s32[], f32[4]) while(%x), condition=%cond, body=%body"],
     ["%x = (s32[], f32[4]) parameter(0)",
      "%w = (s32[], f32[4]) while(%x), condition=%cond, body=%body"],
     _while("%lt = s32[] add(%i, %n)")),
]  # fmt: skip


def _rule_texts(case) -> tuple[str, str]:
    rule, _, refused, accepted, head = case
    good_head = _while("%lt = pred[] compare(%i, %n), direction=LT") if "while" in rule else head
    return _module(refused, head), _module(accepted, good_head)


@pytest.mark.parametrize("case", _RULE_CASES, ids=[c[0] for c in _RULE_CASES])
def test_each_rule_refuses_its_module_at_line_and_column_and_accepts_its_neighbour(case):
    refused, accepted = _rule_texts(case)
    with pytest.raises(HloParseError) as caught:
        parse_module(refused)
    lines = refused.split("\n")
    number = max(k for k, line in enumerate(lines, 1) if line.startswith("  ROOT"))
    assert caught.value.line == number, (case[0], caught.value.message)
    assert caught.value.column == lines[number - 1].find(case[1]) + 1, caught.value.message
    parse_module(accepted)


def test_mixed_precision_and_bounded_shapes_are_not_refused():
    """XLA's verifier allows mixed floating-point precision where a backend does (a TPU module
    after its normalization passes), and a bounded dynamic dimension where its bound is asked
    for: the rules compare those as XLA's mixed-precision verifier does."""
    parse_module(_module(["%x = bf16[8] parameter(0)", "%y = f32[8] parameter(1)",
                          "%c = f32[8] add(%x, %y)"]))  # fmt: skip
    parse_module(_module(["%x = bf16[8] parameter(0)", "%y = f32[8] parameter(1)",
                          "%c = f32[16] concatenate(%x, %y), dimensions={0}"]))  # fmt: skip
    parse_module(_module(["%x = f32[<=4,8] parameter(0)", "%t = (f32[4,8]) tuple(%x)"]))
    parse_module(_module(["%x = f32[8,8] parameter(0)", "%i = s32[2] parameter(1)",
                          "%d = f32[2,8] dynamic-slice(%x, %i), dynamic_slice_sizes={2,8}"]))  # fmt: skip


@SLOW  # XLA's parser and StableHLO's verifier in a child process
def test_xla_refuses_each_rules_module_and_accepts_its_neighbour(tmp_path):
    pairs = [_rule_texts(case) for case in _RULE_CASES]
    verdicts = _xla_accepts([text for pair in pairs for text in pair], tmp_path)
    names = [c[0] for c in _RULE_CASES]
    assert not [n for n, ok in zip(names, verdicts[0::2], strict=True) if ok]
    assert all(verdicts[1::2]), [n for n, ok in zip(names, verdicts[1::2], strict=True) if not ok]


SCALAR_SLICES = """HloModule m, is_scheduled=true, entry_computation_layout={(f32[])->f32[]}

ENTRY %e (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %s = f32[] dynamic-slice(%p), dynamic_slice_sizes={}
  ROOT %u = f32[] dynamic-update-slice(%p, %s)
}
"""


def test_a_scalars_dynamic_slice_takes_no_index(tmp_path):
    """A rank-0 operand's dynamic-slice and dynamic-update-slice take one start index per
    dimension: none (the parser's operand counts refused them, XLA takes them)."""
    assert _xla_accepts([SCALAR_SLICES], tmp_path) == [True]
    assert list(analyze_hlo(SCALAR_SLICES).ops["opcode"]) == [
        "parameter", "dynamic-slice", "dynamic-update-slice",
    ]  # fmt: skip
    with pytest.raises(HloParseError, match="1 start indices for a 0-dimensional operand"):
        analyze_hlo(SCALAR_SLICES.replace("dynamic-slice(%p)", "dynamic-slice(%p, %p)"))
