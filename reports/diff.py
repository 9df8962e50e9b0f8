"""The diff report's page data: what got worse between two recordings, ranked as `stallscope diff`
ranks it (its JSON document's numbers), the two recordings' figures side by side, a differential
flame graph (each stack's off-CPU time per second of its own recording), and the two runs over time.
"""

from __future__ import annotations

import os

from stallscope.analyzer.causes import IDLE
from stallscope.analyzer.diff import NoiseGuard, diff
from stallscope.analyzer.export import to_json_doc
from stallscope.analyzer.flame import offcpu_stacks
from stallscope.analyzer.sample import TaskId
from stallscope.analyzer.series import Series
from stallscope.reports.beside import Beside
from stallscope.reports.build import load, read_by_both
from stallscope.reports.window import chart_value
from stallscope.reports.flametree import build_tree
from stallscope.reports.redact import REDACTED, command_name, redact
from stallscope.tui.diff import diff_doc

QUIET_ROWS = 50  # changes under the noise guard shown (they follow the ranked ones)


def build_diff(base: str, new: str, guard: NoiseGuard | None = None, include_idle: bool = False,
               scopes: tuple[set[TaskId] | None, set[TaskId] | None] = (None, None), redacted: bool = False,
               say=None) -> dict:
    """The page data comparing recording `new` with recording `base` (paths). `say(text)` is told each step (a
    status line: stallscope/progress.py)."""
    guard = guard or NoiseGuard()
    say = say or (lambda _text: None)
    names = (os.path.basename(base), os.path.basename(new))
    say(f"reading {names[0]}")
    bm, bs = load(base)
    say(f"reading {names[1]}")
    nm, ns = load(new)
    say("the lock tables and where each wait's time goes")
    # the new recording's export document beside the rest, on a second CPU where there is one (beside.py)
    read_by_both(nm, scopes[1])
    with Beside(to_json_doc, nm, scopes[1]) as new_doc:
        say("comparing them")
        changes = diff(bm, nm, guard, include_idle=include_idle, scopes=scopes)
        doc = diff_doc(bm, nm, changes, guard, names)
        say("the flame graph")
        stacks = (offcpu_stacks(bm, scopes[0]), offcpu_stacks(nm, scopes[1]))
        say("the tables")
        docs = (to_json_doc(bm, scopes[0]), new_doc.result())
    data = assemble_diff(doc, docs, stacks, (bs, ns), include_idle)
    if redacted:
        for side in data["page"]["sides"]:
            side["file"] = REDACTED
            side["command"] = command_name(side["command"])
        data = redact(redact(data, docs[0]), docs[1])
    return data


def assemble_diff(doc: dict, docs: tuple[dict, dict], stacks, series: tuple[Series, Series],
                  include_idle: bool = False) -> dict:
    """Page data from the diff document, each side's export document, off-CPU stacks and series."""
    ranked = [{**c, "rank": i} for i, c in enumerate(doc["changes"], 1)]
    page = {
        "kind": "diff",
        "sides": [_side(doc[k], d) for k, d in zip(("base", "new"), docs)],
        "guard": doc["noise_guard"],
        "regressions": [c for c in ranked if c["significant"] and c["delta_ns_per_s"] > 0],
        "improvements": [c for c in ranked if c["significant"] and c["delta_ns_per_s"] < 0],
        "quiet": [c for c in ranked if not c["significant"]][:QUIET_ROWS],
        "quiet_total": sum(1 for c in ranked if not c["significant"]),
        "compare": _compare(*docs),
        "include_idle": include_idle,
    }
    script = {"kind": "diff", "series": None, "charts": _charts(*series),
              "flame": {"diff": _diff_tree(stacks, docs, include_idle)}}
    return {"page": page, "script": script, "redacted": False}


def _side(d: dict, doc: dict) -> dict:
    command = doc["meta"]["options"].get("command") or {}
    return {"file": d["file"], "host": d["host"], "kernel": d["kernel"], "duration_s": d["duration_s"],
            "start_wall": d["start_wall"], "cpus": doc["meta"]["cpus"], "intervals": doc["meta"]["intervals"],
            "command": list(command.get("argv") or [])}


