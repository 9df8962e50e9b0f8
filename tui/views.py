"""The views of `stallscope top`: each a table over a snapshot, in one list that later work extends.

A view only turns a `Snapshot` (analyzer/timeline.py) into rows; the app (tui/app.py) owns the
timeline, the window shown, filtering, sorting and the cursor. A row is a key (for keeping the cursor
across refreshes and for drilling in), sort keys and cells (rich Text: never parsed as markup).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from operator import add
from typing import Any, Callable, NamedTuple

from rich.text import Text

from stallscope.analyzer.recommend import BY_HAND, RECOMMENDED
from stallscope.analyzer.model import RUNQ_SLOTS
from stallscope.analyzer.oncpu import sampling_summary
from stallscope.analyzer.signals import (
    QUOTA_MIN_THROTTLES, QUOTA_THROTTLED_SHARE, quota_limit, quota_throttled, window_cpu_side,
)
from stallscope.analyzer.timeline import Snapshot, Timeline, hist_p99
from stallscope.analyzer.units import fmt_bytes, fmt_ns
from stallscope.tui.cells import count, dur, heat, lit, longest, num, pct, rate, sparkline, visible

SPARK_INTERVALS = 60  # the last minute at 1 s intervals


@dataclass(frozen=True)
class Column:
    label: str
    width: int | None = None  # None: auto
    numeric: bool = True  # right-aligned, sorted largest first
    ascending: bool = False  # a numeric column read in order (a number, a CPU)


class Row:
    """A row of a view: its key, its sort keys (one per column), its cells, what Enter opens (`item`) and its group
    (rows of a higher group come after those of a lower one, whatever the sort). A view of thousands of rows (a
    machine's threads) gives `make` instead of `cells`: the cells are made when first read, so that only the rows
    the table shows, once sorted and cut, are ever drawn."""

    __slots__ = ("key", "sort", "item", "group", "_cells", "_make")

    def __init__(self, key: str, sort: tuple, cells: tuple[Text, ...] | None = None, item: Any = None,
                 group: int = 0, make: Callable[[], tuple[Text, ...]] | None = None) -> None:
        if (cells is None) == (make is None):
            raise ValueError("a Row has its cells or a way to make them, one of the two")
        self.key, self.sort, self.item, self.group = key, sort, item, group
        self._cells, self._make = cells, make

    @property
    def cells(self) -> tuple[Text, ...]:
        if self._cells is None:
            self._cells, self._make = self._make(), None
        return self._cells

    def __repr__(self) -> str:
        return f"Row({self.key!r}, {self.sort!r})"


FLEX_MAX = 60  # cells a view's flex column may grow by on a wide terminal


class View:
    """A table over a snapshot. `name` is its tab id, `title` its tab label, `key` the digit selecting it."""

    name = ""
    title = ""
    columns: tuple[Column, ...] = ()
    default_sort = 1
    detail = False  # Enter opens a detail screen for the row's item
    # the column that takes a wide terminal's spare width (a cause's, a lock's, a function's name: their
    # ends say the most), up to FLEX_MAX more than its own, once every other column has the width it draws
    flex: int | None = 0
    # the column that takes what the flex column leaves of the spare width, as far as its cells need (who waited)
    spill: int | None = None
    # what its rows read of a snapshot besides the ranking and the status line's figures (stallscope/sources.py
    # PREFOLDED): a live source makes them in the session's thread with each interval while the view is shown
    reads: tuple[str, ...] = ()
    # the cursor on the first row stays there as the rows move (the top of a ranking is what a user there watches);
    # False: it follows its row's item from the first row too (a fix chosen to apply stays chosen)
    keeps_top = True

    def available(self, snap: Snapshot) -> bool:
        return True

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        return Text("")

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        raise NotImplementedError

    def empty(self, snap: Snapshot) -> str:
        return "nothing in this window"


def _names(snap: Snapshot, b) -> str:
    """Who waited, by process name, the name whose tasks waited most in all first (analyzer waiters_by_name)."""
    names = [name for _label, _ns, _n, name in snap.waiters_of(b)]
    return ", ".join(names[:6]) + (f" +{len(names) - 6}" if len(names) > 6 else "")


class BlockersView(View):
    name, title = "blockers", "Blockers"
    reads = ("waiters",)
    columns = (Column("Blocker (cause)", 34, False), Column("Wait/s", 9), Column("Share", 6), Column("Max", 9),
               Column("p99", 8), Column("Count", 8), Column("Last minute", 12, False), Column("Tasks", 16, False))
    detail = True
    spill = 7

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        d = snap.shares
        secs = snap.seconds
        t = Text(f"waiting {fmt_ns(d.total_ns / secs)}/s = blocked {fmt_ns(d.blocked_ns / secs)}/s "
                 f"+ run-queue {fmt_ns(d.runq_ns / secs)}/s (shares of this)")
        if snap.idle_ns:
            t.append(f"   idle waits, not ranked: {fmt_ns(snap.idle_ns / secs)}/s", style="dim")
        # a CPU quota that held tasks back (the quota rule's thresholds): their run-queue wait is not busy CPUs'
        for q, spans in _quotas(snap)[:1]:
            t.append("\n")
            t.append_text(_quota_text(q, spans, "the wait for a CPU is the quota's (Fixes)"))
        return t

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        secs = snap.seconds
        history = _cause_history(snap, timeline)
        out = []
        for b in snap.ranked:
            est = f" ~{100 * b.estimated_ns / b.total_ns:.0f}% est" if b.total_ns and b.estimated_ns else ""
            cause = lit(b.cause)
            if est:
                cause.append(est, style="dim")
            out.append(Row(b.cause, (b.cause, b.total_ns, b.share_pct, b.longest_ns, b.p99_ns, b.count, b.total_ns,
                                     len(b.tasks)),
                           (cause, rate(b.total_ns / secs), pct(b.share_pct), longest(b.longest_ns, b.longest_ongoing),
                            dur(b.p99_ns),
                            count(b.count), sparkline([h.get(b.cause, 0) for h in history], 12),
                            lit(_names(snap, b))), b))
        return out

    def empty(self, snap: Snapshot) -> str:
        return "no task waited in this window"


def _cause_history(snap: Snapshot, timeline: Timeline) -> list[dict[str, float]]:
    """Each cause's wait per second, interval by interval, over the minute up to the window's end."""
    first = max(timeline.earliest, snap.last - SPARK_INTERVALS + 1)
    return timeline.series(first, snap.last, lambda s: {b.cause: b.total_ns / s.seconds for b in s.ranked})


class TasksView(View):
    name, title = "tasks", "Tasks"
    reads = ("tasks",)
    columns = (Column("Task", 16, False), Column("PID", 8, ascending=True), Column("Waiting/s", 10),
               Column("Off-CPU/s", 10), Column("Run-queue/s", 11), Column("p99 wakeup", 10), Column("vcs/s", 8),
               Column("ivcs/s", 7), Column("migr/s", 6), Column("Top causes (not idle)", None, False))
    default_sort = 2
    detail = True
    GROUPS = ("thread", "process", "cgroup")

    def __init__(self):
        self.group = "thread"

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        s = snap.signals
        return Text(f"by {self.group} (g: thread/process/cgroup)   {s['cs_per_s']:,.0f} cs/s, "
                    f"{s['runnable']:.2f} runnable ({s['running']:.2f} running + {s['waiting']:.2f} waiting) "
                    f"on {snap.meta.cpus} CPUs")

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        secs = snap.seconds
        if self.group == "thread":
            return [Row(str(r.task.pid), (r.comm, r.task.pid, r.waiting_per_s, r.offcpu_per_s, r.runq_per_s,
                                          r.runq_p99_ns, r.vcs_per_s, r.ivcs_per_s, r.migrations_per_s, ""),
                        item=r, make=partial(_thread_cells, r, secs))
                    for r in snap.tasks]
        groups: dict[Any, list] = {}
        for r in snap.tasks:
            key = r.tgid if self.group == "process" else (r.cgroup or "?")
            groups.setdefault(key, []).append(r)
        out = []
        for key, rs in groups.items():
            lead = next((r for r in rs if r.task.pid == r.tgid), rs[0])
            label = lead.comm if self.group == "process" else str(key)
            causes: dict[str, int] = {}
            for r in rs:
                for c, ns in r.causes:
                    causes[c] = causes.get(c, 0) + ns
            top = sorted(causes.items(), key=lambda kv: -kv[1])[:3]
            vals = [sum(getattr(r, f) for r in rs) for f in ("waiting_per_s", "offcpu_per_s", "runq_per_s")]
            p99 = _group_p99(snap, rs)
            cs = [sum(getattr(r, f) for r in rs) for f in ("vcs_per_s", "ivcs_per_s", "migrations_per_s")]
            ident = str(key) if self.group == "process" else f"{len(rs)} thr"
            out.append(Row(f"{self.group}:{key}", (label, key if self.group == "process" else len(rs), *vals, p99, *cs, ""),
                           item=TaskGroup(self.group, key, label, tuple(rs), *vals, p99, *cs),
                           make=partial(_group_cells, f"{label} ({len(rs)})" if self.group == "process" else label,
                                        ident, vals, p99, cs, top, secs)))
        return out


class TaskGroup(NamedTuple):
    """A row of the Tasks view grouped by process or cgroup: what Enter opens (tui/detail.py group_detail)."""

    by: str  # "process" or "cgroup"
    key: Any  # the process's tgid, or the cgroup's path
    label: str  # the process's name (its leader's), or the cgroup's path
    rows: tuple  # its threads' TaskRows
    waiting_per_s: float
    offcpu_per_s: float
    runq_per_s: float
    runq_p99_ns: int  # of all its threads' wakeups (_group_p99)
    vcs_per_s: float
    ivcs_per_s: float
    migrations_per_s: float


def _thread_cells(r, secs: float) -> tuple[Text, ...]:
    return (lit(r.comm, "dim" if r.exited else ""), num(str(r.task.pid)), rate(r.waiting_per_s), rate(r.offcpu_per_s),
            rate(r.runq_per_s), dur(r.runq_p99_ns), count(r.vcs_per_s), count(r.ivcs_per_s),
            count(r.migrations_per_s, 1), lit(_causes_per_s(r.causes, secs)))


def _group_cells(label: str, ident: str, vals: list, p99: int, cs: list, top: list, secs: float) -> tuple[Text, ...]:
    return (lit(label), num(ident), rate(vals[0]), rate(vals[1]), rate(vals[2]), dur(p99), count(cs[0]), count(cs[1]),
            count(cs[2], 1), lit(_causes_per_s(top, secs)))


def _group_p99(snap: Snapshot, rows: list) -> int:
    """The p99 of a group's wakeups (all its threads' histograms summed), not its worst thread's."""
    tasks, hist, top = snap.model.tasks, [0] * RUNQ_SLOTS, 0
    for r in rows:
        t = tasks.get(r.task)
        if t is not None and any(t.runq_hist):
            hist = list(map(add, hist, t.runq_hist))
            top = max(top, t.runq_max_ns)
    return hist_p99(tuple(hist), top)


