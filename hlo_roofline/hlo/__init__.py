"""HLO text → IR (Module → Computation → Instruction)."""

from hlo_roofline.hlo.files import parse, parse_file
from hlo_roofline.hlo.ir import Computation, Instruction, Layout, Metadata, Module, Shape
from hlo_roofline.hlo.parser import HloParseError, parse_module, parse_shape

__all__ = [
    "Computation",
    "HloParseError",
    "Instruction",
    "Layout",
    "Metadata",
    "Module",
    "Shape",
    "parse",
    "parse_file",
    "parse_module",
    "parse_shape",
]
