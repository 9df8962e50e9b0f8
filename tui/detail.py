"""What Enter opens: the evidence behind one row, as literal text (names are never markup).

A blocker: its numbers and latency percentiles, the stacks its waits were seen in with their share, who
held its tasks up (wakers, lock owners, CPU hogs), the devices whose completions ended its waits, its root causes with the chain to each, the tasks,
and the latency histogram. A lock: its contention points with the wait split, instances and tasks. A
task: all its causes, its wakers, its wakeup-latency histogram. A fix: evidence, command, risk, verify.
"""

from __future__ import annotations

from rich.text import Text

from stallscope.analyzer.blockers import (
    LOST_STACK, NO_STACK_LABELS, STACK_NOT_DRAWN, Blocker, wait_now_cause, wait_parts, waits_now_by_cause,
)
from stallscope.analyzer.causes import CPU
from stallscope.analyzer.chains import depth_note
from stallscope.analyzer.locks import LockStat, waiters_of
from stallscope.analyzer.model import RUNQ_SLOTS  # a wait's log2 histogram has as many slots (bpf/sched.h)
from stallscope.analyzer.recommend import RECOMMENDED, Recommendation
from stallscope.analyzer.sample import Stack
from stallscope.analyzer.signals import quota_limit, quota_throttled, window_cpu_side
from stallscope.analyzer.timeline import Snapshot, TaskRow
from stallscope.analyzer.units import fmt_ns, log2_bounds
from stallscope.tui.cells import visible

MAX_FRAMES = 24
LISTED_TASKS = 20  # a blocker's or a lock's tasks listed in its evidence, the most waiting first
GROUP_THREADS = 20  # a process's or cgroup's threads listed in its evidence, the most waiting first
BAR = 30


def _h(t: Text, title: str) -> None:
    t.append(f"\n{title}\n", style="bold underline")


def _kv(t: Text, label: str, value: str, style: str = "", width: int = 16) -> None:
    """A label and its value, the values of a section aligned at `width`; a longer label keeps a gap before its value."""
    t.append(f"  {label:<{width}}" if len(label) < width else f"  {label}  ", style="dim")
    t.append(visible(value) + "\n", style=style)


def _frames(t: Text, stack: Stack | None, indent: str = "    ", none: str = "(no stack walked)") -> None:
    if stack is None:
        t.append(f"{indent}{none}\n", style="dim")
        return
    frames = [f.text for f in stack.frames if not f.text.startswith(("bpf_prog_", "bpf_trace_run", "__bpf_trace",
                                                                       "__traceiter_"))]
    for text in frames[:MAX_FRAMES]:
        t.append(f"{indent}{visible(text)}\n")
    if len(frames) > MAX_FRAMES:
        t.append(f"{indent}... {len(frames) - MAX_FRAMES} more\n", style="dim")
    if stack.truncated:
        t.append(f"{indent}[truncated]\n", style="dim")


def histogram(t: Text, hist: list[int]) -> None:
    """log2 buckets, each `[lower, upper)`, with a bar: slot s holds the lengths in [2^s, 2^(s+1)) ns (bpf/sched.h
    log2_slot), slot 0 those below 2 ns."""
    top = max(hist, default=0)
    if not top:
        t.append("  (no lengths kept)\n", style="dim")
        return
    lo = next(i for i, c in enumerate(hist) if c)
    hi = max(i for i, c in enumerate(hist) if c)
    for slot in range(lo, hi + 1):
        c = hist[slot]
        lower, upper = log2_bounds(slot)
        t.append(f"  {fmt_ns(lower) if lower else '0':>8} .. {fmt_ns(upper):>8}  {c:>9,}  ")
        t.append("█" * max(1 if c else 0, round(BAR * c / top)) + "\n", style="cyan")


