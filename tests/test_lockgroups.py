"""A model's kernel lock records grouped into lock_stat rows in C (analyzer/lockgroups.c) are grouped as the Python
groups them: the same rows in the same order, the same sums of the same types, the same record naming each row, the
same contention points; where the C declines (numbers beyond 64 bits, records that are not LockWaits) the Python
does the whole; a real recording's lock table is the same either way."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stallscope.analyzer import locks as L
from stallscope.analyzer.model import LockWaits
from stallscope.analyzer.sample import (
    SHARABLE, STACK_FAILED, STACK_NONE, STACK_NOT_DRAWN, STACK_OWN, STACK_RATE_LIMITED, Frame, Stack, TaskId,
)

C = L._lockgroups
pytestmark = pytest.mark.skipif(C is None, reason="analyzer/_lockgroups is built by `make install`")

_TASKS = [TaskId(p, 1000 + p) for p in range(1, 6)]


def _frame(symbol: str | None, offset: int = 0x10) -> Frame:
    return Frame(0xffffffff81000000, symbol, offset, "kernel", None, None, "kernel")


_STACKS = [
    None,
    Stack(16, "kernel", ()),  # walked, no frame
    Stack(17, "kernel", (_frame("_raw_spin_lock"), _frame("futex_wake"), _frame("do_futex"))),
    Stack(18, "kernel", (_frame("rwsem_down_read_slowpath"), _frame("do_user_addr_fault", 0))),
    Stack(19, "kernel", (_frame("queued_spin_lock_slowpath"),)),  # only lock-internal frames
]
_NO_STACK_IDS = [STACK_NONE, STACK_RATE_LIMITED, STACK_FAILED, STACK_OWN, STACK_NOT_DRAWN, 99]
_small = st.integers(min_value=-3, max_value=10**6)
_big = st.one_of(_small, st.integers(min_value=2**62, max_value=2**70))  # beyond 64 bits, summed or not


@st.composite
def _wait(draw, ints=_small):
    stack = draw(st.sampled_from(_STACKS))
    return LockWaits(
        task=draw(st.sampled_from(_TASKS)), tgid=1, addr=draw(st.sampled_from([0x1000, 0x2000, 0x3000])),
        flags=draw(st.sampled_from([0, L.LCB_F_SPIN, L.LCB_F_MUTEX, L.LCB_F_READ, L.LCB_F_WRITE])), kind=0,
        cache=draw(st.sampled_from(["", "inode_cache"])), stack=stack,
        stack_id=stack.id if stack is not None else draw(st.sampled_from(_NO_STACK_IDS)),
        count=draw(ints), total_ns=draw(ints), max_ns=draw(ints), min_ns=draw(st.one_of(st.just(0), ints)),
        spin_ns=draw(ints), sleep_ns=draw(ints), owner_pid=draw(st.sampled_from([0, 0, 7])),
        owner_comm=draw(st.sampled_from(["", "kworker/0:1"])), blocked_ns=draw(st.one_of(st.just(-1), ints)),
        runnable_ns=draw(st.one_of(st.just(-1), ints)), weighted_ns=draw(ints),
        field=draw(st.sampled_from(["", "", "inode.i_rwsem"])), object=draw(st.sampled_from(["", "", "/tmp"])))


def _plain(groups: dict) -> list:
    """Each row's list as comparable data, with its values' types: 1 and True are equal and must not pass for each
    other; the naming record by identity (which one names the row, not an equal one)."""
    def typed(v):
        return (type(v).__name__, v)

    out = []
    for key, g in groups.items():
        callers = g[7]
        out.append((key, id(g[0]), [typed(v) for v in g[1:7]],
                    ({p: [typed(x) for x in e] for p, e in callers.drawn.items()}, [typed(x) for x in callers.undrawn],
                     {p: [typed(x) for x in e] for p, e in callers.alone.items()}),
                    g[8], [typed(v) for v in g[9:13]], [(a, typed(w), typed(ns)) for a, (w, ns) in g[13].items()]))
    return out


def _c(waits, tasks):
    return C.lock_groups(waits, tasks, LockWaits, {}, L.lock_type, {}, L._point_of, SHARABLE, L.NO_STACK_LABELS,
                         L.LOST_STACK, L._Callers)


@settings(max_examples=400, deadline=None)
@given(st.lists(_wait(), max_size=40), st.one_of(st.none(), st.sets(st.sampled_from(_TASKS))))
def test_records_are_grouped_alike(waits, tasks):
    in_c = _c(tuple(waits), tasks)
    assert in_c is not None
    py = L.py_kernel_groups(waits, tasks)
    assert list(in_c) == list(py)  # the rows in the order first met, which the table keeps for its ties
    assert _plain(in_c) == _plain(py)
    # and what the rows come to
    assert [g[7].result(g[12]) for g in in_c.values()] == [g[7].result(g[12]) for g in py.values()]


@settings(max_examples=200, deadline=None)
@given(st.lists(_wait(_big), max_size=12))
def test_numbers_beyond_64_bits_are_grouped_by_the_python(waits):
    in_c = _c(waits, None)
    py = L.py_kernel_groups(waits, None)
    if in_c is not None:  # declined only where a number or a sum does not fit
        assert _plain(in_c) == _plain(py)
    else:
        assert any(abs(v) >= 2**62 for w in waits for v in (w.count, w.total_ns, w.max_ns, w.min_ns, w.spin_ns,
                                                             w.sleep_ns, w.blocked_ns, w.runnable_ns))
    assert _plain(L.kernel_groups(waits, None)) == _plain(py)


def test_other_records_are_grouped_by_the_python():
    @dataclass(frozen=True)
    class Like:  # a record with the fields, without slots
        task: TaskId
        addr: int
        flags: int
        stack: Stack | None
        stack_id: int
        count: int
        total_ns: int
        max_ns: int
        min_ns: int
        spin_ns: int
        sleep_ns: int
        owner_pid: int
        owner_comm: str
        blocked_ns: int
        runnable_ns: int
        weighted_ns: int
        field: str
        object: str

    like = Like(_TASKS[0], 0x1000, 0, None, STACK_NOT_DRAWN, 2, 30, 20, 10, 0, 30, 0, "", 30, 0, 0, "", "")
    real = LockWaits(_TASKS[1], 1, 0x1000, 0, 0, "", None, STACK_NOT_DRAWN, 1, 5, 5, 5, 0, 5)
    assert _c([real, like], None) is None
    assert L.kernel_groups([real, like], None)[(("addr", 0x1000), "semaphore")][1] == 3
    with pytest.raises(AttributeError):  # a record with a field unset fails as the Python's would
        _c([object.__new__(LockWaits)], None)
    with pytest.raises(TypeError):
        C.lock_groups((), None)


def test_the_lock_table_takes_the_c_loop_where_built(monkeypatch):
    calls = []
    monkeypatch.setattr(L, "_lockgroups", type("Spy", (), {
        "lock_groups": staticmethod(lambda *a: calls.append(len(a[0])) or C.lock_groups(*a))}))
    real = LockWaits(_TASKS[1], 1, 0x1000, 0, 0, "", None, STACK_NOT_DRAWN, 1, 5, 5, 5, 0, 5)
    assert L.kernel_groups([real, real], None)[(("addr", 0x1000), "semaphore")][1] == 2
    assert calls == [2]


def test_a_real_recordings_lock_table_is_the_same_grouped_in_python(report_recording, monkeypatch):
    from stallscope.analyzer.load import fold_recording
    from stallscope.analyzer.store import Recording

    rec = Recording(str(report_recording["stall"]))
    try:
        model = fold_recording(rec)
    finally:
        rec.close()
    waits = model.lock_waits
    assert len(waits) > 100
    in_c = _c(waits, None)
    assert in_c is not None and len(in_c) > 3
    assert _plain(in_c) == _plain(L.py_kernel_groups(waits, None))
    rows = L._kernel_lock_stats(model, None, L._comm_of(model))
    monkeypatch.setattr(L, "_lockgroups", None)
    assert L._kernel_lock_stats(model, None, L._comm_of(model)) == rows


_SITE_STACKS = [
    Stack(0x81, "kernel", (_frame("rwsem_down_read_slowpath"), _frame("down_read"), _frame("some_fs_op"))),
    Stack(0x82, "kernel", (_frame("mutex_lock"), _frame("some_fs_op"))),
    Stack(0x83, "kernel", (_frame("_raw_spin_lock"), _frame("some_fs_op"))),
    Stack(0x84, "kernel", (_frame("down_write"), _frame("other_fs_op", 0x20))),
    Stack(0x85, "kernel", ()),
]
_FLAGS = [0, L.LCB_F_SPIN, L.LCB_F_SPIN | L.LCB_F_READ, L.LCB_F_MUTEX, L.LCB_F_READ, L.LCB_F_WRITE,
          L.LCB_F_PERCPU | L.LCB_F_WRITE, L.LCB_F_RT]


@st.composite
def _lock_record(draw):
    from stallscope.analyzer.sample import LockDelta

    stack = draw(st.sampled_from(_SITE_STACKS + [None]))
    total = draw(st.integers(min_value=0, max_value=10**6))
    return LockDelta(draw(st.sampled_from(_TASKS)), 1, draw(st.sampled_from([0x1000, 0x2000, 0x3000])),
                     stack.id if stack is not None else draw(st.sampled_from(_NO_STACK_IDS)),
                     draw(st.sampled_from(_FLAGS)), 0, draw(st.integers(min_value=1, max_value=9)), total,
                     total, 1, 0, total, field=draw(st.sampled_from(["", "", "inode.i_rwsem"])),
                     symbol=draw(st.sampled_from(["", "", "some_lock"])))


def _lazy_models(records_by_interval: list[list]) -> tuple:
    """Two models of the same intervals, their lock tables folded when first read (as a live view's are)."""
    from stallscope.analyzer.model import Model
    from synthetic import interval, meta

    ivs = [interval(i, locks=tuple(recs)) for i, recs in enumerate(records_by_interval)]
    stacks = {s.id: s for s in _SITE_STACKS}
    return tuple(Model.from_intervals(meta(), ivs, {}, stacks, lazy=True) for _ in range(2))


def _one_address():
    """A spinning lock named by its variable, and a sleeping one at the same address (its memory freed and used
    again) named by nothing (its heaviest walked wait has no frame) though a lighter one was walked at a call site."""
    from stallscope.analyzer.sample import LockDelta

    return [[LockDelta(_TASKS[0], 1, 0x1000, 0x83, L.LCB_F_SPIN, 0, 5, 500, 500, 1, 500, 0, symbol="some_lock"),
             LockDelta(_TASKS[1], 1, 0x1000, 0x85, L.LCB_F_READ, 0, 5, 900, 900, 1, 0, 900),
             LockDelta(_TASKS[2], 1, 0x1000, 0x81, L.LCB_F_READ, 0, 1, 100, 100, 1, 0, 100)]]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_lock_record(), max_size=12), min_size=1, max_size=3))
@example(_one_address())
def test_the_sleeping_locks_call_sites_are_named_alike_from_their_records_alone(records):
    """locks_by_site folds only the sleeping locks' records where the lock table is not folded yet (a live ranking,
    beside thousands of spinning lock records an interval): the same sites and causes as from the whole table, which
    is then left unfolded; LockFolded.only takes a type's rows as the whole table holds them, folded or not."""
    alone, whole = _lazy_models(records)
    rows = L.lock_stats(whole, kind="kernel")  # the whole table first: the sites from its rows
    assert L.locks_by_site(alone) == L.locks_by_site(whole)
    assert alone.lock_waits._items is None  # never folded whole
    sleeping = tuple(w for w in whole.lock_waits if L._sleeping(w.flags))
    assert alone.lock_waits.only(L._sleeping) == sleeping == whole.lock_waits.only(L._sleeping)
    assert {s.type for s in rows if s.type in L._SLEEPING} == {L.lock_type(w.flags) for w in sleeping}

