"""``explore --maxtext``'s plumbing, without MaxText (CI never installs it): a candidate's config
overrides (``ici_*`` from the mesh, knobs as keys), the checks made before any compile, the
clear exit-2 when MaxText is missing, and the step pickled to workers. A fake ``maxtext``
package (its configs folder and topology table, nothing else) stands in where the check reads
MaxText's files; MaxText's own compile runs in the slow test, only where it is importable."""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_roofline.cli import main
from hlo_roofline.explorer import maxtext
from hlo_roofline.explorer.step import make_step_from, make_step_reference

BASE = """\
run_name: ""
per_device_batch_size: 12.0
max_target_length: 2048
remat_policy: "full"
attention: "autoselected"
compile_topology: ""
compile_topology_num_slices: -1
ici_data_parallelism: 1
ici_fsdp_parallelism: -1
ici_tensor_parallelism: 1
ici_expert_parallelism: 1
allow_split_physical_axes: false
"""

SPEC_MAP = """\
from dataclasses import dataclass


@dataclass
class SystemCharacteristics:
    platform: str
    topology_name: str
    chip_config_name: str
    chips_per_host_bounds: tuple
    devices_per_slice: int
    wrap: tuple


UserFacingNameToSystemCharacteristics = {
    "v5p-8": SystemCharacteristics("tpu", "v5:2x2x1", "megacore", (2, 2, 1), 4, (0, 0, 0)),
    "v5p-128": SystemCharacteristics("tpu", "v5:4x4x4", "megacore", (2, 2, 1), 64, (1, 1, 1)),
    "v5e-16": SystemCharacteristics("tpu", "v5e:4x4", "default", (2, 2, 1), 16, (0, 0, 0)),
}
"""


# MaxText's pyconfig and FLOP count as far as the parent reads them: a config of the command
# line's keys (the global batch as MaxText computes it: per-device batch × the ici product), and
# 6 × 1e9 × tokens per device as its TFLOP count.
PYCONFIG = """\
import math
import os
from types import SimpleNamespace


def initialize(argv):
    if not os.environ.get("XLA_FLAGS"):  # as MaxText's does: its HLO dump's flags
        os.environ["XLA_FLAGS"] = "--xla_dump_to=xla_dump"
    keys = dict(a.split("=", 1) for a in argv[2:])
    devices = math.prod(int(v) for k, v in keys.items() if k.startswith("ici_"))
    batch = float(keys["per_device_batch_size"]) * devices
    return SimpleNamespace(global_batch_size_to_train_on=batch, max_target_length=2048,
                           devices=devices, argv=argv)
"""
TRAIN_COMPILE = "def validate_config(config):\n    assert config.argv[2:]\n"
MAXTEXT_UTILS = """\
def calculate_tflops_training_per_device(config):
    print("Per train step: ...")  # MaxText prints its count
    tokens = config.global_batch_size_to_train_on * config.max_target_length / config.devices
    return 6e-3 * tokens, 0.0, 0.0
"""


