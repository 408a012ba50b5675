"""Regenerate docs/img/tab_*.png: the HLO Roofline tab in headless Chromium on the runs that
tests/test_tab_screenshots.py checks (v5e, H100, the FSDP step sharded over four v5p chips, a
measured CPU step, a step measured on a real H100), each with an op selected.

    PYTHONPATH=.:<a dir linking hlo_roofline_tensorboard to plugin/> python docs/screenshots.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tb_helpers import screenshot_docs

if __name__ == "__main__":
    for path in screenshot_docs():
        print(path)
