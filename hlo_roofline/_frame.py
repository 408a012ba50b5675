"""DataFrames built from their columns at once: a report's ops and its judged columns.

pandas checks and copies each column it is given one at a time (``assign``, ``insert``, a boolean
row filter of the whole frame); for a small module those checks cost more than its rows. The
judged frame and the parsed one are therefore built here from arrays that already are what pandas
would store, in one step, with pandas' public constructor as the fallback.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Collection

import numpy as np
import pandas as pd


def as_text(values):
    """An array of Python strings as the column pandas makes of them (its string type, or objects
    before pandas 3), converted in place of pandas' inference, which copies the array; anything
    else as it is."""
    if not isinstance(values, np.ndarray) or values.dtype != object or not len(values):
        return values
    dtype = _text_dtype()
    if isinstance(dtype, np.dtype):  # object: pandas before 3 keeps text as it is
        return values
    try:  # what pd.array(values, dtype=dtype, copy=False) does, without its dispatch
        return _text_array_type()._from_sequence(values, dtype=dtype, copy=False)
    except (TypeError, ValueError):  # not all strings: pandas infers what it is
        return values


@functools.cache
def _text_array_type():
    """The array type of pandas' string dtype (pandas 3 and later)."""
    return _text_dtype().construct_array_type()


def frame_of_arrays(
    arrays: dict, index: pd.Index | None = None, consolidate: bool = False
) -> pd.DataFrame | None:
    """The DataFrame ``pd.DataFrame(arrays, copy=False)`` makes, where every column is already
    what pandas would store (a number or flag array, or text as pandas' string array): built from
    its columns as they are, skipping the checks that cost a small module's analysis more than
    its rows (a third of a millisecond for 49 columns). Its rows are ``index``, by default
    0, 1, ...; ``consolidate`` stores the columns of one dtype together (a copy of them, made
    faster than a block per column). None where a column is anything else (objects, a list) or
    this pandas lacks the means: the caller asks pandas the usual way."""
    values = list(arrays.values())
    if not values:
        return None
    rows = len(values[0])
    if index is not None and len(index) != rows:
        return None
    for array in values:
        if (
            (isinstance(array, np.ndarray) and (array.dtype == object or array.ndim != 1))
            or not isinstance(array, np.ndarray | pd.api.extensions.ExtensionArray)
            or len(array) != rows
        ):
            return None
    try:
        from pandas.core.internals.construction import arrays_to_mgr

        manager = arrays_to_mgr(
            values, _column_index(tuple(arrays)), pd.RangeIndex(rows) if index is None else index,
            verify_integrity=False, consolidate=consolidate,
        )  # fmt: skip
        return pd.DataFrame._from_mgr(manager, axes=manager.axes)
    except (ImportError, AttributeError, TypeError):  # another pandas: the public way
        return None


@functools.lru_cache(maxsize=16)
def _column_index(names: tuple[str, ...]) -> pd.Index:
    """The columns' index, made once for the schema's names (an index never changes: frames
    share it as they share one when copied)."""
    return pd.Index(list(names))


@functools.cache
def _text_dtype():
    """The dtype pandas infers for a column of strings (object before pandas 3)."""
    return pd.Series(np.array(["x"], dtype=object)).dtype


def column_arrays(
    frame: pd.DataFrame, names: Collection[str] | None = None
) -> dict[str, object] | None:
    """Each column of ``frame`` (those in ``names``, by default all) as its own copy of the array
    pandas stores (a number or flag array, or pandas' string array), by name: a new frame built
    from them shares no memory with ``frame``. None where its names repeat (a dict holds one of
    each)."""
    if not frame.columns.is_unique:
        return None
    wanted = frame.columns if names is None else set(names)
    try:
        manager = frame._mgr
        return {
            name: manager.iget_values(i).copy()
            for i, name in enumerate(frame.columns)
            if name in wanted
        }
    except AttributeError:  # another pandas: the public way
        return {name: frame[name].array.copy() for name in frame.columns if name in wanted}


def stored_arrays(frame: pd.DataFrame) -> dict[str, object] | None:
    """Each column of ``frame`` as the array pandas stores, by name, shared (no copy): a frame
    built of them is a view of ``frame``'s. None where its names repeat or this pandas lacks the
    means."""
    if not frame.columns.is_unique:
        return None
    try:
        manager = frame._mgr
        return {name: manager.iget_values(i) for i, name in enumerate(frame.columns)}
    except AttributeError:
        return None


def joined(frame: pd.DataFrame, extra: dict, order: list[str]) -> pd.DataFrame:
    """``frame`` with the columns ``extra`` (arrays as long as it) beside its own, in ``order``
    (every name of both), its columns shared rather than copied."""
    arrays = stored_arrays(frame)
    if arrays is not None:
        arrays.update(extra)
        built = frame_of_arrays({name: arrays[name] for name in order}, frame.index)
        if built is not None:
            return built
    both = pd.concat([frame, pd.DataFrame(extra, index=frame.index)], axis=1)
    return both[order]


# A column that most rows leave at one value (a model internal: most ops are no TPU matmul
# fusion, reduce, ...) is kept sparse where fewer than this share of its rows hold another, in a
# table of at least SPARSE_ROWS rows (a smaller one's bytes are fewer than a sparse array's own
# cost in time: a small module's analysis is mostly fixed costs).
SPARSE_BELOW = 0.5
SPARSE_ROWS = 4096


def compact(values, default, text: bool = False):
    """A column stored in the memory its values need: a sparse array (only the values other than
    ``default``) where most rows hold ``default``, else the values whole (text as pandas' string
    type). Read back whole (``np.asarray``, ``to_numpy``), it is ``values``, value for value."""
    if isinstance(values, pd.arrays.SparseArray):
        return values
    values = np.asarray(values, dtype=object) if text else np.asarray(values)
    if len(values) < SPARSE_ROWS:
        return as_text(values) if text else values
    if isinstance(default, float) and default != default:  # NaN: a value of its own is a number
        own = ~np.isnan(values.astype(float))
    else:
        own = np.asarray(values != default, dtype=bool)
    if len(values) and int(own.sum()) < SPARSE_BELOW * len(values):
        return pd.arrays.SparseArray(values, fill_value=default)
    return as_text(values) if text else values


class ColumnsReadOnce(pd.DataFrame):
    """A frame whose columns, read by name (``frame["flops"]``), are each made a Series once and
    kept: the judges read a judged frame's columns by name some 80 times, 40 of them again, and
    pandas makes a new Series at each read (a cost a small module's judging pays more than its
    rows). A column is read from a plain frame of the same columns (pandas makes a subclass'
    Series the slow way); any other read, and every frame derived from it, is pandas' own (a
    plain DataFrame). Its columns are not to be changed in place: a kept Series would not see
    it."""

    _metadata: typing.ClassVar[list[str]] = ["_read", "_plain"]  # attributes, not columns

    @property
    def _constructor(self):
        return pd.DataFrame

    def __getitem__(self, key):
        if type(key) is not str:
            return super().__getitem__(key)
        read = self._read
        column = read.get(key)
        if column is None:
            column = read[key] = self._plain[key]
        return column


def columns_read_once(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s columns (shared, not copied) as a :class:`ColumnsReadOnce`; ``frame`` itself
    where its column names repeat (a name reads a frame) or this pandas lacks the means."""
    if not frame.columns.is_unique:
        return frame
    try:
        once = ColumnsReadOnce._from_mgr(frame._mgr, axes=frame._mgr.axes)
    except AttributeError:
        return frame
    once._read, once._plain = {}, frame
    return once