@pytest.fixture
def fake_maxtext(tmp_path, monkeypatch):
    """A ``maxtext`` package with MaxText's base.yml keys and topology table, importable."""
    package = tmp_path / "site" / "maxtext"
    (package / "configs").mkdir(parents=True)
    (package / "utils").mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils" / "__init__.py").write_text("")
    (package / "configs" / "base.yml").write_text(BASE)
    (package / "utils" / "accelerator_to_spec_map.py").write_text(SPEC_MAP)
    (package / "utils" / "maxtext_utils.py").write_text(MAXTEXT_UTILS)
    (package / "configs" / "pyconfig.py").write_text(PYCONFIG)
    (package / "trainers" / "pre_train").mkdir(parents=True)
    (package / "trainers" / "pre_train" / "train_compile.py").write_text(TRAIN_COMPILE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in _maxtext_modules():
        monkeypatch.delitem(sys.modules, name)
    yield package
    for name in _maxtext_modules():  # the fake's, imported while it stood in
        del sys.modules[name]


def _maxtext_modules() -> list[str]:
    return [m for m in sys.modules if m == "maxtext" or m.startswith("maxtext.")]


def _no_maxtext(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "maxtext" else real(name, *args, **kwargs)

    monkeypatch.setattr(maxtext.importlib.util, "find_spec", find_spec)


def test_a_candidates_overrides_are_its_mesh_and_knobs():
    """Every ici_* the config knows is 1 but the candidate's axes (base.yml's fsdp default -1
    would otherwise take the rest of the devices); knobs as MaxText's command line spells them."""
    out = maxtext.candidate_overrides(
        {"fsdp": 16, "tensor": 4},
        {"per_device_batch_size": 6, "remat_policy": "minimal", "fused_mlp": True},
        ["data", "fsdp", "tensor", "expert"],
    )
    assert out == {
        "ici_data_parallelism": "1",
        "ici_fsdp_parallelism": "16",
        "ici_tensor_parallelism": "4",
        "ici_expert_parallelism": "1",
        "per_device_batch_size": "6",
        "remat_policy": "minimal",
        "fused_mlp": "true",
    }


def test_the_command_line_is_train_compiles():
    step = maxtext.MaxTextStep(
        "/x/base.yml", (("attention", "flash"),), "v5p-128", ("data", "fsdp", "tensor")
    )
    argv = step.argv({"fsdp": 64}, {"remat_policy": "full"})
    assert argv[:2] == ["train_compile", "/x/base.yml"]
    pairs = dict(a.split("=", 1) for a in argv[2:])
    assert pairs["compile_topology"] == "v5p-128"
    assert pairs["compile_topology_num_slices"] == "1"
    assert pairs["ici_fsdp_parallelism"] == "64"
    assert pairs["ici_data_parallelism"] == pairs["ici_tensor_parallelism"] == "1"
    assert pairs["attention"] == "flash" and pairs["remat_policy"] == "full"
    assert pairs["dataset_type"] == "synthetic" and pairs["enable_checkpointing"] == "false"
    assert pairs["run_name"] != step.argv({"fsdp": 32, "tensor": 2}, {})[-1].split("=", 1)[1]


def test_config_keys_follow_base_config(tmp_path):
    (tmp_path / "base.yml").write_text(BASE)
    (tmp_path / "mine.yml").write_text("base_config: base.yml\nremat_policy: minimal\nnew_key: 1\n")
    keys = maxtext.config_keys(tmp_path / "mine.yml")
    assert keys["remat_policy"] == "minimal" and keys["new_key"] == 1
    assert keys["ici_fsdp_parallelism"] == -1
    assert maxtext.mesh_axes(keys) == ["data", "fsdp", "tensor", "expert"]
    (tmp_path / "orphan.yml").write_text("base_config: nowhere.yml\n")
    with pytest.raises(ValueError, match=r"base_config nowhere\.yml is not found"):
        maxtext.config_keys(tmp_path / "orphan.yml")


@pytest.mark.parametrize(
    ("axes", "knobs", "overrides", "message"),
    [
        (("fsdp", "tensr"), {}, {}, "no mesh axis 'tensr'.*did you mean 'tensor'"),
        (
            ("fsdp",),
            {"remat_polcy": ["full"]},
            {},
            "knob 'remat_polcy'.*did you mean 'remat_policy'",
        ),
        (("fsdp",), {}, {"atention": "flash"}, "override 'atention'.*did you mean 'attention'"),
        (("fsdp",), {}, {"ici_tensor_parallelism": "4"}, "set by the exploration: --axes"),
        (("fsdp",), {"compile_topology": ["v5p-8"]}, {}, "set by the exploration: the target"),
        (("fsdp",), {"remat_policy": ["full"]}, {"remat_policy": "minimal"}, "both as a knob"),
    ],
)
def test_bad_axes_knobs_and_overrides_are_refused(axes, knobs, overrides, message):
    import yaml

    with pytest.raises(ValueError, match=message):
        maxtext.check(yaml.safe_load(BASE), axes, knobs, overrides)


def test_the_target_names_maxtexts_topology(fake_maxtext):
    from hlo_roofline import targets

    spec_map = importlib.import_module("maxtext.utils.accelerator_to_spec_map")
    table = spec_map.UserFacingNameToSystemCharacteristics
    assert maxtext.compile_topology(targets.parse_target("v5p:2x2x1"), table) == "v5p-8"
    assert maxtext.compile_topology(targets.parse_target("v5e:4x4"), table) == "v5e-16"
    with pytest.raises(ValueError, match="no v5e slice of shape 2x2"):
        maxtext.compile_topology(targets.parse_target("v5e:2x2"), table)
    with pytest.raises(ValueError, match="TPU targets"):
        maxtext.compile_topology(targets.parse_target("h100"), table)


def test_the_step_goes_to_workers_by_value():
    step = maxtext.MaxTextStep("/x/base.yml", (("a", "1"),), "v5p-8", ("fsdp",))
    reference = make_step_reference(step)
    assert reference[0] == "pickle"
    assert make_step_from(reference) == step
    assert pickle.loads(pickle.dumps(step)) == step


def test_overrides_are_key_value():
    assert maxtext.parse_overrides(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        maxtext.parse_overrides(["attention"])
    with pytest.raises(ValueError, match="given twice"):
        maxtext.parse_overrides(["a=1", "a=2"])


def test_missing_maxtext_is_a_clear_exit_2(monkeypatch):
    _no_maxtext(monkeypatch)
    with pytest.raises(maxtext.MaxTextMissing, match="not importable"):
        maxtext.explore_maxtext("base.yml", "v5p:2x2x1")
    result = CliRunner().invoke(
        main, ["explore", "--maxtext", "base.yml", "--target", "v5p:2x2x1", "--axes", "fsdp"]
    )
    assert result.exit_code == 2, result.output
    assert "MaxText is not importable" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--axes", "fsdp,tensr"], "no mesh axis 'tensr'"),
        (["--axes", "fsdp", "--knob", "remat_polcy=full"], "did you mean 'remat_policy'"),
        (["--axes", "fsdp", "atention=flash"], "did you mean 'attention'"),
        (["--axes", "fsdp", "attention"], "not KEY=VALUE"),
        (["--axes", "fsdp", "--tokens-per-step", "8"], "counts the work from the config"),
        (["--axes", "fsdp", "--target", "v5e:2x2"], "no v5e slice of shape 2x2"),
    ],
)
def test_the_cli_refuses_bad_input_before_any_compile(fake_maxtext, monkeypatch, args, message):
    """Exit 2 with MaxText's key named, nothing compiled (the fake MaxText could not build one)."""

    def no_compile(*a, **k):
        raise AssertionError("explore() reached")

    monkeypatch.setattr("hlo_roofline.explorer.run.explore", no_compile)
    target = [] if "--target" in args else ["--target", "v5p:2x2x1"]
    result = CliRunner().invoke(main, ["explore", "--maxtext", "base.yml", *target, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_explore_gets_each_knob_combinations_work_and_the_scripts_flags(
    fake_maxtext, monkeypatch, capsys
):
    """The work of each knob combination is its own config's (a batch knob ranks by throughput),
    the flags are the script's plus train_compile's RNG flag, and the step goes by value."""
    given = {}

    def explore(make_step, target, **kwargs):
        given.update(kwargs, make_step=make_step, target=target)
        return "exploration"

    monkeypatch.setattr("hlo_roofline.explorer.run.explore", explore)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    out = maxtext.explore_maxtext(
        "base.yml", "v5p:2x2x1", overrides={"attention": "flash"}, axes=("fsdp", "tensor"),
        knobs={"per_device_batch_size": [2, 4], "remat_policy": ["full"]},
        libtpu_flags=["--xla_enable_async_all_gather=true"],
    )  # fmt: skip
    assert out == "exploration"
    assert "XLA_FLAGS" not in os.environ  # pyconfig's dump flags not left for the workers
    assert capsys.readouterr().out == ""  # MaxText's prints kept off stdout
    tokens, flops = given["tokens_per_step"], given["model_flops"]
    assert tokens(per_device_batch_size=2, remat_policy="full") == 2 * 4 * 2048
    assert tokens(per_device_batch_size=4, remat_policy="full") == 4 * 4 * 2048
    assert flops(per_device_batch_size=4, remat_policy="full") == pytest.approx(6e9 * 4 * 4 * 2048)
    assert given["libtpu_flags"] == ["--xla_enable_async_all_gather=true", maxtext.RNG_LIBTPU_FLAG]
    step = given["make_step"]
    assert isinstance(step, maxtext.MaxTextStep) and step.topology == "v5p-8"
    assert dict(step.overrides) == {"attention": "flash"}
    assert given["name"] == "maxtext-base@v5p-2x2x1"


def test_split_physical_axes_follow_the_config(fake_maxtext, monkeypatch):
    """With MaxText's allow_split_physical_axes=true, layouts that split a torus axis are
    candidates (v5p:4x4x4's fsdp 32 x tensor 2); without it they are pruned as MaxText's mesh
    builder would refuse them."""
    from hlo_roofline.explorer.layouts import candidates

    given = {}
    monkeypatch.setattr(
        "hlo_roofline.explorer.run.explore", lambda *a, **k: given.update(k)
    )
    for split in ("true", "false"):
        maxtext.explore_maxtext(
            "base.yml", "v5p:2x2x1", overrides={"allow_split_physical_axes": split},
            knobs={"per_device_batch_size": [1]},
        )  # fmt: skip
        assert given["allow_split_physical_axes"] is (split == "true")
    with pytest.raises(ValueError, match="give it as an override"):
        maxtext.explore_maxtext(
            "base.yml", "v5p:2x2x1", knobs={"allow_split_physical_axes": [True, False]}
        )
    sizes = {"fsdp": 32, "tensor": 2}
    found, pruned = candidates("v5p:4x4x4", ("fsdp", "tensor"), {}, {"fixed": {"tensor": 2}})
    reasons = {tuple(s.items()): why for s, why in pruned}
    assert not found and "does not map" in reasons[tuple(sizes.items())]
    found, _ = candidates("v5p:4x4x4", ("fsdp", "tensor"), {}, {"fixed": {"tensor": 2}}, True)
    assert [dict(c.sizes) for c in found] == [sizes]


def test_a_value_maxtext_refuses_is_found_before_any_compile(fake_maxtext, monkeypatch):
    monkeypatch.setattr("hlo_roofline.explorer.run.explore", None)
    with pytest.raises(
        ValueError, match=r"MaxText refuses the config of \S+_per_device_batch_size=many"
    ):
        maxtext.explore_maxtext(  # the fake pyconfig cannot read a batch of "many"
            "base.yml", "v5p:2x2x1", knobs={"per_device_batch_size": ["many"]}
        )


def test_a_config_name_is_found_in_maxtexts_folder(fake_maxtext, tmp_path):
    assert maxtext.resolve_config("base.yml") == (fake_maxtext / "configs" / "base.yml").resolve()
    with pytest.raises(ValueError, match=r"no MaxText config nope\.yml"):
        maxtext.resolve_config("nope.yml")
    mine = tmp_path / "mine.yml"
    mine.write_text("base_config: base.yml\n")
    assert maxtext.resolve_config(mine) == mine.resolve()
    assert "ici_fsdp_parallelism" in maxtext.config_keys(mine)  # base.yml from MaxText's folder


@pytest.mark.slow
def test_maxtexts_default_model_explores_where_maxtext_is_installed(tmp_path):
    """MaxText's default 1B model on a v5p-8, two layouts: both compile and fit, ranked by
    tokens/s per chip with MaxText's own work (only where MaxText is importable)."""
    if maxtext.maxtext_spec() is None:  # MaxText itself, not a folder named maxtext on the path
        pytest.skip("MaxText is not installed")
    result = maxtext.explore_maxtext(
        "base.yml", "v5p:2x2x1", overrides={"attention": "flash"}, axes=("fsdp", "tensor"),
        knobs={"per_device_batch_size": [2]}, constraints={"maximum": {"tensor": 2}}, jobs=1,
        cache=tmp_path, progress=False,
    )  # fmt: skip
    table = result.table
    assert list(table["status"]) == ["ok", "ok"], table[["candidate", "error"]]
    assert (table["tokens_per_step"] == 2 * 4 * 2048).all()
    assert table["tokens_per_s_per_chip"].is_monotonic_decreasing
    assert Path(result.name).name.startswith("maxtext-base@")


def test_a_folder_named_maxtext_on_the_path_is_not_maxtext(tmp_path, monkeypatch):
    """A checkout's or a fixtures folder ``maxtext/`` without ``__init__.py`` imports as a namespace
    package: it is not MaxText, and --maxtext says MaxText is missing rather than failing later."""
    (tmp_path / "maxtext").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in _maxtext_modules():
        monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    if importlib.util.find_spec("maxtext").origin is not None:  # the real one comes first
        pytest.skip("MaxText is installed ahead of the folder")
    assert maxtext.maxtext_spec() is None
    with pytest.raises(maxtext.MaxTextMissing, match="not importable"):
        maxtext.require_maxtext()


def test_a_layout_maxtext_refuses_leaves_the_work_to_another(fake_maxtext, monkeypatch):
    """MaxText's config may refuse one layout and take another (a layout's row is ``refused``
    then): the work of the knobs is read from a layout it takes, and only knobs it refuses on
    every layout stop the exploration before anything compiles."""
    pyconfig = fake_maxtext / "configs" / "pyconfig.py"
    pyconfig.write_text(
        PYCONFIG.replace(
            "    devices = ",
            '    assert keys["ici_tensor_parallelism"] == "1", "no tensor parallelism"\n'
            "    devices = ",
        )
    )
    given = {}
    monkeypatch.setattr(
        "hlo_roofline.explorer.run.explore", lambda *args, **kwargs: given.update(kwargs)
    )
    maxtext.explore_maxtext(
        "base.yml", "v5p:2x2x1", knobs={"per_device_batch_size": [2]}, axes=("fsdp", "tensor")
    )
    from hlo_roofline.explorer.layouts import candidates

    found, _ = candidates("v5p:2x2x1", ("fsdp", "tensor"), {}, None)
    assert dict(found[0].sizes)["tensor"] > 1  # the first layout is one the config refuses
    assert given["tokens_per_step"](per_device_batch_size=2) == 2 * 4 * 2048
    with pytest.raises(ValueError, match=r"MaxText refuses the config of .*no tensor"):
        maxtext.explore_maxtext(
            "base.yml", "v5p:2x2x1", knobs={"per_device_batch_size": [2]},
            constraints={"fixed": {"tensor": 2}},
        )  # fmt: skip
