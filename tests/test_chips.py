"""Chip database tests against the book's answers (docs/book.md) and published chip tables.

Expected numbers here come from the book's answers and the published chip tables, never from the
data file under test.
"""

from __future__ import annotations

import json
import re
import tomllib
import warnings
from pathlib import Path

import pytest

from hlo_roofline import chips

DOC = Path(__file__).resolve().parents[1] / "docs" / "chips.md"


@pytest.fixture(autouse=True)
def _fresh_registry():
    """User chips registered by one test must not leak into the next."""
    chips.reset()
    yield
    chips.reset()


# -- the book's answers ------------------------------------------------------------------------


def test_v5e_critical_intensity_book_is_240():
    # R2: C = 1.97e14 bf16 FLOP/s, W_hbm = 8.2e11 B/s -> 240.24 -> 240 FLOP/B.
    v5e = chips.get("v5e", profile="book")
    assert v5e.peak_flops("bf16") == pytest.approx(1.97e14)
    assert v5e.hbm_bandwidth == pytest.approx(8.2e11)
    assert v5e.critical_intensity("bf16") == pytest.approx(240.24, abs=0.01)
    assert round(v5e.critical_intensity()) == 240


def test_v5e_critical_intensity_vendor_is_about_240_5():
    # chips.md: vendor values 1.97e14 / 8.19e11 (GCP "819 GBps") -> 240.5.
    assert chips.get("v5e").critical_intensity("bf16") == pytest.approx(240.5, abs=0.05)


def test_v5e_int8_critical_intensity_is_480():
    # R4: 3.94e14 / 8.2e11 = 480; the matmul rule B > 480 / 2 = 240 is "basically unchanged".
    v5e = chips.get("v5e", profile="book")
    assert v5e.peak_flops("s8") == pytest.approx(3.94e14)
    assert round(v5e.critical_intensity("s8")) == 480
    assert round(v5e.critical_intensity("int8") / 2) == 240


def test_v5e_vmem_question_b_over_11():
    # R8: int8 weights from VMEM at 22 x HBM = 1.80e13 B/s; intensity ~2B -> compute-bound, B > 11.
    v5e = chips.get("v5e", profile="book")
    assert v5e.bandwidth("vmem") == pytest.approx(22 * 8.2e11, rel=0.01)
    assert round(v5e.critical_intensity("s8", bandwidth="vmem") / 2) == 11


def test_h100_critical_batch_is_295_and_dense():
    # R7: 9.89e14 (dense; NVIDIA's 1,979 is with sparsity) / 3.35e12 = 295.2.
    for profile in chips.PROFILES:
        h100 = chips.get("h100-sxm", profile)
        assert h100.peak_flops("bf16") == pytest.approx(9.89e14)
        assert h100.hbm_bandwidth == pytest.approx(3.35e12)
        assert round(h100.critical_intensity("bf16")) == 295
        # A DB that stored the sparse headline would give 591.
        assert h100.critical_intensity("bf16") != pytest.approx(591, abs=5)
        assert h100.peak_flops("bf16") < 1.979e15 * 0.75


# The reference's "CI from vendor / book values" columns (chips.md §1), rounded to integers there.
REFERENCE_CI = {
    "v3": (137, 156),
    "v4": (229, 229),
    "v5e": (240.5, 240),
    "v5p": (166, 164),
    "v6e": (560, 575),
    "7x": (313, 311),
    "a100-40gb": (201, None),
    "a100-80gb": (153, 156),
    "h100-sxm": (295, 295),
    "h100-pcie": (378, None),
    "h200": (206, 206),
    "b200": (281, 281),
    "gb200": (313, None),
    "mi300x": (247, None),
    "mi325x": (218, None),
    "mi355x": (313, None),
}


@pytest.mark.parametrize("key", sorted(REFERENCE_CI))
def test_critical_intensity_matches_reference_table(key):
    vendor, book = REFERENCE_CI[key]
    # The reference rounds to whole FLOP/B (312.5 is printed 313), hence the tolerance.
    assert chips.get(key).critical_intensity("bf16") == pytest.approx(vendor, abs=0.6)
    if book is not None:
        assert chips.get(key, "book").critical_intensity("bf16") == pytest.approx(book, abs=0.6)


def test_every_reference_chip_is_present():
    assert set(REFERENCE_CI) <= set(chips.names())


# -- dtypes and rates --------------------------------------------------------------------------


