"""Cost rules, one module per opcode family: XLA's (the base model) registered by opcode in
``base.RULES``, the roofline model's overrides of them in ``base.OVERRIDES``; :func:`overrides`
lists where the roofline model differs from XLA."""

from hlo_roofline.cost import (  # noqa: F401  (importing registers the rules)
    collectives,
    control_flow,
    custom_call,
    data_movement,
    elementwise,
    fusion,
    linalg,
    reductions,
)
from hlo_roofline.cost.analysis import PricedOp, price, priced, summarize, tallied, walk
from hlo_roofline.cost.base import (
    BASE_MODEL,
    COST_MODELS,
    MODELS,
    OVERRIDES,
    RULES,
    Cost,
    CostContext,
    CostModel,
    Override,
    overrides,
    shape_sizes,
)
from hlo_roofline.cost.table import rows

__all__ = [
    "BASE_MODEL",
    "COST_MODELS",
    "MODELS",
    "OVERRIDES",
    "RULES",
    "Cost",
    "CostContext",
    "CostModel",
    "Override",
    "PricedOp",
    "overrides",
    "price",
    "priced",
    "rows",
    "shape_sizes",
    "summarize",
    "tallied",
    "walk",
]
