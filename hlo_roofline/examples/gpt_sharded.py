"""The GPT training step on 64 chips: data parallel × tensor parallel (Megatron-style), compile-only.

The same model as :mod:`hlo_roofline.examples.gpt`, larger (d_model 2048, 16 heads, d_ff 8192),
on a 2-D mesh ``("data", "model")``: the batch is split over ``data``; attention heads, the MLP
hidden dimension and the vocabulary are split over ``model``, so each layer needs an all-reduce of
activations over ``model`` (forward and backward) and every gradient an all-reduce over ``data``.
XLA's SPMD partitioner inserts those collectives from the argument shardings alone.

Nobody has 64 TPU v5p chips or 8 DGX H100 nodes at hand to try a sharding on; the compile-only
targets give the exact per-device program XLA would run there, from one CPU machine::

    from hlo_roofline import analyze
    from hlo_roofline.examples.gpt_sharded import gpt_sharded_step
    step, args, jit_kwargs = gpt_sharded_step("v5p:4x4x4")
    report = analyze(step, *args, target="v5p:4x4x4", jit_kwargs=jit_kwargs)
"""

from __future__ import annotations

import functools

from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from hlo_roofline import targets
from hlo_roofline.examples import gpt
from hlo_roofline.examples._common import adamw_state

TARGET = "v5p:4x4x4"  # 64 TPU v5p chips, a 4×4×4 torus
TARGETS = ("v5p:4x4x4", "h100:8x1x8")  # ... or 8 hosts × 8 H100 (NVLink inside, network across)
# (data, model) mesh shape per target: tensor parallelism stays inside a GPU node's NVLink domain.
MESH_SHAPES = {"v5p:4x4x4": (16, 4), "h100:8x1x8": (8, 8)}

CONFIG = gpt.GptConfig(d_model=2048, n_heads=16, d_ff=8192, batch=4)  # batch: per replica

# Where each parameter's dimensions go; the leading None is the stacked-layer axis of the scan.
PARAM_SPECS = {
    "embed": P("model", None),  # vocabulary-parallel embedding (tied to the output projection)
    "pos": P(),
    "layers": {
        "ln1_scale": P(),
        "ln1_bias": P(),
        "w_qkv": P(None, None, None, "model", None),  # heads
        "wo": P(None, "model", None, None),  # heads
        "ln2_scale": P(),
        "ln2_bias": P(),
        "w_up": P(None, None, "model"),  # hidden
        "w_down": P(None, "model", None),  # hidden
    },
    "ln_f_scale": P(),
    "ln_f_bias": P(),
}


def param_spec(path) -> P:
    spec = PARAM_SPECS
    for key in path:
        spec = spec[key.key]
    return spec


def gpt_sharded_step(target: str = TARGET, config: gpt.GptConfig = CONFIG):
    """(step, (state, batch), jit kwargs) on every device of ``target``, sharded data × model.

    The global batch is ``config.batch`` sequences per data-parallel replica (64 × 1024 tokens on
    ``v5p:4x4x4``). AdamW moments are sharded like their params.
    """
    canonical = {targets.parse_target(t).spec: shape for t, shape in MESH_SHAPES.items()}
    parsed = targets.parse_target(target)
    shape = canonical.get(parsed.spec)
    if shape is None:
        raise ValueError(f"no mesh shape for {str(target)!r}; known: {', '.join(MESH_SHAPES)}")
    mesh = targets.make_mesh(parsed, shape, ("data", "model"))
    params = gpt.abstract_params(
        config, sharding_of=lambda path, _: NamedSharding(mesh, param_spec(path))
    )
    state = adamw_state(params)
    batch = gpt.abstract_batch(
        config, config.batch * mesh.shape["data"], NamedSharding(mesh, P("data", None))
    )
    step = functools.partial(gpt.train_step, config=config)
    functools.update_wrapper(step, gpt.train_step)
    return step, (state, batch), {"donate_argnums": (0,)}