def test_hlo_dtypes_map_to_rate_classes():
    h100 = chips.get("h100")
    # chips.md: H100 SXM fp8 dense 1.979e15, fp32 non-tensor 6.7e13.
    assert h100.peak_flops("f8e4m3fn") == pytest.approx(1.979e15)
    assert h100.peak_flops("f8e5m2") == pytest.approx(1.979e15)
    assert h100.peak_flops("f32") == pytest.approx(6.7e13)
    assert chips.rate_class("u8") == "int8"
    assert chips.rate_class("bfloat16") == "bf16"
    with pytest.raises(ValueError, match="unknown dtype"):
        chips.rate_class("q7")


def test_same_rate_is_recorded_not_a_fallback():
    # chips.md: v4 int8 = 2.75e14 (GCP "bf16 or int8"); v5p fp8 = bf16 4.59e14 (no fp8 speed-up).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert chips.get("v4").peak_flops("s8") == pytest.approx(2.75e14)
        assert chips.get("v5p").peak_flops("f8e4m3fn") == pytest.approx(4.59e14)
    assert not chips.get("v4").rate("s8").fallback


def test_missing_rate_falls_back_and_says_so():
    # chips.md: TPU7x has no int8 rate (JAX-TI N/A); TPUs publish no fp16 rate.
    ironwood = chips.get("TPU7x")
    assert not ironwood.has_rate("s8")
    with pytest.warns(chips.RateFallbackWarning, match="int8"):
        assert ironwood.peak_flops("s8") == ironwood.peak_flops("bf16")
    r = chips.get("v5e").rate("f16")
    assert r.fallback and r.used == "bf16" and "fp16" in r.note


def test_ironwood_has_two_devices_per_chip():
    # chips.md: TPU7x has 2 TensorCores and no megacore; v5p's megacore makes one device.
    ironwood = chips.get("7x")
    assert ironwood.devices_per_chip == 2
    dev = ironwood.per_device()
    assert dev.peak_flops("bf16") == pytest.approx(ironwood.peak_flops("bf16") / 2)
    assert chips.get("v5p").devices_per_chip == 1
    assert chips.get("v5p").per_device() is chips.get("v5p")


def test_interconnect_conventions():
    # chips.md §3: book W_ici is bidirectional per link = 2 x one-way; v5e 4.5e10 / 9e10.
    v5e = chips.get("v5e")
    assert v5e.ici.link_oneway == pytest.approx(4.5e10)
    assert v5e.ici.link_bidirectional == pytest.approx(9e10)
    assert v5e.ici.wraps(16) and not v5e.ici.wraps(8)
    assert chips.get("v5p").ici.wraps(8) and not chips.get("v5p").ici.wraps(6)
    # chips.md §4: the book's W_GPU = one-way per-GPU egress: H100 450 GB/s, GB200 domain 72.
    assert chips.get("h100").scaleup.oneway == pytest.approx(4.5e11)
    assert chips.get("gb200").scaleup.domain == 72


# -- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("v5e", "v5e"),
        ("tpu-v5e", "v5e"),
        ("TPU v5 lite", "v5e"),
        ("tpu v5e", "v5e"),
        ("TPU v5", "v5p"),
        ("TPU v6 lite", "v6e"),
        ("TPU7x", "7x"),
        ("TPU v4", "v4"),
        ("h100", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("H100_SXM", "h100-sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("AMD Instinct MI300X", "mi300x"),
    ],
)
def test_aliases_resolve(name, key):
    assert chips.get(name).key == key
    assert chips.get(name.upper()).key == key


def test_every_alias_in_the_data_resolves_to_its_own_chip():
    data = tomllib.loads(chips.DATA_FILE.read_text())
    for key, table in data["chips"].items():
        for alias in [key, table["name"], *table.get("aliases", [])]:
            assert chips.resolve(alias) == key, alias


def test_unknown_chip_lists_close_matches():
    with pytest.raises(chips.UnknownChipError) as err:
        chips.get("h10")
    assert "h100-sxm" in str(err.value)
    assert "h100-sxm" in err.value.matches
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)
    with pytest.raises(chips.UnknownChipError, match="mi300x"):
        chips.get("mi300")


def test_unknown_profile_is_an_error():
    with pytest.raises(ValueError, match="profile"):
        chips.get("v5e", profile="marketing")


# -- user chips --------------------------------------------------------------------------------

