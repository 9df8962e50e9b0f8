"""What the io group costs: fio random 4k read/write on a loop device, untraced against traced, in
interleaved pairs, and each block program's BPF time per event.

Conditions, each paired with an untraced run of the same job (the baseline first in odd-numbered pairs,
second in even ones):
- `sched`: `stallscope record --probes none`: the scheduler probes alone, which every recording runs;
- `sched+io`: `stallscope record --probes none,+io`: the same plus the io group;
- `default+io`: the default set plus the io group, as a user turning it on would run.
The workload's figure is fio's own I/O rate (read + write IOPS); ratio = baseline IOPS / traced IOPS, so
a ratio above 1 is a slowdown. The io group's own share is `sched+io` against `sched`.

The loop device is made on a file on the test disk with direct I/O to it, so its requests take the
disk's time; fio runs O_DIRECT with libaio. The `io_waking` program runs at every wakeup of the machine
(sched_waking), not only for I/O: a scheduler-heavy workload (`--messaging`, perf bench sched messaging)
measures what it adds there.

    .venv/bin/python -m benchmarks.io --pairs 8 --output benchmarks/RESULTS-io.md --raw benchmarks/results-io.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.overhead import (
    default_stallscope, environment, overhead_from_export, parse_total_time, program_costs, run_once, slowdown,
    source_fingerprint,
)

ROOT = Path(__file__).resolve().parent.parent
CONDITIONS = {"sched": "none", "sched+io": "none,+io", "default+io": "default,+io"}
IO_PROGRAMS = ("block_io_start", "block_rq_insert", "block_rq_issue", "block_rq_complete", "block_io_done",
               "block_bio_queue", "block_bio_complete",
               "block_rq_requeue", "io_waking")
DISPATCH_NS = 40  # the estimate of calling a program that run_time_ns leaves out (docs/recording.md)


class LoopDevice:
    """A loop device on a file on the test disk, its first `fill_mb` written; removed on exit."""

    def __init__(self, size_mb: int = 512, fill_mb: int = 256):
        self.path = f"/var/tmp/stallscope-bench-{uuid.uuid4().hex[:8]}.img"
        self.size_mb, self.fill_mb = size_mb, fill_mb
        self.dev = ""

    def __enter__(self) -> str:
        subprocess.run(["truncate", "-s", f"{self.size_mb}M", self.path], check=True)
        self.dev = subprocess.run(["losetup", "-f", "--show", "--direct-io=on", self.path], capture_output=True,
                                  text=True, check=True).stdout.strip()
        subprocess.run(["dd", "if=/dev/urandom", f"of={self.dev}", "bs=1M", f"count={self.fill_mb}", "oflag=direct",
                        "status=none"], check=True)
        return self.dev

    def __exit__(self, *exc) -> None:
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev])
        Path(self.path).unlink(missing_ok=True)


def fio_command(dev: str, runtime_s: float, output: str) -> list[str]:
    return ["fio", "--name=randrw", f"--filename={dev}", "--rw=randrw", "--bs=4k", "--direct=1", "--ioengine=libaio",
            "--iodepth=16", "--size=256M", "--time_based", f"--runtime={runtime_s:g}", "--output-format=json",
            f"--output={output}"]


def fio_iops(path: str) -> float:
    job = json.loads(Path(path).read_text())["jobs"][0]
    return job["read"]["iops"] + job["write"]["iops"]


def traced(stallscope: tuple[str, ...], probes: str, recording: str, argv: list[str]) -> list[str]:
    return [*stallscope, "record", f"--probes={probes}", "-o", recording, "--", *argv]


def run_condition(stallscope: tuple[str, ...], probes: str | None, argv_for, tmp: Path, figure) -> tuple[float, dict]:
    """One run: the workload's figure, and the recording's overhead when traced."""
    out = str(tmp / f"{uuid.uuid4().hex[:8]}.json")
    argv = argv_for(out)
    rec = str(tmp / "run.stall")
    cmd = argv if probes is None else traced(stallscope, probes, rec, argv)
    os.sync()
    code, stdout, stderr, wall = run_once(cmd)
    if code != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {code}: {stderr.strip()[-300:]}")
    value = figure(out, stdout)
    overhead = {}
    if probes is not None:
        code, doc, err, _ = run_once([*stallscope, "export", rec])
        if code != 0:
            raise RuntimeError(f"export failed: {err.strip()[-300:]}")
        overhead = overhead_from_export(json.loads(doc))
        Path(rec).unlink(missing_ok=True)
    Path(out).unlink(missing_ok=True)
    return value, overhead


def pairs(stallscope: tuple[str, ...], n: int, argv_for, tmp: Path, figure, higher_is_better: bool, log) -> dict:
    """Interleaved pairs per condition: {condition: {"ratios": [...], "overheads": [...], "runs": [...]}}."""
    out = {c: {"ratios": [], "overheads": [], "runs": []} for c in CONDITIONS}
    for i in range(n):
        for cond, probes in CONDITIONS.items():
            order = [None, probes] if i % 2 == 0 else [probes, None]
            got = {}
            for p in order:
                got[p] = run_condition(stallscope, p, argv_for, tmp, figure)
            base, trace = got[None][0], got[probes][0]
            ratio = base / trace if higher_is_better else trace / base
            out[cond]["ratios"].append(ratio)
            out[cond]["overheads"].append(got[probes][1])
            out[cond]["runs"].append({"baseline": base, "traced": trace})
            log(f"pair {i + 1}/{n} {cond}: baseline {base:.1f} traced {trace:.1f} ratio {ratio:.3f}")
    return out


def per_event(overheads: list[dict]) -> list[dict]:
    return [{"program": c.program, "ns_per_event": round(c.ns_per_event, 1), "events_per_s": round(c.events_per_s),
             "recursion_misses": c.recursion_misses}
            for c in program_costs(overheads) if c.program in IO_PROGRAMS]


def report(env: dict, results: dict, args, started: str, finished: str, argv: list[str] | None = None) -> str:
    lines = ["# The io group's cost", "", args.note or "", "",
             f"- Date: {started} to {finished}",
             f"- Host: {env['host']}, kernel {env['kernel']}, {env['cpus']} x {env['cpu_model']}",
             f"- stallscope source: {env['source']} ({env['source_commit']}); fingerprint "
             f"{env['source_fingerprint_start']} at start, {source_fingerprint(Path(env['source']))} at end",
             f"- Load average at start: {' '.join(env['loadavg_at_start'])}",
             f"- Invocation: `python -m benchmarks.io {' '.join(sys.argv[1:] if argv is None else argv)}`",
             f"- {args.pairs} interleaved pairs per condition; ratio = untraced IOPS / traced IOPS for fio "
             "(above 1: slower traced), traced time / untraced time for messaging; 95% CI: percentile bootstrap "
             "of the median", ""]
    for workload, res in results.items():
        lines += [f"## {workload}", "", f"`{res['command']}`", "",
                  "| condition | pairs | median ratio | 95% CI | min | max |", "| --- | ---: | ---: | --- | ---: | ---: |"]
        for cond, r in res["conditions"].items():
            s = slowdown(r["ratios"])
            lines.append(f"| {cond} | {s.pairs} | {1 + s.median_pct / 100:.3f} | {1 + s.ci_pct[0] / 100:.3f} to "
                         f"{1 + s.ci_pct[1] / 100:.3f} | {1 + s.min_pct / 100:.3f} | {1 + s.max_pct / 100:.3f} |")
        io = [o for c in ("sched+io", "default+io") for o in res["conditions"][c]["overheads"]]
        lines += ["", "BPF run time per event (medians over the traced runs with the io group; the kernel's run-time "
                  f"statistics, which leave out calling the program, about {DISPATCH_NS} ns an event):", "",
                  "| program | ns per event | events per second |", "| --- | ---: | ---: |"]
        lines += [f"| {p['program']} | {p['ns_per_event']} | {p['events_per_s']:,} |" for p in per_event(io)]
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--runtime", type=float, default=4.0, help="fio's seconds per run")
    p.add_argument("--messaging", action="store_true", help="also perf bench sched messaging (io_waking's cost)")
    p.add_argument("--messaging-loops", type=int, default=300)
    p.add_argument("--stallscope", default="", help="the command that runs stallscope (default: this tree's)")
    p.add_argument("--source", default=str(ROOT))
    p.add_argument("--note", default="")
    p.add_argument("--output", default="")
    p.add_argument("--raw", default="")
    p.add_argument("--from-raw", default="", help="write the results of an earlier run's --raw file again")
    args = p.parse_args(argv)
    if args.from_raw:
        raw = json.loads(Path(args.from_raw).read_text())
        args.note, args.pairs = raw.get("note", args.note), raw.get("pairs", args.pairs)
        text = report(raw["environment"], raw["results"], args, raw["started"], raw["finished"], raw.get("argv"))
        Path(args.output).write_text(text) if args.output else sys.stdout.write(text)
        return 0
    if os.geteuid() != 0:
        print("benchmarks.io: run as root (tracing and losetup need it)", file=sys.stderr)
        return 2
    stallscope = tuple(shlex.split(args.stallscope)) if args.stallscope else default_stallscope()
    env = environment(stallscope, Path(args.source))
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results = {}
    with tempfile.TemporaryDirectory() as d, LoopDevice() as dev:
        tmp = Path(d)
        argv_for = lambda out: fio_command(dev, args.runtime, out)  # noqa: E731
        results["fio randrw 4k"] = {"command": shlex.join(fio_command(dev, args.runtime, "OUT")),
                                    "conditions": pairs(stallscope, args.pairs, argv_for, tmp,
                                                        lambda out, _stdout: fio_iops(out), True, log)}
        if args.messaging:
            cmd = ["perf", "bench", "sched", "messaging", "-g", "10", "-l", str(args.messaging_loops)]
            results["messaging"] = {"command": shlex.join(cmd), "conditions": pairs(
                stallscope, args.pairs, lambda out: cmd, tmp, lambda out, stdout: parse_total_time(stdout), False,
                log)}
    finished = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    text = report(env, results, args, started, finished)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    if args.raw:
        Path(args.raw).write_text(json.dumps({"environment": env, "results": results, "started": started,
                                              "finished": finished, "argv": sys.argv[1:], "note": args.note,
                                              "pairs": args.pairs}, indent=1, sort_keys=True) + "\n")
    for res in results.values():
        for cond, r in res["conditions"].items():
            r["median_ratio"] = statistics.median(r["ratios"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
