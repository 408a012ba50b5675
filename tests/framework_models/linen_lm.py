"""The decoder of nnx_lm.py in Flax Linen: ``nn.compact`` modules named by their attribute, so
every op_name carries the module path (``DecoderLM/block_0/attention/q``)."""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from framework_models.nnx_lm import COMPUTE, CONFIG, Config


def dense(features: int, name: str) -> nn.Dense:
    return nn.Dense(features, use_bias=False, dtype=COMPUTE, name=name)


class Attention(nn.Module):
    c: Config

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, d = x.shape
        heads = (b, t, self.c.n_heads, self.c.head_dim)
        q = dense(d, "q")(x).reshape(heads)
        k = dense(d, "k")(x).reshape(heads)
        v = dense(d, "v")(x).reshape(heads)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.c.head_dim)
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))
        scores = jnp.where(causal, scores.astype(jnp.float32), -1e30)
        probs = jax.nn.softmax(scores, axis=-1).astype(COMPUTE)
        context = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
        return dense(d, "out")(context.reshape(b, t, d))


class Block(nn.Module):
    c: Config

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + Attention(self.c, name="attention")(nn.LayerNorm(name="norm1")(x))
        h = nn.gelu(dense(self.c.d_ff, "up")(nn.LayerNorm(name="norm2")(x)))
        return x + dense(self.c.d_model, "down")(h)


class DecoderLM(nn.Module):
    c: Config

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = nn.Embed(self.c.vocab, self.c.d_model, name="embed")(tokens).astype(COMPUTE)
        for i in range(self.c.n_layers):
            x = Block(self.c, name=f"block_{i}")(x)
        return dense(self.c.vocab, "head")(nn.LayerNorm(name="norm")(x))


def build(c: Config = CONFIG):
    """(step, (params, opt_state, tokens, targets)), all abstract (``jax.eval_shape``)."""
    model = DecoderLM(c)
    tokens = jax.ShapeDtypeStruct((c.batch, c.seq), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.key(0), tokens)
    tx = optax.adamw(3e-4, weight_decay=0.1)
    opt_state = jax.eval_shape(tx.init, params)

    def loss_fn(params, tokens, targets):
        logits = model.apply(params, tokens).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

    def train_step(params, opt_state, tokens, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, targets)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step, (params, opt_state, tokens, tokens)
