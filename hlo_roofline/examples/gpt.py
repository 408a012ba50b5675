"""A GPT-style decoder training step: embeddings, causal attention, MLP, layer norm, AdamW.

The layers are stacked and run with ``lax.scan`` (one compiled layer body, as large models do), the
params are bf16 and the AdamW moments f32. Every matmul sits in a named scope (``attention/qkv``,
``attention/scores``, ``attention/context``, ``attention/out``, ``mlp/up``, ``mlp/down``,
``logits``), so the report's ``op_name`` column says which part of the model an op belongs to::

    from hlo_roofline import analyze
    from hlo_roofline.examples.gpt import gpt_step
    step, args, jit_kwargs = gpt_step()
    report = analyze(step, *args, target="v5e:2x2", jit_kwargs=jit_kwargs)

or from a terminal: ``hlo-roofline analyze hlo_roofline/examples/gpt.py:gpt_step --target v5e:2x2``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from hlo_roofline.examples._common import (
    abstract,
    adamw_state,
    adamw_update,
    cross_entropy,
    layer_norm,
)

TARGET = "v5e:2x2"
TARGETS = ("v5e:2x2", "h100")


@dataclass(frozen=True)
class GptConfig:
    """Model and batch shape. The default has 85 M parameters (GPT-2 small has 124 M)."""

    vocab: int = 32768
    d_model: int = 1024
    n_heads: int = 8
    n_layers: int = 4
    d_ff: int = 4096
    seq: int = 1024
    batch: int = 8  # sequences per step (per data-parallel replica in the sharded variant)
    # Recompute the MLP's activation in the backward pass instead of saving its intermediates
    # (jax.checkpoint, saving only matmul outputs): see docs/tutorial.md.
    mlp_remat: bool = False

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


CONFIG = GptConfig()


def param_shapes(config: GptConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's shape; per-layer weights carry a leading ``n_layers`` axis for the scan."""
    c = config
    layer = {
        "ln1_scale": (c.d_model,),
        "ln1_bias": (c.d_model,),
        "w_qkv": (c.d_model, 3, c.n_heads, c.head_dim),
        "wo": (c.n_heads, c.head_dim, c.d_model),
        "ln2_scale": (c.d_model,),
        "ln2_bias": (c.d_model,),
        "w_up": (c.d_model, c.d_ff),
        "w_down": (c.d_ff, c.d_model),
    }
    return {
        "embed": (c.vocab, c.d_model),
        "pos": (c.seq, c.d_model),
        "layers": {name: (c.n_layers, *shape) for name, shape in layer.items()},
        "ln_f_scale": (c.d_model,),
        "ln_f_bias": (c.d_model,),
    }


def forward_flops_per_token(config: GptConfig) -> float:
    """Forward matmul FLOPs per token (2 per multiply-add), attention over the whole masked sequence.

    XLA computes the masked half of the causal score matrix too, so it is counted.
    """
    c = config
    per_layer = (
        2 * c.d_model * 3 * c.d_model  # qkv
        + 2 * c.d_model * c.d_model  # output projection
        + 2 * 2 * c.d_model * c.d_ff  # MLP up and down
        + 2 * 2 * c.seq * c.d_model  # scores and context
    )
    return c.n_layers * per_layer + 2 * c.d_model * c.vocab  # + logits


def train_flops(config: GptConfig, sequences: int) -> float:
    """Matmul FLOPs of a training step: forward, and twice that backward (input and weight grads)."""
    return 3 * forward_flops_per_token(config) * sequences * config.seq


