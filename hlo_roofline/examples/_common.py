"""Pieces the example steps share: abstract arguments, AdamW, cross-entropy, layer norm."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding


def abstract(shape: tuple[int, ...], dtype: Any, sharding: NamedSharding | None = None):
    """An argument with a shape and dtype but no data: compiling needs nothing more."""
    return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=sharding)


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float = 1e-5) -> jax.Array:
    """Layer norm with its statistics in f32 (bf16 variance loses too much), result in x's dtype."""
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + eps)
    return (y * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean next-token loss, computed in f32 whatever the logits' dtype."""
    logits = logits.astype(jnp.float32)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return jnp.mean(log_z - picked)


def adamw_state(params: Any, sharding_of=lambda p: p.sharding) -> dict:
    """Abstract AdamW state: the (bf16) params plus f32 first and second moments shaped like them."""

    def moment(p):
        return abstract(p.shape, jnp.float32, sharding_of(p))

    return {
        "params": params,
        "mu": jax.tree.map(moment, params),
        "nu": jax.tree.map(moment, params),
        "count": abstract((), jnp.int32, _replicated_like(params)),
    }


def _replicated_like(params: Any) -> NamedSharding | None:
    leaf = jax.tree.leaves(params)[0]
    if isinstance(leaf.sharding, NamedSharding):
        return NamedSharding(leaf.sharding.mesh, jax.sharding.PartitionSpec())
    return None


def adamw_update(
    state: dict,
    grads: Any,
    learning_rate: float = 3e-4,
    b1: float = 0.9,
    b2: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.1,
) -> dict:
    """One AdamW step (Loshchilov & Hutter): moments in f32, params kept in their own dtype."""
    count = state["count"] + 1
    t = count.astype(jnp.float32)
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g.astype(jnp.float32), state["mu"], grads)
    nu = jax.tree.map(
        lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)), state["nu"], grads
    )

    def update(p, m, v):
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        step = m_hat / (jnp.sqrt(v_hat) + eps) + weight_decay * p.astype(jnp.float32)
        return (p.astype(jnp.float32) - learning_rate * step).astype(p.dtype)

    params = jax.tree.map(update, state["params"], mu, nu)
    return {"params": params, "mu": mu, "nu": nu, "count": count}
