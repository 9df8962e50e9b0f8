"""The HTML report of a 10-minute hackbench recording: how long `stallscope report` takes, how big the
page is.

    python -m benchmarks.report [--source run.stall | --record] [--intervals 600] [--keep DIR]
                                [--output benchmarks/RESULTS-report.md]

The recording is synthetic, built from a real one: `--record` records 20 s of one long hackbench run
(`perf bench sched messaging -g 10 -l 1000000`: 400 processes throughout, the default probe set:
scheduler, locks, futex, on-CPU samples), or `--source` names such a recording. Its intervals are
repeated until there are `--intervals` of them, each copy shifted in time, the same tasks going on: the
page holds what 10 minutes of that run would. `--new-pids` gives hackbench's processes new pids in each
copy instead, as a loop of short runs would (each run forks new processes: 20 s of `-g 4 -l 400` in a
loop made 34,000 tasks here, 10 minutes would make a million, far past what a page should list).
Then `stallscope report` runs as a user runs it, timed (wall and CPU), and, in this process, each stage
of it (recording read into the model, series, JSON export, stacks, page data, HTML).

Standard library and stallscope only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.reference import reference_s
from stallscope.analyzer.sample import TaskId

ROOT = Path(__file__).resolve().parent.parent
STALLSCOPE = str(Path(sys.executable).parent / "stallscope")
BUDGET_S, BUDGET_BYTES = 5.0, 5 * 1024 * 1024
WORKLOAD = "perf bench sched messaging -g 10 -l 1000000"


def record_source(path: Path, seconds: int = 20) -> None:
    subprocess.run([STALLSCOPE, "record", "-o", str(path), "--nice", "-19", "--", "timeout", str(seconds), "sh", "-c",
                    f"{WORKLOAD} >/dev/null"], check=False, stderr=subprocess.DEVNULL)


def _remap(obj, fields: tuple[str, ...], mapping):
    changes = {f: mapping(getattr(obj, f)) for f in fields}
    return dataclasses.replace(obj, **changes)


def command_tree(meta, tasks: dict) -> set[TaskId]:
    """The recorded command's tasks: its process and every process created under it."""
    root = (meta.options.get("command") or {}).get("pid")
    procs, changed = {root}, True
    while changed:
        changed = False
        for info in tasks.values():
            if info.tgid not in procs and info.ptgid in procs:
                procs.add(info.tgid)
                changed = True
    return {t for t, info in tasks.items() if info.tgid in procs}


