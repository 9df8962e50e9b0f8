"""What stallscope's user-space side costs: start-up, steady state per interval, peak memory.

    python -m benchmarks.collector_cost [--runs 3] [--duration 20] [--mode record|top] [--load messaging]

Each run starts a load (a loop of `perf bench sched messaging -g 10 -l 2000`, hackbench), then
`stallscope record -d DURATION` (or `stallscope top -n DURATION`), and reports in CPU seconds, not
wall time (the machine may be shared):

- start-up (record only): the process's whole CPU time minus what its steady-state intervals used:
  imports, BPF loading, the first drain (which reads every process's maps and ELF files), shutdown;
- steady state: the median over the intervals after the first and before the last of the collector's
  CPU per interval (the recording's `collector_cpu_ns`; for top, its status line), as % of one CPU;
- peak RSS: the process's ru_maxrss from wait4.

See benchmarks/README.md ("User-space cost").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

LOADS = {
    "messaging": "while :; do perf bench sched messaging -g 10 -l 2000 >/dev/null 2>&1; done",
    "none": "",
}
_TOP_COLLECTOR = re.compile(r"interval (\d+) .*collector ([0-9.]+)% of a CPU")


def steady_state(per_interval_pct: list[float]) -> float:
    """Median of the intervals after the first (start-up) and before the last (final drain)."""
    inner = per_interval_pct[1:-1] or per_interval_pct
    return statistics.median(inner) if inner else 0.0


def top_intervals(text: str) -> list[float]:
    """Collector % of one CPU per interval, from top's status lines."""
    return [float(m.group(2)) for m in _TOP_COLLECTOR.finditer(text)]


def record_intervals(path: str) -> tuple[list[float], list[int]]:
    """(% of one CPU, CPU ns) per interval, from a recording."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT start_ns, end_ns, collector_cpu_ns FROM intervals ORDER BY idx").fetchall()
    return ([100.0 * c / max(e - s, 1) for s, e, c in rows], [c for _, _, c in rows])


def one_run(stallscope: list[str], mode: str, duration: int, load: str, extra: list[str]) -> dict:
    loader = subprocess.Popen(["bash", "-c", load], start_new_session=True) if load else None
    try:
        time.sleep(2.0 if load else 0)  # the load's processes exist before the first drain
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "run.stall")
            if mode == "record":
                argv = stallscope + ["record", "-d", str(duration), "-o", out] + extra
            else:
                argv = stallscope + ["top", "-n", str(duration)] + extra
            t0 = time.monotonic()
            # real-time priority, so that an interval stays near its 1 s on a busy machine (at normal
            # priority, with hundreds of runnable tasks on 2 CPUs, the first drain alone took a minute)
            proc = subprocess.Popen(["chrt", "-f", "1"] + argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            text = proc.stdout.read()
            _, status, ru = os.wait4(proc.pid, 0)
            wall = time.monotonic() - t0
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"{' '.join(argv)} failed: {status}")
            total_s = ru.ru_utime + ru.ru_stime
            if mode == "record":
                pct, cpu_ns = record_intervals(out)
                steady_s = sum(cpu_ns[1:]) / 1e9
            else:
                pct = top_intervals(text)
                steady_s = None  # top shows a share per interval, not its length: no start-up figure
    finally:
        if loader is not None:
            os.killpg(loader.pid, signal.SIGTERM)
            loader.wait()
    return {"total_cpu_s": round(total_s, 3),
            "startup_cpu_s": round(total_s - steady_s, 3) if steady_s is not None else None,
            "first_interval_pct": round(pct[0], 1) if pct else None,
            "steady_pct": round(steady_state(pct), 2), "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
            "wall_s": round(wall, 1), "intervals": len(pct), "per_interval_pct": [round(p, 2) for p in pct]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", type=int, default=20, help="seconds (record) or refreshes (top)")
    p.add_argument("--mode", choices=("record", "top"), default="record")
    p.add_argument("--load", choices=tuple(LOADS), default="messaging")
    p.add_argument("--stallscope", default=os.path.join(os.path.dirname(sys.executable), "stallscope"))
    p.add_argument("--json", action="store_true", help="print every run as JSON")
    p.add_argument("extra", nargs="*", help="more stallscope options (after --)")
    a = p.parse_args(argv)
    runs = [one_run(a.stallscope.split(), a.mode, a.duration, LOADS[a.load], a.extra) for _ in range(a.runs)]
    if a.json:
        print(json.dumps(runs, indent=1))
    for key in ("steady_pct", "startup_cpu_s", "first_interval_pct", "total_cpu_s", "peak_rss_mib"):
        vals = [r[key] for r in runs if r.get(key) is not None]
        if vals:  # top reports only its steady state
            print(f"{key:20} median {statistics.median(vals):8.2f}   runs {vals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
