"""The scheduler collector's deltas from cumulative map entries, with the maps faked (no BPF needed)."""

from __future__ import annotations

import ctypes
import random

import pytest

from stallscope.bpf import abi, collector, task_dump
from stallscope.analyzer.sample import OngoingWait, TaskId


def _raw(s) -> bytes:
    return bytes(memoryview(s).cast("B"))


class FakeMap:
    def __init__(self, items):
        self.items = list(items)
        self.deleted: list[bytes] = []

    def items_batch(self):
        return list(self.items)

    def lookup(self, key: bytes, value_size: int | None = None):
        return dict(self.items).get(key)

    def delete(self, key: bytes) -> None:
        self.deleted.append(key)
        self.items = [(k, v) for k, v in self.items if k != key]

    def delete_many(self, keys) -> None:
        for key in keys:
            self.delete(key)


class FakeDump:
    """dump_tasks: the waits in progress, then the live tasks' entries, each as its key then its value,
    every record after its header."""

    def __init__(self, items, opened=()):
        self.data = b"".join(_raw(abi.DumpHeader(kind=abi.DUMP_OPEN, size=len(_raw(o)))) + _raw(o) for o in opened)
        self.data += b"".join(_raw(abi.DumpHeader(kind=abi.DUMP_TASK, size=len(k + v))) + k + v for k, v in items)

    def read(self) -> bytes:
        return self.data


class FakeObj:
    def __init__(self, dump: FakeDump, **maps):
        # no migrations unless a test fakes them (the matrix is read right after the task dump)
        self.dump, self.maps = dump, {"migration_matrix": FakeMap([]), "runq_by_cpu": FakeMap([]), **maps}

    def map(self, name):
        return self.maps[name]


class NoSymbols:
    def remember(self, *_args):
        return True


def _entries(switches: dict[int, int], flags: dict[int, int] | None = None, dumped=None) -> FakeObj:
    """One thread per pid with `switches` voluntary switches, one off-CPU entry and one waker entry each.
    The task dump holds the live threads in `dumped` (all by default): those an event changed."""
    live, final, offcpu, wakers = [], [], [], []
    for pid, n in switches.items():
        v = abi.TaskStats(tgid=500, nvcsw=n, flags=abi.TS_BASE_EXACT | (flags or {}).get(pid, 0))
        v.comm = b"idle"
        item = (_raw(abi.TaskKey(pid=pid, start_ns=pid)), _raw(v))
        if v.flags & abi.TS_DEAD:
            final.append(item)
        elif dumped is None or pid in dumped:
            live.append(item)
        ov = abi.OffcpuVal(count=n, total_ns=1000 * n)
        ov.hist[9] = n
        offcpu.append((_raw(abi.OffcpuKey(pid=pid, start_ns=pid, tgid=500, state=1, kstack=99, ustack=98)), _raw(ov)))
        wakers.append((_raw(abi.WakerKey(pid=pid, start_ns=pid, waker_pid=0)), _raw(abi.WakerVal(count=n, total_ns=7 * n))))
    return FakeObj(FakeDump(live), task_final=FakeMap(final), offcpu=FakeMap(offcpu), wakers=FakeMap(wakers))


def _drain(c, obj):
    c._dump = obj.dump
    tasks, infos, dead = c._drain_tasks(obj)
    return tasks, infos, dead, c._drain_offcpu(obj, dead) + c._take_task_waits(), c._drain_wakers(obj, dead)


@pytest.fixture(params=["c", "python"])
def sched(monkeypatch, request):
    """A scheduler collector over faked maps, its dump's entries scanned in C (analyzer/rowread.c scan_dump) or
    in Python (py_scan_dump): each test runs both ways."""
    monkeypatch.setattr(collector, "process_cgroup", lambda tgid: None)
    if request.param == "python":
        monkeypatch.setattr(collector, "_c_scan_dump", None)
    else:
        assert collector._c_scan_dump is not None, "the extension is built by `make install`"
    return collector.SchedCollector(collector.SchedOptions(), NoSymbols())


def test_sleeping_threads_give_no_deltas_and_their_values_are_not_decoded(sched, monkeypatch):
    """10,000 idle threads: the dump leaves out the tasks no event changed, and the maps' entries
    unchanged since the last drain are compared as bytes, not decoded."""
    sched_before = {pid: 3 for pid in range(1, 6)}
    tasks, infos, _, offcpu, wakers = _drain(sched, _entries(sched_before))
    assert len(tasks) == len(infos) == len(offcpu) == len(wakers) == 5
    decoded = []
    real = task_dump.values_of
    monkeypatch.setattr(task_dump, "values_of", lambda raw: decoded.append(abi.TaskStats) or real(raw))
    setup = collector._SCAN_SETUP
    if setup is not None:  # the C scan's own unpack
        monkeypatch.setattr(collector, "_SCAN_SETUP", (setup[0], lambda raw: decoded.append(abi.TaskStats) or real(raw),
                                                       *setup[2:]))

    class Counted:  # the maps' values are read with struct unpackers, not decoded into ctypes
        def __init__(self, name):
            self.name, self.real = name, getattr(collector, name)

        def unpack(self, raw):
            decoded.append(self.name)
            return self.real.unpack(raw)

    for name in ("_OFFCPU_VAL", "_WAKER_VAL"):
        monkeypatch.setattr(collector, name, Counted(name))
    tasks, infos, _, offcpu, wakers = _drain(sched, _entries({**sched_before, 3: 7}, dumped={3}))
    assert [d.task for d in tasks] == [TaskId(3, 3)] and tasks[0].voluntary_switches == 4
    assert [(o.count, o.total_ns, o.hist) for o in offcpu] == [(4, 4000, ((9, 4),))]
    assert [(w.count, w.total_ns) for w in wakers] == [(4, 28)]
    assert infos == ()
    assert decoded.count(abi.TaskStats) == 1  # only the thread that ran
    # its new value, and its previous one from the bytes kept (only bytes are kept: a third of the memory)
    assert decoded.count("_OFFCPU_VAL") == 2 and decoded.count("_WAKER_VAL") == 2


