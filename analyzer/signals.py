"""The method's first look, vmstat's, from the recording: context switches against runnable tasks
(a rate high for the number of runnable tasks: blocking, on what most often, or
preemption and sched_yield()), run-queue pressure, CPU migrations
(ping-pong), and the CPU side kept apart from blocked time: steal, CFS bandwidth throttling, PSI."""

from __future__ import annotations

from dataclasses import dataclass, field

from stallscope.analyzer.blockers import rank_blockers
from stallscope.analyzer.causes import CPU
from stallscope.analyzer.model import Model
from stallscope.analyzer.scope import recorded_tasks

# A switch every 200 us per runnable task: far more switching than the CPUs' work needs.
HIGH_CS_PER_RUNNABLE = 5000.0
SWITCH_KIND_SHOWN = 5  # percent: a kind of switch named beside a high rate (the larger kind always is)


def tasks_waiting(wait_ns: float, seconds: float) -> float:
    """Tasks waiting in run queues on average over `seconds`, from their waits' total time (Little's law: the
    time waited per second of time). One CPU's queue, or the machine's; the views, the rules and the report's
    tables all read it from here."""
    return wait_ns / 1e9 / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class Signals:
    cs_per_s: float
    runnable_avg: float  # vmstat's r: tasks running (CPU busy) plus waiting in run queues, on average
    waiting_avg: float  # tasks waiting for a CPU, on average (Little's law: run-queue wait / time)
    cs_per_runnable: float
    runq_pressure: float  # tasks waiting per CPU
    migrations_per_s: float
    top_migrating: tuple[tuple[str, int, float], ...]  # (comm, tid, migrations/s)
    cpu_side: dict = field(default_factory=dict)  # steal, throttled cgroups, PSI (meta.machine.cpu_side)
    # of the tasks' switches, the voluntary ones (the kernel's nvcsw: they blocked); the others (nivcsw) were
    # preempted or called sched_yield(), which the kernel counts alike. None: no switch counted
    voluntary_share: float | None = None
    # the cause most of the waits were for (run-queue waits left out: not a voluntary switch), and its
    # share of those waits: what the blocking is, when it is high (a lock, I/O, a poll loop)
    top_wait: tuple[str, float] | None = None

    @property
    def cs_high(self) -> bool:
        return self.cs_per_runnable >= HIGH_CS_PER_RUNNABLE


def signals(model: Model, waits: bool = True) -> Signals:
    """`waits`: also what most waits were for (`top_wait`, from the ranking of the causes, which the views that
    print the line rank anyway); a rule that reads only the CPU figures leaves it out (a ranking of its own)."""
    secs = model.duration_s or 1.0
    tasks = recorded_tasks(model)
    mine = [t for tid, t in model.tasks.items() if tasks is None or tid in tasks]
    waiting = tasks_waiting(sum(t.runq_wait_ns for t in mine), secs)
    busy = window_busy_pct(model)[0]
    running = sum(busy.values()) / 100.0 if busy else 0.0
    runnable = running + waiting
    cs = model.switches_per_s
    migrating = sorted(mine, key=lambda t: -t.migrations)[:5]
    vol = sum(t.voluntary_switches for t in mine)
    counts = [(b.count, b.cause) for b in rank_blockers(model, tasks) if b.cls != CPU and b.count] if waits else []
    total_waits = sum(n for n, _c in counts)
    most = max(counts, default=None)
    switched = vol + sum(t.involuntary_switches for t in mine)
    return Signals(
        cs_per_s=cs, runnable_avg=runnable, waiting_avg=waiting, cs_per_runnable=cs / max(runnable, 1.0),
        runq_pressure=waiting / max(model.meta.cpus, 1), migrations_per_s=sum(map(sum, model.matrix)) / secs,
        top_migrating=tuple((t.info.comm, t.task.pid, t.migrations / secs) for t in migrating if t.migrations),
        cpu_side=window_cpu_side(model)[0], voluntary_share=vol / switched if switched else None,
        top_wait=(most[1], most[0] / total_waits) if most else None)


def switch_kinds(voluntary_share: float | None, top_wait: tuple[str, float] | None = None) -> str:
    """What a high switch rate is made of: blocking (voluntary), and on what most often (a lock, I/O, a poll
    loop), or not (involuntary: a thread preempted, or one spinning on sched_yield(), as stress-ng's yield
    stressor and sysbench's threads test do)."""
    on = f"; most waits: {top_wait[0]}, {round(100 * top_wait[1])}%" if top_wait else ""
    if voluntary_share is None:
        return f"tasks block and wake often{on}"
    vol = round(100 * voluntary_share)
    kinds = [(vol, f"{vol}% voluntary (blocking{on})"),
             (100 - vol, f"{100 - vol}% involuntary (preempted, or calling sched_yield())")]
    return ", ".join(text for pct, text in sorted(kinds, key=lambda k: -k[0]) if pct >= SWITCH_KIND_SHOWN)


