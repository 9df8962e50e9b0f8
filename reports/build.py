"""The post-mortem's page data: one dict, built from the JSON export document (every number a table
shows for the whole recording is the export's), the per-interval series (a window's numbers) and the
flame graphs' stacks. `build` loads a recording; `assemble` is pure, so that any source of the three
(a snapshot of a live session, say) can feed the same page. `render` (reports/render.py) turns the
dict into HTML.

The dict has two parts: what the templates write (`page`: summary, fixes, tables) and what the page's
script reads (`script`: time series, each table row's per-interval parts, flame trees), which reaches
the page only as JSON. Deterministic: nothing depends on the time of building.
"""

from __future__ import annotations

import os
from typing import Iterable

from stallscope.analyzer.blockers import percentiles
from stallscope.analyzer.causes import CPU, IDLE
from stallscope.analyzer.export import JSON_VERSION, to_json_doc
from stallscope.analyzer.flame import offcpu_stacks, oncpu_stacks
from stallscope.analyzer.model import Model
from stallscope.analyzer.recommend import NOT_HELPFUL, RECOMMENDED, Thresholds
from stallscope.analyzer.sample import Interval, TaskId
from stallscope.analyzer.series import UNUSED_TABLES, Series, interval_series
from stallscope.analyzer.store import Recording
from stallscope.analyzer.units import fmt_ns
from stallscope.reports.flametree import build_tree
from stallscope.reports.redact import redact

# rows per table: the page stays small and fast; each table says how many it leaves out
LIMITS = {"processes": 100, "threads": 200, "locks": 100, "slab": 100, "functions": 50}
TOP_BLOCKERS = 5  # in the summary
CHART_CAUSES = 6  # causes drawn one by one in the waiting chart; the rest summed
# a window's tables are made of parts of at most this many spans of consecutive intervals (the charts keep
# every interval): a long recording's page stays small, and a window snaps to whole spans
MAX_SPANS = 120
CLASS_LABELS = {"blocker": "blocked", CPU: "waiting for a CPU", IDLE: "idle"}


def build(source, intervals: Iterable[Interval] | None = None, redacted: bool = False,
          file_name: str = "") -> dict:
    """The page data of a recording (`source` a path) or of a model (with the intervals it was built
    from, for the time series; without them the page has none)."""
    if isinstance(source, Model):
        model = source
        series = interval_series(model, intervals) if intervals is not None else None
    else:
        rec = Recording(source)
        try:
            model = Model.from_intervals(rec.meta, rec.intervals(), rec.tasks(), rec.stacks(),
                                         slab_caches=rec.slab_caches(), functions=rec.functions())
            series = interval_series(model, rec.intervals(without=UNUSED_TABLES))
        finally:
            rec.close()
        file_name = file_name or os.path.basename(source)
    return assemble(to_json_doc(model), series, offcpu_stacks(model), oncpu_stacks(model), redacted=redacted,
                    file_name=file_name)


def assemble(doc: dict, series: Series | None, offcpu, oncpu, redacted: bool = False, file_name: str = "") -> dict:
    """Page data from an export document, its series and its stacks (analyzer/flame.py)."""
    if doc.get("format") != "stallscope" or doc.get("version") != JSON_VERSION:
        raise ValueError(f"not a stallscope export document of version {JSON_VERSION}")
    tables = {
        "blockers": _blockers(doc),
        "processes": _processes(doc),
        "cgroups": _cgroups(doc),
        "threads": _threads(doc),
        "locks": _locks(doc),
        "slab": _slab(doc),
        "runq": _runq_hist(doc),
        "matrix": _matrix(doc),
        "functions": _functions(doc),
    }
    page = {
        "kind": "report",
        "export_version": JSON_VERSION,
        "file": file_name,
        "recording": _recording(doc),
        "summary": _summary(doc, tables),
        "fixes": _fixes(doc),
        "machine": _machine(doc),
        "probes": [{"group": g, **p} for g, p in sorted(doc["meta"]["probes"].items())],
        "loss": _loss(doc),
        "overhead": _overhead(doc),
        "tables": tables,
        "oncpu": {k: doc["oncpu"][k] for k in ("sample_hz", "samples", "idle_samples", "period_ns", "missed_samples",
                                               "shares")},
        "flame_notes": {"oncpu": bool(oncpu)},
    }
    script = {
        "kind": "report",
        "duration_ns": round(doc["meta"]["duration_s"] * 1e9),
        "series": _script_series(doc, series, tables) if series is not None and series.intervals else None,
        "flame": {"offcpu": _offcpu_tree(offcpu), "oncpu": _oncpu_tree(oncpu) if oncpu else None},
    }
    data = {"page": page, "script": script, "redacted": redacted}
    return redact(data, doc) if redacted else data


