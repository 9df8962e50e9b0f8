"""What the recording machine looks like, kept with the recording so that advice read later on
another machine is still about this one: CPU topology (which CPUs share a cache, a core, a NUMA
node), how busy each CPU was over the recording, and which scheduler knobs exist here.

Read from sysfs and procfs; anything unreadable is left out, never guessed.
"""

from __future__ import annotations

import glob
import os
import re
import time
from typing import Callable, Iterable, Iterator

from stallscope import procstat
from stallscope.analyzer.sample import Throttled

SCHED_SYSCTLS = "/proc/sys/kernel"
SCHED_DEBUGFS = "/sys/kernel/debug/sched"


def own_start_monotonic() -> float | None:
    """When this process started, on time.monotonic()'s clock (to a clock tick); None if it cannot be read.
    /proc/self/stat's start time counts from boot on CLOCK_BOOTTIME, which goes on in a suspend."""
    start_ns = procstat.start_time_ns("self")
    if start_ns is None:
        return None
    return time.monotonic() - (time.clock_gettime(time.CLOCK_BOOTTIME) - start_ns / 1e9)


def read_value(path: str) -> str | None:
    """A /proc or /sys file's text, stripped; None when it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def parse_cpu_list(text: str) -> list[int]:
    """`0-3,8,10-11` -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def topology(root: str = "/sys/devices/system/cpu") -> dict:
    """Per online CPU: its core, package, NUMA node and the CPUs sharing its last-level cache."""
    online = parse_cpu_list(read_value(f"{root}/online") or "0")
    cpus = {}
    for cpu in online:
        base = f"{root}/cpu{cpu}"
        llc, level = None, -1
        for index in glob.glob(f"{base}/cache/index*"):
            lvl = read_value(f"{index}/level")
            shared = read_value(f"{index}/shared_cpu_list")
            if lvl and shared and int(lvl) > level:
                level, llc = int(lvl), parse_cpu_list(shared)
        nodes = [int(m.group(1)) for n in glob.glob(f"{base}/node*") if (m := re.search(r"node(\d+)$", n))]
        cpus[str(cpu)] = {
            "core": int(read_value(f"{base}/topology/core_id") or -1),
            "package": int(read_value(f"{base}/topology/physical_package_id") or -1),
            "node": nodes[0] if nodes else 0,
            "llc": llc if llc is not None else [cpu],
            "llc_level": level,
            "siblings": parse_cpu_list(read_value(f"{base}/topology/thread_siblings_list") or str(cpu)),
        }
    return {"online": online, "cpus": cpus}


def cpu_times() -> dict[int, tuple[int, int]]:
    """Per CPU (busy, total) jiffies from /proc/stat: the difference of two reads is utilisation."""
    out = {}
    for line in (read_value("/proc/stat") or "").splitlines():
        m = re.match(r"cpu(\d+)\s+(.*)", line)
        if not m:
            continue
        v = [int(x) for x in m.group(2).split()]
        idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
        steal = v[7] if len(v) > 7 else 0
        total = sum(v[:8])
        out[int(m.group(1))] = (total - idle - steal, total)
    return out


def cpu_time_since(start: dict[int, tuple[int, int]], end: dict[int, tuple[int, int]]) -> tuple[tuple[int, int, int], ...]:
    """Per CPU (cpu, busy ns, total ns) between two reads of cpu_times() (a CPU in both, whose time went on)."""
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    out = []
    for cpu, (b1, t1) in sorted(end.items()):
        if cpu in start and t1 > start[cpu][1]:
            b0, t0 = start[cpu]
            out.append((cpu, max(b1 - b0, 0) * tick_ns, (t1 - t0) * tick_ns))
    return tuple(out)


def busy_pct(start: dict[int, tuple[int, int]], end: dict[int, tuple[int, int]]) -> dict[str, float]:
    """Per CPU (its number as text) the busy percentage between two reads of cpu_times()."""
    return {str(cpu): round(100.0 * busy / total, 1) for cpu, busy, total in cpu_time_since(start, end)}


def sched_knobs() -> dict[str, dict]:
    """The scheduler knobs this kernel has, with their values: sysctls, and debugfs files (mounted or not)."""
    out = {}
    for path in sorted(glob.glob(f"{SCHED_SYSCTLS}/sched_*")):
        value = read_value(path)
        if value is not None:
            out[os.path.basename(path)] = {"path": path, "value": value, "stable": True}
    for path in sorted(glob.glob(f"{SCHED_DEBUGFS}/*")):
        value = read_value(path) if os.path.isfile(path) else None
        if value is not None and len(value) < 200:
            out[os.path.basename(path)] = {"path": path, "value": value, "stable": False}
    return out