def blocker_detail(snap: Snapshot, b: Blocker, chains: bool = True) -> Text:
    """`chains`: with its root causes (the wait chains of the window, tens of milliseconds to follow on a busy
    machine's interval: a live view's detail pane leaves them to Enter)."""
    m, secs = snap.model, snap.seconds
    t = Text()
    t.append(visible(b.cause) + "\n", style="bold")
    _kv(t, "class", b.cls)
    _kv(t, "wait", f"{fmt_ns(b.total_ns)} in {secs:.1f} s ({fmt_ns(b.total_ns / secs)}/s), {b.share_pct:.1f}% "
                   f"of the waiting time")
    _kv(t, "waits", f"{b.count:,} ended" + (f"; max {fmt_ns(b.max_ns)}" if b.count and b.max_ns > 0 else "")
        + "".join(f", {k[:-3]} {fmt_ns(v)}" for k, v in b.latency.items() if k.endswith("_ns")))
    if b.in_progress:
        _kv(t, "in progress", f"{b.in_progress:,} at the window's end, the longest {fmt_ns(b.longest_now_ns)} so far")
    if b.estimated_ns:
        _kv(t, "estimated", f"{fmt_ns(b.estimated_ns)} of it from waits not drawn for a stack walk, "
                            f"± {fmt_ns(1.96 * b.error_ns)} (95%)")
        if b.pooled_ns:
            _kv(t, "by its process", f"{fmt_ns(b.pooled_ns)} of that, of threads with none drawn: shared by their "
                                     "process's drawn waits")
    if b.method == "runqueue":
        _kv(t, "measured", "at the run queue: each wakeup (or preemption) to the task's switch-in")
    else:
        _kv(t, "named by", f"{b.method}" + (f": {b.frame}" if b.frame else ""))

    if b.cls == CPU:  # no wait of it sleeps in a stack: who ran instead is its evidence (Held up by, below)
        _h(t, "Stacks")
        t.append("  a wait for a CPU has no stack of its own: the tasks that ran instead are below\n", style="dim")
        hist: list[int] = []
    else:
        hist = _stacks_of(t, m, b)

    h = snap.held_up_by(b)
    # a quota's throttling: the tasks wait as for a busy CPU, and the threads switched out most (the hogs below)
    # were throttled too rather than running instead (the window's, or in a recording made before the intervals
    # kept it, the recording's)
    side, secs = window_cpu_side(snap.model)
    quota = quota_throttled(side, secs) if b.cls == CPU else []
    span = "of the window" if (snap.meta.options or {}).get("throttled_per_interval") else "of the recording"
    if h.wakers or h.owners or h.hogs or quota:
        _h(t, "Held up by")
        for q in quota:
            known = quota_limit(q)
            limit = f" (its limit {known[0] / known[1]:.2f} CPU)" if known else ""
            t.append(f"  the CPU quota of {visible(q['cgroup'])}{limit}: throttled in {q['nr_throttled']:,} periods "
                     f"{span}, {fmt_ns(q['throttled_ns'])} of its run queues' time (see the fixes)\n")
        for label, n, ns, threads, _stack in h.waker_names:  # by name, as the ones that ran instead
            more = f" from {threads:,} threads" if threads > 1 else ""
            # the whole length of the waits they ended (which may have begun long before the window), shared by
            # the waits drawn for a stack walk, whose wakers are recorded: few drawn, a rough share
            t.append(f"  woken by {visible(label)}: {n:,} drawn wakeup{'s' if n != 1 else ''}{more}, "
                     f"ending {fmt_ns(ns)} of waiting\n")
        for owner in h.owners:
            t.append(f"  lock owner {visible(owner)}\n")
        # where a quota throttled them, the waiters switched out most did not run instead: the quota held them all
        waiting = {snap.model.tasks[w].info.comm for w in b.tasks if w in snap.model.tasks} if quota else set()
        for name, n, threads, comm in h.hog_names:  # by name: thousands of short-lived threads of one name weigh together
            more = f" in {threads:,} threads" if threads > 1 else ""
            if comm in waiting:
                t.append(f"  throttled with them: {visible(name)} ({n:,} involuntary switches{more}; they waited "
                         "too, so the quota, not they, held the CPU from the others)\n")
            else:
                t.append(f"  ran instead: {visible(name)} ({n:,} involuntary switches{more})\n")

    devices = snap.io_causes.get(b.cause, ())
    if devices:
        _h(t, "Devices whose completions ended its waits (the io group)")
        for d in devices[:5]:
            t.append(f"  {visible(d.device)} {d.op}: {round(d.count):,} waits, {fmt_ns(d.wait_ns)}; its requests "
                     f"{fmt_ns(d.request_avg_ns)} (queued {fmt_ns(d.queued_avg_ns)}, at the device "
                     f"{fmt_ns(d.device_avg_ns)})\n")
            t.append(f"      submitted by {visible(', '.join(d.submitters[:3]))}\n", style="dim")

    roots = snap.roots.by_cause.get(b.cause, ()) if chains else ()
    if not chains:
        _h(t, "Root causes (wait chains)")
        t.append("  Enter shows them\n", style="dim")
    if roots:
        note = depth_note(snap.roots.depth)
        _h(t, "Root causes (wait chains: waiter -> waker -> its blocker)" + (f"; {note}" if note else ""))
        for r in roots[:3]:
            t.append(f"  {r.share_pct:5.1f}%  {visible(r.name)}\n", style="bold")
            t.append("         " + "  ->  ".join(visible(c) for c in r.chain) + "\n", style="dim")

    names = snap.waiters_of(b)
    if len(names) < len(b.tasks):  # some name has several tasks: who waited, summed per name, first
        _h(t, "Who waited, by name")
        total = b.total_ns or 1
        for label, ns, n, _name in names[:8]:
            more = f" in {n:,} tasks" if n > 1 else ""
            t.append(f"  {100 * ns / total:5.1f}%  {fmt_ns(ns):>9}  {visible(label)}{more}\n")
        if len(names) > 8:
            t.append(f"  ... {len(names) - 8} more names\n", style="dim")
    waits = b.task_ns if len(b.task_ns) == len(b.tasks) else None  # each task's wait for it, the heaviest first
    _h(t, f"Tasks ({len(b.tasks):,})" + (", the most waiting first" if waits else ""))
    for i, tid in enumerate(b.tasks[:LISTED_TASKS]):
        info = m.tasks[tid].info if tid in m.tasks else None
        if waits:
            t.append(f"  {fmt_ns(waits[i]):>10}  ")
        t.append(f"{'' if waits else '  '}{visible(info.comm) if info else '?'}[{tid.pid}]\n")
    if len(b.tasks) > LISTED_TASKS:
        t.append(f"  ... {len(b.tasks) - LISTED_TASKS:,} more\n", style="dim")

    if b.cls == CPU:  # a run-queue wait's length: its tasks' wakeup-to-run latency
        hist = [0] * RUNQ_SLOTS
        for tid in b.tasks:
            if tid in m.tasks:
                for slot, c in enumerate(m.tasks[tid].runq_hist[:RUNQ_SLOTS]):
                    hist[slot] += c
        _h(t, "Wakeup-to-run latency (log2 buckets)")
    else:
        _h(t, "Latency of single waits (log2 buckets)")
    histogram(t, hist)
    return t