def _causes_per_s(causes, secs: float) -> str:
    """A task's top causes, each its time per second of the window, as the row's other columns are."""
    return "; ".join(f"{c} {fmt_ns(ns / secs)}/s" for c, ns in causes)


class LocksView(View):
    name, title = "locks", "Locks"
    reads = ("locks",)
    # where it is contended and who held it before how the wait splits: at 120 columns the point shows, and the
    # split (also in the detail) is scrolled to
    columns = (Column("Lock", 32, False), Column("Type", 11, False), Column("Contentions", 11), Column("Wait/s", 9),
               Column("Max", 9), Column("Top contention point / owner", None, False), Column("Blocked/s", 9),
               Column("Runnable/s", 10), Column("Spin/s", 9))
    default_sort = 3
    detail = True

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        return Text("kernel and futex locks, then futex polls, events and joins; wait = contention_begin..end "
                    "(perf's): blocked, runnable (woken, waiting for a CPU) and spinning")

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        secs = snap.seconds
        out = []
        for s in snap.locks:
            point = s.callers[0].point if s.callers else ""
            who = f"{point}" + (f"  owner {s.owner}" if s.owner else "")
            out.append(Row(f"{s.name}@{s.addr:x}:{s.pid}:{s.type}",
                           (s.name, s.type_text, s.contentions, s.wait_total_ns, s.wait_max_ns, who,
                            max(s.blocked_ns, 0), max(s.runnable_ns, 0), s.spin_ns),
                           item=s, group=0 if s.is_lock else 1, make=partial(_lock_cells, s, who, secs)))
        return out

    def empty(self, snap: Snapshot) -> str:
        probes = snap.meta.probes
        off = [n for n in ("locks", "futex") if n in probes and not probes[n].enabled]
        return "no lock contention in this window" + (f" (off: {', '.join(off)})" if off else "")