def test_a_thread_that_exits_is_reported_once_and_its_entries_deleted(sched):
    obj = _entries({1: 2, 2: 2})
    _drain(sched, obj)
    obj = _entries({1: 2, 2: 5}, flags={2: abi.TS_DEAD})
    tasks, infos, dead, offcpu, wakers = _drain(sched, obj)
    assert dead == {TaskId(2, 2)} and [t.flags & abi.TS_DEAD for t in infos] == [abi.TS_DEAD]
    assert tasks[0].voluntary_switches == 3 and offcpu[0].count == 3 and wakers[0].count == 3
    assert len(obj.map("task_final").deleted) == len(obj.map("offcpu").deleted) == len(obj.map("wakers").deleted) == 1
    assert _drain(sched, _entries({1: 2}))[0] == ()


def _with_slots(pid: int, slots: list[tuple[int, int, int, int, int]], flags: int = 0) -> FakeObj:
    """One thread whose waits without stacks sit in its own slots: (kstack, ustack, state, count, total_ns)."""
    v = abi.TaskStats(tgid=500, nvcsw=sum(s[3] for s in slots), flags=abi.TS_BASE_EXACT | flags)
    for i, (kstack, ustack, state, count, total) in enumerate(slots):
        sl = v.slots[i]
        sl.kstack, sl.ustack, sl.state, sl.used = kstack, ustack, state, 1
        sl.val.count, sl.val.total_ns = count, total
        sl.val.hist[10] = count
    item = (_raw(abi.TaskKey(pid=pid, start_ns=pid)), _raw(v))
    live, final = ([], [item]) if flags & abi.TS_DEAD else ([item], [])
    return FakeObj(FakeDump(live), task_final=FakeMap(final), offcpu=FakeMap([]), wakers=FakeMap([]))


def test_waits_kept_in_a_tasks_own_slots_come_out_as_offcpu_deltas(sched):
    """Waits without stacks never reach the offcpu map: the task's slots give the same deltas."""
    rl = 2  # STACK_RATE_LIMITED
    _, _, _, offcpu, _ = _drain(sched, _with_slots(7, [(rl, rl, 1, 4, 4000)]))
    assert [(o.task, o.state, o.kstack, o.ustack, o.count, o.total_ns, o.hist) for o in offcpu] == \
        [(TaskId(7, 7), 1, rl, rl, 4, 4000, ((10, 4),))]
    # a second key claims the next slot; the first key's delta is only what was added
    _, _, _, offcpu, _ = _drain(sched, _with_slots(7, [(rl, rl, 1, 6, 5000), (1, rl, 2, 1, 50)]))
    assert [(o.state, o.kstack, o.count, o.total_ns, o.hist) for o in offcpu] == \
        [(1, rl, 2, 1000, ((10, 2),)), (2, 1, 1, 50, ((10, 1),))]
    # the final record of a dead thread gives its last waits, then nothing is kept of it
    _, _, dead, offcpu, _ = _drain(sched, _with_slots(7, [(rl, rl, 1, 7, 5100), (1, rl, 2, 1, 50)], abi.TS_DEAD))
    assert dead == {TaskId(7, 7)} and [(o.count, o.total_ns) for o in offcpu] == [(1, 100)]
    assert TaskId(7, 7) not in sched._prev_tasks


class CallsRecorded:
    def __init__(self):
        self.calls: list[tuple] = []

    def remember(self, *args):
        self.calls.append(("remember", *args))
        return True

    def remember_fork(self, *args):
        self.calls.append(("remember_fork", *args))
        return True

    def process(self, tgid: int, start_ns: int):
        calls = self.calls

        class Maps:
            def refresh(self, force=False):
                calls.append(("refresh", tgid, start_ns, force))

        return Maps()


def _process(pid: int, ptgid: int, flags: int) -> tuple[bytes, bytes]:
    v = abi.TaskStats(tgid=pid, ptgid=ptgid, flags=abi.TS_BASE_EXACT | flags)
    v.comm = b"worker"
    return _raw(abi.TaskKey(pid=pid, start_ns=pid)), _raw(v)


def _thread(pid: int, tgid: int, start_ns: int, comm: bytes = b"worker", flags: int = 0) -> tuple[bytes, bytes]:
    v = abi.TaskStats(tgid=tgid, ptgid=1, flags=abi.TS_BASE_EXACT | flags, nvcsw=3)
    v.comm = comm
    return _raw(abi.TaskKey(pid=pid, start_ns=start_ns)), _raw(v)