RCU_KNOBS = ("/sys/kernel/rcu_expedited", "/sys/kernel/rcu_normal")


def rcu_knobs() -> dict[str, dict]:
    """RCU's run-time settings (kernel/rcu/update.c): whether synchronize_rcu() is expedited, or never is."""
    out = {}
    for path in RCU_KNOBS:
        value = read_value(path)
        if value is not None:
            out[os.path.basename(path)] = {"path": path, "value": value, "stable": True}
    return out


def describe() -> dict:
    """Taken at the start of a recording."""
    return {"topology": topology(), "sched_knobs": sched_knobs(), "rcu_knobs": rcu_knobs(),
            "kernel_release": os.uname().release, "arch": os.uname().machine}


# ---- the CPU side, as deltas over the recording --------------------------------------------------

PSI_RESOURCES = ("cpu", "memory", "io")
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct")
MAX_CGROUPS = 2000


def pressure(base: str = "/proc/pressure", suffix: str = "") -> dict[str, dict[str, int]]:
    """PSI: the cumulative stall time (us) of `some` and `full` per resource, system-wide
    (/proc/pressure/RES) or of a cgroup (its RES.pressure)."""
    out = {}
    for res in PSI_RESOURCES:
        for line in (read_value(f"{base}/{res}{suffix}") or "").splitlines():
            kind, _, rest = line.partition(" ")
            m = re.search(r"total=(\d+)", rest)
            if m:
                out.setdefault(res, {})[kind] = int(m.group(1))
    return out


