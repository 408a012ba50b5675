"""cost_model="xla" against XLA's own HloCostAnalysis on real compiled programs.

The oracle numbers were produced by ``fixtures/generate.py`` with jaxlib (module totals, and every
instruction costed standalone by XLA); nothing here is computed by the code under test.
"""

from __future__ import annotations

import re

import pytest
from conftest import ROOT, fixture_files, fixture_id, load_fixture

from hlo_roofline import analyze_hlo
from hlo_roofline.cost import CostContext, xla_sizes
from hlo_roofline.cost.base import (
    BASE_MODEL,
    OVERRIDES,
    RULES,
    Cost,
    CostModel,
    overrides,
    overrides_markdown,
    rule,
    rule_for,
)
from hlo_roofline.hlo import parse

FILES = fixture_files()
KEYS = (
    ("flops", "flops"),
    ("transcendentals", "transcendentals"),
    ("bytes accessed", "bytes_accessed"),
)


def test_fixtures_exist():
    programs = {p.parent.name for p in FILES}
    targets = {p.name.removesuffix(".xla.json") for p in FILES}
    assert len(programs) >= 12, programs
    assert {"cpu", "tpu_v5e", "tpu_v5p", "h100"} <= targets


def _oracle_sizes(oracle: dict) -> xla_sizes.ShapeSizes:
    """How the XLA that made ``oracle`` sized shapes (jaxlib 0.10.2 made all but one)."""
    return xla_sizes.of_jaxlib(oracle["jaxlib_version"])


def _xla_minus_ones(module, report) -> tuple[int, int]:
    """(FLOPs, bytes) XLA subtracts: -1 per custom call; one inside a fusion costs only FLOPs."""

    def inside(fusion) -> int:
        body = fusion.called[0].instructions
        if fusion.attrs.get("kind") == "kCustom" and any(
            i.opcode in ("gather", "scatter") for i in body
        ):
            return 0  # XLA prices such a fusion as its gather/scatter alone
        return sum(
            1 if i.opcode == "custom-call" else inside(i) if i.opcode == "fusion" else 0
            for i in body
        )

    computations = module.computations
    flops = bytes_ = 0
    for row in report.ops.itertuples():
        if row.opcode == "custom-call":
            flops, bytes_ = flops + row.count, bytes_ + row.count
        elif row.opcode == "fusion":
            fusion = next(
                i for i in computations[row.computation].instructions if i.name == row.name
            )
            flops += row.count * inside(fusion)
    return int(flops), int(bytes_)


@pytest.mark.parametrize("path", FILES, ids=fixture_id)
def test_module_totals_equal_xla(path, monkeypatch):
    text, oracle = load_fixture(path)
    module = parse(text)
    # sized as the oracle's XLA sized shapes (cost.xla_sizes), whichever jaxlib is installed
    monkeypatch.setattr(xla_sizes, "installed", lambda: _oracle_sizes(oracle))
    report = analyze_hlo(module, cost_model="xla")
    # XLA adds -1 for every custom call; we report those ops as "unknown" instead.
    minus_flops, minus_bytes = _xla_minus_ones(module, report)
    expected = {
        "flops": oracle["xla_totals"]["flops"] + minus_flops,
        "transcendentals": oracle["xla_totals"]["transcendentals"],
        "bytes_accessed": oracle["xla_totals"]["bytes accessed"] + minus_bytes,
    }
    for key, want in expected.items():
        assert report.summary[key] == pytest.approx(want, rel=1e-6, abs=1e-3), key


@pytest.mark.parametrize("path", FILES, ids=fixture_id)
def test_every_instruction_equals_xla_standalone(path):
    text, oracle = load_fixture(path)
    module = parse(text)
    sizes = _oracle_sizes(oracle)
    ctx = CostContext(module, "xla", sizes.tiled, sizes.tuple_pointer_bytes)
    index = {(c.name, i.name): i for c in module.computations.values() for i in c.instructions}
    mismatches = []
    checked = 0
    for entry in oracle["per_instruction"]:
        if "error" in entry:
            continue
        instr = index[(entry["computation"], entry["name"])]
        cost = ctx.cost(instr)
        checked += 1
        keys = KEYS
        if entry["flops"] < 0:  # XLA's "unknown": a custom call, or a fusion around one
            if not cost.unknown:
                mismatches.append(f"{instr.name}: XLA unknown (-1), ours {cost}")
            keys = () if instr.opcode == "custom-call" else KEYS[1:]
        for xla_key, our_key in keys:
            want, got = entry[xla_key], getattr(cost, our_key)
            if got != pytest.approx(want, rel=1e-6, abs=1e-3):
                mismatches.append(
                    f"{entry['computation']}/{instr.name} ({instr.opcode}) {our_key}: "
                    f"XLA {want}, ours {got}"
                )
    assert checked > 0
    assert not mismatches, "\n".join(mismatches[:40])


def test_every_fixture_opcode_has_a_rule():
    opcodes = set()
    for path in FILES:
        text, _ = load_fixture(path)
        opcodes |= {i.opcode for i in parse(text).instructions()}
    assert {op for op in opcodes if rule_for(op) is None} == set()


# The parity above runs the base model alone: the roofline model is XLA's with declared overrides.


def test_the_xla_model_is_the_base_alone():
    """The model the parity tests run uses every base rule and no override, all hooks off."""
    module = parse("HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n")
    ctx = CostContext(module, "xla")
    assert ctx.rules == RULES and all(ctx.rules[op] is fn for op, fn in RULES.items())
    assert ctx.cost_model == CostModel(BASE_MODEL) and overrides(BASE_MODEL) == []


def test_every_override_replaces_a_base_rule():
    roofline = CostContext(parse("HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n"))
    assert OVERRIDES["roofline"], "the roofline model overrides nothing"
    for opcode, fn in OVERRIDES["roofline"].items():
        assert opcode in RULES and RULES[opcode] is not fn, opcode
        assert roofline.rules[opcode] is fn
    with pytest.raises(ValueError, match="no base rule"):
        rule("no-such-op", model="roofline")(lambda instr, ctx: Cost())


def test_every_hook_says_what_it_changes():
    hooks = [o for o in overrides("roofline") if o.kind == "hook"]
    fields = set(CostModel.__dataclass_fields__) - {"name"}
    assert {o.name for o in hooks} <= fields and hooks
    assert all(len(o.summary) > 40 for o in overrides("roofline")), overrides("roofline")


def test_no_rule_asks_which_model_it_runs_under():
    """Model differences are overrides or hooks, never a rule testing the model's name."""
    asks = re.compile(r"\.roofline\b|\bmodel\s*[!=]=|cost_model\s*[!=]=")
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted((ROOT / "hlo_roofline" / "cost").glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line) and path.name != "base.py"
    ]
    assert not found, found


def test_the_docs_list_the_overrides():
    page = (ROOT / "docs" / "cost-model.md").read_text()
    table = page.split("<!-- overrides: generated -->\n")[1].split("\n<!-- /overrides -->")[0]
    assert table == overrides_markdown(), (
        "docs/cost-model.md's overrides table is stale: regenerate it with "
        "hlo_roofline.cost.base.overrides_markdown()"
    )
    for o in overrides("roofline"):
        assert f"`{o.name}`" in table