def test_processes_first_seen_after_the_first_dump_are_remembered_once_with_their_leaders_start(monkeypatch):
    """A later dump's new process is remembered once, after the dump is read, with its leader's start even where
    a thread's entry comes before the leader's; a leader whose name changed (an exec) has its maps read again."""
    monkeypatch.setattr(collector, "process_cgroup", lambda tgid: None)
    symbols = CallsRecorded()
    c = collector.SchedCollector(collector.SchedOptions(), symbols)

    def drain(*entries):
        obj = FakeObj(FakeDump(list(entries)), task_final=FakeMap([]))
        c._dump = obj.dump
        return c._drain_tasks(obj)

    drain(_thread(500, 500, 50))
    assert symbols.calls == [("remember", 500, 50)]
    symbols.calls.clear()
    _tasks, infos, _dead = drain(_thread(702, 700, 72), _thread(700, 700, 70), _thread(701, 700, 71),
                                 _thread(500, 500, 50, comm=b"renamed"))
    assert symbols.calls == [("refresh", 500, 50, True), ("remember", 700, 70)]
    assert [(i.task.pid, i.comm) for i in infos] == [(702, "worker"), (700, "worker"), (701, "worker"), (500, "renamed")]
    assert c._leader_start == {500: 50, 700: 70}


@pytest.mark.parametrize("renames_seen", [True, False])
def test_a_child_forked_while_watched_takes_its_parents_maps_unless_it_was_renamed(monkeypatch, renames_seen):
    """A fork copies the address space: a new process with no rename (no exec) since is named from
    its parent's maps. One renamed, one that existed before the probes, or any process where the
    rename tracepoint is missing (TS_RENAMED never set) reads its own."""
    monkeypatch.setattr(collector, "process_cgroup", lambda tgid: None)
    symbols = CallsRecorded()
    c = collector.SchedCollector(collector.SchedOptions(), symbols)
    c._renames_seen = renames_seen
    obj = FakeObj(FakeDump([_process(500, 1, 0), _process(600, 500, abi.TS_NEW),
                            _process(601, 500, abi.TS_NEW | abi.TS_RENAMED), _process(602, 999, abi.TS_NEW)]),
                  task_final=FakeMap([]))
    c._dump = obj.dump
    c._drain_tasks(obj)
    forked = ("remember_fork", 600, 600, 500, 500)
    # the first dump's processes are remembered after it, each parent before its children
    assert symbols.calls == [("remember", 500, 500), ("remember", 602, 602),
                             forked if renames_seen else ("remember", 600, 600), ("remember", 601, 601)]


def test_a_process_found_running_takes_its_parents_maps_when_its_image_is_its_parents(monkeypatch):
    """The first dump finds the machine's processes (a hackbench loop's 400 forks among them). One forked from a
    process read already, with its image where its parent's is (no exec since), takes its parent's maps; one
    whose image moved (an exec), one whose image cannot be read (gone, or a kernel thread) and one whose
    parent is not read read their own. Parents come first whatever the dump's order. A later dump's first sight of
    a process that was there before the probes (runnable since, never switched out) is judged alike."""
    monkeypatch.setattr(collector, "process_cgroup", lambda tgid: None)
    images = {500: (1, 2, 3, 4, 5), 600: (1, 2, 3, 4, 5), 601: (9, 2, 3, 4, 5), 602: None, 603: (1, 2, 3, 4, 5),
              700: (1, 2, 3, 4, 5)}
    asked = []
    monkeypatch.setattr(collector, "process_image", lambda pid: asked.append(pid) or images.get(pid))
    symbols = CallsRecorded()
    c = collector.SchedCollector(collector.SchedOptions(), symbols)
    c._renames_seen = True
    # the children before their parent, as a hash map's order may have them
    obj = FakeObj(FakeDump([_process(600, 500, 0), _process(601, 500, 0), _process(602, 500, 0),
                            _process(603, 600, 0), _process(500, 1, 0), _process(700, 999, 0)]),
                  task_final=FakeMap([]))
    c._dump = obj.dump
    c._drain_tasks(obj)
    assert symbols.calls == [("remember", 500, 500), ("remember", 700, 700), ("remember_fork", 600, 600, 500, 500),
                             ("remember", 601, 601), ("remember", 602, 602), ("remember_fork", 603, 603, 600, 600)]
    assert asked.count(500) == 1  # a parent's image read once for all its children
    # processes first seen in a later dump, there before the probes (runnable, never switched out until then): one
    # with its parent's image takes its parent's maps, one whose image moved reads its own; a fork seen (TS_NEW)
    # asks no image
    images.update({800: (1, 2, 3, 4, 5), 801: (7, 7, 7, 7, 7), 802: (7, 7, 7, 7, 7)})
    c._index, asked[:] = 1, []
    later = FakeObj(FakeDump([_process(801, 500, 0), _process(800, 500, 0), _process(802, 500, abi.TS_NEW)]),
                    task_final=FakeMap([]))
    c._dump = later.dump
    c._drain_tasks(later)
    assert symbols.calls[-3:] == [("remember", 801, 801), ("remember_fork", 800, 800, 500, 500),
                                  ("remember_fork", 802, 802, 500, 500)]
    assert sorted(asked) == [500, 800, 801]  # the parent's image read once in this dump too


