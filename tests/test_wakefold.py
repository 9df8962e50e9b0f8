"""A recording's wakeup rows folded in C in a thread (analyzer/wakefold.c) are folded as the model folds their
records: the same wakeups in the same order, the same rows left out as damaged, whatever the damage; a window, a
file with gaps and sums beyond 64 bits read alike; without the extension the model folds the records."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import edited_copy
from stallscope.analyzer import load, store, wakefold
from stallscope.analyzer.store import Recording
from stallscope.errors import StallscopeError

pytestmark = pytest.mark.skipif(not wakefold.available(), reason="analyzer/_wakefold is built by `make install`")


def _model(path: Path, c: bool, monkeypatch, first: int = 0, last: int | None = None, spy: list | None = None):
    """The model of a recording, and what its reader counted as damaged; the wakeups folded in C or not."""
    with monkeypatch.context() as m:
        if not c:
            m.setattr(wakefold, "_wakefold", None)
        elif spy is not None:  # whether the records were read again and folded here
            again = Recording.waker_records
            m.setattr(Recording, "waker_records", lambda self, *a: spy.append("records") or again(self, *a))
        rec = Recording(str(path))
        try:
            return load.fold_recording(rec, first, last), dict(rec.damaged)
        finally:
            rec.close()


def _assert_same(path: Path, monkeypatch, first: int = 0, last: int | None = None, folded: bool = True):
    spy: list = []
    c = _model(path, True, monkeypatch, first, last, spy)
    py = _model(path, False, monkeypatch, first, last)
    assert spy == ([] if folded else ["records"])  # the C fold taken, or (gaps, overflow) the records folded
    assert c[0].wakeups == py[0].wakeups  # in the order first met
    assert c[0] == py[0]
    assert c[1] == py[1]
    return c


def test_a_real_recordings_wakeups_fold_alike(report_recording, tmp_path, monkeypatch):
    model, damaged = _assert_same(report_recording["stall"], monkeypatch)
    assert len(model.wakeups) > 100 and not damaged
    # a work item's function and a wakeup in an interrupt, which a few seconds' run does not always draw (CI once had
    # neither a kworker's nor an interrupt's among its wakeups): set on some of its rows, folded alike too
    fields = edited_copy(report_recording["stall"], tmp_path / "fields.stall",
                         "UPDATE wakers SET link_func = 4096 + rowid % 3, in_interrupt = 1 WHERE rowid % 5 = 0")
    edited, damaged = _assert_same(fields, monkeypatch)
    assert not damaged
    assert any(w.link.func for w in edited.wakeups) and any(w.in_interrupt for w in edited.wakeups)
    rec = Recording(str(report_recording["stall"]))
    busiest = rec.db.execute("SELECT idx FROM wakers GROUP BY idx ORDER BY COUNT(*) DESC LIMIT 1").fetchone()[0]
    rec.close()
    window, _ = _assert_same(report_recording["stall"], monkeypatch, busiest, busiest + 1)
    assert 0 < len(window.wakeups) < len(model.wakeups)


def test_damaged_rows_are_left_out_alike(report_recording, tmp_path, monkeypatch):
    bad = edited_copy(
        report_recording["stall"], tmp_path / "bad.stall",
        "UPDATE wakers SET waker_comm = CAST(x'fffe41' AS TEXT), in_interrupt = 2 WHERE rowid % 7 = 0",
        "UPDATE wakers SET exiting = NULL, weighted_ns = NULL, link_func = NULL WHERE rowid % 7 = 1",  # older rows
        "UPDATE wakers SET waker_comm = NULL WHERE rowid % 7 = 2",  # NULL where text is written: damaged
        "UPDATE wakers SET link_func = -1, link_state = 0, link_why = 0 WHERE rowid % 7 = 3",
        "UPDATE wakers SET wakee_why = 'x' WHERE rowid % 7 = 4",
        "UPDATE wakers SET idx = idx + 0.0 WHERE rowid % 7 = 5",  # a real where the interval's integer is
        "UPDATE wakers SET idx = idx + 0.5 WHERE rowid % 13 = 6")  # between two intervals: no interval's
    model, damaged = _assert_same(bad, monkeypatch)
    assert damaged["wakers"] > 0
    # the columns' types checked in C, or (where values have bounds) by the statement's `ok`: the same rows left out
    rec = Recording(str(bad))
    try:
        top, (sql, kinds) = rec.last_interval_index(), rec.waker_statement()
        with_ok = f"{rec._select('wakers', store._WAKER_COLUMNS)} WHERE idx BETWEEN ? AND ? ORDER BY idx"
        assert kinds is not None
        assert wakefold.fold(rec.uri, sql, kinds, 0, top) == wakefold.fold(rec.uri, with_ok, None, 0, top)
    finally:
        rec.close()
    assert any(w.waker_comm == "\ufffd\ufffdA" and w.in_interrupt is True for w in model.wakeups)
    assert any(w.link.func == (1 << 64) - 1 for w in model.wakeups)


def test_a_file_with_gaps_and_sums_beyond_64_bits_fold_the_records(report_recording, tmp_path, monkeypatch):
    gaps = edited_copy(report_recording["stall"], tmp_path / "gaps.stall",
                       "DELETE FROM intervals WHERE idx = (SELECT MIN(idx) + 2 FROM intervals)")
    _assert_same(gaps, monkeypatch, folded=False)
    huge = edited_copy(report_recording["stall"], tmp_path / "huge.stall",
                       "UPDATE wakers SET total_ns = 9223372036854775807, weighted_ns = NULL")
    model, _ = _assert_same(huge, monkeypatch, folded=False)
    assert max(w.total_ns for w in model.wakeups) > 1 << 63


def test_a_file_damaged_under_the_rows_is_an_error(report_recording, tmp_path):
    """Pages overwritten under the wakeup rows: SQLite's complaint as the one-line error the reader gives."""
    bad = tmp_path / "torn.stall"
    raw = bytearray(report_recording["stall"].read_bytes())
    rec = Recording(str(report_recording["stall"]))
    try:
        size = rec.db.execute("PRAGMA page_size").fetchone()[0]
        first = rec.db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'wakers'").fetchone()[0]
        count = rec.db.execute("SELECT COUNT(*) FROM wakers").fetchone()[0]
    finally:
        rec.close()
    assert count > 100
    for page in range(first, first + 4):
        raw[(page - 1) * size:page * size] = b"\x5a" * size
    bad.write_bytes(bytes(raw))
    rec = Recording(str(bad))
    try:
        with pytest.raises(StallscopeError, match="is damaged"):
            rec.fold_waker_rows(0, rec.last_interval_index())
    finally:
        rec.close()