# ---- the whole recording: what the page says first ---------------------------------------------


def _recording(doc: dict) -> dict:
    meta = doc["meta"]
    command = meta["options"].get("command") or {}
    return {"host": meta["host"], "kernel": meta["kernel"], "cpus": meta["cpus"], "start_wall": meta["start_wall"],
            "end_wall": meta["start_wall"] + meta["duration_s"] if meta["start_wall"] else 0,
            "duration_s": meta["duration_s"], "intervals": meta["intervals"], "interval_s": meta["interval_s"],
            "version": meta["stallscope_version"], "command": list(command.get("argv") or []),
            "exit_status": command.get("exit_status"), "pid_filter": meta["options"].get("pid") or 0,
            "switches": meta["switches"], "switches_per_s": meta["switches_per_s"],
            "switches_kernel": meta["switches_kernel"], "shares": meta["shares"]}


def _blocker_sentence(b: dict, duration_s: float) -> dict:
    """What a reader takes from one blocker: how much, how often, how long, who held it up."""
    held = b["held_up_by"]
    by = ([f"{h['task']} ({h['involuntary_switches']:,} preemptions)" for h in held["hogs"]]
          or [f"{w['waker']} ({w['count']:,} wakeups)" for w in held["wakers"]]
          or [f"owner {o}" for o in held["owners"]])
    root = next((r for r in b["roots"] if r["root"] != b["cause"]), None)
    return {"cause": b["cause"], "class": b["class"], "total_ns": b["total_ns"], "share_pct": b["share_pct"],
            "per_s_ns": b["total_ns"] / duration_s if duration_s else 0, "count": b["count"],
            "p99_ns": b["latency"].get("p99_ns"), "max_ns": b["max_ns"], "held_up_by": by[:2],
            "tasks": sorted({t["comm"] for t in b["tasks"]})[:4], "ntasks": len(b["tasks"]),
            "root": root["root"] if root else "", "root_share_pct": root["share_pct"] if root else None,
            "estimated_ns": b["estimated_ns"], "method": b["method"]}


def _summary(doc: dict, tables: dict) -> dict:
    meta = doc["meta"]
    blockers = [b for b in doc["blockers"] if b["class"] != IDLE][:TOP_BLOCKERS]
    recs = doc["recommendations"]
    sig = doc["signals"]
    return {"blockers": [_blocker_sentence(b, meta["duration_s"]) for b in blockers],
            "waiting_ns": meta["shares"]["waiting_ns"], "blocked_ns": meta["shares"]["blocked_ns"],
            "runq_ns": meta["shares"]["runq_ns"], "idle_ns": meta["shares"]["idle_ns"],
            "needs_tuning": sum(1 for r in recs if r["status"] == RECOMMENDED),
            "cannot_help": sum(1 for r in recs if r["status"] != RECOMMENDED),
            "signals": sig, "locks": len(tables["locks"]["rows"]),
            "lost": [x for x in _loss(doc) if x["loss"]]}


