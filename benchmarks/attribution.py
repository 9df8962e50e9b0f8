"""Do the conclusions hold at default settings? Top blockers as a user records them, against --no-degrade.

    python -m benchmarks.attribution [--runs 3] [--workloads dir,flock,...] [--output FILE.md --raw FILE.json]

Each workload is a program nobody here wrote (stress-ng stressors, sysbench, perf's hackbench, fio),
run under `stallscope record -- CMD` in three settings, several times each:

- `default`: as a user records (the overhead budget on, stacks drawn by length);
- `no-degrade`: the same probes, the budget off (the budget never raises the drawing scale);
- `all-stacks`: the budget off and every wait walked (`--stack-scale 0 --user-stack-rate 0
  --stack-rate 0`): what the estimates stand in for, at a cost nobody pays in production.

For each run, the recorded command's top three blockers (`export --command-only`, classes other than
idle, heaviest first) with their share of the waiting time, the part of it estimated from undrawn waits
and that estimate's 95% margin; and stallscope's own cost as the recording measured it (its BPF
programs' run time and the collector's CPU, as % of the machine), with the budget's highest step.
The report compares each setting's top three with `no-degrade`'s (those of at least 1% of the waiting
time: below that the rank is noise): the same causes (as a set) and the same order, run by run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STALLSCOPE = os.path.join(os.path.dirname(sys.executable), "stallscope")
DURATION_S = 8

# name -> (argv, what a kernel developer names as its top blocker)
WORKLOADS = {
    "dir": (["stress-ng", "--dir", "4", "--timeout", f"{DURATION_S}", "--quiet"],
            "four processes creating and removing files in their directories: the directory's i_rwsem"),
    "flock": (["stress-ng", "--flock", "4", "--timeout", f"{DURATION_S}", "--quiet"],
              "four processes taking flock() on one file: the file lock, and the CPU it waits for"),
    "threads": (["sysbench", "threads", "--threads=8", "--thread-locks=1", f"--time={DURATION_S}", "run"],
                "eight threads yielding under one mutex: the CPU (they are runnable), then the mutex"),
    "messaging": (["perf", "bench", "sched", "messaging", "-g", "10", "-l", "3000"],
                  "hackbench: 400 processes over sockets: the CPU, then socket reads and writes"),
    "fio": (["fio", "--name=fsync", "--rw=write", "--bs=4k", "--size=64m", "--fsync=1", "--time_based",
             f"--runtime={DURATION_S}", "--filename={tmp}/fio.dat", "--output=/dev/null"],
            "small writes each followed by fsync(): waiting for the journal and the disk"),
}

SETTINGS = {
    "default": [],
    "no-degrade": ["--no-degrade"],
    "all-stacks": ["--no-degrade", "--stack-scale", "0", "--user-stack-rate", "0", "--stack-rate", "0"],
}


def one_run(workload: str, setting: str, stallscope: str) -> dict:
    argv, _ = WORKLOADS[workload]
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        out = os.path.join(tmp, "run.stall")
        cmd = [a.replace("{tmp}", tmp) for a in argv]
        t0 = time.monotonic()
        proc = subprocess.run([stallscope, "record", "-o", out, *SETTINGS[setting], "--", *cmd],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{workload}/{setting}: stallscope record failed: {proc.stderr.strip()[-400:]}")
        doc = json.loads(subprocess.run([stallscope, "export", "--command-only", out], capture_output=True,
                                        text=True, check=True).stdout)
    o = doc["meta"]["overhead"]
    top = [b for b in doc["blockers"] if b["class"] != "idle"][:3]
    return {
        "workload": workload, "setting": setting, "wall_s": round(wall, 1),
        "top": [{"cause": b["cause"], "share_pct": round(b["share_pct"], 1),
                 "estimated_pct": round(100 * b["estimated_ns"] / b["total_ns"], 1) if b["total_ns"] else 0.0,
                 "error_ms": round(b["estimated_error_ns"] / 1e6, 1)} for b in top],
        "cost_pct": round(o["total_pct"], 2), "bpf_pct": round(o["bpf_pct"] + o["dispatch_pct"], 2),
        "collector_pct": round(o["collector_pct_of_machine"], 2),
        "level": max((c["level"] for c in o["changes"]), default=0),
        "waits_drawn": doc["meta"]["health"].get("waits_drawn", 0),
    }


MIN_SHARE_PCT = 1.0  # a cause under 1% of the waiting time ranks by noise: not compared


def _names(run: dict) -> list[str]:
    return [b["cause"] for b in run["top"] if b["share_pct"] >= MIN_SHARE_PCT]


def summarize(runs: list[dict]) -> dict:
    """Per workload and setting: agreement with no-degrade's runs, and the median cost."""
    by = collections.defaultdict(list)
    for r in runs:
        by[(r["workload"], r["setting"])].append(r)
    out = {}
    for (w, s), rs in by.items():
        ref = by.get((w, "no-degrade"), [])
        # no-degrade's own top three: the most frequent ordered list over its runs
        common = collections.Counter(tuple(_names(r)) for r in ref).most_common(1)
        want = list(common[0][0]) if common else []
        out[f"{w}/{s}"] = {
            "reference": want,
            "same_set": sum(set(_names(r)) == set(want) for r in rs), "same_order": sum(_names(r) == want for r in rs),
            "runs": len(rs), "cost_pct": statistics.median(r["cost_pct"] for r in rs),
            "cost_max_pct": max(r["cost_pct"] for r in rs), "level_max": max(r["level"] for r in rs),
        }
    return out


