"""What the collector produces once per interval, and what a recording stores.

Every record is a *delta* over one interval, so a recording is the sum of its
intervals and a replay cursor is a prefix sum. Frozen dataclasses; no I/O.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import NamedTuple

UNKNOWN = "[unknown]"  # a frame no symbol or mapping names


@dataclass(frozen=True, slots=True)
class Frame:
    """One named (or unnameable) instruction address of a stack.

    `module` is "kernel" or a kernel module's name for kernel frames; for user frames it is the
    mapped file's path as the process sees it, or a label: "[vdso]", "[anon]", "[jit]", "[heap]",
    "[unknown]". `module_offset` is the address in the ELF file's own virtual address space
    (what `nm` prints), so that, with `build_id`, the frame can be named again elsewhere.
    """

    addr: int
    symbol: str | None
    offset: int
    module: str
    build_id: str | None
    module_offset: int | None
    kind: str

    @classmethod
    def unknown(cls, addr: int, kind: str) -> Frame:
        return cls(addr, None, 0, UNKNOWN, None, None, kind)

    @property
    def text(self) -> str:
        """`sym`, `sym+0x1a`, `[libfoo.so+0x1234]`, `[anon]` or `[unknown]`, as perf prints them."""
        if self.symbol is not None:
            return f"{self.symbol}+0x{self.offset:x}" if self.offset else self.symbol
        if self.module == UNKNOWN:
            return UNKNOWN
        if self.module.startswith("[") and self.module.endswith("]"):
            name = self.module[1:-1]
        else:
            name = os.path.basename(self.module) or self.module
        if self.module_offset is None:
            return f"[{name}]"
        return f"[{name}+0x{self.module_offset:x}]"




class TaskId(NamedTuple):
    """A task's identity: PID reuse never merges two tasks. A tuple: every record is keyed by it, and
    a tuple hashes in C."""

    pid: int
    start_time_ns: int  # task->start_boottime


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """What names a task. Emitted when a task is first seen and when it changes."""

    task: TaskId
    tgid: int
    ptgid: int  # parent process at creation, 0 when unknown
    comm: str
    flags: int = 0  # TS_* from bpf/sched.h (exact baseline, exited, ...)
    policy: int = 0  # SCHED_OTHER 0, FIFO 1, RR 2, BATCH 3, IDLE 5, DEADLINE 6, EXT 7 (at its latest switch-out)
    nice: int = 0
    rt_priority: int = 0

    @property
    def dead(self) -> bool:
        """Its final switch was seen: nothing more will be recorded for it."""
        return bool(self.flags & TS_DEAD)


TS_EXITING, TS_DEAD = 4, 8  # bpf/sched.h
TS_FOUND_BLOCKED = 256  # bpf/sched.h: first seen blocked by the task dump, asleep since before the probes

# Reserved stack ids (bpf/stacks.h): why a record has no stack; a real stack's id is at least STACK_ID_MIN.
STACK_NONE, STACK_SHORT, STACK_RATE_LIMITED, STACK_FAILED, STACK_OWN, STACK_NOT_DRAWN = 0, 1, 2, 3, 4, 5
STACK_ID_MIN = 16
NO_STACK_LABELS = {
    STACK_NONE: "(kernel stacks off)",
    STACK_SHORT: "(wait shorter than --min-stack-wait)",
    STACK_RATE_LIMITED: "(stack not sampled)",
    STACK_FAILED: "(stack walk failed)",
    STACK_OWN: "(stallscope's own wait: no stack walked)",
    STACK_NOT_DRAWN: "(not drawn for a stack walk)",
}
LOST_STACK = "(stack lost: map full)"
# reasons a wait has no stack that do not depend on what it was: such waits may be shared out by the
# drawn waits of their stratum
SHARABLE = frozenset({STACK_NOT_DRAWN, STACK_RATE_LIMITED, STACK_FAILED})


@dataclass(frozen=True, slots=True)
class TaskDelta:
    """One task's change over one interval."""

    task: TaskId
    offcpu_ns: int = 0
    offcpu_count: int = 0
    # the longest wait that ended in this interval (0: none, or not kept: bpf/sched.h struct max_epoch); in
    # recordings before 2026-11-25, the task's new longest ever when it rose, else 0
    offcpu_max_ns: int = 0
    runq_wait_ns: int = 0  # the kernel's sched_info.run_delay (schedstat), else runq_latency_ns
    runq_count: int = 0
    runq_max_ns: int = 0  # the longest run-queue wait of this interval, measured (as offcpu_max_ns)
    voluntary_switches: int = 0
    involuntary_switches: int = 0
    migrations: int = 0
    runq_hist: tuple[tuple[int, int], ...] = ()  # (log2 ns slot, count), wakeup-to-run latency
    runq_latency_ns: int = 0  # measured with ktime from enqueue to switch-in
    run_ns: int = 0  # time on a CPU (se.sum_exec_runtime, read at its switch-outs)