# PowerTOP's three lists. What each rule checked when it found nothing, from its thresholds.
def _already_good(doc: dict) -> list[dict]:
    th = Thresholds()
    probes = doc["meta"]["probes"]
    kinds = {r["kind"] for r in doc["recommendations"]}
    machine = doc["meta"]["machine"] or {}
    checks = [
        ("pin", f"no thread migrates {th.migrations_per_s:g} times a second or more (over at least "
                f"{th.min_migrations} migrations)", bool((machine.get("topology") or {}).get("cpus")),
         "the recording has no CPU topology"),
        ("priority", f"no thread waits for a CPU with a wakeup-to-run p99 of {fmt_ns(th.runq_p99_ns)} or more and "
                     f"{th.runq_p99_over_burst:g} times what it runs each time", True, ""),
        ("cpu", f"tasks waiting for a CPU stay under {th.cpu_bound_waiting_per_cpu:g} per CPU on average", True, ""),
        ("lock", f"no lock is waited on {fmt_ns(th.lock_wait_per_s_ns)} per second or more over "
                 f"{th.lock_min_contentions} contentions", _ran(probes, "locks") or _ran(probes, "futex"),
         "recorded without the locks and futex groups"),
        ("io", f"no I/O wait of {fmt_ns(th.io_wait_per_s_ns)} per second or more", True, ""),
        ("slub", f"no slab cache with {th.slab_allocs_per_s:,.0f} allocations a second, {th.slab_switch_pct:g}% "
                 "CPU-slab switches and list_lock waits or a busy slow path", _ran(probes, "slab"),
         "recorded without the slab group (--probes +slab)"),
        ("sched_knob", f"migrations stay under {th.migrations_per_s * 10:g} a second per CPU machine-wide",
         bool(machine.get("sched_knobs")), "the recording has no scheduler knobs"),
    ]
    return [{"kind": kind, "text": text if checked else why, "checked": checked}
            for kind, text, checked, why in checks if kind not in kinds]


def _ran(probes: dict, group: str) -> bool:
    p = probes.get(group)
    return bool(p and p["enabled"])


def _fixes(doc: dict) -> dict:
    tuning, manual = [], []
    for r in doc["recommendations"]:
        if r["status"] == RECOMMENDED and r["runtime"]:
            tuning.append(r)
        else:
            manual.append({**r, "why": ("cannot help on this machine" if r["status"] == NOT_HELPFUL else
                                        "a change of code or configuration" if not r["command"] else
                                        "a boot-time change or a command to run yourself")})
    checks = _already_good(doc)
    return {"needs_tuning": tuning, "manual": manual, "good": [c for c in checks if c["checked"]],
            "unchecked": [c for c in checks if not c["checked"]]}


def _machine(doc: dict) -> dict:
    machine = doc["meta"]["machine"] or {}
    topo = machine.get("topology") or {}
    cpus = topo.get("cpus") or {}
    llcs = sorted({tuple(c.get("llc") or []) for c in cpus.values()})
    cores = sorted({(c.get("package"), c.get("core")) for c in cpus.values()})
    nodes = sorted({c.get("node") for c in cpus.values()})
    slab = (doc["meta"]["options"].get("slab") or {}).get("boot") or {}
    return {"arch": machine.get("arch", ""), "kernel_release": machine.get("kernel_release", ""),
            "online": len(topo.get("online") or []) or doc["meta"]["cpus"],
            "cores": len(cores), "llcs": [list(g) for g in llcs], "nodes": len(nodes),
            "smt": any(len(c.get("siblings") or []) > 1 for c in cpus.values()),
            "busy": sorted(((int(c), p) for c, p in (machine.get("cpu_busy_pct") or {}).items())),
            "knobs": [{"name": k, "value": v.get("value", ""), "stable": v.get("stable", False)}
                      for k, v in sorted((machine.get("sched_knobs") or {}).items())],
            "slab_boot": {k: v for k, v in sorted(slab.items()) if k != "cmdline"},
            "slab_cmdline": dict(sorted((slab.get("cmdline") or {}).items())),
            "cpu_side": doc["signals"].get("cpu_side") or {}}


# health counters that mean data was lost or is wrong (docs/export.md, meta.health); the others count
# how the probes worked (waits drawn, wakeups matched late)
_LOSS_MARKS = ("map_full", "errors", "overflow", "switch_out_open", "close_without_start", "invariant.", "unresolved")


def _loss(doc: dict) -> list[dict]:
    return [{"counter": k, "value": v, "loss": any(m in k for m in _LOSS_MARKS)}
            for k, v in sorted(doc["meta"]["health"].items()) if v]


def _overhead(doc: dict) -> dict:
    o = doc["meta"]["overhead"]
    programs = sorted(o["bpf_programs"].items(), key=lambda kv: (-kv[1]["run_time_ns"], kv[0]))
    return {**{k: v for k, v in o.items() if k != "bpf_programs"},
            "programs": [{"name": n, **p} for n, p in programs]}


