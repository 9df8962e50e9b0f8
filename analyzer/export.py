"""Exports of a model: the versioned JSON document and folded stacks.

The JSON document is a public interface (docs/export.md): keys are only ever
added, never renamed. Deterministic: sorted keys, stable ordering.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from stallscope.analyzer.attribution import nonzero_slots
from stallscope.analyzer.blockers import (
    IDLE, causes_by_task, held_up_by, process_causes, wait_cause, waiters_by_name,
)
from stallscope.analyzer.chains import Root
from stallscope.analyzer.data_loss import model_losses
from stallscope.analyzer.locks import lock_stats
from stallscope.analyzer.io import bio_based, bios_counted, device_dev_text as io_dev_text, devices_described
from stallscope.analyzer.model import Model
from stallscope.analyzer.overhead import DEFAULT_BUDGET_PCT, budget_doc, model_costs, tuning_doc, uprobe_trap_ns
from stallscope.analyzer.recommend import recommend
from stallscope.analyzer.signals import signals, signals_doc
from stallscope.analyzer.oncpu import category_share, probe_ran, sampling_summary, task_oncpu, top_functions
from stallscope.analyzer.sample import TS_DEAD, TS_EXITING, TS_FOUND_BLOCKED, Stack, TaskId
from stallscope.analyzer.scope import own_tasks
from stallscope.analyzer.slab import slab_rows
from stallscope.analyzer.timeline import Snapshot
from stallscope.analyzer.untrusted import printable
from stallscope.analyzer.wakers import waker_context

# 2: blockers' share_pct is of one denominator (meta.shares: blocked outside idle causes plus run-queue
# wait; null for idle causes), where version 1 took shares within each class; blocked time is charged to
# the intervals a wait spans; locks' sleep_ns is blocked_ns + runnable_ns (version 1 called it blocked).
JSON_VERSION = 2
POLICIES = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE", 6: "SCHED_DEADLINE",
            7: "SCHED_EXT"}


def stack_texts(stack: Stack | None) -> list[str]:
    """Frames innermost first, as text; a truncated stack ends with a marker."""
    if stack is None:
        return []
    out = [f.text for f in stack.frames]
    if stack.truncated:
        out.append("[truncated]" if stack.frames else "[stack lost: map full]")
    return out


def to_json_doc(model: Model, scope: set[TaskId] | None = None) -> dict:
    meta = model.meta
    wakers_by_task: dict[TaskId, list] = {}
    for wk in model.wakeups:
        wakers_by_task.setdefault(wk.task, []).append(wk)
    command = meta.options.get("command")
    cmd_tasks = model.descendants(command["pid"]) if command and command.get("pid") else None

    snap = Snapshot(model, tasks=scope)
    # every task's parts, made first: the ranking reads them, and each task's causes are summed from them
    # (parts_at_hand) rather than from parts grouped anew (blockers.grouped_parts, a live view's reading)
    snap.parts
    task_cause_lists = causes_by_task(model, scope)
    own = own_tasks(model)
    blocked_now = {w.wait.task: w.so_far_ns for w in model.waits_now or ()}
    tasks = []
    for tid in sorted(model.tasks):
        if scope is not None and tid not in scope:
            continue
        t = model.tasks[tid]
        entry = {
            "pid": tid.pid, "tgid": t.info.tgid, "ptgid": t.info.ptgid, "start_time_ns": tid.start_time_ns,
            "comm": t.info.comm, "offcpu_ns": t.offcpu_ns, "offcpu_count": t.offcpu_count,
            "offcpu_max_ns": t.offcpu_max_ns, "runq_wait_ns": t.runq_wait_ns, "runq_count": t.runq_count,
            "runq_max_ns": t.runq_max_ns, "runq_latency_ns": t.runq_latency_ns,
            "voluntary_switches": t.voluntary_switches,
            "involuntary_switches": t.involuntary_switches, "migrations": t.migrations,
            "runq_hist_log2_ns": {str(i): c for i, c in nonzero_slots(t.runq_hist)},
            "exited": bool(t.info.flags & (TS_DEAD | TS_EXITING)),
            "found_blocked": bool(t.info.flags & TS_FOUND_BLOCKED), "blocked_now_ns": blocked_now.get(tid),
            "run_ns": t.run_ns, "policy": POLICIES.get(t.info.policy, str(t.info.policy)), "nice": t.info.nice,
            "rt_priority": t.info.rt_priority, "stallscope": tid in own,
            "causes": [{"cause": c.name, "class": c.cls, "total_ns": ns} for c, ns in task_cause_lists.get(tid, [])],
            "wakers": _wakers(wakers_by_task.get(tid, [])),
        }
        if cmd_tasks is not None:
            entry["in_command"] = tid in cmd_tasks
        tasks.append(entry)

    blockers = []
    shares, roots = snap.shares, snap.roots
    comm_of = {tid: t.info.comm for tid, t in model.tasks.items()}
    for b in snap.blockers:
        blockers.append({
            "cause": b.cause, "class": b.cls, "frame": b.frame, "matched": b.matched,
            "total_ns": b.total_ns, "count": b.count, "max_ns": b.max_ns,
            "in_progress": b.in_progress, "in_progress_longest_ns": b.longest_now_ns,
            "share_pct": None if b.cls == IDLE else round(b.share_pct, 3), "estimated_ns": b.estimated_ns,
            "estimated_error_ns": b.error_ns, "estimated_by_process_ns": b.pooled_ns, "method": b.method,
            "tasks": [{"pid": t.pid, "comm": comm_of.get(t, "?")} for t in b.tasks],
            "waiters": [{"name": label, "wait_ns": ns, "tasks": n} for label, ns, n, _c in waiters_by_name(model, b)],
            "stack": stack_texts(b.stack),
            "latency": _latency_doc(model, b),
            "held_up_by": _held_up_by_doc(held_up_by(model, b)),
            "roots": [_root_doc(r) for r in roots.by_cause.get(b.cause, ())[:3]],
            "devices": [_cause_device_doc(d) for d in snap.io_causes.get(b.cause, ())],
        })

    matrix = [list(r) for r in model.matrix]
    return {
        "format": "stallscope",
        "version": JSON_VERSION,
        "meta": {
            "kernel": meta.kernel, "cpus": meta.cpus, "host": meta.host, "duration_s": round(model.duration_s, 6),
            "start_wall": meta.start_wall, "interval_s": meta.interval_s, "intervals": model.intervals,
            "stallscope_version": meta.stallscope_version,
            "probes": {name: asdict(p) for name, p in sorted(meta.probes.items())},
            "options": meta.options,
            "machine": meta.machine,
            "switches": model.switches, "switches_per_s": round(model.switches_per_s, 3),
            "switches_kernel": model.kernel_switches,
            "health": dict(sorted(model.health.items())),
            "damaged_rows": dict(sorted(model.damaged_rows.items())),
            "data_loss": [loss.as_dict() for loss in model_losses(model)],
            "shares": {"of": "waiting: blocked outside idle causes, plus run-queue wait",
                       "waiting_ns": shares.total_ns, "blocked_ns": shares.blocked_ns, "runq_ns": shares.runq_ns,
                       "idle_ns": shares.idle_ns},
            "overhead": {
                "collector_cpu_s": round(model.collector_cpu_ns / 1e9, 6),
                "collector_cpu_pct": round(100 * model.collector_cpu_ns / 1e9 / model.duration_s, 3)
                if model.duration_s else 0.0,
                "bpf_programs": {name: {"run_cnt": r, "run_time_ns": ns, "recursion_misses": m}
                                 for name, (r, ns, m) in sorted(model.programs.items())},
                **budget_doc(model_costs(model), meta.cpus,
                             meta.options.get("overhead_budget_pct", DEFAULT_BUDGET_PCT), uprobe_trap_ns(meta)),
                "changes": [tuning_doc(c, model.meta.interval_s) for c in model.tuning],
            },
        },
        "tasks": tasks,
        "blockers": blockers,
        "roots": [_root_doc(r) for r in roots.all],
        "roots_depth": roots.depth,
        # the whole recording's tables, stallscope's own slab allocations and lock waits counted as the
        # tracepoints count them (the snapshot's tables leave stallscope's own out, as the views do)
        "locks": [_lock_doc(s) for s in lock_stats(model, tasks=scope)],
        "slab": [_slab_doc(r) for r in slab_rows(model, scope)],
        "io": _io_doc(model, snap),
        "oncpu": _oncpu_doc(model, scope),
        "migrations": {"matrix": matrix, "total": sum(map(sum, matrix))},
        "cpus": [{"cpu": c.cpu, "busy_pct": None if c.busy_pct is None else round(c.busy_pct, 3),
                  "runq_wait_ns": c.runq_ns, "runq_waits": c.runq_waits, "migrations_out": c.migrations_out,
                  "migrations_in": c.migrations_in} for c in snap.cpus],
        "signals": signals_doc(signals(model)),
        "cgroups": [{"cgroup": p.comm, "total_ns": p.total_ns, "max_ns": p.max_ns,
                     "causes": [{"cause": c, "total_ns": ns, "max_ns": mx} for c, ns, mx in p.causes]}
                    for p in process_causes(model, by_cgroup=True)] if model.cgroups else [],
        "recommendations": [_recommendation_doc(i, r) for i, r in enumerate(recommend(model), 1)
                            if scope is None or _in_scope(r, model, scope)],
    }


def _root_doc(r: Root) -> dict:
    return {"root": r.name, "class": r.cls, "total_ns": r.total_ns, "share_pct": round(r.share_pct, 3),
            "chain": list(r.chain), "tasks": [{"pid": t.pid} for t in r.tasks]}


def _latency_doc(model: Model, b) -> dict:
    return {"avg_ns": b.total_ns // b.count if b.count else 0, "max_ns": b.max_ns, **b.latency}


def _without_tracing(frames: list[str]) -> list[str]:
    """A stack walked from a probe starts in the probe: those frames are ours, not the waker's."""
    i = 0
    while i < len(frames) and frames[i].startswith(("bpf_prog_", "bpf_trace_run", "__bpf_trace", "__traceiter_")):
        i += 1
    return frames[i:]