def tile(source: Path, out: Path, intervals: int, new_pids: bool = False, command_only: bool = False) -> dict:
    """`out`: the intervals of `source` repeated until there are `intervals` (hackbench's tasks renamed
    in each copy with `new_pids`; only the command's tasks with `command_only`). Returns what was built."""
    from stallscope.analyzer.store import Recording, RecordingWriter

    rec = Recording(str(source))
    try:
        meta, tasks, stacks = rec.meta, rec.tasks(), rec.stacks()
        functions = rec.functions()
        base = list(rec.intervals())
    finally:
        rec.close()
    if not base:
        raise SystemExit(f"{source} has no intervals")
    if command_only:  # the other workloads of a shared machine left out
        keep = command_tree(meta, tasks)
        tgids = {tasks[t].tgid for t in keep}
        tasks = {t: i for t, i in tasks.items() if t in keep}
        base = [dataclasses.replace(
            iv, task_info=tuple(i for i in iv.task_info if i.task in keep),
            tasks=tuple(d for d in iv.tasks if d.task in keep), offcpu=tuple(o for o in iv.offcpu if o.task in keep),
            wakers=tuple(w for w in iv.wakers if w.task in keep), locks=tuple(lk for lk in iv.locks if lk.task in keep),
            futex=tuple(f for f in iv.futex if f.task in keep), oncpu=tuple(o for o in iv.oncpu if o.task in keep),
            ongoing=tuple(w for w in iv.ongoing if w.task in keep),
            slab=tuple(x for x in iv.slab if x.tgid in tgids), cgroups=tuple(c for c in iv.cgroups if c[0] in tgids),
            switches=sum(d.voluntary_switches + d.involuntary_switches for d in iv.tasks if d.task in keep),
            migrations=iv.migrations) for iv in base]
    span = base[-1].end_ns - base[0].start_ns
    wall_span = span / 1e9
    moved = {tid for tid, info in tasks.items() if new_pids and info.comm.startswith("sched-messag")}
    copies = (intervals + len(base) - 1) // len(base)
    end_ns = base[0].start_ns + span * copies
    writer = RecordingWriter(str(out), dataclasses.replace(meta, end_ns=end_ns))
    n = 0
    try:
        for k in range(copies):
            shift = k * span
            offset = k * 4_000_000  # beyond pid_max's default: a copy's pids never meet another's

            def task(t: TaskId) -> TaskId:
                return TaskId(t.pid + offset, t.start_time_ns + shift) if t in moved and k else t

            def tgid(g: int) -> int:
                return g + offset if k and g in moved_tgids else g

            moved_tgids = {tasks[t].tgid for t in moved}
            for j, iv in enumerate(base):
                if n >= intervals:
                    break
                infos = tuple(dataclasses.replace(tasks[t], task=task(t), tgid=tgid(tasks[t].tgid),
                                                  ptgid=tgid(tasks[t].ptgid)) for t in moved) if j == 0 and k else ()
                new = dataclasses.replace(
                    iv, index=n, start_ns=iv.start_ns + shift, end_ns=iv.end_ns + shift,
                    wall_start=iv.wall_start + k * wall_span, task_info=iv.task_info + infos,
                    stacks=iv.stacks if k == 0 else (),
                    functions=tuple(functions.items()) if n == 0 else (),
                    tasks=tuple(_remap(d, ("task",), task) for d in iv.tasks),
                    offcpu=tuple(dataclasses.replace(o, task=task(o.task), tgid=tgid(o.tgid)) for o in iv.offcpu),
                    wakers=tuple(dataclasses.replace(w, task=task(w.task), waker=task(w.waker),
                                                     waker_tgid=tgid(w.waker_tgid)) for w in iv.wakers),
                    locks=tuple(dataclasses.replace(lk, task=task(lk.task), tgid=tgid(lk.tgid)) for lk in iv.locks),
                    futex=tuple(dataclasses.replace(f, task=task(f.task), tgid=tgid(f.tgid)) for f in iv.futex),
                    oncpu=tuple(dataclasses.replace(o, task=task(o.task), tgid=tgid(o.tgid)) for o in iv.oncpu),
                    ongoing=tuple(w._replace(task=task(w.task), tgid=tgid(w.tgid)) for w in iv.ongoing),
                    slab=tuple(dataclasses.replace(s, tgid=tgid(s.tgid)) for s in iv.slab),
                    cgroups=tuple((tgid(g), st + shift, p) for g, st, p in iv.cgroups),
                    tuning=() if k else iv.tuning)
                if n == 0:
                    new = dataclasses.replace(new, task_info=tuple(tasks.values()), stacks=tuple(stacks.values()))
                writer.append(new)
                n += 1
    finally:
        writer.close()
    return {"intervals": n, "copies": copies, "source_intervals": len(base), "seconds": span * copies / 1e9,
            "tasks": len(tasks) + len(moved) * (copies - 1), "hackbench_tasks_per_copy": len(moved)}


def _summary(path: Path) -> str:
    from stallscope.analyzer.store import Recording

    rec = Recording(str(path))
    try:
        n = rec.db.execute("SELECT count(*), min(start_ns), max(end_ns) FROM intervals").fetchone()
        tasks = rec.db.execute("SELECT count(*) FROM tasks").fetchone()[0]
    finally:
        rec.close()
    return f"{n[0]} intervals ({(n[2] - n[1]) / 1e9:.0f} s), {tasks:,} tasks"


