"""One program, one answer, whatever the way in: a dump, the compiled text and the API.

XLA:TPU writes a fusion's tiling (``window_config``) in code generation, after the dump's
``after_optimizations`` module: a dump is read from its ``after_codegen`` module where XLA wrote
one, and then prices exactly what ``compiled.as_text()`` does (the oracle: the same compile's text,
fixtures/memory_dump/make_dump.py). Where the way in lacks something its compile knew (the tiling,
the devices' places, the temporaries), ``summary["missing"]`` says so and a warning says which
way the figure leans; the MaxText corpus's dumps (no ``after_codegen`` kept) read the step low,
as declared.
"""

from __future__ import annotations

import gzip
import shutil
import warnings
from pathlib import Path

import pytest
from conftest import SLOW

from hlo_roofline import analyze_dump, analyze_hlo, schema, targets
from hlo_roofline.api import IncompleteHloWarning
from hlo_roofline.chips import get as chip_named
from hlo_roofline.judge import interconnect

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TPU_DUMP = FIXTURES / "memory_dump" / "tpu_v5p"


def only_report(reports: dict):
    ((_, report),) = reports.items()
    return report


def test_a_tpu_dump_is_read_from_its_codegen_module_as_compiled():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IncompleteHloWarning)  # its devices' places: below
        dump = only_report(analyze_dump(TPU_DUMP, chip="v5p"))
        text = analyze_hlo((TPU_DUMP / "compiled.hlo.txt").read_text(), chip="v5p")
    assert "window_config" in next(TPU_DUMP.glob("*after_codegen.txt")).read_text()
    assert "tiling" not in dump.summary["missing"]
    assert dump.summary["step_time_serial_s"] == text.summary["step_time_serial_s"]
    for key in ("flops", "bytes_accessed", "comm_bytes", "step_expected_s"):
        assert dump.summary[key] == text.summary[key], key
    assert dump.summary["memory"]["source"] == "dump"  # the buffer assignment still read


def test_a_tpu_dump_without_its_codegen_module_says_the_tiling_is_missing(tmp_path):
    for path in TPU_DUMP.glob("module_*"):
        if path.is_file() and "after_codegen" not in path.name:
            shutil.copy(path, tmp_path / path.name)
    with pytest.warns(IncompleteHloWarning, match=r"tiling \(window_config.*reads low"):
        report = only_report(analyze_dump(tmp_path, chip="v5p"))
    assert report.summary["missing"][0] == "tiling"
    assert schema.MISSING_LEANS["tiling"] == ("step_time", "low")


def test_device_coordinates_are_missing_until_the_mesh_is_given():
    """The text's replica groups on a torus inferred in device-id order; given the devices the
    program ran on (the target's, in partition order), nothing is missing but the temporaries."""
    text = (TPU_DUMP / "compiled.hlo.txt").read_text()
    with pytest.warns(IncompleteHloWarning, match="where the devices sit"):
        inferred = analyze_hlo(text, chip="v5p")
    assert inferred.summary["missing"] == ["device_coordinates", "temporaries"]
    placed = inferred.classify(
        "v5p", topology=interconnect.from_devices(targets.devices("v5p:2x2x1"), chip_named("v5p"))
    )
    assert placed.summary["missing"] == ["temporaries"]


def test_a_gpu_dump_and_a_cpu_dump_miss_nothing():
    for name, chip in (("gpu_h100", "h100"), ("cpu", "v5e")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IncompleteHloWarning)
            report = only_report(analyze_dump(FIXTURES / "memory_dump" / name, chip=chip))
        assert "temporaries" not in report.summary["missing"], name
        assert "tiling" not in report.summary["missing"], name


MAXTEXT = FIXTURES / "maxtext"
CORPUS = {"default_v5p8": "v5p", "llama2_7b_v5e16": "v5e", "mixtral_8x7b_v5p8": "v5p",
          "default_h100x8": "h100"}  # fmt: skip


