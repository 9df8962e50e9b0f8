"""Where `stallscope top`'s CPU goes, live: the session alone (no screen), by part, under the load of
benchmarks/tui.py.

    setsid -w .venv/bin/python -m benchmarks.live_parts [--seconds 30] [--warm-up 8] [--idle 5000] [--idle-period MS]
                                                        [--no-load] [--output FILE.md]

The live source runs as `top` runs it (its session in a worker thread, each interval's snapshot and the
views the default screen reads folded there), and nothing draws. After WARM_UP s (8) it measures, for
SECONDS, the process's CPU per second of wall time (getrusage, every thread) and the session thread's CPU
time (`time.thread_time`) in each part below, per interval. Compared with benchmarks/tui.py's figure for the
same load, the difference is the screen's cost. The parts nest (a drain holds its collectors' drains): the
table shows each with its own total, not a sum.

The figures that scale it: the tasks whose counters changed in an interval (each a task entry of the dump
to read, a delta, a row of the model) and the off-CPU records (a key each: task, stack, state).

The parts are wrapped by name (the names below): a part renamed in the code is reported as missing, not
silently left out. Standard library and stallscope only. Run as root.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path

from benchmarks.reference import reference_s
from benchmarks.tui import IDLE_PERIOD_MS, SESSION_THREAD, load_processes, own_session, stop_load
# (label, module, class or "", attribute, is a cached_property); in the order the table lists them
PARTS = (
    ("drain: every collector", "stallscope.session", "Session", "_drain", False),
    ("  scheduler", "stallscope.bpf.collector", "SchedCollector", "drain", False),
    ("    task entries", "stallscope.bpf.collector", "SchedCollector", "_drain_tasks", False),
    ("    off-CPU waits", "stallscope.bpf.collector", "SchedCollector", "_drain_offcpu", False),
    ("    wakers", "stallscope.bpf.collector", "SchedCollector", "_drain_wakers", False),
    ("    new processes", "stallscope.bpf.collector", "SchedCollector", "_remember_process", False),
    ("  locks", "stallscope.bpf.lock_collector", "LockCollector", "drain", False),
    ("  futex", "stallscope.bpf.futex_collector", "FutexCollector", "drain", False),
    ("  on-CPU samples", "stallscope.bpf.oncpu_collector", "OncpuCollector", "drain", False),
    ("interval handed to the view", "stallscope.sources", "LiveSource", "_on_interval", False),
    ("  timeline: interval kept", "stallscope.analyzer.timeline", "Timeline", "add", False),
    ("  fold: records summed", "stallscope.analyzer.model", "ModelFold", "add", False),
    ("  fold: model made", "stallscope.analyzer.model", "ModelFold", "model", False),
    ("  ranked blockers", "stallscope.analyzer.timeline", "Snapshot", "ranked", True),
    ("  stallscope's own tasks", "stallscope.analyzer.timeline", "Snapshot", "own", True),
    ("  scope", "stallscope.analyzer.timeline", "Snapshot", "scope", True),
    ("  shares", "stallscope.analyzer.timeline", "Snapshot", "shares", True),
)


class Parts:
    """Each part's CPU time in the session's thread while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.spent: dict[str, float] = {}
        self.missing: list[str] = []

    def wrap(self) -> None:
        for label, module, owner, attr, prop in PARTS:
            target = importlib.import_module(module)
            target = getattr(target, owner, None) if owner else target
            found = target is not None and (attr in vars(target) if prop else hasattr(target, attr))
            if not found:
                self.missing.append(f"{module}.{owner}.{attr}")
                continue
            self.spent[label] = 0.0
            if prop:
                cp = vars(target)[attr]
                cp.func = self._timed(label, cp.func)
            else:
                setattr(target, attr, self._timed(label, getattr(target, attr)))

    def _timed(self, label: str, f):
        spent = self.spent

        @functools.wraps(f)
        def timed(*args, **kwargs):
            if not self.on or threading.current_thread().name != SESSION_THREAD:
                return f(*args, **kwargs)
            began = time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                spent[label] += time.thread_time() - began

        return timed