# ---- tables: whole-recording rows from the export ----------------------------------------------


def _blockers(doc: dict) -> dict:
    secs = doc["meta"]["duration_s"] or 1.0
    rows = []
    for b in doc["blockers"]:
        rows.append({"cause": b["cause"], "class": b["class"], "total_ns": b["total_ns"],
                     "per_s_ns": b["total_ns"] / secs, "share_pct": b["share_pct"], "count": b["count"],
                     "max_ns": b["max_ns"], "p50_ns": b["latency"].get("p50_ns"), "p90_ns": b["latency"].get("p90_ns"),
                     "p99_ns": b["latency"].get("p99_ns"), "estimated_ns": b["estimated_ns"],
                     "error_ns": b["estimated_error_ns"], "method": b["method"], "frame": b["frame"],
                     "tasks": sorted({t["comm"] for t in b["tasks"]}), "ntasks": len(b["tasks"]),
                     "stack": b["stack"], "held_up_by": b["held_up_by"],
                     "roots": [{"root": r["root"], "share_pct": r["share_pct"], "chain": r["chain"]} for r in b["roots"]]})
    return {"rows": rows, "total": len(rows)}


def _own(doc: dict) -> set[tuple[int, int]]:
    return {(t["pid"], t["start_time_ns"]) for t in doc["tasks"] if t.get("stallscope")}


def _task_waits(t: dict) -> tuple[int, int, int]:
    """(blocked outside idle causes, waiting for a CPU, idle) of one export task."""
    blocked = cpu = idle = 0
    for c in t["causes"]:
        if c["class"] == IDLE:
            idle += c["total_ns"]
        elif c["class"] == CPU:
            cpu += c["total_ns"]
        else:
            blocked += c["total_ns"]
    return blocked, cpu, idle


def _threads(doc: dict) -> dict:
    rows = []
    for t in doc["tasks"]:
        if t.get("stallscope"):
            continue
        blocked, cpu, idle = _task_waits(t)
        top = [c for c in t["causes"] if c["class"] != IDLE][:2]
        rows.append({"pid": t["pid"], "start_time_ns": t["start_time_ns"], "tgid": t["tgid"], "comm": t["comm"],
                     "waiting_ns": blocked + cpu, "blocked_ns": blocked, "runq_wait_ns": t["runq_wait_ns"],
                     "idle_ns": idle, "offcpu_ns": t["offcpu_ns"], "run_ns": t["run_ns"],
                     "voluntary_switches": t["voluntary_switches"], "involuntary_switches": t["involuntary_switches"],
                     "migrations": t["migrations"], "policy": t["policy"], "nice": t["nice"], "exited": t["exited"],
                     "causes": [{"cause": c["cause"], "class": c["class"], "total_ns": c["total_ns"]} for c in top]})
    rows.sort(key=lambda r: (-r["waiting_ns"], -r["offcpu_ns"], r["pid"], r["start_time_ns"]))
    return {"rows": rows[:LIMITS["threads"]], "total": len(rows)}


def _processes(doc: dict) -> dict:
    procs: dict[int, dict] = {}
    for t in doc["tasks"]:
        if t.get("stallscope"):
            continue
        p = procs.setdefault(t["tgid"], {"tgid": t["tgid"], "comm": "", "threads": 0, "waiting_ns": 0, "blocked_ns": 0,
                                         "runq_wait_ns": 0, "idle_ns": 0, "run_ns": 0, "migrations": 0,
                                         "switches": 0, "causes": {}})
        if t["pid"] == t["tgid"] or not p["comm"]:
            p["comm"] = t["comm"]
        blocked, cpu, idle = _task_waits(t)
        p["threads"] += 1
        p["waiting_ns"] += blocked + cpu
        p["blocked_ns"] += blocked
        p["runq_wait_ns"] += t["runq_wait_ns"]
        p["idle_ns"] += idle
        p["run_ns"] += t["run_ns"]
        p["migrations"] += t["migrations"]
        p["switches"] += t["voluntary_switches"] + t["involuntary_switches"]
        for c in t["causes"]:
            if c["class"] != IDLE:
                e = p["causes"].setdefault(c["cause"], [c["class"], 0])
                e[1] += c["total_ns"]
    rows = []
    for p in procs.values():
        causes = sorted(p.pop("causes").items(), key=lambda kv: (-kv[1][1], kv[0]))[:3]
        rows.append({**p, "causes": [{"cause": c, "class": cls, "total_ns": ns} for c, (cls, ns) in causes]})
    rows.sort(key=lambda r: (-r["waiting_ns"], -r["idle_ns"], r["tgid"]))
    return {"rows": rows[:LIMITS["processes"]], "total": len(rows)}


