"""Stacks with their time, for flame graphs: off-CPU waits with the cause each part of them goes to,
and on-CPU samples with their sampled time. Pure functions over the model.

Off-CPU: `comm; user frames; kernel frames` outermost first, the time of the tasks a report shows
(every task but stallscope's own) charged to the window, split as the attribution splits it
(analyzer/attribution.py): a wait drawn for a stack walk under its stack; one that was not, under its
task and user stack with its cause as the leaf (its evidence, or the share of its stratum's drawn causes
it is estimated to have); each task's run-queue wait as `comm; Waiting for CPU`. So the time under a
cause equals that cause's total in the blocker ranking, and the time of the whole graph, idle waits
left out, is the one denominator of every share.

On-CPU: `comm; user frames; kernel frames` of each sample, valued by the samples' periods (ns).
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.attribution import idle_input_name, long_input_cause, split_waits
from stallscope.analyzer.blockers import WAITING_FOR_CPU, cpu_parts
from stallscope.analyzer.causes import IDLE, CauseTable
from stallscope.analyzer.export import stack_texts
from stallscope.analyzer.model import Model
from stallscope.analyzer.oncpu import selected_samples
from stallscope.analyzer.sample import TaskId
from stallscope.analyzer.scope import in_scope
from stallscope.analyzer.untrusted import printable


@dataclass(frozen=True)
class FoldedStack:
    frames: tuple[str, ...]  # outermost first
    value_ns: float
    cause: str = ""  # off-CPU: the cause this time goes to
    cls: str = ""  # ... and its class: blocker, cpu, idle


def _comm(model: Model, task: TaskId, fallback: str = "?") -> str:
    t = model.tasks.get(task)
    comm = t.info.comm if t and t.info.comm != "?" else fallback
    return printable(comm) or "?"


def offcpu_stacks(model: Model, tasks: set[TaskId] | None = None,
                  table: CauseTable | None = None) -> list[FoldedStack]:
    """Off-CPU time by stack and cause, merged, in a stable order."""
    scope = in_scope(model, tasks)
    acc: dict[tuple, list] = {}

    def add(frames: tuple[str, ...], ns: float, cause: str, cls: str) -> None:
        if ns <= 0:
            return
        e = acc.get((frames, cause))
        if e is None:
            acc[(frames, cause)] = [ns, cls]
        else:
            e[0] += ns

    for splits in split_waits(model, scope, table).values():
        for s in splits:
            w = s.wait
            base = (_comm(model, w.task),) + tuple(printable(x) for x in reversed(stack_texts(w.ustack)))
            drawn = w.kstack is not None and bool(w.kstack.frames)
            kernel = tuple(printable(x) for x in reversed(stack_texts(w.kstack))) if drawn else ()
            # a wait for input: its part in progress a second and more is idle (attribution.py _idle_input)
            quiet = long_input_cause(model, w, table)
            for cause, frac in s.causes:
                ns = w.charged * frac
                if quiet is not None and cause.name == quiet.name:
                    moved = min(float(w.long_open_ns), ns)
                    ns -= moved
                    name = idle_input_name(cause.name)
                    add(base + kernel if drawn else base + (name,), moved, name, IDLE)
                frames = base + kernel if drawn else base + (cause.name,)
                add(frames, ns, cause.name, cause.cls)
    for p in cpu_parts(model, scope):
        add((_comm(model, p.task), WAITING_FOR_CPU.name), p.ns, WAITING_FOR_CPU.name, WAITING_FOR_CPU.cls)
    return [FoldedStack(frames, e[0], cause, e[1]) for (frames, cause), e in sorted(acc.items())]


def oncpu_stacks(model: Model, tasks: set[TaskId] | None = None) -> list[FoldedStack]:
    """On-CPU sampled time by stack (the profile's samples: stallscope's own left out)."""
    acc: dict[tuple[str, ...], float] = {}
    for s in selected_samples(model, tasks):
        frames = ((_comm(model, s.task, s.comm),)
                  + tuple(printable(x) for x in reversed(stack_texts(s.ustack)))
                  + tuple(printable(x) for x in reversed(stack_texts(s.kstack))))
        if s.kstack is None and s.ustack is None:
            frames += ("(stack not collected)",)
        acc[frames] = acc.get(frames, 0) + s.period_ns
    return [FoldedStack(frames, ns) for frames, ns in sorted(acc.items())]
