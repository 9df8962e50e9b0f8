"""A closed recording's wakeup rows folded per key in C (analyzer/wakefold.c, a CPython extension), in a thread
beside the rest of the read: the C lets go of the interpreter's lock while it steps SQLite.

The waker rows are a recording's second most numerous after the locks (the synthetic 10-minute hackbench
recording of benchmarks/RESULTS-report.md: 401,727 rows for 10,034 keys). Read into records with the rest and
folded by the model (analyzer/model.py WakeFold), they were a third of a report's read; here they are folded as
WakeFold.add folds them, from the rows the Python reader would read (each column's type checked against its kind
as the row reader checks it, or, where values have bounds, by the statement's `ok`), and Python makes the fold's
accumulators, one per key, in the order first met. Without the extension (not built), the model folds the
records as before.
"""

from __future__ import annotations

from stallscope.analyzer.rowread import KINDS
from stallscope.analyzer.sample import NO_LINK, TaskId, WaitLink

try:
    from stallscope.analyzer import _wakefold
except ImportError:  # not built: the model folds the records
    _wakefold = None


class WakeFoldError(Exception):
    """SQLite failed under the fold: its message."""


def available() -> bool:
    return _wakefold is not None


def _link(func: int, state: int, why: int) -> WaitLink:
    return WaitLink(func, state, why) if func or state or why else NO_LINK


def fold(uri: str, sql: str, kinds: list[str | None] | None, first: int, last: int
         ) -> tuple[dict[tuple, list], int] | None:
    """The wakeup rows of intervals first..last that `sql` selects (store.py Recording.waker_statement), each
    column's type checked against its kind in `kinds` (recording_checks; None: the statement's `ok` checks them),
    folded:
    WakeFold's accumulators (key -> [waker's name, count, total ns, weighted ns, link blocked ns, link run-queue
    ns]) and the rows left out as damaged. None where a sum would not fit in 64 bits: fold the records then."""
    try:
        checked = None if kinds is None else bytes(KINDS.get(k, 0) if k else 0 for k in kinds)
        got = _wakefold.fold(uri, sql, first, last, checked)
    except _wakefold.ReadError as exc:
        raise WakeFoldError(str(exc)) from None
    if got is None:
        return None
    entries, damaged = got
    acc = {}
    for pid, start, wpid, wstart, wtgid, kstack, irq, exiting, lf, ls, lw, ef, es, ew, comm, *sums in entries:
        acc[(TaskId(pid, start), TaskId(wpid, wstart), wtgid, kstack, irq, exiting, _link(lf, ls, lw),
             _link(ef, es, ew))] = [comm, *sums]
    return acc, damaged