@dataclass(frozen=True, slots=True)
class OffcpuDelta:
    """Off-CPU time of one task in one (kernel stack, user stack, state, why, func). Stack ids below 16
    say why there is none (bpf/stacks.h). `count`, `total_ns`, `max_ns` and `hist` describe the waits
    that ended (each whole); `charged_ns` is the blocked time this interval holds: the waits' parts not
    already charged while they went on, and the parts of waits still going on (count 0)."""

    task: TaskId
    tgid: int
    state: int
    kstack: int
    ustack: int
    count: int
    total_ns: int
    max_ns: int = 0  # the longest wait of this interval (as TaskDelta.offcpu_max_ns; older recordings: a new
    # longest ever, else 0)
    hist: tuple[tuple[int, int], ...] = ()  # (log2 ns slot, waits) of this interval's waits
    why: int = 0  # WHY_* (bpf/sched.h): what the task was doing when it blocked; 0 in older recordings
    func: int = 0  # a kernel thread's function or work function (address; `Interval.functions` names it)
    charged_ns: int | None = None  # None (older recordings): total_ns
    weighted_ns: int = 0  # keys with a walked stack: sum of d/p, the waits' estimated time
    var_us2: int = 0  # its variance, us^2
    woken: tuple[int, int, int] = (0, 0, 0)  # waits ended by a task, an interrupt, an exiting task

    @property
    def charged(self) -> int:
        return self.total_ns if self.charged_ns is None else self.charged_ns


class OngoingWait(NamedTuple):
    """A wait in progress throughout an interval, charged the interval's `ongoing_ns` under this key (an
    OffcpuDelta's key: the task's blocked time and its stratum's). The collector hands a wait over as an
    OffcpuDelta's charge when it begins, when its key changes and when its task changes; between, it is
    only carried on. A tuple: the model's fold keys its waits by it as it is."""

    task: TaskId
    tgid: int
    state: int
    kstack: int
    ustack: int
    why: int
    func: int

    def charged(self, ns: int) -> "OffcpuDelta":
        """The charge-only record of `ns` of this wait (none of its waits ended): what a dump that hands the
        wait over gives, and what a wait carried on stands for."""
        return _new_offcpu(self.task, self.tgid, self.state, self.kstack, self.ustack, 0, 0, 0, (), self.why,
                           self.func, ns, 0, 0, (0, 0, 0))


class WaitSince(NamedTuple):
    """A wait in progress at an interval's end, and when it began (CLOCK_BOOTTIME ns, the intervals' clock).
    A task asleep when the recording began has its first wait begin at the recording's start (its time
    before that is not known): `since_ns` is then the first interval's start, and the wait's length so
    far a lower bound."""

    wait: OngoingWait
    since_ns: int


def blocked_only(task: TaskId, ns: int) -> "TaskDelta":
    """A task's delta of `ns` blocked and nothing else: a wait of it in progress, charged."""
    return _new_task_delta(task, ns, 0, 0, 0, 0, 0, 0, 0, 0, (), 0, 0)


class WaitLink(NamedTuple):
    """A wait's stratum (what the task was doing: function, state and why, as in OffcpuDelta): the
    waker's own last wait before it ran (a wait chain's next link), or the wakee's wait; all 0 when
    not known. A tuple: two of them key each wakeup record folded, and a tuple hashes in C."""

    func: int = 0
    state: int = 0
    why: int = 0


NO_LINK = WaitLink()


