"""Blockers: off-CPU time grouped by cause, ranked.

Until the cause table lands, a wait's cause is the innermost meaningful frame
of its kernel stack: the first frame that is not part of the scheduler's own
sleeping machinery (LatencyTOP's fallback too).
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

NO_STACK = "(stack not collected)"


def innermost_cause(stack: Stack | None) -> str:
    if stack is None or not stack.frames:
        return NO_STACK
    for f in stack.frames:
        name = f.symbol or ""
        if not name or name.startswith(_SLEEP_MACHINERY):
            continue
        return name
    f = stack.frames[0]
    return f.symbol or f.text


@dataclass(frozen=True)
class Blocker:
    cause: str
    total_ns: int
    count: int
    max_ns: int
    share_pct: float
    tasks: tuple[TaskId, ...]
    stack: Stack | None  # the heaviest stack of this cause


def rank_blockers(model: Model, tasks: set[TaskId] | None = None) -> list[Blocker]:
    """Off-CPU time by cause, heaviest first; share of the window's total off-CPU time."""
    groups: dict[str, list] = {}
    for w in model.waits:
        if tasks is not None and w.task not in tasks:
            continue
        cause = innermost_cause(w.kstack)
        g = groups.setdefault(cause, [0, 0, 0, set(), {}])
        g[0] += w.total_ns
        g[1] += w.count
        g[2] = max(g[2], w.max_ns)
        g[3].add(w.task)
        sid = w.kstack.id if w.kstack else 0
        g[4][sid] = g[4].get(sid, 0) + w.total_ns
    total = sum(g[0] for g in groups.values()) or 1
    out = []
    for cause, (tot, cnt, mx, ts, by_stack) in groups.items():
        top = max(by_stack, key=by_stack.get)
        stack = next((w.kstack for w in model.waits if w.kstack and w.kstack.id == top), None)
        out.append(Blocker(cause, tot, cnt, mx, 100.0 * tot / total, tuple(sorted(ts)), stack))
    out.sort(key=lambda b: (-b.total_ns, b.cause))
    return out


def task_causes(waits: list[StackWait]) -> list[tuple[str, int]]:
    by: dict[str, int] = {}
    for w in waits:
        c = innermost_cause(w.kstack)
        by[c] = by.get(c, 0) + w.total_ns
    return sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))