def signals_doc(s: Signals) -> dict:
    return {"cs_per_s": round(s.cs_per_s, 1), "runnable_avg": round(s.runnable_avg, 3),
            "waiting_avg": round(s.waiting_avg, 3), "cs_per_runnable": round(s.cs_per_runnable, 1),
            "cs_high": s.cs_high, "runq_pressure": round(s.runq_pressure, 3),
            "migrations_per_s": round(s.migrations_per_s, 1),
            "top_migrating": [{"comm": c, "pid": p, "migrations_per_s": round(r, 2)} for c, p, r in s.top_migrating],
            "cpu_side": s.cpu_side,
            "voluntary_pct": None if s.voluntary_share is None else round(100 * s.voluntary_share, 1),
            "top_wait": None if s.top_wait is None else {"cause": s.top_wait[0],
                                                         "waits_pct": round(100 * s.top_wait[1], 1)}}


def window_busy_pct(model: Model) -> tuple[dict[str, float], str]:
    """Each CPU's busy share (percent, keyed by its number as text: machine.cpu_busy_pct's layout) and what it
    spans: the window's, from /proc/stat at each interval's end where the intervals say it (meta.options'
    cpu_time_per_interval: a live view's window has one at all, a replay's range its own), else the
    recording's, read at its start and end."""
    meta = model.meta
    if (meta.options or {}).get("cpu_time_per_interval") and model.cpu_time:
        return ({str(c): round(100.0 * busy / total, 1) for c, (busy, total) in model.cpu_time.items() if total > 0},
                "window")
    busy = (meta.machine or {}).get("cpu_busy_pct") or {}
    return (busy if isinstance(busy, dict) else {}), "recording"


def window_cpu_side(model: Model) -> tuple[dict, float]:
    """What took CPU time from the model's tasks without their being blocked (steal, CFS bandwidth throttling,
    PSI; machine.cpu_side's layout), and the seconds it spans: the recording's, read at its start and end
    (meta.machine.cpu_side), with the window's own throttling in its place where the intervals say which
    cgroups a CPU quota throttled in each (meta.options' throttled_per_interval): a live view's window and a
    replay's range have theirs, and a live view, whose meta has no end, has one at all."""
    meta = model.meta
    side = (meta.machine or {}).get("cpu_side") or {}
    side = side if isinstance(side, dict) else {}
    if not (meta.options or {}).get("throttled_per_interval"):
        recorded = (meta.end_ns - meta.start_ns) / 1e9 if meta.end_ns and meta.end_ns > meta.start_ns else 0.0
        return side, recorded or model.duration_s or 1.0
    return {**side, "throttled": [t.entry() for t in model.throttled]}, model.duration_s or 1.0


def quota_limit(entry: dict) -> tuple[int, int] | None:
    """A throttled cgroup's limit, (quota us, period us), where its entry holds one a kernel writes; else None."""
    quota, period = entry.get("quota_us"), entry.get("period_us")
    return (quota, period) if isinstance(quota, int) and isinstance(period, int) and quota > 0 and period > 0 else None


QUOTA_THROTTLED_SHARE = 0.1  # a cgroup's run queues throttled this share of the window (one CPU's) ...
QUOTA_MIN_THROTTLES = 3  # ... over at least this many periods


def quota_throttled(cpu_side: dict, seconds: float, share: float = QUOTA_THROTTLED_SHARE,
                    min_periods: int = QUOTA_MIN_THROTTLES) -> list[dict]:
    """The cgroups a CPU quota held back over a recording (machine.cpu_side's `throttled`, from cpu.stat):
    their tasks wait for a CPU as for a busy one. Heaviest first."""
    entries = (cpu_side or {}).get("throttled", ()) if isinstance(cpu_side, dict) else ()
    # numbers no kernel writes (a damaged or edited recording) are left out, never read as a finding
    return [t for t in entries if isinstance(t, dict) and isinstance(t.get("cgroup"), str) and t["cgroup"]
            and isinstance(t.get("nr_throttled"), int) and isinstance(t.get("throttled_ns"), int)
            and t["nr_throttled"] >= min_periods and t["throttled_ns"] >= share * seconds * 1e9]