def _held_up_by_doc(h) -> dict:
    return {"wakers": [{"waker": label, "count": n, "total_ns": ns, "stack": _without_tracing(stack_texts(stack))}
                       for label, n, ns, stack in h.wakers],
            "owners": list(h.owners), "hogs": [{"task": name, "involuntary_switches": n} for name, n in h.hogs],
            "hog_names": [{"name": label, "comm": c, "involuntary_switches": n, "threads": k}
                          for label, n, k, c in h.hog_names],
            "waker_names": [{"name": label, "count": n, "total_ns": ns, "threads": k,
                             "stack": _without_tracing(stack_texts(stack))} for label, n, ns, k, stack in h.waker_names]}


def _recommendation_doc(number: int, r) -> dict:
    return {"number": number, "kind": r.kind, "target": r.target, "finding": r.finding, "evidence": list(r.evidence),
            "command": r.command, "risk": r.risk, "verify": r.verify, "status": r.status, "runtime": r.runtime,
            "facts": [{"label": f.label, "value": f.value, "unit": f.unit} for f in r.facts],
            "wait_ns_per_s": None if r.wait_ns_per_s is None else round(r.wait_ns_per_s)}


def _in_scope(r, model: Model, scope: set[TaskId]) -> bool:
    tid = r.action.get("tid")
    return tid is None or any(t.pid == tid for t in scope)