def _stacks_of(t: Text, m, b: Blocker) -> list[int]:
    """The first three stacks a blocker's waits were seen in, with the share of the waits they stand for; the
    histogram of its single waits."""
    # A drawn wait stands for the waits like it that were not drawn (d/p, docs/causes.md): a 40 us read drawn
    # with p = 1/25 for 25 of them, a 5 ms page fault drawn always for itself. Ranked by measured time alone, a
    # few long waits came before the short ones that were nearly all of the time (fio's reads: 8 s of 8.2).
    _h(t, "Stacks its waits were seen in (share of the waits the drawn ones stand for; measured beside it)")
    tasks = set(b.tasks)
    by_stack: dict[tuple[int, int], list] = {}  # stack ids -> [stands for, measured ns, drawn waits, kstack, ustack]
    hist = [0] * RUNQ_SLOTS
    for w in m.waits:
        if w.task not in tasks:
            continue
        parts = wait_parts(m, w)  # its cause, or for a reader that got nothing for a second, two
        if all(cause != b.cause for cause, _ns in parts):
            continue
        ns = sum(n for cause, n in parts if cause == b.cause)
        for slot, c in enumerate(w.hist if parts[0][0] == b.cause else ()):  # the idle part: no wait of it ended
            if slot < len(hist):
                hist[slot] += c
        if w.kstack_id == STACK_NOT_DRAWN and not w.weighted_ns:
            continue  # the waits not drawn are what the drawn ones stand for: listed, they would count twice
        e = by_stack.setdefault((w.kstack_id, w.ustack_id), [0.0, 0, 0, w.kstack, w.ustack, w.kstack_id])
        # a drawn wait, its d/p; one that could never be drawn (too short, stallscope's own), itself
        e[0] += (w.weighted_ns or w.total_ns) * ns / (sum(n for _c, n in parts) or 1)
        e[1] += ns
        if parts[0][0] == b.cause:
            e[2] += w.count
    stands = sum(e[0] for e in by_stack.values()) or 1
    for weight, ns, n, ks, us, kid in sorted(by_stack.values(), key=lambda e: (-e[0], -e[1]))[:3]:
        t.append(f"  {100 * weight / stands:5.1f}%  measured {fmt_ns(ns)} in {n:,} wait{'s' if n != 1 else ''}\n",
                 style="bold")
        t.append("   kernel:\n", style="dim")
        _frames(t, ks, none=NO_STACK_LABELS.get(kid, LOST_STACK))
        if us is not None:
            t.append("   user:\n", style="dim")
            _frames(t, us)
    if not by_stack:
        t.append("  (no wait of it walked in this window)\n", style="dim")
    return hist


