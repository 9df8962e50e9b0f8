"""Blockers: off-CPU time grouped by cause, ranked.

Until the cause table lands, a wait's cause is the innermost meaningful frame
of its kernel stack: the first frame that is not part of the scheduler's own
sleeping machinery (LatencyTOP's fallback too).

Stack walks are rate-limited in the kernel; a task's waits whose stacks were
not sampled are shared among that task's sampled causes in proportion to their
sampled time (an estimate, kept apart in `estimated_ns`). Per-task totals are
always exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.model import Model, StackWait
from stallscope.analyzer.sample import Stack, TaskId

# Frames that say *how* a task sleeps, not *why*.
_SLEEP_MACHINERY = (
    "__schedule", "schedule", "preempt_schedule", "io_schedule", "__cond_resched", "schedule_timeout",
    "schedule_hrtimeout", "schedule_preempt_disabled", "do_task_dead", "bit_wait", "out_of_line_wait_on_bit",
    "__wait_on_bit", "wait_woken", "__wait_event", "__wait_for_common", "wait_for_completion",
    "finish_task_switch", "__switch_to", "__traceiter_", "__bpf_trace_", "bpf_trace_run",
)

# Reserved stack ids (bpf/sched.h): why a wait has no stack.
STACK_NONE, STACK_SHORT, STACK_RATE_LIMITED, STACK_FAILED, STACK_ID_MIN = 0, 1, 2, 3, 16
NO_STACK_LABELS = {
    STACK_NONE: "(kernel stacks off)",
    STACK_SHORT: "(wait shorter than --min-stack-wait)",
    STACK_RATE_LIMITED: "(stack not sampled)",
    STACK_FAILED: "(stack walk failed)",
}
LOST_STACK = "(stack lost: map full)"


def innermost_cause(stack: Stack | None, stack_id: int = -1) -> str:
    if stack is None or not stack.frames:
        if stack_id in NO_STACK_LABELS:
            return NO_STACK_LABELS[stack_id]
        return LOST_STACK
    for f in stack.frames:
        name = f.symbol or ""
        if not name or name.startswith(_SLEEP_MACHINERY):
            continue
        return name
    f = stack.frames[0]
    return f.symbol or f.text


def wait_cause(w: StackWait) -> str:
    return innermost_cause(w.kstack, w.kstack_id)


@dataclass(frozen=True)
class Blocker:
    cause: str
    total_ns: int  # measured on sampled stacks plus the estimated share of unsampled waits
    count: int
    max_ns: int
    share_pct: float
    tasks: tuple[TaskId, ...]
    stack: Stack | None  # the heaviest stack of this cause
    estimated_ns: int = 0  # the part of total_ns attributed from waits whose stack was not sampled


def _attributed(model: Model, tasks: set[TaskId] | None):
    """(cause, task, ns, count, max, estimated_ns, stack) rows, with unsampled waits shared out per task."""
    rows = []
    unsampled: dict[TaskId, list[int]] = {}
    sampled_by_task: dict[TaskId, dict[str, int]] = {}
    for w in model.waits:
        if tasks is not None and w.task not in tasks:
            continue
        if w.kstack is None and w.kstack_id == STACK_RATE_LIMITED:
            u = unsampled.setdefault(w.task, [0, 0])
            u[0] += w.total_ns
            u[1] += w.count
            continue
        cause = wait_cause(w)
        rows.append((cause, w.task, w.total_ns, w.count, w.max_ns, 0, w.kstack))
        if w.kstack is not None:
            by = sampled_by_task.setdefault(w.task, {})
            by[cause] = by.get(cause, 0) + w.total_ns
    for task, (ns, count) in unsampled.items():
        by = sampled_by_task.get(task)
        if not by:
            rows.append((NO_STACK_LABELS[STACK_RATE_LIMITED], task, ns, count, 0, ns, None))
            continue
        total = sum(by.values())
        for cause, part in by.items():
            share = ns * part // total
            rows.append((cause, task, share, round(count * part / total), 0, share, None))
    return rows


def rank_blockers(model: Model, tasks: set[TaskId] | None = None) -> list[Blocker]:
    """Off-CPU time by cause, heaviest first; share of the window's total off-CPU time."""
    groups: dict[str, dict] = {}
    for cause, task, ns, count, mx, est, stack in _attributed(model, tasks):
        g = groups.setdefault(cause, {"ns": 0, "count": 0, "max": 0, "est": 0, "tasks": set(), "stacks": {}})
        g["ns"] += ns
        g["count"] += count
        g["max"] = max(g["max"], mx)
        g["est"] += est
        g["tasks"].add(task)
        if stack is not None:
            g["stacks"][stack.id] = (g["stacks"].get(stack.id, (0, stack))[0] + ns, stack)
    total = sum(g["ns"] for g in groups.values()) or 1
    out = []
    for cause, g in groups.items():
        top = max(g["stacks"].values(), key=lambda v: v[0])[1] if g["stacks"] else None
        out.append(Blocker(cause, g["ns"], g["count"], g["max"], 100.0 * g["ns"] / total,
                           tuple(sorted(g["tasks"])), top, g["est"]))
    out.sort(key=lambda b: (-b.total_ns, b.cause))
    return out


def task_causes(model: Model, task: TaskId) -> list[tuple[str, int]]:
    by: dict[str, int] = {}
    for cause, _task, ns, *_rest in _attributed(model, {task}):
        by[cause] = by.get(cause, 0) + ns
    return sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))