def _split(ns: int) -> int | None:
    return ns if ns >= 0 else None


def _lock_doc(s) -> dict:
    doc = {"name": s.name, "type": s.type, "addr": f"{s.addr:#x}", "contentions": s.contentions,
           "wait_total_ns": s.wait_total_ns, "wait_max_ns": s.wait_max_ns, "wait_min_ns": s.wait_min_ns,
           "wait_avg_ns": round(s.wait_avg_ns), "spin_ns": s.spin_ns, "sleep_ns": s.sleep_ns,
           "blocked_ns": _split(s.blocked_ns), "runnable_ns": _split(s.runnable_ns),
           "callers": [{"caller": c.point, "contentions": c.count, "wait_total_ns": c.total_ns,
                        "estimated_ns": c.estimated_ns, "spin_ns": c.spin_ns, "blocked_ns": _split(c.blocked_ns),
                        "runnable_ns": _split(c.runnable_ns)} for c in s.callers],
           "tasks": [{"pid": t.pid} for t in s.tasks],
           "instances": [{"addr": f"{addr:#x}", "where": where, "wait_total_ns": ns} for addr, where, ns in s.instances],
           "is_lock": s.is_lock}
    if s.field:
        doc["field"] = s.field
    if s.is_futex:
        doc["timed_poll"] = s.timed_poll
        doc["futex_kind"] = s.futex_kind
    if s.owner:
        doc["owner"] = s.owner
    if s.is_futex:
        doc["process"] = {"pid": s.pid, "comm": s.comm}
        doc["function"] = s.function
    return doc