def stages(path: Path) -> dict:
    """Each stage of a report, timed in this process (CPU seconds: the machine may be shared), with the
    cycle collector's thresholds as the command sets them."""
    from stallscope.cli import _batch_gc

    _batch_gc()
    from stallscope.analyzer.export import to_json_doc
    from stallscope.analyzer.flame import offcpu_stacks, oncpu_stacks
    from stallscope.analyzer.load import fold_recording
    from stallscope.analyzer.series import Ledger, interval_series
    from stallscope.analyzer.store import Recording
    from stallscope.reports import assemble, render

    out = {}
    t = time.process_time()
    rec = Recording(str(path))
    ledger = Ledger()  # as the command reads: once, the series' records kept as the model is folded
    model = fold_recording(rec, ledger=ledger)
    rec.close()
    out["model"] = time.process_time() - t
    t = time.process_time()
    series = interval_series(model, ledger)
    out["series"] = time.process_time() - t
    t = time.process_time()
    doc = to_json_doc(model)
    out["export"] = time.process_time() - t
    t = time.process_time()
    off, on = offcpu_stacks(model), oncpu_stacks(model)
    out["stacks"] = time.process_time() - t
    t = time.process_time()
    data = assemble(doc, series, off, on, file_name=path.name)
    out["page_data"] = time.process_time() - t
    t = time.process_time()
    html = render(data)
    out["html"] = time.process_time() - t
    out["bytes"] = len(html.encode())
    out["flame_frames"] = len(data["script"]["flame"]["offcpu"]["name"])
    return out


def run_report(path: Path, html: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([STALLSCOPE, "report", str(path), "-o", str(html)], check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "max_rss_mb": after.ru_maxrss / 1024, "bytes": html.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--reuse", action="store_true", help="the recording built by an earlier run in --keep DIR")
    src.add_argument("--source", type=Path, help="a short real recording to repeat")
    src.add_argument("--as-is", type=Path, dest="as_is",
                     help="a real long recording, reported as it is (no copies made)")
    src.add_argument("--record", action="store_true", help=f"record {WORKLOAD} in a loop for 20 s first (root)")
    ap.add_argument("--intervals", type=int, default=600)
    ap.add_argument("--new-pids", action="store_true", help="new pids for hackbench in each copy (a loop of runs)")
    ap.add_argument("--command-only", action="store_true",
                    help="keep only the recorded command's tasks (the other workloads of a shared machine out)")
    ap.add_argument("--keep", type=Path, help="keep the recording and the page in this directory")
    ap.add_argument("--output", type=Path, help="write the results as Markdown here")
    args = ap.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="stallscope-report-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    source = args.source
    if args.record:
        source = work / "source.stall"
        record_source(source)
    big = work / "ten-minutes.stall"
    built_file = work / "built.json"
    if args.as_is:
        big = args.as_is
        built = None
    elif args.reuse:
        built = json.loads(built_file.read_text())
    else:
        if big.exists():
            big.unlink()
        built = tile(source, big, args.intervals, args.new_pids, args.command_only)
        built["how"] = ((", only its own tasks" if args.command_only else "") +
                        (", hackbench's tasks renamed in each copy" if args.new_pids else ", the same tasks going on"))
        built_file.write_text(json.dumps(built))
    page = work / "report.html"
    if page.exists():
        page.unlink()
    speed = reference_s()  # this machine's speed today (benchmarks/reference.py)
    cli = run_report(big, page)
    parts = stages(big)
    load = os.getloadavg()
    lines = [
        "# HTML report of a 10-minute hackbench recording",
        "",
        (f"Recording: synthetic, {built['intervals']} intervals ({built['seconds']:.0f} s of recorded time), "
         f"{built['copies']} copies of a real {built['source_intervals']}-interval recording of `{WORKLOAD}` "
         f"(default probes){built['how']}: {built['tasks']:,} tasks; {big.stat().st_size / 1e6:.0f} MB.")
        if built else f"Recording: real, `{big.name}` as it is, {_summary(big)}; {big.stat().st_size / 1e6:.0f} MB.",
        "",
        f"`stallscope report`: **{cli['wall_s']:.2f} s** wall, {cli['cpu_s']:.2f} s CPU, peak RSS "
        f"{cli['max_rss_mb']:.0f} MB; page **{cli['bytes'] / 1e6:.2f} MB** (budgets: {BUDGET_S:g} s, "
        f"{BUDGET_BYTES / 1e6:.1f} MB).",
        "",
        "Stages, in one process (CPU s): " + ", ".join(f"{k} {parts[k]:.2f}" for k in
                                                         ("model", "series", "export", "stacks", "page_data", "html"))
        + f"; {parts['flame_frames']:,} flame graph frames.",
        "",
        f"Load average during the run: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs; the "
        f"interpreter's reference (benchmarks/reference.py, before it) {speed:.3f} s.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text)
    return 0 if cli["cpu_s"] < BUDGET_S and cli["bytes"] < BUDGET_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
