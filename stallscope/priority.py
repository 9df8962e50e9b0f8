"""stallscope's own scheduling priority while it traces.

On a machine with hundreds of runnable tasks an ordinary process gets a sliver of a CPU: the
collector's one-second intervals stretch to tens of seconds and a live view stops being live. So
`top` runs at a raised priority (nice -20, as atop does), with what it spends measured against the
overhead budget. A recording keeps the caller's priority unless asked: its intervals may stretch, its
totals stay exact, and its drains do not take CPU from the work being recorded. Linux keeps a nice
value per thread: it is set on the thread that runs the session before that thread starts any other,
so the collector's threads inherit it; a command stallscope starts is forked at the caller's
priority, not ours.

A nice value ranks a thread only among the tasks of its own scheduling group. Where the kernel groups
tasks by session (autogroup: `kernel.sched_autogroup_enabled`, tasks in the root CPU cgroup), a
workload started from another terminal is another group, and the two groups share the CPUs by their
own weights, whatever stallscope's nice: under `perf bench sched messaging` a view at nice -20 waited
up to 1.6 s for a CPU. So the session's group is raised as well (`raise_group`), while tracing, and put
back after. The group holds every process of stallscope's terminal session: it is raised only when
none but stallscope and its ancestors (the shell, sudo) are in it, never over a workload started from
the same terminal, and a notice says why not. A stallscope killed with SIGKILL leaves its terminal's
group raised: `echo 0 > /proc/$$/autogroup` in that shell puts it back.

No nice value helps where real-time tasks hold the CPUs: an ordinary task then gets what the kernel's
real-time throttling leaves (5% of each CPU by default, `kernel.sched_rt_runtime_us`), and under
`stress-ng --mutex 2` (SCHED_FIFO threads on both CPUs) `top` showed its first data after 14 s. Asked
(`--realtime PRIO`, as `perf record -r`), the session's threads and the screen's run at SCHED_FIFO at
that priority, among or above those tasks; a command stallscope starts is forked at the caller's policy,
and the policy is put back when tracing ends.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Callable, Iterator

from stallscope import procstat

DEFAULT_NICE = -20
RT_PRIORITIES = range(1, 100)  # SCHED_FIFO's (sched_get_priority_min/max on Linux)


def own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def set_own_nice(nice: int) -> str:
    """Set the calling thread's nice value; "" when done, else why not (the caller says so)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


@contextmanager
def at_nice(nice: int) -> Iterator[None]:
    """Run the block at `nice` (e.g. to fork a command at the caller's priority), then go back."""
    mine = own_nice()
    if mine == nice:
        yield
        return
    set_own_nice(nice)
    try:
        yield
    finally:
        set_own_nice(mine)


def own_policy() -> tuple[int, int]:
    """The calling thread's scheduling policy and real-time priority."""
    return os.sched_getscheduler(0), os.sched_getparam(0).sched_priority


def set_own_policy(policy: int, priority: int = 0) -> str:
    """Set the calling thread's policy (SCHED_FIFO and a priority, or SCHED_OTHER and 0); "" when done,
    else why not. New threads inherit it; `at_policy` forks a command at another."""
    try:
        os.sched_setscheduler(0, policy, os.sched_param(priority))
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


@contextmanager
def at_policy(policy: int, priority: int = 0) -> Iterator[None]:
    """Run the block at this policy (e.g. to fork a command at the caller's), then go back."""
    mine = own_policy()
    if mine == (policy, priority):
        yield
        return
    set_own_policy(policy, priority)
    try:
        yield
    finally:
        set_own_policy(*mine)


_CALLER_POLICY: tuple[int, int] | None = None  # the policy the process started with, before enter_realtime


def enter_realtime(priority: int) -> str:
    """The calling thread to SCHED_FIFO at `priority`, as early as a command can (the interpreter's own
    start and stallscope's imports, at an ordinary task's 5%, took seconds); "" when done, else why not.
    The policy the process had is kept for what it starts (`caller_policy`)."""
    global _CALLER_POLICY
    if _CALLER_POLICY is None:
        _CALLER_POLICY = own_policy()
    return set_own_policy(os.SCHED_FIFO, priority)


