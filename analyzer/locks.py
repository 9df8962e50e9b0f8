"""Locks as lock_stat shows them: kernel locks from contention_begin/end
aggregates, user-space locks from futex waits.

A lock is named as a kernel developer would: `mmap_lock` when it is the
waiter's own mm->mmap_lock; the slab object holding it (`&kmem_cache_node`
for a slab list_lock, `&mm_struct`, ...); otherwise the contending caller, the
first frame of the waiter's stack after the lock-internal ones. Nothing is
shown that cannot be derived (no bounces, no hold times: the tracepoints do
not see them).

A user-space lock is a futex word of one process, named by the data symbol
holding it (`lock (mutex_convoy[1234])` for a `static pthread_mutex_t lock`),
else by its address; its callers are the functions that called the libc lock
function (a uprobe's proven return address), else the innermost frame of the
waiter's user stack outside the C library. Its waits are all sleep: a
pthread mutex spins in user space before the futex call, which no probe here
sees.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import os
import re

from stallscope.analyzer.frames import LOCK_INTERNAL, RQ_LOCK, bare, percpu_rwsem_of
from stallscope.analyzer.causes import BLOCKER, Cause
from stallscope.analyzer.sample import (
    LOST_STACK, NO_STACK_LABELS, SHARABLE, STACK_NOT_DRAWN, STACK_OWN, STACK_RATE_LIMITED,
)
from stallscope.analyzer.memo import memoised, per_model
from stallscope.analyzer.model import FutexWaits, LockFolded, LockWaits, Model
from stallscope.analyzer.sample import Stack, TaskId
from stallscope.analyzer.scope import in_scope
from stallscope.analyzer.slab import list_lock_caches
from stallscope.analyzer.sample import Frame

try:
    from stallscope.analyzer import _lockgroups
except ImportError:  # not built: Python groups the records
    _lockgroups = None

LCB_F_SPIN, LCB_F_READ, LCB_F_WRITE, LCB_F_RT, LCB_F_PERCPU, LCB_F_MUTEX = 1, 2, 4, 8, 16, 32
FUTEX_F_TIMEOUT = 1  # bpf/futex.h: the wait call had a timeout
FUTEX_F_LOCKWORD, FUTEX_F_ZERO, FUTEX_F_TID, FUTEX_F_PARK = 2, 4, 8, 16  # bpf/futex.h: what the expected value tells
# a futex's waits, by what most of them were: a mutex's lock word (or a proven lock call), an event
# (a condition variable's or a semaphore's wait for 0), a join (a live thread's TID), a park (a thread parker's -1)
FUTEX_KINDS = {"mutex": FUTEX_F_LOCKWORD, "event": FUTEX_F_ZERO, "join": FUTEX_F_TID, "park": FUTEX_F_PARK}
FUTEX_KIND_SHARE = 0.5
LOCK_KIND_ADDR, LOCK_KIND_MMAP, LOCK_KIND_SLAB = 0, 1, 2

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


def row_key(w: LockWaits, typ: str) -> tuple:
    """The lock_stat row a kernel lock record belongs to, as `LockStat.keys` holds it: a lock in a slab
    object by the struct field holding it (one class), any other by its address; with its type."""
    return (("field", w.field) if w.field else ("addr", w.addr), typ)


def instance_where(name: str, where: str) -> str:
    """What an instance's place adds to its row's name: a directory's path; "" when the name says it already (the
    locks in many objects of one cache all read "in a sock_inode_cache object")."""
    return where if where and where not in name else ""


def contention_point(stack: Stack | None) -> str:
    """The caller that wanted the lock: the first frame after the lock-internal ones."""
    if stack is None or not stack.frames:
        return ""
    for f in stack.frames:
        name = f.symbol or ""
        if name and not name.startswith(LOCK_INTERNAL):
            return f.text
    return stack.frames[-1].text


# Scheduler paths whose own spin lock waits (not in a slab object: those are named by their field, such
# as task_struct->pi_lock) are on a run queue's lock.
RQ_LOCK_CALLERS = frozenset({
    "__schedule", "try_to_wake_up", "__task_rq_lock", "task_rq_lock", "sched_ttwu_pending", "ttwu_queue",
    "double_rq_lock", "_double_lock_balance", "sched_balance_rq", "load_balance", "schedule_tail",
    "wake_up_new_task", "sched_tick", "scheduler_tick", "migrate_task_to", "move_queued_task",
    "__migrate_swap_task", "sched_balance_newidle", "newidle_balance", "active_load_balance_cpu_stop",
})


# Kernel functions that take one lock of their kind, known by the struct field that holds it: a lock found only by
# its address or in an object of a generic cache (kmalloc-*, whose objects have no one struct), contended there,
# is named by it. (function, lock_stat type) -> the lock. A function that takes two locks of one kind is not here
# (futex_lock_pi and futex_unlock_pi: the bucket's lock and the PI mutex's wait_lock, both spinning).
LOCKS_BY_TAKER = {
    # a futex's hash bucket: every wait queues on it and every wake walks it (6.16+: a process's private hash,
    # kvzalloc'ed: a kmalloc-cg-* object; else the global table)
    **{(f, "spinlock"): "&futex_hash_bucket->lock"
       for f in ("futex_wake", "futex_wake_op", "futex_wait_setup", "futex_q_lock", "futex_wait_multiple_setup")},
    # a uprobe hit runs the probe's handlers; one being removed holds it for write (6.18; 6.1 inlines handler_chain)
    ("handler_chain", "rwsem:R"): "&uprobe->register_rwsem",
}


def lock_by_taker(point: str, typ: str) -> str:
    """The lock a contention point's function takes (LOCKS_BY_TAKER), or ""."""
    return LOCKS_BY_TAKER.get((bare(point.split("+")[0]), typ), "") if point else ""


