"""stallscope's own cost, as a share of the machine's CPU: what the BPF programs ran (the kernel's
run-time statistics), an estimate of calling them (run_time_ns excludes the dispatch), and the
collector's own CPU. Per interval and over a window, against the user's budget."""

from __future__ import annotations

from dataclasses import dataclass
from stallscope.analyzer.sample import Interval

# Calling a BPF program from a tracepoint costs tens of ns that run_time_ns does not include
# (measured for an empty program: benchmarks/README.md). Charged per event on top of the run time.
DISPATCH_NS_PER_EVENT = 40
DEFAULT_BUDGET_PCT = 1.0


@dataclass(frozen=True)
class Cost:
    seconds: float  # wall time covered
    cpus: int
    bpf_ns: int  # kernel-measured run time of every program
    dispatch_ns: int  # estimated: runs x DISPATCH_NS_PER_EVENT
    collector_ns: int  # stallscope's own process

    def pct(self, ns: int) -> float:
        """ns as a share of all CPUs' time over the window."""
        return 100.0 * ns / 1e9 / (self.seconds or 1.0) / max(self.cpus, 1)

    @property
    def total_pct(self) -> float:
        return self.pct(self.bpf_ns + self.dispatch_ns + self.collector_ns)


def interval_cost(iv: Interval, cpus: int) -> Cost:
    runs = sum(p.run_cnt for p in iv.programs)
    return Cost(iv.duration_ns / 1e9, cpus, sum(p.run_time_ns for p in iv.programs), runs * DISPATCH_NS_PER_EVENT,
                iv.collector_cpu_ns)


def model_costs(model) -> list[Cost]:
    """Each interval's cost, from what the model kept of it."""
    cpus = model.meta.cpus
    return [Cost(secs, cpus, bpf_ns, runs * DISPATCH_NS_PER_EVENT, collector_ns)
            for secs, bpf_ns, runs, collector_ns in model.interval_costs]


def budget_doc(costs: list[Cost], cpus: int, budget_pct: float) -> dict:
    secs = sum(c.seconds for c in costs)
    total = Cost(secs, cpus, sum(c.bpf_ns for c in costs), sum(c.dispatch_ns for c in costs),
                 sum(c.collector_ns for c in costs))
    return {"budget_pct": budget_pct, "bpf_pct": round(total.pct(total.bpf_ns), 4),
            "dispatch_pct": round(total.pct(total.dispatch_ns), 4),
            "collector_pct_of_machine": round(total.pct(total.collector_ns), 4),
            "total_pct": round(total.total_pct, 4),
            "worst_interval_pct": round(max((c.total_pct for c in costs), default=0.0), 4),
            "over_budget_intervals": sum(1 for c in costs if c.total_pct > budget_pct),
            "dispatch_ns_per_event": DISPATCH_NS_PER_EVENT}
