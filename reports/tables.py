"""The report's tables for the whole recording, row by row from the JSON export document: each number
a table shows is the export's (a test reads the page back and compares)."""

from __future__ import annotations

from stallscope.analyzer.blockers import percentiles
from stallscope.analyzer.causes import CPU, IDLE
from stallscope.analyzer.chains import MAX_DEPTH, depth_note
from stallscope.analyzer.data_loss import totals_kept
from stallscope.analyzer.locks import instance_where
from stallscope.analyzer.signals import tasks_waiting
from stallscope.analyzer.units import log2_bounds

# rows per table: the page stays small and fast; each table says how many it leaves out
LIMITS = {"processes": 100, "threads": 200, "locks": 100, "slab": 100, "functions": 50}


def whole_tables(doc: dict) -> dict:
    return {"blockers": _blockers(doc), "processes": _processes(doc), "cgroups": _cgroups(doc),
            "threads": _threads(doc), "locks": _locks(doc), "slab": _slab(doc), "runq": _runq_hist(doc),
            "matrix": _matrix(doc), "functions": _functions(doc), "io": _io(doc), "cpus": _cpus(doc)}


def ran(probes: dict, group: str) -> bool:
    p = probes.get(group)
    return bool(p and p["enabled"])


def loss(doc: dict) -> list[dict]:
    """The health counters that are not zero, each marked as data_loss says it (the export's meta `data_loss`, the
    lines the text commands print): `loss` "lost" where events or totals went, "kept" where every total stays
    exact (a stack, a waker, a wait's time taken from its task's own counters: data_loss.TOTALS_KEPT), "" where
    the counter describes how the probes worked; with what each lost count is, in words."""
    losses = {x["key"]: x for x in doc["meta"].get("data_loss", [])}
    health = {k: v for k, v in doc["meta"]["health"].items() if v}
    for key, x in losses.items():  # a program's recursion misses are counted apart from meta.health
        health.setdefault(key, x["count"])
    rows = []
    for key, value in sorted(health.items()):
        x = losses.get(key)
        kind = "" if x is None else "kept" if totals_kept(key) else "lost"
        rows.append({"counter": key, "value": value, "loss": kind, "what": x["what"] if x else "",
                     "remedy": x["remedy"] if x else ""})
    return rows


def waiter_names(b: dict) -> list[tuple[str, int]]:
    """A blocker's waiters by name, the name whose tasks waited most first, each with its number of tasks
    (an export without `waiters`: its tasks' names in the order of their tasks, the heaviest first)."""
    if "waiters" in b:
        return [(w["name"], w["tasks"]) for w in b["waiters"]]
    counts: dict[str, int] = {}
    for t in b["tasks"]:
        counts[t["comm"]] = counts.get(t["comm"], 0) + 1
    return list(counts.items())


def _blockers(doc: dict) -> dict:
    secs = doc["meta"]["duration_s"] or 1.0
    rows = []
    for b in doc["blockers"]:
        rows.append({"cause": b["cause"], "class": b["class"], "total_ns": b["total_ns"],
                     "per_s_ns": b["total_ns"] / secs, "share_pct": b["share_pct"], "count": b["count"],
                     "max_ns": b["max_ns"] or None, "p50_ns": b["latency"].get("p50_ns"), "p90_ns": b["latency"].get("p90_ns"),
                     "p99_ns": b["latency"].get("p99_ns"), "estimated_ns": b["estimated_ns"],
                     "error_ns": b["estimated_error_ns"], "method": b["method"], "frame": b["frame"],
                     "tasks": [name for name, _n in waiter_names(b)], "ntasks": len(b["tasks"]),
                     "stack": b["stack"], "held_up_by": b["held_up_by"], "devices": b.get("devices", []),
                     "roots": [{"root": r["root"], "share_pct": r["share_pct"], "chain": r["chain"]} for r in b["roots"]]})
    # where the wait chains were followed less deep than they are (analyzer/chains.py), it says so
    return {"rows": rows, "total": len(rows), "roots_note": depth_note(doc.get("roots_depth", MAX_DEPTH))}


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
    waited, quiet, idly = _quiet_apart(rows, "pid")
    return {"rows": waited[:LIMITS["threads"]], "total": len(waited), "quiet": quiet, "quiet_count": idly}


