"""Open a recording and build its model (the whole recording or a window of intervals)."""

from __future__ import annotations

import sys
import threading
from array import array
from dataclasses import replace

from stallscope.analyzer.model import (
    LOCK_SPLIT_ABOVE_TOTAL, WAIT_TOO_LONG, LockFold, Model, WakeFold, count_invariants, wait_limit_ns,
)
from stallscope.analyzer import rowfold, wakefold
from stallscope.analyzer.rowfold import LockRows
from stallscope.analyzer.series import Ledger
from stallscope.analyzer.store import Recording
from stallscope.analyzer.untrusted import escaped
from stallscope import exiting

_WITHOUT_LOCKS = frozenset({"locks"})
_WITHOUT_LOCKS_AND_WAKERS = frozenset({"locks", "wakers"})


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
    ahead = LocksAhead.start(rec, first, last)
    wakes = WakersAhead.start(rec, first, last)
    without = _WITHOUT_LOCKS if wakes is None else _WITHOUT_LOCKS_AND_WAKERS

    def read():
        for iv in rec.intervals(first, last, without=without):
            limits[iv.index] = wait_limit_ns(meta, iv)
            order.append(iv.index)
            yield iv

    stacks = rec.stacks()
    model = Model.from_intervals(meta, read(), rec.tasks(), stacks, slab_caches=rec.slab_caches(),
                                 functions=rec.functions(), keep=None if ledger is None else ledger.keep)
    keep = ledger is not None
    taken = ahead.take(rec, limits, keep) if ahead is not None else None
    fold, parts = taken if taken is not None else fold_locks(rec, limits, keep)
    model = with_locks(model, fold, stacks)
    if wakes is not None:
        model = replace(model, wakeups=wakes.take(rec, order, last).result(stacks))
    if ledger is not None:
        ledger.kept_all()
        ledger.keep_locks(order, parts, model.lock_waits)
    exiting.keep(model)  # a reading command leaves without freeing it (stallscope/exiting.py)
    exiting.keep(ledger)
    return model


def _ahead_top(rec: Recording, table: str, built: bool, first: int, last: int | None) -> int | None:
    """The last interval a fold of `table` ahead of the read folds (the window's, or the file's last), where there
    is one to run: a closed recording, holding the table, the fold's C built, and the window not empty."""
    if not rec.meta.end_ns or table not in rec.tables or not built:
        return None
    top = rec.last_interval_index()
    if last is not None:
        top = min(top, last)
    return top if top >= first else None


class _Ahead:
    """A fold run in a thread beside the read (its C lets go of the interpreter's lock): its answer, or what it
    raised, kept until the reader joins it."""

    def _begin(self, name: str, work) -> None:
        self.answer, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self.thread.start()

    def _run(self, work) -> None:
        try:
            self.answer = work()
        except BaseException as exc:  # noqa: BLE001 - raised where it is joined
            self.error = exc

    def _joined(self):
        """The fold's answer, once it is done; what it raised, raised here."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.answer


class LocksAhead(_Ahead):
    """A closed recording's lock rows folded in C in a thread while the other tables are read here: the C
    call lets go of the interpreter's lock, so the two run on two CPUs. It folds every index of the window
    up to the file's last, each wait's limit the recording's length (wait_limit_ns of a closed recording);
    its fold is taken only when the intervals read are exactly those (a damaged file's gaps: folded again
    for those read)."""

    def __init__(self, rec: Recording, limits: dict[int, int]):
        self.limits = limits
        rec.lock_statement()  # made here: the thread reads nothing through the reader's connection
        self._begin("lock-fold", lambda: rec.fold_lock_rows(limits, count_damaged=False))

    @classmethod
    def start(cls, rec: Recording, first: int, last: int | None) -> "LocksAhead | None":
        top = _ahead_top(rec, "locks", rowfold.available(), first, last)
        if top is None:
            return None
        span = wait_limit_ns(rec.meta, None)  # a closed recording's: its length, whatever the interval
        return cls(rec, dict.fromkeys(range(first, top + 1), span))

    def take(self, rec: Recording, limits: dict[int, int], keep_parts: bool):
        """(fold, parts) as fold_locks gives them, or None when the intervals read were not those folded."""
        rows = self._joined()
        if rows is None or limits != self.limits:
            return None
        if rows.damaged:
            rec.damaged["locks"] += rows.damaged
        return rows, rows.parts if keep_parts else {}


class WakersAhead(_Ahead):
    """A closed recording's wakeup rows folded in C in a thread while the other tables are read here (the C lets
    go of the interpreter's lock: analyzer/wakefold.py), its intervals up to the file's last; its fold is taken
    only when the intervals read are exactly those (a damaged file's gaps, or a sum beyond 64 bits: the records
    of those read folded here)."""

    def __init__(self, rec: Recording, first: int, top: int):
        self.first, self.top = first, top
        rec.waker_statement()  # made here: the thread reads nothing through the reader's connection
        self._begin("wake-fold", lambda: rec.fold_waker_rows(first, top))

    @classmethod
    def start(cls, rec: Recording, first: int, last: int | None) -> "WakersAhead | None":
        top = _ahead_top(rec, "wakers", wakefold.available(), first, last)
        return None if top is None else cls(rec, first, top)

    def take(self, rec: Recording, order: list[int], last: int | None) -> WakeFold:
        """The wakeups of the intervals read (`order`, of a window ending at `last`), folded."""
        folded = self._joined()
        fold = WakeFold()
        if folded is not None and set(order) == set(range(self.first, self.top + 1)):
            fold.acc, damaged = folded
            if damaged:
                rec.damaged["wakers"] += damaged
            return fold
        for wakers in rec.waker_records(order, last):
            fold.add(wakers)
        return fold


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