def attention(x: jax.Array, p: dict, config: GptConfig) -> jax.Array:
    """Causal multi-head self-attention; softmax in f32, matmuls in bf16."""
    with jax.named_scope("qkv"):
        q, k, v = jnp.einsum("btd,dchk->cbthk", x, p["w_qkv"])
    with jax.named_scope("scores"):
        scores = jnp.einsum("bqhk,bshk->bhqs", q, k, preferred_element_type=jnp.float32)
        scores = scores / math.sqrt(config.head_dim)
        causal = jnp.tril(jnp.ones((config.seq, config.seq), dtype=bool))
        scores = jnp.where(causal, scores, -1e30)
        probs = jax.nn.softmax(scores, axis=-1).astype(x.dtype)
    with jax.named_scope("context"):
        context = jnp.einsum("bhqs,bshk->bqhk", probs, v)
    with jax.named_scope("out"):
        return jnp.einsum("bqhk,hkd->bqd", context, p["wo"])


def mlp(x: jax.Array, p: dict) -> jax.Array:
    with jax.named_scope("up"):
        h = jax.nn.gelu(x @ p["w_up"])
    with jax.named_scope("down"):
        return h @ p["w_down"]


def decoder_layer(x: jax.Array, p: dict, config: GptConfig) -> jax.Array:
    """Pre-norm residual block: x + attention(ln(x)), then + mlp(ln(x))."""
    with jax.named_scope("attention"):
        x = x + attention(layer_norm(x, p["ln1_scale"], p["ln1_bias"]), p, config)
    mlp_fn = mlp
    if config.mlp_remat:
        mlp_fn = jax.checkpoint(
            mlp, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable
        )
    with jax.named_scope("mlp"):
        return x + mlp_fn(layer_norm(x, p["ln2_scale"], p["ln2_bias"]), p)


def loss_fn(params: dict, batch: dict, config: GptConfig) -> jax.Array:
    """Next-token cross-entropy; the output projection is tied to the embedding."""
    with jax.named_scope("embed"):
        x = params["embed"][batch["tokens"]] + params["pos"]

    def body(x, layer_params):
        return decoder_layer(x, layer_params, config), None

    x, _ = lax.scan(body, x, params["layers"])
    x = layer_norm(x, params["ln_f_scale"], params["ln_f_bias"])
    with jax.named_scope("logits"):
        logits = jnp.einsum("btd,vd->btv", x, params["embed"])
    return cross_entropy(logits, batch["targets"])


def train_step(state: dict, batch: dict, config: GptConfig = CONFIG) -> tuple[dict, jax.Array]:
    """Forward, backward and one AdamW update; returns the new state and the loss."""
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], batch, config)
    return adamw_update(state, grads), loss


def abstract_params(config: GptConfig, dtype: Any = jnp.bfloat16, sharding_of=None) -> dict:
    """ShapeDtypeStructs for the params; ``sharding_of(path, shape)`` picks each one's sharding."""
    sharding_of = sharding_of or (lambda path, shape: None)
    return jax.tree_util.tree_map_with_path(
        lambda path, shape: abstract(shape, dtype, sharding_of(path, shape)),
        param_shapes(config),
        is_leaf=lambda x: isinstance(x, tuple),
    )


def abstract_batch(config: GptConfig, batch: int, sharding=None) -> dict:
    shape = (batch, config.seq)
    return {
        "tokens": abstract(shape, jnp.int32, sharding),
        "targets": abstract(shape, jnp.int32, sharding),
    }


def gpt_step(config: GptConfig = CONFIG):
    """(step, (state, batch), jit kwargs) for one device: the CLI's ``file.py:NAME`` convention.

    The default shape: 8 × 1024 tokens per step, d_model 1024, 8 heads of 128, d_ff 4096, 4 layers,
    vocab 32768. The state is donated, as a real training loop would.
    """
    params = abstract_params(config)
    state = adamw_state(params)
    step = functools.partial(train_step, config=config)
    functools.update_wrapper(step, train_step)
    return step, (state, abstract_batch(config, config.batch)), {"donate_argnums": (0,)}


def gpt_remat_step(config: GptConfig = CONFIG):
    """:func:`gpt_step` with ``mlp_remat=True``: the backward pass recomputes the MLP's GELU."""
    return gpt_step(replace(config, mlp_remat=True))