def lock_class(field: str) -> str:
    """lock_stat's way of naming a lock by the field holding it: `&ext4_inode_info->vfs_inode.i_rwsem`."""
    struct, _, path = field.partition(".")
    return f"&{struct}->{path}" if path else f"&{struct}"


def lock_name(w: LockWaits, comm_of, node_caches: dict | None = None) -> str:
    if w.flags & LCB_F_PERCPU and (named := percpu_rwsem_of(bare(contention_point(w.stack).split("+")[0]))):
        return named  # a per-CPU rwsem (file_rwsem, sb_writers, ext4's s_writepages_rwsem, ...), by its users
    if w.kind == LOCK_KIND_ADDR and w.symbol:
        return w.symbol  # a static lock, named by its variable (kallsyms data symbols)
    if w.kind == LOCK_KIND_MMAP:
        return f"mmap_lock ({comm_of(w.tgid)}[{w.tgid}])"
    if w.kind == LOCK_KIND_SLAB and w.cache:
        if w.cache == "kmem_cache_node":
            # which cache's node: known when the slab probe described the cache (analyzer/slab.py)
            owner = (node_caches or {}).get(w.addr)
            return "&kmem_cache_node->list_lock" + (f" ({owner.name})" if owner else "")
        if w.field:
            return lock_class(w.field)
        point = contention_point(w.stack).split("+")[0]
        where = w.object or f"in a {w.cache} object"
        if known := lock_by_taker(point, lock_type(w.flags)):
            return f"{known} ({where})"
        return f"{point} ({where})" if point else f"a lock {where}"  # no stack walked: no caller to name
    frames = [f.symbol or "" for f in w.stack.frames] if w.stack else []
    point = contention_point(w.stack)
    if any(name.startswith("raw_spin_rq_lock") for name in frames) or (
            w.flags & LCB_F_SPIN and bare(point.split("+")[0]) in RQ_LOCK_CALLERS):
        # the run-queue lock (per-CPU data, no symbol): taken through raw_spin_rq_lock*(), inlined
        # into the scheduler's own paths (the lock probe names those it found at start: bpf/lock_collector.py)
        return RQ_LOCK
    return lock_by_taker(point, lock_type(w.flags)) or (point.split("+")[0] if point else f"{w.addr:#x}")


# the kernel's sched_yield() path: a thread that spins on it takes its run queue's lock at every call
SCHED_YIELD = frozenset({"do_sched_yield", "__x64_sys_sched_yield", "__ia32_sys_sched_yield",
                         "__arm64_sys_sched_yield", "__se_sys_sched_yield", "__do_sys_sched_yield", "yield"})


def drawn_share(model: Model, stat: "LockStat", functions: frozenset[str]) -> float | None:
    """Of a kernel lock row's waits drawn for a stack walk, the share of their wait time whose stack passes
    through one of `functions` (the undrawn ones are shared out alike, as its contention points are); None
    when none was drawn. The contention point is the lock's caller (lock_stat's): the run-queue lock's is
    __schedule() whether schedule() was called by a sleep or by sched_yield(); the stack says which."""
    keys = set(stat.keys)
    drawn = through = 0
    for w in model.lock_waits:
        stack = w.stack
        if stack is None or not stack.frames:
            continue
        if row_key(w, lock_type(w.flags)) not in keys:
            continue
        drawn += w.total_ns
        if any(bare(f.symbol or "") in functions for f in stack.frames):
            through += w.total_ns
    return through / drawn if drawn else None