def _cgroups(doc: dict) -> dict:
    """Blocked time by cgroup (idle causes left out), as the export has it."""
    rows = [{"cgroup": c["cgroup"], "total_ns": c["total_ns"], "max_ns": c["max_ns"], "causes": c["causes"][:3]}
            for c in doc.get("cgroups") or []]
    return {"rows": rows[:LIMITS["processes"]], "total": len(rows)}


def _locks(doc: dict) -> dict:
    rows = []
    for s in doc["locks"]:
        kind = ("poll" if s.get("timed_poll") else s.get("futex_kind", "")) if s["type"] == "futex" else ""
        rows.append({"name": s["name"], "type": s["type"] + (f":{kind}" if kind else ""), "lock_type": s["type"],
                     "contentions": s["contentions"], "wait_total_ns": s["wait_total_ns"],
                     "wait_max_ns": s["wait_max_ns"], "wait_min_ns": s["wait_min_ns"], "wait_avg_ns": s["wait_avg_ns"],
                     "spin_ns": s["spin_ns"], "blocked_ns": s["blocked_ns"], "runnable_ns": s["runnable_ns"],
                     "sleep_ns": s["sleep_ns"], "callers": s["callers"][:5], "owner": s.get("owner", ""),
                     "instances": s["instances"], "ntasks": len(s["tasks"]),
                     "process": s.get("process")})
    return {"rows": rows[:LIMITS["locks"]], "total": len(rows)}


def _slab(doc: dict) -> dict:
    rows = [{"cache": r["cache"], "addr": r["addr"], "aliases": r["aliases"], "objects": r["objects"],
             "allocs": r["allocs"], "frees": r["frees"], "bytes_alloc": r["bytes_alloc"], "failed": r["failed"],
             "slow_signal": r["slow_signal"], "slab_switch_pct": r["slab_switch_pct"], "method": r["method"],
             "order": r["order"], "objs_per_slab": r["objs_per_slab"], "object_size": r["object_size"],
             "sheaves": r["sheaves"], "lock_contentions": r["list_lock"]["contentions"],
             "lock_wait_ns": r["list_lock"]["wait_total_ns"]} for r in doc["slab"]]
    ran = _ran(doc["meta"]["probes"], "slab")
    return {"rows": rows[:LIMITS["slab"]], "total": len(rows), "ran": ran,
            "reason": doc["meta"]["probes"].get("slab", {}).get("reason", "")}


def _hist_rows(hist: dict[int, int]) -> list[dict]:
    total = sum(hist.values())
    rows, seen = [], 0
    for slot in sorted(hist):
        seen += hist[slot]
        rows.append({"slot": slot, "from_ns": 2 ** slot, "to_ns": 2 ** (slot + 1), "count": hist[slot],
                     "pct": 100.0 * hist[slot] / total if total else 0.0,
                     "cum_pct": 100.0 * seen / total if total else 0.0})
    return rows


def _runq_hist(doc: dict) -> dict:
    """Wakeup-to-run latency of every task but stallscope's own, from the export's per-task histograms."""
    hist: dict[int, int] = {}
    for t in doc["tasks"]:
        if t.get("stallscope"):
            continue
        for slot, c in t["runq_hist_log2_ns"].items():
            hist[int(slot)] = hist.get(int(slot), 0) + c
    longest = max((t["runq_max_ns"] for t in doc["tasks"] if not t.get("stallscope")), default=0)
    return {"rows": _hist_rows(hist), "total": sum(hist.values()), "percentiles": percentiles(hist, longest),
            "max_ns": longest}


