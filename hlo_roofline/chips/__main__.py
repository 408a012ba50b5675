"""``python -m hlo_roofline.chips``: print docs/chips.md's chip table."""

from hlo_roofline.chips.table import markdown_table

print(markdown_table(), end="")
