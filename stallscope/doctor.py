"""`stallscope doctor`: what this kernel and these privileges allow, and why a probe is off."""

from __future__ import annotations

import json
import os
import sys

from stallscope.analyzer.untrusted import escaped
from stallscope.bpf import blockdev, features
from stallscope.bpf.collector import SCHED_GROUPS, SchedCollector, SchedOptions, object_path
from stallscope.bpf.groups import GROUPS as OPTIONAL_GROUPS, GroupOptions
from stallscope.errors import StallscopeError
from stallscope.priority import group_state

# Probe groups: what each shows, and whether `record`/`top` run it by default.
GROUPS = {
    "offcpu": ("off-CPU time per thread and per (kernel stack, user stack, state)", True),
    "runq": ("run-queue wait per thread and wakeup-to-run latency histograms", True),
    "switches": ("voluntary/involuntary switches per thread (the kernel's counters) and cs/s", True),
    "wakers": ("who woke each waiting task (task, irq, softirq or timer) and its stack", True),
    "migrations": ("CPU migrations per thread and the CPU x CPU matrix", True),
    **{name: (g.what + (f"; cost: {g.cost}" if g.cost else ""), g.default) for name, g in OPTIONAL_GROUPS.items()},
}


def collect() -> dict:
    """Every check, as data."""
    caps = features.capabilities()
    missing = features.missing_for_tracing()
    doc: dict = {
        "kernel": features.kernel_info(),
        "cpus": os.cpu_count(),
        "preemption": features.preemption_model(),
        "btf": vars(features.btf_available()),
        "libbpf": vars(features.libbpf_check()),
        "privileges": {name: vars(c) for name, c in caps.items()},
        "tracepoints": {name: vars(c) for name, c in features.tracepoints().items()},
        "kfuncs": {name: vars(c) for name, c in features.kfuncs().items()},
        "mechanisms": {},
        "probes": {},
        "missing": missing,
        # the io group counts requests on request-based (blk-mq) devices and bios on bio-based ones
        "block_devices": blockdev.describe(),
        # whether `top` can raise its terminal session's scheduling group (stallscope/priority.py)
        "scheduling_group": group_state(),
        # what `--probes` takes: the groups on top of the always-on scheduler probes
        "optional_groups": {name: {"default": g.default, "what": g.what, "cost": g.cost}
                            for name, g in OPTIONAL_GROUPS.items()},
    }
    if missing or not doc["libbpf"]["ok"]:
        reason = (f"missing {' and '.join(missing)}" if missing else doc["libbpf"]["detail"])
        doc["probes"] = {g: {"enabled": False, "mechanism": "", "reason": reason, "default": GROUPS[g][1],
                             "what": GROUPS[g][0]} for g in GROUPS}
        return doc
    try:
        doc["mechanisms"] = {m: vars(c) for m, c in features.mechanisms(object_path("features.bpf.o")).items()}
    except StallscopeError as exc:
        doc["mechanisms"] = {"error": {"ok": False, "detail": str(exc)}}
    # The real test: load and attach the scheduler object exactly as `record` does.
    collector = SchedCollector(SchedOptions(), symbolizer=None)  # type: ignore[arg-type]
    try:
        status = collector.start()
        probes = {g: {"enabled": s.enabled, "mechanism": s.mechanism, "reason": s.reason} for g, s in status.items()}
    except StallscopeError as exc:
        probes = {g: {"enabled": False, "mechanism": "", "reason": str(exc)} for g in SCHED_GROUPS}
    finally:
        collector.close()
    for name, group in OPTIONAL_GROUPS.items():  # each loaded and attached as `record` would
        c = group.factory(None, GroupOptions())
        try:
            st = c.start()
        finally:
            c.close()
        probes[name] = {"enabled": st.enabled, "mechanism": st.mechanism, "reason": st.reason}
    for g, p in probes.items():
        p["default"], p["what"] = GROUPS[g][1], GROUPS[g][0]
    doc["probes"] = probes
    return doc


