"""stallscope's own cost, as a share of the machine's CPU: what the BPF programs ran (the kernel's
run-time statistics), an estimate of calling them (run_time_ns excludes the dispatch) and of the
uprobes' traps (measured when the recording starts), and the collector's own CPU. Per interval and
over a window, against the user's budget."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from stallscope.analyzer.sample import Interval, Tuning, TuningChange, duration_text

# Calling a BPF program from a tracepoint costs tens of ns that run_time_ns does not include
# (measured for an empty program: benchmarks/README.md). Charged per event on top of the run time.
DISPATCH_NS_PER_EVENT = 40
# A uprobe is a breakpoint: each hit traps into the kernel and back, which no program statistic shows.
# The futex group measures it when it starts (meta.options.futex.uprobe_trap_ns: 8.8 us a hit on this
# 2-CPU VM, 1-2 us on bare metal); this is used where the recording has no measurement.
UPROBE_PROGRAMS = ("lock_call",)
DEFAULT_UPROBE_TRAP_NS = 5_000
DEFAULT_BUDGET_PCT = 1.0
START_UP_INTERVALS = 2  # not judged: see Governor
CAP_REFUSED_SHARE = 0.25  # of the waits drawn, refused by the walk cap: T steps up
CAP_CALM_SHARE = 0.05  # ... and under this share only, it may step back down


@dataclass(frozen=True)
class Cost:
    seconds: float  # wall time covered
    cpus: int
    bpf_ns: int  # kernel-measured run time of every program
    dispatch_ns: int  # estimated: runs x DISPATCH_NS_PER_EVENT
    collector_ns: int  # stallscope's own process
    trap_ns: int = 0  # estimated: uprobe hits x the trap's measured cost

    def pct(self, ns: int) -> float:
        """ns as a share of all CPUs' time over the window."""
        return 100.0 * ns / 1e9 / (self.seconds or 1.0) / max(self.cpus, 1)

    @property
    def total_pct(self) -> float:
        return self.pct(self.bpf_ns + self.dispatch_ns + self.trap_ns + self.collector_ns)

    @property
    def probes_pct(self) -> float:
        """What the BPF programs cost, run time, dispatch and uprobe traps, without the collector."""
        return self.pct(self.bpf_ns + self.dispatch_ns + self.trap_ns)


def uprobe_hits(programs) -> int:
    return sum(p.run_cnt for p in programs if p.name in UPROBE_PROGRAMS)


def uprobe_trap_ns(meta) -> int:
    """What one uprobe hit costs on the recording's machine, as measured when it started."""
    futex = meta.options.get("futex")
    measured = futex.get("uprobe_trap_ns") if isinstance(futex, dict) else None
    return int(measured) if measured else DEFAULT_UPROBE_TRAP_NS


def interval_cost(iv: Interval, cpus: int, trap_ns: int = DEFAULT_UPROBE_TRAP_NS) -> Cost:
    runs = sum(p.run_cnt for p in iv.programs)
    return Cost(iv.duration_ns / 1e9, cpus, sum(p.run_time_ns for p in iv.programs), runs * DISPATCH_NS_PER_EVENT,
                iv.collector_cpu_ns, uprobe_hits(iv.programs) * trap_ns)


def model_costs(model) -> list[Cost]:
    """Each interval's cost, from what the model kept of it."""
    cpus = model.meta.cpus
    trap = uprobe_trap_ns(model.meta)
    return [Cost(secs, cpus, bpf_ns, runs * DISPATCH_NS_PER_EVENT, collector_ns, hits * trap)
            for secs, bpf_ns, runs, collector_ns, hits in model.interval_costs]


def budget_doc(costs: list[Cost], cpus: int, budget_pct: float, trap_ns: int = DEFAULT_UPROBE_TRAP_NS) -> dict:
    secs = sum(c.seconds for c in costs)
    total = Cost(secs, cpus, sum(c.bpf_ns for c in costs), sum(c.dispatch_ns for c in costs),
                 sum(c.collector_ns for c in costs), sum(c.trap_ns for c in costs))
    return {"budget_pct": budget_pct, "bpf_pct": round(total.pct(total.bpf_ns), 4),
            "dispatch_pct": round(total.pct(total.dispatch_ns), 4),
            "uprobe_traps_pct": round(total.pct(total.trap_ns), 4),
            "collector_pct_of_machine": round(total.pct(total.collector_ns), 4),
            "total_pct": round(total.total_pct, 4),
            "worst_interval_pct": round(max((c.total_pct for c in costs), default=0.0), 4),
            "over_budget_intervals": sum(1 for c in costs if c.total_pct > budget_pct),
            "dispatch_ns_per_event": DISPATCH_NS_PER_EVENT, "uprobe_trap_ns": trap_ns}


