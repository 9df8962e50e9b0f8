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
import pickle
from typing import Any, Iterable

from stallscope.analyzer.attribution import split_waits
from stallscope.analyzer.causes import CPU, IDLE
from stallscope.analyzer.export import JSON_VERSION, to_json_doc
from stallscope.analyzer.flame import offcpu_stacks, oncpu_stacks
from stallscope.analyzer.load import fold_recording
from stallscope.analyzer.locks import lock_stats
from stallscope.analyzer.model import Model
from stallscope.analyzer.oncpu import SamplingSummary
from stallscope.analyzer.recommend import NOT_HELPFUL, RECOMMENDED, Thresholds
from stallscope.analyzer.sample import Interval, TaskId
from stallscope.analyzer.series import Ledger, Series, interval_series, joined, series_parts
from stallscope.analyzer.signals import quota_throttled, switch_kinds
from stallscope.analyzer.store import Recording
from stallscope.analyzer.units import fmt_ns
from stallscope.reports.beside import Beside, Taken
from stallscope.reports.redact import redact
from stallscope.reports.tables import loss, ran, waiter_names, whole_tables
from stallscope.reports.window import offcpu_tree, oncpu_tree, script_series

TOP_BLOCKERS = 5  # in the summary


def build(source, intervals: Iterable[Interval] | None = None, redacted: bool = False,
          file_name: str = "", say=None) -> dict:
    """The page data of a recording (`source` a path) or of a model (with the intervals it was built
    from, for the time series; without them the page has none). `say(text)` is told each step (a status
    line: stallscope/progress.py)."""
    say = say or _quiet
    if isinstance(source, Model):
        model, ledger = source, intervals
    else:
        file_name = file_name or os.path.basename(source)
        say(f"reading {file_name}")
        model, ledger = fold(source)
    say("the lock table and where each wait's time goes")
    read_by_both(model, None)
    # the series and the stacks beside the export document, on a second CPU where there is one (beside.py): a child
    # takes their parts one after another while the document is made here, then this process takes what is left
    # (the document of a recording of many short-lived threads takes longer than all of them; that of a few
    # long-lived ones, a fraction of one part)
    with PageJobs(model, ledger) as jobs, Beside(jobs.work) as rest:
        say("the export document")
        doc = to_json_doc(model)
        say("the time series and the flame graphs")
        mine = jobs.work()
        series, offcpu, oncpu = jobs.results(mine, rest.result())
        say("the tables")
        return assemble(doc, series, offcpu, oncpu, redacted=redacted, file_name=file_name)


SERIES_PARTS = 16  # of a page's series, shared out (PageJobs): a 10-minute recording's, 0.1-0.2 s each


class _Packed:
    """What a job made, pickled where it was made."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


class PageJobs:
    """A page's time series (in parts: analyzer/series.py series_parts) and its off-CPU and on-CPU flame graphs'
    stacks, as numbered jobs that this process and a child forked beside it take in turn (beside.py Taken), each
    made once, by whichever is free first. `results` joins the parts, whoever made them, and makes any that no one
    gave (a child killed midway): the same series and stacks, whichever process made which part."""

    def __init__(self, model: Model, ledger: Ledger | Iterable[Interval] | None):
        self.model, self.ledger = model, ledger
        self._make = None
        self._here = os.getpid()
        entries = ledger.entries if isinstance(ledger, Ledger) else None
        if ledger is None:
            self.parts: list[tuple[int, int | None]] = []
        elif isinstance(entries, list) and len(entries) > 1:
            n = len(entries)
            cuts = sorted({n * k // SERIES_PARTS for k in range(SERIES_PARTS)} | {n})
            self.parts = list(zip(cuts, cuts[1:]))
        else:  # intervals streamed, or too few to share: made in one part
            self.parts = [(0, None)]
        self._taken = Taken(len(self.parts) + 2)  # the parts, then each flame graph's stacks

    def work(self) -> dict[int, Any]:
        """The jobs not yet taken, made here one after another: job number -> what it made. A child forked to share
        them packs each as it is made (_Packed), so that the one it makes last is all that is left to pack once
        there are none to take, while this process, which unpacks them, has gone on taking its share."""
        done = {}
        child = os.getpid() != self._here
        while (job := self._taken.take()) is not None:
            made = self._made(job)
            done[job] = _Packed(pickle.dumps(made, protocol=pickle.HIGHEST_PROTOCOL)) if child else made
        return done

    def results(self, *done: dict[int, Any]) -> tuple:
        """(series or None without intervals, off-CPU stacks, on-CPU stacks) of the jobs `done` here and there,
        those missing made here."""
        made: dict[int, Any] = {}
        for d in done:
            made.update((job, pickle.loads(v.data) if isinstance(v, _Packed) else v) for job, v in d.items())
        for job in range(len(self.parts) + 2):
            if job not in made:
                made[job] = self._made(job)
        n = len(self.parts)
        return (joined([made[j] for j in range(n)]) if n else None), made[n], made[n + 1]

    def _made(self, job: int) -> Any:
        n = len(self.parts)
        if job == n:
            return offcpu_stacks(self.model)
        if job == n + 1:
            return oncpu_stacks(self.model)
        if self._make is None:  # what each record comes to, worked out by each process that makes a part
            self._make = series_parts(self.model, self.ledger)
        return self._make(*self.parts[job])

    def close(self) -> None:
        self._taken.close()

    def __enter__(self) -> "PageJobs":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _quiet(_text: str) -> None:
    pass


def read_by_both(model: Model, scope: set[TaskId] | None) -> None:
    """What the export document and the series (or the diff) both read of a model for these tasks, made
    (and kept per model) before a child forks to make the document: else each side makes them (0.8 s of a
    10-minute hackbench recording)."""
    lock_stats(model, tasks=scope)
    split_waits(model, scope)


def fold(path: str) -> tuple[Model, Ledger]:
    """A recording's model, and its series' records kept (a ledger) as it was folded: one read."""
    rec = Recording(path)
    try:
        ledger = Ledger()
        model = fold_recording(rec, ledger=ledger)
    finally:
        rec.close()
    return model, ledger


def load(path: str) -> tuple[Model, Series]:
    """A recording's model and its series, from one read."""
    model, ledger = fold(path)
    return model, interval_series(model, ledger)


