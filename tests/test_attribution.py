"""Which line of the model an op comes from: user_source, the call stack, scopes and rollups.

On a committed fixture (the GPT example's step compiled for TPU v5e, its HLO carrying the
StackFrames table jax writes) and on stacks built here; tests/test_frameworks.py does the same on
real Flax and Equinox code.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import FIXTURES, SLOW

from hlo_roofline import Report, analyze_hlo
from hlo_roofline.hlo import attribution, attrs
from hlo_roofline.hlo.attribution import function_of, pass_of, scope_of
from hlo_roofline.report import UNATTRIBUTED


@pytest.fixture(scope="module")
def gpt():
    return analyze_hlo(FIXTURES / "gpt_tiny" / "tpu_v5e.hlo.txt", chip="v5e")


def test_installed_packages_the_stdlib_and_jax_are_library_code():
    stdlib = sysconfig.get_paths()["stdlib"]
    assert attribution.is_library(f"{stdlib}/threading.py")
    assert attribution.is_library("/opt/venv/lib/python3.12/site-packages/flax/nnx/nn/linear.py")
    assert attribution.is_library("/usr/lib/python3/dist-packages/numpy/core/numeric.py")
    assert attribution.is_library("<frozen runpy>")
    import jax

    assert attribution.is_library(jax.__file__)  # wherever it is installed (a source checkout too)
    assert not attribution.is_library("/home/me/project/model.py")
    assert not attribution.is_library("/tmp/ipykernel_1234/3456.py")  # a notebook cell
    # the tool's own code is not the user's; its examples are models like the user's
    import hlo_roofline.api
    import hlo_roofline.examples.gpt

    assert attribution.is_library(hlo_roofline.api.__file__)
    assert not attribution.is_library(hlo_roofline.examples.gpt.__file__)
    # more libraries: by package name, or by directory
    extra = [*attribution.LIBRARIES, "/home/me/layers"]
    assert attribution.is_library("/home/me/layers/attention.py", extra)
    # the path the docs named before attribution had its own module still works
    assert attrs.LIBRARIES is attribution.LIBRARIES
    assert attrs.LAYER_MODULES is attribution.LAYER_MODULES


def test_user_source_is_the_first_frame_of_the_users_code(gpt):
    """The GPT example's matmuls are attributed to examples/gpt.py lines, while ``source`` (the
    innermost frame) and ``user_source`` agree where the op is made in the model's own code."""
    ops = gpt.ops
    matmuls = ops[ops["mm_k"] > 0]
    assert matmuls["user_source"].str.contains(r"/examples/gpt\.py:\d+ \(\w+\)$").all()
    for _, op in ops[ops["user_source"] != ""].iterrows():
        stack = gpt.stack(op["name"])
        first_user = next(f for f in stack if not attribution.is_library(attribution.parse_frame(f).file))
        assert op["user_source"] == first_user
        assert stack[0].startswith(op["source"] + " ") or stack[0] == op["source"]
    # layer_norm lives in examples/_common.py: its ops name that file, not the caller
    assert ops["user_source"].str.contains(r"_common\.py:\d+ \(layer_norm\)$").any()


def test_attribute_with_more_libraries_moves_to_the_caller(gpt):
    """Declaring _common.py a library attributes layer_norm's ops to the gpt.py line
    that calls it: the stack is kept, so the choice can be made after the compile."""
    common = next(u for u in gpt.ops["user_source"] if "_common.py" in u)
    moved = gpt.attribute([*attribution.LIBRARIES, common.split(":")[0]])  # a file: .../_common.py
    assert not moved.ops["user_source"].str.contains("_common.py", regex=False).any()
    norm = gpt.ops["user_source"].str.contains("(layer_norm)", regex=False)
    assert moved.ops.loc[norm, "user_source"].str.contains(r"gpt\.py:\d+ ").all()
    assert moved.ops["call_stack"].equals(gpt.ops["call_stack"])


