"""Pause Python's cyclic garbage collector while building large object graphs.

A parsed module is a graph of cross-referencing objects; with the collector on, each generation-2
pass re-walks everything built so far, which made parsing 100k instructions quadratic (5.7 s vs
2 s measured). Nothing built here is garbage, so pausing loses nothing.

Re-enabling alone would still cost one long pass: every object made while paused is in the youngest
generation, so the first allocation afterwards walks them all (0.15 s after parsing a module of 100k
instructions). After a build that large, ``gc.freeze()`` + ``gc.unfreeze()`` instead moves them,
without walking them, to the oldest generation. Python starts a full collection by counting the
objects its own passes moved there, which these are not; so this module counts them and runs the
full collection itself once they pass a quarter of what survived the previous one (Python's rule),
and at least a million. Without that, a process analyzing large module after large module would
never free the old ones (they hold reference cycles). Smaller builds are left to the collector.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Objects made while paused past which they are handed over: a module of 18k instructions makes
# ~70k, and letting the collector find them re-enabled cost a full pass over the process' heap
# (jax and pandas loaded: ~30 ms, a tenth of that module's analysis).
_LARGE_BUILD = 10_000
_MIN_OBJECTS = 1_000_000  # handed over before a full collection, however small the heap
_handed_over = 0  # objects moved to the oldest generation since the last full collection here
_survivors = 0  # objects tracked after that collection


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            _hand_over_young_objects()
            gc.enable()


def _hand_over_young_objects() -> None:
    global _handed_over, _survivors
    young = gc.get_count()[0]  # objects made (less those freed) since the collector's last pass
    if young < _LARGE_BUILD:
        return
    _handed_over += young
    gc.freeze()
    gc.unfreeze()
    if _handed_over > max(_survivors // 4, _MIN_OBJECTS):
        gc.collect()
        _handed_over, _survivors = 0, len(gc.get_objects())
