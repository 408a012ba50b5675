"""Cost rules, one module per opcode family, registered by opcode in ``base.RULES``."""

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
from hlo_roofline.cost.analysis import PricedOp, price, rows, summarize, walk
from hlo_roofline.cost.base import COST_MODELS, RULES, Cost, CostContext

__all__ = [
    "COST_MODELS",
    "RULES",
    "Cost",
    "CostContext",
    "PricedOp",
    "price",
    "rows",
    "summarize",
    "walk",
]