def test_a_wait_in_progress_is_charged_at_each_dump_to_its_key_and_its_task(sched):
    """A task blocked across intervals: each dump hands over the part of its wait since the last one
    (OpenWait.charged_ns), so a thread's blocked time never piles into the interval where the wait ends.
    The part goes to the wait's key (count 0: the wait has not ended) and to the task's total; a task
    whose entry came in the same dump has the part in its totals already."""
    def open_wait(pid, charged):
        return abi.OpenWait(pid=pid, tgid=500, start_ns=pid, charged_ns=charged, open_ns=5 * charged, kstack=3,
                            ustack=3, state=2, why=0, func=0)

    v = abi.TaskStats(tgid=500, nvcsw=1, flags=abi.TS_BASE_EXACT)
    v.comm = b"blocked"
    entry = (_raw(abi.TaskKey(pid=8, start_ns=8)), _raw(v))
    first = FakeObj(FakeDump([entry], opened=[open_wait(8, 700)]), task_final=FakeMap([]), offcpu=FakeMap([]),
                    wakers=FakeMap([]))
    tasks, _, _, offcpu, _ = _drain(sched, first)
    assert [(o.task, o.count, o.total_ns, o.charged_ns, o.state) for o in offcpu] == [(TaskId(8, 8), 0, 0, 700, 2)]
    assert [t.task for t in tasks] == [TaskId(8, 8)]  # its own entry carries the part: no second delta
    # the next dump: no event touched the task (still asleep), only the wait's new part arrives
    second = FakeObj(FakeDump([], opened=[open_wait(8, 1000)]), task_final=FakeMap([]), offcpu=FakeMap([]),
                     wakers=FakeMap([]))
    tasks, _, _, offcpu, _ = _drain(sched, second)
    assert [(o.count, o.charged_ns) for o in offcpu] == [(0, 1000)]
    assert [(t.task, t.offcpu_ns) for t in tasks] == [(TaskId(8, 8), 1000)]


class Clock:
    """CLOCK_MONOTONIC as the dump's instants read it: moved on by hand."""

    def __init__(self, monkeypatch, ns: int):
        self.ns = ns
        real = collector.time.clock_gettime_ns
        monkeypatch.setattr(collector.time, "clock_gettime_ns",
                            lambda clk: self.ns if clk == collector.time.CLOCK_MONOTONIC else real(clk))


def _dump(entries=(), opened=()) -> FakeObj:
    """A task dump of these task entries and open_wait records, the maps empty."""
    return FakeObj(FakeDump(list(entries), opened=list(opened)), task_final=FakeMap([]), offcpu=FakeMap([]),
                   wakers=FakeMap([]))


def _asleep(pid: int, offcpu_ns: int) -> tuple[bytes, bytes]:
    """A thread's entry: blocked `offcpu_ns` in all."""
    v = abi.TaskStats(tgid=500, nvcsw=1, flags=abi.TS_BASE_EXACT, offcpu_ns=offcpu_ns)
    v.comm = b"asleep"
    return _raw(abi.TaskKey(pid=pid, start_ns=pid)), _raw(v)


def test_a_wait_carried_on_by_the_dump_is_charged_the_time_between_dumps_under_the_key_it_was_handed_over(
        sched, monkeypatch):
    """A thread asleep for three intervals: the first dump hands its wait over (its part so far, under its
    key); the next two carry it on without any record (the thread is neither read nor written), each
    charging it the time between the two dumps; when it wakes, its task's delta holds only what came after
    the last dump, not again what was carried."""
    clock = Clock(monkeypatch, 10_000)
    key = OngoingWait(TaskId(8, 8), 500, 2, 3, 4, 0, 0)
    handed = abi.OpenWait(pid=8, tgid=500, start_ns=8, charged_ns=700, open_ns=700, kstack=3, ustack=4, state=2)
    tasks, _, _, offcpu, _ = _drain(sched, _dump([_asleep(8, 700)], [handed]))  # blocked 700 ns before the first dump
    assert [(o.task, o.charged_ns, o.kstack, o.ustack) for o in offcpu] == [(key.task, 700, 3, 4)]
    assert sched._ongoing == ()
    for span in (1_000, 2_500):
        clock.ns += span
        tasks, _, _, offcpu, _ = _drain(sched, _dump())
        assert (tasks, offcpu) == ((), ())  # nothing read: the wait carried on
        assert (sched._ongoing, sched._ongoing_ns) == ((key,), span)
    clock.ns += 300
    # woken 100 ns after the last dump: its totals hold the carried time, and the 100 ns since
    tasks, _, _, offcpu, _ = _drain(sched, _dump([_asleep(8, 700 + 1_000 + 2_500 + 100)]))
    assert [(t.task, t.offcpu_ns) for t in tasks] == [(key.task, 100)]
    assert sched._ongoing == ()  # its entry came: its wait is no longer carried on