# futex commands that wait (bpf/futex.h), and the futex2 syscalls
FUTEX_WAIT_OPS = {0: "FUTEX_WAIT", 9: "FUTEX_WAIT_BITSET", 6: "FUTEX_LOCK_PI", 13: "FUTEX_LOCK_PI2",
                  11: "FUTEX_WAIT_REQUEUE_PI", 0x100: "futex_waitv", 0x101: "futex_wait"}
_FUTEX_CMD_MASK = ~(128 | 256)  # FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME
_C_LIBRARY = re.compile(r"^(libc\.so|libc-[0-9.]+\.so|libpthread|ld-linux|ld-[0-9.]+\.so)")
_NOT_CODE = ("[unknown]", "[anon]", "[heap]", "[stack]")


def futex_op_waits(op: int) -> bool:
    """Whether a futex(2) op may put the caller to sleep: what the probe counts as a wait."""
    return (op & _FUTEX_CMD_MASK) in FUTEX_WAIT_OPS and (op & _FUTEX_CMD_MASK) < 0x100


def futex_op_name(op: int) -> str:
    return FUTEX_WAIT_OPS.get(op, f"op {op}")


def user_frames(stack: Stack | None) -> tuple[tuple[Frame, ...], bool]:
    """The believable frames of a frame-pointer user stack, and whether it was cut.

    Code built without frame pointers (Debian's libc) leaves a stale frame pointer behind, and the
    walk goes on through whatever it points at: the stack ends at the first address that is not
    code (no symbol, not in a mapped file), and is then marked truncated rather than shown as garbage.
    """
    if stack is None:
        return (), False
    for i, f in enumerate(stack.frames):
        if f.symbol is None and (f.module in _NOT_CODE or f.module_offset is None and not f.module.startswith("/")):
            return stack.frames[:i], True
    return stack.frames, stack.truncated


def in_c_library(frame: Frame) -> bool:
    return bool(_C_LIBRARY.match(os.path.basename(frame.module)))


def futex_caller(w: FutexWaits) -> str:
    """Who wanted the lock: the proven caller of the libc lock function, else the innermost user
    frame outside the C library, else a label saying why there is none."""
    if w.caller:
        return w.caller
    if w.caller_addr:
        return f"[unknown {w.caller_addr:#x}]"
    frames, _ = user_frames(w.stack)
    for f in frames:
        if not in_c_library(f):
            return f.text
    if w.stack is None:
        return NO_STACK_LABELS[w.stack_id] if w.stack_id in (STACK_RATE_LIMITED, STACK_OWN) else "(no user stack)"
    return "(caller not on the stack: no frame pointers)"


@dataclass(frozen=True)
class Caller:
    point: str
    count: int
    total_ns: int
    estimated_ns: int = 0  # of total_ns: contentions not drawn for a stack, shared out by the drawn ones
    spin_ns: int = 0  # on a CPU
    blocked_ns: int = -1  # the waiter blocked; -1: not known (recorded before the split was kept)
    runnable_ns: int = -1  # the waiter woken, waiting for a CPU


@dataclass(frozen=True)
class LockStat:
    name: str
    type: str
    addr: int
    contentions: int
    wait_total_ns: int  # perf's definition: contention_begin to contention_end (futex: the wait call)
    wait_max_ns: int
    wait_min_ns: int
    spin_ns: int  # on a CPU
    sleep_ns: int  # off a CPU: blocked_ns + runnable_ns
    callers: tuple[Caller, ...]
    tasks: tuple[TaskId, ...]
    owner: str = ""  # a mutex's owner when contended: "comm[pid]"
    instances: tuple[tuple[int, str, int], ...] = ()  # a lock class's heaviest locks: (address, where, wait ns)
    field: str = ""  # the struct field holding it (slab objects): the rows of one field are one class
    pid: int = 0  # futex: the process holding the futex word
    comm: str = ""
    function: str = ""  # futex: the function of its heaviest caller
    blocked_ns: int = -1  # the waiters blocked (-1: not known: a recording made before the split was kept)
    runnable_ns: int = -1  # the waiters woken, waiting for a CPU: waiting for a CPU, not for the lock
    timed_poll: bool = False  # futex: timed waits nearly all ended by their timeout (a poll, not a contended lock)
    # futex: what most of its waits were, from the calls' arguments (FUTEX_KINDS); "" not known
    futex_kind: str = ""
    # what the row gathers, to find a wait's row: kernel ((("field", f) or ("addr", a)), type); futex (tgid, uaddr)
    keys: tuple = ()

    @property
    def is_futex(self) -> bool:
        return self.type == "futex"

    @property
    def is_lock(self) -> bool:
        """Waits for a lock: every kernel row; a futex unless its waits were a poll, an event (a condition
        variable, a semaphore) or a join."""
        return not self.is_futex or (not self.timed_poll and self.futex_kind in ("", "mutex"))

    @property
    def type_text(self) -> str:
        """TYPE as the table shows it: a futex with what its waits were."""
        if not self.is_futex:
            return self.type
        kind = "poll" if self.timed_poll else self.futex_kind
        return f"futex:{kind}" if kind else "futex"

    @property
    def wait_avg_ns(self) -> float:
        return self.wait_total_ns / self.contentions if self.contentions else 0.0

    @property
    def split(self) -> bool:
        return self.blocked_ns >= 0

    @property
    def lock_wait_ns(self) -> int:
        """The time waiting for the lock itself: spinning and blocked, without the run-queue wait after
        the wakeup (all of it when the split is not known)."""
        return self.wait_total_ns - max(self.runnable_ns, 0)


