"""A process's or thread's /proc/PID/stat, read one way for every reader (its start time, its image, its
state, its parent, its flags). Standard library only, and analyzer/wholefile.py (one call that releases the
interpreter's lock once, not at each of open's and read's steps): the command line imports it before anything
heavy."""

from __future__ import annotations

import os

from stallscope.analyzer.wholefile import read_whole


def fields(pid: int | str) -> list[bytes] | None:
    """/proc/PID/stat's fields from the third (the state) on, field n of proc(5) at [n - 3]; None when the
    file cannot be read (the task is gone)."""
    try:
        stat = read_whole(f"/proc/{pid}/stat")
    except OSError:
        return None
    # the name (field 2) may hold spaces, parentheses and bytes that are not UTF-8: fields start after the last ')'
    return stat[stat.rfind(b")") + 2:].split()


def numbers(pid: int | str, wanted: tuple[int, ...]) -> tuple[int, ...] | None:
    """The numeric fields of these numbers (as proc(5) numbers them; 4 on), or None when the file cannot be read
    or lacks them."""
    got = fields(pid)
    if got is None:
        return None
    try:
        return tuple(int(got[n - 3]) for n in wanted)
    except (IndexError, ValueError):
        return None


def start_time_ns(pid: int | str) -> int | None:
    """When a process started, in ns since boot (field 22, task->start_boottime).

    Pairs with a pid to tell a process from a later one that reused its pid. The kernel reports
    it in clock ticks, so it is exact to a tick (10 ms with USER_HZ=100).
    """
    start = numbers(pid, (22,))
    return None if start is None else start[0] * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def image(pid: int) -> tuple[int, ...] | None:
    """Where a process's code, stack, arguments and environment are (startcode, endcode, startstack, arg_start
    and env_start: fields 26-28, 48 and 50). A fork keeps all five; an exec moves them (a new image, a new stack,
    and address randomization). None when the file cannot be read, or where the kernel does not show them: a
    process without an address space (a kernel thread) reads all zero, and one this reader may not trace reads
    (1, 1, 0, 0, 0), alike for any two."""
    got = numbers(pid, (26, 27, 28, 48, 50))
    return got if got is not None and all(got) else None


def own_threads_run_delay_ns() -> dict[int, int]:
    """How long each of the process's threads has waited on a run queue for a CPU (schedstat's
    run_delay), by thread id; empty where the kernel does not count it. All of them: a thread kept
    from a CPU while it holds the interpreter's lock keeps the others from running as well, which
    wait for the lock asleep, not on a run queue."""
    waits = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return waits
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                waits[int(tid)] = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):  # a thread gone since, or no schedstat
            continue
    return waits