def test_rollups_by_line_function_scope_and_pass(gpt):
    total = gpt.summary["step_time_serial_s"]
    for by in ("user_source", "user_function", "scope", "pass", ["scope", "pass"], "opcode"):
        rolled = gpt.rollup(by)
        assert rolled["flops"].sum() == pytest.approx(gpt.ops["flops"].sum())
        assert rolled["t_expected_s"].sum() == pytest.approx(total)
        assert rolled["ops"].sum() == len(gpt.ops)
        timed = rolled[rolled["t_expected_s"] > 0]
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
        # a scan's own slicing and stacking, in the loop's body under no scope of the model's
        ("jit(train_step)/jvp()/while/body/jit(dynamic_update_index_in_dim)/dynamic_update_slice",
         "(scan stacking)", "forward"),
        ("jit(train_step)/transpose(jvp())/while/body/jit(dynamic_index_in_dim)/dynamic_slice",
         "(scan stacking)", "backward"),
        ("jit(step)/decoder/while/body/jit(dynamic_index_in_dim)", "decoder/(scan stacking)", ""),
        # the same helper called by the model's own code stays in the model's scope
        ("jit(step)/while/body/kv_cache/jit(dynamic_update_index_in_dim)/dynamic_update_slice",
         "kv_cache", ""),
        ("jit(step)/jvp()/while/body/add", "", "forward"),  # the loop's counter
    ],
)  # fmt: skip
def test_scope_and_pass_of_an_op_name(op_name, scope, pass_):
    assert scope_of(op_name) == scope
    assert pass_of(op_name) == pass_


def test_scan_stacking_is_its_own_scope_on_the_gpt_fixture(gpt):
    """The GPT step scans its layers: the forward pass writes each layer's saved activations into
    the scan's stacked buffers (dynamic-update-slice), the backward pass reads them back
    (dynamic-slice) and stacks each layer's weight gradients. Those ops form the ``(scan stacking)`` scope, in both passes, and are the
    fixture's only ops that update or slice a buffer in a loop's body outside the model's scopes."""
    ops = gpt.ops
    scopes = ops["op_name"].map(scope_of)
    stacking = ops[scopes == attribution.SCAN_STACKING]
    assert set(stacking["op_name"].map(pass_of)) == {"forward", "backward"}
    written = stacking[stacking["op_name"].map(pass_of) == "forward"]
    assert written["op_name"].str.endswith("/dynamic_update_slice").all()
    read = stacking[stacking["op_name"].map(pass_of) == "backward"]
    assert read["op_name"].str.contains("jit(dynamic_index_in_dim)", regex=False).any()
    assert stacking["flops"].sum() < stacking["bytes_accessed"].sum()  # copies, under 1 FLOP/B
    # every other op in a loop body that slices or updates a buffer has a model scope
    in_body = ops["op_name"].str.contains("/while/body/", regex=False)
    indexing = ops["op_name"].str.contains(r"/dynamic_(?:update_)?slice$|dynamic_index_in_dim")
    assert (scopes[in_body & indexing & (scopes != attribution.SCAN_STACKING)] != "").all()
    rolled = gpt.rollup(["scope", "pass"])
    for pass_ in ("forward", "backward"):
        assert rolled.loc[(attribution.SCAN_STACKING, pass_), "t_expected_s"] > 0
    assert rolled.loc[(attribution.SCAN_STACKING, "forward"), "ops"] == len(written)


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


# -- the caller of a generic layer, and installed packages that are the user's ----------------------

SMALL = dict(vocab=512, d_model=128, n_heads=4, d_ff=512, n_layers=2, seq=64, batch=2)


def matmul_flops_by(report: Report, column: str) -> dict[str, float]:
    matmuls = report.ops[report.ops["mm_k"] > 0]
    return matmuls.groupby(column)["flops"].sum().to_dict()


def projection_flops(c, parts=("q", "k", "v", "out", "up", "down")) -> dict[str, float]:
    """Training FLOPs (forward and both gradients) of each projection, over the layers."""
    t, d = c.tokens, c.d_model
    sizes = {"up": d * c.d_ff, "down": c.d_ff * d}
    return {p: 3 * 2 * t * sizes.get(p, d * d) * c.n_layers for p in parts}


def assert_separates_projections(report: Report, key_of, c) -> None:
    """Rolled up by layer_caller, each projection is one row with its own matmul FLOPs, where the
    innermost-frame rollup (``source``) lumps them all into the layer module's line."""
    by_caller = matmul_flops_by(report, "layer_caller")
    want = projection_flops(c)
    keys = {p: key_of(p) for p in want}
    assert len(set(keys.values())) == len(keys)
    for part, flops in want.items():
        assert by_caller[keys[part]] == pytest.approx(flops, rel=0.02), (part, by_caller)
    rolled = report.rollup("layer_caller")
    for key in keys.values():
        assert key in rolled.index
    by_source = matmul_flops_by(report, "source")
    lumped = max(by_source.values())
    assert lumped >= 0.99 * sum(want.values())  # the layer's one line carries all of them


