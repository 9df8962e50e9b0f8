"""The task, off-CPU, waker, wait-in-progress and on-CPU sample rows read in C (analyzer/rowread.c) are read as the
Python reader reads them: the same records, in the same order, the same rows left out as damaged, whatever the
damage; without the extension the Python reader reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import edited_copy
from stallscope.analyzer import rowread
from stallscope.analyzer.store import Recording
from stallscope.errors import StallscopeError

_WITHOUT = frozenset({"locks"})


def _read(path: Path, c: bool, monkeypatch, first: int = 0, last: int | None = None):
    with monkeypatch.context() as m:
        if not c:
            m.setattr(rowread, "_rowread", None)
        rec = Recording(str(path))
        try:
            ivs = [(iv.index, iv.tasks, iv.offcpu, iv.wakers, iv.ongoing, iv.ongoing_since, iv.opened, iv.oncpu)
                   for iv in rec.intervals(first, last, without=_WITHOUT)]
            return ivs, dict(rec.damaged)
        finally:
            rec.close()


def _assert_same(path: Path, monkeypatch, first: int = 0, last: int | None = None) -> tuple[list, dict]:
    """The C reader's records, its rows stepped ahead in a thread of its own and here, are the Python reader's."""
    assert rowread.available(), "the extension is built by `make install`"
    c = _read(path, True, monkeypatch, first, last)
    with monkeypatch.context() as m:
        m.setattr(rowread, "READ_AHEAD", False)
        here = _read(path, True, monkeypatch, first, last)
    py = _read(path, False, monkeypatch, first, last)
    assert c[0] == here[0] == py[0]
    assert c[1] == here[1] == py[1]
    return c


def test_a_real_recordings_task_and_offcpu_rows_read_in_c_as_in_python(report_recording, monkeypatch):
    ivs, damaged = _assert_same(report_recording["stall"], monkeypatch)
    for table in (1, 2, 3, 6):
        assert sum(len(iv[table]) for iv in ivs) > 100
    assert sum(len(iv[7]) for iv in ivs) > 10  # on-CPU samples: a record per thread and stack sampled
    assert any(iv[4] for iv in ivs)  # waits carried on through an interval
    assert not damaged
    assert any(d.runq_hist for iv in ivs for d in iv[1]) and any(o.woken != (0, 0, 0) for iv in ivs for o in iv[2])
    middle = ivs[len(ivs) // 2][0]
    window, _ = _assert_same(report_recording["stall"], monkeypatch, middle, middle + 1)
    assert [i for i, *_x in window] == [middle, middle + 1]


def test_damaged_and_hand_written_cells_read_alike(report_recording, tmp_path, monkeypatch):
    bad = edited_copy(
        report_recording["stall"], tmp_path / "bad.stall",
        "UPDATE offcpu SET hist = '[ [1, 2],[3,4] ]' WHERE rowid % 11 = 0",  # json.dumps' spaces: parsed in Python
        "UPDATE offcpu SET hist = '[[1,007]]' WHERE rowid % 11 = 1",  # a leading zero: not JSON, damaged
        "UPDATE offcpu SET hist = '[[64,1]]' WHERE rowid % 11 = 2",  # a slot beyond 63: damaged
        "UPDATE offcpu SET woken = ' 1,+2,3_0' WHERE rowid % 11 = 3",  # what int() takes
        "UPDATE offcpu SET woken = '1,2' WHERE rowid % 11 = 4",  # two counts: damaged
        "UPDATE offcpu SET count = 'many' WHERE rowid % 11 = 5",  # text where an integer is written
        "UPDATE offcpu SET charged_ns = NULL, why = NULL, func = NULL WHERE rowid % 11 = 6",  # allowed: older rows
        "UPDATE offcpu SET kstack = -5, hist = '', woken = '' WHERE rowid % 11 = 7",  # unsigned ids; empty cells
        "UPDATE offcpu SET hist = CAST(x'5b5bff5d5d' AS TEXT) WHERE rowid % 11 = 8",  # not UTF-8
        "UPDATE offcpu SET idx = idx + 0.0 WHERE rowid % 11 = 9",  # a real where the interval's integer is
        "UPDATE task_deltas SET runq_hist = '[[0,1],[63,999999999999999999]]' WHERE rowid % 5 = 0",
        "UPDATE task_deltas SET runq_hist = '[[1,1]' WHERE rowid % 5 = 1",
        "UPDATE task_deltas SET run_ns = NULL, runq_latency_ns = NULL WHERE rowid % 5 = 2",
        "UPDATE task_deltas SET migrations = 1.5 WHERE rowid % 5 = 3",
        "UPDATE task_deltas SET pid = NULL WHERE rowid = 2",
        "UPDATE wakers SET waker_comm = CAST(x'fffe41' AS TEXT), in_interrupt = 2 WHERE rowid % 7 = 0",
        "UPDATE wakers SET exiting = NULL, weighted_ns = NULL, link_func = NULL WHERE rowid % 7 = 1",  # older rows
        "UPDATE wakers SET waker_comm = NULL WHERE rowid % 7 = 2",  # NULL where text is written: damaged
        "UPDATE wakers SET link_func = -1, link_state = 0, link_why = 0 WHERE rowid % 7 = 3",
        "UPDATE wakers SET wakee_why = 'x' WHERE rowid % 7 = 4",
        "UPDATE opened SET kstack = -7 WHERE rowid % 5 = 0",  # unsigned ids
        "UPDATE opened SET since_ns = NULL WHERE rowid % 5 = 1",  # NULL where an integer is written: damaged
        "UPDATE opened SET func = 'f' WHERE rowid % 5 = 2",
        "UPDATE ongoing SET since_ns = NULL WHERE rowid % 3 = 0",  # allowed: an older recording's
        "UPDATE ongoing SET tgid = 1.5 WHERE rowid % 3 = 1",
        "UPDATE oncpu SET comm = CAST(x'ff41' AS TEXT), kstack = -3 WHERE rowid % 5 = 0",  # not UTF-8; unsigned ids
        "UPDATE oncpu SET comm = NULL WHERE rowid % 5 = 1",  # NULL where text is written: damaged
        "UPDATE oncpu SET samples = '3' WHERE rowid % 5 = 2")
    ivs, damaged = _assert_same(bad, monkeypatch)
    assert damaged["offcpu"] > 0 and damaged["task_deltas"] > 0 and damaged["wakers"] > 0 and damaged["opened"] > 0
    assert damaged["oncpu"] > 0
    assert any(o.comm == "\ufffdA" and o.kstack == (1 << 64) - 3 for iv in ivs for o in iv[7])
    offcpu = [o for iv in ivs for o in iv[2]]
    assert any(w.waker_comm == "\ufffd\ufffdA" and w.in_interrupt is True for iv in ivs for w in iv[3])
    assert any(w.link.func == (1 << 64) - 1 for iv in ivs for w in iv[3])
    assert ((1, 2), (3, 4)) in {o.hist for o in offcpu}
    assert (1, 2, 30) in {o.woken for o in offcpu}
    assert any(o.kstack == (1 << 64) - 5 for o in offcpu)


def test_a_file_damaged_under_the_rows_is_an_error_both_ways(report_recording, tmp_path, monkeypatch):
    """A file whose pages are overwritten under the off-CPU rows: SQLite's complaint as the one-line error the
    Python reader gives, not a traceback, from the C reader too."""
    bad = tmp_path / "torn.stall"
    raw = bytearray(report_recording["stall"].read_bytes())
    pages = Recording(str(report_recording["stall"]))
    try:
        size = pages.db.execute("PRAGMA page_size").fetchone()[0]
        first = pages.db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'offcpu'").fetchone()[0]
    finally:
        pages.close()
    for page in range(first, len(raw) // size):  # the table's root and every page after it
        raw[(page - 1) * size:page * size] = b"\x5a" * size
    bad.write_bytes(bytes(raw))
    for c in (True, False):
        with pytest.raises(StallscopeError, match="is damaged"):
            _read(bad, c, monkeypatch)


@pytest.mark.parametrize("ahead", [True, False])
def test_a_file_damaged_under_the_rows_is_an_error_read_ahead_or_not(report_recording, tmp_path, monkeypatch, ahead):
    """SQLite's complaint, met by the thread stepping ahead, is raised where the reader reaches it: the records of
    the rows before it handed out first."""
    from stallscope.analyzer import store

    bad = tmp_path / "torn.stall"
    raw = bytearray(report_recording["stall"].read_bytes())
    rec = Recording(str(report_recording["stall"]))
    try:
        size = rec.db.execute("PRAGMA page_size").fetchone()[0]
        # the leaf pages in the rows' order (dbstat's path: the page's place in the tree), with how many rows each
        leaves = rec.db.execute("SELECT pageno, ncell FROM dbstat WHERE name = 'offcpu' AND pagetype = 'leaf' "
                                "ORDER BY path").fetchall()
        # the rows up to the first interval's last (its waits may be half the recording's: every thread's first)
        first = rec.db.execute("SELECT count(*) FROM offcpu WHERE rowid <= (SELECT max(rowid) FROM offcpu WHERE "
                               "idx = (SELECT min(idx) FROM offcpu))").fetchone()[0]
        last = rec.last_interval_index()
    finally:
        rec.close()
    after, start = [], 0
    for page, cells in leaves:
        if start >= first:
            after.append(page)  # no row of the first interval on it
        start += cells
    if len(after) < 2:
        pytest.skip(f"the off-CPU rows after the first interval's fill {len(after)} page(s), fewer than two")
    for page in after[len(after) // 2:]:  # the later half of the pages after the first interval's rows
        raw[(page - 1) * size:page * size] = b"\x5a" * size
    bad.write_bytes(bytes(raw))
    monkeypatch.setattr(rowread, "READ_AHEAD", ahead)
    rec = Recording(str(bad))
    try:
        rows = rec._stream_c("offcpu", store._OFFCPU_COLUMNS, (0, last), store._offcpu_delta)
        taken = []
        with pytest.raises(StallscopeError, match="is damaged"):
            for idx in range(last + 1):
                taken.append(rows.take(idx))
        assert any(taken)
    finally:
        rec.close()


def test_a_reader_left_midway_ends_its_thread(report_recording, monkeypatch):
    """A reader dropped before its last row (a window no longer wanted) stops the thread stepping ahead of it."""
    import threading
    import time

    from stallscope.analyzer import store

    rec = Recording(str(report_recording["stall"]))
    try:
        began = time.monotonic()
        for _ in range(50):
            rows = rec._stream_c("offcpu", store._OFFCPU_COLUMNS, (0, 1 << 62), store._offcpu_delta)
            assert rows.take(0) is not None
            del rows
        assert time.monotonic() - began < 20
        assert threading.active_count() < 5  # nothing of the C's shows as a Python thread, either
    finally:
        rec.close()
    with open(f"/proc/{os.getpid()}/status") as f:
        threads = int(next(line for line in f if line.startswith("Threads:")).split()[1])
    assert threads < 20, f"{threads} threads left"


def test_without_the_extension_the_python_reader_reads(report_recording, monkeypatch):
    monkeypatch.setattr(rowread, "_rowread", None)
    rec = Recording(str(report_recording["stall"]))
    try:
        assert not rowread.available()
        assert all(sum(len(getattr(iv, t)) for iv in rec.intervals(without=_WITHOUT)) > 100
                   for t in ("tasks", "offcpu", "wakers"))
    finally:
        rec.close()


def test_a_histograms_pairs_are_shared_between_records(report_recording, monkeypatch):
    """A recording's histograms are made of few distinct (slot, count) pairs: each is made once (analyzer/rowread.c
    hist_pair; the pairs of a 10-minute hackbench recording's histograms took 300 MB, one tuple each)."""
    ivs, _ = _assert_same(report_recording["stall"], monkeypatch)
    pairs = [p for iv in ivs for records in (iv[1], iv[2]) for r in records
             for p in (r.runq_hist if hasattr(r, "runq_hist") else r.hist)]
    small = [p for p in pairs if 0 <= p[1] < 1024]  # a count beyond: rare, made each time
    assert len(small) > 1000
    assert len({id(p) for p in small}) == len(set(small))


