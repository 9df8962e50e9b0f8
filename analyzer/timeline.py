"""A timeline over a source of intervals, and the snapshots of its windows.

Live collection and replay feed the same timeline: intervals in order, with the names they carry
(tasks, stacks, kernel functions, slab caches), each sent once by the collector and kept here. A window
of intervals (one interval, the last N, a range of a recording) becomes one frozen `Snapshot`: the
model of that window and, computed on first use and kept, every view derived from it (ranked blockers,
per-task causes, the lock_stat table, ...). The views never know whether the data is live.

Snapshots are cached by window: stepping a replay cursor back and forth, or redrawing while a live
interval arrives, folds each window once. A live timeline keeps the last `keep` intervals (and the
names still used), so a long-running `top` stays bounded. Pure: no I/O, and no thread of its own;
its cache's changes are under a lock, as a view may fold a wide window in a thread (tui/app.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from math import isqrt
from operator import attrgetter, itemgetter
from typing import Callable, NamedTuple

from stallscope.analyzer.blockers import (
    Blocker, causes_by_task, denominator, grouped_parts, held_up_by, parts, rank_blockers, rank_live,
    waiters_by_name,
)
from stallscope.analyzer.causes import IDLE
from stallscope.analyzer.chains import RootTable, root_table
from stallscope.analyzer.data_loss import Loss, model_losses
from stallscope.analyzer.io import (
    CauseDevice, IoDeviceRow, bio_based, bios_counted, cause_devices, devices_described, io_table,
)
from stallscope.analyzer.locks import LockStat, lock_stats
from stallscope.analyzer.model import NO_HIST, Model, ModelFold
from stallscope.analyzer.oncpu import FunctionSamples, probe_ran, top_functions
from stallscope.analyzer.overhead import Cost, model_costs
from stallscope.analyzer.recommend import Recommendation, recommend
from stallscope.analyzer.sample import Interval, RecordingMeta, SlabCache, TaskId, TaskInfo, TuningChange
from stallscope.analyzer.scope import own_tasks, recorded_tasks
from stallscope.analyzer.signals import tasks_waiting, window_busy_pct
from stallscope.analyzer.slab import SlabRow, slab_rows
from stallscope.analyzer.units import log2_bounds


class TaskRow(NamedTuple):
    """One thread over a window, as the Tasks view and `top` show it: rates per second of the window (a tuple:
    a machine's thousands of threads are made anew for each window a Tasks view shows)."""

    task: TaskId
    tgid: int
    comm: str
    cgroup: str
    waiting_per_s: float  # ns per second waiting for anything but idle causes, the run queue included
    offcpu_per_s: float  # ns of off-CPU time per second (idle waits included)
    runq_per_s: float  # ns of run-queue wait per second
    runq_p99_ns: int  # wakeup-to-run latency, from the log2 histogram (an upper bound)
    vcs_per_s: float
    ivcs_per_s: float
    migrations_per_s: float
    causes: tuple[tuple[str, int], ...]  # its top causes but idle ones (idle ones if it had no other)
    exited: bool = False


@dataclass(frozen=True)
class CpuRow:
    """One CPU over a window: the migrations it gave and took, and (with the oncpu group) how busy it was."""

    cpu: int
    busy_pct: float | None  # /proc/stat's per interval, else from the on-CPU samples; None without either
    migrations_out: int
    migrations_in: int
    # the run-queue waits that ended on it (bpf/sched.h struct cpu_runq); None in a recording made before they
    # were kept
    runq_ns: int | None = None
    runq_waits: int | None = None

    def waiting(self, seconds: float) -> float | None:
        """The tasks waiting in its run queue on average over the window's `seconds` (None: not kept)."""
        return None if self.runq_ns is None else tasks_waiting(self.runq_ns, seconds)

    @property
    def avg_wait_ns(self) -> float | None:
        """Its run-queue waits' mean length (None: none, or not kept)."""
        return self.runq_ns / self.runq_waits if self.runq_waits else None


class Snapshot:
    """One window of a timeline, frozen. Derived views are computed on first use and kept."""

    def __init__(self, model: Model, first: int = 0, last: int = 0, live: bool = False,
                 tasks: set[TaskId] | None = None):
        """`tasks`: the view's choice of tasks (--command-only); None: every task. stallscope's own are
        left out of what is ranked either way."""
        self.model = model
        self.first, self.last = first, last  # interval indexes, inclusive
        self.live = live
        self.chosen = tasks

    @property
    def meta(self) -> RecordingMeta:
        return self.model.meta

    @property
    def seconds(self) -> float:
        return self.model.duration_s or self.meta.interval_s or 1.0

    @cached_property
    def own(self) -> set[TaskId]:
        """stallscope's own tasks: shown apart as its cost, never ranked."""
        return own_tasks(self.model)

    @cached_property
    def scope(self) -> set[TaskId] | None:
        """The tasks chosen (all by default) but stallscope's own (None: every task)."""
        own = self.own
        if self.chosen is not None:
            return {t for t in self.chosen if t not in own} if own else set(self.chosen)
        return recorded_tasks(self.model)  # kept per model, as every view's default scope

    @cached_property
    def parts(self):
        return parts(self.model, self.scope)

    @cached_property
    def shares(self):
        # a live view's from the parts grouped (it makes no Part per sleeping thread unless it shows them);
        # a recording's from its parts, which its reports and views read anyway
        return denominator(*grouped_parts(self.model, self.scope)) if self.live else denominator(self.parts)

    @cached_property
    def blockers(self) -> list[Blocker]:
        """Every cause ranked, idle ones included (their share is 0)."""
        return rank_blockers(self.model, self.scope)  # kept per model: where it is made, the advice ranks from it

    @cached_property
    def ranked(self) -> list[Blocker]:
        """The blockers a view ranks: idle causes left out (live, ranked without them: blockers.rank_live)."""
        if self.live:
            return rank_live(self.model, self.scope)
        return [b for b in self.blockers if b.cls != IDLE]

    @cached_property
    def idle_ns(self) -> int:
        """The idle waits' time (not ranked, no share)."""
        if self.live:
            return self.shares.idle_ns
        return sum(b.total_ns for b in self.blockers if b.cls == IDLE)

    @cached_property
    def waiters(self) -> dict[str, tuple[tuple[str, int, int, str], ...]]:
        """Who waited for each blocker ranked, by process name (blockers.waiters_by_name), by cause: a loaded
        machine's blockers are each waited for by hundreds of tasks, thousands in a wider window."""
        return {b.cause: waiters_by_name(self.model, b) for b in self.ranked}

    def waiters_of(self, b: Blocker) -> tuple[tuple[str, int, int, str], ...]:
        """Who waited for `b`, by name: from `waiters` where `b` is one of those ranked."""
        if any(r is b for r in self.ranked):
            return self.waiters[b.cause]
        return waiters_by_name(self.model, b)

    @cached_property
    def roots(self) -> RootTable:
        return root_table(self.model, self.scope)

    def held_up_by(self, b: Blocker):
        return held_up_by(self.model, b)

    @cached_property
    def task_causes(self) -> dict[TaskId, list]:
        return causes_by_task(self.model, self.scope)

    @cached_property
    def tasks(self) -> list[TaskRow]:
        """Every thread but stallscope's own, most waiting first."""
        secs, m, own = self.seconds, self.model, self.own
        causes_of, cgroup_of, rows = self.task_causes.get, m.cgroups.get, []
        for tid, t in m.tasks.items():
            if tid in own:
                continue
            all_causes = causes_of(tid)
            if not all_causes:
                causes, waiting_ns = (), 0
            elif len(all_causes) == 1:  # a sleeping thread's one cause: the same as below, in fewer steps
                c, ns = all_causes[0]
                causes, waiting_ns = ((c.name, ns),), (ns if c.cls != IDLE else 0)
            else:
                waiting = [(c.name, ns) for c, ns in all_causes if c.cls != IDLE]
                causes = tuple((waiting or [(c.name, ns) for c, ns in all_causes])[:3])
                waiting_ns = sum(ns for _c, ns in waiting)
            info, hist = t.info, t.runq_hist
            rows.append(TaskRow(
                tid, info.tgid, info.comm, cgroup_of(info.tgid, ""), waiting_ns / secs, t.offcpu_ns / secs,
                t.runq_wait_ns / secs, hist_p99(hist, t.runq_max_ns) if hist is not NO_HIST and any(hist) else 0,
                t.voluntary_switches / secs, t.involuntary_switches / secs, t.migrations / secs, causes, info.dead))
        rows.sort(key=lambda r: (-r.waiting_per_s, -r.offcpu_per_s))
        return rows

    @cached_property
    def signals(self) -> dict[str, float]:
        """vmstat's first look over the window: cs/s, and the tasks running (their CPU time per second)
        and waiting for a CPU (run-queue wait per second, Little's law), on average."""
        secs, tasks = self.seconds, self.model.tasks.values()
        running = sum(t.run_ns for t in tasks) / 1e9 / secs
        waiting = tasks_waiting(sum(t.runq_wait_ns for t in tasks), secs)
        return {"cs_per_s": self.model.switches_per_s, "running": running, "waiting": waiting,
                "runnable": running + waiting}

    @cached_property
    def locks(self) -> list[LockStat]:
        return lock_stats(self.model, tasks=self.scope)

    @cached_property
    def slab(self) -> list[SlabRow]:
        return slab_rows(self.model, self.scope)

    @cached_property
    def io(self) -> list[IoDeviceRow]:
        """Block devices (the io group): per device and operation, busiest first."""
        return io_table(self.model, self.scope)

    @cached_property
    def io_bio_based(self) -> list[str]:
        """The recording machine's bio-based devices whose I/O is not counted (recorded where the kernel
        had no bio tracepoints, or before they were used): the request tracepoints never see it."""
        return [] if bios_counted(self.model) else bio_based(devices_described(self.model))

    @cached_property
    def io_causes(self) -> dict[str, list[CauseDevice]]:
        """For each cause, the devices whose completions ended its waits."""
        return cause_devices(self.model, self.scope)

    @cached_property
    def oncpu(self) -> list[FunctionSamples]:
        return top_functions(self.model, "self", self.scope, limit=100) if probe_ran(self.model) else []

    @cached_property
    def cpus(self) -> list[CpuRow]:
        m = self.model
        rows = []
        # /proc/stat's, where the intervals keep it; else from the on-CPU samples (which a workload as periodic
        # as a CPU quota's 100 ms can alias: 100% busy read at 20% when throttled)
        busy_pct, span = window_busy_pct(m)
        measured = busy_pct if span == "window" else {}
        kept = bool((m.meta.options or {}).get("cpu_runq_per_interval"))
        for c in range(len(m.matrix)):
            s = m.oncpu_cpus.get(c)
            busy = measured.get(str(c))
            if busy is None and s is not None and s.samples:
                busy = 100.0 * (s.samples - s.idle_samples) / s.samples
            runq = m.cpu_runq.get(c, (0, 0)) if kept else (None, None)
            rows.append(CpuRow(c, busy, sum(m.matrix[c]), sum(r[c] for r in m.matrix), *runq))
        return rows

    @cached_property
    def fixes(self) -> list[Recommendation]:
        return recommend(self.model, tasks=self.scope)

    @cached_property
    def costs(self) -> list[Cost]:
        return model_costs(self.model)

    @cached_property
    def cost(self) -> Cost | None:
        """stallscope's own cost over the window: its intervals' costs summed."""
        costs = self.costs
        if not costs:
            return None
        return Cost(sum(c.seconds for c in costs), self.meta.cpus, sum(c.bpf_ns for c in costs),
                    sum(c.dispatch_ns for c in costs), sum(c.collector_ns for c in costs),
                    sum(c.trap_ns for c in costs))

    @cached_property
    def losses(self) -> list[Loss]:
        """What the probes lost in the window (analyzer/data_loss.py): never silent."""
        return model_losses(self.model)

    @cached_property
    def lost(self) -> dict[str, int]:
        """The same, by counter."""
        return {loss.key: loss.count for loss in self.losses}


def hist_p99(hist: tuple[int, ...], longest: int) -> int:
    """The p99 of a log2(ns) histogram (a thread's wakeup-to-run latency) as blockers.percentiles gives it, in a
    loop cheap enough for every thread of a Tasks view: the upper bound of its bucket (slot s holds the lengths in
    [2^s, 2^(s+1)) ns, bpf/sched.h), never above the longest; 0 when empty. percentiles() over each thread's
    pairs took 7 ms for 5,000 idle threads and 26 ms for 5,500 under hackbench, this 2.7 and 9.8 ms; a test
    (test_log2_buckets.py) keeps the two equal."""
    total = sum(hist)
    if not total:
        return 0
    need, seen = 0.99 * total - 1e-9, 0
    for slot, c in enumerate(hist):
        seen += c
        if seen >= need:
            bound = log2_bounds(slot)[1]
            return min(bound, longest) if longest else bound
    return 0


_KSTACK, _USTACK, _WAKER_KSTACK = attrgetter("kstack"), attrgetter("ustack"), attrgetter("waker_kstack")
_ONGOING_KSTACK, _ONGOING_USTACK = itemgetter(3), itemgetter(4)  # OngoingWait.kstack, .ustack


def records(iv: Interval) -> int:
    """An interval's records, what its memory grows with."""
    return (len(iv.tasks) + len(iv.offcpu) + len(iv.wakers) + len(iv.locks) + len(iv.futex) + len(iv.oncpu)
            + len(iv.slab) + len(iv.ongoing))


class Digest:
    """What a timeline keeps of an interval once its one-interval snapshot has left the cache: the values
    the views plot interval by interval (the sparklines' minute), read as a snapshot's. The snapshot holds
    its model, the interval's every record folded: tens of MB for an interval of a machine with thousands
    of threads under load, so a live timeline that kept one for each of its intervals grew by that much
    a second."""

    __slots__ = ("first", "last", "seconds", "ranked", "signals", "io")

    def __init__(self, snap: Snapshot):
        self.first, self.last, self.seconds = snap.first, snap.last, snap.seconds
        self.ranked, self.signals, self.io = snap.ranked, snap.signals, snap.io


@dataclass
class Timeline:
    """Intervals in order and the names they carry; snapshots of windows, cached (the `cache_size` most
    recently used; an interval's own, once gone, leaves its Digest for the series).

    `keep`: how many intervals a live timeline holds (None: all, for a recording), and fewer when they
    hold more than `max_records` records between them (the oldest go first; the series keep `keep`
    intervals' digests all the same). Names are sent once
    and referred to later, so a live timeline forgets a task only once its final switch has left the
    intervals held, and stacks least recently used first beyond `max_stacks`."""

    meta: RecordingMeta
    keep: int | None = None
    live: bool = False
    cache_size: int = 16
    max_records: int | None = None
    max_stacks: int = 1 << 16
    intervals: deque = field(default_factory=deque)
    task_info: dict[TaskId, TaskInfo] = field(default_factory=dict)
    stacks: OrderedDict = field(default_factory=OrderedDict)
    functions: dict[int, str] = field(default_factory=dict)
    slab_caches: dict[int, SlabCache] = field(default_factory=dict)
    _cache: OrderedDict = field(default_factory=OrderedDict)
    # the cache's changes: a view folds a wide window in a thread of its own (tui/app.py), beside its own reads
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    _digests: dict = field(default_factory=dict)  # interval index -> Digest of its snapshot, once evicted
    _dead_at: dict = field(default_factory=dict)  # task -> index of the interval that saw its final switch
    _records: int = 0  # in the intervals held
    tuning_before: TuningChange | None = None  # the last budget step of the intervals forgotten
    _steps: deque = field(default_factory=deque)  # (interval index, its last budget step), of those held
    # where the intervals carry no kernel lock records (a recording's, read without them): the model of a
    # window of them (a list) given its lock contentions from elsewhere (stallscope/sources.py)
    locks: Callable[[Model, list], Model] | None = None
    # what a window's fold runs in (a recording's view: outside the cycle collector, stallscope/gc_work.py)
    work: Callable[[], AbstractContextManager] = nullcontext

    def add(self, iv: Interval, snapshot: Snapshot | None = None) -> None:
        """One more interval (live: the newest; the oldest beyond `keep` is forgotten). `snapshot`: its
        own one-interval snapshot, folded elsewhere from the same names and stacks (a live source folds
        it in its collector's thread), kept as this timeline's."""
        for t in iv.task_info:
            self.task_info[t.task] = t
            if t.dead:
                self._dead_at.pop(t.task, None)  # a later death notice: its place is now
                self._dead_at[t.task] = iv.index
        for s in iv.stacks:
            self.stacks[s.id] = s
        self.functions.update(iv.functions)
        for c in iv.slab_caches:
            self.slab_caches[c.addr] = c
        self.intervals.append(iv)
        self._records += records(iv)
        if iv.tuning:
            self._steps.append((iv.index, iv.tuning[-1]))
        if snapshot is not None and (snapshot.first, snapshot.last) == (iv.index, iv.index):
            self._keep(snapshot)
        if self.keep is None:
            return
        while len(self.intervals) > self.keep or (
                self.max_records is not None and self._records > self.max_records and len(self.intervals) > 1):
            old = self.intervals.popleft()
            self._records -= records(old)
            if old.tuning:
                self.tuning_before = old.tuning[-1]
                self._steps.popleft()
        self._forget(iv)

    def _forget(self, iv: Interval) -> None:
        first = self.first_index
        # in the order the tasks died (intervals arrive in order): the oldest first, no scan of the rest
        while self._dead_at:
            tid, at = next(iter(self._dead_at.items()))
            if at >= first:
                break
            del self._dead_at[tid]
            self.task_info.pop(tid, None)
        # the stacks this interval refers to, each once (thousands of records share a few hundred), in C
        used = set(map(_KSTACK, iv.offcpu))
        for recs, ids in ((iv.offcpu, _USTACK), (iv.wakers, _WAKER_KSTACK), (iv.locks, _KSTACK),
                          (iv.futex, _USTACK), (iv.oncpu, _KSTACK), (iv.oncpu, _USTACK)):
            used.update(map(ids, recs))
        used.update(map(_ONGOING_KSTACK, iv.ongoing))
        used.update(map(_ONGOING_USTACK, iv.ongoing))
        move = self.stacks.move_to_end
        for sid in used & self.stacks.keys():
            move(sid)
        while len(self.stacks) > self.max_stacks:
            self.stacks.popitem(last=False)
        oldest = self.last_index - self.keep + 1 if self.keep is not None else first
        with self._lock:
            for key in [k for k in self._cache if k[0] < first]:
                self._evict(key)
            for i in [i for i in self._digests if i < oldest]:
                del self._digests[i]

    def _keep(self, snap: Snapshot) -> None:
        """A snapshot in the cache, the most recently used."""
        with self._lock:
            self._cache[(snap.first, snap.last)] = snap
            self._cache.move_to_end((snap.first, snap.last))
            self._trim()

    def _trim(self) -> None:
        """Snapshots beyond `cache_size` go, least recently used first; an interval's own leaves its digest.
        A recording's whole window stays (the view's first, and `w`'s: a long one takes seconds to fold)."""
        whole = None if self.live else (self.first_index, self.last_index)
        with self._lock:
            while len(self._cache) > self.cache_size:
                key = next((k for k in self._cache if k != whole), None)
                if key is None:
                    break
                self._evict(key)

    def _evict(self, key: tuple[int, int]) -> None:
        """A snapshot leaves the cache; an interval's own leaves its digest."""
        snap = self._cache.pop(key)
        if key[0] == key[1]:
            self._digests[key[0]] = Digest(snap)

    def new_fold(self) -> ModelFold:
        """An empty fold of this timeline's intervals: their wakeups and lock waits folded when read."""
        return ModelFold(self.meta, self.slab_caches, self.functions, lazy=True)

    def made(self, fold: ModelFold, first: int, last: int, intervals: list[Interval]) -> Snapshot:
        """The snapshot of window first..last from `fold`, which holds its `intervals`: kept as this timeline's."""
        with self.work():
            model = fold.model(self.task_info, self.stacks)
            if self.locks is not None:
                model = self.locks(model, intervals)
        snap = Snapshot(model, first, last, self.live)
        self._keep(snap)
        return snap

    def __len__(self) -> int:
        return len(self.intervals)

    def step_before(self, index: int) -> TuningChange | None:
        """The last budget step before interval `index` (among the intervals forgotten, when none held
        has one): the level in force at its start. Steps are few: a status line asks four times a second."""
        for at, step in reversed(self._steps):
            if at < index:
                return step
        return self.tuning_before

    @property
    def first_index(self) -> int:
        return self.intervals[0].index if self.intervals else 0

    @property
    def earliest(self) -> int:
        """The first interval the series can read: held, or gone with its digest kept."""
        return min(self.first_index, min(self._digests, default=self.first_index))

    @property
    def last_index(self) -> int:
        return self.intervals[-1].index if self.intervals else -1

    def cached(self, first: int, last: int) -> Snapshot | None:
        """The snapshot of intervals first..last (clipped as `window` clips) if it is folded, else None."""
        if not self.intervals:
            return None
        first, last = max(first, self.first_index), min(last, self.last_index)
        with self._lock:
            snap = self._cache.get((first, last))
            if snap is not None:
                self._cache.move_to_end((first, last))
            return snap

    def window(self, first: int, last: int) -> Snapshot | None:
        """The snapshot of intervals first..last (indexes, inclusive; clipped to what is held)."""
        if not self.intervals:
            return None
        first, last = max(first, self.first_index), min(last, self.last_index)
        if first > last:
            return None
        snap = self.cached(first, last)
        if snap is not None:
            return snap
        fold = WindowFold(self, first, last)
        fold.add(fold.span)
        return fold.snapshot()

    def hold(self, snap: Snapshot) -> None:
        """A snapshot of one of this timeline's windows, folded elsewhere from the same intervals, names and
        stacks (a live source folds the view's window in its collector's thread), kept as this timeline's,
        unless its window reaches before the intervals held."""
        if snap.first >= self.first_index and snap.last <= self.last_index:
            key = (snap.first, snap.last)
            with self._lock:
                if self.live:  # the window slides: the wider snapshots that ended earlier are no one's any more
                    for old in [k for k in self._cache if k[0] != k[1] and k[1] < key[1]]:
                        del self._cache[old]
                self._keep(snap)

    def held(self, span: int) -> tuple[int, int] | None:
        """The newest window `span` intervals wide that this timeline holds a snapshot of (one folded
        elsewhere: `hold`), or narrower where it begins at the first interval held (clipped, early on)."""
        best = None
        with self._lock:
            keys = list(self._cache)
        for first, last in keys:
            width = last - first + 1
            if first != last and (width == span or (width < span and first <= self.first_index)):
                if best is None or last > best[1]:
                    best = (first, last)
        return best

    def fold_window(self, first: int, last: int) -> "WindowFold | None":
        """The window first..last (clipped to what is held) to be folded a few intervals at a time."""
        first, last = max(first, self.first_index), min(last, self.last_index)
        return WindowFold(self, first, last) if self.intervals and first <= last else None

    def latest(self, n: int = 1) -> Snapshot | None:
        """The last n intervals."""
        return self.window(self.last_index - n + 1, self.last_index)

    def whole(self) -> Snapshot | None:
        return self.window(self.first_index, self.last_index)

    def series(self, first: int, last: int, value) -> list[float]:
        """value(snapshot) for each interval first..last, from the one-interval snapshots (cached) or their
        digests: `value` reads `seconds`, `ranked`, `signals` or `io`."""
        out = []
        held = self.first_index
        for i in range(max(first, self.earliest), min(last, self.last_index) + 1):
            snap = self._cache.get((i, i)) or self._digests.get(i) or (self.window(i, i) if i >= held else None)
            out.append(value(snap) if snap is not None else 0.0)
        return out


class WindowFold:
    """A timeline's window folded a few intervals at a time (`add`), then made its snapshot (`snapshot`);
    `Timeline.window` adds them all at once. A live source folds a wide window so, within a share of each
    interval, so that the fold never holds up the next drain. It holds its intervals: the timeline may
    forget them meanwhile (their names it keeps a while longer: LiveSource's fold timeline)."""

    def __init__(self, timeline: Timeline, first: int, last: int):
        self.timeline, self.first, self.last = timeline, first, last
        base = timeline.first_index
        self.intervals = [timeline.intervals[i - base] for i in range(first, last + 1)]
        self._next = 0
        self._fold = timeline.new_fold()

    @property
    def span(self) -> int:
        return self.last - self.first + 1

    @property
    def done(self) -> bool:
        return self._next >= len(self.intervals)

    @property
    def folded(self) -> int:
        """Its intervals folded so far."""
        return self._next

    def add(self, count: int = 1) -> bool:
        """Up to `count` more of its intervals folded; whether all are."""
        ivs = self.intervals[self._next:self._next + count]
        self._next += len(ivs)
        with self.timeline.work():
            self._fold.add(ivs)
        return self.done

    def snapshot(self) -> Snapshot:
        """The window's snapshot once every interval is folded (`done`), kept as the timeline's."""
        assert self.done, "intervals left to fold"
        return self.timeline.made(self._fold, self.first, self.last, self.intervals)


class SlidingFold:
    """The last `width` intervals of a live timeline, folded as they come, for a view's wide window.

    Folding the window anew with each interval folds `width` intervals' records each time (a minute's:
    60). Here each interval is folded once, into a block of about sqrt(width) intervals (aligned on its
    index). A window is then: the intervals it covers of its oldest block, folded again (fewer than a
    block's), the complete blocks after it merged (kept while they stay in the window: ModelFold.merge),
    and the newest block so far. The model is the one folding the window at once makes (the same keys, in
    the same order)."""

    def __init__(self, timeline: Timeline, width: int, block: int | None = None):
        self.timeline, self.width = timeline, width
        self.block = block or max(1, isqrt(width))
        self.pending: deque[Interval] = deque()  # to be folded into their blocks
        self.held: deque[Interval] = deque()  # folded, of the window or its oldest block
        self.blocks: OrderedDict[int, tuple[int, ModelFold]] = OrderedDict()  # number -> (first index, fold)
        self._middle: tuple[tuple[int, int], ModelFold] | None = None

    @classmethod
    def over(cls, timeline: Timeline, width: int, block: int | None = None) -> "SlidingFold":
        """One whose first window is the last `width` intervals `timeline` holds (fewer when it holds fewer)."""
        fold = cls(timeline, width, block)
        fold.pending.extend(iv for iv in timeline.intervals if iv.index > timeline.last_index - width)
        return fold

    def add(self, iv: Interval) -> None:
        """The newest interval, to be folded."""
        self.pending.append(iv)

    @property
    def done(self) -> bool:
        return not self.pending and bool(self.held)

    @property
    def first(self) -> int:
        return max(self.last - self.width + 1, self.held[0].index) if self.held else 0

    @property
    def last(self) -> int:
        return self.held[-1].index if self.held else -1

    @property
    def span(self) -> int:
        return self.last - self.first + 1 if self.held else 0

    def fold_some(self, more: Callable[[], bool] = lambda: True, least: int = 2) -> bool:
        """Intervals folded while `more()` says so, `least` of them at any rate (so that a fold behind its
        intervals catches up: one more comes with each); whether all are."""
        tl, blocks, size = self.timeline, self.blocks, self.block
        n = 0
        with tl.work():
            while self.pending and (n < least or more()):
                iv = self.pending.popleft()
                number = iv.index // size
                e = blocks.get(number)
                if e is None:
                    e = blocks[number] = (iv.index, tl.new_fold())
                e[1].add((iv,))
                self.held.append(iv)
                n += 1
        first = self.first
        while self.held and self.held[0].index < first:
            self.held.popleft()
        while blocks and next(iter(blocks)) < first // size:
            blocks.popitem(last=False)
        return self.done

    def snapshot(self) -> Snapshot:
        """The window's snapshot once every interval is folded (`done`), kept as the timeline's."""
        assert self.done, "intervals left to fold"
        tl, size = self.timeline, self.block
        first, last = self.first, self.last
        fold = tl.new_fold()
        with tl.work():
            whole = [number for number, (begins, _f) in self.blocks.items() if begins >= first]
            head = whole[-1] if whole and whole[-1] == last // size else None
            # the oldest block's part, folded again, unless the window begins with it
            fold.add([iv for iv in self.held if iv.index < (whole[0] * size if whole else last + 1)])
            middle = [number for number in whole if number != head]
            if middle:
                fold.merge(self._merged(middle[0], middle[-1]))
            if head is not None:
                fold.merge(self.blocks[head][1])
        return tl.made(fold, first, last, [iv for iv in self.held if iv.index >= first])  # not the oldest block's

    def _merged(self, low: int, high: int) -> ModelFold:
        """Blocks low..high merged, kept while they are the window's complete ones."""
        if self._middle is None or self._middle[0] != (low, high):
            fold = self.timeline.new_fold()
            for number in range(low, high + 1):
                if number in self.blocks:
                    fold.merge(self.blocks[number][1])
            self._middle = ((low, high), fold)
        return self._middle[1]
