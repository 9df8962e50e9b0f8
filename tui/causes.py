"""`stallscope causes`: LatencyTOP's two panes as text, from the same ranking the live view uses."""

from __future__ import annotations

from stallscope.analyzer.blockers import (
    denominator, parts, process_causes, rank_blockers, wait_now_cause, waiters_by_name,
)
from stallscope.analyzer.causes import IDLE, default_table
from stallscope.analyzer.chains import depth_note, root_table
from stallscope.analyzer.export import stack_texts
from stallscope.analyzer.io import cause_devices
from stallscope.analyzer.locks import lock_stats, locks_by_site
from stallscope.analyzer.model import Model
from stallscope.analyzer.signals import Signals, quota_throttled, signals, switch_kinds
from stallscope.analyzer.units import fmt_longest, fmt_ns
from stallscope.analyzer.untrusted import printable


def causes_text(model: Model, by: str = "cause", include_idle: bool = False, unknown: bool = False,
                rows: int = 20, sort: str = "total", tasks=None) -> str:
    secs = model.duration_s or 1.0
    lines = [f"{model.duration_s:.1f} s recorded; waiting time by cause"
             + (" (idle waits included)" if include_idle else " (idle waits left out: --all shows them)")
             + (" of the recorded command's tasks" if tasks is not None else "") + "\n\n"]
    lines.append(signals_text(signals(model)))
    all_parts = parts(model, tasks)
    ranked = rank_blockers(model, tasks, include_idle=include_idle, sort=sort, all_parts=all_parts)
    if unknown:
        unmatched = [b for b in ranked if not b.matched and b.stack is not None]
        lines.append(f"{len(unmatched)} cause(s) no rule matched; each named by the lock contended at its innermost "
                     "meaningful frame, or by that frame:\n")
        sites = locks_by_site(model) if unmatched else {}
        for b in unmatched[:rows]:
            lines.append(f"\n{printable(b.cause)}  total {fmt_ns(b.total_ns)}, {b.count} waits, max {fmt_ns(b.max_ns)}\n")
            lines += [f"    {printable(f)}\n" for f in stack_texts(b.stack)[:16]]
            site = sites.get(b.frame)
            if site is not None:
                function = printable(b.frame.split("+", 1)[0])
                rule = default_table().classify(b.stack)  # an unless_lock rule, which the lock outranks here
                lines.append(f"  named from the lock table: its {site.type} {printable(site.lock)} is contended at this "
                             f"same call site ({printable(b.frame)}); "
                             + (f"without it, the rule \"{printable(rule.name)}\" names the wait\n"
                                if rule is not None and rule.matched and rule.unless_lock else
                                f"a rule in your cause table (docs/causes.md) with frames = [\"{function}\"] and "
                                "innermost = true names it without the lock probe\n"))
        return "".join(lines)
    if by == "root":
        lines.append(f"SHARE: {denominator(all_parts).describe()}\n")
        roots = root_table(model, tasks)
        lines.append("Each waiting time followed through who woke it (a waker itself blocked, waiting for a CPU, or "
                     "running) to where the chain ends: docs/causes.md\n")
        note = depth_note(roots.depth)
        if note:
            lines.append(f"Note: {note} (threads handing a lock around)\n")
        lines.append("\n")
        shown = roots.all[:rows]
        labels = [printable(r.name) + (" [idle]" if r.cls == "idle" else "") for r in shown]  # a sleep the waker chose
        width = label_width(labels)
        lines.append(f"{'ROOT CAUSE':<{width}} {'TOTAL':>10} {'PER SEC':>9} {'SHARE':>6}  CHAIN (the heaviest, waiter first)\n")
        for r, label in zip(shown, labels):
            lines.append(f"{label_cell(label, width)} {fmt_ns(r.total_ns):>10} {fmt_ns(r.total_ns / secs):>9} "
                         f"{r.share_pct:5.1f}%  {printable(' <- '.join(r.chain))[:120]}\n")
        return "".join(lines)
    if by in ("process", "thread", "cgroup"):
        now = _longest_now(model, by, tasks)
        marked = False
        for p in process_causes(model, include_idle=include_idle, by_cgroup=by == "cgroup",
                                by_thread=by == "thread", tasks=tasks)[:rows]:
            name = printable(p.comm) if by == "cgroup" else f"{printable(p.comm)}[{p.tgid}]"
            key = p.comm if by == "cgroup" else p.tgid
            shown = {cause for cause, _ns, _mx in p.causes}  # idle causes only with --all
            mine = {cause: ns for (k, cause), ns in now.items() if k == key and cause in shown}
            longest = max(mine.values(), default=0)
            marked = marked or longest > p.max_ns or any(mine.get(c, 0) > mx for c, _ns, mx in p.causes[:5])
            lines.append(f"{name}  total {fmt_ns(p.total_ns)} ({fmt_ns(p.total_ns / secs)}/s), "
                         f"max {_max_text(p.max_ns, longest)}\n")
            width = label_width([printable(cause) for cause, _ns, _mx in p.causes[:5]])
            for cause, ns, mx in p.causes[:5]:
                share = 100.0 * ns / p.total_ns if p.total_ns else 0.0
                lines.append(f"    {label_cell(printable(cause), width)} {_max_text(mx, mine.get(cause, 0)):>9} max  "
                             f"{share:5.1f}%\n")
        if marked:
            lines.append("+ : a wait still going at the window's end, as long as that so far\n")
        return "".join(lines)
    lines.append(f"SHARE: {denominator(all_parts).describe()}\n")
    labels = [printable(b.cause) + (" [idle]" if b.cls == IDLE else "") for b in ranked[:rows]]
    width = label_width(labels)
    lines.append(f"{'CAUSE':<{width}} {'MAX':>9} {'TOTAL':>10} {'PER SEC':>9} {'SHARE':>6} {'ESTIMATED':>17} "
                 f"{'COUNT':>10}  TASKS\n")
    estimated = False
    devices = cause_devices(model, tasks)
    for b, label in zip(ranked[:rows], labels):
        names = names_within([printable(name) for _label, _ns, _n, name in waiters_by_name(model, b)], NAMES_WIDTH)
        share = "     -" if b.cls == IDLE else f"{b.share_pct:5.1f}%"
        est = f"{fmt_ns(b.estimated_ns)} ±{fmt_ns(1.96 * b.error_ns)}" if b.estimated_ns else "-"
        estimated = estimated or bool(b.estimated_ns)
        lines.append(f"{label_cell(label, width)} {fmt_longest(b.longest_ns, b.longest_ongoing):>9} {fmt_ns(b.total_ns):>10} {fmt_ns(b.total_ns / secs):>9} "
                     f"{share} {est:>17} {b.count:>10,}  {names}\n")
        lines += [f"  {device_line(d)}\n" for d in devices.get(b.cause, ())[:3]]
    if not ranked:
        lines.append("no off-CPU time recorded\n")
    if estimated:
        lines.append("ESTIMATED: the part of TOTAL from waits not drawn for a stack walk, shared out by the drawn waits "
                     "of the same task doing the same thing (same system call, file kind, state; or of its process's "
                     "threads, where none of its own was drawn and its evidence names nothing), with its 95% "
                     "margin; see docs/causes.md\n")
    return "".join(lines)


