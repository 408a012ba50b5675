"""Training steps written the way each framework's own documentation writes them, for
tests/test_idioms.py: the decorator on the step (``@nnx.jit``, ``@eqx.filter_jit``, ``jax.jit``
with static arguments and donation), the optimizer as the docs hold it, real arrays where the docs
make real arrays. Each builder takes the devices to shard over (only ``shard_map`` uses more than
one) and returns a :class:`Case`: the step, its arguments and what the step must cost from the
model's shapes alone.

One MLP throughout: ``D → H → D`` with biases, ReLU, a mean-squared loss on a batch of ``B``.
Its training FLOPs are the forward and weight-gradient matmuls of both layers and the input
gradient of the second only (the data needs none): 5 × 2·B·D·H.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import optax

B, D, H = 512, 256, 1024


@dataclass
class Case:
    step: object
    args: tuple
    flops: float  # per device: the matmuls of one training step
    arguments_bytes: int  # every array the step takes, per device
    donatable_bytes: int  # of those, the state the step returns updated and does not donate
    kwargs: dict = field(default_factory=dict)


def matmul_flops(batch: int = B) -> float:
    return 5 * 2 * batch * D * H


def nbytes(tree) -> int:
    """Bytes of every array leaf (real or abstract)."""
    return sum(
        math.prod(x.shape) * np.dtype(x.dtype).itemsize
        for x in jax.tree_util.tree_leaves(tree)
        if hasattr(x, "shape") and hasattr(x, "dtype")
    )


def batch(b: int = B):
    x = jnp.ones((b, D), jnp.float32)
    return x, jnp.ones((b, D), jnp.float32)


# -- Flax NNX: https://flax.readthedocs.io/en/latest/nnx_basics.html, "Training" ----------------


def _nnx_model():
    from flax import nnx

    class Mlp(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.linear1 = nnx.Linear(D, H, rngs=rngs)
            self.linear2 = nnx.Linear(H, D, rngs=rngs)

        def __call__(self, x):
            return self.linear2(nnx.relu(self.linear1(x)))

    model = Mlp(rngs=nnx.Rngs(0))
    return model, nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)


def nnx_jit(devices=None) -> Case:
    from flax import nnx

    model, optimizer = _nnx_model()

    @nnx.jit
    def train_step(model, optimizer, x, y):
        def loss_fn(model):
            return ((model(x) - y) ** 2).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    x, y = batch()
    state = nbytes(nnx.state((model, optimizer)))
    return Case(train_step, (model, optimizer, x, y), matmul_flops(), state + nbytes((x, y)), state)


def nnx_jit_donated_static(devices=None) -> Case:
    """``nnx.jit(donate_argnums=..., static_argnums=...)``: the state is donated (nothing left to
    donate) and the static argument changes the program (the loss's L2 term)."""
    from flax import nnx

    model, optimizer = _nnx_model()

    @functools.partial(nnx.jit, donate_argnums=(0, 1), static_argnums=(4,))
    def train_step(model, optimizer, x, y, l2):
        def loss_fn(model):
            loss = ((model(x) - y) ** 2).mean()
            if l2:
                loss += l2 * sum(jnp.sum(w**2) for w in jax.tree.leaves(nnx.state(model)))
            return loss

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    x, y = batch()
    state = nbytes(nnx.state((model, optimizer)))
    return Case(
        train_step, (model, optimizer, x, y, 1e-4), matmul_flops(), state + nbytes((x, y)), 0
    )


def nnx_abstract(devices=None) -> Case:
    """The same ``@nnx.jit`` step given an abstract model: ``nnx.eval_shape`` allocates nothing."""
    from flax import nnx

    case = nnx_jit()
    model, optimizer = nnx.eval_shape(_nnx_model)
    x, y = (jax.ShapeDtypeStruct(a.shape, a.dtype) for a in batch())
    return Case(case.step, (model, optimizer, x, y), case.flops, case.arguments_bytes,
                case.donatable_bytes)  # fmt: skip


# -- Equinox: https://docs.kidger.site/equinox/examples/train_rnn/ and the optax FAQ ------------


def _eqx_model():
    import equinox as eqx

    return eqx.nn.MLP(D, D, width_size=H, depth=1, activation=jax.nn.relu, key=jax.random.key(0))


def eqx_filter_jit(devices=None, abstract: bool = False) -> Case:
    import equinox as eqx

    optim = optax.adamw(1e-3)

    def loss_fn(model, x, y):
        return ((jax.vmap(model)(x) - y) ** 2).mean()

    @eqx.filter_jit
    def make_step(model, opt_state, x, y):
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, updates)
        return model, opt_state, loss

    model = eqx.filter_eval_shape(_eqx_model) if abstract else _eqx_model()
    is_array = eqx.is_array if not abstract else (lambda a: isinstance(a, jax.ShapeDtypeStruct))
    params = eqx.filter(model, is_array)
    opt_state = eqx.filter_eval_shape(optim.init, params) if abstract else optim.init(params)
    x, y = batch()
    if abstract:
        x, y = (jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, y))
    state = nbytes((params, opt_state))
    return Case(make_step, (model, opt_state, x, y), matmul_flops(), state + nbytes((x, y)), state)