def _lock_cells(s, who: str, secs: float) -> tuple[Text, ...]:
    return (lit(s.name), lit(s.type_text), count(s.contentions), rate(s.wait_total_ns / secs), dur(s.wait_max_ns),
            lit(who), rate(s.blocked_ns / secs) if s.blocked_ns >= 0 else num("?"),
            rate(s.runnable_ns / secs) if s.runnable_ns >= 0 else num("?"), rate(s.spin_ns / secs))


class SlabView(View):
    name, title = "slab", "Slab"
    reads = ("slab",)
    columns = (Column("Cache", 24, False), Column("Allocs/s", 10), Column("Frees/s", 10), Column("Bytes/s", 9),
               Column("Slow path", 10), Column("list_lock wait", 14), Column("Order", 5), Column("Objs/slab", 9),
               Column("Method", None, False))
    default_sort = 1

    def available(self, snap: Snapshot) -> bool:
        st = snap.meta.probes.get("slab")
        return bool(st and st.enabled)

    def empty(self, snap: Snapshot) -> str:
        return ("the slab group is off: start with --probes +slab" if not self.available(snap)
                else "no slab allocation in this window")

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        return Text("slabinfo -AD-like; slow path: CPU-slab changes per allocation, by the method named at right")

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        secs = snap.seconds
        out = []
        for r in snap.slab:
            name = r.cache + (f" ({', '.join(r.aliases)})" if r.aliases else "")
            out.append(Row(f"{r.addr:x}", (name, r.allocs, r.frees, r.bytes_alloc, r.switch_pct or 0, r.lock_wait_ns,
                                          r.order or 0, r.objs_per_slab or 0, r.method),
                           (lit(name), count(r.allocs / secs), count(r.frees / secs), num(fmt_bytes(r.bytes_alloc / secs)),
                            pct(r.switch_pct), dur(r.lock_wait_ns), num("-" if r.order is None else str(r.order)),
                            num("-" if r.objs_per_slab is None else str(r.objs_per_slab)), lit(r.method)), r))
        return out


