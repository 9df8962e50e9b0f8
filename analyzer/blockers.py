"""Blockers: off-CPU time grouped by cause, ranked.

A wait's cause comes from the cause table (analyzer/causes.py, causes.toml): the highest-priority
rule matching a frame of its kernel stack (and, for some, its user stack and state). Causes of class
"idle" (a task with nothing to do: an event loop in epoll, a parked thread pool, a kernel thread's
main loop) rank after every blocker, so a quiet machine's idle waits never lead.

Stack walks are rate-limited in the kernel; a task's waits whose stacks were
not sampled are shared among that task's sampled causes in proportion to their
sampled time (an estimate, kept apart in `estimated_ns`). Per-task totals are
always exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stallscope.analyzer.causes import BLOCKER, CPU, IDLE, Cause, CauseTable, default_table
from stallscope.analyzer.model import Model, StackWait
from stallscope.analyzer.sample import Stack, TaskId

# Reserved stack ids (bpf/sched.h): why a wait has no stack.
STACK_NONE, STACK_SHORT, STACK_RATE_LIMITED, STACK_FAILED, STACK_OWN, STACK_ID_MIN = 0, 1, 2, 3, 4, 16
NO_STACK_LABELS = {
    STACK_NONE: "(kernel stacks off)",
    STACK_SHORT: "(wait shorter than --min-stack-wait)",
    STACK_RATE_LIMITED: "(stack not sampled)",
    STACK_FAILED: "(stack walk failed)",
    STACK_OWN: "(stallscope's own wait: no stack walked)",
}
LOST_STACK = "(stack lost: map full)"


def no_stack_cause(stack_id: int) -> Cause:
    return Cause(NO_STACK_LABELS.get(stack_id, LOST_STACK), BLOCKER, "", matched=False)


def classify_wait(w: StackWait, table: CauseTable | None = None) -> Cause:
    cause = (table or default_table()).classify(w.kstack, w.ustack, w.state)
    return cause if cause is not None else no_stack_cause(w.kstack_id)


def wait_cause(w: StackWait, table: CauseTable | None = None) -> str:
    return classify_wait(w, table).name


@dataclass(frozen=True)
class Blocker:
    cause: str
    total_ns: int  # measured on sampled stacks plus the estimated share of unsampled waits
    count: int
    max_ns: int
    share_pct: float  # of all off-CPU time of the class (blockers, or idle waits) in the window
    tasks: tuple[TaskId, ...]
    stack: Stack | None  # the heaviest stack of this cause
    estimated_ns: int = 0  # the part of total_ns attributed from waits whose stack was not sampled
    cls: str = BLOCKER  # "blocker", "cpu" (waiting for a CPU: the run queue) or "idle"
    frame: str = ""  # the frame the cause table matched (or that names an unmatched wait)
    matched: bool = True  # a rule of the cause table matched
    # latency of single waits: log2-bucket upper bounds (never above max_ns) of the waits whose length
    # was kept (every walked or unwalked wait, not the estimated shares); {} when none was
    latency: dict = field(default_factory=dict)

    @property
    def p99_ns(self) -> int:
        return self.latency.get("p99_ns", 0)


FUTEX_TIMEOUTS = "Waiting on a futex until its timeout"
_CONTENDED_FUTEX = "Userspace lock contention"


def woken_by_the_clock(model: Model) -> set[TaskId]:
    """Tasks whose waits were nearly all ended by a timer or an interrupt, none by another task: a
    futex wait that ends by its timeout is a poll (an idle runtime's park, `notetsleep`), not a lock."""
    from stallscope.analyzer.wakers import waker_context

    by: dict[TaskId, list[int]] = {}
    for w in model.wakeups:
        e = by.setdefault(w.task, [0, 0])
        e[0 if waker_context(w.waker.pid, w.waker_stack, w.in_interrupt) == "task" else 1] += w.total_ns
    return {t for t, (task_ns, clock_ns) in by.items() if clock_ns and clock_ns >= 9 * task_ns}


def _attributed(model: Model, tasks: set[TaskId] | None, table: CauseTable | None):
    """(cause, task, ns, count, max, estimated_ns, stack) rows, with unsampled waits shared out per task."""
    rows = []
    polling = woken_by_the_clock(model)
    if tasks is None:  # the recorder's own waits are not the machine's blockers
        tasks = recorded_tasks(model)
    unsampled: dict[TaskId, list[int]] = {}
    sampled_by_task: dict[TaskId, dict[Cause, int]] = {}
    for w in model.waits:
        if tasks is not None and w.task not in tasks:
            continue
        if w.kstack is None and w.kstack_id == STACK_RATE_LIMITED:
            u = unsampled.setdefault(w.task, [0, 0])
            u[0] += w.total_ns
            u[1] += w.count
            continue
        cause = classify_wait(w, table)
        if cause.name == _CONTENDED_FUTEX and w.task in polling:
            cause = Cause(FUTEX_TIMEOUTS, IDLE, cause.frame)
        rows.append((cause, w.task, w.total_ns, w.count, w.max_ns, 0, w.kstack, w.hist))
        if w.kstack is not None:
            by = sampled_by_task.setdefault(w.task, {})
            by[cause] = by.get(cause, 0) + w.total_ns
    for task, (ns, count) in unsampled.items():
        by = sampled_by_task.get(task)
        if not by:
            rows.append((no_stack_cause(STACK_RATE_LIMITED), task, ns, count, 0, ns, None, ()))
            continue
        total = sum(by.values())
        for cause, part in by.items():
            share = ns * part // total
            rows.append((cause, task, share, round(count * part / total), 0, share, None, ()))
    return rows


WAITING_FOR_CPU = Cause("Waiting for CPU", CPU, "", True)


def recorded_tasks(model: Model) -> set[TaskId] | None:
    """Every task but stallscope's own (meta.options.stallscope_pid); None when there is nothing to leave out."""
    own = model.meta.options.get("stallscope_pid")
    if not own:
        return None
    return {tid for tid, t in model.tasks.items() if t.info.tgid != own}


def _cpu_rows(model: Model, tasks: set[TaskId] | None):
    """Run-queue wait as a cause of its own (the CPU side, kept apart from blocked time)."""
    if tasks is None:
        tasks = recorded_tasks(model)
    for t in model.tasks.values():
        if t.runq_wait_ns and (tasks is None or t.task in tasks):
            yield (WAITING_FOR_CPU, t.task, t.runq_wait_ns, t.runq_count, t.runq_max_ns, 0, None, t.runq_hist)


SORTS = {"total": lambda b: b.total_ns, "max": lambda b: b.max_ns, "count": lambda b: b.count,
         "p99": lambda b: b.p99_ns}


def percentiles(hist: dict[int, int], longest: int, qs=(0.5, 0.9, 0.99)) -> dict[str, int]:
    """From log2(ns) buckets: each quantile's bucket upper bound, never above the longest wait."""
    total = sum(hist.values())
    if not total:
        return {}
    out = {}
    for q in qs:
        seen = 0
        for slot in sorted(hist):
            seen += hist[slot]
            if seen >= q * total:
                bound = 2 ** (slot + 1)
                out[f"p{round(q * 100)}_ns"] = min(bound, longest) if longest else bound
                break
    return out


def rank_blockers(model: Model, tasks: set[TaskId] | None = None, table: CauseTable | None = None,
                  include_idle: bool = True, include_cpu: bool = True, sort: str = "total") -> list[Blocker]:
    """Time tasks waited, by cause: blockers (blocked causes and, unless left out, "Waiting for CPU")
    heaviest first, then (unless left out) idle waits heaviest first. `share_pct` is within a class."""
    groups: dict[str, dict] = {}
    rows = _attributed(model, tasks, table)
    if include_cpu:
        rows += list(_cpu_rows(model, tasks))
    for cause, task, ns, count, mx, est, stack, hist in rows:
        g = groups.setdefault(cause.name, {"ns": 0, "count": 0, "max": 0, "est": 0, "tasks": set(), "stacks": {},
                                           "cause": cause, "hist": {}})
        for slot, c in enumerate(hist):
            if c:
                g["hist"][slot] = g["hist"].get(slot, 0) + c
        g["ns"] += ns
        g["count"] += count
        g["max"] = max(g["max"], mx)
        g["est"] += est
        g["tasks"].add(task)
        if stack is not None:
            g["stacks"][stack.id] = (g["stacks"].get(stack.id, (0, stack))[0] + ns, stack)
    totals = {cls: sum(g["ns"] for g in groups.values() if g["cause"].cls == cls) or 1 for cls in (BLOCKER, IDLE, CPU)}
    out = []
    for name, g in groups.items():
        c = g["cause"]
        if c.cls == IDLE and not include_idle:
            continue
        top = max(g["stacks"].values(), key=lambda v: v[0])[1] if g["stacks"] else None
        out.append(Blocker(name, g["ns"], g["count"], g["max"], 100.0 * g["ns"] / totals[c.cls],
                           tuple(sorted(g["tasks"])), top, g["est"], c.cls, c.frame, c.matched,
                           percentiles(g["hist"], g["max"])))
    out.sort(key=lambda b: (b.cls == IDLE, -SORTS[sort](b), b.cause))
    return out


def causes_by_task(model: Model, tasks: set[TaskId] | None = None,
                   table: CauseTable | None = None) -> dict[TaskId, list[tuple[Cause, int]]]:
    """Each task's waiting time by cause, heaviest first: blocked causes (idle ones included, in their
    place by time) and "Waiting for CPU". One pass over the waits for all tasks."""
    scope = tasks if tasks is not None else set(model.tasks)
    by: dict[TaskId, dict[str, list]] = {}
    for cause, task, ns, *_rest in _attributed(model, scope, table) + list(_cpu_rows(model, scope)):
        e = by.setdefault(task, {}).setdefault(cause.name, [cause, 0])
        e[1] += ns
    return {task: sorted(((c, ns) for c, ns in causes.values()), key=lambda kv: (-kv[1], kv[0].name))
            for task, causes in by.items()}


def task_causes(model: Model, task: TaskId, table: CauseTable | None = None) -> list[tuple[Cause, int]]:
    return causes_by_task(model, {task}, table).get(task, [])


def blocked_ns_by_task(model: Model, tasks: set[TaskId] | None = None,
                       table: CauseTable | None = None) -> dict[TaskId, tuple[int, int]]:
    """Each task's off-CPU time and waits outside idle causes: what held it up."""
    out: dict[TaskId, tuple[int, int]] = {}
    for cause, task, ns, count, *_rest in _attributed(model, tasks, table):
        if cause.cls != IDLE:
            t, n = out.get(task, (0, 0))
            out[task] = (t + ns, n + count)
    return out


@dataclass(frozen=True)
class ProcessCauses:
    tgid: int
    comm: str
    total_ns: int  # off-CPU time of the causes kept (blockers, and idle waits when asked)
    max_ns: int
    causes: tuple[tuple[str, int, int], ...]  # (cause, total_ns, max_ns), heaviest first


def process_causes(model: Model, include_idle: bool = False, table: CauseTable | None = None,
                   by_cgroup: bool = False, by_thread: bool = False) -> list[ProcessCauses]:
    """LatencyTOP's second pane: each process with its own causes, heaviest process first; with
    `by_cgroup`, each cgroup (`comm` is then the cgroup's path, `tgid` 0)."""
    by: dict = {}
    for cause, task, ns, _count, mx, _est, _stack, _hist in _attributed(model, None, table):
        if cause.cls == IDLE and not include_idle:
            continue
        t = model.tasks.get(task)
        tgid = t.info.tgid if t else task.pid
        key = model.cgroups.get(tgid, "(unknown)") if by_cgroup else task.pid if by_thread else tgid
        e = by.setdefault(key, {}).setdefault(cause.name, [0, 0])
        e[0] += ns
        e[1] = max(e[1], mx)

    def comm(tgid: int) -> str:
        if by_thread:
            return next((t.info.comm for tid, t in model.tasks.items() if tid.pid == tgid), "?")
        for t in model.tasks.values():
            if t.info.tgid == tgid and (t.info.task.pid == tgid or t.info.comm):
                return t.info.comm
        return "?"

    out = [ProcessCauses(0 if by_cgroup else key, key if by_cgroup else comm(key), sum(v[0] for v in causes.values()),
                         max(v[1] for v in causes.values()),
                         tuple(sorted(((c, v[0], v[1]) for c, v in causes.items()), key=lambda x: (-x[1], x[0]))))
           for key, causes in by.items()]
    out.sort(key=lambda p: (-p.total_ns, p.tgid, p.comm))
    return out


@dataclass(frozen=True)
class HeldUpBy:
    """Who held a blocker's tasks up: the wakers that ended their waits (for blocked causes), the
    owners of the mutexes they waited on, the CPU hogs they waited behind (for Waiting for CPU)."""

    wakers: tuple[tuple[str, int, int, Stack | None], ...] = ()  # (label, count, total_ns, waker stack)
    owners: tuple[str, ...] = ()  # "comm[pid]"
    hogs: tuple[tuple[str, int], ...] = ()  # ("comm[pid]", involuntary switches)


def held_up_by(model: Model, b: Blocker, n: int = 3) -> HeldUpBy:
    from stallscope.analyzer.wakers import waker_context, waker_label

    tasks = set(b.tasks)
    if b.cls == CPU:  # the threads preempted most were running when the scheduler switched
        mine = recorded_tasks(model)
        others = [t for t in model.tasks.values() if t.involuntary_switches and (mine is None or t.task in mine)
                  and not (len(tasks) == 1 and t.task in tasks)]
        others.sort(key=lambda t: -t.involuntary_switches)
        return HeldUpBy(hogs=tuple((f"{t.info.comm}[{t.task.pid}]", t.involuntary_switches) for t in others[:n]))
    by: dict[tuple, list] = {}
    for w in model.wakeups:
        if w.task not in tasks:
            continue
        ctx = waker_context(w.waker.pid, w.waker_stack, w.in_interrupt)
        key = (ctx, w.waker.pid if ctx == "task" else 0)
        e = by.setdefault(key, [waker_label(w.waker.pid, w.waker_comm, w.waker_stack, w.in_interrupt), 0, 0, None])
        e[1] += w.count
        e[2] += w.total_ns
        e[3] = e[3] or w.waker_stack
    wakers = sorted(by.values(), key=lambda e: -e[2])[:n]
    owners = sorted({f"{lw.owner_comm}[{lw.owner_pid}]" for lw in model.lock_waits
                     if lw.task in tasks and lw.owner_pid})
    return HeldUpBy(wakers=tuple(tuple(e) for e in wakers), owners=tuple(owners[:n]))