USER_TOML = """
[sources.my-sheet]
title = "our lab's measurements"

[chips.lab-accel]
name = "Lab Accelerator"
kind = "gpu"
aliases = ["LabAccel 1"]

[chips.lab-accel.flops]
bf16 = { value = 1.0e15, source = "my-sheet" }
fp8 = { same_rate_as = "bf16", source = "my-sheet" }

[chips.lab-accel.hbm]
bandwidth = { value = 2.0e12, source = "my-sheet" }

[chips.lab-accel.book.hbm]
bandwidth = { value = 2.5e12, source = "my-sheet" }
"""


def test_user_chip_from_toml(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(USER_TOML)
    (chip,) = chips.load_file(path)
    assert chip.key == "lab-accel"
    assert chips.get("labaccel 1") == chip
    assert chip.critical_intensity() == pytest.approx(500)
    assert chip.peak_flops("f8e4m3fn") == pytest.approx(1e15)
    assert chips.get("lab-accel", "book").critical_intensity() == pytest.approx(400)
    assert chip.source_of("hbm.bandwidth").keys == ("my-sheet",)
    assert chips.source_table()["my-sheet"].title == "our lab's measurements"


def test_user_chip_from_json_with_bare_numbers(tmp_path):
    path = tmp_path / "mine.json"
    data = {"chips": {"json-chip": {"name": "JSON Chip", "flops": {"bf16": 4e14, "fp32": 5e13},
                                    "hbm": {"bandwidth": 1e12, "capacity": 32e9}}}}  # fmt: skip
    path.write_text(json.dumps(data))
    (chip,) = chips.load_file(path)
    assert chips.get("JSON chip").critical_intensity("f32") == pytest.approx(50)
    assert chip.source_of("flops.bf16").keys == ("file:mine.json",)
    assert "file:mine.json" in chips.source_table()


def test_user_file_with_unknown_source_key_is_rejected(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(
        '[chips.bad]\nflops = { bf16 = { value = 1e14, source = "nowhere" } }\n'
        'hbm = { bandwidth = { value = 1e12, source = "nowhere" } }\n'
    )
    with pytest.raises(ValueError, match="nowhere"):
        chips.load_file(path)
    with pytest.raises(chips.UnknownChipError):
        chips.get("bad")


def test_custom_chip_inline():
    chip = chips.Chip.custom("My Chip", peak_flops={"bf16": 1e15, "s8": 2e15}, hbm_bandwidth=1e12)
    assert chip.key == "my-chip"
    assert chip.critical_intensity("bf16") == pytest.approx(1000)
    assert chip.peak_flops("int8") == pytest.approx(2e15)
    chips.register(chip)
    assert chips.get("my chip") is chip
    assert "my-chip" in chips.names()
    with pytest.raises(ValueError):
        chips.Chip.custom("no-bw", peak_flops={"bf16": 1e15}, hbm_bandwidth=0)


# -- provenance --------------------------------------------------------------------------------


def _walk(node, path, in_leaf=False):
    """Yield (path, number, leaf) for every number in the data, with its sourced leaf if any."""
    if isinstance(node, dict):
        leaf = node if "source" in node else in_leaf
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}", leaf)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]", in_leaf)
    elif isinstance(node, int | float):  # bool included: a boolean claim needs a source too
        yield path, node, in_leaf


def test_every_number_has_a_source_key_in_sources():
    data = tomllib.loads(chips.DATA_FILE.read_text())
    known = set(data["sources"])
    seen = 0
    for key, table in data["chips"].items():
        for path, _value, leaf in _walk(table, f"chips.{key}"):
            seen += 1
            assert leaf, f"{path} has no source"
            cited = [leaf["source"]] if isinstance(leaf["source"], str) else leaf["source"]
            assert cited and set(cited) <= known, f"{path} cites {cited}"
    assert seen > 250  # the walk really visited the data


def test_the_provenance_walk_catches_an_unsourced_number():
    table = {"flops": {"bf16": {"value": 1e14, "source": "B-roof"}}, "hbm": {"bandwidth": 8e11}}
    unsourced = [path for path, _, leaf in _walk(table, "chips.x") if not leaf]
    assert unsourced == ["chips.x.hbm.bandwidth"]