def steal_ns() -> int:
    """Time the hypervisor ran something else on this VM's CPUs (/proc/stat steal, all CPUs)."""
    fields = (read_value("/proc/stat") or "cpu").splitlines()[0].split()
    return int(fields[8]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0


def cgroup_pressure() -> dict[str, dict[str, dict[str, int]]]:
    """Each v2 cgroup's PSI (cpu/memory/io.pressure), the same walk as the throttling one."""
    out = {}
    for root in CGROUP_ROOTS:
        for dirpath, dirnames, filenames in os.walk(root):
            if dirpath[len(root):].count("/") >= 4:
                dirnames[:] = []
            if len(out) >= MAX_CGROUPS:
                return out
            if "cpu.pressure" in filenames:
                out[dirpath] = pressure(dirpath, ".pressure")
    return out


def _cgroup_stats(roots: tuple[str, ...] = CGROUP_ROOTS) -> Iterator[str]:
    """The cgroups with a cpu.stat, four levels deep at most below each root, MAX_CGROUPS at most, each once: a
    hierarchy reached by two roots (v1's cpu, often a link to cpu,cpuacct, and the cgroup root above both) is
    named by the first path met."""
    seen: set[tuple[int, int]] = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            depth = dirpath[len(root):].count("/")
            if depth >= 4:
                dirnames[:] = []
            if len(seen) >= MAX_CGROUPS:
                return
            if "cpu.stat" not in filenames:
                continue
            try:
                st = os.stat(dirpath)
            except OSError:  # gone meanwhile
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            yield dirpath


def throttle_counts(cgroup: str) -> tuple[int, int] | None:
    """(nr_throttled, throttled ns) from a cgroup's cpu.stat: v2 throttled_usec, v1 throttled_time (ns); None
    when it has no such count (no CPU controller there) or is gone."""
    stat = dict(line.split()[:2] for line in (read_value(f"{cgroup}/cpu.stat") or "").splitlines()
                if len(line.split()) >= 2)
    if "nr_throttled" not in stat:
        return None
    try:
        ns = int(stat["throttled_usec"]) * 1000 if "throttled_usec" in stat else int(stat.get("throttled_time", 0))
        return int(stat["nr_throttled"]), ns
    except ValueError:
        return None


def cgroup_throttling() -> dict[str, tuple[int, int]]:
    """cgroup -> (nr_throttled, throttled ns) from cpu.stat: v2 throttled_usec, v1 throttled_time (ns)."""
    out: dict[str, tuple[int, int]] = {}
    for cg in _cgroup_stats():
        counts = throttle_counts(cg)
        if counts is not None:
            out[cg] = counts
    return out


def throttled_since(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                    new_from_zero: bool = True) -> tuple[Throttled, ...]:
    """The cgroups throttled between two readings of their counts, each with its limit as read now, the most
    throttled first. `new_from_zero`: a cgroup in `after` alone counted from 0 (made since `before`); else left
    out (one only found since)."""
    out = []
    for cg, (n, ns) in after.items():
        if cg not in before and not new_from_zero:
            continue
        n0, ns0 = before.get(cg, (0, 0))
        if n > n0:
            q = cpu_quota(cg)
            out.append(Throttled(cg, n - n0, max(ns - ns0, 0), q.get("quota_us", 0), q.get("period_us", 0)))
    out.sort(key=lambda t: -t.throttled_ns)
    return tuple(out)


THROTTLE_RESCAN_S = 10.0


class Throttling:
    """The CFS bandwidth throttling of the cgroups that have a CPU limit, since the last read (a session reads it
    at each drain: Interval.throttled). Only a cgroup with a limit of its own is throttled (its descendants' tasks
    with it, counted in its cpu.stat). Which cgroups have one is found by walking the cgroup file systems, at the
    first read and then every THROTTLE_RESCAN_S: the walk reads a directory and a file or two per cgroup (27 ms
    for 300 cgroups here, too much for every interval); a read, the limited ones' cpu.stat. A cgroup given a
    limit meanwhile is counted from the walk that finds it."""

    def __init__(self, rescan_s: float = THROTTLE_RESCAN_S, clock: Callable[[], float] = time.monotonic,
                 walk: Callable[[], Iterable[str]] | None = None):
        self.rescan_s, self._clock = rescan_s, clock
        self._walk = walk or (lambda: [cg for cg in _cgroup_stats() if cpu_quota(cg)])
        self._limited: list[str] = []
        self._walked = float("-inf")
        self._last: dict[str, tuple[int, int]] | None = None

    def since_last(self) -> tuple[Throttled, ...]:
        """The throttling since the last call (none at the first: it is the baseline)."""
        now = self._clock()
        if now - self._walked >= self.rescan_s:
            self._limited, self._walked = list(self._walk()), now
        counts = {cg: c for cg in self._limited if (c := throttle_counts(cg)) is not None}
        before, self._last = self._last, counts
        return () if before is None else throttled_since(before, counts, new_from_zero=False)


def cpu_quota(cgroup: str) -> dict:
    """A cgroup's CFS bandwidth limit as the recording ends: {"quota_us", "period_us"} (cgroup v2's cpu.max,
    v1's cpu.cfs_quota_us and cpu.cfs_period_us), {} when it has none or cannot be read."""
    v2 = read_value(f"{cgroup}/cpu.max")
    try:
        if v2 is not None:
            quota, period = v2.split()[:2]
            return {} if quota == "max" else {"quota_us": int(quota), "period_us": int(period)}
        quota, period = read_value(f"{cgroup}/cpu.cfs_quota_us"), read_value(f"{cgroup}/cpu.cfs_period_us")
        if quota is None or period is None or int(quota) < 0:
            return {}
        return {"quota_us": int(quota), "period_us": int(period)}
    except ValueError:
        return {}


def cpu_side_snapshot() -> dict:
    return {"psi": pressure(), "steal_ns": steal_ns(), "throttling": cgroup_throttling(),
            "cgroup_psi": cgroup_pressure()}


def cpu_side(start: dict, end: dict, seconds: float, cpus: int) -> dict:
    """What took CPU time from tasks without their being blocked, over the recording: steal, CFS
    bandwidth throttling per cgroup, and PSI (the share of time some / all tasks stalled)."""
    secs = max(seconds, 1e-9)
    def pct(before: dict, after: dict) -> dict:
        return {res: {f"{k}_pct": round(100.0 * (v - before.get(res, {}).get(k, 0)) / 1e6 / secs, 2)
                      for k, v in kinds.items()} for res, kinds in after.items()}

    psi = pct(start["psi"], end["psi"])
    cgroup_psi = [{"cgroup": cg, **pct(start.get("cgroup_psi", {}).get(cg, {}), p)}
                  for cg, p in end.get("cgroup_psi", {}).items()]
    cgroup_psi.sort(key=lambda c: -c.get("cpu", {}).get("some_pct", 0))
    steal = end["steal_ns"] - start["steal_ns"]
    throttled = [t.entry() for t in throttled_since(start["throttling"], end["throttling"])]
    return {"psi": psi, "steal_ns": steal, "steal_pct": round(100.0 * steal / 1e9 / secs / max(cpus, 1), 2),
            "throttled": throttled[:50], "cgroup_psi": cgroup_psi[:20]}
