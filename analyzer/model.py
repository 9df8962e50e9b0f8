"""The model: totals over a window of intervals. Pure functions, no I/O.

Live view, replay, export and report all read this one model, so a number
means the same wherever it is shown.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from collections import OrderedDict
from collections.abc import Sequence
from itertools import chain
from functools import partial
from operator import add, attrgetter
from typing import Callable, Iterable, Iterator, NamedTuple

from stallscope.analyzer.memo import per_model
from stallscope.analyzer.overhead import uprobe_hits
from stallscope.analyzer.sample import (
    LOCK_VALUES, NO_LINK, Interval, IoDelta, IoQueueDelta, IoSubmitDelta, IoWakeDelta, LockDelta, OffcpuDelta,
    RecordingMeta, SlabCache, SlabDelta, Stack, TaskDelta, TaskId, TaskInfo, Throttled, TuningChange, WaitLink,
    WakerDelta, record_maker, u64,
)

RUNQ_SLOTS = 40
# Slack for the invariants below: a dump is read some microseconds after its interval's end is stamped.
INVARIANT_SLACK_NS = 5_000_000
_SLAB_COUNTS = ("kmallocs", "cache_allocs", "kfrees", "cache_frees", "bytes_req", "bytes_alloc", "failed",
                "slab_switches", "switch_allocs")


@dataclass(frozen=True, slots=True)
class TaskTotals:
    info: TaskInfo
    offcpu_ns: int = 0
    offcpu_count: int = 0
    offcpu_max_ns: int = 0
    runq_wait_ns: int = 0
    runq_count: int = 0
    runq_max_ns: int = 0
    voluntary_switches: int = 0
    involuntary_switches: int = 0
    migrations: int = 0
    runq_hist: tuple[int, ...] = (0,) * RUNQ_SLOTS  # log2(ns) buckets of wakeup-to-run latency
    runq_latency_ns: int = 0
    run_ns: int = 0  # on a CPU (se.sum_exec_runtime); 0 in recordings made before it was kept

    @property
    def task(self) -> TaskId:
        return self.info.task


@dataclass(frozen=True, slots=True)
class StackWait:
    """Off-CPU time of one task in one (kernel stack, user stack, state, why, function).

    `count`, `total_ns`, `max_ns` and `hist` describe the waits that ended in the window, each whole;
    `charged_ns` is the blocked time that falls in the window (parts of waits in progress included,
    parts before the window not): what rates and shares are made of."""

    task: TaskId
    tgid: int
    state: int
    kstack: Stack | None
    ustack: Stack | None
    count: int
    total_ns: int
    max_ns: int
    kstack_id: int = 0  # below 16: why there is no stack (bpf/sched.h STACK_*)
    ustack_id: int = 0
    hist: tuple[int, ...] = ()  # log2(ns) buckets of these waits (empty in recordings made before it was kept)
    why: int = 0  # WHY_* (bpf/sched.h): what the task was doing when it blocked
    func: str = ""  # a kernel thread's function or work function, named
    charged_ns: int = -1  # -1: as total_ns (built by hand)
    weighted_ns: int = 0  # walked stacks: the estimated time of the waits they stand for (sum of d/p)
    var_us2: int = 0  # its variance (us^2)
    woken: tuple[int, int, int] = (0, 0, 0)  # waits ended by a task, an interrupt, an exiting task
    # of charged_ns: the parts of waits in progress at an interval's end that had gone on for LONG_OPEN_NS or
    # more by then, each the part in that interval (a reader that got nothing, when it waits for input:
    # analyzer/attribution.py); 0 where the recording did not keep when waits began
    long_open_ns: int = 0

    @property
    def charged(self) -> int:
        return self.total_ns if self.charged_ns < 0 else self.charged_ns


# a wait in progress at an interval's end that has gone on this long (StackWait.long_open_ns)
LONG_OPEN_NS = 1_000_000_000

_new_stack_wait = record_maker(StackWait)  # a live interval makes one per sleeping thread
_new_totals = record_maker(TaskTotals)
_NOT_WOKEN = (0, 0, 0)
_NOT_WOKEN_LIST = [0, 0, 0]
NO_HIST = (0,) * RUNQ_SLOTS  # a task's run-queue histogram with no wait (one tuple, shared)


@dataclass(frozen=True, slots=True)
class Wakeups:
    """The wakeups of one task by one waker (and the waker's own last wait before it) over the window,
    for the waits drawn for a stack walk: `weighted_ns` and the link's parts are weighted by 1/p."""

    task: TaskId
    waker: TaskId
    waker_tgid: int
    waker_comm: str
    waker_stack: Stack | None
    count: int
    total_ns: int
    in_interrupt: bool = False
    exiting: bool = False
    link: WaitLink = NO_LINK  # the waker's last wait's stratum (func an address: `Model.functions`)
    weighted_ns: int = -1  # -1: as total_ns
    link_blocked_ns: int = 0
    link_runq_ns: int = 0
    wakee: WaitLink = NO_LINK  # the wakee's wait's stratum: state, why, func (an address; `Model.functions`)

    @property
    def weighted(self) -> int:
        return self.total_ns if self.weighted_ns < 0 else self.weighted_ns


class WaitNow(NamedTuple):
    """A wait still in progress at the window's end: the window's StackWait of its key (its task, stacks,
    state and evidence), when it began (CLOCK_BOOTTIME ns; for a task asleep when the recording began, the
    recording's start, so that its length is at least so_far_ns), and its length at the window's end. A
    tuple: a window of thousands of sleeping threads makes one for each, every second."""

    wait: StackWait
    since_ns: int
    so_far_ns: int


@dataclass(frozen=True, slots=True)
class LockWaits:
    """One thread's contentions on one kernel lock from one kernel stack over the window."""

    task: TaskId
    tgid: int
    addr: int
    flags: int
    kind: int
    cache: str
    stack: Stack | None
    stack_id: int
    count: int
    total_ns: int
    max_ns: int
    min_ns: int
    spin_ns: int  # on a CPU
    sleep_ns: int  # off a CPU: blocked + runnable
    owner_pid: int = 0
    owner_comm: str = ""
    symbol: str = ""  # the static variable at the lock's address, when kallsyms has data symbols; rq->__lock
    blocked_ns: int = -1  # the waiter blocked; -1: recorded before the split was kept
    runnable_ns: int = -1  # the waiter woken and waiting for a CPU
    weighted_ns: int = 0  # walked stacks: sum of d/p
    var_us2: int = 0
    field: str = ""  # a lock in a slab object: the struct field holding it
    object: str = ""  # ... a directory's i_rwsem: the directory's path; a run queue's lock: its CPU

    @property
    def split(self) -> bool:
        """Whether the off-CPU part is split into blocked and runnable (recordings since it was kept)."""
        return self.blocked_ns >= 0


_new_lock_waits = record_maker(LockWaits)  # the most numerous of a model's records


@dataclass(frozen=True, slots=True)
class OncpuSamples:
    """On-CPU samples of one thread in one (kernel stack, user stack) over the window."""

    task: TaskId
    tgid: int
    comm: str
    kstack: Stack | None
    ustack: Stack | None
    kstack_id: int  # below 16: why there is no stack (bpf/stacks.h; 4: sampled in user mode)
    ustack_id: int
    samples: int
    period_ns: int


@dataclass(frozen=True)
class CpuSamples:
    """One CPU's samples over the window; event_ns is what its cpu-clock event counted."""

    cpu: int
    samples: int = 0
    period_ns: int = 0
    idle_samples: int = 0
    idle_ns: int = 0
    event_ns: int = 0


@dataclass(frozen=True, slots=True)
class FutexWaits:
    """One thread's futex waits on one futex word, from one user stack and lock call site, over the window."""

    task: TaskId
    tgid: int
    uaddr: int
    op: int
    stack: Stack | None
    stack_id: int
    caller_addr: int
    caller: str
    lock_name: str
    count: int
    total_ns: int
    max_ns: int
    min_ns: int
    flags: int = 0  # FUTEX_F_* (bpf/futex.h)
    blocked_ns: int = -1  # of total_ns, the waiter blocked; -1: recorded before the split was kept
    runnable_ns: int = -1
    woken_irq: int = 0  # waits ended from an interrupt

    @property
    def split(self) -> bool:
        return self.blocked_ns >= 0


@dataclass(frozen=True)
class Model:
    meta: RecordingMeta
    start_ns: int
    end_ns: int
    switches: int
    tasks: dict[TaskId, TaskTotals]
    waits: tuple[StackWait, ...]
    wakeups: tuple[Wakeups, ...]
    matrix: tuple[tuple[int, ...], ...]
    health: dict[str, int] = field(default_factory=dict)
    programs: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # name -> (runs, ns, misses)
    collector_cpu_ns: int = 0
    intervals: int = 0
    kernel_switches: int = 0  # /proc/stat over the same intervals
    lock_waits: tuple[LockWaits, ...] = ()
    slab: tuple[SlabDelta, ...] = ()  # per (cache, tgid, exiting), summed over the window
    slab_caches: dict[int, SlabCache] = field(default_factory=dict)  # by kmem_cache address
    oncpu: tuple[OncpuSamples, ...] = ()
    oncpu_cpus: dict[int, CpuSamples] = field(default_factory=dict)
    cgroups: dict[int, str] = field(default_factory=dict)  # tgid -> cgroup path, as first seen
    # per interval: (seconds, BPF run time ns, program runs, collector CPU ns, uprobe hits): the tool's
    # own cost (analyzer/overhead.py)
    interval_costs: tuple[tuple[float, int, int, int, int], ...] = ()
    futex_waits: tuple[FutexWaits, ...] = ()
    tuning: tuple[TuningChange, ...] = ()  # the overhead budget's steps, in order
    functions: dict[int, str] = field(default_factory=dict)  # kernel function address -> name
    # rows of a damaged recording skipped on read, by table (analyzer/recording_checks.py)
    damaged_rows: dict[str, int] = field(default_factory=dict)
    # the io group, summed over the window: per (device, operation), per device (its `inflight` the last
    # interval's), per (device, operation, submitting process), per (task, device, operation, submitter, wait)
    io: tuple[IoDelta, ...] = ()
    io_queue: dict[int, IoQueueDelta] = field(default_factory=dict)
    io_submitters: tuple[IoSubmitDelta, ...] = ()
    io_wakes: tuple[IoWakeDelta, ...] = ()
    # the waits in progress at the window's end (WaitsNow: made when first read); None where the recording
    # did not keep them
    waits_now: Sequence[WaitNow] | None = None
    # the cgroups a CPU quota throttled in the window, summed (each with its limit as last read), the most
    # throttled first: where the intervals say it (meta.options' throttled_per_interval)
    throttled: tuple[Throttled, ...] = ()
    # each CPU's busy and total ns in the window (/proc/stat's, per interval): where the intervals say it
    # (meta.options' cpu_time_per_interval)
    cpu_time: dict[int, tuple[int, int]] = field(default_factory=dict)
    # each CPU's run-queue waits that ended in the window, (waiting ns, waits): where the intervals say it
    # (meta.options' cpu_runq_per_interval)
    cpu_runq: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9

    @property
    def switches_per_s(self) -> float:
        return self.switches / self.duration_s if self.duration_s else 0.0

    @classmethod
    def from_intervals(cls, meta: RecordingMeta, intervals: Iterable[Interval],
                       task_info: dict[TaskId, TaskInfo], stacks: dict[int, Stack],
                       slab_caches: dict[int, SlabCache] | None = None,
                       functions: dict[int, str] | None = None, lazy: bool = False, keep=None) -> "Model":
        """`slab_caches`: caches described anywhere in the recording (each is described once, when
        first seen, possibly before the window); those described inside the window are added. The
        same for `functions`. `lazy`: the wakeups and the lock waits, which the ranking of causes never
        reads, are folded when first read (`Folded`): a live view folds each interval as it comes, and
        shows them only in some views. Their stacks are looked up in `stacks` then (a live timeline's, which
        keeps those its held intervals use). `keep`: told each interval once folded (ModelFold)."""
        return ModelFold(meta, slab_caches, functions, lazy, keep).add(intervals).model(task_info, stacks)

    @per_model
    def descendants(self, root_tgid: int) -> frozenset[TaskId]:
        """Tasks of a process tree: the root's threads and every process created under it (kept per model and
        root: a view's scope, its own tasks and the export's command each ask; frozen, as it is shared). A
        process is one life of its PID (PIDs are reused: pid_max is 32,768 by default, and a build or a fork
        loop wraps it within minutes), so a process's parent is the life of its parent's PID that had begun
        when it began (the lives of one PID never overlap); the root is the first life of its PID seen. Walked down
        from the root, once per process: a chain of processes (a fork loop, or a recording crafted as one)
        costs its length, not its square."""
        infos = [t.info for t in self.tasks.values()]
        if not any(info.ptgid == root_tgid for info in infos):
            return process_threads(infos, root_tgid)
        return _process_index(self).tree(root_tgid)


def process_threads(infos: list[TaskInfo], root_tgid: int) -> frozenset[TaskId]:
    """Model.descendants of a process no task names as its parent (a live view's own process, every interval): the
    threads of its PID's first life seen, as process_tree finds them, without its walk over the machine's tasks."""
    mine = [info for info in infos if info.tgid == root_tgid]
    starts = sorted(info.task.start_time_ns for info in mine if info.task.pid == root_tgid)
    first = starts[0] if starts else 0
    return frozenset([info.task for info in mine if _life(starts, info.task.start_time_ns) == first])


def _life(starts: list[int], start_ns: int) -> int:
    """Which life of a PID (its leaders' starts, in order) a task begun at `start_ns` is in: its leader's start; 0
    when no leader of it was seen, or before the first."""
    i = bisect_right(starts, start_ns) - 1
    return starts[i] if i >= 0 else 0


def process_tree(infos: list[TaskInfo], root_tgid: int) -> frozenset[TaskId]:
    """Model.descendants, walked down from the root over every task's process."""
    return ProcessIndex(infos).tree(root_tgid)


class ProcessIndex:
    """Every task's process (one life of its PID) and each process's children: what process_tree walks, made once
    for however many roots are walked (a recording's own tasks and its command's)."""

    def __init__(self, infos: list[TaskInfo]):
        self.infos = infos
        lives: dict[int, list[int]] = {}  # tgid -> its leaders' start times, in order
        for info in infos:
            if info.task.pid == info.tgid:
                lives.setdefault(info.tgid, []).append(info.task.start_time_ns)
        for starts in lives.values():
            starts.sort()
        self.lives = lives
        process = self.process
        # the tree's edges come from the leaders, and from the threads of a process whose leader is unseen (its
        # process's leader start 0); a machine's thousands of other threads are only looked at again in tree(),
        # where their PID is one of the tree's
        children: dict[tuple[int, int], set[tuple[int, int]]] = {}
        for info in infos:
            task, tgid = info.task, info.tgid
            if task.pid != tgid:
                starts = lives.get(tgid)
                if starts and 0 < starts[0] <= task.start_time_ns:  # in a life of its process seen: no edge
                    continue
            proc = process(tgid, task.start_time_ns)
            if task.pid != tgid and proc[1]:  # the same, where a leader's start reads 0
                continue
            children.setdefault(process(info.ptgid, proc[1] or task.start_time_ns), set()).add(proc)
        self.children = children

    def process(self, tgid: int, start_ns: int) -> tuple[int, int]:
        """The process of PID `tgid` alive at `start_ns`: its leader's start (0: no leader seen)."""
        return (tgid, _life(self.lives.get(tgid, ()), start_ns))

    def tree(self, root_tgid: int) -> frozenset[TaskId]:
        """The tasks of the root's process tree (process_tree's)."""
        lives, children, process = self.lives, self.children, self.process
        root = (root_tgid, lives[root_tgid][0] if root_tgid in lives else 0)
        procs = {root}
        todo = [root]
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in procs:
                    procs.add(child)
                    todo.append(child)
        tgids = {tgid for tgid, _start in procs}
        return frozenset([info.task for info in self.infos
                          if info.tgid in tgids and process(info.tgid, info.task.start_time_ns) in procs])


@per_model
def _process_index(model: Model) -> ProcessIndex:
    return ProcessIndex([t.info for t in model.tasks.values()])


class ModelFold:
    """The fold of a window, interval by interval: Model.from_intervals is one of these, added its
    intervals at once; a live source folds a wide window a few intervals at a time (stallscope/sources.py),
    so that its fold never holds up a drain. `model` is called once, when every interval is in."""

    def __init__(self, meta: RecordingMeta, slab_caches: dict[int, SlabCache] | None = None,
                 functions: dict[int, str] | None = None, lazy: bool = False, keep=None):
        # `keep(iv, offcpu, long_open)`, told of each interval once folded: its off-CPU records as a report's series
        # keeps them, (key number, charged ns, count, max ns, histogram), and its waits' long-open parts (key
        # number -> ns, long_open_parts), each key numbered as the model's waits are ordered (series.py Ledger)
        self.keep = keep
        self.tasks: dict[TaskId, list] = {}
        self.waits: dict[tuple, list[int]] = {}
        self.wakes, self.locks = WakeFold(), LockFold()  # folded as the intervals come, unless lazy
        self.deferred: list[Interval] = []  # lazy: the intervals whose wakeups and lock waits are folded when read
        self.meta, self.lazy = meta, lazy
        n = self.n = max(meta.cpus, 1)
        self.matrix = [[0] * n for _ in range(n)]
        self.health: dict[str, int] = {}
        self.programs: dict[str, list[int]] = {}
        self.slab: dict[tuple[int, int, bool], list[int]] = {}
        self.caches = dict(slab_caches or {})
        self.funcs = dict(functions or {})
        self.cgroups: dict[int, str] = {}
        self.costs: list[tuple[float, int, int, int, int]] = []
        self.tuning: list[TuningChange] = []
        self.oncpu: dict[tuple, list] = {}
        self.cpus: dict[int, list[int]] = {}
        self.futexes: dict[tuple, list] = {}
        self.io = _IoFold()
        self.throttled: dict[str, list[int]] = {}  # cgroup -> [periods, ns, quota us, period us]
        self.cpu_time: dict[int, list[int]] = {}  # cpu -> [busy ns, total ns]
        self.cpu_runq: dict[int, list[int]] = {}  # cpu -> [run-queue waiting ns, waits]
        self.switches = self.cpu = self.count = self.kswitches = 0
        self.start_ns = self.end_ns = 0
        self.last: Interval | None = None
        # the last interval added, while its waits carried on are not yet folded: `model` makes them at once
        # (_carried_made), and whatever else reads the accumulators folds them first (_settle)
        self._carried: Interval | None = None

    def _settle(self) -> None:
        """The waits carried on in the last interval, folded into the accumulators if they are not yet."""
        iv, self._carried = self._carried, None
        if iv is not None:
            _fold_ongoing(iv, self.tasks, self.waits)

    def _state(self) -> tuple:
        """The accumulators and counts, to be read as locals (the fold's loop reads them per record)."""
        return (self.tasks, self.waits, self.wakes, self.locks, self.deferred, self.matrix, self.health, self.programs,
                self.slab, self.caches, self.funcs, self.cgroups, self.costs, self.tuning, self.oncpu, self.cpus,
                self.futexes, self.io, self.switches, self.cpu, self.count, self.kswitches, self.start_ns, self.end_ns,
                self.last)

    def add(self, intervals: Iterable[Interval]) -> "ModelFold":
        """Intervals after those added so far, in order."""
        meta, lazy, n, keep = self.meta, self.lazy, self.n, self.keep
        (tasks, waits, wakes, locks, deferred, matrix, health, programs, slab, caches, funcs, cgroups, costs, tuning,
         oncpu, cpus, futexes, io, switches, cpu, count, kswitches, start_ns, end_ns, last) = self._state()
        kept: list | None = None
        for iv in intervals:
            if self._carried is not None:  # the interval before's, before this one's records
                self._settle()
            if count == 0:
                start_ns = iv.start_ns
            end_ns = iv.end_ns
            last = iv
            count += 1
            switches += iv.switches
            kswitches += iv.kernel_switches
            cpu += iv.collector_cpu_ns
            _fold_tasks(tasks, iv.tasks)
            if keep is not None:
                kept = []
            _fold_waits(waits, iv.offcpu, kept)
            if iv.ongoing:
                # its waits carried on: folded before the next interval's records, or made at once by `model`. Only
                # the long parts of the waits handed over are folded meanwhile, into the keys of its records
                if keep is None:
                    self._carried = iv
                else:
                    _fold_ongoing(iv, tasks, waits)
            # the long parts of the waits the dump handed over, worked out once for the fold and the series (those
            # of the waits carried on are folded with them)
            handed = handed_long(iv) if iv.opened and iv.beginnings_kept else ()
            if handed:
                _fold_long_open(handed, waits)
            if keep is not None:
                if iv.ongoing:  # each as the charge-only record it stands for (Interval.offcpu_records)
                    ns = iv.ongoing_ns
                    kept.extend((waits[k][8], ns, 0, 0, ()) for k in iv.ongoing)
                keep(iv, tuple(kept), {waits[k][8]: ns for k, ns in long_open_parts(iv, handed)})
            if lazy:
                if iv.wakers or iv.locks:
                    deferred.append(iv)
            else:
                wakes.add(iv.wakers)
                locks.add_records(iv.locks)
            funcs.update(iv.functions)
            for sd in iv.slab:
                acc = slab.setdefault((sd.cache, sd.tgid, sd.exiting), [0] * len(_SLAB_COUNTS))
                for i, name in enumerate(_SLAB_COUNTS):
                    acc[i] += getattr(sd, name)
            for sc in iv.slab_caches:
                caches[sc.addr] = sc
            for o in iv.oncpu:
                e = oncpu.setdefault((o.task, o.tgid, o.kstack, o.ustack), [o.comm, 0, 0])
                e[1] += o.samples
                e[2] += o.period_ns
            costs.append((iv.duration_ns / 1e9, sum(p.run_time_ns for p in iv.programs),
                          sum(p.run_cnt for p in iv.programs), iv.collector_cpu_ns, uprobe_hits(iv.programs)))
            tuning.extend(iv.tuning)
            for tgid, _start, path in iv.cgroups:
                cgroups[tgid] = path
            for t in iv.throttled:
                self._throttle(t.cgroup, t.periods, t.throttled_ns, t.quota_us, t.period_us)
            for c, busy, total in iv.cpu_time:
                add_pair(self.cpu_time, c, busy, total)
            for c, ns, n in iv.cpu_runq:
                add_pair(self.cpu_runq, c, ns, n)
            for c in iv.oncpu_cpus:
                acc = cpus.setdefault(c.cpu, [0, 0, 0, 0, 0])
                for j, v in enumerate((c.samples, c.period_ns, c.idle_samples, c.idle_ns, c.event_ns)):
                    acc[j] += v
            for fx in iv.futex:
                e = futexes.setdefault((fx.task, fx.tgid, fx.uaddr, fx.op, fx.ustack, fx.caller_addr, fx.flags),
                                       ["", "", 0, 0, 0, 0, 0, 0, 0])
                if fx.blocked_ns is None or e[6] < 0:
                    e[6] = e[7] = -1
                else:
                    e[6] += fx.blocked_ns
                    e[7] += fx.runnable_ns or 0
                e[8] += fx.woken_irq
                e[0] = e[0] or fx.caller
                e[1] = e[1] or fx.lock_name
                e[2] += fx.count
                e[3] += fx.total_ns
                e[4] = max(e[4], fx.max_ns)
                e[5] = min(e[5], fx.min_ns) if e[5] and fx.min_ns else (e[5] or fx.min_ns)
            io.add(iv)
            for src, dst, c in iv.migrations:
                if src < n and dst < n:
                    matrix[src][dst] += c
            for k, v in iv.health.items():
                health[k] = health.get(k, 0) + v
            _check_invariants(meta, iv, health)
            for p in iv.programs:
                acc = programs.setdefault(p.name, [0, 0, 0])
                acc[0] += p.run_cnt
                acc[1] += p.run_time_ns
                acc[2] += p.recursion_misses
        self.switches, self.cpu, self.count, self.kswitches = switches, cpu, count, kswitches
        self.start_ns, self.end_ns, self.last = start_ns, end_ns, last
        return self

    def _throttle(self, cgroup: str, periods: int, ns: int, quota_us: int, period_us: int) -> None:
        e = self.throttled.get(cgroup)
        if e is None:
            self.throttled[cgroup] = [periods, ns, quota_us, period_us]
        else:
            e[0] += periods
            e[1] += ns
            e[2], e[3] = quota_us, period_us  # the limit as last read

    def merge(self, other: "ModelFold") -> "ModelFold":
        """The fold of the intervals of `other` (which come after those of this one) added to this one, as
        if they had been added here: keys first met there come after this one's, in their order, so the
        model is the same (a live view's wide window: timeline.py SlidingFold). `other` is left as it is
        (what is taken from it is copied); both lazy, and this one's model not yet made."""
        if not (self.lazy and other.lazy):
            raise ValueError("only lazy folds merge (their wakeups and lock waits are folded when read)")
        self._settle()
        other._settle()  # its accumulators as its model reads them
        tasks = self.tasks
        for tid, o in other.tasks.items():
            t = tasks.get(tid)
            if t is None:
                t = tasks[tid] = o[:]
                if o[9] is not None:
                    t[9] = o[9][:]
                continue
            t[0] += o[0]
            t[1] += o[1]
            if o[2] > t[2]:
                t[2] = o[2]
            t[3] += o[3]
            t[4] += o[4]
            if o[5] > t[5]:
                t[5] = o[5]
            t[6] += o[6]
            t[7] += o[7]
            t[8] += o[8]
            if o[9] is not None:
                t[9] = o[9][:] if t[9] is None else list(map(add, t[9], o[9]))
            t[10] += o[10]
            t[11] += o[11]
        waits = self.waits
        for key, o in other.waits.items():
            w = waits.get(key)
            if w is None:
                waits[key] = [o[0], o[1], o[2], o[3][:] if o[3] is not None else None, o[4], o[5], o[6], o[7][:],
                              len(waits), o[9]]
                continue
            w[0] += o[0]
            w[1] += o[1]
            if o[2] > w[2]:
                w[2] = o[2]
            if o[3] is not None:
                w[3] = o[3][:] if w[3] is None else list(map(add, w[3], o[3]))
            w[4] += o[4]
            w[5] += o[5]
            w[6] += o[6]
            if o[7] != _NOT_WOKEN_LIST:
                w[7] = list(map(add, w[7], o[7]))
            w[9] += o[9]
        self.deferred.extend(other.deferred)
        for row, orow in zip(self.matrix, other.matrix):
            for j, c in enumerate(orow):
                row[j] += c
        health = self.health
        for k, v in other.health.items():
            health[k] = health.get(k, 0) + v
        _sum_lists(self.programs, other.programs)
        _sum_lists(self.slab, other.slab)
        self.caches.update(other.caches)
        self.funcs.update(other.funcs)
        self.cgroups.update(other.cgroups)
        for cg, e in other.throttled.items():
            self._throttle(cg, *e)
        for c, e in other.cpu_time.items():
            add_pair(self.cpu_time, c, *e)
        for c, e in other.cpu_runq.items():
            add_pair(self.cpu_runq, c, *e)
        self.costs.extend(other.costs)
        self.tuning.extend(other.tuning)
        for key, o in other.oncpu.items():
            e = self.oncpu.setdefault(key, [o[0], 0, 0])
            e[1] += o[1]
            e[2] += o[2]
        _sum_lists(self.cpus, other.cpus)
        for key, o in other.futexes.items():
            e = self.futexes.get(key)
            if e is None:
                self.futexes[key] = o[:]
                continue
            e[0] = e[0] or o[0]
            e[1] = e[1] or o[1]
            e[2] += o[2]
            e[3] += o[3]
            e[4] = max(e[4], o[4])
            e[5] = min(e[5], o[5]) if e[5] and o[5] else (e[5] or o[5])
            if e[6] < 0 or o[6] < 0:
                e[6] = e[7] = -1
            else:
                e[6] += o[6]
                e[7] += o[7]
            e[8] += o[8]
        self.io.merge(other.io)
        if other.count:
            if not self.count:
                self.start_ns = other.start_ns
            self.end_ns, self.last = other.end_ns, other.last
        self.switches += other.switches
        self.cpu += other.cpu
        self.count += other.count
        self.kswitches += other.kswitches
        return self

    def model(self, task_info: dict[TaskId, TaskInfo], stacks: dict[int, Stack]) -> Model:
        """The window's model, its tasks named from `task_info` and its stacks from `stacks`."""
        meta, lazy = self.meta, self.lazy
        (tasks, waits, wakes, locks, deferred, matrix, health, programs, slab, caches, funcs, cgroups, costs, tuning,
         oncpu, cpus, futexes, io, switches, cpu, count, kswitches, start_ns, end_ns, last) = self._state()
        carried = self._carried
        fused = _carried_made(carried, tasks, waits, task_info, stacks, funcs) if carried is not None else None
        if carried is not None and fused is None:
            self._settle()
        totals = _made_totals(tasks, task_info)
        if fused is not None:
            totals.update(fused[1])  # after the tasks met before, as folding them would add them
        # a wait is attributed at the switch-in after its wakeup, possibly an interval later
        # than the task's own totals moved: such a task is still named
        for key in chain(waits, futexes):
            if key[0] not in totals:
                totals[key[0]] = TaskTotals(info=task_info.get(key[0]) or TaskInfo(key[0], key[1], 0, "?"))
        # a thread that ran throughout may never have switched: its samples name it
        for (tid, tgid, *_rest), e in oncpu.items():
            if tid not in totals:
                totals[tid] = TaskTotals(info=task_info.get(tid) or TaskInfo(tid, tgid, 0, e[0]))
        made = _made_waits(waits, stacks, funcs)
        carried_at = None
        if fused is not None:
            carried_at = len(made)  # after the waits met before, as folding them would add them
            made += fused[0]
        return Model(
            meta=meta, start_ns=start_ns, end_ns=end_ns, switches=switches, tasks=totals,
            waits=made, waits_now=_waits_now(last, waits, made, carried_at),
            wakeups=Folded(lambda: WakeFold.of(deferred).result(stacks)) if lazy else wakes.result(stacks),
            matrix=tuple(tuple(r) for r in matrix), health=health,
            programs={k: tuple(v) for k, v in programs.items()}, collector_cpu_ns=cpu, intervals=count,
            kernel_switches=kswitches,
            lock_waits=LockFolded(deferred, stacks) if lazy else locks.result(stacks),
            slab=tuple(SlabDelta(cache, tgid, exiting, *acc) for (cache, tgid, exiting), acc in sorted(slab.items())),
            slab_caches=caches,
            oncpu=tuple(OncpuSamples(tid, tgid, e[0], stacks.get(k), stacks.get(u), k, u, e[1], e[2])
                        for (tid, tgid, k, u), e in oncpu.items()),
            oncpu_cpus={cpu: CpuSamples(cpu, *acc) for cpu, acc in sorted(cpus.items())},
            cgroups=cgroups, interval_costs=tuple(costs), tuning=tuple(tuning),
            futex_waits=tuple(FutexWaits(tid, tgid, uaddr, op, stacks.get(us), us, caller_addr, *e[:6], flags, *e[6:])
                              for (tid, tgid, uaddr, op, us, caller_addr, flags), e in futexes.items()),
            functions=funcs, **io.fields(),
            throttled=tuple(sorted((Throttled(cg, *e) for cg, e in self.throttled.items()),
                                   key=lambda t: (-t.throttled_ns, t.cgroup))),
            cpu_time={c: (e[0], e[1]) for c, e in sorted(self.cpu_time.items())},
            cpu_runq={c: (e[0], e[1]) for c, e in sorted(self.cpu_runq.items())},
        )


def add_pair(table: dict, key, a: int, b: int) -> None:
    """Two counters of `key` added into `table`'s pair of it (made when missing): a CPU's busy and total ns, or its
    run-queue ns and waits, in a window; a function's samples or a lock row's waits in an interval of a series."""
    e = table.get(key)
    if e is None:
        table[key] = [a, b]
    else:
        e[0] += a
        e[1] += b


class WakeFold:
    """A window's wakeups, summed per (wakee, waker, its stack and context, the two waits' strata)."""

    def __init__(self) -> None:
        self.acc: dict[tuple, list] = {}

    @classmethod
    def of(cls, intervals: list[Interval]) -> "WakeFold":
        fold = cls()
        for iv in intervals:
            fold.add(iv.wakers)
        return fold

    def add(self, wakers: tuple[WakerDelta, ...]) -> None:
        acc = self.acc
        for wk in wakers:
            e = acc.setdefault((wk.task, wk.waker, wk.waker_tgid, wk.waker_kstack, wk.in_interrupt, wk.exiting,
                                wk.link, wk.wakee), [wk.waker_comm, 0, 0, 0, 0, 0])
            e[1] += wk.count
            e[2] += wk.total_ns
            e[3] += wk.weighted
            e[4] += wk.link_blocked_ns
            e[5] += wk.link_runq_ns

    def result(self, stacks: dict[int, Stack]) -> tuple[Wakeups, ...]:
        return tuple(Wakeups(tid, waker, wtgid, e[0], stacks.get(ks), e[1], e[2], irq, exiting, link, e[3], e[4], e[5],
                             wakee)
                     for (tid, waker, wtgid, ks, irq, exiting, link, wakee), e in self.acc.items())


lock_values = attrgetter("task.pid", "task.start_time_ns", *LOCK_VALUES[2:])
_KEY_END = 8  # the key's values


class LockFold:
    """Kernel lock contentions summed per key (LOCK_VALUES), each key numbered in the order first met:
    from an interval's records, or from a recording's rows without a record made for each (a report of a
    long recording reads a million). `result` is the model's table, in the keys' order; `check` counts the
    rows _check_invariants counts for records. Addresses and stack ids may come signed (as SQLite keeps
    them): the table has them unsigned."""

    def __init__(self) -> None:
        self.index: dict[tuple, int] = {}
        self.acc: list[list] = []
        self.too_long = 0  # waits longer than the recording
        self.bad_split = 0  # blocked and runnable parts above the wait

    @classmethod
    def of(cls, intervals: list[Interval]) -> "LockFold":
        fold = cls()
        for iv in intervals:
            fold.add_records(iv.locks)
        return fold

    def add_records(self, records: tuple[LockDelta, ...]) -> None:
        add = self.add
        for lk in records:
            add(lock_values(lk))

    def add(self, v: tuple) -> int:
        """One record's values; the number of its key."""
        key = v[:_KEY_END]
        n = self.index.get(key)
        if n is None:
            n = self.index[key] = len(self.acc)
            e = [0, 0, 0, 0, 0, 0, 0, "", "", 0, 0, 0, 0, "", ""]
            self.acc.append(e)
        else:
            e = self.acc[n]
        (_pid, _start, _tgid, _addr, _flags, _kind, _cache, _kstack, count, total_ns, max_ns, min_ns, spin_ns,
         sleep_ns, owner_pid, owner_comm, symbol, blocked_ns, runnable_ns, weighted_ns, var_us2, fld, obj) = v
        e[13] = e[13] or fld or ""
        e[14] = e[14] or obj or ""
        if blocked_ns is None or e[9] < 0:
            e[9] = e[10] = -1
        else:
            e[9] += blocked_ns
            e[10] += runnable_ns or 0
        e[11] += weighted_ns or 0
        e[12] += var_us2 or 0
        e[8] = e[8] or symbol
        e[0] += count
        e[1] += total_ns
        if max_ns > e[2]:
            e[2] = max_ns
        e[3] = min(e[3], min_ns) if e[3] and min_ns else (e[3] or min_ns)
        e[4] += spin_ns
        e[5] += sleep_ns
        if owner_pid:
            e[6], e[7] = owner_pid, owner_comm
        return n

    def check(self, v: tuple, span_ns: int) -> None:
        """The invariants of one row of an interval of a recording `span_ns` long (_check_invariants)."""
        if v[10] > span_ns:
            self.too_long += 1
        if v[17] is not None and v[17] + (v[18] or 0) > v[9]:
            self.bad_split += 1

    def result(self, stacks: dict[int, Stack]) -> tuple[LockWaits, ...]:
        out = []
        for (pid, start_ns, tgid, addr, flags, kind, cache, ks), e in zip(self.index, self.acc):
            ks = u64(ks)
            out.append(_new_lock_waits(TaskId(pid, start_ns), tgid, u64(addr), flags, kind, cache, stacks.get(ks),
                                       ks, *e))
        return tuple(out)


class Folded(Sequence):
    """A model's table folded when first read (Model.from_intervals(lazy=True)), then kept: a tuple to
    whoever reads it (iterated, indexed, measured, compared)."""

    __slots__ = ("_fold", "_items")

    def __init__(self, fold: Callable[[], tuple]):
        self._fold, self._items = fold, None

    @property
    def items(self) -> tuple:
        items = self._items
        if items is None:
            fold = self._fold
            if fold is None:  # folded meanwhile by another thread (a live view's and its session's read a snapshot)
                return self._items
            items = self._items = fold()
            self._folded()
        return items

    def _folded(self) -> None:
        """What the fold needed, let go once it is done."""
        self._fold = None

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __iter__(self):
        return iter(self.items)

    def __eq__(self, other) -> bool:
        return self.items == (other.items if isinstance(other, Folded) else other)

    def __hash__(self) -> int:
        return hash(self.items)

    def __repr__(self) -> str:
        return repr(self.items)


class LockFolded(Folded):
    """A window's kernel lock records (Model.lock_waits), folded when first read; or only those of some lock types
    (`only`), folded from their records alone while the whole table is not: a live ranking asks for the sleeping
    locks' rows each interval (locks.locks_by_site) beside hackbench's 1,000-3,000 spinning lock records."""

    __slots__ = ("_intervals", "_stacks")

    def __init__(self, intervals: list[Interval], stacks: dict[int, Stack]):
        super().__init__(lambda: LockFold.of(intervals).result(stacks))
        self._intervals, self._stacks = intervals, stacks

    def _folded(self) -> None:
        self._fold = self._intervals = self._stacks = None

    def only(self, keep: Callable[[int], bool]) -> tuple[LockWaits, ...]:
        """The records whose flags `keep` takes, in the table's order (a record's flags are part of its key: the
        table's records of those flags are what their records alone fold into)."""
        # read once: another thread may fold the whole table meanwhile, which lets them go after it is made
        intervals, stacks = self._intervals, self._stacks
        if intervals is None or stacks is None:
            return tuple(w for w in self._items if keep(w.flags))
        fold = LockFold()
        for iv in intervals:
            fold.add_records([lk for lk in iv.locks if keep(lk.flags)])
        return fold.result(stacks)


class WaitsNow(Folded):
    """The waits in progress at a window's end, as WaitNow records made when first read (a window of
    thousands of sleeping threads has as many, and most readers want a few of them), and as the last
    interval holds them, for a reader that groups them: `keys` (each an OngoingWait), `since`, and
    `places`, each key's StackWait's place in `waits` (the model's), in one order (-1: none, never
    expected: each was charged in that interval, handed over or carried on)."""

    __slots__ = ("keys", "since", "places", "waits", "end_ns")

    def __init__(self, keys: tuple, since: tuple[int, ...], places: tuple[int, ...], waits: tuple[StackWait, ...],
                 end_ns: int):
        # the fold holds the fields, not the object: a bound method would make a reference cycle, which the
        # cycle collector never sees in a live view (what an interval made is frozen), so that every
        # interval's waits, never read, stayed for as long as `top` ran
        super().__init__(partial(_waits_now_made, since, places, waits, end_ns))
        self.keys, self.since, self.places, self.waits, self.end_ns = keys, since, places, waits, end_ns


def _waits_now_made(since: tuple[int, ...], places: tuple[int, ...], waits: tuple[StackWait, ...],
                    end: int) -> tuple[WaitNow, ...]:
    return tuple([WaitNow(waits[i], s, end - s if end > s else 0) for s, i in zip(since, places) if i >= 0])


_POSITION = 8  # a wait accumulator's place among the window's (its StackWait's in `Model.waits`)


def _waits_now(last: Interval | None, waits: dict, made: tuple[StackWait, ...],
               carried_at: int | None = None) -> WaitsNow | None:
    """The waits in progress at the end of the window's last interval (None where it did not keep them);
    `waits`: the window's wait accumulators, each with its place in the StackWaits `made` of them;
    `carried_at`: where the last interval's waits carried on are in `made`, in their order, when they were made
    at once (_carried_made) rather than folded into `waits`."""
    if last is None or not last.beginnings_kept:
        return None

    opened, get = last.opened, waits.get
    keys = last.ongoing + tuple([w.wait for w in opened]) if opened else last.ongoing
    since = last.ongoing_since + tuple([w.since_ns for w in opened]) if opened else last.ongoing_since
    if carried_at is None:
        places = tuple([v[_POSITION] if (v := get(k)) is not None else -1 for k in keys])
    else:
        places = tuple(range(carried_at, carried_at + len(last.ongoing))) + tuple(
            [v[_POSITION] if (v := get(w.wait)) is not None else -1 for w in opened])
    return WaitsNow(keys, since, places, made, last.end_ns)


def long_open_parts(iv: Interval, handed: Iterable[tuple[tuple, int]] | None = None) -> Iterator[tuple[tuple, int]]:
    """The waits in progress at the interval's end that had gone on for LONG_OPEN_NS or more by then: each
    key (an OngoingWait) and its charge in the interval (StackWait.long_open_ns): a wait carried on, the
    interval's span; one the dump handed over, its charge-only record's (`handed`: handed_long's, where they
    were worked out already). None where the interval does not say when its waits began."""
    if not iv.beginnings_kept:
        return
    late, ns = iv.end_ns - LONG_OPEN_NS, iv.ongoing_ns
    for key, since in zip(iv.ongoing, iv.ongoing_since):
        if since <= late:
            yield key, ns
    yield from handed_long(iv) if handed is None else handed


def handed_long(iv: Interval) -> list[tuple[tuple, int]]:
    """long_open_parts of the waits the interval's dump handed over."""
    late = iv.end_ns - LONG_OPEN_NS
    handed = {ws.wait for ws in iv.opened if ws.since_ns <= late} if iv.opened else None
    if not handed:
        return []
    charges: dict[tuple, int] = {}
    for o in iv.offcpu:
        if o.count == 0 and o.total_ns == 0 and o.charged_ns:
            key = (o.task, o.tgid, o.state, o.kstack, o.ustack, o.why, o.func)
            if key in handed:
                charges[key] = charges.get(key, 0) + o.charged_ns
    return list(charges.items())


def _fold_long_open(handed: list[tuple[tuple, int]], waits: dict) -> None:
    """long_open_parts of the waits the interval's dump handed over (handed_long) into the window's wait
    accumulators (their layout: Model.from_intervals); those of the waits carried on are _fold_ongoing's."""
    get = waits.get
    for key, part in handed:
        if (w := get(key)) is not None:
            w[9] += part


def _fold_ongoing(iv: Interval, tasks: dict, waits: dict) -> None:
    """An interval's waits in progress throughout it, into a window's task and wait accumulators (their
    layouts: Model.from_intervals): each blocked `ongoing_ns` more, as a charge-only record would be; and,
    where the interval says when they began, the part of each that had gone on LONG_OPEN_NS by its end
    (long_open_parts: the interval's span)."""
    kept = iv.beginnings_kept
    _fold_carried(tasks, waits, iv.ongoing, iv.ongoing_ns, iv.ongoing_since if kept else None,
                  iv.end_ns - LONG_OPEN_NS)


def _sum_lists(mine: dict, theirs: dict) -> None:
    """Accumulators of counts (lists of one length) of later intervals added into these, key by key; a key
    first met there is copied (ModelFold.merge)."""
    for key, o in theirs.items():
        acc = mine.get(key)
        if acc is None:
            mine[key] = o[:]
        else:
            for j, v in enumerate(o):
                acc[j] += v


def _add_slots(acc: list[int] | None, hist: tuple[tuple[int, int], ...]) -> list[int]:
    """A log2 histogram's (slot, count) pairs added into a list of RUNQ_SLOTS counts (made when None);
    slots beyond it dropped."""
    if acc is None:
        acc = [0] * RUNQ_SLOTS
    for slot, c in hist:
        if 0 <= slot < RUNQ_SLOTS:
            acc[slot] += c
    return acc


def _add_hist(acc: dict[int, int], hist: tuple[tuple[int, int], ...]) -> None:
    for slot, c in hist:
        acc[slot] = acc.get(slot, 0) + c


def _hist(acc: dict[int, int]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted((s, c) for s, c in acc.items() if c))


_IO_SUMS = ("requests", "sectors", "total_ns", "timed", "queued_ns", "device_ns", "bytes", "unaccounted")
_IO_HISTS = ("size_hist", "total_hist", "queued_hist", "device_hist")


class _IoFold:
    """The io group's records summed over a window."""

    def __init__(self) -> None:
        self.stats: dict[tuple[int, int], list] = {}
        self.queue: dict[int, list] = {}
        self.submit: dict[tuple, list] = {}
        self.wakes: dict[tuple, list] = {}

    def add(self, iv: Interval) -> None:
        for d in iv.io:
            e = self.stats.setdefault((d.dev, d.op), [[0] * len(_IO_SUMS), [{} for _ in _IO_HISTS]])
            for i, name in enumerate(_IO_SUMS):
                e[0][i] += getattr(d, name)
            for i, name in enumerate(_IO_HISTS):
                _add_hist(e[1][i], getattr(d, name))
        for q in iv.io_queue:
            e = self.queue.setdefault(q.dev, [q.name, 0, 0, 0, {}, 0])
            e[0] = q.name or e[0]
            e[1] += q.issued
            e[2] += q.busy_ns
            e[3] += q.depth_sum
            _add_hist(e[4], q.depth_hist)
            e[5] = q.inflight
        for s in iv.io_submitters:
            e = self.submit.setdefault((s.dev, s.op, s.tgid), [s.comm, 0, 0])
            e[0] = s.comm or e[0]
            e[1] += s.requests
            e[2] += s.sectors
        for w in iv.io_wakes:
            e = self.wakes.setdefault((w.task, w.tgid, w.dev, w.op, w.submit_tgid, w.wakee),
                                      [w.submit_comm, 0, 0, 0, 0, 0, 0])
            e[0] = w.submit_comm or e[0]
            for i, v in enumerate((w.count, w.wait_ns, w.req_ns, w.timed, w.queued_ns, w.device_ns), 1):
                e[i] += v

    def merge(self, other: "_IoFold") -> None:
        """`other`'s sums (of later intervals) added, as ModelFold.merge: the last name and queue depth seen win."""
        for key, (sums, hists) in other.stats.items():
            e = self.stats.setdefault(key, [[0] * len(_IO_SUMS), [{} for _ in _IO_HISTS]])
            e[0] = [a + b for a, b in zip(e[0], sums)]
            for mine, h in zip(e[1], hists):
                for slot, c in h.items():
                    mine[slot] = mine.get(slot, 0) + c
        for dev, o in other.queue.items():
            e = self.queue.setdefault(dev, [o[0], 0, 0, 0, {}, 0])
            e[0] = o[0] or e[0]
            e[1] += o[1]
            e[2] += o[2]
            e[3] += o[3]
            for slot, c in o[4].items():
                e[4][slot] = e[4].get(slot, 0) + c
            e[5] = o[5]
        for key, o in other.submit.items():
            e = self.submit.setdefault(key, [o[0], 0, 0])
            e[0] = o[0] or e[0]
            e[1] += o[1]
            e[2] += o[2]
        for key, o in other.wakes.items():
            e = self.wakes.setdefault(key, [o[0], 0, 0, 0, 0, 0, 0])
            e[0] = o[0] or e[0]
            for i in range(1, 7):
                e[i] += o[i]

    def fields(self) -> dict:
        return {
            "io": tuple(IoDelta(dev, op, *sums, *(_hist(h) for h in hists))
                        for (dev, op), (sums, hists) in sorted(self.stats.items())),
            "io_queue": {dev: IoQueueDelta(dev, e[0], e[1], e[2], e[3], _hist(e[4]), e[5])
                         for dev, e in sorted(self.queue.items())},
            "io_submitters": tuple(IoSubmitDelta(dev, op, tgid, *e) for (dev, op, tgid), e in sorted(self.submit.items())),
            "io_wakes": tuple(IoWakeDelta(task, tgid, dev, op, st, e[0], wakee, *e[1:])
                              for (task, tgid, dev, op, st, wakee), e in self.wakes.items()),
        }


def wait_limit_ns(meta: RecordingMeta, iv: Interval | None) -> int:
    """The longest a wait of an interval can be: from when the probes began to load (a wait they saw begin
    before the recording's start, the set-up drain, is measured from then; `probes_loading_ns`, older
    recordings have the start only) to the recording's end (the interval's while it is being made), with the
    slack. `iv` None: any interval of a closed recording."""
    loading = meta.options.get("probes_loading_ns") or meta.start_ns
    return (meta.end_ns or iv.end_ns) - min(loading, meta.start_ns) + INVARIANT_SLACK_NS


def count_invariants(health: dict[str, int], counts) -> None:
    """(health key, count) pairs added to `health` (those of 0 leave it as it is)."""
    for key, n in counts:
        if n:
            health[key] = health.get(key, 0) + n


WAIT_TOO_LONG, LOCK_SPLIT_ABOVE_TOTAL = "invariant.wait_longer_than_recording", "invariant.lock_split_above_total"


def _check_invariants(meta: RecordingMeta, iv: Interval, health: dict[str, int]) -> None:
    """What cannot be, counted on the raw values (never clamped): a task blocked longer than the
    interval charged to it (a rate above 1 s/s), a single wait longer than the recording, a lock wait
    split into more than its length (LockFold.check counts the last two of lock rows read without records)."""
    limit = iv.duration_ns + INVARIANT_SLACK_NS
    span = wait_limit_ns(meta, iv)
    bad_rate = sum(1 for d in iv.tasks if d.offcpu_ns > limit)
    too_long = (sum(1 for d in iv.tasks if d.offcpu_max_ns > span) + sum(1 for o in iv.offcpu if o.max_ns > span)
                + sum(1 for lk in iv.locks if lk.max_ns > span) + sum(1 for f in iv.futex if f.max_ns > span))
    bad_split = sum(1 for lk in iv.locks if lk.blocked_ns is not None
                    and lk.blocked_ns + (lk.runnable_ns or 0) > lk.total_ns)
    count_invariants(health, (("invariant.offcpu_rate_above_1s_per_s", bad_rate), (WAIT_TOO_LONG, too_long),
                              (LOCK_SPLIT_ABOVE_TOTAL, bad_split)))


# ---- the fold's loops over records, in C where analyzer/modelfold.c is built ----------------------------------
# Each interval of a window folds its task and off-CPU records (5,000 sleeping threads: 3,000 and 6,000 an
# interval `top` shows; a report's 600,000), and its model makes a record per task and per wait. The Python
# functions below are what the C does (tests/test_modelfold.py checks that the two agree).

def py_fold_tasks(tasks: dict, records: Iterable[TaskDelta]) -> None:
    """TaskDelta records into a window's task accumulators: each made when its key is first met (not built
    for every record and dropped), in TaskTotals' order after its info: offcpu ns, count, max, runq wait ns,
    count, max, voluntary and involuntary switches, migrations, histogram, runq latency ns, run ns."""
    for d in records:
        t = tasks.get(d.task)
        if t is None:  # first met (in a one-interval window, every task): its own values
            tasks[d.task] = [
                d.offcpu_ns, d.offcpu_count, d.offcpu_max_ns if d.offcpu_max_ns > 0 else 0, d.runq_wait_ns,
                d.runq_count, d.runq_max_ns if d.runq_max_ns > 0 else 0, d.voluntary_switches,
                d.involuntary_switches, d.migrations, _add_slots(None, d.runq_hist) if d.runq_hist else None,
                d.runq_latency_ns, d.run_ns]
            continue
        t[0] += d.offcpu_ns
        t[1] += d.offcpu_count
        if d.offcpu_max_ns > t[2]:
            t[2] = d.offcpu_max_ns
        t[3] += d.runq_wait_ns
        t[4] += d.runq_count
        if d.runq_max_ns > t[5]:
            t[5] = d.runq_max_ns
        t[6] += d.voluntary_switches
        t[7] += d.involuntary_switches
        t[8] += d.migrations
        t[10] += d.runq_latency_ns
        t[11] += d.run_ns
        if d.runq_hist:
            t[9] = _add_slots(t[9], d.runq_hist)


def py_fold_waits(waits: dict, records: Iterable[OffcpuDelta], kept: list | None = None) -> None:
    """OffcpuDelta records into a window's wait accumulators, by key (task, tgid, state, kstack, ustack, why,
    func): count, total ns, max, histogram, charged ns, weighted ns, variance, woken, order met, long-open ns.
    `kept`: each record appended as a report's series keeps it, (its key's order met, charged ns, count, max ns,
    histogram)."""
    for o in records:
        key = (o.task, o.tgid, o.state, o.kstack, o.ustack, o.why, o.func)
        w = waits.get(key)
        if w is None:  # first met: its own values
            waits[key] = [o.count, o.total_ns, o.max_ns if o.max_ns > 0 else 0,
                          _add_slots(None, o.hist) if o.hist else None,
                          o.total_ns if o.charged_ns is None else o.charged_ns, o.weighted_ns, o.var_us2,
                          list(o.woken), len(waits), 0]
            if kept is not None:
                kept.append((len(waits) - 1, o.charged, o.count, o.max_ns, o.hist))
            continue
        w[0] += o.count
        w[1] += o.total_ns
        if o.max_ns > w[2]:
            w[2] = o.max_ns
        w[4] += o.total_ns if o.charged_ns is None else o.charged_ns  # o.charged
        w[5] += o.weighted_ns
        w[6] += o.var_us2
        if o.woken != _NOT_WOKEN:
            for j, woken in enumerate(o.woken):
                w[7][j] += woken
        if o.hist:
            w[3] = _add_slots(w[3], o.hist)
        if kept is not None:
            kept.append((w[8], o.charged, o.count, o.max_ns, o.hist))


def py_fold_ongoing(tasks: dict, waits: dict, keys: Iterable[tuple], ns: int, since: Iterable[int] | None,
                    late: int) -> None:
    """Waits carried on (OngoingWait keys) into a window's task and wait accumulators, each charged `ns`; with
    `since`, when each began, in their order: those begun by `late` have `ns` more of their long-open part."""
    began = list(since) if since is not None else []
    for i, key in enumerate(keys):
        w = waits.get(key)
        if w is None:
            w = waits[key] = [0, 0, 0, None, ns, 0, 0, [0, 0, 0], len(waits), 0]
        else:
            w[4] += ns
        if i < len(began) and began[i] <= late:  # zip(keys, since)'s pairs
            w[9] += ns
        t = tasks.get(key[0])
        if t is None:
            tasks[key[0]] = [ns, 0, 0, 0, 0, 0, 0, 0, 0, None, 0, 0]
        else:
            t[0] += ns


def _unknown_task(tid: TaskId) -> TaskInfo:
    return TaskInfo(tid, 0, 0, "?")


def _unnamed_function(func: int) -> str:
    return f"{func:#x}"


def py_made_totals(tasks: dict, task_info: dict[TaskId, TaskInfo]) -> dict[TaskId, TaskTotals]:
    """The model's TaskTotals from a window's task accumulators (whose histograms become tuples)."""
    totals = {}
    for tid, t in tasks.items():
        info = task_info.get(tid) or _unknown_task(tid)
        t[9] = NO_HIST if t[9] is None else tuple(t[9])
        totals[tid] = _new_totals(info, *t)
    return totals


def py_made_waits(waits: dict, stacks: dict[int, Stack], funcs: dict[int, str]) -> tuple[StackWait, ...]:
    """The model's StackWaits from a window's wait accumulators, in their order."""
    return tuple(_new_stack_wait(tid, tgid, state, stacks.get(k), stacks.get(u), *v[:3], k, u,
                                 tuple(v[3]) if v[3] else (), why,
                                 (funcs[func] if func in funcs else _unnamed_function(func)) if func else "", v[4], v[5], v[6],
                                 tuple(v[7]), v[9])
                 for (tid, tgid, state, k, u, why, func), v in waits.items())


try:
    from stallscope.analyzer import _modelfold
except ImportError:  # not built: the loops run in Python
    _modelfold = None

_PLAIN = (dict, OrderedDict)  # the mappings the C reads as dicts (no `get` of their own)


def _fold_tasks(tasks: dict, records) -> None:
    if _modelfold is not None and type(tasks) is dict:
        _modelfold.fold_tasks(tasks, records, RUNQ_SLOTS)
    else:
        py_fold_tasks(tasks, records)


def _fold_waits(waits: dict, records, kept: list | None = None) -> None:
    if _modelfold is not None and type(waits) is dict:
        _modelfold.fold_waits(waits, records, RUNQ_SLOTS, kept)
    else:
        py_fold_waits(waits, records, kept)


def _fold_carried(tasks: dict, waits: dict, keys, ns: int, since, late: int) -> None:
    if _modelfold is not None and type(tasks) is dict and type(waits) is dict:
        _modelfold.fold_ongoing(tasks, waits, keys, ns, since, late)
    else:
        py_fold_ongoing(tasks, waits, keys, ns, since, late)


# the last interval's waits carried on made into the model at once (ModelFold.model); False: folded as any other
# interval's (tests compare the two)
CARRIED_AT_ONCE = True


def _carried_made(iv: Interval, tasks: dict, waits: dict, task_info: dict[TaskId, TaskInfo],
                  stacks: dict[int, Stack], funcs: dict[int, str]) -> tuple[tuple[StackWait, ...], dict] | None:
    """The StackWaits and TaskTotals of the waits `iv` carried on, made from their keys without their accumulators,
    where the fold met none of their keys and tasks (`tasks`, `waits`: its accumulators), each of its tasks once:
    as folding them (py_fold_ongoing) then making the model of them (py_made_waits, py_made_totals) makes them,
    in their order. A live interval of 5,000 threads asleep carries 5,000 on; the window `top` shows each interval
    is that interval alone. None where it cannot (the caller folds them): in C only (analyzer/modelfold.c)."""
    if (not CARRIED_AT_ONCE or _modelfold is None or type(tasks) is not dict or type(waits) is not dict
            or type(task_info) not in _PLAIN or type(stacks) not in _PLAIN or type(funcs) not in _PLAIN):
        return None
    kept = iv.beginnings_kept
    return _modelfold.carried_made(iv.ongoing, iv.ongoing_ns, iv.ongoing_since if kept else None,
                                   iv.end_ns - LONG_OPEN_NS, tasks, waits, task_info, stacks, funcs,
                                   _unnamed_function, _unknown_task, NO_HIST, _new_stack_wait, _new_totals)


def _made_totals(tasks: dict, task_info: dict[TaskId, TaskInfo]) -> dict[TaskId, TaskTotals]:
    if _modelfold is not None and type(tasks) is dict and type(task_info) in _PLAIN:
        return _modelfold.made_totals(tasks, task_info, _unknown_task, NO_HIST, _new_totals)
    return py_made_totals(tasks, task_info)


def _made_waits(waits: dict, stacks: dict[int, Stack], funcs: dict[int, str]) -> tuple[StackWait, ...]:
    if _modelfold is not None and type(waits) is dict and type(stacks) in _PLAIN and type(funcs) in _PLAIN:
        return _modelfold.made_waits(waits, stacks, funcs, _unnamed_function, _new_stack_wait)
    return py_made_waits(waits, stacks, funcs)
