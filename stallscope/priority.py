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
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Callable, Iterator

DEFAULT_NICE = -20


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
        stat = _read(f"/proc/{pid}/stat")
        try:
            pid = int(stat[stat.rindex(")") + 2:].split()[1])
        except (ValueError, IndexError):
            break
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
    grouped = (_read("/proc/sys/kernel/sched_autogroup_enabled").strip() == "1"
               and _in_root_cpu_cgroup(_read("/proc/self/cgroup")))
    group = _autogroup()
    out = {"autogroup": grouped and group is not None, "group": group[0] if group else "",
           "nice": group[1] if group else None, "shared_with": []}
    if out["autogroup"]:
        out["shared_with"] = [{"pid": pid, "comm": comm} for pid, comm in group_sharers(group[0])]
    return out


def raise_group(nice: int) -> tuple[Callable[[], None] | None, str]:
    """Raise this process's autogroup to `nice` (module docstring): (a function that puts it back, or None
    when nothing was changed; why not, or "" when there was nothing to do)."""
    state = group_state()
    before = state["nice"]
    if not state["autogroup"] or before <= nice:
        return None, ""
    sharers = state["shared_with"]
    if sharers:
        names = ", ".join(f"{p['comm'] or '?'} ({p['pid']})" for p in sharers[:3])
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