def test_a_wait_handed_over_again_as_its_stack_is_walked_charges_its_task_nothing_twice(sched, monkeypatch):
    """A long wait gets its stack walked by a later dump: its key changes, so that dump hands it over again
    (with that dump's part) though its task is not read; the time carried on before is in the task's totals,
    and the task's next delta does not count it again."""
    clock = Clock(monkeypatch, 10_000)

    def wait(charged, kstack):
        return abi.OpenWait(pid=9, tgid=500, start_ns=9, charged_ns=charged, kstack=kstack, ustack=4, state=2)

    _drain(sched, _dump([_asleep(9, 50)], [wait(50, collector.abi.STACK_NOT_DRAWN)]))
    clock.ns += 1_000
    _drain(sched, _dump())  # carried: 1,000
    clock.ns += 2_000
    tasks, _, _, offcpu, _ = _drain(sched, _dump(opened=[wait(2_000, 77)]))  # walked: handed over again
    assert [(o.kstack, o.charged_ns) for o in offcpu] == [(77, 2_000)]
    assert [(t.task, t.offcpu_ns) for t in tasks] == [(TaskId(9, 9), 2_000)]
    assert sched._ongoing == ()
    clock.ns += 500
    _drain(sched, _dump())
    assert [w.kstack for w in sched._ongoing] == [77] and sched._ongoing_ns == 500
    clock.ns += 10
    tasks, *_ = _drain(sched, _dump([_asleep(9, 50 + 1_000 + 2_000 + 500 + 5)]))
    assert [t.offcpu_ns for t in tasks] == [5]


def test_when_the_two_sides_count_different_waits_carried_on_it_is_counted_and_the_next_dump_hands_all_over(
        sched, monkeypatch):
    """The dump counts the waits it carried on (sched_health.open_carried); this side charges those it
    thinks were. A difference (a task gone without its final switch) is inconsistent data, counted, and
    the next dump is asked to carry nothing on (its last instant given as 0), so the table is made anew."""
    clock = Clock(monkeypatch, 10_000)
    sched._ongoing = (OngoingWait(TaskId(8, 8), 500, 2, 3, 4, 0, 0),)
    health = {"open_carried": 0, "waits_drawn": 3}
    sched._dump_clock = 5_000
    sched._check_carried(health)
    assert health == {"waits_drawn": 3, "open_carried_mismatch": 1}
    sched._task_entries(FakeObj(FakeDump([]), task_final=FakeMap([])))
    assert sched._span_ns == 0 and sched._dump_clock == clock.ns
    health = {"open_carried": 1}
    sched._check_carried(health)
    assert health == {}


def test_a_waker_entry_goes_when_its_waker_dies_as_no_dead_task_wakes_anybody(sched):
    """A long-lived thread woken by short-lived processes (clients, hackbench's senders) had an entry
    per waker for as long as it lived: the entry goes, after its last read, once its waker is dead."""
    def waker_entry(waker: int, n: int):
        return (_raw(abi.WakerKey(pid=8, start_ns=8, waker_pid=waker, waker_start_ns=waker, waker_tgid=waker)),
                _raw(abi.WakerVal(count=n, total_ns=10 * n)))

    wakers = FakeMap([waker_entry(40, 1), waker_entry(41, 1)])
    obj = FakeObj(FakeDump([]), task_final=FakeMap([]), offcpu=FakeMap([]), wakers=wakers)
    assert sorted(w.waker.pid for w in sched._drain_wakers(obj, set())) == [40, 41]
    # 40's final switch was seen; its entry changed once more before (a last wakeup, read now)
    wakers.items = [waker_entry(40, 2), waker_entry(41, 1)]
    out = sched._drain_wakers(obj, {TaskId(40, 40)})
    assert [(w.waker.pid, w.count) for w in out] == [(40, 1)]
    assert [k for k, _ in wakers.items] == [waker_entry(41, 1)[0]]
    # an unchanged entry goes too, without a delta
    assert sched._drain_wakers(obj, {TaskId(41, 41)}) == ()
    assert wakers.items == [] and len(sched._waker_diff) == 0


class StackMap:
    """A content-addressed stack map: the kernel re-adds a stack each time it is walked."""

    def __init__(self):
        self.stored: dict[bytes, bytes] = {}

    def walk(self, sid: int) -> None:
        self.stored.setdefault(sid.to_bytes(8, "little"), _raw(abi.Stack()))

    def lookup(self, key: bytes):
        return self.stored.get(key)

    def delete_many(self, keys) -> None:
        for key in keys:
            self.stored.pop(key, None)


class KernelOnly:
    def stack(self, kind, tgid, start, ips):
        return ()


def test_the_stack_ids_kept_stay_bounded_as_processes_come_and_go_and_a_stack_in_use_is_copied_once():
    """Each new process brings user stacks of its own (its addresses differ): the ids copied were kept
    for ever, one more set entry per stack for the whole recording. Now they turn over at each trim,
    while a stack that keeps being used is never copied twice."""
    reader, m = collector.StackReader(KernelOnly(), max_stacks=64), StackMap()
    hot, copies, sid = 1 << 40, [], 1 << 41
    for drain in range(300):
        ids = {hot: ("kernel", 0)}
        for _ in range(10):  # ten new stacks a drain, never seen again
            sid += 1
            ids[sid] = ("user", drain)
        for s in ids:
            m.walk(s)
        copies += [s.id for s in reader.read(m, ids, {})]
        assert reader.kept() <= 3 * 64
    assert copies.count(hot) == 1
    assert len(copies) == 1 + 300 * 10
    assert len(m.stored) <= 64  # trimmed: the map never fills