@dataclass(frozen=True, slots=True)
class WakerDelta:
    """Wakeups of one task by one waker; waker pid 0 means an interrupt on an idle CPU. Recorded for the
    waits drawn for a stack walk, so each time here is weighted by 1/p as well (`weighted_ns`...)."""

    task: TaskId
    waker: TaskId
    waker_tgid: int
    waker_comm: str
    waker_kstack: int
    count: int
    total_ns: int  # off-CPU time these wakeups ended
    in_interrupt: bool = False  # sched_waking ran on an interrupt stack: the waker is an interrupt
    exiting: bool = False  # the waker was in its exit
    link: WaitLink = NO_LINK
    weighted_ns: int | None = None  # sum of d/p; None (older recordings): total_ns
    link_blocked_ns: int = 0  # weighted: the part the waker was itself blocked in `link`
    link_runq_ns: int = 0  # weighted: ... and then waited for a CPU
    wakee: WaitLink = NO_LINK  # the wakee's wait's stratum

    @property
    def weighted(self) -> int:
        return self.total_ns if self.weighted_ns is None else self.weighted_ns


@dataclass(frozen=True, slots=True)
class LockDelta:
    """One thread's contentions on one kernel lock from one kernel stack, over one interval."""

    task: TaskId
    tgid: int
    addr: int
    kstack: int
    flags: int  # lock:contention_begin flags of the first begin: the lock type
    kind: int  # how the kernel side named it: 0 address, 1 mmap_lock, 2 slab object (see cache)
    count: int
    total_ns: int
    # the longest and the shortest of this interval (bpf/interval.h; 0: not kept); in recordings before
    # 2026-11-25, a new maximum when it rose and a new minimum when it fell, else 0
    max_ns: int = 0
    min_ns: int = 0
    spin_ns: int = 0  # on a CPU: total - sleep
    sleep_ns: int = 0  # off a CPU: blocked + runnable (before those were kept: the mutex's sleep phase)
    owner_pid: int = 0  # a mutex's owner when a wait began
    owner_comm: str = ""
    cache: str = ""
    symbol: str = ""  # the static variable at the lock's address (kallsyms data symbols), "" when none;
    # "rq->__lock" for a run queue's lock (bpf/lock_collector.py finds them)
    blocked_ns: int | None = None  # the waiter blocked (None: recorded before the split was kept)
    runnable_ns: int | None = None  # the waiter woken, waiting for a CPU
    weighted_ns: int = 0  # walked stacks: sum of d/p
    var_us2: int = 0
    field: str = ""  # a lock in a slab object: the struct field holding it (`ext4_inode_info.vfs_inode.i_rwsem`)
    object: str = ""  # ... and for a directory's i_rwsem, the directory's path where it was found; a run
    # queue's lock: its CPU (`cpu1`)


def u64(v: int) -> int:
    """An address or stack id as the kernel has it: unsigned 64-bit (SQLite keeps integers signed)."""
    return v + (1 << 64) if v < 0 else v


# A lock record's values in the order a lock fold reads them (analyzer/model.py LockFold): its key (the
# waiter's pid and start, its process, the lock's address, type flags, kind and cache, the stack id), then
# what is summed or kept. A recording's rows are read in this order (Recording.lock_rows).
LOCK_VALUES = ("pid", "start_ns", "tgid", "addr", "flags", "kind", "cache", "kstack", "count", "total_ns", "max_ns",
               "min_ns", "spin_ns", "sleep_ns", "owner_pid", "owner_comm", "symbol", "blocked_ns", "runnable_ns",
               "weighted_ns", "var_us2", "field", "object")


@dataclass(frozen=True)
class SlabDelta:
    """One process's allocations and frees in one slab cache over one interval, from the four kmem
    tracepoints. `cache` is the kmem_cache address, or a pseudo cache below 16 (SLAB_CACHE_*)."""

    cache: int
    tgid: int  # of the task current at the event (interrupts are charged to the task they interrupt)
    exiting: bool = False  # events of tasks in their exit (PF_EXITING): frees of their mm, files, ...
    kmallocs: int = 0
    cache_allocs: int = 0
    kfrees: int = 0
    cache_frees: int = 0
    bytes_req: int = 0
    bytes_alloc: int = 0
    failed: int = 0  # allocations that returned NULL
    slab_switches: int = 0  # estimate: the CPU's allocations moved to another slab of the cache
    switch_allocs: int = 0  # allocations the switch estimator judged

    @property
    def allocs(self) -> int:
        return self.kmallocs + self.cache_allocs

    @property
    def frees(self) -> int:
        return self.kfrees + self.cache_frees