class CpusView(View):
    name, title = "cpus", "CPUs"
    reads = ("cpus", "signals")
    columns = (Column("CPU", 5, ascending=True), Column("Busy", 7), Column("Waiting", 7), Column("Avg wait", 9),
               Column("Migr out/s", 10), Column("in/s", 8), Column("Migrations from row to column", None, False))
    flex = None  # numbers and the matrix: no name to widen
    default_sort = 0

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        s = snap.signals
        first = max(timeline.earliest, snap.last - SPARK_INTERVALS + 1)
        cs = timeline.series(first, snap.last, lambda x: x.signals["cs_per_s"])
        runnable = timeline.series(first, snap.last, lambda x: x.signals["runnable"])
        t = Text(f"cs/s {s['cs_per_s']:>10,.0f} ")
        t.append_text(sparkline(cs, 40))
        t.append(f"\nrunnable {s['runnable']:>7.2f} ")
        t.append_text(sparkline(runnable, 40))
        t.append(f"   run-queue pressure {s['waiting'] / max(snap.meta.cpus, 1):.2f} waiting per CPU")
        queues = [c for c in snap.cpus if c.runq_ns is not None]
        if len(queues) > 1:  # where they wait: one CPU's queue can hold them all
            most = max(queues, key=lambda c: c.runq_ns)
            if most.runq_ns:
                t.append(f", the most in cpu{most.cpu}'s: {most.waiting(snap.seconds):.2f}")
        for q, spans in _quotas(snap, 0.0, 1)[:1]:  # any throttling of the window, the most first
            t.append("\n")
            t.append_text(_quota_text(q, spans))
        return t

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        secs = snap.seconds
        m = snap.model.matrix
        top = max((v for r in m for v in r), default=0)
        out = []
        for c in snap.cpus:
            line = Text(no_wrap=True)
            for j, v in enumerate(m[c.cpu] if c.cpu < len(m) else ()):
                line.append(f"{v:>5}" if c.cpu != j else "    .", style=heat(v, top) if c.cpu != j else "dim")
                line.append(" ")
            # its run queue's pressure: tasks waiting in it on average (the waits that ended there), and their wait
            waiting, avg = c.waiting(secs), c.avg_wait_ns or 0
            out.append(Row(str(c.cpu), (c.cpu, c.busy_pct or 0, waiting or 0, avg, c.migrations_out, c.migrations_in, 0),
                           (num(f"cpu{c.cpu}"), pct(c.busy_pct), num("-" if waiting is None else f"{waiting:.2f}"),
                            dur(avg), _per_s(c.migrations_out / secs), _per_s(c.migrations_in / secs), line), c))
        return out


