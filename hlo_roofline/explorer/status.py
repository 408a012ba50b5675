"""A candidate's status: a code a script compares (a table cell), worded for faces by
:func:`status_text`. Results are answers about the layout (ok, does not fit, refused); failures
mean the exploration lacks an answer for it."""

from __future__ import annotations

from hlo_roofline import schema

# A candidate's status: a code (a table cell a script compares), worded by status_text for faces.
# Results are answers about the layout; failures mean the exploration lacks an answer for it.
STATUS_OK, STATUS_NO_FIT, STATUS_REFUSED = schema.EXPLORE_ANSWERS


STATUS_ERROR, STATUS_CRASHED, STATUS_TIMED_OUT, STATUS_NOT_RUN = schema.EXPLORE_FAILURES


RESULTS = frozenset(schema.EXPLORE_ANSWERS)


FAILURES = frozenset(schema.EXPLORE_FAILURES)


STATUS_TEXT = {
    STATUS_OK: "ok", STATUS_NO_FIT: "does not fit", STATUS_REFUSED: "refused",
    STATUS_ERROR: "error", STATUS_CRASHED: "crashed", STATUS_TIMED_OUT: "timed out",
    STATUS_NOT_RUN: "not run",
}  # fmt: skip


# Tables written before the codes (the words), or before errors were told apart (compile_error).
_OLD_STATUSES = {
    **{text: code for code, text in STATUS_TEXT.items()},
    **schema.EXPLORE_FORMER_STATUSES,
}


def status_text(code: str) -> str:
    """A status in words (``does_not_fit`` → ``does not fit``); an unknown one as it is."""
    return STATUS_TEXT.get(code, code) if isinstance(code, str) else ""


def status_of(value) -> str:
    """The status code of a table cell: a code as it is, a status in words (a table written
    before the codes) as its code."""
    return _OLD_STATUSES.get(value, value) if isinstance(value, str) else value


class Refused(Exception):
    """Raised by ``make_step`` for a layout the model cannot take (heads that do not split over
    the tensor axis, say): the row is ``refused``, a result like "does not fit", not a failure."""
