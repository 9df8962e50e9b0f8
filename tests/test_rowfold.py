"""The lock rows folded in C (analyzer/rowfold.c) are folded as Python's LockFold folds them: the same
keys in the same order, the same totals, the same per-interval parts for the series, the same damaged
rows and invariant counts; a total beyond 64 bits and a missing library fall back to Python's fold."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import pytest

from conftest import edited_copy, run_stallscope
from stallscope.analyzer import rowfold, rowread
from stallscope.analyzer.load import fold_recording
from stallscope.analyzer.model import LockFold
from stallscope.analyzer.store import Recording


def _python_fold(rec: Recording, limits: dict[int, int]):
    fold, parts = LockFold(), {}
    for idx, values in rec.lock_rows(limits):
        n = fold.add(values)
        fold.check(values, limits[idx])
        parts.setdefault(idx, array("q")).extend((n, values[8], values[9]))
    return fold, parts


def _limits(rec: Recording, span: int | None = None) -> dict[int, int]:
    return {iv.index: span if span is not None else iv.end_ns - iv.start_ns
            for iv in rec.intervals(without=frozenset({"locks"}))}


def _both(path: Path, span: int | None = None):
    rec = Recording(str(path))
    try:
        limits = _limits(rec, span)
        rows = rec.fold_lock_rows(limits)
        c_damaged = dict(rec.damaged)
        rec.damaged.clear()
        fold, parts = _python_fold(rec, limits)
        return rows, c_damaged, fold, parts, dict(rec.damaged)
    finally:
        rec.close()


def _assert_same(path: Path, span: int | None = None) -> None:
    rows, c_damaged, fold, parts, damaged = _both(path, span)
    assert rows is not None, "the C fold is built by `make install`"
    assert list(rows.index.items()) == list(fold.index.items())
    assert rows.acc == fold.acc
    assert (rows.too_long, rows.bad_split) == (fold.too_long, fold.bad_split)
    assert rows.parts == parts
    assert c_damaged == damaged


def test_a_real_recordings_lock_rows_fold_in_c_as_in_python(report_recording):
    path = report_recording["stall"]
    rec = Recording(str(path))
    try:
        n = rec.db.execute("SELECT COUNT(*) FROM locks").fetchone()[0]
    finally:
        rec.close()
    assert n > 100, f"hackbench made {n} lock rows: too few to compare"
    _assert_same(path)
    _assert_same(path, span=1)  # every wait longer than the interval: each row counted as too long


def test_the_folds_records_are_made_in_c_as_in_python(report_recording, tmp_path, monkeypatch):
    """LockRows.result's records (made in analyzer/rowread.c when it is built) equal LockFold.result's, field
    for field: unsigned addresses and stack ids, the stacks found, text cells, NULL and empty ones in place
    (written into a copy of the recording: a short one may hold none of some)."""
    cells = edited_copy(report_recording["stall"], tmp_path / "cells.stall",
                        "UPDATE locks SET owner_comm = 'own', owner_pid = 7, field = 'inode.i_rwsem', "
                        "object = '/tmp/d' WHERE rowid % 3 = 0",
                        "UPDATE locks SET cache = 'kmalloc-64', symbol = 'sym', field = NULL, object = NULL "
                        "WHERE rowid % 3 = 1",
                        "UPDATE locks SET addr = -16, kstack = -1 WHERE rowid % 5 = 0")
    rec = Recording(str(cells))
    try:
        stacks = rec.stacks()
        limits = _limits(rec)
        rows = rec.fold_lock_rows(limits)
        fold, _parts = _python_fold(rec, limits)
    finally:
        rec.close()
    assert rowread.available(), "the extension is built by `make install`"
    made = rows.result(stacks)
    assert made == fold.result(stacks)
    assert {w.owner_comm for w in made} >= {"own", ""} and {w.cache for w in made} >= {"kmalloc-64", ""}
    assert {w.field for w in made} >= {"inode.i_rwsem", ""} and any(w.addr == (1 << 64) - 16 for w in made)
    monkeypatch.setattr(rowread, "_rowread", None)
    assert rows.result(stacks) == made


def test_damaged_lock_rows_are_left_out_and_counted_alike(report_recording, tmp_path):
    bad = edited_copy(report_recording["stall"], tmp_path / "bad.stall",
                "UPDATE locks SET count = 'many' WHERE rowid % 7 = 0",
                "UPDATE locks SET owner_comm = NULL WHERE rowid % 7 = 1",  # NULL where text is written
                "UPDATE locks SET cache = 3 WHERE rowid % 7 = 2",
                "UPDATE locks SET blocked_ns = NULL WHERE rowid % 7 = 3",  # allowed: an older kernel's rows
                "UPDATE locks SET field = NULL, object = NULL WHERE rowid % 7 = 4",  # allowed
                "UPDATE locks SET symbol = '', blocked_ns = total_ns + 5 WHERE rowid % 7 = 5",
                "UPDATE locks SET owner_comm = CAST(x'fffe41' AS TEXT), owner_pid = 7 WHERE rowid % 7 = 6",
                "UPDATE locks SET idx = NULL WHERE rowid = 3")
    rows, c_damaged, *_ = _both(bad)
    assert c_damaged["locks"] > 0 and rows.bad_split > 0
    _assert_same(bad)
    proc = run_stallscope("export", str(bad))  # as a user reads it: one warning line, the rows counted
    assert "damaged" in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["meta"]["damaged_rows"]["locks"] == c_damaged["locks"]


def test_a_total_beyond_64_bits_is_folded_in_python(report_recording, tmp_path):
    big = edited_copy(report_recording["stall"], tmp_path / "big.stall",
                "UPDATE locks SET total_ns = 9223372036854775000")
    rows, *_ = _both(big)
    assert rows is None  # overflowed: the caller folds in Python
    rec = Recording(str(big))
    try:
        model = fold_recording(rec)
    finally:
        rec.close()
    assert max(w.total_ns for w in model.lock_waits) > (1 << 63)


def test_without_the_library_the_model_is_the_same(report_recording, monkeypatch):
    path = str(report_recording["stall"])
    rec = Recording(path)
    try:
        with_c = fold_recording(rec)
    finally:
        rec.close()
    monkeypatch.setattr(rowfold, "_lib", None)
    monkeypatch.setattr(rowfold, "_missing", True)
    rec = Recording(path)
    try:
        assert rec.fold_lock_rows(_limits(rec)) is None
        without = fold_recording(rec)
    finally:
        rec.close()
    assert with_c.lock_waits == without.lock_waits and with_c.health == without.health


def test_a_file_that_sqlite_cannot_read_is_damaged_not_a_traceback(report_recording, tmp_path):
    from stallscope.errors import StallscopeError

    rec = Recording(str(report_recording["stall"]))
    try:
        rec.uri = f"file:{tmp_path / 'gone.stall'}?mode=ro"
        with pytest.raises(StallscopeError, match="damaged"):
            rec.fold_lock_rows(_limits(rec))
    finally:
        rec.close()


def test_a_replayed_windows_lock_table_is_folded_from_the_file_as_from_its_records(report_recording):
    """`top --replay` reads a recording's intervals without their lock rows (a long recording's most
    numerous) and folds each window's from the file: the same table and health as from the records."""
    from stallscope.analyzer.model import Model
    from stallscope.sources import RecordingSource

    path = str(report_recording["stall"])
    source = RecordingSource(path)
    rec = Recording(path)
    try:
        tl = source.timeline
        assert not any(iv.locks for iv in tl.intervals)
        tasks, stacks = rec.tasks(), rec.stacks()
        windows = [(tl.first_index, tl.last_index), (tl.first_index + 1, tl.last_index - 1)]
        windows += [(i, i) for i in range(tl.first_index, tl.last_index + 1)]
        compared = 0
        for first, last in windows:
            model = source.timeline.window(first, last).model
            whole = Model.from_intervals(rec.meta, rec.intervals(first, last), tasks, stacks,
                                         slab_caches=rec.slab_caches(), functions=rec.functions())
            assert model.lock_waits == whole.lock_waits, (first, last)
            assert model.health == whole.health, (first, last)
            compared += len(model.lock_waits)
        assert compared > 100
    finally:
        rec.close()
        source.stop()
    assert source.timeline.locks(model, []) is model  # stopped: the file is closed, nothing is read from it


