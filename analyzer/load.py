"""Open a recording and build its model (the whole recording or a window of intervals)."""

from __future__ import annotations

import sys
from array import array
from dataclasses import replace

from stallscope.analyzer.model import (
    LOCK_SPLIT_ABOVE_TOTAL, WAIT_TOO_LONG, LockFold, Model, count_invariants, wait_limit_ns,
)
from stallscope.analyzer.rowfold import LockRows
from stallscope.analyzer.series import Ledger
from stallscope.analyzer.store import Recording
from stallscope.analyzer.untrusted import escaped

_WITHOUT_LOCKS = frozenset({"locks"})


def load_model(path: str, first: int = 0, last: int | None = None, warn=None) -> Model:
    """The model of a recording. Rows the reader found damaged are left out and counted in
    `Model.damaged_rows`; `warn` (default: one line on stderr) is told, so no command reads a damaged
    recording silently."""
    rec = Recording(path)
    try:
        model = fold_recording(rec, first, last)
    finally:
        rec.close()
    if rec.damaged:
        model = replace(model, damaged_rows=dict(rec.damaged))
        (warn or _warn_on_stderr)(damaged_text(path, model.damaged_rows))
    return model


def fold_recording(rec: Recording, first: int = 0, last: int | None = None, ledger: Ledger | None = None) -> Model:
    """The model of a recording's intervals first..last, as Model.from_intervals folds them, in one read:
    the intervals folded as they are read, then their kernel lock contentions straight from the rows, no
    record made for each (a long recording's most numerous: a million rows). `ledger` keeps the series'
    records as they pass, the lock ones numbered as the model's table is ordered."""
    meta, limits, order = rec.meta, {}, []

    def read():
        for iv in rec.intervals(first, last, without=_WITHOUT_LOCKS):
            limits[iv.index] = wait_limit_ns(meta, iv)
            order.append(iv.index)
            yield iv

    stacks = rec.stacks()
    intervals = read() if ledger is None else ledger.tee(read())
    model = Model.from_intervals(meta, intervals, rec.tasks(), stacks, slab_caches=rec.slab_caches(),
                                 functions=rec.functions())
    fold, parts = fold_locks(rec, limits, ledger is not None)
    model = with_locks(model, fold, stacks)
    if ledger is not None:
        ledger.keep_locks(order, parts, model.lock_waits)
    return model


def with_locks(model: Model, fold: LockFold | LockRows, stacks: dict) -> Model:
    """The model with the kernel lock contentions of `fold` (fold_locks) as its table, and their invariants'
    counts in its health."""
    health = dict(model.health)
    count_invariants(health, ((WAIT_TOO_LONG, fold.too_long), (LOCK_SPLIT_ABOVE_TOTAL, fold.bad_split)))
    return replace(model, lock_waits=fold.result(stacks), health=health)


def fold_locks(rec: Recording, limits: dict[int, int], keep_parts: bool) -> tuple[LockFold | LockRows,
                                                                                  dict[int, array]]:
    """The lock rows of the intervals `limits` names folded per key (`result` the model's table, `too_long`
    and `bad_split` the invariants' counts), and (`keep_parts`) each interval's (key number, count, wait ns)
    for the series: in C where it is built (analyzer/rowfold.py), else here."""
    rows = rec.fold_lock_rows(limits)
    if rows is not None:
        return rows, rows.parts if keep_parts else {}
    fold = LockFold()
    add, check = fold.add, fold.check
    parts: dict[int, array] = {}
    for idx, values in rec.lock_rows(limits):
        n = add(values)
        check(values, limits[idx])
        if keep_parts:
            part = parts.get(idx)
            if part is None:
                part = parts[idx] = array("q")
            part.extend((n, values[8], values[9]))  # count, total ns (LOCK_VALUES)
    return fold, parts


def damaged_text(path: str, damaged: dict[str, int]) -> str:
    counts = ", ".join(f"{table} {n}" for table, n in sorted(damaged.items()))
    return (f"warning: {escaped(path)} is damaged: {sum(damaged.values())} rows left out ({counts}); "
            "the rest is read")


def _warn_on_stderr(text: str) -> None:
    print(f"stallscope: {text}", file=sys.stderr, flush=True)
