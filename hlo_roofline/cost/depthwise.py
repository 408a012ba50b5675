"""Depthwise convolutions on the TPU's vector unit: the multiply-adds their windows take.

A convolution with one input feature per group (``feature_group_count`` equal to the input's
features: a MobileNet / EfficientNet depthwise conv, a conformer's) has no contraction for the MXU
to run: each output element is a weighted sum over its window's taps of one channel, done on the
vector unit, one multiply-add per tap. XLA:TPU fuses it behind the pointwise (1×1) conv that feeds
it (MBConv) and charges the fusion by those taps, not by its result's elements: the report's
``depthwise_taps`` column counts them, and the expected model runs them at the chip's
``calibrated.depthwise_taps`` rate (:func:`hlo_roofline.judge.compute.depthwise_convs`).
"""

from __future__ import annotations

from collections.abc import Iterable

from hlo_roofline.cost.base import RULE_ERRORS
from hlo_roofline.cost.linalg import FMA_FLOPS, conv_flops
from hlo_roofline.hlo import attrs
from hlo_roofline.hlo.ir import Instruction


def is_depthwise(conv: Instruction) -> bool:
    """A convolution whose groups each hold one input feature (and more than one group)."""
    groups = attrs.int_attr(conv, "feature_group_count", 1)
    if groups <= 1 or len(conv.operands) < 2:
        return False
    dims = attrs.conv_dims(conv)
    return conv.operands[1].shape.dims[dims.kernel_input_feature] == 1


def depthwise_taps(instructions: Iterable[Instruction]) -> float:
    """Multiply-adds of the depthwise convolutions among ``instructions`` (an op, or a fusion's
    body): each output element once per valid tap of its window (XLA's own count, ÷ 2)."""
    taps = 0.0
    for conv in instructions:
        if conv.opcode != "convolution":
            continue
        try:
            if is_depthwise(conv):
                lhs, rhs = conv.operands[0].shape, conv.operands[1].shape
                taps += conv_flops(conv, lhs, rhs, conv.shape) / FMA_FLOPS
        except RULE_ERRORS:  # an unreadable window or dim_labels: no taps counted
            continue
    return taps