@SLOW
def test_layer_caller_separates_the_projections_of_a_flax_linen_model():
    from framework_models import linen_lm
    from framework_models.nnx_lm import Config

    from hlo_roofline import analyze

    c = Config(**SMALL)
    step, args = linen_lm.build(c)
    report = analyze(step, *args, cache=False)
    source = Path(linen_lm.__file__).read_text().splitlines()
    lines = {}
    for number, text in enumerate(source, 1):
        for part in ("q", "k", "v", "out", "up", "down"):
            if f'"{part}")' in text:
                function = "Block.__call__" if part in ("up", "down") else "Attention.__call__"
                lines[part] = f"{linen_lm.__file__}:{number} ({function}) [{part}]"
    assert_separates_projections(report, lines.__getitem__, c)


@SLOW
def test_layer_caller_of_an_nnx_model_is_its_marked_line():
    from framework_models import nnx_lm

    from hlo_roofline import analyze

    c = nnx_lm.Config(**SMALL)
    step, args = nnx_lm.build(c)
    report = analyze(step, *args, cache=False)
    text = Path(nnx_lm.__file__).read_text().splitlines()
    marked = {
        line.rsplit("# <- ", 1)[1].strip(): number
        for number, line in enumerate(text, 1)
        if "# <- " in line
    }
    callers = set(report.ops.loc[report.ops["mm_k"] > 0, "layer_caller"])

    def key_of(part: str) -> str:
        found = [k for k in callers if k.startswith(f"{nnx_lm.__file__}:{marked[part]} ")]
        assert len(found) == 1, (part, callers)
        return found[0]

    assert_separates_projections(report, key_of, c)


# A framework installed in site-packages, laid out as MaxText is: generic layers in
# layers/linears.py, the model's projections named by their callers in layers/attentions.py.
MAXTEXT = {
    "maxtext/__init__.py": "",
    "maxtext/layers/__init__.py": "",
    "maxtext/layers/linears.py": '''
import flax.linen as nn
import jax.numpy as jnp


class DenseGeneral(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features))
        return jnp.dot(x, kernel.astype(x.dtype))


class MlpBlock(nn.Module):
    """As MaxText's: the MLP lives in linears.py beside the layer it calls."""

    d: int
    ff: int

    @nn.compact
    def __call__(self, x):
        h = nn.gelu(DenseGeneral(self.ff, name="wi_0")(x))
        return DenseGeneral(self.d, name="wo")(h)
''',
    "maxtext/layers/attentions.py": """
import flax.linen as nn
import jax
import jax.numpy as jnp

from maxtext.layers.linears import DenseGeneral, MlpBlock


class Decoder(nn.Module):
    d: int
    ff: int

    @nn.compact
    def __call__(self, x):
        q = DenseGeneral(self.d, name="query")(x)
        k = DenseGeneral(self.d, name="key")(x)
        v = DenseGeneral(self.d, name="value")(x)
        probs = jax.nn.softmax(jnp.einsum("td,sd->ts", q, k), axis=-1)
        x = x + DenseGeneral(self.d, name="out")(probs @ v)
        return x + MlpBlock(self.d, self.ff, name="mlp")(x)
""",
}
MAXTEXT_DRIVER = """
import jax
import jax.numpy as jnp

from maxtext.layers.attentions import Decoder

T, D, FF = 128, 128, 512


def train_step_example():
    model = Decoder(D, FF)
    x = jax.ShapeDtypeStruct((T, D), jnp.float32)
    params = jax.eval_shape(model.init, jax.random.key(0), x)

    def train_step(params, x):
        return jax.grad(lambda p: (model.apply(p, x) ** 2).sum())(params)

    return train_step, (params, x)
"""


