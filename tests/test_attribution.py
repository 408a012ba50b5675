"""Which line of the model an op comes from: user_source, the call stack, scopes and rollups.

On a committed fixture (the GPT example's step compiled for TPU v5e, its HLO carrying the
StackFrames table jax writes) and on stacks built here; tests/test_frameworks.py does the same on
real Flax and Equinox code.
"""

from __future__ import annotations

import sysconfig

import pytest
from conftest import FIXTURES

from hlo_roofline import Report, analyze_hlo
from hlo_roofline.hlo import attrs
from hlo_roofline.report import UNATTRIBUTED, function_of, pass_of, scope_of


@pytest.fixture(scope="module")
def gpt():
    return analyze_hlo(FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e")


def test_installed_packages_the_stdlib_and_jax_are_library_code():
    stdlib = sysconfig.get_paths()["stdlib"]
    assert attrs.is_library(f"{stdlib}/threading.py")
    assert attrs.is_library("/opt/venv/lib/python3.12/site-packages/flax/nnx/nn/linear.py")
    assert attrs.is_library("/usr/lib/python3/dist-packages/numpy/core/numeric.py")
    assert attrs.is_library("<frozen runpy>")
    import jax

    assert attrs.is_library(jax.__file__)  # wherever it is installed (a source checkout too)
    assert not attrs.is_library("/home/me/project/model.py")
    assert not attrs.is_library("/tmp/ipykernel_1234/3456.py")  # a notebook cell
    # the tool's own code is not the user's; its examples are models like the user's
    import hlo_roofline.api
    import hlo_roofline.examples.gpt

    assert attrs.is_library(hlo_roofline.api.__file__)
    assert not attrs.is_library(hlo_roofline.examples.gpt.__file__)
    # more libraries: by package name, or by directory
    assert attrs.is_library("/home/me/layers/attention.py", [*attrs.LIBRARIES, "/home/me/layers"])


def test_user_source_is_the_first_frame_of_the_users_code(gpt):
    """The GPT example's matmuls are attributed to examples/gpt.py lines, while ``source`` (the
    innermost frame) and ``user_source`` agree where the op is made in the model's own code."""
    ops = gpt.ops
    matmuls = ops[ops["mm_k"] > 0]
    assert matmuls["user_source"].str.contains(r"/examples/gpt\.py:\d+ \(\w+\)$").all()
    for _, op in ops[ops["user_source"] != ""].iterrows():
        stack = gpt.stack(op["name"])
        first_user = next(f for f in stack if not attrs.is_library(attrs.parse_frame(f).file))
        assert op["user_source"] == first_user
        assert stack[0].startswith(op["source"] + " ") or stack[0] == op["source"]
    # layer_norm lives in examples/_common.py: its ops name that file, not the caller
    assert ops["user_source"].str.contains(r"_common\.py:\d+ \(layer_norm\)$").any()


def test_attribute_with_more_libraries_moves_to_the_caller(gpt):
    """Declaring _common.py a library attributes layer_norm's ops to the gpt.py line
    that calls it: the stack is kept, so the choice can be made after the compile."""
    common = next(u for u in gpt.ops["user_source"] if "_common.py" in u)
    moved = gpt.attribute([*attrs.LIBRARIES, common.split(":")[0]])  # a file: .../_common.py
    assert not moved.ops["user_source"].str.contains("_common.py", regex=False).any()
    norm = gpt.ops["user_source"].str.contains("(layer_norm)", regex=False)
    assert moved.ops.loc[norm, "user_source"].str.contains(r"gpt\.py:\d+ ").all()
    assert moved.ops["call_stack"].equals(gpt.ops["call_stack"])


def test_rollups_by_line_function_scope_and_pass(gpt):
    total = gpt.summary["step_time_lower_s"]
    for by in ("user_source", "user_function", "scope", "pass", ["scope", "pass"], "opcode"):
        rolled = gpt.rollup(by)
        assert rolled["flops"].sum() == pytest.approx(gpt.ops["flops"].sum())
        assert rolled["t_roofline_s"].sum() == pytest.approx(total)
        assert rolled["ops"].sum() == len(gpt.ops)
        timed = rolled[rolled["t_roofline_s"] > 0]
        mix = timed[["mix_compute", "mix_memory", "mix_communication"]].sum(axis=1)
        assert mix.to_numpy() == pytest.approx(1.0)
    scopes = gpt.rollup("scope").index
    for scope in (
        "attention/qkv",
        "attention/scores",
        "mlp/up",
        "mlp/down",
        "logits",
        UNATTRIBUTED,
    ):
        assert scope in scopes
    assert set(gpt.rollup("pass").index) == {"forward", "backward", UNATTRIBUTED}
    with pytest.raises(ValueError, match="rollup by one of"):
        gpt.rollup("flops")


@pytest.mark.parametrize(
    ("op_name", "scope", "pass_"),
    [
        ("jit(train_step)/transpose(jvp())/while/body/closed_call/attention/scores/exp",
         "attention/scores", "backward"),
        ("jit(train_step)/jvp()/while/body/eval_jaxpr/mlp/up/dot_general", "mlp/up", "forward"),
        ("jit(step)/jvp(LM)/Block_0/Dense_1/dot_general", "LM/Block_0/Dense_1", "forward"),
        ("jit(step)/jvp()/attention/qkv/btd,dchk->cbthk/dot_general", "attention/qkv", "forward"),
        ("jit(step)/transpose(jvp(jit(take_along_axis)))/scatter-add", "", "backward"),
        ("jit(f)/cond/branch_1_fun/decoder/add", "decoder", ""),
        ("jit(f)/jvp(vmap(eqx.nn.Linear))/dot_general", "eqx.nn.Linear", "forward"),
        ("state['params']['w']", "", ""),
        ("", "", ""),
    ],
)  # fmt: skip
def test_scope_and_pass_of_an_op_name(op_name, scope, pass_):
    assert scope_of(op_name) == scope
    assert pass_of(op_name) == pass_


def test_function_of_a_user_line():
    assert function_of("/m/model.py:12 (Block.__call__)") == "/m/model.py (Block.__call__)"
    assert function_of("/m/model.py:12") == "/m/model.py"
    assert function_of("") == ""


def test_reports_keep_the_stack_through_json_and_csv(gpt, tmp_path):
    """JSON stores each distinct stack once; both formats read back the same columns."""
    payload = gpt.to_dict()
    stacks = payload["call_stacks"]
    assert len(stacks) == gpt.ops["call_stack"].nunique() < len(gpt.ops) / 4
    gpt.to_json(tmp_path / "r.json")
    gpt.to_csv(tmp_path / "r.csv")
    for path in (tmp_path / "r.json", tmp_path / "r.csv"):
        back = Report.read(path)
        assert back.ops["call_stack"].tolist() == gpt.ops["call_stack"].tolist()
        assert back.ops["user_source"].tolist() == gpt.ops["user_source"].tolist()
    bad = dict(payload, data=[[*row] for row in payload["data"]])
    bad["data"][0][payload["columns"].index("call_stack")] = len(stacks) + 5
    with pytest.raises(ValueError, match="call_stacks"):
        Report.from_dict(bad)
