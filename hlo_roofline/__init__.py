"""hlo_roofline: per-op roofline analysis of XLA's optimized HLO."""

from hlo_roofline.api import analyze_hlo
from hlo_roofline.hlo import HloParseError
from hlo_roofline.report import Report

__all__ = ["HloParseError", "Report", "analyze_hlo"]