def _folded(path: str, first: int = 0, last: int | None = None):
    from stallscope.analyzer.series import Ledger

    rec = Recording(path)
    try:
        ledger = Ledger()
        model = fold_recording(rec, first, last, ledger)
        return model, [e.locks for e in ledger.entries], dict(rec.damaged)
    finally:
        rec.close()


def test_the_lock_rows_folded_beside_the_read_give_the_same_model(report_recording, tmp_path, monkeypatch):
    """fold_recording folds a closed recording's lock rows in a thread while it reads the rest; a window, a
    damaged file and a file with a gap in its intervals give what the fold after the read gives (the gap's
    fold in the thread is not taken: it folded intervals that were not read)."""
    from stallscope.analyzer import load

    taken = []
    real_take = load.LocksAhead.take
    monkeypatch.setattr(load.LocksAhead, "take", lambda self, *a: taken.append(real_take(self, *a)) or taken[-1])
    gap = edited_copy(report_recording["stall"], tmp_path / "gap.stall",
                      "DELETE FROM intervals WHERE idx = 2", "UPDATE locks SET count = 'x' WHERE rowid % 9 = 0")
    for path, window, used in ((report_recording["stall"], (0, None), True), (report_recording["stall"], (1, 3), True),
                               (gap, (0, None), False)):
        taken.clear()
        with_thread = _folded(str(path), *window)
        assert len(taken) == 1 and (taken[0] is not None) == used, (path, window)
        with monkeypatch.context() as m:
            m.setattr(load.LocksAhead, "start", classmethod(lambda cls, *a: None))
            after = _folded(str(path), *window)
        assert with_thread[0].lock_waits == after[0].lock_waits and with_thread[0].health == after[0].health
        assert with_thread[1:] == after[1:]
        assert with_thread[0].lock_waits