SORT_KEYS = {
    "total": lambda s: s.wait_total_ns, "max": lambda s: s.wait_max_ns, "count": lambda s: s.contentions,
    "avg": lambda s: s.wait_avg_ns, "blocked": lambda s: max(s.blocked_ns, 0), "lock": lambda s: s.lock_wait_ns,
}


LOCK_KINDS = ("all", "kernel", "futex")
TIMED_POLL_SHARE = 0.9  # of a futex's timed waits ended from an interrupt: it is a poll


def lock_stats(model: Model, sort: str = "total", tasks: set[TaskId] | None = None,
               kind: str = "all") -> list[LockStat]:
    """One row per lock (kernel: address and type; futex: process and futex word), heaviest first.
    stallscope's own waits are left out (analyzer/scope.py)."""
    scope = in_scope(model, tasks)
    out = list(_kernel_rows(model, scope)) if kind in ("all", "kernel") else []
    if kind in ("all", "futex"):
        out += _futex_rows(model, scope)
    return _in_order(out, sort)


def _in_order(rows: list[LockStat], sort: str = "total") -> list[LockStat]:
    """`rows` sorted by `sort` (SORT_KEYS), the heaviest first, then by name."""
    rows.sort(key=lambda s: (-SORT_KEYS[sort](s), s.name))
    return rows


def waiters_of(model: Model, s: LockStat) -> list[tuple[TaskId, int, int]]:
    """The tasks of a lock_stat row (`s.tasks`, in its scope), each with its contentions and its wait on it (ns), the
    most waiting first."""
    keys, tasks = set(s.keys), set(s.tasks)
    by: dict[TaskId, list] = {}
    if s.is_futex:
        for w in model.futex_waits:
            if (w.tgid, w.uaddr) in keys and w.task in tasks:
                e = by.setdefault(w.task, [0, 0])
                e[0] += w.count
                e[1] += w.total_ns
    else:
        types: dict[int, str] = {}
        for w in model.lock_waits:
            if w.task not in tasks:
                continue
            typ = types.get(w.flags)
            if typ is None:
                typ = types[w.flags] = lock_type(w.flags)
            if row_key(w, typ) in keys:
                e = by.setdefault(w.task, [0, 0])
                e[0] += w.count
                e[1] += w.total_ns
    return sorted(((t, n, ns) for t, (n, ns) in by.items()), key=lambda x: (-x[2], x[0]))


# the rows of a model's locks for a choice of tasks, built once however many readers sort them (the
# export, the advice, the series and the views each ask)
@per_model
def _kernel_rows(model: Model, scope: set[TaskId] | None) -> tuple[LockStat, ...]:
    return tuple(_kernel_lock_stats(model, scope, _comm_of(model)))


@per_model
def _futex_rows(model: Model, scope: set[TaskId] | None) -> tuple[LockStat, ...]:
    return tuple(_futex_lock_stats(model, scope, _comm_of(model)))


def _comm_of(model: Model):
    leaders = _leaders(model)

    def comm_of(tgid: int) -> str:
        return leaders.get(tgid, "?")

    return comm_of


@per_model
def _leaders(model: Model) -> dict[int, str]:
    """Each process's name: its leader's (the thread whose id is the process's)."""
    out: dict[int, str] = {}
    for t in model.tasks.values():
        if t.info.task.pid == t.info.tgid:
            out.setdefault(t.info.tgid, t.info.comm)
    return out