def lock_detail(snap: Snapshot, s: LockStat) -> Text:
    m, secs = snap.model, snap.seconds
    t = Text()
    t.append(visible(s.name) + "\n", style="bold")
    _kv(t, "type", s.type_text)
    _kv(t, "contentions", f"{s.contentions:,} ({s.contentions / secs:,.1f}/s)")
    _kv(t, "wait", f"{fmt_ns(s.wait_total_ns)} ({fmt_ns(s.wait_total_ns / secs)}/s), max {fmt_ns(s.wait_max_ns)}, "
                   f"min {fmt_ns(s.wait_min_ns)}")
    if s.blocked_ns >= 0:
        _kv(t, "split", f"blocked {fmt_ns(s.blocked_ns)}, runnable {fmt_ns(s.runnable_ns)} (waiting for a CPU), "
                        f"spinning {fmt_ns(s.spin_ns)}")
    else:
        _kv(t, "split", f"off a CPU {fmt_ns(s.sleep_ns)}, spinning {fmt_ns(s.spin_ns)}")
    if s.owner:
        _kv(t, "owner", s.owner)
    _h(t, "Contention points")
    for c in s.callers[:10]:
        split = (f"  blocked {fmt_ns(c.blocked_ns)}, runnable {fmt_ns(c.runnable_ns)}" if c.blocked_ns >= 0 else "")
        t.append(f"  {c.count:>8,}  {fmt_ns(c.total_ns):>9}  {visible(c.point)}{split}\n")
    if s.instances:
        _h(t, "Heaviest instances")
        for addr, where, ns in s.instances[:10]:
            t.append(f"  {addr:#x}  {fmt_ns(ns):>9}  {visible(where)}\n")
    _h(t, f"Tasks ({len(s.tasks):,}), the most waiting first: contentions, wait")
    waiters = waiters_of(m, s)
    for tid, n, ns in waiters[:LISTED_TASKS]:
        info = m.tasks[tid].info if tid in m.tasks else None
        t.append(f"  {n:>8,}  {fmt_ns(ns):>9}  {visible(info.comm) if info else '?'}[{tid.pid}]\n")
    if len(waiters) > LISTED_TASKS:
        t.append(f"  ... {len(waiters) - LISTED_TASKS:,} more\n", style="dim")
    return t


def task_detail(snap: Snapshot, r: TaskRow) -> Text:
    m, secs = snap.model, snap.seconds
    tt = m.tasks.get(r.task)
    t = Text()
    t.append(f"{visible(r.comm)}[{r.task.pid}]  process {r.tgid}\n", style="bold")
    if r.cgroup:
        _kv(t, "cgroup", r.cgroup)
    _kv(t, "off-CPU", f"{fmt_ns(r.offcpu_per_s)}/s")
    now = next((w for w in m.waits_now or () if w.wait.task == r.task), None)
    if now is not None:
        _kv(t, "blocked now", f"{fmt_ns(now.so_far_ns)} so far, in {wait_now_cause(m, now)}"
            + (" (already asleep when tracing began: longer than that)" if now.since_ns <= m.meta.start_ns else ""))
    _kv(t, "run-queue", f"{fmt_ns(r.runq_per_s)}/s, p99 wakeup-to-run <= {fmt_ns(r.runq_p99_ns)}")
    _kv(t, "switches", f"{r.vcs_per_s:,.1f} voluntary/s, {r.ivcs_per_s:,.1f} involuntary/s, "
                       f"{r.migrations_per_s:,.1f} migrations/s")
    _h(t, "Causes")
    for c, ns in snap.task_causes.get(r.task, []):
        t.append(f"  {fmt_ns(ns / secs):>10}/s  {visible(c.name)}\n")
    wakers = sorted((w for w in m.wakeups if w.task == r.task), key=lambda w: -w.weighted)[:5]
    if wakers:
        _h(t, "Woken by (wakeups; the whole length of the waits they ended)")
        for w in wakers:
            t.append(f"  {w.count:>8,}  {fmt_ns(w.weighted):>9}  {visible(w.waker_comm)}[{w.waker.pid}]\n")
    if tt is not None:
        _h(t, "Wakeup-to-run latency (log2 buckets)")
        histogram(t, list(tt.runq_hist))
    return t