def _matrix(doc: dict) -> dict:
    m = doc["migrations"]["matrix"]
    peak = max((v for row in m for v in row), default=0)
    return {"matrix": m, "total": doc["migrations"]["total"], "peak": peak,
            "levels": [[_heat(v, peak) for v in row] for row in m],
            "row_totals": [sum(r) for r in m], "col_totals": [sum(c) for c in zip(*m)] if m else []}


def _heat(v: int, peak: int) -> int:
    """A heat level 0..8 for a CSS class: the page sets no inline style (its CSP allows none)."""
    if not v or not peak:
        return 0
    return max(1, min(8, round(8 * v / peak)))


def _functions(doc: dict) -> dict:
    o = doc["oncpu"]
    return {"rows": o["functions"][:LIMITS["functions"]], "total": len(o["functions"]), "tasks": o["tasks"][:20],
            "ran": _ran(doc["meta"]["probes"], "oncpu"), "samples": o["samples"] - o["idle_samples"]}


# ---- what the page's script reads ----------------------------------------------------------------


def chart_value(v: float, digits: int = 4) -> float:
    """A chart value to `digits` significant digits: plenty for a line, and a smaller page."""
    if not v:
        return 0
    return float(f"{v:.{digits}g}")


def _sparse(parts: dict[int, list]) -> dict:
    """A row's per-interval parts as {"i": [intervals, in order], "v": [[values], ...]}."""
    idx = sorted(parts)
    return {"i": idx, "v": [[round(v, 3) if isinstance(v, float) else v for v in parts[i]] for i in idx]}


def _script_series(doc: dict, s: Series, tables: dict) -> dict:
    secs = [d / 1e9 for d in s.duration_ns]
    start = [round(x / 1e9, 3) for x in s.start_ns]

    def per_s(values) -> list[float]:
        return [chart_value(v / d) if d else 0 for v, d in zip(values, secs)]

    def ratio(values) -> list[float]:  # ns per ns: seconds per second, tasks on average
        return [chart_value(v / dn) if dn else 0 for v, dn in zip(values, s.duration_ns)]

    blockers = tables["blockers"]["rows"]
    shown = [b["cause"] for b in blockers if b["class"] != IDLE][:CHART_CAUSES]
    cause_lines = []
    for name in shown:
        cs = s.causes.get(name)
        cause_lines.append({"name": name, "class": next(b["class"] for b in blockers if b["cause"] == name),
                            "values": ratio([cs.ns.get(i, 0) if cs else 0 for i in range(s.intervals)])})
    rest_blocked = [sum(c.ns.get(i, 0) for n, c in s.causes.items() if n not in shown and c.cls != IDLE)
                    for i in range(s.intervals)]
    idle = [sum(c.ns.get(i, 0) for c in s.causes.values() if c.cls == IDLE) for i in range(s.intervals)]
    if any(rest_blocked):
        cause_lines.append({"name": "other causes", "class": "blocker", "values": ratio(rest_blocked)})
    cause_lines.append({"name": "idle (not waiting)", "class": IDLE, "values": ratio(idle)})
    runq_p99 = []
    for h in s.runq_hist:
        p = percentiles({k: v for k, v in h.items()}, 0, (0.99,))
        runq_p99.append(p.get("p99_ns", 0) / 1e6)
    charts = {
        "t": start,
        "cs_per_s": per_s(s.switches),
        "runnable": ratio([r + q for r, q in zip(s.run_ns, s.runq_ns)]),
        "waiting": ratio(s.runq_ns),
        "runq_p99_ms": runq_p99,
        "migrations_per_s": per_s(s.migrations),
        "lock_wait": ratio(s.lock_wait_ns),
        "causes": cause_lines,
    }
    return {"start_s": start, "duration_s": [round(x, 6) for x in secs], "charts": charts,
            "window": _window_parts(s, tables)}


