"""What only the TPU compute model reads: the vector unit's element counts (:mod:`.units`), the
tiling loops XLA:TPU's code generation wrote (:mod:`.tiling`), and the extractors that make the
report's TPU columns of them, with the arrays XLA:TPU places in VMEM (:mod:`.extractors`).

A module no TPU compile wrote skips the extractors whose inputs only such a compile writes
(``S(1)`` layouts, ``estimated_cycles`` and ``window_config``): their columns keep their
defaults at no cost per row (:data:`hlo_roofline.cost.extractors.EXTRACTORS`).
"""
