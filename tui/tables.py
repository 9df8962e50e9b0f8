"""The text tables of `locks`, `profile` and `slab`: what a recording's model holds, as columns a
terminal or a pipe reads. The commands (stallscope/cli.py) load the recording and check what it holds;
these only write."""

from __future__ import annotations

from stallscope.analyzer.locks import LockStat, instance_where
from stallscope.analyzer.model import Model
from stallscope.analyzer.oncpu import category_share, lock_share_line, sampling_summary, task_oncpu, top_functions
from stallscope.analyzer.sample import ProbeStatus, TaskId
from stallscope.analyzer.slab import BLIND_SPOTS, METHOD_ESTIMATE, SlabRow, boot_summary
from stallscope.analyzer.units import fmt_bytes, fmt_ns
from stallscope.analyzer.untrusted import printable


def _lock_row(out, s: LockStat, callers: int) -> None:
    """One row of `locks`, with its heaviest call sites and instances."""

    blocked, runnable = (fmt_ns(s.blocked_ns), fmt_ns(s.runnable_ns)) if s.split else (fmt_ns(s.sleep_ns), "-")
    out.write(f"{printable(s.name)[:52]:<52} {s.type_text:<13} {s.contentions:>11} {fmt_ns(s.wait_total_ns):>10} "
              f"{fmt_ns(s.wait_max_ns):>9} {fmt_ns(s.wait_avg_ns):>9} {fmt_ns(s.wait_min_ns):>9} "
              f"{fmt_ns(s.spin_ns):>9} {blocked:>9} {runnable:>9}\n")
    for c in s.callers[:callers]:
        out.write(f"    {printable(c.point)[:60]:<60} {c.count:>8} {fmt_ns(c.total_ns):>10}\n")
    if len(s.instances) > 1 or (s.instances and s.field and instance_where(s.name, s.instances[0][1])):
        out.write("    heaviest: " + ", ".join(f"{printable(instance_where(s.name, where)) or hex(addr)} {fmt_ns(ns)}"
                                          for addr, where, ns in s.instances) + "\n")
    if s.owner:
        out.write(f"    owner when contended: {printable(s.owner)}\n")


def write_locks(out, model: Model, rows: list[LockStat], polls: list[LockStat], callers: int, lock_type: str) -> None:
    """The lock_stat-like table: locks first, then the futex waits that are not for a lock."""
    out.write(f"{'LOCK':<52} {'TYPE':<13} {'CONTENTIONS':>11} {'TOTAL':>10} {'MAX':>9} {'AVG':>9} {'MIN':>9} "
              f"{'ON-CPU':>9} {'BLOCKED':>9} {'RUNNABLE':>9}\n")
    for s in rows:
        _lock_row(out, s, callers)
    if not rows:
        out.write({"all": "no lock contention recorded\n", "kernel": "no kernel lock contention recorded\n",
                   "futex": "no futex waits recorded\n"}[lock_type])
    if polls:
        out.write("futex waits that are not for a lock (poll: ended by their own timeout; event: a condition "
                  "variable or a semaphore; join: a thread's exit; park: a parked thread):\n")
    for s in polls:
        _lock_row(out, s, callers)
    line = lock_share_line(model)
    if line:
        out.write(line + "\n")
    if rows:
        out.write("TOTAL is perf's (contention_begin to _end, which fires once the waiter has run again): ON-CPU spinning, "
                  "BLOCKED asleep, RUNNABLE woken and waiting for a CPU (not for the lock)\n")


def write_profile(out, model: Model, by: str, tasks_in: set[TaskId] | None, pid: int | None, limit: int) -> None:
    """`profile`: the sampling summary, the busiest threads, and the top functions."""
    summary = sampling_summary(model)
    busy = summary.samples - summary.idle_samples
    out.write(f"{summary.samples} samples at {summary.rate_text()} (period {fmt_ns(summary.period_ns)}), "
              f"{summary.idle_samples} idle: CPUs {100 * busy / summary.samples if summary.samples else 0:.1f}% busy")
    out.write(f"; {summary.missed_samples} missed\n" if summary.missed_samples else "\n")
    out.write("  busy: " + ", ".join(f"CPU{c.cpu} {100 * (c.samples - c.idle_samples) / c.samples:.1f}%"
                                     for c in model.oncpu_cpus.values() if c.samples) + "\n")
    tasks = task_oncpu(model, tasks_in, pid=pid)
    selected = sum(t.samples for t in tasks)
    scope = (f"process/thread {pid}" if pid else "all threads") + (" of the command" if tasks_in else "")
    out.write(f"{selected} samples of {scope}")
    for cat, label in (("lock_spin", "lock spinning"), ("slab_slow_path", "SLUB slow path")):
        n, pct = category_share(model, cat, tasks_in, pid=pid)
        out.write(f"; {label} {pct:.1f}% ({n})")
    out.write("\n")
    for t in tasks[:5]:
        out.write(f"  {printable(t.comm)}[{t.task.pid}] {fmt_ns(t.oncpu_ns)} on CPU ({t.samples} samples)\n")
    out.write(f"\n{'SELF%':>7} {'SELF':>8} {'INCL%':>7} {'INCL':>8}  FUNCTION\n")
    for f in top_functions(model, by, tasks_in, pid=pid, limit=limit):
        suffix = "_[k]" if f.kind == "kernel" else ""
        out.write(f"{f.self_pct:>6.2f}% {f.self_samples:>8} {f.inclusive_pct:>6.2f}% {f.inclusive_samples:>8}  "
                  f"{printable(f.function)}{suffix}\n")
    if not selected:
        out.write("no on-CPU samples" + (f" of {pid}" if pid else "") + "\n")


def write_slab(out, model: Model, probe: ProbeStatus, rows: list[SlabRow], limit: int) -> None:
    """`slab`: the slabinfo -AD-like table with each number's method, and what this kernel did not allow."""
    out.write(boot_summary(model) + "\n")
    out.write(f"{'CACHE':<24} {'ALIASES':<28} {'OBJECTS':>8} {'ALLOCS':>10} {'FREES':>10} {'BYTES':>9} "
              f"{'SLOW-PATH SIGNAL':>16} {'METHOD':<30} {'ORDER':>5} {'OBJ/SLAB':>8} {'LIST_LOCK':>14}\n")
    for r in rows[: limit]:
        aliases = ",".join(r.aliases)
        signal = "-" if r.slow_signal is None else f"{r.slow_signal} ({r.switch_pct or 0:.1f}%)"
        lock = f"{r.lock_contentions}/{fmt_ns(r.lock_wait_ns)}" if r.lock_contentions else "-"
        out.write(f"{printable(r.cache)[:24]:<24} {printable(aliases)[:28]:<28} "
                  f"{'-' if r.objects is None else r.objects:>8} {r.allocs:>10} {r.frees:>10} "
                  f"{fmt_bytes(r.bytes_alloc):>9} {signal:>16} {r.method[:30]:<30} "
                  f"{'-' if r.order is None else r.order:>5} {'-' if r.objs_per_slab is None else r.objs_per_slab:>8} "
                  f"{lock:>14}\n")
    if not rows:
        out.write("no slab allocations recorded\n")
    for note in probe.reason.split("; "):  # what this kernel did not allow (the slow path is explained below)
        if note and not note.startswith("slow path"):
            out.write(f"note: {printable(note)}\n")
    if any(r.method == METHOD_ESTIMATE for r in rows):
        out.write("SLOW-PATH SIGNAL: CPU-slab switches (% of the allocations judged), an estimate, not a fast-path "
                  "rate. Blind spots: " + "; ".join(BLIND_SPOTS) + ".\n")