def measure(seconds: float, interval: float, warm_up: float = 8.0) -> dict:
    parts = Parts()
    parts.wrap()
    from stallscope.priority import DEFAULT_NICE, at_nice
    from stallscope.session import SessionOptions
    from stallscope.sources import LiveSource

    with at_nice(DEFAULT_NICE):  # as `stallscope top` runs
        source = LiveSource(SessionOptions(interval_s=interval, nice=DEFAULT_NICE))
        source.start()
        try:
            warm = time.monotonic() + warm_up
            while time.monotonic() < warm:  # read as a view reads: a full queue would hold the session up
                source.events()
                time.sleep(0.25)
            source.events()
            parts.on = True
            t0, wall0 = os.times(), time.monotonic()
            n, tasks, waits, end = 0, 0, 0, wall0 + seconds
            last = None
            while time.monotonic() < end:
                for ev in source.events():
                    if ev.kind == "interval":
                        n, tasks, waits = n + 1, tasks + len(ev.payload.tasks), waits + len(ev.payload.offcpu)
                        last = ev.snapshot or last
                time.sleep(0.25)
            t1, wall1 = os.times(), time.monotonic()
            parts.on = False
        finally:
            source.stop()
            source.join(15)
    if source.error:
        raise SystemExit(f"live_parts: the session failed: {source.error}")
    cpu = t1.user + t1.system - t0.user - t0.system
    n = max(n, 1)
    # the views rank every task but stallscope's own: the load must not be among those (benchmarks/tui.py Detached)
    own, seen = (len(last.own), len(last.model.tasks)) if last is not None else (0, 0)
    return {"intervals": n, "cpu_pct_of_one_cpu": round(100 * cpu / (wall1 - wall0), 2),
            "ms_per_interval": round(1e3 * cpu / n, 1),
            "tasks_per_interval": round(tasks / n), "offcpu_records_per_interval": round(waits / n),
            "last_window": {"tasks": seen, "stallscope_own_tasks": own},
            "parts_ms_per_interval": {k: round(1e3 * v / n, 1) for k, v in parts.spent.items()},
            "missing": parts.missing}


def main() -> int:
    own_session("benchmarks.live_parts")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="measuring time after the warm-up (default 30)")
    ap.add_argument("--warm-up", type=float, default=8.0, metavar="S",
                    help="seconds before measuring (default 8; 300 for the idle threads' stacks walked: benchmarks/tui.py)")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--idle", type=int, default=5000, help="idle threads alive meanwhile (default 5000)")
    ap.add_argument("--idle-period", type=int, default=IDLE_PERIOD_MS, metavar="MS",
                    help="each idle thread wakes every MS ms (default 3000; 3600000 leaves them asleep through a run)")
    ap.add_argument("--no-load", action="store_true", help="no hackbench: the machine as it is")
    ap.add_argument("--output", help="write the results as Markdown here (and JSON beside it)")
    args = ap.parse_args()
    speed = reference_s()
    procs = load_processes(args.idle, rt_mutex=False, no_load=args.no_load, idle_period_ms=args.idle_period)
    try:
        result = measure(args.seconds, args.interval, args.warm_up)
    finally:
        stop_load(procs)
    result.update({"idle_threads": args.idle, "idle_period_ms": args.idle_period,
                   "load": "none" if args.no_load else "perf bench sched messaging -g 10",
                   "reference_s": round(speed, 3), "interval_s": args.interval, "kernel": platform.release(),
                   "cpus": os.cpu_count(), "session_of_its_own": os.getsid(0) == os.getpid()})
    print(json.dumps(result, indent=2))
    if args.output:
        Path(args.output).with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        rows = "".join(f"| {k.strip()} | {'&nbsp;' * (len(k) - len(k.lstrip()))}{v:.1f} ms |\n"
                       for k, v in result["parts_ms_per_interval"].items())
        Path(args.output).write_text(
            "# `stallscope top`'s session alone, by part\n\n"
            f"`python -m benchmarks.live_parts --seconds {args.seconds:g} --idle {args.idle}"
            f"{' --idle-period %d' % args.idle_period if args.idle_period != IDLE_PERIOD_MS else ''}"
            f"{' --no-load' if args.no_load else ''}`; kernel {result['kernel']}, {result['cpus']} CPUs; "
            f"{result['load']}{'' if args.no_load else ' in a loop'}, {args.idle} idle threads each waking every "
            f"{args.idle_period / 1000:g} s; "
            f"{args.interval:g} s intervals; no screen. The interpreter's reference: {speed:.3f} s.\n\n"
            f"The process: **{result['cpu_pct_of_one_cpu']:.1f}% of one CPU**, {result['ms_per_interval']:.1f} ms of "
            f"CPU per interval ({result['intervals']} intervals; {result['tasks_per_interval']:,} tasks changed and "
            f"{result['offcpu_records_per_interval']:,} off-CPU records an interval; the last window's "
            f"{result['last_window']['tasks']:,} tasks, {result['last_window']['stallscope_own_tasks']} of them "
            "stallscope's own, left out of the ranking). The session thread's parts, CPU per interval "
            "(nested: each with its own total):\n\n| part | CPU per interval |\n|---|---|\n" + rows
            + (f"\nNot found (renamed?): {', '.join(result['missing'])}\n" if result["missing"] else ""))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
