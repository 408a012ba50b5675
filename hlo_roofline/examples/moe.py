"""A mixture-of-experts MLP layer with expert parallelism: top-2 routing and two all-to-alls.

Each device holds a slice of the tokens and ``experts_per_device`` experts. The layer runs under
``jax.shard_map`` over the mesh axis ``"expert"``: a router picks two experts per token, a one-hot
dispatch (GShard-style, with a fixed capacity per expert) packs the tokens per expert, an
``all_to_all`` sends each expert's tokens to the device that holds it, the experts' MLPs run
there, and a second ``all_to_all`` brings the outputs home. The step is forward + backward + SGD.

The report shows what this costs: the dispatch/combine einsums are real FLOPs on the MXU, and the
all-to-alls are priced on the target's links (ICI on TPU, NVLink on a GPU node)::

    from hlo_roofline import analyze
    from hlo_roofline.examples.moe import moe_step
    report = analyze(*moe_step("h100:1x1x8")[:2], target="h100:1x1x8")
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from hlo_roofline import targets
from hlo_roofline.examples._common import abstract

TARGET = "h100:1x1x8"
TARGETS = ("v5e:2x2", "h100:1x1x8")
AXIS = "expert"


@dataclass(frozen=True)
class MoeConfig:
    """Per-device token count and layer widths; experts = devices × ``experts_per_device``."""

    tokens_per_device: int = 2048
    d_model: int = 1024
    d_ff: int = 4096
    experts_per_device: int = 2
    top_k: int = 2
    capacity_factor: float = 1.25

    def capacity(self, n_experts: int) -> int:
        """Slots per expert per source device: the fair share × the capacity factor."""
        return int(self.capacity_factor * self.top_k * self.tokens_per_device / n_experts)


CONFIG = MoeConfig()


def route(x: jax.Array, w_router: jax.Array, config: MoeConfig, n_experts: int):
    """Top-k routing with a capacity: (dispatch one-hot [T, E, C], combine weights [T, E, C])."""
    capacity = config.capacity(n_experts)
    probs = jax.nn.softmax((x @ w_router).astype(jnp.float32), axis=-1)
    gates, experts = lax.top_k(probs, config.top_k)  # [T, k]
    gates = gates / gates.sum(-1, keepdims=True)
    choice = jax.nn.one_hot(experts, n_experts, dtype=jnp.int32)  # [T, k, E]
    # Slot of each (token, choice) in its expert's buffer: the count of earlier claims on it.
    order = choice.transpose(1, 0, 2).reshape(-1, n_experts)  # first choices first
    slot = (jnp.cumsum(order, axis=0) - 1).reshape(config.top_k, -1, n_experts).transpose(1, 0, 2)
    kept = choice * (slot < capacity)
    slot_onehot = jax.nn.one_hot(jnp.sum(slot * kept, -1), capacity, dtype=x.dtype)  # [T, k, C]
    dispatch = jnp.einsum("tke,tkc->tec", kept.astype(x.dtype), slot_onehot)
    combine = jnp.einsum(
        "tk,tke,tkc->tec", gates.astype(x.dtype), kept.astype(x.dtype), slot_onehot
    )
    return dispatch, combine


def moe_layer(x: jax.Array, params: dict, config: MoeConfig, n_devices: int) -> jax.Array:
    """The layer on one device's tokens (inside shard_map); experts live on their own devices."""
    n_experts = n_devices * config.experts_per_device
    with jax.named_scope("router"):
        dispatch, combine = route(x, params["w_router"], config, n_experts)
    with jax.named_scope("dispatch"):
        packed = jnp.einsum("tec,td->ecd", dispatch, x)  # [E, C, D], grouped by owner device
        packed = packed.reshape(n_devices, config.experts_per_device, -1, x.shape[-1])
        received = lax.all_to_all(packed, AXIS, split_axis=0, concat_axis=0, tiled=True)
    with jax.named_scope("experts"):  # [source device, local expert, C, D]
        h = jax.nn.gelu(jnp.einsum("secd,edf->secf", received, params["w_in"]))
        out = jnp.einsum("secf,efd->secd", h, params["w_out"])
    with jax.named_scope("combine"):
        returned = lax.all_to_all(out, AXIS, split_axis=0, concat_axis=0, tiled=True)
        returned = returned.reshape(n_experts, -1, x.shape[-1])
        return jnp.einsum("tec,ecd->td", combine, returned)


def train_step(params: dict, x: jax.Array, mesh, config: MoeConfig = CONFIG):
    """Forward, backward and SGD of the layer with a squared-activation loss (no data needed)."""
    n_devices = mesh.shape[AXIS]
    specs = {"w_router": P(), "w_in": P(AXIS), "w_out": P(AXIS)}

    @jax.shard_map(mesh=mesh, in_specs=(specs, P(AXIS)), out_specs=(specs, P()))
    def sharded(params, x):
        def loss(params):
            y = moe_layer(x, params, config, n_devices)
            return jnp.mean(jnp.square(y.astype(jnp.float32)))

        value, grads = jax.value_and_grad(loss)(params)
        grads["w_router"] = lax.pmean(grads["w_router"], AXIS)  # replicated: average its gradient
        new = jax.tree.map(lambda p, g: (p - 1e-3 * g).astype(p.dtype), params, grads)
        return new, lax.pmean(value, AXIS)

    return sharded(params, x)


def moe_step(target: str = TARGET, config: MoeConfig = CONFIG):
    """(step, (params, tokens)) with experts and tokens sharded over every device of ``target``.

    Defaults: 2048 tokens of width 1024 per device, 2 experts (d_ff 4096) per device, top-2
    routing at capacity factor 1.25: 16 experts of 320 slots per source device on an 8-GPU node.
    """
    return moe_step_on(targets.make_mesh(target, axis_names=(AXIS,)), config)


def moe_step_on(mesh: Mesh, config: MoeConfig = CONFIG):
    """The step on any mesh: its devices, in order, become the expert axis."""
    mesh = Mesh(mesh.devices.reshape(-1), (AXIS,))
    n = mesh.shape[AXIS]
    n_experts = n * config.experts_per_device
    d, f = config.d_model, config.d_ff

    def sharded(shape, spec):
        return abstract(shape, jnp.bfloat16, NamedSharding(mesh, spec))

    params = {
        "w_router": sharded((d, n_experts), P()),
        "w_in": sharded((n_experts, d, f), P(AXIS)),
        "w_out": sharded((n_experts, f, d), P(AXIS)),
    }
    tokens = sharded((n * config.tokens_per_device, d), P(AXIS))

    def step(params, tokens):
        return train_step(params, tokens, mesh, config)

    return step, (params, tokens)