def eqx_abstract(devices=None) -> Case:
    """The same step given ``eqx.filter_eval_shape``'s abstract model and optimizer state."""
    return eqx_filter_jit(devices, abstract=True)


# -- plain jax: jax.jit with a static argument and donation ------------------------------------


def _params():
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "w1": jax.random.normal(k1, (D, H)) * 0.02, "b1": jnp.zeros(H),
        "w2": jax.random.normal(k2, (H, D)) * 0.02, "b2": jnp.zeros(D),
    }  # fmt: skip


def _mlp(params, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def jax_jit(devices=None) -> Case:
    @functools.partial(jax.jit, static_argnames="lr", donate_argnums=0)
    def sgd_step(params, x, y, lr):
        loss, grads = jax.value_and_grad(lambda p: ((_mlp(p, x) - y) ** 2).mean())(params)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    params = _params()
    x, y = batch()
    return Case(sgd_step, (params, x, y), matmul_flops(), nbytes((params, x, y)), 0,
                {"lr": 1e-2})  # fmt: skip


# -- Flax Linen: https://flax-linen.readthedocs.io/en/latest/guides/training_techniques/ -------


def linen_train_state(devices=None) -> Case:
    import flax.linen as nn
    from flax.training import train_state

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(D)(nn.relu(nn.Dense(H)(x)))

    x, y = batch()
    model = Mlp()
    params = model.init(jax.random.key(0), x)["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))

    @jax.jit
    def train_step(state, x, y):
        def loss_fn(params):
            return ((state.apply_fn({"params": params}, x) - y) ** 2).mean()

        grads = jax.grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads)

    held = nbytes(state)
    return Case(train_step, (state, x, y), matmul_flops(), held + nbytes((x, y)), held)


# -- shard_map: data parallelism by hand, https://docs.jax.dev/en/latest/notebooks/shard_map.html


def shard_map_step(devices) -> Case:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.sharding.Mesh(np.array(devices), ("data",))
    n = len(devices)

    def loss_fn(params, x, y):
        return ((_mlp(params, x) - y) ** 2).mean()

    @jax.jit
    @functools.partial(
        _shard_map(), mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=(P(), P())
    )
    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, "data")
        return jax.tree.map(lambda p, g: p - 1e-2 * g, params, grads), jax.lax.pmean(loss, "data")

    params = jax.eval_shape(_params)
    replicated, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    params = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated),
                          params)  # fmt: skip
    x, y = (jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=split) for a in batch(B * n))
    held = nbytes(params)
    return Case(train_step, (params, x, y), matmul_flops(B), held + nbytes(batch()), held)


def _shard_map():
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # older jax
        from jax.experimental.shard_map import shard_map
    return shard_map


CASES = {
    "nnx.jit": nnx_jit,
    "nnx.jit(donate,static)": nnx_jit_donated_static,
    "nnx.jit(eval_shape)": nnx_abstract,
    "eqx.filter_jit": eqx_filter_jit,
    "eqx.filter_jit(filter_eval_shape)": eqx_abstract,
    "jax.jit(static,donate)": jax_jit,
    "linen.TrainState": linen_train_state,
    "shard_map": shard_map_step,
}
