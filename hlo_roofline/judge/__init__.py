"""Judging priced ops against a chip: every time, bound, verdict and hint of a report.

``cost/`` says what an op does (FLOPs, bytes, bytes on the wire); this package says how long that
takes on a chip and what limits it. ``verdict.classify`` is the entry: it asks the chip's
``time_model`` (one per backend: ``TpuTimeModel``, ``GpuTimeModel``, the host's ``TimeModel``; its
units' rates, memories, links, schedule queues and calibrated effects) for the two models over the
rows (``BoundModel``: hardware facts; ``ExpectedModel``: the bound and every calibrated effect, as
XLA schedules the step), which use ``compute`` (which unit runs an op and how long),
``interconnect`` (where devices sit, link times), ``schedule`` (the step as XLA scheduled it),
``step`` (the step's summary), ``memory`` (does it fit), ``xla_gap`` (XLA:TPU's own estimate
beside ours), ``ridge`` and ``hints`` (what would change a verdict), and ``efficiency``
(a measured op against its roof).
"""