@dataclass(frozen=True)
class SlabCache:
    """A slab cache as the probe first saw it, with its /sys/kernel/slab configuration then."""

    addr: int  # struct kmem_cache *
    name: str  # s->name: for merged caches, the first cache created; the others are aliases
    object_size: int
    size: int  # slot size, metadata included
    order: int  # preferred slab order (s->oo)
    objs_per_slab: int
    min_order: int  # fallback order (s->min)
    sheaf_capacity: int  # > 0: served by per-CPU sheaves
    cpu_partial: int
    nodes: tuple[int, ...]  # s->node[i]: the kmem_cache_node addresses, each holding a list_lock
    aliases: tuple[str, ...] = ()  # other names of the same cache (merged caches)
    sysfs: tuple[tuple[str, int], ...] = ()  # /sys/kernel/slab/NAME/{min_partial,cpu_partial,...} when first seen


IO_OPS = ("read", "write", "discard", "flush")  # bpf/io.h IO_OP_*: the operation groups of /proc/diskstats


@dataclass(frozen=True)
class IoDelta:
    """One device's requests of one operation group over one interval, from the block request
    tracepoints (bpf/io.h io_stats). `requests`, `sectors` and `total_ns` are counted as /proc/diskstats
    counts them; `timed` of the requests were seen at their issue, and their time is split into
    `queued_ns` (start to issue) and `device_ns` (issue to completion). Histograms are (log2 slot, count)."""

    dev: int  # the whole disk's dev_t as the kernel encodes it: MAJOR << 20 | MINOR
    op: int  # index into IO_OPS
    requests: int = 0
    sectors: int = 0
    total_ns: int = 0
    timed: int = 0
    queued_ns: int = 0
    device_ns: int = 0
    bytes: int = 0  # the timed requests' sizes
    unaccounted: int = 0  # completions the kernel does not account (passthrough, iostats off)
    size_hist: tuple[tuple[int, int], ...] = ()  # log2(bytes) of the timed requests
    total_hist: tuple[tuple[int, int], ...] = ()  # log2(ns), start to completion, every counted request
    queued_hist: tuple[tuple[int, int], ...] = ()
    device_hist: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class IoQueueDelta:
    """One request-based device as a whole over one interval: what was at the device (issued to the
    driver, not yet completed)."""

    dev: int
    name: str  # the disk's name (gendisk disk_name)
    issued: int = 0
    busy_ns: int = 0  # time with at least one request at the device (%util)
    depth_sum: int = 0  # the requests at the device after each issue, summed
    depth_hist: tuple[tuple[int, int], ...] = ()  # log2 of that depth
    inflight: int = 0  # at the interval's end: a level, not a delta


@dataclass(frozen=True)
class IoSubmitDelta:
    """A device's requests of one operation group submitted by one process (the task current when each
    began: often a writeback kworker, jbd2 or io-wq rather than the task that waits)."""

    dev: int
    op: int
    tgid: int  # 0: not seen (the request began before the probe was attached)
    comm: str
    requests: int = 0
    sectors: int = 0


@dataclass(frozen=True)
class IoWakeDelta:
    """Waits of one task in I/O wait ended by one device's completions (tied at the wakeup), with the
    wait's stratum so that the time joins its cause. `wait_ns` is the task's blocked time these wakeups
    ended; `req_ns` the waking requests' own latency, summed, and its parts for the `timed` ones."""

    task: TaskId
    tgid: int
    dev: int
    op: int
    submit_tgid: int
    submit_comm: str
    wakee: WaitLink
    count: int
    wait_ns: int = 0
    req_ns: int = 0
    timed: int = 0  # of the wakeups, those whose request was seen at its issue: queued_ns and device_ns are theirs
    queued_ns: int = 0
    device_ns: int = 0


@dataclass(frozen=True, slots=True)
class OncpuDelta:
    """On-CPU samples of one thread in one (kernel stack, user stack), over one interval.
    Stack ids below 16 say why there is none (bpf/stacks.h, bpf/oncpu.h: 4 = sampled in user mode)."""

    task: TaskId
    tgid: int
    comm: str  # when first sampled: a thread that never switched is named here only
    kstack: int
    ustack: int
    samples: int
    period_ns: int  # the samples' periods summed: sampled on-CPU time


