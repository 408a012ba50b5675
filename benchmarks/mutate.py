"""Semantic mutations of real HLO modules: the text stays well-formed, its meaning does not.

Every mutation keeps XLA's printed syntax (a number is replaced by a number, an element type by an
element type, an operand list by names defined above) so that the parser's syntax checks let it
through and what it *means* is tested: a layout that is not a permutation, a window of 2^40 taps, a
dot on ``s2``, a fusion whose parameters disagree with its operands, an opcode given the wrong
operands. ``mutate(text, rng)`` applies one to three mutations chosen by ``rng`` (a
``random.Random``, or hypothesis's ``st.randoms()`` in the suite), so a mutant is reproduced from
its seed. Used by ``tests/test_fuzz.py`` and ``benchmarks/fuzz.py``.
"""

from __future__ import annotations

import random
import re

# Every element type of XLA's PrimitiveType, the 6-bit floats, and a few XLA does not have.
ELEMENT_TYPES = (
    "pred", "s1", "s2", "s4", "s8", "s16", "s32", "s64", "u1", "u2", "u4", "u8", "u16", "u32",
    "u64", "f16", "bf16", "f32", "f64", "c64", "c128", "f4e2m1fn", "f6e2m3fn", "f6e3m2fn",
    "f8e3m4", "f8e4m3", "f8e4m3fn", "f8e4m3fnuz", "f8e4m3b11fnuz", "f8e5m2", "f8e5m2fnuz",
    "f8e8m0fnu", "token", "opaque", "f128", "s128", "tf32", "b1",
)  # fmt: skip
# Opcodes XLA prints, and some it may add one day.
OPCODES = (
    "abs", "add", "add-dependency", "after-all", "all-gather", "all-gather-done",
    "all-gather-start", "all-reduce", "all-reduce-done", "all-reduce-start", "all-to-all",
    "async-done", "async-start", "async-update", "atan2", "batch-norm-grad",
    "batch-norm-inference", "batch-norm-training", "bitcast", "bitcast-convert", "broadcast",
    "call", "cbrt", "ceil", "cholesky", "clamp", "collective-broadcast", "collective-permute",
    "collective-permute-done", "collective-permute-start", "compare", "complex", "concatenate",
    "conditional", "constant", "convert", "convolution", "copy", "copy-done", "copy-start",
    "cosine", "count-leading-zeros", "custom-call", "divide", "domain", "dot", "dynamic-reshape",
    "dynamic-slice", "dynamic-update-slice", "erf", "exponential", "exponential-minus-one", "fft",
    "floor", "fusion", "gather", "get-dimension-size", "get-tuple-element", "imag", "infeed",
    "iota", "is-finite", "log", "log-plus-one", "logistic", "map", "maximum", "minimum",
    "multiply", "negate", "not", "opt-barrier", "or", "outfeed", "pad", "parameter",
    "partition-id", "popcnt", "power", "ragged-all-to-all", "ragged-dot", "real", "recv",
    "recv-done", "reduce", "reduce-precision", "reduce-scatter", "reduce-window", "remainder",
    "replica-id", "reshape", "reverse", "rng", "rng-bit-generator", "rng-get-and-update-state",
    "round-nearest-afz", "round-nearest-even", "rsqrt", "scaled-dot", "scatter", "select",
    "select-and-scatter", "send", "send-done", "set-dimension-size", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "slice", "sort", "sqrt",
    "stochastic-convert", "subtract", "tan", "tanh", "topk", "transpose", "triangular-solve",
    "tuple", "while", "xor", "call-start", "slice-start", "frobnicate", "tensor-core-magic",
)  # fmt: skip
# Numbers that break arithmetic: zero, one, negatives, past int32, int64 and float ranges.
NUMBERS = (
    "0", "1", "2", "3", "7", "-1", "-2", "-7", "127", "128", "129", "65536", "2147483648",
    "1099511627776", "4611686018427387904", "9223372036854775807", "9223372036854775808",
    "18446744073709551616", "99999999999999999999999", "1" + "0" * 40,
)  # fmt: skip
# Whole attribute values a rule reads, in the syntax XLA prints them.
ATTRIBUTES = (
    "window={size=3x3 stride=2x2 pad=1_1x1_1}", "window={size=1099511627776}",
    "window={size=3 stride=0}", "window={size=3 pad=-9_-9 lhs_dilate=0 rhs_dilate=3}",
    "window={size=1099511627776x1099511627776 stride=1x1 pad=549755813888_549755813888x0_0}",
    "window={size=2x2 stride=1x1 lhs_dilate=1099511627776x2 rhs_dilate=3x1099511627776}",
    "window={}", "dim_labels=b01f_01io->b01f", "dim_labels=bf_io->bf", "dim_labels=b0f_0io->",
    "dim_labels=f01b_i01o->01bf", "dimensions={0}", "dimensions={1,0}", "dimensions={9}",
    "dimensions={-1}", "dimensions={}", "dimensions={0,0,0}", "lhs_contracting_dims={1}",
    "lhs_contracting_dims={7}", "rhs_contracting_dims={-1}", "lhs_batch_dims={0,0}",
    "rhs_batch_dims={5}", "feature_group_count=0", "feature_group_count=-3",
    "batch_group_count=0", "feature_group_count=1099511627776", "replica_groups={}",
    "replica_groups={{0,1},{2,3}}", "replica_groups={{}}", "replica_groups=[2,4]<=[8]",
    "replica_groups=[0,0]<=[0]", "replica_groups=[1099511627776,1099511627776]<=[1]",
    "replica_groups={{" + ",".join(str(i) for i in range(300)) + "}}",
    "slice={[0:1099511627776]}", "slice={[5:1:1]}", "slice={[0:4:0]}", "slice={[0:4:-1], [0:2]}",
    "padding=1099511627776_1099511627776", "padding=0_0_1099511627776x1_1",
    "padding=-9_-9x0_0", "fft_length={1099511627776}", "fft_length={0}", "fft_type=FFT",
    "index=1099511627776", "index=-1", "index=99", "source_target_pairs={{0,1},{1,0}}",
    'backend_config={"known_trip_count":{"n":"1099511627776"}}',
    'backend_config={"known_trip_count":{"n":"-5"}}',
    'backend_config={"known_trip_count":{"n":"9223372036854775808"}}',
    'backend_config={"known_trip_count":{"n":"' + "9" * 400 + '"}}',
    'backend_config={"known_trip_count":{}}', "backend_config={}",
    'backend_config={"known_trip_count":[1]}', 'backend_config=[]',
    'backend_config={"fusion_backend_config":"x","kind":1}',
    'backend_config={"fusion_backend_config":{"kind":7}}',
    'backend_config={"gemm_backend_config":[],"precision_config":"x"}',
    'backend_config={"gemm_backend_config":{"precision_config":{"operand_precision":7}}}',
    'backend_config={"cost_estimate":{"flops":-1,"bytes_accessed":"x"}}',
    'backend_config={"custom_call_config":{"cost_estimate":{"flops":1e308,"transcendentals":1e308}}}',
    'backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["9"]}}}',
    'custom_call_target="__cublas$gemm"', 'custom_call_target="__cudnn$convForward"',
    'custom_call_target="TopK"', 'custom_call_target="AllocateBuffer"',
    "direction=LT", "direction=GE", "kind=kCustom", "kind=kLoop", "kind=kOutput",
    "to_apply=%nowhere", "use_global_device_ids=true", "channel_id=1",
    "operand_precision={highest,highest}", "algorithm=dot_s2_s2_f32_x9",
    "algorithm=dot_tf32_tf32_f32", "mesh['a'=0] {'b'}",
)  # fmt: skip