LABEL_MIN, LABEL_MAX = 50, 72  # a cause column's width: its longest name within these
NAMES_WIDTH = 60  # who waited, by name: as many whole names as fit, then how many more


def names_within(names: list[str], width: int) -> str:
    """`names` joined, as many whole as fit in `width`, then "+N" for those left out; the first is there always (cut
    with an ellipsis when it alone does not fit)."""
    n, joined, fit = len(names), 0, 0  # the length of the first `fit` names joined
    for k, name in enumerate(names, 1):
        joined += len(name) + (2 if k > 1 else 0)
        if joined + (len(f" +{n - k}") if k < n else 0) > width:
            break
        fit = k
    rest = f" +{n - max(fit, 1)}" if max(fit, 1) < n else ""
    if fit:
        return ", ".join(names[:fit]) + rest
    return (names[0][:max(1, width - len(rest) - 1)] + "\u2026" + rest) if names else ""


def label_width(labels: list[str]) -> int:
    return max(LABEL_MIN, min(LABEL_MAX, max(map(len, labels), default=0)))


def label_cell(label: str, width: int) -> str:
    """A cause's name in a column `width` wide: padded, or, longer, whole on a line of its own with the
    row's numbers on the next (a name is never cut: its end names the lock, the caller or the work)."""
    if len(label) <= width:
        return f"{label:<{width}}"
    return f"{label}\n{'':<{width}}"


