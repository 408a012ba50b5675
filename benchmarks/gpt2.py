"""GPT-2 small's training step with its 12 layers unrolled: the benchmark's largest real module.

GPT-2 small's shape (vocab 50257, d_model 768, 12 heads, 12 layers, d_ff 3072, 1024 tokens), each
layer with its own weights and written out in Python as GPT-2's reference code does (no
``lax.scan``), trained by the project's GPT example's forward, backward and AdamW
(``hlo_roofline/examples/gpt.py``). Compiled for TPU v5e (2x2, compile-only) it is 18k
instructions, 3.8 MB of optimized HLO; for the CPU, 14k.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from hlo_roofline.examples._common import (
    abstract,
    adamw_state,
    adamw_update,
    cross_entropy,
    layer_norm,
)
from hlo_roofline.examples.gpt import GptConfig, abstract_batch, decoder_layer
from hlo_roofline.examples.gpt import param_shapes as stacked_param_shapes

GPT2_SMALL = GptConfig(vocab=50257, d_model=768, n_heads=12, n_layers=12, d_ff=3072, seq=1024)


def gpt2_step(config: GptConfig = GPT2_SMALL):
    """(step, (state, batch), jit kwargs), the examples' convention; arguments are abstract."""
    shapes = stacked_param_shapes(config)
    layer = {name: shape[1:] for name, shape in shapes.pop("layers").items()}
    params = {name: abstract(shape, jnp.bfloat16) for name, shape in shapes.items()}
    params["layers"] = [
        {name: abstract(shape, jnp.bfloat16) for name, shape in layer.items()}
        for _ in range(config.n_layers)
    ]

    def loss_fn(params: dict, batch: dict) -> jax.Array:
        x = params["embed"][batch["tokens"]] + params["pos"]
        for layer_params in params["layers"]:
            x = decoder_layer(x, layer_params, config)
        x = layer_norm(x, params["ln_f_scale"], params["ln_f_bias"])
        logits = jnp.einsum("btd,vd->btv", x, params["embed"])
        return cross_entropy(logits, batch["targets"])

    def step(state: dict, batch: dict):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch)
        return adamw_update(state, grads), loss

    state = adamw_state(params)
    return step, (state, abstract_batch(config, config.batch)), {"donate_argnums": (0,)}
