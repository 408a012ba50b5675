"""A decoder-only language model in Flax NNX, trained with optax.adamw.

Written as a Flax user would: ``nnx.Module`` layers, f32 parameters computed in bf16, a pure
training step over ``nnx.split`` state (``pure_train_step``), the optimizer an ``nnx.Optimizer``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import optax
from flax import nnx


@dataclass(frozen=True)
class Config:
    vocab: int = 8192
    d_model: int = 1024
    n_heads: int = 8
    d_ff: int = 4096
    n_layers: int = 2
    seq: int = 512
    batch: int = 8

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


CONFIG = Config()
COMPUTE = jnp.bfloat16
_List = getattr(nnx, "List", list)  # flax >= 0.12 wants module lists wrapped


def linear(d_in: int, d_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(d_in, d_out, use_bias=False, dtype=COMPUTE, rngs=rngs)


class Attention(nnx.Module):
    def __init__(self, c: Config, rngs: nnx.Rngs):
        self.c = c
        self.q = linear(c.d_model, c.d_model, rngs)
        self.k = linear(c.d_model, c.d_model, rngs)
        self.v = linear(c.d_model, c.d_model, rngs)
        self.out = linear(c.d_model, c.d_model, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, _ = x.shape
        heads = (b, t, self.c.n_heads, self.c.head_dim)
        q = self.q(x).reshape(heads)  # <- q
        k = self.k(x).reshape(heads)  # <- k
        v = self.v(x).reshape(heads)  # <- v
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.c.head_dim)  # <- scores
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))
        scores = jnp.where(causal, scores.astype(jnp.float32), -1e30)
        probs = jax.nn.softmax(scores, axis=-1).astype(COMPUTE)  # <- softmax
        context = jnp.einsum("bhqk,bkhd->bqhd", probs, v)  # <- context
        return self.out(context.reshape(b, t, -1))  # <- out


class Mlp(nnx.Module):
    def __init__(self, c: Config, rngs: nnx.Rngs):
        self.up = linear(c.d_model, c.d_ff, rngs)
        self.down = linear(c.d_ff, c.d_model, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = nnx.gelu(self.up(x))  # <- up
        return self.down(h)  # <- down


class Block(nnx.Module):
    def __init__(self, c: Config, rngs: nnx.Rngs):
        self.norm1 = nnx.LayerNorm(c.d_model, rngs=rngs)
        self.attention = Attention(c, rngs)
        self.norm2 = nnx.LayerNorm(c.d_model, rngs=rngs)
        self.mlp = Mlp(c, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DecoderLM(nnx.Module):
    def __init__(self, c: Config, rngs: nnx.Rngs):
        self.embed = nnx.Embed(c.vocab, c.d_model, rngs=rngs)
        self.blocks = _List([Block(c, rngs) for _ in range(c.n_layers)])
        self.norm = nnx.LayerNorm(c.d_model, rngs=rngs)
        self.head = linear(c.d_model, c.vocab, rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        x = self.embed(tokens).astype(COMPUTE)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # <- head


def loss_fn(model: DecoderLM, tokens: jax.Array, targets: jax.Array) -> jax.Array:
    logits = model(tokens).astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def build(c: Config = CONFIG):
    """(step, (state, tokens, targets)) with abstract state: ``nnx.eval_shape`` allocates nothing."""
    tx = optax.adamw(3e-4, weight_decay=0.1)

    def create():
        model = DecoderLM(c, nnx.Rngs(0))
        return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

    graphdef, state = nnx.split(nnx.eval_shape(create))

    def pure_train_step(state, tokens, targets):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn)(model, tokens, targets)
        optimizer.update(model, grads)  # <- optimizer
        return nnx.state((model, optimizer)), loss

    batch = jax.ShapeDtypeStruct((c.batch, c.seq), jnp.int32)
    return pure_train_step, (state, batch, batch)


def build_jit(c: Config = CONFIG):
    """(step, (model, optimizer, tokens, targets)): the step as Flax's docs write it, ``@nnx.jit``
    over the model and its ``nnx.Optimizer`` (updated in place), both abstract (``nnx.eval_shape``)."""
    tx = optax.adamw(3e-4, weight_decay=0.1)

    def create():
        model = DecoderLM(c, nnx.Rngs(0))
        return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

    model, optimizer = nnx.eval_shape(create)

    @nnx.jit
    def train_step(model, optimizer, tokens, targets):
        loss, grads = nnx.value_and_grad(loss_fn)(model, tokens, targets)
        optimizer.update(model, grads)  # <- jit_optimizer
        return loss

    batch = jax.ShapeDtypeStruct((c.batch, c.seq), jnp.int32)
    return train_step, (model, optimizer, batch, batch)


def matmul_flops(c: Config = CONFIG) -> dict[str, float]:
    """Training FLOPs of each marked matmul line (forward, input and weight gradients: 3 × 2 × MNK),
    summed over the layers. The masked half of the causal scores is computed too, so it counts."""
    t, d, layers = c.tokens, c.d_model, c.n_layers
    attention = 3 * 2 * c.batch * c.n_heads * c.seq * c.seq * c.head_dim * layers
    return {
        "q": 3 * 2 * t * d * d * layers,
        "k": 3 * 2 * t * d * d * layers,
        "v": 3 * 2 * t * d * d * layers,
        "out": 3 * 2 * t * d * d * layers,
        "scores": attention,
        "context": attention,
        "up": 3 * 2 * t * d * c.d_ff * layers,
        "down": 3 * 2 * t * c.d_ff * d * layers,
        "head": 3 * 2 * t * d * c.vocab,
    }


def matmul_params(c: Config = CONFIG) -> int:
    """N of 6·N·T: the parameters that multiply (not the embedding table, which is looked up)."""
    return c.n_layers * (4 * c.d_model**2 + 2 * c.d_model * c.d_ff) + c.d_model * c.vocab
