"""The optional probe groups that run on top of the scheduler probes, in one registry.

Each group is a collector with the same three steps: `start()` loads and
attaches what this kernel allows and returns a ProbeStatus (never raising for
a kernel that cannot: the status says why); `drain(dead)` returns a GroupDrain
of interval deltas; `close()` detaches. The session, `--probes`, `doctor` and
the recording's metadata all read this registry, so a new group is one entry.
A collector may also have `finish() -> str`: called once before the last drain,
to count what is still in progress when the recording stops; it returns why it
could not, or "". And `retune(tuning)`: the overhead budget's step (analyzer/overhead.py), to
apply while attached: fewer stack walks (bpf/tune.py), a lower sampling rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from stallscope.analyzer.sample import ProbeStatus, ProgramCost, Stack, TaskId
from stallscope.bpf.sizing import DEFAULT_SIZES, MapSizes
from stallscope.bpf.tune import DEFAULT_TUNE, StackTune


@dataclass(frozen=True)
class GroupOptions:
    """What every optional collector may honour; the ones it does not need it ignores."""

    targ_tgid: int = 0
    stack_tune: StackTune = DEFAULT_TUNE
    user_stacks: bool = True
    kernel_stacks: bool = True
    max_tasks: int = DEFAULT_SIZES.tasks  # T: each group's per-task map is a multiple of it (bpf/sizing.py)
    max_stacks: int = DEFAULT_SIZES.stack_entries  # each object's stack map
    sample_hz: int = 99  # on-CPU sampling frequency per CPU
    sched_state_fd: int = -1  # the scheduler object's task storage (bpf/sched_state.bpf.h), shared before load


@dataclass(frozen=True)
class GroupDrain:
    """One group's part of an interval. `records` maps an `Interval` field name to the deltas to
    append to it; stacks, health counters and program costs are merged with the scheduler's."""

    records: dict[str, tuple] = field(default_factory=dict)
    stacks: tuple[Stack, ...] = ()
    health: dict[str, int] = field(default_factory=dict)
    programs: tuple[ProgramCost, ...] = ()


class GroupCollector(Protocol):
    def start(self) -> ProbeStatus: ...

    def drain(self, dead: set[TaskId]) -> GroupDrain: ...

    def close(self) -> None: ...



@dataclass(frozen=True)
class Group:
    name: str
    what: str  # one line for `doctor` and --help
    default: bool  # in the default set of `record` and `top`
    factory: Callable  # (symbolizer, GroupOptions) -> GroupCollector
    cost: str = ""  # stated cost when it is not negligible


def _locks(symbolizer, o: GroupOptions):
    from stallscope.bpf.lock_collector import LockCollector

    return LockCollector(symbolizer, targ_tgid=o.targ_tgid, stack_tune=o.stack_tune,
                         kernel_stacks=o.kernel_stacks, max_stacks=o.max_stacks, sched_state_fd=o.sched_state_fd,
                         max_tasks=o.max_tasks)


def _slab(symbolizer, o: GroupOptions):
    from stallscope.bpf.slab_collector import SlabCollector

    return SlabCollector(targ_tgid=o.targ_tgid, max_entries=MapSizes(o.max_tasks, o.max_stacks).slab_counts)


def _oncpu(symbolizer, o: GroupOptions):
    from stallscope.bpf.oncpu_collector import OncpuCollector

    return OncpuCollector(symbolizer, targ_tgid=o.targ_tgid, sample_hz=o.sample_hz, user_stacks=o.user_stacks,
                          kernel_stacks=o.kernel_stacks, max_stacks=o.max_stacks, max_tasks=o.max_tasks)


def _futex(symbolizer, o: GroupOptions):
    from stallscope.bpf.futex_collector import FutexCollector

    return FutexCollector(symbolizer, targ_tgid=o.targ_tgid, stack_tune=o.stack_tune, sched_state_fd=o.sched_state_fd,
                          user_stacks=o.user_stacks, max_stacks=o.max_stacks, max_tasks=o.max_tasks)


def _io(symbolizer, o: GroupOptions):
    from stallscope.bpf.io_collector import IoCollector

    return IoCollector(targ_tgid=o.targ_tgid, sched_state_fd=o.sched_state_fd)


GROUPS: dict[str, Group] = {
    "locks": Group("locks", "kernel lock contention per lock, waiter and stack (lock:contention_begin/end)",
                   True, _locks),
    "slab": Group("slab", "SLUB allocations and frees per cache and process, the CPU-slab switch estimate, "
                  "cache configuration (kmem:kmalloc, kmem_cache_alloc, kfree, kmem_cache_free)",
                  False, _slab, cost="runs on every allocation and free, 150-410 ns of BPF each; hackbench (perf bench sched messaging -g 10) ran +74% slower with the scheduler probes and this group than untraced, against +4.3% with the default set (medians of 10 pairs; benchmarks/RESULTS-groups.md)"),
    "oncpu": Group("oncpu", "on-CPU samples: kernel and user stacks per thread from a cpu-clock perf event "
                            "per CPU (--sample-hz, default 99)",
                   True, _oncpu, "a kernel and a user stack walk per sample, 6-14 us measured here: "
                                 "0.06-0.14% of each CPU at 99 Hz, in proportion to --sample-hz"),
    "futex": Group("futex", "user-space lock waits (futex) per process, futex word, user stack and the function "
                            "that called pthread_mutex_lock & co (tp_btf/sched_switch: sleeps inside a futex call; "
                            "else the syscalls:sys_enter/exit_futex tracepoints, else tp_btf/sys_enter/exit; "
                            "libc uprobes)", True, _futex,
                   cost="at sched_switch, one more program on each context switch (160-220 ns of BPF under "
                        "hackbench here) and nothing on system calls; "
                        "the syscall fallbacks: with the futex system calls' own tracepoints only futex calls "
                        "run BPF (~70 ns per wake, ~500 ns per wait), but every system call takes the "
                        "syscall-tracepoint slow path while they are on (a getppid() ~250 -> ~340 ns here); "
                        "the tp_btf fallback runs two programs on every system call (getppid() ~660 ns); a "
                        "uprobe trap (~30 us on this VM) only where a pthread mutex/rwlock lock call takes its "
                        "slow path; 0.1-0.2 s more to start, beside the other groups (libc analysed with "
                        "objdump/readelf, the uprobe trap timed), and ~0.1 s a uprobe to stop (its removal)"),
    "io": Group("io", "block I/O per device and operation as /proc/diskstats counts it, with each request's "
                      "time queued and at the device, %util, depth, submitters, and the device whose completion "
                      "ended each I/O wait (tp_btf block_io_start, block_rq_issue/complete/requeue, block_io_done; "
                      "sched_waking)",
                False, _io, cost="about 1.1 us of BPF per block request (block_io_start, block_rq_issue, "
                                  "block_rq_complete, block_io_done, block_bio_queue: 115-275 ns each) plus ~40 ns of "
                                  "dispatch each, and ~75 ns at every wakeup of the machine (io_waking, to tie waits "
                                  "to devices): fio's 121k requests/s here ran ~7% slower, ~7.5% of the 2 CPUs, far "
                                  "above the default budget (benchmarks/RESULTS-io.md)"),
}


def default_groups() -> frozenset[str]:
    return frozenset(name for name, g in GROUPS.items() if g.default)