def _per_s(n: float) -> Text:
    """A rate: a tenth where it says something (below 100), whole above, so that it fits its column uncut."""
    return count(n, 1 if abs(n) < 100 else 0)


def _quotas(snap: Snapshot, share: float = QUOTA_THROTTLED_SHARE,
            min_periods: int = QUOTA_MIN_THROTTLES) -> list[tuple[dict, float]]:
    """The cgroups a CPU quota throttled in the window (or, in a recording made before its intervals said so, over
    the recording), the most first, each with the seconds its figures span (analyzer/signals.py)."""
    side, secs = window_cpu_side(snap.model)
    return [(q, secs) for q in quota_throttled(side, secs, share, min_periods)]


def _quota_text(q: dict, secs: float, why: str = "") -> Text:
    known = quota_limit(q)
    t = Text("CPU quota throttled ", style="bold yellow")
    t.append_text(lit(q["cgroup"]))
    t.append((f" (limit {known[0] / known[1]:.2f} CPU)" if known else "")
             + f": {q['nr_throttled'] / secs:,.1f} periods/s, {fmt_ns(q['throttled_ns'] / secs)}/s")
    if why:
        t.append(f"; {why}", style="dim")
    return t


class OncpuView(View):
    name, title = "oncpu", "On-CPU"
    reads = ("oncpu",)
    columns = (Column("Function", 48, False), Column("Kind", 7, False), Column("Self", 8), Column("Self %", 7),
               Column("Incl", 8), Column("Incl %", 7))
    default_sort = 2

    def available(self, snap: Snapshot) -> bool:
        st = snap.meta.probes.get("oncpu")
        return bool(st and st.enabled)

    def empty(self, snap: Snapshot) -> str:
        return "the oncpu group is off: start with --probes +oncpu" if not self.available(snap) else "no samples"

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        """What the samples are (as `profile` says it), then what the shares are of."""
        if not self.available(snap):
            return Text("")
        s = sampling_summary(snap.model)
        busy = s.samples - s.idle_samples
        t = Text(f"{s.samples:,} samples at {s.rate_text()}, {busy:,} of them busy "
                 f"({100 * busy / s.samples if s.samples else 0:.1f}% of the CPUs)")
        if s.missed_samples:
            t.append(f"; {s.missed_samples:,} missed", style="yellow")
        t.append("   Self: in the function itself; Incl: with what it called; % of the tasks' samples", style="dim")
        return t

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        return [Row(f"{f.kind}:{f.function}", (f.function, f.kind, f.self_samples, f.self_pct, f.inclusive_samples,
                                               f.inclusive_pct), item=f, make=partial(_function_cells, f))
                for f in snap.oncpu]


def _function_cells(f) -> tuple[Text, ...]:
    return (lit(f.function), lit(f.kind), count(f.self_samples), pct(f.self_pct), count(f.inclusive_samples),
            pct(f.inclusive_pct))


