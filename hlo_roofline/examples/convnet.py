"""A convolutional image classifier training step: a small ResNet (one basic block per stage).

NHWC, bf16 weights and activations, batch norm with batch statistics in f32, SGD with momentum.
Convolutions are where the FLOPs are; batch norm, ReLU and the residual adds are memory-bound, and
how much of the step they take depends on how well XLA fuses them into the convolutions (on TPU)
or around the cuDNN calls (on a GPU)::

    from hlo_roofline import analyze
    from hlo_roofline.examples.convnet import convnet_step
    step, args, jit_kwargs = convnet_step()
    report = analyze(step, *args, target="v5e:2x2", jit_kwargs=jit_kwargs)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax

from hlo_roofline.examples._common import abstract, cross_entropy

TARGET = "v5e:2x2"
TARGETS = ("v5e:2x2", "h100")


@dataclass(frozen=True)
class ConvnetConfig:
    """ResNet-18's stem and stage widths, one basic block per stage (a "ResNet-10").

    The default input is downsampled ImageNet (64×64, 1000 classes; Chrabaszcz et al. 2017): the
    full 224×224 (``ConvnetConfig(image=224)``) compiles the same program with larger tiles, but
    its TPU compile takes minutes on a small CPU machine.
    """

    batch: int = 64
    image: int = 64
    classes: int = 1000
    widths: tuple[int, ...] = (64, 128, 256, 512)


CONFIG = ConvnetConfig()


def conv(x: jax.Array, w: jax.Array, stride: int = 1) -> jax.Array:
    return lax.conv_general_dilated(
        x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def batch_norm(x: jax.Array, p: dict, eps: float = 1e-5) -> jax.Array:
    """Training-mode batch norm: statistics over N, H, W of this batch, computed in f32."""
    x32 = x.astype(jnp.float32)
    mean = x32.mean((0, 1, 2))
    var = jnp.square(x32 - mean).mean((0, 1, 2))
    y = (x32 - mean) * lax.rsqrt(var + eps) * p["scale"] + p["bias"]
    return y.astype(x.dtype)


def basic_block(x: jax.Array, p: dict, stride: int) -> jax.Array:
    """Two 3×3 convolutions with a residual; a 1×1 projection when the shape changes."""
    with jax.named_scope("conv1"):
        h = jax.nn.relu(batch_norm(conv(x, p["conv1"], stride), p["bn1"]))
    with jax.named_scope("conv2"):
        h = batch_norm(conv(h, p["conv2"]), p["bn2"])
    if "proj" in p:
        with jax.named_scope("proj"):
            x = batch_norm(conv(x, p["proj"], stride), p["bn_proj"])
    return jax.nn.relu(x + h)


def forward(params: dict, images: jax.Array, config: ConvnetConfig) -> jax.Array:
    with jax.named_scope("stem"):  # 7×7 stride-2 convolution, 3×3 stride-2 max pool
        x = jax.nn.relu(batch_norm(conv(images, params["stem"], 2), params["bn_stem"]))
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    for i, block in enumerate(params["blocks"]):
        with jax.named_scope(f"stage{i + 1}"):
            x = basic_block(x, block, stride=1 if i == 0 else 2)
    with jax.named_scope("head"):
        pooled = x.astype(jnp.float32).mean((1, 2)).astype(x.dtype)
        return pooled @ params["head"]


def train_step(
    state: dict, images: jax.Array, labels: jax.Array, config: ConvnetConfig = CONFIG
) -> tuple[dict, jax.Array]:
    """Forward, backward, SGD with momentum 0.9 (momentum in f32)."""

    def loss(params):
        return cross_entropy(forward(params, images, config), labels)

    value, grads = jax.value_and_grad(loss)(state["params"])
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g.astype(jnp.float32), state["momentum"], grads)
    params = jax.tree.map(
        lambda p, m: (p.astype(jnp.float32) - 0.1 * m).astype(p.dtype),
        state["params"],
        momentum,
    )
    return {"params": params, "momentum": momentum}, value


def param_shapes(config: ConvnetConfig) -> dict:
    def bn(c):
        return {"scale": (c,), "bias": (c,)}

    blocks, c_in = [], config.widths[0]
    for i, c in enumerate(config.widths):
        block = {"conv1": (3, 3, c_in, c), "bn1": bn(c), "conv2": (3, 3, c, c), "bn2": bn(c)}
        if i > 0:
            block |= {"proj": (1, 1, c_in, c), "bn_proj": bn(c)}
        blocks.append(block)
        c_in = c
    return {
        "stem": (7, 7, 3, config.widths[0]),
        "bn_stem": bn(config.widths[0]),
        "blocks": blocks,
        "head": (config.widths[-1], config.classes),
    }


def train_flops(config: ConvnetConfig, count_padding: bool = False) -> float:
    """Convolution and head FLOPs of a training step (2 per multiply-add).

    Forward, then backward: a weight gradient for every layer and an input gradient for every
    layer but the stem (the images need none). Like XLA's cost analysis, window taps that fall on
    the zero padding are not counted unless ``count_padding``: on the 2×2 maps of the last stage
    a 3×3 window has only 4 valid taps per output.
    """

    def taps(size: int, kernel: int, stride: int) -> int:
        """Σ over output positions of the window taps inside the input, along one axis."""
        out = -(-size // stride)
        if count_padding:
            return out * kernel
        low = max((out - 1) * stride + kernel - size, 0) // 2
        return sum(sum(0 <= o * stride - low + j < size for j in range(kernel)) for o in range(out))

    def conv_flops(size: int, shape: tuple[int, ...], stride: int) -> int:
        kernel, _, c_in, c_out = shape
        return 2 * config.batch * taps(size, kernel, stride) ** 2 * c_in * c_out

    shapes = param_shapes(config)
    stem = conv_flops(config.image, shapes["stem"], 2)
    size = -(-config.image // 4)  # after the stride-2 stem and the stride-2 max pool
    layers = 2 * config.batch * math.prod(shapes["head"])
    for i, block in enumerate(shapes["blocks"]):
        stride = 1 if i == 0 else 2
        layers += conv_flops(size, block["conv1"], stride)
        if "proj" in block:
            layers += conv_flops(size, block["proj"], stride)
        size = -(-size // stride)
        layers += conv_flops(size, block["conv2"], 1)
    return 2 * stem + 3 * layers


def convnet_step(config: ConvnetConfig = CONFIG):
    """(step, (state, images, labels), jit kwargs): by default 64 images of 64×64×3, 1000 classes."""

    def leaf(dtype):
        return lambda shape: abstract(shape, dtype)

    def tree(dtype):
        return jax.tree.map(
            leaf(dtype), param_shapes(config), is_leaf=lambda x: isinstance(x, tuple)
        )

    state = {"params": tree(jnp.bfloat16), "momentum": tree(jnp.float32)}
    images = abstract((config.batch, config.image, config.image, 3), jnp.bfloat16)
    labels = abstract((config.batch,), jnp.int32)
    step = functools.partial(train_step, config=config)
    functools.update_wrapper(step, train_step)
    return step, (state, images, labels), {"donate_argnums": (0,)}