def _quiet_apart(rows: list[dict], id_key: str) -> tuple[list[dict], list[str], int]:
    """The rows that waited (blocked outside idle causes, or for a CPU), and the names of those that only waited idly
    (a machine's dozens of sleeping kernel threads, or a pool's thousands of idle threads): these are named after
    their table rather than made rows of zeros a reader scrolls past, and no window of the recording has them wait
    either. A name alone is `comm[id]`; one that several share, `comm ×N`; in the order of their first ids. With
    how many only waited idly."""
    idle = sorted((r for r in rows if not r["waiting_ns"]), key=lambda r: r[id_key])
    quiet: dict[str, list[int]] = {}
    for r in idle:
        quiet.setdefault(r["comm"], []).append(r[id_key])
    return ([r for r in rows if r["waiting_ns"]],
            [f"{comm}[{ids[0]}]" if len(ids) == 1 else f"{comm} ×{len(ids):,}" for comm, ids in quiet.items()],
            len(idle))


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
    waited, quiet, idly = _quiet_apart(rows, "tgid")
    return {"rows": waited[:LIMITS["processes"]], "total": len(waited), "quiet": quiet, "quiet_count": idly}


def _cgroups(doc: dict) -> dict:
    """Blocked time by cgroup (idle causes left out), as the export has it."""
    rows = [{"cgroup": c["cgroup"], "total_ns": c["total_ns"], "max_ns": c["max_ns"], "causes": c["causes"][:3]}
            for c in doc.get("cgroups") or []]
    return {"rows": rows[:LIMITS["processes"]], "total": len(rows)}


def _locks(doc: dict) -> dict:
    """lock_stat's rows, the locks first: then the futex waits that are not for a lock (`is_lock` false: a
    poll, an event, a join), as `stallscope locks` lists them."""
    rows = []
    for s in sorted(doc["locks"], key=lambda s: not s["is_lock"]):
        kind = ("poll" if s.get("timed_poll") else s.get("futex_kind", "")) if s["type"] == "futex" else ""
        rows.append({"name": s["name"], "type": s["type"] + (f":{kind}" if kind else ""), "lock_type": s["type"],
                     "contentions": s["contentions"], "wait_total_ns": s["wait_total_ns"],
                     "wait_max_ns": s["wait_max_ns"], "wait_min_ns": s["wait_min_ns"], "wait_avg_ns": s["wait_avg_ns"],
                     "spin_ns": s["spin_ns"], "blocked_ns": s["blocked_ns"], "runnable_ns": s["runnable_ns"],
                     "sleep_ns": s["sleep_ns"], "callers": s["callers"][:5], "owner": s.get("owner", ""),
                     "instances": [{**i, "where": instance_where(s["name"], i["where"])} for i in s["instances"]],
                     "ntasks": len(s["tasks"]),
                     "process": s.get("process"), "is_lock": s["is_lock"]})
    return {"rows": rows[:LIMITS["locks"]], "total": len(rows)}


def _slab(doc: dict) -> dict:
    rows = [{"cache": r["cache"], "addr": r["addr"], "aliases": r["aliases"], "objects": r["objects"],
             "allocs": r["allocs"], "frees": r["frees"], "bytes_alloc": r["bytes_alloc"], "failed": r["failed"],
             "slow_signal": r["slow_signal"], "slab_switch_pct": r["slab_switch_pct"], "method": r["method"],
             "order": r["order"], "objs_per_slab": r["objs_per_slab"], "object_size": r["object_size"],
             "sheaves": r["sheaves"], "lock_contentions": r["list_lock"]["contentions"],
             "lock_wait_ns": r["list_lock"]["wait_total_ns"]} for r in doc["slab"]]
    return {"rows": rows[:LIMITS["slab"]], "total": len(rows), "ran": ran(doc["meta"]["probes"], "slab"),
            "reason": doc["meta"]["probes"].get("slab", {}).get("reason", "")}


