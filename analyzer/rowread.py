"""A recording's task, off-CPU, waker, wait-in-progress and on-CPU sample rows read into records in C
(analyzer/rowread.c, a CPython extension).

These tables are most of a recording's rows besides the locks (10 minutes of hackbench: 639,313 of
715,000; 1,042,014 in the synthetic recording of benchmarks/RESULTS-report.md). Read through Python's
sqlite3 module, each row cost a tuple of 16 objects and a Python function making the record from it; the
extension steps SQLite itself (a thread of each reader's own a few chunks of rows ahead: READ_AHEAD), checks
each column's type against its kind (recording_checks.COLUMNS, as
`row_ok_sql` has SQLite check it), and makes the same record record_maker makes. Used by
`Recording.intervals` when the extension is built (`make install`); without it, the rows are read in Python
as before. The same extension makes a lock fold's records (`lock_waits`) and every record_maker's records,
and decodes `top`'s task dump entries (bpf/task_dump.py).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Callable

from stallscope.analyzer.recording_checks import INT, INT_OR_NULL, TEXT, TEXT_OR_NULL, DamagedRow, hist_cell, woken_cell
from stallscope.analyzer.sample import NO_LINK, OngoingWait, TaskId, WaitLink

try:
    from stallscope.analyzer import _rowread
except ImportError:  # not built: Python reads the rows
    _rowread = None

KINDS = {INT: 1, INT_OR_NULL: 2, TEXT: 3, TEXT_OR_NULL: 4}  # analyzer/rowread.c K_*: what a column holds
# the tables read here and the extension's shape of each (its columns: analyzer/store.py _*_COLUMNS, idx first)
SHAPES = {
    "task_deltas": 1,  # _rowread.SHAPE_TASK
    "offcpu": 2,  # _rowread.SHAPE_OFFCPU
    "wakers": 3,  # _rowread.SHAPE_WAKER
    "ongoing": 4,  # _rowread.SHAPE_ONGOING: (OngoingWait, since_ns) pairs
    "opened": 5,  # _rowread.SHAPE_OPENED: WaitSince records
    "oncpu": 6,  # _rowread.SHAPE_ONCPU
}


# a reader's rows stepped in a thread of its own, a few chunks ahead (analyzer/rowread.c `ahead`): SQLite's part of
# reading them on another CPU, the interpreter's lock let go (the synthetic 10-minute recording's model folded in
# 2.72-2.82 s rather than 3.03-3.31 s, four runs each alternated); False: stepped by the reader, row by row
READ_AHEAD = True


def fields_of(cls) -> tuple:
    """What the extension makes a record of `cls` from: the class and its fields' names, in order (it sets each
    as record_maker's function does)."""
    return cls, tuple(f.name for f in fields(cls))


def available() -> bool:
    return _rowread is not None


class Rows:
    """A table's rows in the window, in interval order, as records, handed out one interval at a time (as
    store._ByInterval): `take(idx)`; a damaged row is counted by `count_damaged()` and left out."""

    def __init__(self, uri: str, sql: str, window: tuple[int, int], table: str, kinds: list[str | None],
                 make: tuple, count_damaged: Callable[[], None], error: Callable[[Exception], Exception]):
        self._count_damaged = count_damaged
        self._error = error
        self._seen = 0
        checked = bytes(KINDS.get(k, 0) if k else 0 for k in kinds)
        try:
            self._reader = _rowread.Reader(uri, sql, window[0], window[1], SHAPES[table], checked, make, TaskId,
                                           hist_cell, woken_cell, DamagedRow, WaitLink, NO_LINK, OngoingWait,
                                           READ_AHEAD)
        except _rowread.ReadError as exc:
            raise error(exc) from None

    def take(self, idx: int) -> tuple:
        try:
            out = self._reader.take(idx)
        except _rowread.ReadError as exc:
            raise self._error(exc) from None
        damaged = self._reader.damaged
        for _ in range(damaged - self._seen):
            self._count_damaged()
        self._seen = damaged
        return out


def lock_waits(keys, totals, cells: list, stacks: dict, make: tuple) -> tuple:
    """A lock fold's records made in C (analyzer/rowfold.py LockRows.result): `cells` its strings, then "" and
    None (the ids of an empty and a NULL cell, -2 and -1)."""
    return _rowread.lock_waits(keys, totals, cells, stacks, make, TaskId)