@dataclass(frozen=True)
class CpuSamplesDelta:
    """All samples taken on one CPU over one interval, the idle task's apart, and the time the
    CPU's cpu-clock event counted (what the samples should add up to, within one period)."""

    cpu: int
    samples: int
    period_ns: int
    idle_samples: int
    idle_ns: int
    event_ns: int


@dataclass(frozen=True, slots=True)
class FutexDelta:
    """One thread's waits on one futex word, from one user stack and lock call site, over one interval."""

    task: TaskId
    tgid: int
    uaddr: int  # the futex word (futex_waitv: the first of its vector)
    op: int  # futex command (FUTEX_WAIT, FUTEX_LOCK_PI, ...) or FUTEX_OP_WAITV / FUTEX_OP_WAIT2 (bpf/futex.h)
    ustack: int  # user stack id, or a reason below 16
    caller_addr: int  # return address into the caller of a libc lock function (0: none proven)
    caller: str  # that address named, `sym+0xoff`, when the process could be read ("" otherwise)
    lock_name: str  # the futex word's data symbol in its process (`lock`), "" when it has none
    count: int
    total_ns: int
    # the longest and the shortest of this interval (bpf/interval.h; 0: not kept); in recordings before
    # 2026-11-25, a new maximum when it rose and a new minimum when it fell, else 0
    max_ns: int = 0
    min_ns: int = 0
    flags: int = 0  # FUTEX_F_* (bpf/futex.h): 1 the call had a timeout
    blocked_ns: int | None = None  # of total: the waiter blocked (None: recorded before the split was kept)
    runnable_ns: int | None = None  # ... woken, waiting for a CPU
    woken_irq: int = 0  # waits ended from an interrupt (with a timeout: timed out)


@dataclass(frozen=True)
class Stack:
    """A symbolised stack, innermost frame first. `id` is the in-kernel content hash."""

    id: int
    kind: str  # "kernel" | "user"
    frames: tuple[Frame, ...]
    truncated: bool = False

    def __hash__(self) -> int:
        """Of its id and kind (equal stacks have both alike; they are compared whole): the dataclass's own hashes
        every frame, field by field in Python, 8 us for a stack of 25, and a live interval's cause lookups, keyed
        by their stacks, hash hundreds."""
        return hash((self.id, self.kind))


@dataclass(frozen=True)
class ProgramCost:
    """Kernel-side cost of one BPF program over an interval (run_time_ns excludes dispatch)."""

    name: str
    run_cnt: int
    run_time_ns: int
    recursion_misses: int


def duration_text(ns: int) -> str:
    """A duration for people: 0, 250 us, 10 ms, 1.5 s."""
    if ns == 0:
        return "0"
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:g} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:g} ms"
    return f"{ns / 1e3:g} us"


@dataclass(frozen=True)
class Tuning:
    """What the probes run with: the stack-walk rate cap (per CPU and object, 0 = no limit), the shortest
    wait whose stacks are walked, the on-CPU sampling frequency, T (a wait of d ns is drawn for a walk
    with probability min(1, d/T)) and the user stacks walked per second per CPU at switch-out. Level 0
    is what the user chose."""

    level: int
    walks_per_s: int
    min_stack_ns: int
    sample_hz: int
    sample_ns: int = 0
    user_walks_per_s: int = 0
    lock_calls: bool = True  # the futex group's uprobes in libc's lock functions (removed past the last level)

    def describe(self) -> str:
        walks = "no cap" if self.walks_per_s == 0 else f"at most {self.walks_per_s}/s per CPU"
        users = "no cap" if self.user_walks_per_s == 0 else f"{self.user_walks_per_s}/s per CPU"
        drawn = "every wait" if not self.sample_ns else f"waits drawn with p = min(1, d/{duration_text(self.sample_ns)})"
        floor = f" (none under {duration_text(self.min_stack_ns)})" if self.min_stack_ns else ""
        calls = "" if self.lock_calls else "; lock-call uprobes removed"
        return (f"stacks for {drawn}{floor}, {walks}; user stacks {users}; on-CPU samples {self.sample_hz} Hz{calls}")