def test_a_stack_walked_again_between_a_drains_reads_and_its_trim_is_not_reported_lost():
    """A trim deletes the ids copied two generations ago; one of them walked again just before the
    delete comes in the next drain, its entry gone from the map: it is still known then, not 'lost'."""
    reader, m = collector.StackReader(KernelOnly(), max_stacks=8), StackMap()
    first = [(1 << 40) + i for i in range(5)]
    for s in first:
        m.walk(s)
    reader.read(m, {s: ("kernel", 0) for s in first}, {})  # 5 copied, over half the map's 8: a trim
    later = [(1 << 41) + i for i in range(5)]
    for s in later:
        m.walk(s)
    reader.read(m, {s: ("kernel", 0) for s in later}, {})  # a second trim: `first` goes from the map
    assert m.lookup(first[0].to_bytes(8, "little")) is None
    again = reader.read(m, {first[0]: ("kernel", 0)}, {})  # walked before the delete, read now
    assert again == ()
    m.walk(first[0])  # a drain later: forgotten, walked again, so in the map: copied once more
    assert [s.id for s in reader.read(m, {first[0]: ("kernel", 0)}, {})] == [first[0]]


def test_the_interrupt_entry_text_is_found_in_kallsyms_and_hidden_addresses_cut_nothing(tmp_path):
    syms = tmp_path / "kallsyms"
    syms.write_text("ffffffff81000010 T __entry_text_start\nffffffff81000300 T __irqentry_text_start\n"
                    "ffffffff81000d40 T asm_common_interrupt\nffffffff81000f70 T __irqentry_text_end\n")
    assert collector.irqentry_text(str(syms)) == (0xFFFFFFFF81000300, 0xFFFFFFFF81000F70)
    hidden = tmp_path / "hidden"  # kptr_restrict: every address reads 0
    hidden.write_text("0000000000000000 T __irqentry_text_start\n0000000000000000 T __irqentry_text_end\n")
    assert collector.irqentry_text(str(hidden)) == (0, 0)
    assert collector.irqentry_text(str(tmp_path / "missing")) == (0, 0)


def _max_entries(pid: int, count: int, maxima: tuple[int, int], epochs: tuple[int, int], runq: tuple = (),
                 total: int | None = None) -> FakeObj:
    """One thread with one off-CPU map entry whose per-interval maxima (by the interval number's parity)
    are `maxima`, numbered `epochs` (`total`: its waits' sum, 10 us each if None); `runq`: its run-queue
    waits' count, maxima and numbers."""
    v = abi.TaskStats(tgid=500, nvcsw=count, flags=abi.TS_BASE_EXACT)
    if runq:
        v.runq_count, v.runq_ns = runq[0], 100 * runq[0]
        v.runq_ival.max_ns[:], v.runq_ival.epoch[:] = runq[1], runq[2]
    ov = abi.OffcpuVal(count=count, total_ns=10_000 * count if total is None else total)
    ov.ival.max_ns[:], ov.ival.epoch[:] = maxima, epochs
    key = _raw(abi.OffcpuKey(pid=pid, start_ns=pid, tgid=500, state=1, kstack=99, ustack=98))
    return FakeObj(FakeDump([(_raw(abi.TaskKey(pid=pid, start_ns=pid)), _raw(v))]), task_final=FakeMap([]),
                   offcpu=FakeMap([(key, _raw(ov))]), wakers=FakeMap([]))


def test_each_interval_gives_the_longest_wait_that_ended_in_it_not_only_a_new_longest_ever(sched):
    """The BPF side keeps each key's longest wait per interval, numbered by user space just before it reads
    (bpf/sched.h struct max_epoch); the drain reports the one numbered as the interval it reads, so an
    interval whose waits were all shorter than an earlier one still has its own maximum (Max in a
    one-interval view), and a pair left from an older interval of the same parity is not taken."""
    # interval 1: its longest wait 5000 (slot 1), run-queue waits' 40
    _, _, _, offcpu, _ = _drain(sched, _max_entries(7, 3, (0, 5000), (0, 1), runq=(2, (0, 40), (0, 1))))
    assert [o.max_ns for o in offcpu] == [5000]
    # interval 2: shorter waits (1200) than interval 1's
    tasks, _, _, offcpu, _ = _drain(sched, _max_entries(7, 5, (1200, 5000), (2, 1), runq=(4, (25, 40), (2, 1))))
    assert [o.max_ns for o in offcpu] == [1200] and [t.runq_max_ns for t in tasks] == [25]
    # interval 3: new waits whose pair was not renumbered (a value of interval 1 left in slot 1): unknown, 0
    tasks, _, _, offcpu, _ = _drain(sched, _max_entries(7, 7, (1200, 5000), (2, 1), runq=(6, (25, 40), (2, 1))))
    assert [o.max_ns for o in offcpu] == [0] and [t.runq_max_ns for t in tasks] == [0]


