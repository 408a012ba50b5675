"""Example training steps (filled by the examples issue)."""