@dataclass(frozen=True)
class TuningChange:
    """A step the budget made, stated: from the interval after `interval` on, the probes run with `to`."""

    interval: int
    to: Tuning
    reason: str


class Throttled(NamedTuple):
    """A cgroup's CFS bandwidth throttling in an interval (cpu.stat: cgroup v2's nr_throttled and throttled_usec,
    v1's nr_throttled and throttled_time): the periods in which its run queues ran out of quota, and their time
    throttled (summed over CPUs); its limit as read then (cpu.max, cpu.cfs_quota_us and cpu.cfs_period_us; 0
    when it has none or it could not be read)."""

    cgroup: str
    periods: int
    throttled_ns: int
    quota_us: int = 0
    period_us: int = 0

    def entry(self) -> dict:
        """As machine.cpu_side's `throttled` lists it (the limit's keys only where there is one)."""
        limit = {"quota_us": self.quota_us, "period_us": self.period_us} if self.quota_us and self.period_us else {}
        return {"cgroup": self.cgroup, "nr_throttled": self.periods, "throttled_ns": self.throttled_ns, **limit}


@dataclass(frozen=True)
class Interval:
    index: int
    start_ns: int  # CLOCK_BOOTTIME, the clock task start times use
    end_ns: int
    wall_start: float  # Unix time of start_ns
    switches: int  # context switches on all CPUs
    tasks: tuple[TaskDelta, ...] = ()
    task_info: tuple[TaskInfo, ...] = ()
    offcpu: tuple[OffcpuDelta, ...] = ()
    wakers: tuple[WakerDelta, ...] = ()
    migrations: tuple[tuple[int, int, int], ...] = ()  # (src cpu, dest cpu, count)
    stacks: tuple[Stack, ...] = ()  # stacks first referenced in this interval
    health: dict[str, int] = field(default_factory=dict)  # losses counted in this interval
    programs: tuple[ProgramCost, ...] = ()
    collector_cpu_ns: int = 0  # stallscope's own CPU time in this interval
    kernel_switches: int = 0  # /proc/stat ctxt over the same interval: the kernel's own count
    locks: tuple[LockDelta, ...] = ()
    slab: tuple[SlabDelta, ...] = ()
    slab_caches: tuple[SlabCache, ...] = ()  # caches first seen in this interval
    oncpu: tuple[OncpuDelta, ...] = ()
    oncpu_cpus: tuple[CpuSamplesDelta, ...] = ()
    cgroups: tuple[tuple[int, int, str], ...] = ()  # (tgid, leader start ns, cgroup path) of processes first seen
    futex: tuple[FutexDelta, ...] = ()
    tuning: tuple[TuningChange, ...] = ()  # what the overhead budget changed after this interval
    functions: tuple[tuple[int, str], ...] = ()  # kernel function addresses first referenced (OffcpuDelta.func), named
    io: tuple[IoDelta, ...] = ()  # the io group: per device and operation
    io_queue: tuple[IoQueueDelta, ...] = ()  # ... per device
    io_submitters: tuple[IoSubmitDelta, ...] = ()
    io_wakes: tuple[IoWakeDelta, ...] = ()
    # waits in progress throughout the interval, each blocked `ongoing_ns` more under its key and in its task's
    # totals (thousands of sleeping threads: one key each, not an OffcpuDelta and a TaskDelta each)
    ongoing: tuple[OngoingWait, ...] = ()
    ongoing_ns: int = 0
    # when each of `ongoing` began, in its order, and the waits the interval's dump handed over that were still
    # in progress at its end, with their beginnings: together, every wait in progress at the interval's end
    # (waits_now); `opened` None where not kept (recordings made before it was)
    ongoing_since: tuple[int, ...] = ()
    opened: tuple[WaitSince, ...] | None = None
    # the cgroups a CPU quota throttled in the interval (read by the session, not the probes)
    throttled: tuple[Throttled, ...] = ()
    # each CPU's time in the interval, busy (neither idle, in I/O wait nor stolen) and in all, ns: /proc/stat's
    cpu_time: tuple[tuple[int, int, int], ...] = ()  # (cpu, busy ns, total ns)
    # the run-queue waits that ended on each CPU in the interval (bpf/sched.h struct cpu_runq): CPUs with any
    cpu_runq: tuple[tuple[int, int, int], ...] = ()  # (cpu, waiting ns, waits)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def offcpu_records(self) -> tuple[OffcpuDelta, ...]:
        """Every off-CPU record of the interval, its ongoing waits as the charge-only records they stand for."""
        if not self.ongoing:
            return self.offcpu
        ns = self.ongoing_ns
        return self.offcpu + tuple(w.charged(ns) for w in self.ongoing)

    @property
    def beginnings_kept(self) -> bool:
        """Whether the interval says when each of its waits in progress began (recordings made before it was
        kept do not)."""
        return self.opened is not None and len(self.ongoing_since) == len(self.ongoing)

    def waits_now(self) -> tuple[WaitSince, ...] | None:
        """Every wait in progress at the interval's end, with its beginning; None where not kept."""
        if not self.beginnings_kept:
            return None
        if not self.ongoing:
            return self.opened
        return tuple(map(WaitSince, self.ongoing, self.ongoing_since)) + self.opened

    def task_records(self) -> tuple[TaskDelta, ...]:
        """Every task record of the interval, the tasks of its ongoing waits with their blocked time."""
        if not self.ongoing:
            return self.tasks
        ns = self.ongoing_ns
        return self.tasks + tuple(blocked_only(w.task, ns) for w in self.ongoing)