@pytest.fixture
def installed_maxtext(tmp_path, monkeypatch):
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    for name, text in MAXTEXT.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    (tmp_path / "driver.py").write_text(MAXTEXT_DRIVER)
    monkeypatch.syspath_prepend(str(site))
    for name in [m for m in sys.modules if m == "maxtext" or m.startswith("maxtext.")]:
        monkeypatch.delitem(sys.modules, name)
    attribution._library_dirs.cache_clear()
    yield site / "maxtext"
    attribution._library_dirs.cache_clear()


@SLOW
def test_an_installed_package_named_as_the_users_is_attributed_and_its_layers_separate(
    installed_maxtext, tmp_path, monkeypatch
):
    import jax

    from hlo_roofline import analyze, cli

    step, args, _ = cli.load_entry(f"{tmp_path / 'driver.py'}:train_step_example")
    library = analyze(step, *args, cache=False)
    matmuls = library.ops[library.ops["mm_k"] > 0]
    # installed: every matmul is the driver's line (the one user frame left)
    assert matmuls["user_source"].str.startswith(str(tmp_path / "driver.py")).all()
    report = analyze(step, *args, cache=False, user_packages=["maxtext"])
    matmuls = report.ops[report.ops["mm_k"] > 0]
    linears = str(installed_maxtext / "layers" / "linears.py")
    attentions = str(installed_maxtext / "layers" / "attentions.py")
    assert matmuls["user_source"].str.startswith(linears + ":").mean() > 0.5
    by_caller = matmul_flops_by(report, "layer_caller")
    t, d, ff = 128, 128, 512
    # the step's input needs no gradient: q, k and v are a forward and a weight-gradient matmul
    for name, flops, module, function in (
        ("query", 2 * 2 * t * d * d, "attentions", "Decoder"),
        ("key", 2 * 2 * t * d * d, "attentions", "Decoder"),
        ("value", 2 * 2 * t * d * d, "attentions", "Decoder"),
        ("out", 3 * 2 * t * d * d, "attentions", "Decoder"),
        ("wi_0", 3 * 2 * t * d * ff, "linears", "MlpBlock"),  # the MLP's own lines in linears.py
        ("wo", 3 * 2 * t * ff * d, "linears", "MlpBlock"),
    ):
        path = installed_maxtext / "layers" / f"{module}.py"
        text = path.read_text().splitlines()
        number = next(i for i, line in enumerate(text, 1) if f'name="{name}"' in line)
        key = f"{path}:{number} ({function}.__call__) [{name}]"
        assert by_caller.get(key, 0.0) == pytest.approx(flops, rel=0.02), (name, by_caller)
    # a directory works as well as a package name, and analyze_hlo takes the same list
    by_dir = analyze(step, *args, cache=False, user_packages=[str(installed_maxtext)])
    assert by_dir.ops["layer_caller"].equals(report.ops["layer_caller"])
    # the CLI: --user-package, or [tool.hlo-roofline] user-packages in pyproject.toml
    from click.testing import CliRunner

    monkeypatch.setenv("HLO_ROOFLINE_CACHE_DIR", str(tmp_path / "cache"))
    entry = f"{tmp_path / 'driver.py'}:train_step_example"
    runner = CliRunner()
    for extra in (["--user-package", "maxtext"], []):
        if not extra:
            (tmp_path / "pyproject.toml").write_text(
                '[tool.hlo-roofline]\nuser-packages = ["maxtext"]\n'
            )
        result = runner.invoke(cli.main, ["analyze", entry, "--format", "csv", *extra])
        assert result.exit_code == 0, result.output
        assert "[query]" in result.stdout and linears in result.stdout
    (tmp_path / "pyproject.toml").write_text('[tool.hlo-roofline]\nuser-packages = "maxtext"\n')
    result = runner.invoke(cli.main, ["analyze", entry])
    assert result.exit_code == 2 and "must be a list" in result.output
    # `hlo` on the step's optimized HLO text takes the flag too
    (tmp_path / "pyproject.toml").unlink()
    hlo = tmp_path / "step.hlo.txt"
    hlo.write_text(jax.jit(step).lower(*args).compile().as_text())
    for extra, found in ((["--user-package", "maxtext"], True), ([], False)):
        result = runner.invoke(cli.main, ["hlo", str(hlo), "--format", "json", *extra])
        assert result.exit_code == 0, result.output
        ops = Report.from_dict(json.loads(result.stdout)).ops
        assert ops["user_source"].str.startswith(linears).any() == found
        assert ops["layer_caller"].str.startswith(attentions).any() == found