def apportion(total: int, weights: list[int]) -> list[int]:
    """`total` split in whole units in proportion to `weights`, the shares summing to it exactly (largest
    remainders; ties to the earlier weight). All weights zero: shared as if equal."""
    if not weights:
        return []
    wsum = sum(weights)
    if wsum <= 0:
        weights, wsum = [1] * len(weights), len(weights)
    shares = [total * w // wsum for w in weights]
    left = total - sum(shares)
    if left:
        by_rest = sorted(range(len(weights)), key=lambda i: -(total * weights[i] % wsum))
        for i in by_rest[:left]:
            shares[i] += 1
    return shares


class _Callers:
    """A lock's contention points: measured where a contention was drawn for a stack walk, and the
    undrawn contentions shared among them by what each drawn one stands for (as attribution.py does for
    causes); contentions that could not be drawn keep their own label."""

    def __init__(self):
        self.drawn: dict[str, list] = {}  # point -> [count, total, spin, blocked, runnable, weight]
        self.undrawn = [0, 0, 0, 0, 0]
        self.alone: dict[str, list] = {}

    def add(self, point: str | None, label: str, count: int, total: int, spin: int, blocked: int, runnable: int,
            weighted: int, sharable: bool) -> None:
        # written out: a recording's hundreds of thousands of keys come here, nearly all undrawn
        if point:
            e = self.drawn.setdefault(point, [0, 0, 0, 0, 0, 0])
            e[5] += max(weighted - total, 0) if weighted else total
        elif sharable:
            e = self.undrawn
        else:
            e = self.alone.setdefault(label, [0, 0, 0, 0, 0])
        e[0] += count
        e[1] += total
        e[2] += spin
        e[3] += blocked
        e[4] += runnable

    def result(self, split: bool) -> tuple[Caller, ...]:
        weights = {p: e[5] for p, e in self.drawn.items()}
        if not any(weights.values()):
            weights = {p: e[1] or 1 for p, e in self.drawn.items()}
        points = list(self.drawn)
        # each figure of the undrawn shared in whole units that sum to it: a row's points add up to its row
        extra = [apportion(v, [weights[p] for p in points]) for v in self.undrawn]
        out = []
        for i, p in enumerate(points):
            e = self.drawn[p]
            out.append(Caller(p, e[0] + extra[0][i], e[1] + extra[1][i], extra[1][i], e[2] + extra[2][i],
                              e[3] + extra[3][i] if split else -1, e[4] + extra[4][i] if split else -1))
        if not self.drawn and self.undrawn[0]:
            self.alone[NO_STACK_LABELS[STACK_NOT_DRAWN]] = self.undrawn
        for label, e in self.alone.items():
            out.append(Caller(label, e[0], e[1], 0, e[2], e[3] if split else -1, e[4] if split else -1))
        return tuple(sorted(out, key=lambda c: -c.total_ns))


def _futex_lock_stats(model: Model, tasks: set[TaskId] | None, comm_of) -> list[LockStat]:
    groups: dict[tuple[int, int], dict] = {}
    for w in model.futex_waits:
        if tasks is not None and w.task not in tasks:
            continue
        g = groups.setdefault((w.tgid, w.uaddr), {"name": "", "count": 0, "total": 0, "max": 0, "min": 0,
                                                  "callers": {}, "tasks": set(), "blocked": 0, "runnable": 0,
                                                  "split": True, "timed": 0, "irq": 0, "kinds": {}, "called": 0})
        g["name"] = g["name"] or w.lock_name
        g["count"] += w.count
        g["total"] += w.total_ns
        g["max"] = max(g["max"], w.max_ns)
        g["min"] = min(g["min"], w.min_ns) if g["min"] and w.min_ns else (g["min"] or w.min_ns)
        g["tasks"].add(w.task)
        g["split"] = g["split"] and w.split
        g["blocked"] += max(w.blocked_ns, 0)
        g["runnable"] += max(w.runnable_ns, 0)
        if w.flags & FUTEX_F_TIMEOUT:
            g["timed"] += w.count
            g["irq"] += w.woken_irq
        for kind, bit in FUTEX_KINDS.items():
            if w.flags & bit:
                g["kinds"][kind] = g["kinds"].get(kind, 0) + w.count
        if w.caller_addr:  # the uprobe saw it called from pthread_mutex_lock / pthread_rwlock_*lock
            g["called"] += w.count
        c = g["callers"].setdefault(futex_caller(w), [0, 0, 0, 0])
        c[0] += w.count
        c[1] += w.total_ns
        c[2] += max(w.blocked_ns, 0)
        c[3] += max(w.runnable_ns, 0)
    out = []
    for (tgid, uaddr), g in groups.items():
        comm = comm_of(tgid)
        split = g["split"]
        callers = tuple(Caller(p, c, t, 0, t - b - r if split else 0, b if split else -1, r if split else -1)
                        for p, (c, t, b, r) in sorted(g["callers"].items(), key=lambda kv: -kv[1][1]))
        top = callers[0].point if callers and not callers[0].point.startswith(("(", "[")) else ""
        name = f"{g['name'] or f'futex {uaddr:#x}'} ({comm}[{tgid}])"
        sleep = g["blocked"] + g["runnable"] if split else g["total"]
        kinds = dict(g["kinds"])
        kinds["mutex"] = kinds.get("mutex", 0) + g["called"]
        kind, n = max(kinds.items(), key=lambda kv: kv[1])
        futex_kind = kind if n > FUTEX_KIND_SHARE * g["count"] else ""
        out.append(LockStat(name, "futex", uaddr, g["count"], g["total"], g["max"], g["min"], g["total"] - sleep,
                            sleep, callers, tuple(sorted(g["tasks"])), pid=tgid, comm=comm,
                            function=top.split("+")[0], blocked_ns=g["blocked"] if split else -1,
                            runnable_ns=g["runnable"] if split else -1,
                            timed_poll=g["count"] > 0 and g["timed"] >= TIMED_POLL_SHARE * g["count"]
                            and g["irq"] >= TIMED_POLL_SHARE * g["timed"], futex_kind=futex_kind,
                            keys=((tgid, uaddr),)))
    return out


def kernel_groups(waits, tasks: set[TaskId] | None) -> dict[tuple, list]:
    """A model's kernel lock records (`waits`) of these tasks by lock_stat row (`row_key`), each row's sums as
    py_kernel_groups makes them: in C where it is built (analyzer/lockgroups.c: a 10-minute hackbench recording's
    595,000 records in 0.3 s rather than 0.8-1.1), else in Python; the same either way (tests/test_lockgroups.py)."""
    if _lockgroups is not None:
        groups = _lockgroups.lock_groups(waits, tasks, LockWaits, {}, lock_type, {}, _point_of, SHARABLE,
                                         NO_STACK_LABELS, LOST_STACK, _Callers)
        if groups is not None:  # None: records it declines (not LockWaits, or numbers beyond 64 bits)
            return groups
    return py_kernel_groups(waits, tasks)


def _point_of(stack: Stack) -> str | None:
    """A walked stack's contention point (None: no frame), as a row's callers take it."""
    return contention_point(stack) if stack.frames else None


def py_kernel_groups(waits, tasks: set[TaskId] | None) -> dict[tuple, list]:
    """kernel_groups in Python."""
    # per group: [named_by, count, total, max, min, spin, sleep, callers, tasks, owner, blocked, runnable,
    # split, addrs]; lists and locals: a recording's hundreds of thousands of (task, lock, stack) rows
    groups: dict[tuple, list] = {}
    types: dict[int, str] = {}  # by flags
    points: dict[int, str | None] = {}  # by stack id: a stack's contention point, found once
    for w in waits:
        if tasks is not None and w.task not in tasks:
            continue
        typ = types.get(w.flags)
        if typ is None:
            typ = types[w.flags] = lock_type(w.flags)
        key = row_key(w, typ)
        g = groups.get(key)
        if g is None:
            g = groups[key] = [None, 0, 0, 0, 0, 0, 0, _Callers(), set(), "", 0, 0, True, {}]
        stack = w.stack
        # named by its heaviest wait with a stack (a stackless one names only by address)
        best = g[0]
        if best is None or (stack is not None and (best.stack is None or w.total_ns > best.total_ns)):
            g[0] = w
        g[1] += w.count
        g[2] += w.total_ns
        if w.max_ns > g[3]:
            g[3] = w.max_ns
        low = w.min_ns  # the shortest of those that have one (0: none)
        if low and (not g[4] or low < g[4]):
            g[4] = low
        g[5] += w.spin_ns
        g[6] += w.sleep_ns
        blocked, runnable = w.blocked_ns, w.runnable_ns
        if blocked < 0:
            g[12] = False
            blocked = 0
        if runnable < 0:
            runnable = 0
        g[10] += blocked
        g[11] += runnable
        g[8].add(w.task)
        a = g[13].get(w.addr)
        if a is None:
            a = g[13][w.addr] = ["", 0]
        a[0] = a[0] or w.object
        a[1] += w.total_ns
        if stack is None:
            point = None
        elif w.stack_id in points:
            point = points[w.stack_id]
        else:
            point = points[w.stack_id] = _point_of(stack)
        if not point and (stack is not None or w.stack_id in SHARABLE):  # undrawn, shared out: _Callers.add's
            u = g[7].undrawn  # most common case, written out (nearly every key at the budget's last level)
            u[0] += w.count
            u[1] += w.total_ns
            u[2] += w.spin_ns
            u[3] += blocked
            u[4] += runnable
        else:
            g[7].add(point, NO_STACK_LABELS.get(w.stack_id, LOST_STACK), w.count, w.total_ns, w.spin_ns, blocked, runnable,
                     w.weighted_ns, stack is not None or w.stack_id in SHARABLE)
        if w.owner_pid:
            g[9] = f"{w.owner_comm}[{w.owner_pid}]"
    return groups


def _kernel_lock_stats(model: Model, tasks: set[TaskId] | None, comm_of, waits=None) -> list[LockStat]:
    """One row per lock, as lock_stat has one per class: the locks held by one struct field (10,000
    inodes' i_rwsem) are one row, with its heaviest instances; the others one row per address. Of `waits`, the
    model's lock records of some types (None: all of them): a row's records are all of its type."""
    node_caches = list_lock_caches(model)
    groups = kernel_groups(model.lock_waits if waits is None else waits, tasks)
    out = []
    for key, (named_by, count, total, longest, shortest, spin, sleep, callers, waiters, owner, blocked, runnable,
              split, addrs) in groups.items():
        typ = key[1]
        hottest = tuple((addr, where, ns) for addr, (where, ns) in
                        sorted(addrs.items(), key=lambda kv: -kv[1][1])[:3])
        name = lock_name(named_by, comm_of, node_caches)
        if len(addrs) == 1 and hottest[0][1] and named_by.field:
            name += f" ({hottest[0][1]})"  # one lock: where it is, a directory's path
        out.append(LockStat(name, typ, hottest[0][0] if len(addrs) == 1 else 0, count, total, longest, shortest,
                            spin, sleep, callers.result(split), tuple(sorted(waiters)), owner, hottest,
                            named_by.field, blocked_ns=blocked if split else -1,
                            runnable_ns=runnable if split else -1, keys=(key,)))
    return _merge_same_name(_named_by_address(out))


def _named_by_address(rows: list[LockStat]) -> list[LockStat]:
    """A lock known only by its address in one row (no variable, no walked stack: a writer of file_rwsem in a
    second when none of its contentions was walked) takes the name another row of the same address and kind
    (sleeping or spinning) has (its readers', "file_rwsem (file locks)"): one address, one lock, however its
    sides were contended. A spinning lock and a sleeping one at one address are two locks (its memory freed and
    used again), and the sleeping locks' rows alone name theirs as the whole table does (locks_by_site)."""
    names = {(s.addr, s.type in _SLEEPING): s.name for s in rows if s.addr and s.name != f"{s.addr:#x}"}
    return [replace(s, name=names[(s.addr, s.type in _SLEEPING)])
            if s.addr and s.name == f"{s.addr:#x}" and (s.addr, s.type in _SLEEPING) in names else s for s in rows]


# the sleeping locks' lock_stat types, as a cause names their kind ("rwsem contention: ...")
_SLEEPING = {"rwsem:R": "rwsem", "rwsem:W": "rwsem", "percpu-rwsem:R": "rwsem", "percpu-rwsem:W": "rwsem",
             "mutex": "mutex", "rt-mutex": "mutex", "semaphore": "semaphore"}
# struct fields whose name alone does not say which lock: named with the struct holding them
_PLAIN_FIELDS = frozenset({"rwsem", "sem", "rw_sem", "lock", "mutex", "__lock"})


@dataclass(frozen=True)
class SiteLock:
    """The sleeping lock the contention tracepoints saw wanted at a call site, and the cause of a wait whose
    stack starts there."""

    cause: Cause
    lock: str  # its lock_stat row's name
    type: str


def field_lock_name(field: str) -> str:
    """A lock in a struct field as a cause names it, one name for every struct that holds it:
    `ext4_inode_info.vfs_inode.i_rwsem` -> `inode i_rwsem` (the cause table's name), `...i_data.i_mmap_rwsem` ->
    `i_mmap_rwsem`, `anon_vma.rwsem` -> `anon_vma->rwsem`."""
    path = field.split(".")
    if path[-1] == "i_rwsem":
        return "inode i_rwsem"
    if path[-1] in _PLAIN_FIELDS and len(path) > 1:
        return f"{path[-2]}->{path[-1]}"
    return path[-1]


@per_model
def locks_by_site(model: Model) -> dict[str, SiteLock]:
    """The sleeping kernel locks the contention tracepoints saw wanted, by call site (`sym+0xoff`, as lock_stat's
    contention points; the lock waited for most there). A wait whose stack, walked at the switch-in, starts at one
    of them slept on that lock: the lock's own frames are scheduler text, left out of such a walk. Made from the
    sleeping locks' records alone unless the whole table is made already: a live ranking asks for it each interval
    that has a stack no rule names, beside hackbench's 1,000-3,000 spinning lock records, whose rows took it 4.5-15
    ms. The same rows either way (a test compares): a row's records are all of its type, rows merge only with rows
    of their type (_merge_same_name), and take a name only from rows of their kind (_named_by_address)."""
    out: dict[str, SiteLock] = {}
    most: dict[str, int] = {}
    scope = in_scope(model, None)
    if memoised(_kernel_rows, model, scope) is not None:
        rows = lock_stats(model, kind="kernel")
    else:
        rows = _in_order(_kernel_lock_stats(model, scope, _comm_of(model), _sleeping_waits(model)))
    for s in rows:
        kind = _SLEEPING.get(s.type)
        if kind is None:  # a spinning lock's waiter never leaves its CPU for it
            continue
        for c in s.callers:
            if "+" not in c.point or c.total_ns <= most.get(c.point, -1):
                continue
            most[c.point] = c.total_ns
            function = bare(c.point.split("+", 1)[0])
            if s.field:
                lock = field_lock_name(s.field)
            elif s.name.startswith("mmap_lock ("):
                lock = "mmap_lock"  # one cause, whichever process's
            elif s.type.startswith("percpu-rwsem"):
                lock = percpu_rwsem_of(function) or s.name
            else:
                lock = bare(s.name)  # a static lock's symbol, or the caller naming it (`do_syslog.part.0`)
            out[c.point] = SiteLock(Cause(f"{kind} contention: {lock}", BLOCKER, c.point, matched=False), s.name,
                                    s.type)
    return out


def _sleeping_waits(model: Model) -> tuple[LockWaits, ...]:
    """The model's kernel lock records of sleeping locks (_SLEEPING), in its order: folded from their records alone
    where the model's lock table is not folded yet (LockFolded)."""
    waits = model.lock_waits
    if isinstance(waits, LockFolded):
        return waits.only(_sleeping)
    return tuple(w for w in waits if _sleeping(w.flags))


def _sleeping(flags: int) -> bool:
    """A lock of these flags sleeps (_SLEEPING)."""
    kind = _KIND_OF.get(flags)
    if kind is None:
        kind = _KIND_OF[flags] = lock_type(flags) in _SLEEPING
    return kind


_KIND_OF: dict[int, bool] = {}  # lock flags -> a sleeping lock's (_sleeping)


def _merge_same_name(rows: list[LockStat]) -> list[LockStat]:
    """Locks at several addresses that read the same (each CPU's rq->__lock, the locks one function
    contends on in many objects) are one class, as lock_stat has one row per class: one row, with its
    heaviest instances."""
    by: dict[tuple[str, str], list[LockStat]] = {}
    for r in rows:
        by.setdefault((r.name, r.type), []).append(r)
    out = []
    for same in by.values():
        if len(same) == 1:
            out.append(same[0])
            continue
        split = all(r.split for r in same)
        callers: dict[str, list[int]] = {}
        for r in same:
            for c in r.callers:
                e = callers.setdefault(c.point, [0, 0, 0, 0, 0, 0])
                for i, v in enumerate((c.count, c.total_ns, c.estimated_ns, c.spin_ns, max(c.blocked_ns, 0),
                                       max(c.runnable_ns, 0))):
                    e[i] += v
        instances = sorted(((a, w, ns) for r in same for a, w, ns in
                            (r.instances or ((r.addr, "", r.wait_total_ns),))), key=lambda x: -x[2])[:3]
        mins = [r.wait_min_ns for r in same if r.wait_min_ns]
        first = same[0]
        out.append(LockStat(
            first.name, first.type, 0, sum(r.contentions for r in same), sum(r.wait_total_ns for r in same),
            max(r.wait_max_ns for r in same), min(mins) if mins else 0, sum(r.spin_ns for r in same),
            sum(r.sleep_ns for r in same),
            tuple(Caller(p, c, t, e, sp, b if split else -1, rn if split else -1)
                  for p, (c, t, e, sp, b, rn) in sorted(callers.items(), key=lambda kv: -kv[1][1])),
            tuple(sorted({t for r in same for t in r.tasks})), next((r.owner for r in same if r.owner), ""),
            tuple(instances), first.field,
            blocked_ns=sum(r.blocked_ns for r in same) if split else -1,
            runnable_ns=sum(r.runnable_ns for r in same) if split else -1,
            keys=tuple(k for r in same for k in r.keys)))
    return out