def run_doctor(as_json: bool = False, out=None) -> int:
    out = out or sys.stdout
    doc = collect()
    ok = doc["probes"].get("offcpu", {}).get("enabled", False)
    if as_json:
        out.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    else:
        _print(doc, out)
    if doc["missing"]:
        print(f"stallscope: error: missing {' and '.join(doc['missing'])} to load and attach BPF programs "
              "(run as root, or grant them with setcap)", file=sys.stderr)
        return 2
    if not ok:
        print(f"stallscope: error: the scheduler probes cannot run: {doc['probes']['offcpu']['reason']}",
              file=sys.stderr)
        return 2
    return 0


def _yes(ok: bool) -> str:
    return "yes" if ok else "no "


def _print(doc: dict, out) -> None:
    k = doc["kernel"]
    w = out.write
    w(f"kernel       {k['release']} ({k['machine']}), {doc['cpus']} CPUs\n")
    w(f"preemption   {doc['preemption']}\n")
    w(f"BTF          {_yes(doc['btf']['ok'])} {doc['btf']['detail']}\n")
    w(f"libbpf       {_yes(doc['libbpf']['ok'])} {doc['libbpf']['detail']}\n")
    w("privileges\n")
    for name, c in doc["privileges"].items():
        w(f"  {name:<15} {_yes(c['ok'])} to {c['detail']}\n")
    if doc["mechanisms"]:
        w("mechanisms\n")
        for name, c in doc["mechanisms"].items():
            w(f"  {name:<15} {_yes(c['ok'])} {c['detail']}\n")
    w("kfuncs\n")
    for name, c in doc["kfuncs"].items():
        w(f"  {name:<22} {_yes(c['ok'])} {c['detail']}\n")
    devices = doc.get("block_devices") or {}
    if devices:
        requests = [n for n, d in devices.items() if d.get("requests")]
        bio = [n for n, d in devices.items() if not d.get("requests")]
        w(f"block devices  request-based (the io group counts their requests): {', '.join(requests) or '-'}\n")
        if bio:
            tps = doc["tracepoints"]
            bios = all(tps.get(f"block:{n}", {}).get("ok") for n in ("block_bio_queue", "block_bio_complete"))
            w(f"               bio-based (no requests: the request tracepoints never fire for them; "
              + ("the io group counts their bios, block_bio_queue to block_bio_complete" if bios else
                 "no bio tracepoints here: their I/O shows only on the devices beneath")
              + f"): {', '.join(bio)}\n")
    sg = doc.get("scheduling_group") or {}
    if sg.get("autogroup"):
        shared = sg["shared_with"]
        w(f"scheduling   tasks grouped by terminal session (autogroup); this one's group at nice {sg['nice']}: "
          + (f"shared with {len(shared)} other process{'es' if len(shared) != 1 else ''} ({', '.join(escaped(p['comm']) for p in shared[:3])}), "
             "so `top` run here leaves it alone" if shared else "`top` run here raises it while it runs")
          + "\n")
    else:
        w("scheduling   tasks not grouped by session here: `top`'s nice value ranks it among all\n")
    absent = [n for n, c in doc["tracepoints"].items() if not c["ok"]]
    w(f"tracepoints  {len(doc['tracepoints']) - len(absent)}/{len(doc['tracepoints'])} present"
      + (f"; absent: {', '.join(absent)}" if absent else "") + "\n")
    w("probe groups (default set: " + ", ".join(g for g, p in doc["probes"].items() if p.get("default")) + ")\n")
    for g, p in doc["probes"].items():
        state = "on " if p["enabled"] else "off"
        w(f"  {g:<11} {state} {p['mechanism'] or '-':<8} {p['what']}\n")
        if p["reason"]:
            w(f"  {'':<11}     {'':<8} {p['reason']}\n")