def test_a_wait_that_ends_between_the_numbering_and_the_read_is_in_the_extremes_of_the_interval_that_counts_it(
        sched):
    """The drain numbers the next interval, then reads: a wait that ends in between is counted in the
    interval read and kept in the next number's pair (bpf/interval.h). The interval takes that pair too, so
    that its longest covers every wait it counted; the next interval, whose pair still holds that wait,
    has its longest held to its total, and a lone wait's longest is that wait."""
    # interval 1: waits of 2000 and 2100 counted, the 2100 one numbered 2 (it ended after the numbering)
    tasks, _, _, offcpu, _ = _drain(sched, _max_entries(7, 2, (2100, 2000), (2, 1), total=4100,
                                                        runq=(2, (30, 20), (2, 1))))
    assert [o.max_ns for o in offcpu] == [2100] and [t.runq_max_ns for t in tasks] == [30]
    # interval 2: waits of 600 and 700 counted; its pair still holds the 2100 one: held to their 1300
    _, _, _, offcpu, _ = _drain(sched, _max_entries(7, 4, (2100, 2000), (2, 1), total=5400))
    assert [o.max_ns for o in offcpu] == [1300]
    # interval 3: one wait of 500, in the pair of 3 with nothing longer: that wait
    _, _, _, offcpu, _ = _drain(sched, _max_entries(7, 5, (2100, 500), (2, 3), total=5900))
    assert [o.max_ns for o in offcpu] == [500]
    assert abi.bounded(5000, 40, 3, 900) == (900, 40) and abi.bounded(5000, 40, 1, 900) == (900, 900)
    assert abi.bounded(5000, 40, 0, 0) == (0, 0)


def test_the_task_dumps_struct_readers_read_what_the_ctypes_mirror_reads():
    """bpf/task_dump.py reads entries with struct at the mirror's offsets: every field it takes, a slot's
    key and values, and the extremes read the same as through abi.TaskStats."""
    v = abi.TaskStats()
    for i, name in enumerate(task_dump._FIELDS):
        if name == "comm":
            v.comm = b"reader-thread"
        else:
            setattr(v, name, 1000 + i)
    for i in range(abi.RUNQ_SLOTS):
        v.runq_hist[i] = 3 * i
    sl = v.slots[1]
    sl.kstack, sl.ustack, sl.state, sl.why, sl.func, sl.used = 5, 6, 7, 8, 9, 1
    sl.val.count, sl.val.total_ns, sl.val.charged_ns, sl.val.weighted_ns, sl.val.var_us2 = 11, 12, 13, 14, 15
    sl.val.woken[0], sl.val.woken[1], sl.val.woken[2] = 16, 17, 18
    sl.val.hist[4] = 11
    sl.val.ival.max_ns[1], sl.val.ival.epoch[1] = 9, 3
    v.slots[0].used = 1  # the first slot, used and zero
    v.offcpu_ival.max_ns[1], v.offcpu_ival.epoch[1] = 77, 3
    v.runq_ival.max_ns[1], v.runq_ival.epoch[1] = 55, 3
    v.runq_ival.max_ns[0], v.runq_ival.epoch[0] = 66, 2  # another interval's: not this one's
    raw = _raw(v)
    values = task_dump.values_of(raw)
    assert [values[i] for i, n in enumerate(task_dump._FIELDS) if n != "comm"] == \
        [getattr(v, n) for n in task_dump._FIELDS if n != "comm"]
    assert task_dump.comm_of(values) == "reader-thread"
    tid = TaskId(3, 3)
    d = task_dump.task_delta(tid, raw, values, None, 3)
    assert d.offcpu_max_ns == 77 and d.runq_max_ns == 55 and d.runq_hist == tuple((i, 3 * i) for i in range(1, abi.RUNQ_SLOTS))
    [o] = task_dump.slot_deltas(tid, 500, raw, None, 3)
    assert (o.kstack, o.ustack, o.state, o.why, o.func) == (5, 6, 7, 8, 9)
    assert (o.count, o.total_ns, o.charged_ns, o.weighted_ns, o.var_us2, o.woken) == (11, 12, 13, 14, 15, (16, 17, 18))
    assert o.hist == ((4, 11),) and o.max_ns == 9