def device_line(d) -> str:
    """One device behind a cause: the waits its completions ended, its requests' latency at the time,
    and who submitted them."""
    subs = ", ".join(printable(x) for x in d.submitters[:3]) + (" ..." if len(d.submitters) > 3 else "")
    return (f"on {printable(d.device)} {d.op}: {round(d.count)} waits, {fmt_ns(d.wait_ns)}; its requests "
            f"{fmt_ns(d.request_avg_ns)} (queued {fmt_ns(d.queued_avg_ns)}, at the device {fmt_ns(d.device_avg_ns)}); "
            f"submitted by {subs}")


def _longest_now(model: Model, by: str, tasks) -> dict[tuple, int]:
    """(process, thread or cgroup key, cause) -> the longest wait still in progress at the window's end, so far:
    a thread stuck for the whole recording has no wait that ended (its max would read 0)."""
    waits = model.waits_now
    if not waits:
        return {}
    out: dict[tuple, int] = {}
    for w in waits:
        task = w.wait.task
        if tasks is not None and task not in tasks:
            continue
        t = model.tasks.get(task)
        tgid = t.info.tgid if t else w.wait.tgid
        key = model.cgroups.get(tgid, "(unknown)") if by == "cgroup" else task.pid if by == "thread" else tgid
        k = (key, wait_now_cause(model, w))
        out[k] = max(out.get(k, 0), w.so_far_ns)
    return out


def _max_text(ended: int, now: int) -> str:
    """The longest wait: one still going (`+`) when it is the longer."""
    return f"{fmt_ns(now)}+" if now > ended else fmt_ns(ended)


def signals_text(s: Signals) -> str:
    """vmstat's first look, and the CPU side kept apart from blocked time."""
    lines = [f"context switches {s.cs_per_s:,.0f}/s for {s.runnable_avg:.1f} runnable tasks on average "
             f"({s.cs_per_runnable:,.0f}/s each{': high, ' + switch_kinds(s.voluntary_share, s.top_wait) if s.cs_high else ''}); "
             f"{s.waiting_avg:.2f} tasks waiting for a CPU ({s.runq_pressure:.2f} per CPU); "
             f"{s.migrations_per_s:,.0f} migrations/s\n"]
    side = s.cpu_side or {}
    parts = []
    if side:
        parts.append(f"steal {side.get('steal_pct', 0):.1f}% of the CPUs")
        psi = side.get("psi", {})
        parts += [f"PSI {res} some {v.get('some_pct', 0):.1f}%" + (f" full {v['full_pct']:.1f}%" if "full_pct" in v else "")
                  for res, v in sorted(psi.items())]
        for t in quota_throttled(side, 0.0, 0.0, 1)[:3]:  # well-formed entries only (a damaged recording's are not)
            parts.append(f"CFS throttled {printable(t['cgroup'])}: {t['nr_throttled']} times, {fmt_ns(t['throttled_ns'])}")
    if parts:
        lines.append("CPU side: " + "; ".join(parts) + "\n")
    return "".join(lines) + "\n"