def _compare(base: dict, new: dict) -> list[dict]:
    """The figures of both recordings, each per second of its own recording where it is a total."""
    def figures(doc: dict) -> dict:
        secs = doc["meta"]["duration_s"] or 1.0
        sh, sig, o = doc["meta"]["shares"], doc["signals"], doc["meta"]["overhead"]
        locks = sum(s["wait_total_ns"] for s in doc["locks"])
        return {"waiting": sh["waiting_ns"] / secs, "blocked": sh["blocked_ns"] / secs, "runq": sh["runq_ns"] / secs,
                "idle": sh["idle_ns"] / secs, "cs": sig["cs_per_s"], "runnable": sig["runnable_avg"],
                "pressure": sig["runq_pressure"], "migrations": sig["migrations_per_s"], "locks": locks / secs,
                "cost": o["total_pct"]}
    rows = (("waiting", "Waiting (blocked outside idle causes, and for a CPU)", "ns_per_s"),
            ("blocked", "Blocked outside idle causes", "ns_per_s"), ("runq", "Waiting for a CPU", "ns_per_s"),
            ("idle", "Idle waits", "ns_per_s"), ("cs", "Context switches", "rate"),
            ("runnable", "Runnable tasks, on average", "number"), ("pressure", "Tasks waiting per CPU", "number"),
            ("migrations", "Migrations", "rate"), ("locks", "Lock wait", "ns_per_s"),
            ("cost", "stallscope's own cost, % of the machine", "pct"))
    b, n = figures(base), figures(new)
    return [{"key": k, "label": label, "format": f, "base": b[k], "new": n[k], "delta": n[k] - b[k],
             "delta_pct": 100.0 * (n[k] - b[k]) / b[k] if b[k] else None} for k, label, f in rows]


def _diff_tree(stacks, docs, include_idle: bool) -> dict:
    """One tree of both recordings' off-CPU stacks, each in ns per second of its own recording."""
    entries = []
    for key, sts, doc in zip(("base", "new"), stacks, docs):
        secs = doc["meta"]["duration_s"] or 1.0
        entries += [(st.frames, {key: st.value_ns / secs}, st.cause) for st in sts if include_idle or st.cls != IDLE]
    causes = {st.cause: st.cls for sts in stacks for st in sts}
    return build_tree(entries, ("base", "new"), causes)


def _charts(base: Series, new: Series) -> dict:
    """Both recordings over time from their starts, on one time axis (null where one has no interval)."""
    def rates(s: Series) -> dict:
        secs = [d / 1e9 for d in s.duration_ns]
        waiting = [sum(c.ns.get(i, 0) for c in s.causes.values() if c.cls != IDLE) for i in range(s.intervals)]
        return {"t": [round(x / 1e9, 3) for x in s.start_ns],
                "cs_per_s": [chart_value(v / d) if d else 0 for v, d in zip(s.switches, secs)],
                "waiting": [chart_value(v / dn) if dn else 0 for v, dn in zip(waiting, s.duration_ns)],
                "runq": [chart_value(v / dn) if dn else 0 for v, dn in zip(s.runq_ns, s.duration_ns)],
                "lock_wait": [chart_value(v / dn) if dn else 0 for v, dn in zip(s.lock_wait_ns, s.duration_ns)],
                "migrations_per_s": [chart_value(v / d) if d else 0 for v, d in zip(s.migrations, secs)]}
    sides = [rates(base), rates(new)]
    t = sorted(set(sides[0]["t"]) | set(sides[1]["t"]))
    out = {"t": t}
    for key in ("cs_per_s", "waiting", "runq", "lock_wait", "migrations_per_s"):
        for name, side in zip(("base", "new"), sides):
            at = dict(zip(side["t"], side[key]))
            out[f"{key}_{name}"] = [at.get(x) for x in t]
    return out