def test_the_slots_read_in_c_as_in_python():
    """bpf/task_dump.py slot_deltas in C (analyzer/rowread.c Slots) and in Python give the same records on
    random entries and their last ones: slots used or not (the first unused one ends the walk), first used,
    unchanged, their counts moved or not, counters that went back, histograms, the interval's extremes."""

    assert task_dump._C_SLOTS is not None, "the extension is built by `make install`"
    rng = random.Random(7)
    size = ctypes.sizeof(abi.TaskStats)
    checked = moved = 0
    for case in range(3000):
        now, before = abi.TaskStats(), abi.TaskStats()
        for v in (now, before):
            for k in range(abi.TASK_OFFCPU_SLOTS):
                sl = v.slots[k]
                sl.used = rng.choice((0, 1, 1, 1, 7))
                sl.kstack, sl.ustack, sl.func = (rng.choice((0, 1, 2 ** 64 - 1, rng.getrandbits(64))) for _ in range(3))
                sl.state, sl.why = rng.getrandbits(32), rng.choice((0, 202 | 1 << 10))
                val = sl.val
                for name in ("count", "total_ns", "charged_ns", "weighted_ns", "var_us2"):
                    setattr(val, name, rng.choice((0, 1, 5, 2 ** 64 - 1, rng.getrandbits(64))))
                for j in range(3):
                    val.woken[j] = rng.choice((0, 3, 2 ** 32 - 1))
                for j in rng.sample(range(abi.RUNQ_SLOTS), 3):
                    val.hist[j] = rng.choice((0, 1, 2 ** 32 - 1))
                for j in range(2):
                    val.ival.max_ns[j], val.ival.epoch[j] = rng.getrandbits(64), rng.choice((case, case + 1, 0))
        if case % 3 == 0:  # some slots as they were: not read
            for k in range(abi.TASK_OFFCPU_SLOTS):
                if rng.random() < 0.5:
                    now.slots[k] = before.slots[k]
        if case % 5 == 0:  # same count, other bytes: no delta
            now.slots[0].val.count = before.slots[0].val.count
        raw, praw = _raw(now), _raw(before)
        assert len(raw) == size
        prev = task_dump.Prev(praw, list(task_dump.values_of(praw))) if case % 4 else None
        tid, e = TaskId(case, 1), case + rng.choice((0, 1))
        c = list(task_dump.slot_deltas(tid, 9, raw, prev, e))
        py = list(task_dump.py_slot_deltas(tid, 9, raw, prev, e))
        assert c == py, case
        checked += 1
        moved += len(py)
    assert checked == 3000 and moved > 1000


def test_the_task_deltas_made_in_c_as_in_python():
    """bpf/task_dump.py task_delta in C (analyzer/rowread.c Deltas) and in Python give the same delta on random
    entries and their last ones: first entries (from the counters' bases), unchanged ones (None), counters
    that went back, a last entry's off-CPU time raised by the waits carried on (beyond 64 bits: Python's),
    kernels without schedstats, histograms, the interval's extremes."""
    assert task_dump._C_DELTAS is not None, "the extension is built by `make install`"
    rng = random.Random(11)
    names = [n for n in task_dump._FIELDS if n != "comm"]
    changed = unchanged = 0
    for case in range(3000):
        now, before = abi.TaskStats(), abi.TaskStats()
        for v in (now, before):
            for name in names:
                bits = ctypes.sizeof(dict(abi.TaskStats._fields_)[name]) * 8
                setattr(v, name, rng.choice((0, 1, 7, (1 << bits) - 1, rng.getrandbits(bits))) if name != "nice"
                        else rng.randint(-20, 19))
            v.flags = rng.choice((0, abi.TS_NO_SCHED_INFO, abi.TS_DEAD | abi.TS_NO_SCHED_INFO))
            for j in rng.sample(range(abi.RUNQ_SLOTS), 2):
                v.runq_hist[j] = rng.choice((0, 1, 2 ** 32 - 1))
            for ival in (v.offcpu_ival, v.runq_ival):
                for j in range(2):
                    ival.max_ns[j], ival.epoch[j] = rng.getrandbits(64), rng.choice((case, case + 1, 3))
        if case % 4 == 1:
            now = before  # the same entry again: nothing moved
        raw, praw = _raw(now), _raw(before)
        values = task_dump.values_of(raw)
        prev = None
        if case % 5:
            prev = task_dump.Prev(praw, list(task_dump.values_of(praw)))
            if case % 7 == 0:  # carried waits added to its off-CPU time
                prev.values[task_dump.OFFCPU_NS] += rng.choice((5, 1 << 64))
        tid, e = TaskId(case, 1), case + rng.choice((0, 1))
        c = task_dump.task_delta(tid, raw, values, prev, e)
        py = task_dump.py_task_delta(tid, raw, values, prev, e)
        assert c == py, case
        changed += c is not None
        unchanged += c is None
    assert changed > 1000 and unchanged > 150


def test_waits_handed_over_then_carried_on_in_the_order_handed():
    """A dump's waits in progress: those handed over before it are carried on (Interval.ongoing, with their
    beginnings), in the order they were first handed over; those it handed over are `opened`, in that order too; a
    task handed over again keeps its place and its beginning; one whose entry came leaves."""
    from stallscope.bpf.task_dump import OpenWaits

    def record(pid, kstack=5):  # OpenWait fields: pid, tgid, start, charged, open so far, kstack, ustack, state, ...
        return (pid, 1, 100 + pid, 10, 50, kstack, 0, 1, 0, 0)

    waits, prevs = OpenWaits(), {}
    _, first = waits.take([record(p) for p in (1, 2, 3, 4)], 0, set(), prevs, [], 1_000)
    assert [w.wait.task.pid for w in first.opened] == [1, 2, 3, 4] and first.ongoing == ()
    _, second = waits.take([record(3, kstack=6), record(5)], 500, set(), prevs, [], 1_500)
    assert [k.task.pid for k in second.ongoing] == [1, 2, 4] and second.ongoing_since == (950, 950, 950)
    assert [(w.wait.task.pid, w.wait.kstack, w.since_ns) for w in second.opened] == [(3, 6, 950), (5, 5, 1_450)]
    waits.settle(TaskId(2, 102), None)  # its entry came: no longer carried
    _, third = waits.take([], 500, set(), prevs, [], 2_000)
    assert [k.task.pid for k in third.ongoing] == [1, 3, 4, 5] and third.opened == ()
    assert third.ongoing_since == (950, 950, 950, 1_450)