_LINE = re.compile(
    r"^(\s*(?:ROOT\s+)?%?)([^\s=]+)(\s*=\s*)(.*?)(\s)([a-z][a-z0-9\-_]*)\((.*?)\)((?:, .*)?)$"
)
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")
_NUMBER = re.compile(r"(?<![\w.%])-?\d+(?![\w.])")
_OPERAND = re.compile(r"%([\w.\-]+)")
_ATTRIBUTE = re.compile(r", ([\w.\-]+)=")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([^\s(]+)\s*\(", re.M)
_CALLEE = re.compile(
    r"\b(calls|to_apply|body|condition|true_computation|false_computation)=%([\w.\-]+)"
)


class _Text:
    """The lines of a module, with the instruction lines found once."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        self.instructions = [i for i, line in enumerate(self.lines) if _LINE.match(line)]
        self.computations = _COMPUTATION.findall(text)

    def text(self) -> str:
        return "\n".join(self.lines)


def _pick(rng: random.Random, seq):
    return seq[rng.randrange(len(seq))]


def _replace_span(line: str, span: tuple[int, int], new: str) -> str:
    return line[: span[0]] + new + line[span[1] :]


def _numbers(rng: random.Random, t: _Text, k: int) -> bool:
    """A number anywhere in an instruction line (dims, layouts, attributes, payloads)."""
    line = t.lines[k]
    spans = [m.span() for m in _NUMBER.finditer(line)]
    if not spans:
        return False
    span = _pick(rng, spans)
    old = line[span[0] : span[1]]
    choices = (*NUMBERS, str(int(old) + 1), str(max(int(old) - 1, 0)), str(int(old) * 2))
    t.lines[k] = _replace_span(line, span, _pick(rng, choices))
    return True


def _dims(rng: random.Random, t: _Text, k: int) -> bool:
    """One shape's dimensions: one dropped, added, swapped or made extreme."""
    line = t.lines[k]
    arrays = list(_ARRAY.finditer(line))
    if not arrays:
        return False
    m = _pick(rng, arrays)
    dims = [d for d in m.group(2).split(",") if d]
    how = rng.randrange(4)
    if how == 0 and dims:
        dims.pop(rng.randrange(len(dims)))
    elif how == 1:
        dims.insert(rng.randrange(len(dims) + 1), _pick(rng, NUMBERS[:8]))
    elif how == 2 and len(dims) > 1:
        i, j = rng.sample(range(len(dims)), 2)
        dims[i], dims[j] = dims[j], dims[i]
    elif dims:
        dims[rng.randrange(len(dims))] = _pick(rng, NUMBERS)
    t.lines[k] = _replace_span(line, m.span(2), ",".join(dims))
    return True


def _dtype(rng: random.Random, t: _Text, k: int) -> bool:
    """An element type: one occurrence, or all of one type on the line (a consistent retype)."""
    line = t.lines[k]
    arrays = list(_ARRAY.finditer(line))
    if not arrays:
        return False
    new = _pick(rng, ELEMENT_TYPES)
    if rng.random() < 0.5:
        m = _pick(rng, arrays)
        t.lines[k] = _replace_span(line, m.span(1), new)
    else:
        old = _pick(rng, arrays).group(1)
        t.lines[k] = re.sub(rf"\b{old}\[", new + "[", line)
    return True


def _opcode(rng: random.Random, t: _Text, k: int) -> bool:
    m = _LINE.match(t.lines[k])
    if m is None or m.group(6) in ("parameter", "constant"):
        return False
    t.lines[k] = _replace_span(t.lines[k], m.span(6), _pick(rng, OPCODES))
    return True


def _layout(rng: random.Random, t: _Text, k: int) -> bool:
    """A layout: permuted, broken as a permutation, tiled oddly, moved to another memory."""
    line = t.lines[k]
    arrays = [m for m in _ARRAY.finditer(line) if m.group(3)]
    if not arrays:
        return False
    m = _pick(rng, arrays)
    layout = m.group(3)[1:-1]
    order, _, extras = layout.partition(":")
    dims = [d for d in order.split(",") if d]
    how = rng.randrange(6)
    if how == 0 and len(dims) > 1:
        rng.shuffle(dims)
    elif how == 1 and dims:
        dims[rng.randrange(len(dims))] = _pick(rng, ("0", "1", "9", "-1", "1099511627776"))
    elif how == 2:
        dims = dims[:-1] if dims and rng.random() < 0.5 else [*dims, str(len(dims))]
    elif how == 3:
        extras = _pick(rng, ("T(0)", "T(8,0)", "T(1099511627776,1099511627776)", "T(3)(2,1)",
                             "T(8,128)(0,1)", "T(1,1,1,1,1,1)", "T()", "E(0)", "E(4)",
                             "E(1099511627776)", "S(1)", "S(99)", "T(8,128)S(1)", ""))  # fmt: skip
    elif how == 4:
        t.lines[k] = _replace_span(line, m.span(3), "")  # no layout at all
        return True
    else:
        dims = [_pick(rng, NUMBERS[:6]) for _ in dims]
    new = "{" + ",".join(dims) + (":" + extras if extras else "") + "}"
    t.lines[k] = _replace_span(line, m.span(3), new)
    return True


def _attribute(rng: random.Random, t: _Text, k: int) -> bool:
    """An attribute dropped, added from the pool, or copied from another instruction."""
    line = t.lines[k]
    m = _LINE.match(line)
    if m is None:
        return False
    attrs = m.group(8)
    how = rng.randrange(3)
    if how == 0 and attrs:
        keys = list(_ATTRIBUTE.finditer(line, m.start(8)))
        start = _pick(rng, keys).start()
        end = _attribute_end(line, start + 2)
        t.lines[k] = line[:start] + line[end:]
        return True
    if how == 1:
        donor = t.lines[_pick(rng, t.instructions)]
        keys = list(_ATTRIBUTE.finditer(donor))
        if not keys:
            return False
        start = _pick(rng, keys).start()
        addition = donor[start : _attribute_end(donor, start + 2)]
    else:  # from the pool, preferring values for a key the op already has (its rule reads it)
        own = {k.group(1) for k in _ATTRIBUTE.finditer(line, m.start(8))}
        fitting = [a for a in ATTRIBUTES if a.partition("=")[0] in own]
        addition = ", " + _pick(rng, fitting if fitting and rng.random() < 0.7 else ATTRIBUTES)
    t.lines[k] = _set_attribute(line, addition)
    return True


def _attribute_end(line: str, pos: int) -> int:
    """The end of the ``key=value`` starting at ``pos`` (brackets and quotes respected)."""
    depth, quoted = 0, False
    while pos < len(line):
        c = line[pos]
        if quoted:
            if c == "\\":
                pos += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "{[(":
            depth += 1
        elif c in "}])":
            depth -= 1
        elif c == "," and depth == 0:
            break
        pos += 1
    return pos


def _set_attribute(line: str, addition: str) -> str:
    """``line`` with the attribute ``", key=value"`` set (replacing one of the same key)."""
    key = addition[2:].partition("=")[0]
    m = re.search(rf", {re.escape(key)}=", line)
    if m is None:
        return line + addition
    return line[: m.start()] + addition + line[_attribute_end(line, m.start() + 2) :]


def _operands(rng: random.Random, t: _Text, k: int) -> bool:
    """The operand list: one dropped, duplicated, swapped, added, or replaced by a name defined
    above in the same computation (so that every reference still resolves)."""
    line = t.lines[k]
    m = _LINE.match(line)
    if m is None or m.group(6) in ("parameter", "constant"):
        return False
    above = []
    for j in range(k - 1, -1, -1):
        other = _LINE.match(t.lines[j])
        if other is None:
            if t.lines[j].rstrip().endswith("{"):
                break  # the computation's first line
            continue
        above.append(other.group(2).lstrip("%"))
    names = _OPERAND.findall(m.group(7))
    how = rng.randrange(5)
    if how == 0 and names:
        names.pop(rng.randrange(len(names)))
    elif how == 1 and names:
        names.insert(rng.randrange(len(names) + 1), _pick(rng, names))
    elif how == 2 and len(names) > 1:
        i, j = rng.sample(range(len(names)), 2)
        names[i], names[j] = names[j], names[i]
    elif above:
        if how == 3 or not names:
            names.insert(rng.randrange(len(names) + 1), _pick(rng, above))
        else:
            names[rng.randrange(len(names))] = _pick(rng, above)
    else:
        return False
    t.lines[k] = _replace_span(line, m.span(7), ", ".join("%" + n for n in names))
    return True


def _callee(rng: random.Random, t: _Text, k: int) -> bool:
    """A called computation replaced by another of the module (a call cycle is a parse error)."""
    line = t.lines[k]
    found = list(_CALLEE.finditer(line))
    if not found or not t.computations:
        return False
    m = _pick(rng, found)
    t.lines[k] = _replace_span(line, m.span(2), _pick(rng, t.computations))
    return True


def _line_copy(rng: random.Random, t: _Text, k: int) -> bool:
    """An instruction line copied under a fresh name just below itself (a second user of its
    operands, a second caller of its computation)."""
    m = _LINE.match(t.lines[k])
    if m is None or "ROOT" in m.group(1) or m.group(6) == "parameter":
        return False
    copy = _replace_span(t.lines[k], m.span(2), m.group(2) + ".fuzz" + str(rng.randrange(100)))
    t.lines.insert(k + 1, copy)
    return True


MUTATIONS = {
    "number": _numbers, "dims": _dims, "dtype": _dtype, "opcode": _opcode, "layout": _layout,
    "attribute": _attribute, "operands": _operands, "callee": _callee, "copy": _line_copy,
}  # fmt: skip


def mutate(
    text: str, rng: random.Random, most: int = 3, kinds: tuple[str, ...] = tuple(MUTATIONS)
) -> tuple[str, list[str]]:
    """``text`` with one to ``most`` semantic mutations of the given kinds (names of
    ``MUTATIONS``); returns it and the mutations' names."""
    t = _Text(text)
    if not t.instructions:
        return text, []
    done: list[str] = []
    for _ in range(rng.randint(1, most)):
        name = _pick(rng, kinds)
        for _attempt in range(8):  # a line the mutation applies to
            if MUTATIONS[name](rng, t, _pick(rng, t.instructions)):
                done.append(name)
                break
        t.instructions = [i for i, line in enumerate(t.lines) if _LINE.match(line)]
    return t.text(), done
