"""``make demo``: analyze a built-in training step, compiled for this CPU and compile-only for TPU v5e.

No accelerator and no network are needed: the TPU program comes from libtpu's compile-only path.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from hlo_roofline import analyze_hlo, targets


def mlp_train_step(params, batch):
    """One SGD step of a 3-layer bf16 MLP with a squared-error loss."""

    def loss(params):
        h = batch["x"]
        for w in params[:-1]:
            h = jax.nn.gelu(h @ w)
        return jnp.mean((h @ params[-1] - batch["y"]) ** 2)

    grads = jax.grad(loss)(params)
    return [w - 1e-3 * g for w, g in zip(params, grads, strict=True)]


def example_inputs(sharding=None):
    def spec(shape):
        return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=sharding)

    params = [spec((1024, 4096)), spec((4096, 4096)), spec((4096, 1024))]
    return params, {"x": spec((2048, 1024)), "y": spec((2048, 1024))}


def compiled_text(target: str | None) -> str:
    if target is None:
        return jax.jit(mlp_train_step).lower(*example_inputs()).compile().as_text()
    device = targets.devices(target)[0]
    sharding = NamedSharding(jax.sharding.Mesh([device], ("d",)), PartitionSpec())
    return jax.jit(mlp_train_step).lower(*example_inputs(sharding)).compile().as_text()


def main() -> None:
    columns = ["name", "opcode", "count", "flops", "bytes_accessed", "dtype", "op_name"]
    for label, target in (("CPU (local)", None), ("TPU v5e (compile-only)", "v5e:2x2")):
        report = analyze_hlo(compiled_text(target))
        s = report.summary
        print(f"\n== MLP train step on {label}: {len(report.ops)} ops ==")
        print(
            f"FLOPs {s['flops']:.4g}  bytes {s['bytes_accessed']:.4g}  coverage {s['coverage']:.0%}"
        )
        top = report.ops.nlargest(8, "flops")[columns]
        print(top.to_string(index=False, max_colwidth=48))


if __name__ == "__main__":
    main()