def report(runs: list[dict], summary: dict, note: str) -> str:
    lines = ["# Attribution at default settings against --no-degrade", "",
             f"{platform.node()}, kernel {platform.release()}, {os.cpu_count()} CPUs; "
             f"`python -m benchmarks.attribution` ({time.strftime('%Y-%m-%d')}). "
             "Top three: the recorded command's blockers (not idle), share of its waiting time; "
             "`est` the part estimated from waits not drawn for a stack walk, with its 95% margin; "
             "cost: stallscope's BPF programs and collector as % of the machine; level: the overhead "
             "budget's highest step (0: none).", ""]
    if note:
        lines += [note, ""]
    lines += ["| workload | setting | same three as no-degrade | same order | median cost | max cost | max level |",
              "|---|---|---|---|---|---|---|"]
    for key, s in summary.items():
        w, st = key.split("/")
        lines.append(f"| {w} | {st} | {s['same_set']}/{s['runs']} | {s['same_order']}/{s['runs']} | "
                     f"{s['cost_pct']:.2f}% | {s['cost_max_pct']:.2f}% | {s['level_max']} |")
    lines += ["", "## Every run", ""]
    for w in dict.fromkeys(r["workload"] for r in runs):
        lines += [f"### {w}: `{' '.join(WORKLOADS[w][0])}`", "", f"Expected: {WORKLOADS[w][1]}.", "",
                  "| setting | top three (share, est ± margin) | cost | level |", "|---|---|---|---|"]
        for r in (r for r in runs if r["workload"] == w):
            top = "; ".join(f"{b['cause']} {b['share_pct']}% (est {b['estimated_pct']}% ± {b['error_ms']} ms)"
                            for b in r["top"])
            lines.append(f"| {r['setting']} | {top} | {r['cost_pct']:.2f}% | {r['level']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.attribution", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per workload and setting (default 3)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}")
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated: {', '.join(SETTINGS)}")
    ap.add_argument("--stallscope", default=STALLSCOPE)
    ap.add_argument("--note", default="")
    ap.add_argument("--output", type=Path, help="write the report here")
    ap.add_argument("--raw", type=Path, help="write every run here as JSON")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: stallscope record needs it")
    workloads = a.workloads.split(",")
    settings = a.settings.split(",")
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
        if shutil.which(WORKLOADS[w][0][0]) is None:
            raise SystemExit(f"{WORKLOADS[w][0][0]} is missing: `make bench` installs it")
    runs = []
    for i in range(a.runs):  # settings interleaved within a round, so drift hits each alike
        for w in workloads:
            for s in settings:
                r = one_run(w, s, a.stallscope)
                print(f"round {i + 1} {w:10} {s:11} cost {r['cost_pct']:5.2f}% level {r['level']} "
                      + " | ".join(f"{b['cause'][:40]} {b['share_pct']}%" for b in r["top"]), flush=True)
                runs.append(r)
    summary = summarize(runs)
    text = report(runs, summary, a.note)
    print(text)
    if a.output:
        a.output.write_text(text + "\n")
    if a.raw:
        a.raw.write_text(json.dumps({"runs": runs, "summary": summary}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