@dataclass(frozen=True)
class ProbeStatus:
    """Whether a probe group runs, with which mechanism, and why not."""

    enabled: bool
    mechanism: str  # "tp_btf", "raw_tp", "fentry", "kprobe", "perf_event", "uprobe", "" when off
    reason: str = ""


@dataclass(frozen=True)
class RecordingMeta:
    format_version: int
    stallscope_version: str
    host: str
    kernel: str
    cpus: int
    start_wall: float
    start_ns: int  # CLOCK_BOOTTIME at start
    interval_s: float
    probes: dict[str, ProbeStatus]
    options: dict = field(default_factory=dict)  # pid filter, command, min stack ns, ...
    end_ns: int = 0  # 0 while recording
    # the recording machine: topology, scheduler knobs, per-CPU busy % over the recording (stallscope/machine.py)
    machine: dict = field(default_factory=dict)


try:  # the extension that reads recordings (analyzer/rowread.py) makes records too
    from stallscope.analyzer._rowread import Maker as _Maker
except ImportError:
    _Maker = None


def record_maker(cls):
    """`cls(*values)` for a frozen record class given every field in order, without the dataclass's
    __init__ (a setattr per field, past the frozen guard): a recording holds a million records, and
    building them was a fifth of reading it; a live interval of 5,000 sleeping threads makes 10,000. The
    same object: equal, hashable, immutable. The classes made by the hundred thousand (a recording's rows, a
    model's records) have slots, no instance dict: a StackWait's 18 fields take 176 bytes rather than 272. Made
    in C where analyzer/rowread.c is built (each field set as object.__setattr__ sets it: 0.30 us a StackWait);
    else generated as the dataclass generates its __init__, from the class's own field names, each value set
    past the frozen guard (1.9 us; the dataclass's own, 2.3 us) or, without slots, stored in the instance's dict
    (0.56 us)."""
    names = tuple(f.name for f in fields(cls))
    if not all(n.isidentifier() and not n.startswith("__") for n in names):
        raise TypeError(f"{cls.__name__}: a field name the generated function cannot take")
    if _Maker is not None:
        return _Maker(cls, names)
    args = ", ".join(names)
    namespace = {"__new": object.__new__, "__cls": cls, "__set": object.__setattr__}
    if hasattr(cls, "__slots__"):  # the most numerous records: no instance dict
        body = "".join(f"    __set(__o, {n!r}, {n})\n" for n in names)
        exec(f"def make({args}):\n    __o = __new(__cls)\n{body}    return __o\n", namespace)
    else:
        body = "".join(f"    __d[{n!r}] = {n}\n" for n in names)
        exec(f"def make({args}):\n    __o = __new(__cls)\n    __d = __o.__dict__\n{body}    return __o\n", namespace)
    make = namespace["make"]
    make.__qualname__ = make.__name__ = f"new_{cls.__name__}"
    return make


_new_offcpu, _new_task_delta = record_maker(OffcpuDelta), record_maker(TaskDelta)