def _io(doc: dict) -> dict:
    """Block devices, one row per device and operation group (the export's `io`), most requests first."""
    io = doc.get("io") or {"devices": [], "bio_based": []}
    rows = []
    for d in io["devices"]:
        for o in d["ops"]:
            lat = o["latency"]
            rows.append({"device": d["device"], "dev": d["dev"], "op": o["op"], "requests": o["requests"],
                         "requests_per_s": o["requests_per_s"], "bytes_per_s": o["bytes_per_s"],
                         "avg_size_bytes": o["avg_size_bytes"], "await_ns": o["await_ns"],
                         "await_p50_ns": lat["await"]["p50_ns"], "await_p99_ns": lat["await"]["p99_ns"],
                         "queued_ns": lat["queued"]["avg_ns"], "device_ns": lat["device"]["avg_ns"],
                         "device_p99_ns": lat["device"]["p99_ns"], "timed": o["timed"],
                         "sizes": _size_rows(o["size_hist_log2_bytes"])})
    devices = [{"device": d["device"], "dev": d["dev"], "util_pct": d["util_pct"], "avg_inflight": d["avg_inflight"],
                "depth_p99": d["depth_p99"], "saturation": d["saturation"], "queue": d["queue"],
                "io_wait_ns": d["io_wait_ns"], "io_waits": d["io_waits"], "submitters": d["submitters"][:5],
                "requests_per_s": d["requests_per_s"], "bytes_per_s": d["bytes_per_s"]} for d in io["devices"]]
    return {"rows": rows, "total": len(rows), "devices": devices,
            "bio_uncounted": [] if io.get("bios_counted") else io["bio_based"],
            "ran": ran(doc["meta"]["probes"], "io")}


def _size_rows(hist: dict[str, int]) -> list[dict]:
    """A request size histogram's buckets holding 1% or more of the requests, largest share first."""
    total = sum(hist.values())
    rows = [{"from_bytes": 2 ** int(k), "to_bytes": 2 ** (int(k) + 1), "pct": 100.0 * n / total}
            for k, n in hist.items() if total and n * 100 >= total]
    return sorted(rows, key=lambda r: (-r["pct"], r["from_bytes"]))[:4]


def _hist_rows(hist: dict[int, int]) -> list[dict]:
    total = sum(hist.values())
    rows, seen = [], 0
    for slot in sorted(hist):
        seen += hist[slot]
        lower, upper = log2_bounds(slot)
        rows.append({"slot": slot, "from_ns": lower, "to_ns": upper, "count": hist[slot],
                     "pct": 100.0 * hist[slot] / total if total else 0.0,
                     "cum_pct": 100.0 * seen / total if total else 0.0})
    return rows


def _runq_hist(doc: dict) -> dict:
    """Wakeup-to-run latency of every task but stallscope's own, from the export's per-task histograms."""
    by_text: dict[str, int] = {}  # summed by the slots' text, each read as a number once
    for t in doc["tasks"]:
        if t.get("stallscope"):
            continue
        for slot, c in t["runq_hist_log2_ns"].items():
            by_text[slot] = by_text.get(slot, 0) + c
    hist: dict[int, int] = {}
    for slot, c in by_text.items():
        hist[int(slot)] = hist.get(int(slot), 0) + c
    longest = max((t["runq_max_ns"] for t in doc["tasks"] if not t.get("stallscope")), default=0)
    return {"rows": _hist_rows(hist), "total": sum(hist.values()), "percentiles": percentiles(hist, longest),
            "max_ns": longest}


def _cpus(doc: dict) -> list[dict]:
    """Each CPU's run queue over the recording: the tasks waiting in it on average and their waits (none in a
    recording made before they were kept)."""
    secs = doc["meta"]["duration_s"] or 1.0
    if not any(c.get("runq_waits") is not None for c in doc.get("cpus", ())):
        return []
    return [{"cpu": c["cpu"], "busy_pct": c["busy_pct"], "waiting": round(tasks_waiting(c["runq_wait_ns"], secs), 2),
             "waits": c["runq_waits"], "avg_ns": c["runq_wait_ns"] / c["runq_waits"] if c["runq_waits"] else None}
            for c in doc["cpus"]]


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
            "ran": ran(doc["meta"]["probes"], "oncpu"), "samples": o["samples"] - o["idle_samples"]}
