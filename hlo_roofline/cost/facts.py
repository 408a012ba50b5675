"""The typed value of the report's ``shape`` column: the judges read an op's result shape here
(:func:`shape_of`), never by parsing the column. Each is kept by its text as the rows are made
(:func:`remember_shape`: the very ``Shape`` the text was written from); a report read from a file
has its texts read back here, once each, by the parser that owns the syntax. (The
``replica_group`` column's typed value is :func:`hlo_roofline.cost.collectives.device_group`.)
"""

from __future__ import annotations

from hlo_roofline.hlo.ir import Shape
from hlo_roofline.hlo.parser import HloParseError, parse_shape

_KEPT = 8192  # distinct shapes kept (GPT-2's step has about 1,100); past that it starts again
_SHAPES: dict[str, Shape | None] = {}


def remember_shape(text: str, shape: Shape) -> None:
    """``shape`` is what the ``shape`` column's ``text`` says (``text == str(shape)``)."""
    if len(_SHAPES) >= _KEPT:
        _SHAPES.clear()
    _SHAPES[text] = shape


def shape_of(text: str) -> Shape | None:
    """The result shape a row's ``shape`` text says; None for text that is no shape."""
    try:
        return _SHAPES[text]
    except KeyError:
        pass
    try:
        shape = parse_shape(text)
    except (HloParseError, ValueError, TypeError):
        shape = None
    remember_shape(text, shape)  # type: ignore[arg-type]
    return shape
