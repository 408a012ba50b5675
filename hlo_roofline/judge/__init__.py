"""Judging priced ops against a chip: every time, bound, verdict and hint of a report.

``cost/`` says what an op does (FLOPs, bytes, bytes on the wire); this package says how long that
takes on a chip and what limits it. ``verdict.classify`` is the entry: it runs the two time models
(the bound from hardware facts, the expectation with calibrated effects) over the rows, with
``compute`` (which unit runs an op and how long), ``interconnect`` (where devices sit, link
times), ``schedule`` (the step as XLA scheduled it), ``step`` (the step's summary), ``memory``
(does it fit), ``xla_gap`` (XLA:TPU's own estimate beside ours), ``ridge`` and ``hints`` (what
would change a verdict), and ``efficiency`` (a measured op against its roof).
"""
