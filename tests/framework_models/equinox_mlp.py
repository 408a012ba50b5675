"""An MLP regressor in Equinox, trained with optax.adam: the Equinox idiom of a module holding its
layers, ``jax.vmap`` over the batch and ``eqx.filter_value_and_grad``."""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import optax


@dataclass(frozen=True)
class Config:
    widths: tuple[int, ...] = (1024, 4096, 4096, 1024)
    batch: int = 4096


CONFIG = Config()


class Mlp(eqx.Module):
    hidden1: eqx.nn.Linear
    hidden2: eqx.nn.Linear
    readout: eqx.nn.Linear

    def __init__(self, c: Config, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        w = c.widths
        self.hidden1 = eqx.nn.Linear(w[0], w[1], key=k1)
        self.hidden2 = eqx.nn.Linear(w[1], w[2], key=k2)
        self.readout = eqx.nn.Linear(w[2], w[3], key=k3)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jax.nn.relu(self.hidden1(x))  # <- hidden1
        x = jax.nn.relu(self.hidden2(x))  # <- hidden2
        return self.readout(x)  # <- readout


def _is_leaf_array(x) -> bool:
    return isinstance(x, jax.Array | jax.ShapeDtypeStruct)


def build(c: Config = CONFIG):
    """(step, (params, opt_state, x, y)), all abstract (``eqx.filter_eval_shape``)."""
    model = eqx.filter_eval_shape(Mlp, c, jax.random.key(0))
    params, static = eqx.partition(model, _is_leaf_array)
    tx = optax.adam(1e-3)
    opt_state = jax.eval_shape(tx.init, params)

    def loss_fn(model: Mlp, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)  # <- loss

    def train_step(params, opt_state, x, y):
        model = eqx.combine(params, static)
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)  # <- optimizer
        return optax.apply_updates(params, updates), opt_state, loss

    x = jax.ShapeDtypeStruct((c.batch, c.widths[0]), jnp.float32)
    y = jax.ShapeDtypeStruct((c.batch, c.widths[-1]), jnp.float32)
    return train_step, (params, opt_state, x, y)


def matmul_flops(c: Config = CONFIG) -> dict[str, float]:
    """Training FLOPs of each layer's matmuls: forward and weight gradient (2 × 2·B·in·out each),
    and the input gradient except the first layer's (its input, the data, needs none)."""
    names = ("hidden1", "hidden2", "readout")
    w = c.widths
    return {
        name: (2 if i == 0 else 3) * 2 * c.batch * w[i] * w[i + 1] for i, name in enumerate(names)
    }


def matmul_params(c: Config = CONFIG) -> int:
    return sum(a * b for a, b in zip(c.widths, c.widths[1:], strict=False))