# ---- keeping to the budget -------------------------------------------------------------------
# Over budget, the probes do less of what is optional: fewer waits drawn for a stack walk (a larger T in
# p = min(1, d/T), so the walks still follow where the time goes and every estimate stays unbiased), fewer
# user stacks at a wait's start, fewer on-CPU samples. What is never given up: the exact per-task totals
# (every event still counts), and no wait is left out because it was short (--min-stack-wait is the
# user's alone: a floor on length would leave short waits' causes unseen, not estimated).

MAX_LEVEL = 4
MIN_WALKS_PER_S = 10  # a floor: some stacks keep coming
MIN_SAMPLE_HZ = 9
MAX_SAMPLE_NS = 10_000_000_000
UNLIMITED_SAMPLE_START = 100_000  # what "every wait" (T = 0) steps up from
UNLIMITED_USER_WALKS_START = 1000  # what "no limit" steps down from


def tuning_at(start: Tuning, level: int) -> Tuning:
    """The settings at `level`, from what the user chose (level 0). Each level draws waits with a T ten
    times larger (about a tenth of the walks where waits are short), walks a quarter as many user stacks
    at a wait's start, and halves the sampling rate from level 2 on; none goes below its floor or past
    the user's choice. The walk cap and the minimum wait stay the user's."""
    level = max(0, min(level, MAX_LEVEL))
    if level == 0:
        return start
    sample = min((start.sample_ns or UNLIMITED_SAMPLE_START) * 10 ** level, max(MAX_SAMPLE_NS, start.sample_ns))
    users = start.user_walks_per_s or UNLIMITED_USER_WALKS_START
    users = max(users // 4 ** level, min(MIN_WALKS_PER_S, users))
    hz = start.sample_hz
    if level >= 2:
        hz = max(hz // 2 ** (level - 1), min(MIN_SAMPLE_HZ, hz))
    return Tuning(level, start.walks_per_s, start.min_stack_ns, hz, sample, users)


def levels_down(pct: float, budget_pct: float) -> int:
    """How many levels an interval's overshoot calls for: one for a cost up to 4 times the budget, and
    one more for each further factor of 4 (each level walks a quarter as many stacks). Under a hackbench
    loop the cost was 11-16 times the default budget: one level an interval took 4 intervals to reach
    the lowest, each of them at that cost."""
    ratio = pct / budget_pct
    return max(1, math.ceil(math.log(ratio, 4) - 1e-9)) if ratio > 1 else 1


class Governor:
    """Keeps the measured cost under the budget, by steps sized to the overshoot, and says why at each.

    Over budget in an interval: down by `levels_down` levels (less optional work). At the last level and still
    over: said once, since what is left is the per-event work that keeps the totals exact. Under half
    the budget for `recover_after` intervals in a row: one level back up; a step back up that had to
    be undone soon after doubles the wait before the next (up to `max_recover_after`), so a load that
    sits near the budget does not see-saw. In the first `warmup` intervals only the probes' own cost is
    judged, and only to step down: those intervals hold the collector's start-up, which is not what
    tracing costs. The first drain reads every process's maps and files; the second interval pays for
    storing or showing all that the first one found (an idle machine's `top` spent 19.5% of a CPU
    there, against 1.5% from the third on). The probes' cost is what they cost from the first event
    on: on a busy machine, waiting two intervals to judge it kept a short command traced at the full
    stack-walk rate for most of its run."""

    def __init__(self, start: Tuning, budget_pct: float, warmup: int = START_UP_INTERVALS, recover_after: int = 5,
                 max_recover_after: int = 60):
        self.start = start
        self.budget_pct = budget_pct
        self.current = start
        self.warmup = warmup
        self.recover_after = recover_after
        self.max_recover_after = max_recover_after
        self._seen = 0
        self._calm = 0
        self._since_raise: int | None = None
        self._floor_said = False
        self._lock_calls = start.lock_calls

    def observe(self, interval: int, cost: Cost, drawn: int = 0, refused: int = 0) -> TuningChange | None:
        """Judge one interval's cost, and how many of the waits drawn for a stack walk the walk cap
        refused; the change to make, if any. A cap refusing more than a quarter of the draws steps down
        like a cost over the budget: T is then too short for this machine's waits, and the walks left
        would be those of the first waits of each tenth of a second rather than a draw by length."""
        self._seen += 1
        if self._since_raise is not None:
            self._since_raise += 1
        if self.budget_pct <= 0:
            return None
        warming = self._seen <= self.warmup
        pct = cost.probes_pct if warming else cost.total_pct
        capped = drawn > 0 and refused > CAP_REFUSED_SHARE * drawn and not warming
        if capped and pct <= self.budget_pct and self.current.level < MAX_LEVEL:
            self._calm = 0
            self._since_raise = None
            return self._move(interval, self.current.level + 1,
                              f"the stack-walk cap refused {refused} of the {drawn} waits drawn: T ten times longer")
        if capped:
            self._calm = 0
        if warming and pct <= self.budget_pct:
            return None
        level = self.current.level
        what = "the probes' cost (start-up: the collector not judged)" if warming else "cost"
        if pct > self.budget_pct:
            self._calm = 0
            if level >= MAX_LEVEL and self.current.lock_calls and cost.pct(cost.trap_ns) >= self.budget_pct / 2:
                self._lock_calls = False
                self._floor_said = False  # what remains then is said again
                return self._move(interval, level,
                                  f"{what} {pct:.2f}% of the CPUs is over the {self.budget_pct:g}% budget at the "
                                  f"lowest setting, {cost.pct(cost.trap_ns):.2f}% of it the uprobes' traps in libc's "
                                  "lock functions: removed (lock callers are named from user stacks only)")
            if level >= MAX_LEVEL:
                if self._floor_said:
                    return None
                self._floor_said = True
                return TuningChange(interval, self.current,
                                    f"{what} {pct:.2f}% of the CPUs is over the {self.budget_pct:g}% budget at the "
                                    "lowest setting: what remains is the per-event work that keeps the totals exact")
            if self._since_raise is not None and self._since_raise <= self.recover_after:
                self.recover_after = min(self.recover_after * 2, self.max_recover_after)
            self._since_raise = None
            n = min(levels_down(pct, self.budget_pct), MAX_LEVEL - level)
            return self._move(interval, level + n,
                              f"{what} {pct:.2f}% of the CPUs is over the {self.budget_pct:g}% budget" +
                              (f" ({pct / self.budget_pct:.1f} times it: {n} levels down)" if n > 1 else ""))
        if level == 0 or pct >= self.budget_pct / 2 or refused > CAP_CALM_SHARE * max(drawn, 1):
            self._calm = 0
            return None
        self._calm += 1
        if self._calm < self.recover_after:
            return None
        self._calm = 0
        self._since_raise = 0
        self._floor_said = False
        return self._move(interval, level - 1, f"cost {pct:.2f}% of the CPUs has stayed under half the "
                                               f"{self.budget_pct:g}% budget for {self.recover_after} intervals")

    def _move(self, interval: int, level: int, reason: str) -> TuningChange:
        self.current = tuning_at(self.start, level)
        if not self._lock_calls:  # once removed, for the rest of the recording: each removal waits for RCU
            self.current = replace(self.current, lock_calls=False)
        return TuningChange(interval, self.current, reason)


def tuning_doc(change: TuningChange, interval_s: float) -> dict:
    """One step of the budget, for the JSON export (meta.overhead.changes)."""
    t = change.to
    return {"after_interval": change.interval, "at_s": round((change.interval + 1) * interval_s, 3),
            "level": t.level, "stack_walks_per_s": t.walks_per_s, "min_stack_ns": t.min_stack_ns,
            "sample_hz": t.sample_hz, "stack_scale_ns": t.sample_ns, "user_stack_walks_per_s": t.user_walks_per_s,
            "lock_call_uprobes": t.lock_calls, "reason": change.reason}
