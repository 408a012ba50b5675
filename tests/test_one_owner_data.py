"""Facts with one owner, and the twins that stay held to it, on real input (tests/test_one_owner.py
reads the source for the schemes): replica groups, the bounds' palette, the JSON the CLI writes.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from hlo_roofline.hlo import attrs, parse

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-broadcast")


def _fixture_collectives():
    for path in sorted(FIXTURES.glob("*/*.hlo.txt")):
        text = path.read_text()
        if "replica_groups=" not in text:
            continue
        module = parse(text)
        for comp in module.computations.values():
            for instr in comp.instructions:
                if instr.opcode.removesuffix("-start") in COLLECTIVES:
                    yield path, module, instr


def test_a_group_size_is_the_size_of_the_groups_it_lists():
    """One reader of ``replica_groups`` (``attrs._group_form``) feeds both the groups and the
    size; on every collective of the committed compiled programs they agree, and the groups cut
    the program's devices into equal, disjoint parts."""
    forms = set()
    for path, module, instr in _fixture_collectives():
        groups = attrs.replica_groups(instr, module)
        size = attrs.replica_group_size(instr, module)
        where = f"{path.parent.name}/{path.name}: {instr.name}"
        assert {len(g) for g in groups} == {size}, where
        ids = [i for g in groups for i in g]
        assert len(ids) == len(set(ids)), where
        forms.add(instr.attrs["replica_groups"][:1])
    assert forms == {"[", "m", "{"}  # iota, mesh and listed: every form XLA prints


def test_a_group_too_large_to_list_still_has_a_size():
    module = parse(
        "HloModule m, num_partitions=2097152\n\nadd {\n  a = f32[] parameter(0)\n"
        "  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n"
        "  p = f32[8] parameter(0)\n  ROOT r = f32[8] all-reduce(p), channel_id=1, "
        "replica_groups=[2,1048576]<=[2097152], use_global_device_ids=true, to_apply=add\n}\n"
    )
    instr = module.entry.root
    assert attrs.replica_group_size(instr, module) == 1 << 20
    with pytest.raises(ValueError, match="devices"):
        attrs.replica_groups(instr, module)


def test_the_palette_colours_every_bound_the_schema_owns():
    """``schema.BOUNDS`` owns the codes; the charts' palette (``plot.COLORS``, sent to the tab with
    the plugin's ``none``) has a colour for each, and for no other."""
    from hlo_roofline import schema
    from hlo_roofline.plot import COLORS
    from hlo_roofline_tensorboard import _data

    assert set(COLORS) == set(schema.BOUNDS) - {"none"}
    constants = _data.constants()
    assert constants["bounds"] == list(schema.BOUNDS)
    assert set(constants["bound_colors"]) == set(schema.BOUNDS)


ADD_ONE = """HloModule m

ENTRY e {
  p = f32[256] parameter(0)
  one = f32[] constant(1)
  ones = f32[256] broadcast(one), dimensions={}
  ROOT s = f32[256] add(p, ones)
}
"""
NOTHING = """HloModule m

ENTRY e {
  ROOT p = f32[256] parameter(0)
}
"""


def test_the_cli_writes_json_every_parser_reads(tmp_path):
    """``_json`` owns how a face writes JSON: a diff from a step of no time is an infinite change,
    written as null, not as the ``Infinity`` token that ``JSON.parse`` and strict readers reject."""
    import json
    import warnings

    from click.testing import CliRunner

    import hlo_roofline as hr
    from hlo_roofline import cli

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hand-written HLO: the unoptimized-HLO warning
        for name, text in (("none", NOTHING), ("add", ADD_ONE)):
            hr.analyze_hlo(text, chip="v5e").to_json(tmp_path / f"{name}.json")
    args = ["diff", str(tmp_path / "none.json"), str(tmp_path / "add.json"), "--format", "json"]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 0, result.output

    def refuse(token: str):
        raise AssertionError(f"{token} in the JSON")

    data = json.loads(result.stdout, parse_constant=refuse)
    assert data["step_a_s"] == 0 and data["step_b_s"] > 0 and data["step_change"] is None
