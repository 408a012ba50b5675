"""The sharding explorer: compile every layout of a training step for a target and rank them.

"Which layout should I train on?" is the question of the training chapter of *How to Scale Your
Model*. Its closed forms (DP/FSDP are compute-bound while the per-chip batch B/X exceeds C/W_ici;
tensor parallelism turns communication-bound past Y > n_axes·F/(C/W_ici); ...) hold for an
idealised MLP; its GPU chapter restates them for NVLink nodes and the network between them (W_GPU
in a node, W_node across). :func:`explore` asks the compiler instead: every factorization of the target's
devices over the named mesh axes (that the topology accepts), crossed with the user's knobs, is
compiled compile-only (in worker processes, through the on-disk HLO cache) and judged; each row
then says where it stands and what the book's rule predicts for it.

``make_step(mesh, **knobs)`` returns ``(fn, args, jit_kwargs)`` (the convention of
:mod:`hlo_roofline.examples`, with the mesh handed in), or ``(fn, args, jit_kwargs, work)`` with
the step's tokens and model FLOPs, which the ranking counts throughput in. Workers import it by
module path, by file path, or receive it pickled by value with cloudpickle (closures,
``__main__``: a script needs no ``__main__`` guard, the workers never import it).

Only complete evidence ranks and gates: each row's status is an answer about its layout (ok, does
not fit, refused) or a failure (an error with its traceback, a worker that died twice, a time-out),
and an exploration with failures says so (:attr:`Exploration.complete`).

The package, one module per job (each imports only those before it):

- ``status``: a row's status codes and their words;
- ``layouts``: the candidates (factorizations, constraints, knobs) and the work each does;
- ``book``: the book's constants, per-pass quantities and rules as text;
- ``step``: ``make_step`` checked before any compile, and found again in a worker;
- ``workers``: one candidate in a worker, the default pool, executors, compiler flags;
- ``ranking``: what a table ranks by, and the ranking;
- ``results``: :class:`Exploration`, its rows and its files;
- ``run``: :func:`explore`;
- ``maxtext``: :func:`explore_maxtext`, MaxText's own train step per candidate (``explore
  --maxtext CONFIG.yml``; MaxText imported from the user's environment only then).

Its public names are importable from ``hlo_roofline.explorer`` itself.
"""

from __future__ import annotations

from hlo_roofline.explorer.book import (
    BATCH_AXES,
    MODEL_AXES,
    PASS_KINDS,
    PASSES,
    BookConstants,
    book_constants,
    pass_times,
    why,
)
from hlo_roofline.explorer.layouts import (
    WORK_KEYS,
    Candidate,
    Constraints,
    KnobExpression,
    candidates,
    factorizations,
)
from hlo_roofline.explorer.maxtext import (
    MaxTextMissing,
    MaxTextStep,
    explore_maxtext,
)
from hlo_roofline.explorer.ranking import (
    FLOPS_COLUMN,
    HIGHER_IS_BETTER,
    ROW_COLUMNS,
    SPAN_PREFIXES,
    STEP_COLUMN,
    THROUGHPUT_COLUMNS,
    knob_columns,
    rank,
    rank_by,
)
from hlo_roofline.explorer.results import (
    FORMAT,
    VERSION,
    Exploration,
    ExplorationError,
    failed_rows,
    find_exploration,
    read_table,
    row,
    step_seconds,
)
from hlo_roofline.explorer.run import (
    default_name,
    explore,
)
from hlo_roofline.explorer.status import (
    FAILURES,
    RESULTS,
    STATUS_CRASHED,
    STATUS_ERROR,
    STATUS_NO_FIT,
    STATUS_NOT_RUN,
    STATUS_OK,
    STATUS_REFUSED,
    STATUS_TEXT,
    STATUS_TIMED_OUT,
    Refused,
    status_of,
    status_text,
)
from hlo_roofline.explorer.step import (
    check_knobs,
    parameter_kinds,
)
from hlo_roofline.explorer.workers import (
    FLAG_VARIABLES,
    WORKER_VARIABLE,
    Progress,
    compiler_flags,
    flags_in_effect,
    read_flags_file,
)

__all__ = [
    "BATCH_AXES",
    "FAILURES",
    "FLAG_VARIABLES",
    "FLOPS_COLUMN",
    "FORMAT",
    "HIGHER_IS_BETTER",
    "MODEL_AXES",
    "PASSES",
    "PASS_KINDS",
    "RESULTS",
    "ROW_COLUMNS",
    "SPAN_PREFIXES",
    "STATUS_CRASHED",
    "STATUS_ERROR",
    "STATUS_NOT_RUN",
    "STATUS_NO_FIT",
    "STATUS_OK",
    "STATUS_REFUSED",
    "STATUS_TEXT",
    "STATUS_TIMED_OUT",
    "STEP_COLUMN",
    "THROUGHPUT_COLUMNS",
    "VERSION",
    "WORKER_VARIABLE",
    "WORK_KEYS",
    "BookConstants",
    "Candidate",
    "Constraints",
    "Exploration",
    "ExplorationError",
    "KnobExpression",
    "MaxTextMissing",
    "MaxTextStep",
    "Progress",
    "Refused",
    "book_constants",
    "candidates",
    "check_knobs",
    "compiler_flags",
    "default_name",
    "explore",
    "explore_maxtext",
    "factorizations",
    "failed_rows",
    "find_exploration",
    "flags_in_effect",
    "knob_columns",
    "parameter_kinds",
    "pass_times",
    "rank",
    "rank_by",
    "read_flags_file",
    "read_table",
    "row",
    "status_of",
    "status_text",
    "step_seconds",
    "why",
]