@SLOW
@pytest.mark.parametrize("name", CORPUS)
def test_maxtext_dump_and_text_agree_or_the_dump_says_why(name, tmp_path):
    """Within 1%, or the dump's summary names the tiling it lacks and its step reads low (as
    MISSING_LEANS declares): XLA:TPU's matmul pipelines are priced from window_config."""
    for path in (MAXTEXT / f"{name}.dump").iterdir():
        data = path.read_bytes()
        (tmp_path / path.name.removesuffix(".gz")).write_bytes(
            gzip.decompress(data) if path.suffix == ".gz" else data
        )
    chip = CORPUS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IncompleteHloWarning)
        dump = only_report(analyze_dump(tmp_path, chip=chip))
        text = analyze_hlo(gzip.decompress((MAXTEXT / f"{name}.hlo.txt.gz").read_bytes()).decode(),
                           chip=chip)  # fmt: skip
    assert dump.summary["flops"] == pytest.approx(text.summary["flops"], rel=1e-6)
    ratio = dump.summary["step_time_serial_s"] / text.summary["step_time_serial_s"]
    assert "tiling" not in text.summary["missing"]
    if abs(ratio - 1) > 0.01:
        assert "tiling" in dump.summary["missing"] and ratio < 1, ratio
    if chip == "h100":
        assert ratio == pytest.approx(1.0) and dump.summary["missing"] == []


def test_the_cli_says_what_the_dump_lacks(tmp_path):
    from click.testing import CliRunner

    from hlo_roofline import cli

    for path in TPU_DUMP.glob("module_*"):
        if path.is_file() and "after_codegen" not in path.name:
            shutil.copy(path, tmp_path / path.name)
    shown = CliRunner().invoke(cli.main, ["hlo", str(tmp_path), "--chip", "v5p"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("the HLO lacks XLA:TPU's per-fusion tiling") == 1  # said once


def test_the_hbm_gate_on_dump_reports(tmp_path):
    """A TPU dump's need is a lower bound (code generation adds temporaries): under the limit
    the gate is undecided (exit 2), over it a fail; a GPU dump's is the compiler's: decided."""
    from click.testing import CliRunner

    from hlo_roofline import cli

    runner = CliRunner()
    for name, chip, verdict in (("tpu_v5p", "v5p", 2), ("gpu_h100", "h100", 0)):
        saved = tmp_path / f"{name}.json"
        dump = str(FIXTURES / "memory_dump" / name)
        made = runner.invoke(cli.main, ["hlo", dump, "--chip", chip, "--json", str(saved)])
        assert made.exit_code == 0, made.output
        gate = runner.invoke(cli.main, ["check", str(saved), "--max-hbm", "90"])
        assert gate.exit_code == verdict, gate.output
        if verdict == 2:
            assert "unknown" in gate.output and "XLA:TPU's dump" in gate.output
        over = runner.invoke(cli.main, ["check", str(saved), "--max-hbm", "1e-9"])
        assert over.exit_code == 1, over.output


TORUS_DUMP = FIXTURES / "memory_dump" / "tpu_v5e16"  # a 4x4 mesh of v5e:4x4's devices reversed


def test_a_tpu_dump_places_its_devices_from_its_module_folder():
    """XLA:TPU writes the device assignment (compile_options.textproto) and the slice
    (topology.textproto) beside the module: the dump's communication is the API's, whose mesh
    (the oracle: the same devices in the same order) places them; the text alone infers them in
    id order and differs."""
    mesh_order = targets.devices("v5e:4x4")[::-1]  # make_dump.py's mesh, flattened
    text = (TORUS_DUMP / "compiled.hlo.txt").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IncompleteHloWarning)
        dump = only_report(analyze_dump(TORUS_DUMP, chip="v5e"))
        inferred = analyze_hlo(text, chip="v5e")
    placed = analyze_hlo(text).classify(
        "v5e", topology=interconnect.from_devices(mesh_order, chip_named("v5e"))
    )
    assert "device_coordinates" not in dump.summary["missing"]
    assert dump.summary["topology"]["source"] == "devices"
    assert dump.summary["comm_time_s"] == placed.summary["comm_time_s"]
    assert dump.summary["step_time_serial_s"] == placed.summary["step_time_serial_s"]
    assert "device_coordinates" in inferred.summary["missing"]
    assert inferred.summary["comm_time_s"] != placed.summary["comm_time_s"]


def test_a_dump_without_its_module_folder_infers_the_places(tmp_path):
    for path in TORUS_DUMP.glob("module_*"):
        if path.is_file():
            shutil.copy(path, tmp_path / path.name)
    with pytest.warns(IncompleteHloWarning, match="where the devices sit"):
        report = only_report(analyze_dump(tmp_path, chip="v5e"))
    assert "device_coordinates" in report.summary["missing"]
