"""A plain live text view: blockers and waiting tasks, redrawn in place each interval.

No Textual here: this is the fallback view for any terminal (and for pipes,
where it prints one frame after another without escape codes).
"""

from __future__ import annotations

from collections import OrderedDict

from stallscope.analyzer.blockers import rank_blockers
from stallscope.analyzer.causes import IDLE
from stallscope.analyzer.data_loss import data_losses
from stallscope.analyzer.overhead import DEFAULT_BUDGET_PCT, START_UP_INTERVALS, interval_cost, uprobe_trap_ns
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import Interval, RecordingMeta, Stack, TaskId, TaskInfo
from stallscope.analyzer.units import fmt_ns
from stallscope.analyzer.untrusted import printable as _clean

CLEAR = "\x1b[H\x1b[2J"


class LiveText:
    """`hide_tgid`: stallscope's own process, whose cost the status line shows instead."""

    # Stacks are sent once, when first seen, and referred to by id afterwards; the view keeps the ones
    # used most recently, up to this many (a few hundred bytes each: frames are shared).
    MAX_STACKS = 1 << 16

    def __init__(self, rows: int = 15, out=None, hide_tgid: int | None = None, max_stacks: int = MAX_STACKS):
        self.hide_tgid = hide_tgid
        self.rows = rows
        self.out = out
        self.meta: RecordingMeta | None = None
        self.tasks: dict[TaskId, TaskInfo] = {}
        self.stacks: OrderedDict[int, Stack] = OrderedDict()
        self.max_stacks = max_stacks
        self.tuning = None  # the overhead budget's last step, shown until the next
        self.functions: dict[int, str] = {}  # kernel functions named so far (a kernel thread's, a work item's)

    def start(self, meta: RecordingMeta) -> None:
        self.meta = meta

    def update(self, iv: Interval) -> None:
        if iv.tuning:
            self.tuning = iv.tuning[-1]
        for t in iv.task_info:
            self.tasks[t.task] = t
        for s in iv.stacks:
            self.stacks[s.id] = s
        self.functions.update(iv.functions)
        model = Model.from_intervals(self.meta, [iv], self.tasks, self.stacks, functions=self.functions)
        self.out.write(self.render(model, iv))
        self.out.flush()
        self._forget(iv)

    def _forget(self, iv: Interval) -> None:
        """What a long-running top keeps stays bounded: a task whose final switch this interval
        showed is never seen again; stacks go least recently used first."""
        for t in iv.task_info:
            if t.dead:
                self.tasks.pop(t.task, None)
        used = [o.kstack for o in iv.offcpu] + [o.ustack for o in iv.offcpu] + [w.waker_kstack for w in iv.wakers]
        for sid in used:
            if sid in self.stacks:
                self.stacks.move_to_end(sid)
        while len(self.stacks) > self.max_stacks:
            self.stacks.popitem(last=False)

    def render(self, model: Model, iv: Interval) -> str:
        tty = hasattr(self.out, "isatty") and self.out.isatty()
        lines = [CLEAR if tty else "\n"]
        cost = interval_cost(iv, self.meta.cpus, uprobe_trap_ns(self.meta))
        budget = self.meta.options.get("overhead_budget_pct", DEFAULT_BUDGET_PCT)
        secs = model.duration_s or 1.0
        lines.append(f"stallscope top  interval {iv.index}  {model.switches_per_s:,.0f} cs/s  "
                     f"{len(model.tasks)} active tasks  cost: {cost.total_pct:.2f}% of the CPUs (budget {budget:g}%"
                     f"{_over(cost.total_pct, budget, iv.index)}): BPF {cost.probes_pct:.2f}%, "
                     f"collector {100 * iv.collector_cpu_ns / 1e9 / secs:.1f}% of a CPU\n")
        if self.tuning is not None and (self.tuning.to.level or self.tuning.interval == iv.index):
            lines.append(f"  budget, level {self.tuning.to.level}: {self.tuning.to.describe()} "
                         f"({self.tuning.reason}, after interval {self.tuning.interval})\n")
        programs = {p.name: (p.run_cnt, p.run_time_ns, p.recursion_misses) for p in iv.programs}
        for loss in data_losses(iv.health, programs, self.meta.options):
            lines.append(f"  {loss.line()}\n")
        lines.append(f"\n{'BLOCKER (cause)':<40} {'WAIT/s':>9} {'SHARE':>6} {'COUNT':>7} {'MAX':>9}  TASKS\n")
        shown = {t for t in model.tasks if model.tasks[t].info.tgid != self.hide_tgid}
        ranked = rank_blockers(model, shown)
        idle_ns = sum(b.total_ns for b in ranked if b.cls == IDLE)
        for b in [b for b in ranked if b.cls != IDLE][: self.rows]:
            names = ", ".join(sorted({_clean(model.tasks[t].info.comm) for t in b.tasks if t in model.tasks}))
            lines.append(f"{_clean(b.cause)[:40]:<40} {fmt_ns(b.total_ns / secs):>9} {b.share_pct:5.1f}% "
                         f"{b.count:>7} {fmt_ns(b.max_ns):>9}  {names[:60]}\n")
        if idle_ns:
            lines.append(f"{'(idle waits, not ranked)':<40} {fmt_ns(idle_ns / secs):>9}\n")
        lines.append(f"\n{'TASK':<22} {'PID':>7} {'OFF-CPU/s':>10} {'RUNQ/s':>9} {'VCS':>6} {'IVCS':>6} {'MIGR':>5}\n")
        ranked = sorted((t for t in model.tasks.values() if t.info.tgid != self.hide_tgid),
                        key=lambda t: -(t.offcpu_ns + t.runq_wait_ns))
        for t in ranked[: self.rows]:
            lines.append(f"{_clean(t.info.comm)[:22]:<22} {t.task.pid:>7} {fmt_ns(t.offcpu_ns / secs):>10} "
                         f"{fmt_ns(t.runq_wait_ns / secs):>9} {t.voluntary_switches:>6} "
                         f"{t.involuntary_switches:>6} {t.migrations:>5}\n")
        return "".join(lines)


def _over(pct: float, budget: float, index: int) -> str:
    """Over the budget: said, and for the start-up intervals, where the budget judges the probes' own
    cost but not the collector's, said so."""
    if pct <= budget:
        return ""
    return ", OVER: start-up, collector not judged" if index < START_UP_INTERVALS else ", OVER"