def _slab_doc(r) -> dict:
    pct = r.switch_pct
    return {"cache": r.cache, "aliases": list(r.aliases), "allocs": r.allocs, "frees": r.frees,
            "slow_signal": r.slow_signal, "method": r.method, "order": r.order, "objs_per_slab": r.objs_per_slab,
            "addr": f"{r.addr:#x}", "kmallocs": r.kmallocs, "cache_allocs": r.cache_allocs, "kfrees": r.kfrees,
            "cache_frees": r.cache_frees, "bytes_req": r.bytes_req, "bytes_alloc": r.bytes_alloc,
            "failed": r.failed, "slab_switches": r.slab_switches if r.slow_signal is not None else None,
            "switch_allocs": r.switch_allocs, "slab_switch_pct": round(pct, 3) if pct is not None else None,
            "sheaves": r.sheaf_capacity > 0, "sheaf_capacity": r.sheaf_capacity, "object_size": r.object_size,
            "objects": r.objects, "config": r.config, "allocs_at_exit": r.allocs_at_exit,
            "frees_at_exit": r.frees_at_exit,
            "list_lock": {"contentions": r.lock_contentions, "wait_total_ns": r.lock_wait_ns}}


def _latency(lat) -> dict:
    return {"avg_ns": round(lat.avg_ns), "p50_ns": lat.p50_ns, "p99_ns": lat.p99_ns, "count": lat.count,
            "hist_log2_ns": {str(k): v for k, v in sorted(lat.hist.items())}}


def _io_op_doc(o) -> dict:
    return {"op": o.op, "requests": o.requests, "requests_per_s": round(o.requests_per_s, 3), "bytes": o.bytes,
            "bytes_per_s": round(o.bytes_per_s, 3), "await_ns": round(o.await_.avg_ns), "timed": o.timed,
            "latency": {"await": _latency(o.await_), "queued": _latency(o.queued), "device": _latency(o.device_time)},
            "avg_size_bytes": round(o.avg_size), "size_hist_log2_bytes": {str(k): v for k, v in sorted(o.size_hist.items())},
            "unaccounted": o.unaccounted}


def _io_doc(model: Model, snap: Snapshot) -> dict:
    """Block devices per device and operation (the io group; empty when it did not run)."""
    devices = []
    for r in snap.io:
        s = r.saturation
        devices.append({
            "device": r.name, "dev": io_dev_text(r.dev), "requests_per_s": round(r.requests_per_s, 3),
            "bytes_per_s": round(r.bytes_per_s, 3),
            "util_pct": None if r.util_pct is None else round(r.util_pct, 3), "avg_inflight": round(r.avg_inflight, 4),
            "depth_at_issue_avg": round(r.depth_at_issue_avg, 3), "depth_p99": r.depth_p99,
            "depth_hist_log2": {str(k): v for k, v in sorted(r.depth_hist.items())},
            "saturation": {"verdict": s.verdict, "queued_avg_ns": round(s.queued_avg_ns),
                           "device_avg_ns": round(s.device_avg_ns), "reason": s.reason},
            "queue": r.queue, "io_wait_ns": r.io_wait_ns, "io_waits": r.io_waits,
            "submitters": [{"tgid": u.tgid, "comm": u.comm, "requests": u.requests, "bytes": u.bytes}
                           for u in r.submitters[:10]],
            "ops": [_io_op_doc(o) for o in r.ops]})
    return {"devices": devices, "bio_based": bio_based(devices_described(model)), "bios_counted": bios_counted(model)}


def _cause_device_doc(d) -> dict:
    return {"device": d.device, "op": d.op, "wait_ns": round(d.wait_ns), "count": round(d.count, 3),
            "request_avg_ns": round(d.request_avg_ns), "queued_avg_ns": round(d.queued_avg_ns),
            "device_avg_ns": round(d.device_avg_ns), "submitters": list(d.submitters)}