class FixesView(View):
    name, title = "fixes", "Fixes"
    keeps_top = False  # the fix under the cursor stays under it as newer intervals reorder them
    # the finding, sized to its content, is the text to read: before the target (which it names), so that a terminal
    # 80 columns wide shows what each fix is about
    columns = (Column("#", 3, ascending=True), Column("Status", 12, False), Column("Kind", 8, False),
               Column("When", 9, False), Column("Wait/s", 8), Column("Finding", None, False), Column("Target", 22, False))
    flex = None
    default_sort = 0  # recommend's numbers: what needs tuning first (PowerTOP's order), the most waiting first
    detail = True

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        return Text("Enter: evidence, command, risk, verify   a: apply a run-time fix (asks first)   u: undo the last")

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        out = []
        for i, r in enumerate(snap.fixes, 1):
            status = "recommended" if r.status == RECOMMENDED else r.status
            # the waiting the fix is aimed at ("-": its gain is not a measured wait), as `recommend` ranks them
            wait = r.wait_ns_per_s
            out.append(Row(f"{r.kind}:{r.target}", (i, (r.status != RECOMMENDED, not r.runtime, i), r.kind, r.runtime,
                                                    -1.0 if wait is None else wait, r.finding, r.target),
                           (num(str(i)), lit(status, "green" if r.status == RECOMMENDED else "dim"), lit(r.kind),
                            lit("run time" if r.runtime else "by hand" if r.kind in BY_HAND else "boot/code"),
                            rate(wait or 0.0), lit(r.finding), lit(r.target)), r))
        return out

    def empty(self, snap: Snapshot) -> str:
        return "no recommendation: nothing in this window crossed a rule's threshold"


class DevicesView(View):
    """Block devices (the io group): iostat's figures per device and operation, from the request tracepoints,
    with where each request's time went (queued, at the device) and the saturation verdict drawn from it."""

    name, title = "devices", "Devices"
    reads = ("io",)
    columns = (Column("Device", 10, False), Column("Op", 7, False), Column("Req/s", 8), Column("Bytes/s", 8),
               Column("Avg size", 8), Column("Await", 8), Column("p99", 8), Column("Queued", 8),
               Column("At device", 9), Column("%util", 6), Column("In flight", 9), Column("Verdict", None, False))
    flex = None  # the verdict, sized to its content, is the text to read
    default_sort = 2

    def available(self, snap: Snapshot) -> bool:
        st = snap.meta.probes.get("io")
        return bool(st and st.enabled)

    def empty(self, snap: Snapshot) -> str:
        return ("the io group is off: start with --probes +io" if not self.available(snap)
                else "no block request in this window")

    def summary(self, snap: Snapshot, timeline: Timeline) -> Text:
        t = Text("per device and operation, counted as /proc/diskstats counts; await: start to the kernel's count, "
                 "queued and at the device within it; verdict from time queued against time at the device, not %util")
        rows = snap.io
        if rows:
            top = rows[0]
            first = max(timeline.earliest, snap.last - SPARK_INTERVALS + 1)
            depth = timeline.series(first, snap.last,
                                    lambda x: next((r.avg_inflight for r in x.io if r.dev == top.dev), 0.0))
            t.append("\nrequests at ")
            t.append_text(lit(top.name))
            t.append(f" {top.avg_inflight:6.2f} ")
            t.append_text(sparkline(depth, 40))
        bio = snap.io_bio_based
        if bio:
            t.append(f"\nbio-based, not counted in this recording: {visible(', '.join(bio))}", style="dim")
        return t

    def rows(self, snap: Snapshot, timeline: Timeline) -> list[Row]:
        out = []
        for r in snap.io:
            util = r.util_pct
            for o in r.ops:
                verdict = r.saturation.verdict
                out.append(Row(f"{r.dev}:{o.op}", (r.name, o.op, o.requests_per_s, o.bytes_per_s, o.avg_size,
                                                  o.await_.avg_ns, o.await_.p99_ns, o.queued.avg_ns,
                                                  o.device_time.avg_ns, util or 0, r.avg_inflight, verdict),
                               (lit(r.name), lit(o.op), count(o.requests_per_s), num(fmt_bytes(o.bytes_per_s)),
                                num(fmt_bytes(o.avg_size) if o.timed else "-"), dur(o.await_.avg_ns),
                                dur(o.await_.p99_ns), dur(o.queued.avg_ns), dur(o.device_time.avg_ns), pct(util, 0),
                                num(f"{r.avg_inflight:.2f}"),
                                lit(verdict, "red" if verdict == "saturated" else "yellow" if verdict == "queueing"
                                    else "")), r))
        return out


def default_views() -> list[View]:
    """The views, in their key order (1..n)."""
    return [BlockersView(), TasksView(), LocksView(), SlabView(), CpusView(), OncpuView(), FixesView(), DevicesView()]


Sorter = Callable[[Row], Any]