def test_a_tasks_id_is_made_once(report_recording, monkeypatch):
    """Every row names its task: a table's reader makes each task's TaskId once (analyzer/rowread.c task_of; a
    10-minute hackbench recording's rows named 32,000 tasks a million times), and so do the lock records, with their
    locks' addresses and their stacks' ids."""
    from stallscope.analyzer.load import fold_recording

    ivs, _ = _assert_same(report_recording["stall"], monkeypatch)
    for table in (1, 2):  # task deltas, off-CPU records: a reader each
        tasks = [r.task for iv in ivs for r in iv[table]]
        assert len(tasks) > len(set(tasks))
        assert len({id(t) for t in tasks}) == len(set(tasks))
    rec = Recording(str(report_recording["stall"]))
    try:
        waits = fold_recording(rec).lock_waits
    finally:
        rec.close()
    assert len(waits) > 2 * len({w.task for w in waits})
    assert len({id(w.task) for w in waits}) == len({w.task for w in waits})
    for field in ("addr", "stack_id"):  # a lock's address and a stack's id, likewise
        values = [getattr(w, field) for w in waits]
        assert len(values) > 2 * len(set(values))
        assert len({id(v) for v in values}) == len(set(values))


def test_records_made_in_c_are_the_dataclasses_records():
    """analyzer/sample.py record_maker's records made in C (a plain slot's value stored in it): each class's record
    equals, hashes and reads as the dataclass's own, stays frozen, and holds its values; a field that is not a plain
    slot (a class without slots, a property of that name in a subclass) is set as object.__setattr__ sets it."""
    import dataclasses

    from stallscope.analyzer import model, sample

    assert sample._Maker is not None, "the extension is built by `make install`"
    classes = [c for c in vars(sample).values() if dataclasses.is_dataclass(c) and isinstance(c, type)]
    classes += [model.StackWait, model.TaskTotals, model.LockWaits]
    made = 0
    for cls in classes:
        fields = dataclasses.fields(cls)
        if not all(f.init for f in fields):
            continue
        values = [object() if f.name != "task" else sample.TaskId(7, 9) for f in fields]
        ours = sample.record_maker(cls)(*values)
        theirs = cls(*values)
        assert type(ours) is cls and all(getattr(ours, f.name) is v for f, v in zip(fields, values)), cls
        assert ours == theirs and hash(ours) == hash(theirs), cls
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(ours, fields[0].name, 1)
        made += 1
    assert made >= 10

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int
        b: str

    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        a: int
        b: str

    class Shadowed(Slotted):
        __slots__ = ()
        seen: list = []

        @property
        def b(self):
            return "shadowed"

        @b.setter
        def b(self, value):
            Shadowed.seen.append(value)

    assert sample.record_maker(NoSlots)(1, "x") == NoSlots(1, "x")
    assert sample.record_maker(NoSlots)(1, "x").__dict__ == {"a": 1, "b": "x"}
    shadowed = sample._Maker(Shadowed, ("a", "b"))(2, "y")
    assert (shadowed.a, shadowed.b, Shadowed.seen) == (2, "shadowed", ["y"])
    assert sample._Maker(Slotted, ("a", "b"))(3, "z") == Slotted(3, "z")