def test_sourced_leaves_reference_only_known_keys():
    data = tomllib.loads(chips.DATA_FILE.read_text())
    known = set(data["sources"])

    def leaves(node):
        if isinstance(node, dict):
            if "source" in node:
                yield node
            else:
                for v in node.values():
                    yield from leaves(v)

    for leaf in leaves(data["chips"]):
        cited = [leaf["source"]] if isinstance(leaf["source"], str) else leaf["source"]
        assert set(cited) <= known, leaf
        if "same_rate_as" in leaf:
            assert leaf["same_rate_as"] in chips.RATE_CLASSES


def test_every_chip_has_dense_bf16_and_hbm_in_both_profiles():
    for profile in chips.PROFILES:
        for chip in chips.all_chips(profile):
            assert chip.flops["bf16"] > 0 and chip.hbm_bandwidth > 0
            assert chip.source_of("hbm.bandwidth").keys


# -- docs --------------------------------------------------------------------------------------


def test_doc_lists_every_chip_and_table_is_current():
    text = DOC.read_text()
    data = tomllib.loads(chips.DATA_FILE.read_text())
    for key in data["chips"]:
        assert f"`{key}`" in text, key
    m = re.search(r"<!-- BEGIN chip table -->\n(.*?)<!-- END chip table -->", text, re.S)
    assert m, "docs/chips.md lost its generated-table markers"
    assert m.group(1).strip() == chips.markdown_table().strip(), (
        "docs/chips.md table is stale: regenerate with `python -m hlo_roofline.chips`"
    )


# -- what each number is: a fact, derived from facts, or calibrated on fixtures -------------------


def _leaves(node, path=""):
    if isinstance(node, dict):
        if "source" in node:
            yield path, node
        else:
            for k, v in node.items():
                yield from _leaves(v, f"{path}.{k}" if path else k)


def test_every_number_says_what_it_is():
    """Every leaf of the database carries its kind: a fact with its source, a derivation with its
    formula (the note), or a calibration with the fixtures it was fitted on, in its chip's
    ``[calibrated]`` section and nowhere else."""
    data = tomllib.loads(chips.DATA_FILE.read_text())
    kinds = {k: 0 for k in chips.KINDS}
    for key, table in data["chips"].items():
        for path, leaf in _leaves(table):
            kind = leaf.get("kind")
            assert kind in chips.KINDS, f"chips.{key}.{path} has no kind"
            kinds[kind] += 1
            assert (kind == "calibrated") == path.startswith("calibrated."), (key, path)
            if kind == "derived":
                assert "=" in leaf.get("note", ""), f"chips.{key}.{path}: derived, no formula"
            if kind == "calibrated":
                assert (Path(__file__).parents[1] / leaf["fitted_on"]).exists(), (key, path)
                assert "derived" not in ([leaf["source"]] if isinstance(leaf["source"], str)
                                         else leaf["source"]), (key, path)  # fmt: skip
    assert all(kinds.values()), kinds  # every kind is used


def test_no_calibrated_number_reaches_the_book_profile():
    """The book's roofline is facts and what follows from them: its chips carry no calibration,
    and nothing they cite is calibrated."""
    for chip in chips.all_chips():
        book = chips.get(chip.key, "book")
        assert book.calibration == chips.Calibration(), chip.key
        assert all(s.kind != "calibrated" for s in book.sources.values()), chip.key
    assert chips.get("v5e").calibration.vector_elements_rate  # the vendor profile keeps them


def test_a_calibrated_number_outside_its_section_is_an_error(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(USER_TOML.replace(
        'bandwidth = { value = 2.0e12, source = "my-sheet" }',
        'bandwidth = { value = 2.0e12, source = "my-sheet", kind = "calibrated", fitted_on = "x" }'
    ))  # fmt: skip
    with pytest.raises(ValueError, match="calibrated numbers, and only they"):
        chips.load_file(path)


def test_a_user_calibration_loads_into_the_calibration_only(tmp_path):
    path = tmp_path / "mine.toml"
    text = USER_TOML.replace("lab-accel", "lab-cal").replace("labaccel 1", "labcal 1")
    path.write_text(text + '\n[chips.lab-cal.calibrated]\nop_floor = { value = 2e-6, '
                    'source = "my-sheet", kind = "calibrated", fitted_on = "our traces" }\n')
    (chip,) = chips.load_file(path)
    assert chip.calibration.op_floor_s == 2e-6
    assert chip.source_of("calibrated.op_floor").fitted_on == "our traces"
    assert chips.get("lab-cal", "book").calibration.op_floor_s is None
