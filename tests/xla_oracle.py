"""XLA's own HloCostAnalysis, run live through jaxlib on HLO text: the oracle for parity tests."""

from __future__ import annotations

import functools

KEYS = ("flops", "transcendentals", "bytes accessed")


@functools.cache
def _client():
    import jax

    return jax.devices("cpu")[0].client


def xla_cost(text: str) -> dict[str, float]:
    """Module totals of XLA's plain HloCostAnalysis (the CPU client's shape sizes)."""
    from jaxlib import _hlo, _jax

    module = _hlo.hlo_module_from_text(text)
    result = _jax.hlo_module_cost_analysis(_client(), module)
    return {k: float(result.get(k, 0.0)) for k in KEYS}
