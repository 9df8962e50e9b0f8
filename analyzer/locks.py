"""Kernel locks as lock_stat shows them, from contention_begin/end aggregates.

A lock is named as a kernel developer would: `mmap_lock` when it is the
waiter's own mm->mmap_lock; the slab object holding it (`&kmem_cache_node`
for a slab list_lock, `&mm_struct`, ...); otherwise the contending caller, the
first frame of the waiter's stack after the lock-internal ones. Nothing is
shown that cannot be derived (no bounces, no hold times: the tracepoints do
not see them).
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.model import LockWaits, Model
from stallscope.analyzer.sample import Stack, TaskId
from stallscope.analyzer.slab import list_lock_caches

LCB_F_SPIN, LCB_F_READ, LCB_F_WRITE, LCB_F_RT, LCB_F_PERCPU, LCB_F_MUTEX = 1, 2, 4, 8, 16, 32
LOCK_KIND_ADDR, LOCK_KIND_MMAP, LOCK_KIND_SLAB = 0, 1, 2

# Frames that take or wait for the lock rather than want it; the tracing frames on top.
LOCK_INTERNAL = (
    "bpf_", "__bpf_", "__traceiter_", "trace_contention", "perf_trace_", "queued_spin_lock", "native_queued",
    "__pv_queued", "pv_queued", "_raw_spin_lock", "_raw_read_lock", "_raw_write_lock", "queued_read_lock",
    "queued_write_lock", "do_raw_spin_lock", "__mutex_lock", "mutex_lock", "__ww_mutex_lock", "ww_mutex_lock",
    "mutex_spin_on_owner", "osq_lock", "rwsem_down_", "down_read", "down_write", "__down", "down",
    "rwsem_optimistic_spin", "percpu_down_", "__percpu_down", "rt_mutex", "__rt_mutex", "rtlock_",
    "mmap_read_lock", "mmap_write_lock", "raw_spin_rq_lock", "_raw_spin_rq_lock", "lock_mm_and_find_vma_internal", "contention_begin",
)


def lock_type(flags: int) -> str:
    if flags & LCB_F_PERCPU:
        return "percpu-rwsem:" + ("W" if flags & LCB_F_WRITE else "R")
    if flags & LCB_F_RT:
        return "rt-mutex"
    if flags & LCB_F_MUTEX:
        return "mutex"
    if flags & LCB_F_SPIN:
        if flags & LCB_F_READ:
            return "rwlock:R"
        if flags & LCB_F_WRITE:
            return "rwlock:W"
        return "spinlock"
    if flags & LCB_F_READ:
        return "rwsem:R"
    if flags & LCB_F_WRITE:
        return "rwsem:W"
    return "semaphore"


def contention_point(stack: Stack | None) -> str:
    """The caller that wanted the lock: the first frame after the lock-internal ones."""
    if stack is None or not stack.frames:
        return ""
    for f in stack.frames:
        name = f.symbol or ""
        if name and not name.startswith(LOCK_INTERNAL):
            return f.text
    return stack.frames[-1].text


def lock_name(w: LockWaits, comm_of, node_caches: dict | None = None) -> str:
    if w.kind == LOCK_KIND_MMAP:
        return f"mmap_lock ({comm_of(w.tgid)}[{w.tgid}])"
    if w.kind == LOCK_KIND_SLAB and w.cache:
        if w.cache == "kmem_cache_node":
            # which cache's node: known when the slab probe described the cache (analyzer/slab.py)
            owner = (node_caches or {}).get(w.addr)
            return "&kmem_cache_node->list_lock" + (f" ({owner.name})" if owner else "")
        return f"&{w.cache}"
    frames = [f.symbol or "" for f in w.stack.frames] if w.stack else []
    if any(name.startswith("raw_spin_rq_lock") for name in frames):
        return "rq->__lock"  # the run queue lock, taken through raw_spin_rq_lock*()
    point = contention_point(w.stack)
    return point.split("+")[0] if point else f"{w.addr:#x}"


@dataclass(frozen=True)
class Caller:
    point: str
    count: int
    total_ns: int


@dataclass(frozen=True)
class LockStat:
    name: str
    type: str
    addr: int
    contentions: int
    wait_total_ns: int
    wait_max_ns: int
    wait_min_ns: int
    spin_ns: int
    sleep_ns: int
    callers: tuple[Caller, ...]
    tasks: tuple[TaskId, ...]
    owner: str = ""  # a mutex's owner when contended: "comm[pid]"

    @property
    def wait_avg_ns(self) -> float:
        return self.wait_total_ns / self.contentions if self.contentions else 0.0


SORT_KEYS = {
    "total": lambda s: s.wait_total_ns, "max": lambda s: s.wait_max_ns, "count": lambda s: s.contentions,
    "avg": lambda s: s.wait_avg_ns,
}


def lock_stats(model: Model, sort: str = "total", tasks: set[TaskId] | None = None) -> list[LockStat]:
    """One row per lock (address and type), heaviest first."""
    def comm_of(tgid: int) -> str:
        for t in model.tasks.values():
            if t.info.tgid == tgid and t.info.task.pid == tgid:
                return t.info.comm
        return "?"

    node_caches = list_lock_caches(model)
    groups: dict[tuple[int, str], dict] = {}
    for w in model.lock_waits:
        if tasks is not None and w.task not in tasks:
            continue
        key = (w.addr, lock_type(w.flags))
        g = groups.setdefault(key, {"named_by": None, "count": 0, "total": 0, "max": 0, "min": 0,
                                    "spin": 0, "sleep": 0, "callers": {}, "tasks": set(), "owner": ""})
        # named by its heaviest wait with a stack (a stackless one names only by address)
        best = g["named_by"]
        if best is None or (w.stack is not None and (best.stack is None or w.total_ns > best.total_ns)):
            g["named_by"] = w
        g["count"] += w.count
        g["total"] += w.total_ns
        g["max"] = max(g["max"], w.max_ns)
        g["min"] = min(g["min"], w.min_ns) if g["min"] and w.min_ns else (g["min"] or w.min_ns)
        g["spin"] += w.spin_ns
        g["sleep"] += w.sleep_ns
        g["tasks"].add(w.task)
        point = contention_point(w.stack) or "(stack not sampled)"
        c = g["callers"].setdefault(point, [0, 0])
        c[0] += w.count
        c[1] += w.total_ns
        if w.owner_pid:
            g["owner"] = f"{w.owner_comm}[{w.owner_pid}]"
    out = []
    for (addr, typ), g in groups.items():
        callers = tuple(Caller(p, c, t) for p, (c, t) in sorted(g["callers"].items(), key=lambda kv: -kv[1][1]))
        out.append(LockStat(lock_name(g["named_by"], comm_of, node_caches), typ, addr, g["count"], g["total"], g["max"], g["min"], g["spin"], g["sleep"],
                            callers, tuple(sorted(g["tasks"])), g["owner"]))
    out.sort(key=lambda s: (-SORT_KEYS[sort](s), s.name))
    return out