def assemble(doc: dict, series: Series | None, offcpu, oncpu, redacted: bool = False, file_name: str = "") -> dict:
    """Page data from an export document, its series and its stacks (analyzer/flame.py)."""
    if doc.get("format") != "stallscope" or doc.get("version") != JSON_VERSION:
        raise ValueError(f"not a stallscope export document of version {JSON_VERSION}")
    tables = whole_tables(doc)
    page = {
        "kind": "report",
        "export_version": JSON_VERSION,
        "file": file_name,
        "recording": _recording(doc),
        "summary": _summary(doc, tables),
        "fixes": _fixes(doc),
        "machine": _machine(doc),
        "probes": [{"group": g, **p} for g, p in sorted(doc["meta"]["probes"].items())],
        "loss": loss(doc),
        "overhead": _overhead(doc),
        "tables": tables,
        "oncpu": {**{k: doc["oncpu"][k] for k in ("sample_hz", "samples", "idle_samples", "period_ns", "missed_samples",
                                                  "shares")},
                  "rate": SamplingSummary(*(doc["oncpu"][k] for k in ("sample_hz", "samples", "idle_samples", "period_ns",
                                                                      "missed_samples"))).rate_text()},
        "flame_notes": {"oncpu": bool(oncpu)},
    }
    script = {
        "kind": "report",
        "duration_ns": round(doc["meta"]["duration_s"] * 1e9),
        "series": script_series(series, tables) if series is not None and series.intervals else None,
        "flame": {"offcpu": offcpu_tree(offcpu), "oncpu": oncpu_tree(oncpu) if oncpu else None},
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


ROOT_SHARE_NAMED = 0.1  # of a blocker's share: a root the summary's sentence names


def _threads(word: str, n: int) -> str:
    return f" {word} {n:,} threads" if n > 1 else ""


def _blocker_sentence(b: dict, duration_s: float, quota: list[dict] = ()) -> dict:
    """What a reader takes from one blocker: how much, how often, how long, who held it up (for the CPU, a
    cgroup's quota first, when one throttled its tasks: `quota`, signals.quota_throttled)."""
    held = b["held_up_by"]
    throttled = [f"the CPU quota of {q['cgroup']} ({q['nr_throttled']:,} throttled periods)"
                 for q in quota] if b["class"] == CPU else []
    # where a quota throttled them, the waiters switched out most did not run instead: the quota held them all
    waiting = {t.get("comm") for t in b["tasks"]} if throttled else set()
    # by name where the export has it (several threads of a name summed), else by thread
    by = throttled + (
        [f"{h['name']} ({h['involuntary_switches']:,} involuntary switches{_threads('in', h['threads'])}"
         + ("; throttled with them" if h.get("comm") in waiting else "") + ")"
         for h in held.get("hog_names", ())]
        or [f"{h['task']} ({h['involuntary_switches']:,} involuntary switches)" for h in held["hogs"]]
        or [f"{w['name']} ({w['count']:,} drawn wakeup{'s' if w['count'] != 1 else ''}{_threads('from', w['threads'])})"
            for w in held.get("waker_names", ())]
        or [f"{w['waker']} ({w['count']:,} drawn wakeup{'s' if w['count'] != 1 else ''})" for w in held["wakers"]]
        or [f"owner {o}" for o in held["owners"]])
    # its heaviest root elsewhere, when it explains a tenth of the blocker or more (a sliver is no story)
    root = next((r for r in b["roots"] if r["root"] != b["cause"]
                 and (r["share_pct"] or 0) >= ROOT_SHARE_NAMED * (b["share_pct"] or 0)), None)
    names = waiter_names(b)
    return {"cause": b["cause"], "class": b["class"], "total_ns": b["total_ns"], "share_pct": b["share_pct"],
            "per_s_ns": b["total_ns"] / duration_s if duration_s else 0, "count": b["count"],
            "p99_ns": b["latency"].get("p99_ns"), "max_ns": b["max_ns"], "held_up_by": by[:2],
            "tasks": [f"{name} ×{n:,}" if n > 1 else name for name, n in names[:4]], "more_names": len(names) > 4,
            "ntasks": len(b["tasks"]),
            "root": root["root"] if root else "", "root_share_pct": root["share_pct"] if root else None,
            "estimated_ns": b["estimated_ns"], "method": b["method"],
            "estimated_by_process_ns": b.get("estimated_by_process_ns", 0),
            "in_progress": b.get("in_progress", 0), "in_progress_longest_ns": b.get("in_progress_longest_ns", 0)}


def _summary(doc: dict, tables: dict) -> dict:
    meta = doc["meta"]
    blockers = [b for b in doc["blockers"] if b["class"] != IDLE][:TOP_BLOCKERS]
    recs = doc["recommendations"]
    sig = doc["signals"]
    quota = quota_throttled(sig.get("cpu_side") or {}, meta["duration_s"])
    return {"blockers": [_blocker_sentence(b, meta["duration_s"], quota) for b in blockers],
            "waiting_ns": meta["shares"]["waiting_ns"], "blocked_ns": meta["shares"]["blocked_ns"],
            "runq_ns": meta["shares"]["runq_ns"], "idle_ns": meta["shares"]["idle_ns"],
            "needs_tuning": sum(1 for r in recs if r["status"] == RECOMMENDED),
            "cannot_help": sum(1 for r in recs if r["status"] != RECOMMENDED),
            "signals": sig, "locks": len(tables["locks"]["rows"]),
            # the machine card's throttled cgroups: those cpu.stat counted throttling for (well-formed entries)
            "throttled": quota_throttled(sig.get("cpu_side") or {}, meta["duration_s"], 0.0, 1)[:2],
            "switch_kinds": switch_kinds(None if sig.get("voluntary_pct") is None else sig["voluntary_pct"] / 100,
                                         (sig["top_wait"]["cause"], sig["top_wait"]["waits_pct"] / 100)
                                         if sig.get("top_wait") else None),
            "lost": [x for x in loss(doc) if x["loss"] == "lost"],
            "kept": [x for x in loss(doc) if x["loss"] == "kept"]}


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
                 f"{th.lock_min_contentions} contentions", ran(probes, "locks") or ran(probes, "futex"),
         "recorded without the locks and futex groups"),
        ("io", f"no I/O wait of {fmt_ns(th.io_wait_per_s_ns)} per second or more", True, ""),
        ("slub", f"no slab cache with {th.slab_allocs_per_s:,.0f} allocations a second, {th.slab_switch_pct:g}% "
                 "CPU-slab switches and list_lock waits or a busy slow path", ran(probes, "slab"),
         "recorded without the slab group (--probes +slab)"),
        ("rcu", f"no task waits {fmt_ns(th.rcu_wait_per_s_ns)} a second or more for normal RCU grace periods",
         bool(machine.get("rcu_knobs")), "the recording has no RCU settings"),
        ("sched_knob", f"migrations stay under {th.migrations_per_s * 10:g} a second per CPU machine-wide",
         bool(machine.get("sched_knobs")), "the recording has no scheduler knobs"),
        ("quota", f"no cgroup's CPU quota throttled it {100 * th.quota_throttled_share:g}% of the time or more",
         "cpu_side" in machine, "the recording has no cgroup statistics"),
        ("affinity", f"no CPU's run queue held {th.queued_waiting:g} tasks waiting on average while another CPU was "
                     f"{th.idle_cpu_busy_pct:g}% busy or less, with threads waiting there that never moved",
         bool(doc["meta"]["options"].get("cpu_runq_per_interval")), "the recording has no per-CPU run-queue waits"),
    ]
    return [{"kind": kind, "text": text if checked else why, "checked": checked}
            for kind, text, checked, why in checks if kind not in kinds]


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


def _overhead(doc: dict) -> dict:
    o = doc["meta"]["overhead"]
    programs = sorted(o["bpf_programs"].items(), key=lambda kv: (-kv[1]["run_time_ns"], kv[0]))
    return {**{k: v for k, v in o.items() if k != "bpf_programs"},
            "programs": [{"name": n, **p} for n, p in programs]}