def _oncpu_doc(model: Model, scope: set[TaskId] | None) -> dict:
    """On-CPU samples: the sampling itself, top functions, category shares, threads. Empty lists
    and zeros when the oncpu group did not run (meta.probes.oncpu says why)."""
    summary = sampling_summary(model)
    doc = {"sample_hz": summary.sample_hz, "samples": summary.samples, "idle_samples": summary.idle_samples,
           "period_ns": summary.period_ns, "missed_samples": summary.missed_samples,
           "functions": [], "shares": {"slab_slow_path_pct": 0.0, "lock_spin_pct": 0.0}, "tasks": []}
    if not probe_ran(model):
        return doc
    doc["functions"] = [{"function": f.function, "kind": f.kind, "self_samples": f.self_samples,
                         "inclusive_samples": f.inclusive_samples, "self_pct": round(f.self_pct, 3)}
                        for f in top_functions(model, "self", scope, limit=50)]
    doc["shares"] = {f"{c}_pct": round(category_share(model, c, scope)[1], 3)
                     for c in ("slab_slow_path", "lock_spin")}
    doc["tasks"] = [{"pid": t.task.pid, "tgid": t.tgid, "comm": t.comm, "samples": t.samples, "oncpu_ns": t.oncpu_ns}
                    for t in task_oncpu(model, scope)]
    return doc


def _wakers(wakeups: list) -> list[dict]:
    """Who woke a task, heaviest first. An interrupt is one waker whatever task it landed on."""
    groups: dict[tuple, dict] = {}
    for w in wakeups:
        ctx = waker_context(w.waker.pid, w.waker_stack, w.in_interrupt)
        key = (ctx, w.waker.pid, w.waker_tgid) if ctx == "task" else (ctx, 0, 0)
        g = groups.setdefault(key, {"pid": key[1], "tgid": key[2], "comm": w.waker_comm if ctx == "task" else "",
                                    "context": ctx, "count": 0, "total_ns": 0})
        g["count"] += w.count
        g["total_ns"] += w.total_ns
    return sorted(groups.values(), key=lambda g: (-g["total_ns"], g["context"], g["pid"]))


def to_json(model: Model, scope: set[TaskId] | None = None) -> str:
    return json.dumps(to_json_doc(model, scope), sort_keys=True, indent=1) + "\n"


def to_folded(model: Model, scope: set[TaskId] | None = None) -> str:
    """`comm;user frames;kernel frames value_ns`, outermost first; kernel frames end in `_[k]`."""
    lines: dict[str, int] = {}
    for w in model.waits:
        if scope is not None and w.task not in scope:
            continue
        t = model.tasks.get(w.task)
        parts = [_folded_frame(t.info.comm if t else "?") or "?"]
        parts += [_folded_frame(x) for x in reversed(stack_texts(w.ustack))]
        parts += [_folded_frame(x) + "_[k]" for x in reversed(stack_texts(w.kstack))]
        if w.kstack is None:
            parts.append(_folded_frame(wait_cause(model, w)))
        key = ";".join(parts)
        lines[key] = lines.get(key, 0) + w.total_ns
    return "".join(f"{k} {v}\n" for k, v in sorted(lines.items()))


def to_folded_oncpu(model: Model, scope: set[TaskId] | None = None) -> str:
    """On-CPU samples as `comm;user frames;kernel frames count`, outermost first, kernel frames
    suffixed `_[k]`; the value is a sample count (multiply by meta's period for time)."""
    lines: dict[str, int] = {}
    for s in model.oncpu:
        if scope is not None and s.task not in scope:
            continue
        t = model.tasks.get(s.task)
        comm = t.info.comm if t and t.info.comm != "?" else s.comm
        parts = [_folded_frame(comm) or "?"]
        parts += [_folded_frame(x) for x in reversed(stack_texts(s.ustack))]
        parts += [_folded_frame(x) + "_[k]" for x in reversed(stack_texts(s.kstack))]
        if s.kstack is None and s.ustack is None:
            parts.append("(stack_not_collected)")
        key = ";".join(parts)
        lines[key] = lines.get(key, 0) + s.samples
    return "".join(f"{k} {v}\n" for k, v in sorted(lines.items()))


def _folded_frame(text: str) -> str:
    """A frame or name as one folded field: no separators, no control characters."""
    return printable(text.replace(";", ":").replace(" ", "_"), "_")
