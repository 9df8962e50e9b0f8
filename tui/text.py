"""A plain live text view: blockers and waiting tasks, redrawn in place each interval.

No Textual here: this is the fallback view for any terminal (and for pipes,
where it prints one frame after another without escape codes).
"""

from __future__ import annotations

from stallscope.analyzer.blockers import waiters_by_name
from stallscope.analyzer.overhead import DEFAULT_BUDGET_PCT, START_UP_INTERVALS, Cost
from stallscope.analyzer.sample import Interval, RecordingMeta, Stack, TaskId, TaskInfo
from stallscope.analyzer.timeline import Snapshot, Timeline
from stallscope.analyzer.units import fmt_longest, fmt_ns
from stallscope.analyzer.untrusted import printable as _clean
from stallscope.tui.causes import NAMES_WIDTH, names_within

CLEAR = "\x1b[H\x1b[2J"


class LiveText:
    """`hide_tgid`: stallscope's own process, whose cost the status line shows instead (the snapshot
    keeps its tasks apart in any case). The live timeline holds the last interval and the names it
    may still need (tasks until their final switch, stacks least recently used first)."""

    MAX_STACKS = 1 << 16

    def __init__(self, rows: int = 15, out=None, hide_tgid: int | None = None, max_stacks: int = MAX_STACKS):
        self.hide_tgid = hide_tgid
        self.rows = rows
        self.out = out
        self.meta: RecordingMeta | None = None
        self.timeline: Timeline | None = None
        self.max_stacks = max_stacks
        self.tuning = None  # the overhead budget's last step, shown until the next

    @property
    def tasks(self) -> dict[TaskId, TaskInfo]:
        return self.timeline.task_info if self.timeline else {}

    @property
    def stacks(self) -> dict[int, Stack]:
        return self.timeline.stacks if self.timeline else {}

    def start(self, meta: RecordingMeta) -> None:
        self.meta = meta
        self.timeline = Timeline(meta, keep=1, live=True, cache_size=2, max_stacks=self.max_stacks)

    def update(self, iv: Interval) -> None:
        if iv.tuning:
            self.tuning = iv.tuning[-1]
        self.timeline.add(iv)
        snap = self.timeline.latest()
        tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.out.write((CLEAR if tty else "\n") + snapshot_text(snap, self.rows, self.tuning, self.hide_tgid))
        self.out.flush()

    def render(self, *_args) -> str:  # kept for CLEAR's lookup by name
        return ""


def snapshot_text(snap: Snapshot, rows: int = 15, tuning=None, hide_tgid: int | None = None) -> str:
    """One frame of `top --plain`: the status line, the blockers and the waiting tasks of a snapshot."""
    meta, model = snap.meta, snap.model
    lines = []
    cost = snap.cost or Cost(snap.seconds, meta.cpus, 0, 0, 0)
    budget = meta.options.get("overhead_budget_pct", DEFAULT_BUDGET_PCT)
    secs = snap.seconds
    where = f"interval {snap.last}" if snap.first == snap.last else f"intervals {snap.first}..{snap.last}"
    lines.append(f"stallscope top  {where}  {model.switches_per_s:,.0f} cs/s  "
                 f"{len(model.tasks)} active tasks  cost: {cost.total_pct:.2f}% of the CPUs (budget {budget:g}%"
                 f"{_over(cost.total_pct, budget, snap.last)}): BPF {cost.probes_pct:.2f}%, "
                 f"collector {100 * cost.collector_ns / 1e9 / secs:.1f}% of a CPU\n")
    if tuning is not None and (tuning.to.level or tuning.interval == snap.last):
        lines.append(f"  budget, level {tuning.to.level}: {tuning.to.describe()} "
                     f"({tuning.reason}, after interval {tuning.interval})\n")
    for loss in snap.losses:  # never silent: each in words, with the flag that raises its map
        lines.append(f"  {loss.line()}\n")
    lines.append(f"\n{'BLOCKER (cause)':<40} {'WAIT/s':>9} {'SHARE':>6} {'COUNT':>9} {'MAX':>9}  TASKS\n")
    for b in snap.ranked[:rows]:
        names = names_within([_clean(name) for _label, _ns, _n, name in waiters_by_name(model, b)], NAMES_WIDTH)
        lines.append(f"{_clean(b.cause)[:40]:<40} {fmt_ns(b.total_ns / secs):>9} {b.share_pct:5.1f}% "
                     f"{b.count:>9,} {fmt_longest(b.longest_ns, b.longest_ongoing):>9}  {names}\n")
    if snap.idle_ns:
        lines.append(f"{'(idle waits, not ranked)':<40} {fmt_ns(snap.idle_ns / secs):>9}\n")
    # in the Tasks view's order: waiting (idle waits left out, the run queue in), then off-CPU
    lines.append(f"\n{'TASK':<22} {'PID':>7} {'WAITING/s':>10} {'OFF-CPU/s':>10} {'RUNQ/s':>9} {'VCS':>6} {'IVCS':>6} "
                 f"{'MIGR':>5}\n")
    for r in [r for r in snap.tasks if r.tgid != hide_tgid][:rows]:
        t = model.tasks[r.task]
        lines.append(f"{_clean(r.comm)[:22]:<22} {r.task.pid:>7} {fmt_ns(r.waiting_per_s):>10} {fmt_ns(r.offcpu_per_s):>10} "
                     f"{fmt_ns(r.runq_per_s):>9} {t.voluntary_switches:>6} "
                     f"{t.involuntary_switches:>6} {t.migrations:>5}\n")
    return "".join(lines)


def _over(pct: float, budget: float, index: int) -> str:
    """Over the budget: said, and for the start-up intervals, where the budget judges the probes' own
    cost but not the collector's, said so."""
    if pct <= budget:
        return ""
    return ", OVER: start-up, collector not judged" if index < START_UP_INTERVALS else ", OVER"