def group_detail(snap: Snapshot, g) -> Text:
    """A process's or a cgroup's evidence (tui/views.py TaskGroup): its threads' figures summed, what they waited for
    (each thread's causes summed), the threads in a wait now, and its threads, the most waiting first."""
    m, secs = snap.model, snap.seconds
    tasks = {r.task for r in g.rows}
    t = Text()
    name = f"{visible(g.label)}[{g.key}]" if g.by == "process" else visible(g.label)
    t.append(f"{name}  {g.by}, {len(g.rows):,} thread{'s' if len(g.rows) != 1 else ''}\n", style="bold")
    _kv(t, "waiting", f"{fmt_ns(g.waiting_per_s)}/s (idle waits left out, the run queue in)")
    _kv(t, "off-CPU", f"{fmt_ns(g.offcpu_per_s)}/s")
    _kv(t, "run-queue", f"{fmt_ns(g.runq_per_s)}/s, p99 wakeup-to-run <= {fmt_ns(g.runq_p99_ns)} (all its threads')")
    _kv(t, "switches", f"{g.vcs_per_s:,.1f} voluntary/s, {g.ivcs_per_s:,.1f} involuntary/s, "
                       f"{g.migrations_per_s:,.1f} migrations/s")
    now = waits_now_by_cause(m, tasks)  # cause -> (its threads in a wait now, the longest so far)
    if now:
        ranked = sorted(now.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
        _kv(t, "blocked now", f"{sum(n for n, _ in now.values()):,} of its threads: " + "; ".join(
            f"{n:,} in {c} (the longest {fmt_ns(so_far)} so far)" for c, (n, so_far) in ranked[:3])
            + (f"; {len(ranked) - 3} other causes" if len(ranked) > 3 else ""))
    causes: dict[str, int] = {}
    for task in tasks:
        for c, ns in snap.task_causes.get(task, ()):
            causes[c.name] = causes.get(c.name, 0) + ns
    _h(t, "Causes (its threads' summed)")
    for c, ns in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))[:12]:
        t.append(f"  {fmt_ns(ns / secs):>10}/s  {visible(c)}\n")
    if not causes:
        t.append("  (no wait in this window)\n", style="dim")
    _h(t, "Threads, the most waiting first")
    rows = sorted(g.rows, key=lambda r: (-r.waiting_per_s, -r.offcpu_per_s, r.task.pid))
    for r in rows[:GROUP_THREADS]:
        top = r.causes[0][0] if r.causes else ""
        t.append(f"  {fmt_ns(r.waiting_per_s):>10}/s  {visible(r.comm)}[{r.task.pid}]")
        t.append(f"  {visible(top)}\n" if top else "\n", style="dim")
    if len(rows) > GROUP_THREADS:
        t.append(f"  ... {len(rows) - GROUP_THREADS:,} more (g shows them by thread)\n", style="dim")
    return t


def fact_text(value, unit: str) -> str:
    if isinstance(value, str):
        return value
    if unit == "ns":
        return fmt_ns(value)
    if unit == "ns/s":
        return f"{fmt_ns(value)}/s"
    if unit == "%":
        return f"{value:.1f}%"
    if unit == "/s":
        return f"{value:,.1f}/s"
    return f"{value:,.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"


def fix_detail(snap: Snapshot, r: Recommendation, number: int) -> Text:
    t = Text()
    t.append(f"[{number}] {r.kind}: ", style="bold")
    t.append(visible(r.finding) + "\n", style="bold")
    _kv(t, "status", "recommended" if r.status == RECOMMENDED else r.status,
        "green" if r.status == RECOMMENDED else "yellow")
    _kv(t, "target", r.target)
    if r.facts:
        _h(t, "Numbers")
        width = max(16, *(len(f.label) + 2 for f in r.facts))
        for f in r.facts:
            _kv(t, f.label, fact_text(f.value, f.unit), width=width)
    _h(t, "Evidence")
    for e in r.evidence:
        t.append(f"  - {visible(e)}\n")
    _h(t, "Command")
    t.append(f"  {visible(r.command) or '(a change of code or configuration)'}\n", style="bold")
    t.append("  " + ("run time: `a` applies it after asking, `u` undoes it" if r.runtime and r.status == RECOMMENDED
                     else "boot time or code: not applied from here") + "\n", style="dim")
    _h(t, "Risk")
    t.append(f"  {visible(r.risk)}\n")
    _h(t, "How to verify")
    t.append(f"  {visible(r.verify)}\n")
    return t