def _spans(parts: dict[int, list], k: int, how: str = "sum") -> dict[int, list]:
    """Per-interval parts summed (or, `how` "max", maximised) over spans of `k` intervals."""
    if k == 1:
        return parts
    out: dict[int, list] = {}
    for i, values in parts.items():
        e = out.get(i // k)
        if e is None:
            out[i // k] = list(values)
        else:
            for j, v in enumerate(values):
                e[j] = max(e[j], v) if how == "max" else e[j] + v
    return out


def _window_parts(s: Series, tables: dict) -> dict:
    """Each table row's parts per span of intervals, aligned with the rows the page shows (data-i)."""
    n = s.intervals
    k = -(-n // MAX_SPANS)  # ceil
    nspans = -(-n // k)

    def sparse(parts: dict[int, list]) -> dict:
        return _sparse(_spans(parts, k))

    causes = []
    for b in tables["blockers"]["rows"]:
        cs = s.causes.get(b["cause"])
        if cs is None:
            causes.append(None)
            continue
        ns = _spans({i: [v] for i, v in cs.ns.items()}, k)
        count = _spans({i: [v] for i, v in cs.count.items()}, k)
        longest = _spans({i: [v] for i, v in cs.max_ns.items()}, k, "max")
        hist: dict[int, dict[int, float]] = {}
        for i, h in cs.hist.items():
            acc = hist.setdefault(i // k, {})
            for slot, c in h.items():
                acc[slot] = acc.get(slot, 0) + c
        idx = sorted(set(ns) | set(count) | set(hist))
        causes.append({"i": idx, "ns": [round(ns.get(j, [0])[0]) for j in idx],
                       "n": [round(count.get(j, [0])[0], 3) for j in idx],
                       "max": [longest.get(j, [0])[0] for j in idx],
                       "h": [[x for slot, c in sorted(hist.get(j, {}).items()) if c for x in (slot, round(c, 3))]
                             for j in idx]})
    threads = [sparse(s.tasks.get(TaskId(r["pid"], r["start_time_ns"]), {})) for r in tables["threads"]["rows"]]
    cause_names = sorted(s.causes)
    cause_index = {c: i for i, c in enumerate(cause_names)}
    processes = []
    for r in tables["processes"]["rows"]:
        pc = s.process_causes.get(r["tgid"], {})
        processes.append({str(cause_index[c]): _sparse({j: [round(v[0])] for j, v in
                                                        _spans({i: [ns] for i, ns in parts.items()}, k).items()})
                          for c, parts in sorted(pc.items())})
    locks = [sparse(s.locks.get((r["name"], r["lock_type"]), {})) for r in tables["locks"]["rows"]]
    slab = [sparse(s.slab.get(int(r["addr"], 16), {})) for r in tables["slab"]["rows"]]
    functions = [sparse(s.functions.get((r["function"], r["kind"]), {})) for r in tables["functions"]["rows"]]
    runq_spans: dict[int, dict[int, int]] = {}
    for i, h in enumerate(s.runq_hist):
        acc = runq_spans.setdefault(i // k, {})
        for slot, c in h.items():
            acc[slot] = acc.get(slot, 0) + c
    runq = {"i": [j for j in range(nspans) if runq_spans.get(j)],
            "h": [[x for slot, c in sorted(runq_spans[j].items()) for x in (slot, c)]
                  for j in range(nspans) if runq_spans.get(j)]}
    matrix_spans: dict[int, dict[tuple[int, int], int]] = {}
    for i, m in enumerate(s.matrix):
        acc = matrix_spans.setdefault(i // k, {})
        for src, dst, c in m:
            acc[(src, dst)] = acc.get((src, dst), 0) + c
    matrix = {"i": [j for j in range(nspans) if matrix_spans.get(j)],
              "m": [[x for (src, dst), c in sorted(matrix_spans[j].items()) for x in (src, dst, c)]
                    for j in range(nspans) if matrix_spans.get(j)]}
    samples = [sum(s.oncpu_samples[j * k:(j + 1) * k]) for j in range(nspans)]
    return {"span": k, "spans": nspans, "causes": causes, "cause_names": cause_names,
            "cause_classes": [s.causes[c].cls for c in cause_names], "threads": threads, "processes": processes,
            "locks": locks, "slab": slab, "functions": functions, "runq": runq, "matrix": matrix,
            "oncpu_samples": samples}


def _offcpu_tree(stacks) -> dict:
    classes = {st.cause: st.cls for st in stacks}
    return build_tree(((st.frames, {st.cls: st.value_ns}, st.cause) for st in stacks), ("blocker", CPU, IDLE),
                      classes)


def _oncpu_tree(stacks) -> dict:
    return build_tree(((st.frames, {"oncpu": st.value_ns}, None) for st in stacks), ("oncpu",))