def realtime_asked(argv: list[str]) -> int | None:
    """`--realtime PRIO` (or `--realtime=PRIO`) among stallscope's own arguments (before a `--` and its
    command), when PRIO is one; the parser checks it again. Read before the parser is even built, so that
    the rest of the start runs at that priority."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return None
        value = argv[i + 1] if arg == "--realtime" and i + 1 < len(argv) else (
            arg.partition("=")[2] if arg.startswith("--realtime=") else None)
        if value is not None:
            return int(value) if value.isdigit() and int(value) in RT_PRIORITIES else None
    return None


@contextmanager
def at_group_nice(nice: int) -> Iterator[None]:
    """Run the block with this process's autogroup raised to `nice` where raise_group can (else as it
    was: the session says why when it tries again), then put it back."""
    restore, _why = raise_group(nice)
    try:
        yield
    finally:
        if restore is not None:
            restore()


def live_nice_asked(argv: list[str]) -> int | None:
    """The priority a live `stallscope top` runs at (its --nice N, else DEFAULT_NICE); None for any other
    command, `top --replay` and a --nice that is no nice value (the parser says so). Read before the parser
    is even built: on a busy machine a process at the caller's priority is held up as soon as it has used
    its first tenth of a second of CPU, and the imports before the probes load take seconds there."""
    def names(arg: str, option: str, least: int) -> bool:  # as the parser reads it, an abbreviation too
        name = arg.partition("=")[0]
        return len(name) >= least and option.startswith(name)

    if not argv or argv[0] != "top":
        return None
    nice = DEFAULT_NICE
    for i, arg in enumerate(argv):
        if names(arg, "--replay", 5):  # --rep: --rows and --realtime share --r and --re
            return None
        if names(arg, "--nice", 4):  # --ni: --no-degrade and --no-user-stacks share --n
            _name, eq, value = arg.partition("=")
            try:
                nice = int(value if eq else argv[i + 1] if i + 1 < len(argv) else "")
            except ValueError:
                return None
            if not -20 <= nice <= 19:
                return None
    return nice


def caller_policy() -> tuple[int, int]:
    """The policy the process started with: a command stallscope starts is forked at it."""
    return _CALLER_POLICY if _CALLER_POLICY is not None else own_policy()


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _autogroup(pid: int | str = "self") -> tuple[str, int] | None:
    """(the group's name, its nice) from /proc/PID/autogroup ("/autogroup-12 nice 0"); None without one."""
    parts = _read(f"/proc/{pid}/autogroup").split()
    if len(parts) != 3 or parts[1] != "nice":
        return None
    try:
        return parts[0], int(parts[2])
    except ValueError:
        return None


def _in_root_cpu_cgroup(text: str) -> bool:
    """Whether /proc/self/cgroup (`text`) puts the process in the root of the CPU controller's hierarchy:
    only there does the kernel group tasks by session."""
    unified = None
    for line in text.splitlines():
        _id, _sep, rest = line.partition(":")
        controllers, _sep, path = rest.partition(":")
        if "cpu" in controllers.split(","):
            return path == "/"
        if controllers == "":
            unified = path
    return unified in (None, "/")


def _ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        parent = procstat.numbers(pid, (4,))
        if parent is None:
            break
        pid = parent[0]
    return out


def group_sharers(name: str) -> list[tuple[int, str]]:
    """The processes in the autogroup `name` other than this one and its ancestors: (pid, name)."""
    mine = _ancestors(os.getpid())
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in mine:
            continue
        group = _autogroup(entry)
        if group is not None and group[0] == name:
            out.append((int(entry), _read(f"/proc/{entry}/comm").strip()))
    return out


def group_state() -> dict:
    """What decides whether a live view can raise its scheduling group (`doctor`, `raise_group`): whether the
    kernel groups this process by session, its group's name and nice, and who else is in it."""
    grouped, group = _own_group()
    out = {"autogroup": grouped, "group": group[0] if group else "", "nice": group[1] if group else None,
           "shared_with": []}
    if grouped:
        out["shared_with"] = [{"pid": pid, "comm": comm} for pid, comm in group_sharers(group[0])]
    return out


def _own_group() -> tuple[bool, tuple[str, int] | None]:
    """Whether the kernel groups this process by session, and its group's (name, nice)."""
    group = _autogroup()
    grouped = (group is not None and _read("/proc/sys/kernel/sched_autogroup_enabled").strip() == "1"
               and _in_root_cpu_cgroup(_read("/proc/self/cgroup")))
    return grouped, group


def raise_group(nice: int) -> tuple[Callable[[], None] | None, str]:
    """Raise this process's autogroup to `nice` (module docstring): (a function that puts it back, or None
    when nothing was changed; why not, or "" when there was nothing to do). The group's other processes are
    looked for (a read of every process's /proc entry: 0.16 s beside a hackbench loop's 470 processes) only
    where it would be raised: `top` raises it as it starts, and its session, finding it raised, does not look
    again on the way to its first data."""
    grouped, group = _own_group()
    if not grouped or group[1] <= nice:
        return None, ""
    before = group[1]
    sharers = group_sharers(group[0])
    if sharers:
        names = ", ".join(f"{comm or '?'} ({pid})" for pid, comm in sharers[:3])
        more = f" and {len(sharers) - 3} more" if len(sharers) > 3 else ""
        verb = "shares" if len(sharers) == 1 else "share"
        return None, (f"{names}{more} {verb} this terminal session's scheduling group, so it stays at nice {before}: "
                      "among other terminals' work stallscope waits for a CPU as they do; run it from a terminal of "
                      "its own")
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError as exc:
        return None, f"cannot raise this terminal session's scheduling group to nice {nice}: {exc.strerror or exc}"

    def restore() -> None:
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(before))
        except OSError:
            pass

    return restore, ""
