"""How many entries each BPF map may hold, sized for the machine when the probes start.

A map that is full loses what does not fit, counted in `meta.health` and shown by every command
(analyzer/data_loss.py). The rule, in two numbers:

- T, tasks (`--max-tasks`): 4 x the threads alive at start, rounded up to a power of two, at least
  32,768 and at most the most tasks the kernel allows at once (the smaller of kernel.pid_max and
  kernel.threads-max, rounded up). The per-task hash maps are multiples of it: the final entries of
  exited tasks T, off-CPU waits by stack 2T, wakers 4T (one per wakee, waker, waker stack and chain
  link), kernel lock waits 2T, futex waits 2T, on-CPU samples 2T. These allocate an entry when it is
  first used (BPF_F_NO_PREALLOC): until then a slot costs 16 bytes of hash buckets. The slab group's
  per-CPU counts (one per process and cache: hackbench's processes each touch ~60 caches, and the
  entries of exited processes go a drain later) are 8T, preallocated, within its 64 MiB bound.
- S, stack map entries per probe object (`--stack-map-entries`): 32,768, halved while the four
  objects' stack maps (preallocated: ~570 bytes an entry) would take more than 1/64 of the RAM, and at
  least 4,096.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

MIN_TASKS = 32768
TASKS_PER_THREAD = 4
DEFAULT_STACK_ENTRIES = 32768
MIN_STACK_ENTRIES = 4096
STACK_ENTRY_BYTES = 8 + 8 * 64 + 48  # key, MAX_STACK_DEPTH frames, the hash table's own element
STACK_OBJECTS = 4  # sched, locks, futex, oncpu
RAM_SHARE_FOR_STACKS = 64  # the stack maps together take at most 1/64 of the RAM
# What a flag may ask: the kernel allocates buckets for max_entries up front (16 bytes a slot)
FLAG_MIN = 64
FLAG_MAX = 1 << 24


@dataclass(frozen=True)
class MapSizes:
    tasks: int  # T
    stack_entries: int  # S, per probe object

    @property
    def task_final(self) -> int:
        return self.tasks

    @property
    def offcpu(self) -> int:
        return 2 * self.tasks

    @property
    def wakers(self) -> int:
        return 4 * self.tasks

    @property
    def locks(self) -> int:
        return 2 * self.tasks

    @property
    def futex(self) -> int:
        return 2 * self.tasks

    @property
    def oncpu(self) -> int:
        return 2 * self.tasks

    @property
    def slab_counts(self) -> int:
        return 8 * self.tasks

    def as_options(self) -> dict:
        """What the recording's metadata keeps (meta.options.map_sizes)."""
        return {**asdict(self), "task_final": self.task_final, "offcpu": self.offcpu, "wakers": self.wakers,
                "locks": self.locks, "futex": self.futex, "oncpu": self.oncpu}


DEFAULT_SIZES = MapSizes(MIN_TASKS, DEFAULT_STACK_ENTRIES)


def pow2ceil(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def tasks_for(threads_now: int, task_limit: int) -> int:
    """T for a machine with `threads_now` threads alive and at most `task_limit` at once."""
    ceiling = pow2ceil(max(task_limit, 1))
    floor = min(MIN_TASKS, ceiling)
    return max(floor, min(pow2ceil(TASKS_PER_THREAD * max(threads_now, 1)), ceiling))


def stack_entries_for(ram_bytes: int) -> int:
    """S for a machine with this much RAM."""
    s = DEFAULT_STACK_ENTRIES
    budget = ram_bytes // RAM_SHARE_FOR_STACKS if ram_bytes > 0 else 0
    while s > MIN_STACK_ENTRIES and budget and s * STACK_ENTRY_BYTES * STACK_OBJECTS > budget:
        s //= 2
    return s


def machine_sizes(max_tasks: int | None = None, stack_entries: int | None = None) -> MapSizes:
    """The sizes for this machine now; a number given (a flag) is used as it is."""
    tasks = max_tasks if max_tasks else tasks_for(threads_alive(), task_limit())
    stacks = stack_entries if stack_entries else stack_entries_for(ram_bytes())
    return MapSizes(tasks, stacks)


def threads_alive() -> int:
    """Threads on the machine now: /proc/loadavg's "running/total" scheduling entities."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return 0


def task_limit() -> int:
    """The most tasks the kernel allows at once: the smaller of kernel.pid_max and threads-max."""
    limits = []
    for path in ("/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"):
        try:
            with open(path) as f:
                limits.append(int(f.read().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    return min(limits) if limits else MIN_TASKS


def ram_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
