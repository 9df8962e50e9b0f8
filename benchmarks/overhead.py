"""What stallscope's tracing costs a workload: interleaved pairs against a baseline, and a peer.

    python -m benchmarks.overhead [--workloads messaging,pipe] [--pairs 15] [--noise] [--quick]

Each pair runs the baseline and one traced condition back to back, alternating which goes first, so
drifting machine noise hits both; the statistic is the median of traced/baseline over the pairs, with a
bootstrap confidence interval. The metric is the workload's own "Total time" (perf bench prints it), so
stallscope's start-up and shutdown are not counted, only what tracing costs while the workload runs.
See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20240601
RUN_TIMEOUT_S = 600.0
TMPFILE = "TMPFILE"  # placeholder in a condition's command, replaced by a fresh temporary file per run

_TOTAL_TIME = re.compile(r"^\s*Total time:\s*([0-9]+(?:\.[0-9]+)?)\s*\[sec\]", re.MULTILINE)


# ---- what is measured ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    name: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class Condition:
    """A way to run a workload. `prefix` goes before the workload's argv; TMPFILE in it is a temp file."""
    name: str
    prefix: tuple[str, ...]
    exports_overhead: bool = False  # the temp file is a stallscope recording to read the BPF cost from
    joined: bool = False  # the workload is passed as one shell-quoted argument (bpftrace -c)

    @property
    def bpftrace_script(self) -> str:
        """The script of a bpftrace peer (`bpftrace -q -e SCRIPT -c`), else ""."""
        if self.prefix[:1] == ("bpftrace",) and "-e" in self.prefix:
            return self.prefix[self.prefix.index("-e") + 1]
        return ""

    def command(self, workload: Workload, tmpfile: str = TMPFILE) -> list[str]:
        prefix = [tmpfile if a == TMPFILE else a for a in self.prefix]
        if not self.joined:
            return prefix + list(workload.argv)
        # bpftrace -c wants a path that names one binary (not a name found twice through a /bin symlink)
        path = os.path.realpath(shutil.which(workload.argv[0]) or workload.argv[0])
        return prefix + [shlex.join((path, *workload.argv[1:]))]


def workloads(messaging_loops: int, pipe_loops: int) -> dict[str, Workload]:
    return {
        "messaging": Workload("messaging", ("perf", "bench", "sched", "messaging", "-g", "10",
                                            "-l", str(messaging_loops))),
        "pipe": Workload("pipe", ("perf", "bench", "sched", "pipe", "-l", str(pipe_loops))),
        # Both ends on one CPU: every switch goes straight from one to the other, with no idle CPU to
        # wake. On a VM, waking an idle vCPU dominates the two-CPU pipe, and any tracer that keeps the
        # CPUs busier makes it faster; pinned, the pipe measures the cost per context switch.
        "pipe-1cpu": Workload("pipe-1cpu", ("taskset", "-c", "0", "perf", "bench", "sched", "pipe",
                                            "-l", str(pipe_loops))),
    }


def conditions(stallscope: tuple[str, ...]) -> dict[str, Condition]:
    return {
        "baseline": Condition("baseline", ()),
        "stallscope": Condition("stallscope", (*stallscope, "record", "-o", TMPFILE, "--"), exports_overhead=True),
        # the opt-in SLUB probe on top of the default set: per-allocation tracepoints
        "stallscope-slab": Condition("stallscope-slab", (*stallscope, "record", "--probes", "+slab", "-o", TMPFILE, "--"),
                                     exports_overhead=True),
        "perf-sched": Condition("perf-sched", ("perf", "sched", "record", "-a", "-o", TMPFILE, "--")),
        # A second baseline paired with the first: the ratios show the noise floor of this machine.
        "baseline-vs-baseline": Condition("baseline-vs-baseline", ()),
        # The scheduler probes alone (every optional group off): what each group adds is measured against it.
        "stallscope-sched": stallscope_groups(stallscope, "none"),
        "perf-lock": Condition("perf-lock", ("perf", "record", "-a", "-g", "-e", "lock:contention_begin",
                                             "-e", "lock:contention_end", "-o", TMPFILE, "--")),
        **{name: Condition(name, ("bpftrace", "-q", "-e", script, "-c"), joined=True)
           for name, script in BPFTRACE_PEERS.items()},
    }


def stallscope_groups(stallscope: tuple[str, ...], spec: str) -> Condition:
    """stallscope with the optional probe groups `spec` (`none`, or `none,+GROUP` for one group alone)."""
    name = "stallscope-sched" if spec == "none" else "stallscope+" + spec.split("+", 1)[1]
    return Condition(name, (*stallscope, "record", f"--probes={spec}", "-o", TMPFILE, "--"), exports_overhead=True)


def optional_groups(stallscope: tuple[str, ...]) -> list[str]:
    """The groups `--probes` takes, as this stallscope's doctor lists them."""
    code, out, err, _ = run_once([*stallscope, "doctor", "--json"], 120.0)
    try:
        return sorted(json.loads(out)["optional_groups"])
    except (ValueError, KeyError):
        raise SystemExit(f"cannot list the probe groups: stallscope doctor exit status {code}: {_tail(err)}")


# The peers, as bpftrace scripts on the same tracepoints (tracefs ones: bpftrace 0.17 needs tracefs).
# Each clears its maps at exit: printing them is not part of what tracing costs the workload.
BPFTRACE_PEERS = {
    # the floor: a count of context switches and nothing else
    "bpftrace-count": "tracepoint:sched:sched_switch { @c = count(); } END { clear(@c); }",
    # offcputime: time from switch-out to switch-in per (kernel stack at switch-out, comm)
    "bpftrace-offcpu": (
        "tracepoint:sched:sched_switch { @start[args->prev_pid] = nsecs; @stk[args->prev_pid] = kstack; "
        "$s = @start[args->next_pid]; if ($s) { @off[@stk[args->next_pid], args->next_comm] = sum(nsecs - $s); "
        "delete(@start[args->next_pid]); delete(@stk[args->next_pid]); } } "
        "END { clear(@start); clear(@stk); clear(@off); }"),
    # runqlat: wakeup (or preemption) to switch-in, as a log2 histogram
    "bpftrace-runqlat": (
        "tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new { @q[args->pid] = nsecs; } "
        "tracepoint:sched:sched_switch { if (args->prev_state == 0) { @q[args->prev_pid] = nsecs; } "
        "$t = @q[args->next_pid]; if ($t) { @lat = hist(nsecs - $t); delete(@q[args->next_pid]); } } "
        "END { clear(@q); clear(@lat); }"),
    # klockstat: per-lock wait histogram and total from contention_begin to contention_end
    "bpftrace-klockstat": (
        "tracepoint:lock:contention_begin { @ts[tid] = nsecs; @lk[tid] = args->lock_addr; } "
        "tracepoint:lock:contention_end { $t = @ts[tid]; if ($t) { @wait[@lk[tid]] = hist(nsecs - $t); "
        "@total[@lk[tid]] = sum(nsecs - $t); delete(@ts[tid]); delete(@lk[tid]); } } "
        "END { clear(@ts); clear(@lk); clear(@wait); clear(@total); }"),
}


def mount_tracefs() -> None:
    """perf and bpftrace find tracepoints through tracefs, which need not be mounted (BPF does not need it)."""
    if not os.path.exists("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)


# ---- running ----------------------------------------------------------------------------------------

@dataclass
class Run:
    condition: str
    total_s: float | None  # the workload's own "Total time", or wall time when it printed none
    metric: str  # "total" or "wall"
    wall_s: float
    returncode: int
    error: str = ""  # why the run does not count; empty when it does
    overhead: dict | None = None  # from the stallscope recording

    @property
    def ok(self) -> bool:
        return not self.error


def parse_total_time(stdout: str) -> float | None:
    """The seconds in perf bench's `Total time: X [sec]` line; None when there is none."""
    m = _TOTAL_TIME.search(stdout)
    return float(m.group(1)) if m else None


def run_once(argv: list[str], timeout_s: float = RUN_TIMEOUT_S) -> tuple[int, str, str, float]:
    """Run argv in its own session; returns (returncode, stdout, stderr, wall seconds).

    Its own session so that Ctrl-C reaches us first: we then stop the whole group (the tracer, the
    workload and its 400 processes) with SIGINT, so a tracer still writes and exits cleanly.
    """
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        out, err = proc.communicate()
        return -1, out, (err or "") + f"\ntimed out after {timeout_s:.0f} s", time.monotonic() - start
    except BaseException:
        _stop_group(proc)
        raise
    return proc.returncode, out, err, time.monotonic() - start


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, grace_s in ((signal.SIGINT, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def measure(condition: Condition, workload: Workload, tmpdir: Path, stallscope: tuple[str, ...],
            timeout_s: float) -> Run:
    """One run of a workload under a condition, with the recording's overhead figures if it makes one."""
    tmpfile = tmpdir / f"{condition.name}-{workload.name}.out"
    os.sync()  # the previous run's files written back now, not during this run
    try:
        try:
            code, out, err, wall_s = run_once(condition.command(workload, str(tmpfile)), timeout_s)
        except OSError as exc:  # the command could not start
            return Run(condition.name, None, "wall", 0.0, -1, error=f"could not run: {exc}")
        total = parse_total_time(out)
        run = Run(condition.name, total if total is not None else wall_s, "total" if total is not None else "wall",
                  wall_s, code)
        if code != 0:
            run.error = f"exit status {code}: {_tail(err)}"
        elif condition.exports_overhead:
            try:
                run.overhead = read_overhead(stallscope, tmpfile, timeout_s)
            except (OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
                run.error = f"export failed: {exc!r}"
        return run
    finally:
        tmpfile.unlink(missing_ok=True)


def read_overhead(stallscope: tuple[str, ...], recording: Path, timeout_s: float) -> dict:
    code, out, err, _ = run_once([*stallscope, "export", str(recording), "--format", "json"], timeout_s)
    if code != 0:
        raise ValueError(f"stallscope export exit status {code}: {_tail(err)}")
    return overhead_from_export(json.loads(out))


def overhead_from_export(doc: dict) -> dict:
    """The part of an export that tells what the tracing cost."""
    meta = doc["meta"]
    return {
        "duration_s": meta["duration_s"],
        "switches": meta.get("switches"),
        "collector_cpu_s": meta["overhead"]["collector_cpu_s"],
        "bpf_programs": meta["overhead"]["bpf_programs"],
        "health": meta.get("health", {}),
    }


# ---- a peer's own BPF cost ----------------------------------------------------------------------------
# The pairs time a bpftrace peer as users run it (`bpftrace -c WORKLOAD`); its programs' cost per event
# is measured in separate runs, so that reading it costs the timed runs nothing: the tracer is started
# alone, the workload runs once it has attached, and the kernel's run-time statistics of the programs it
# loaded are read before it is stopped (they go with its programs).

BPF_STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
ATTACH_WAIT_S = 30.0


class PeerCostError(Exception):
    pass


def bpf_program_stats() -> dict[int, dict]:
    """Every loaded BPF program by id: name, run_cnt, run_time_ns (bpftool; counts need stats on)."""
    try:
        out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise PeerCostError(f"bpftool prog show: {exc}") from exc
    try:
        progs = json.loads(out or "[]")
    except ValueError as exc:
        raise PeerCostError(f"bpftool prog show printed no JSON: {exc}") from exc
    return {p["id"]: {"name": p.get("name", str(p["id"])), "run_cnt": p.get("run_cnt", 0),
                      "run_time_ns": p.get("run_time_ns", 0)} for p in progs}


class bpf_stats_on:
    """kernel.bpf_stats_enabled=1 while inside; the earlier value restored after."""

    def __enter__(self):
        try:
            with open(BPF_STATS_SYSCTL) as f:
                self.before = f.read().strip()
            with open(BPF_STATS_SYSCTL, "w") as f:
                f.write("1")
        except OSError as exc:
            raise PeerCostError(f"cannot turn on BPF run-time statistics: {exc}") from exc
        return self

    def __exit__(self, *exc) -> None:
        try:
            with open(BPF_STATS_SYSCTL, "w") as f:
                f.write(self.before)
        except OSError as err:
            print(f"could not restore kernel.bpf_stats_enabled={self.before}: {err}", file=sys.stderr)


def peer_cost_run(condition: Condition, workload: Workload, timeout_s: float) -> dict:
    """One workload run under a bpftrace peer started alone: its programs' run counts and times."""
    with bpf_stats_on():
        before = set(bpf_program_stats())
        tracer = subprocess.Popen(["bpftrace", "-q", "-e", condition.bpftrace_script], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + ATTACH_WAIT_S
            while not set(bpf_program_stats()) - before:
                if tracer.poll() is not None:
                    raise PeerCostError(f"bpftrace exited with status {tracer.returncode}: "
                                        f"{_tail(tracer.stderr.read())}")
                if time.monotonic() > deadline:
                    raise PeerCostError(f"bpftrace loaded no program in {ATTACH_WAIT_S:.0f} s")
                time.sleep(0.2)
            time.sleep(1.0)  # every probe of the script attached, not only the first
            code, _out, err, wall_s = run_once(list(workload.argv), timeout_s)
            if code != 0:
                raise PeerCostError(f"workload exit status {code}: {_tail(err)}")
            progs: dict[str, dict] = {}
            for pid, p in bpf_program_stats().items():
                if pid in before or not p["run_cnt"]:
                    continue
                agg = progs.setdefault(p["name"], {"run_cnt": 0, "run_time_ns": 0})
                agg["run_cnt"] += p["run_cnt"]
                agg["run_time_ns"] += p["run_time_ns"]
        finally:
            _stop_group(tracer)
    return {"duration_s": wall_s, "bpf_programs": progs}


def check_available(condition: Condition, tmpdir: Path) -> str:
    """Empty if the condition can trace `true`; else the reason it cannot."""
    if not condition.prefix:
        return ""
    if shutil.which(condition.prefix[0]) is None:
        return f"{condition.prefix[0]} not found"
    tmpfile = tmpdir / f"probe-{condition.name}.out"
    try:
        code, _, err, _ = run_once(condition.command(Workload("true", ("true",)), str(tmpfile)), 60.0)
    except OSError as exc:
        return f"cannot run {condition.prefix[0]}: {exc}"
    finally:
        tmpfile.unlink(missing_ok=True)
    return "" if code == 0 else f"`{shlex.join(condition.prefix)} true` exit status {code}: {_tail(err)}"


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in (text or "").strip().splitlines()[-lines:])


# ---- statistics (pure) ---------------------------------------------------------------------------

def bootstrap_ci(values: list[float], level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the median of `values`."""
    if not values:
        raise ValueError("no values")
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    alpha = (1 - level) / 2
    lo = medians[int(alpha * (resamples - 1))]
    hi = medians[int(round((1 - alpha) * (resamples - 1)))]
    return lo, hi


@dataclass(frozen=True)
class Slowdown:
    pairs: int
    median_pct: float
    ci_pct: tuple[float, float]
    min_pct: float
    max_pct: float


def slowdown(ratios: list[float]) -> Slowdown:
    """Traced/baseline ratios as percent slowdowns (positive = the traced run was slower)."""
    lo, hi = bootstrap_ci(ratios)
    pct = lambda r: (r - 1) * 100  # noqa: E731
    return Slowdown(len(ratios), pct(statistics.median(ratios)), (pct(lo), pct(hi)), pct(min(ratios)),
                    pct(max(ratios)))


@dataclass(frozen=True)
class ProgramCost:
    program: str
    runs: int
    events_per_run: float  # median over runs of run_cnt
    ns_per_event: float  # median over runs of run_time_ns / run_cnt
    events_per_s: float  # median over runs of run_cnt / the recording's duration
    ms_per_run: float  # median over runs of run_time_ns, in ms
    recursion_misses: int  # total over runs


def program_costs(overheads: list[dict]) -> list[ProgramCost]:
    """Per BPF program, medians over runs; programs that never ran are left out."""
    names = sorted({name for o in overheads for name in o["bpf_programs"]})
    costs = []
    for name in names:
        per_run = [(o["bpf_programs"][name], o["duration_s"]) for o in overheads
                   if o["bpf_programs"].get(name, {}).get("run_cnt") and o["duration_s"]]
        if not per_run:
            continue
        costs.append(ProgramCost(
            name, len(per_run),
            statistics.median(p["run_cnt"] for p, _ in per_run),
            statistics.median(p["run_time_ns"] / p["run_cnt"] for p, _ in per_run),
            statistics.median(p["run_cnt"] / d for p, d in per_run),
            statistics.median(p["run_time_ns"] / 1e6 for p, _ in per_run),
            sum(p.get("recursion_misses", 0) for p, _ in per_run),
        ))
    return costs


def bpf_share_of_workload(runs: list[tuple[dict, float]]) -> float:
    """Median over (overhead, workload seconds) of all programs' run time / the workload's time."""
    return statistics.median(sum(p["run_time_ns"] for p in o["bpf_programs"].values()) / 1e9 / total_s
                             for o, total_s in runs)


def collector_cpu(overheads: list[dict]) -> tuple[float, float, float] | None:
    """Collector CPU seconds per wall second: (median, min, max) over runs."""
    shares = [o["collector_cpu_s"] / o["duration_s"] for o in overheads if o["duration_s"]]
    return (statistics.median(shares), min(shares), max(shares)) if shares else None


# ---- the experiment ----------------------------------------------------------------------------------

@dataclass
class Pair:
    workload: str
    condition: str
    index: int
    first: str  # which of "baseline" / "traced" ran first
    baseline: Run
    traced: Run
    loadavg_1m: float  # at the start of the pair: other work on the machine shows here

    @property
    def ok(self) -> bool:
        return self.baseline.ok and self.traced.ok

    @property
    def ratio(self) -> float:
        return self.traced.total_s / self.baseline.total_s


@dataclass
class Experiment:
    workloads: list[Workload]
    conditions: list[Condition]
    pairs_wanted: int
    unavailable: dict[str, str] = field(default_factory=dict)  # condition -> reason
    pairs: list[Pair] = field(default_factory=list)
    interrupted: bool = False
    started: str = ""
    finished: str = ""
    peer_cost_runs: int = 0
    cost_only: list[Condition] = field(default_factory=list)  # bpftrace peers measured for BPF cost, not paired
    # (workload, condition) -> per run {"duration_s", "bpf_programs"}: a bpftrace peer's own BPF cost
    peer_costs: dict[tuple[str, str], list[dict]] = field(default_factory=dict)


def run_pair(workload: Workload, condition: Condition, index: int, baseline: Condition, tmpdir: Path,
             stallscope: tuple[str, ...], timeout_s: float) -> Pair:
    """Baseline and traced back to back; even pairs start with the baseline, odd ones with the traced run."""
    order = ("baseline", "traced") if index % 2 == 0 else ("traced", "baseline")
    loadavg_1m = os.getloadavg()[0]
    runs = {}
    for role in order:
        runs[role] = measure(baseline if role == "baseline" else condition, workload, tmpdir, stallscope,
                             timeout_s)
    return Pair(workload.name, condition.name, index, order[0], runs["baseline"], runs["traced"],
                loadavg_1m)


def run_experiment(exp: Experiment, stallscope: tuple[str, ...], timeout_s: float, log) -> None:
    """Fills exp.pairs; on Ctrl-C stops and marks the experiment interrupted, keeping what was measured."""
    baseline = Condition("baseline", ())
    exp.started = _now()
    with tempfile.TemporaryDirectory(prefix="stallscope-bench-") as tmp:
        tmpdir = Path(tmp)
        try:
            for cond in exp.conditions:
                reason = check_available(cond, tmpdir)
                if reason:
                    exp.unavailable[cond.name] = reason
                    log(f"{cond.name}: unavailable: {reason}")
            active = [c for c in exp.conditions if c.name not in exp.unavailable]
            for workload in exp.workloads:
                # Conditions interleaved within each pair index too, so slow drift spreads over all of them.
                for index in range(exp.pairs_wanted):
                    for cond in active:
                        pair = run_pair(workload, cond, index, baseline, tmpdir, stallscope, timeout_s)
                        exp.pairs.append(pair)
                        log(_pair_line(pair, exp.pairs_wanted))
            for workload in exp.workloads:
                for cond in active + exp.cost_only:
                    if not cond.bpftrace_script:
                        continue
                    runs = exp.peer_costs.setdefault((workload.name, cond.name), [])
                    for _ in range(exp.peer_cost_runs):
                        try:
                            runs.append(peer_cost_run(cond, workload, timeout_s))
                        except PeerCostError as exc:
                            log(f"{workload.name} / {cond.name}: BPF cost run failed: {exc}")
                            break
                    if runs:
                        log(f"{workload.name} / {cond.name}: BPF cost measured in {len(runs)} run(s)")
        except KeyboardInterrupt:
            exp.interrupted = True
            log("interrupted: reporting the pairs measured so far")
    exp.finished = _now()


def _pair_line(p: Pair, wanted: int) -> str:
    head = f"{p.workload:<10} {p.condition:<21} pair {p.index + 1:>2}/{wanted}"
    if not p.ok:
        return f"{head}  FAILED: {p.baseline.error or p.traced.error}"
    return f"{head}  base {p.baseline.total_s:7.3f} s  traced {p.traced.total_s:7.3f} s  ratio {p.ratio:.3f}"


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


# ---- environment and output ---------------------------------------------------------------------

def command_output(argv: list[str]) -> str:
    """What a command printed, stripped; "?" when it cannot run."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def environment(stallscope: tuple[str, ...], source: Path) -> dict:
    out = command_output
    commit = out(["git", "-C", str(source), "rev-parse", "--short", "HEAD"])
    dirty = out(["git", "-C", str(source), "status", "--porcelain", "--", ".", ":(exclude)benchmarks"])
    return {
        "host": platform.node(), "kernel": platform.release(), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
        "python": platform.python_version(), "perf": out(["perf", "--version"]),
        "stallscope": out([*stallscope, "--version"]) or "?", "stallscope_command": shlex.join(stallscope),
        "source": str(source),
        "source_commit": (commit + (" with uncommitted changes" if dirty else "")) if commit else "not a git checkout",
        "source_fingerprint_start": source_fingerprint(source),
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
    }


_FINGERPRINT_SKIP = {"benchmarks", "tests", "examples", "docs", "__pycache__"}


def source_fingerprint(root: Path) -> str:
    """A hash of the Python and BPF files under root, to tell whether what was measured changed meanwhile."""
    digest = hashlib.sha256()
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _FINGERPRINT_SKIP)
        for name in sorted(filenames):
            if not name.endswith((".py", ".o", ".c", ".h")):
                continue
            path = Path(dirpath, name)
            try:
                data = path.read_bytes()
            except OSError:
                continue
            digest.update(str(path.relative_to(root)).encode() + b"\0" + data)
            count += 1
    return f"{digest.hexdigest()[:12]} ({count} files)"


def raw_document(exp: Experiment, env: dict, argv: list[str]) -> dict:
    return {
        "environment": env, "argv": argv, "started": exp.started, "finished": exp.finished,
        "interrupted": exp.interrupted, "pairs_wanted": exp.pairs_wanted, "unavailable": exp.unavailable,
        "commands": {w.name: {c.name: shlex.join(c.command(w)) for c in exp.conditions} for w in exp.workloads},
        "pairs": [dict(asdict(p), ok=p.ok, ratio=p.ratio if p.ok else None) for p in exp.pairs],
        "peer_costs": {f"{w}/{c}": runs for (w, c), runs in exp.peer_costs.items()},
    }


def report(exp: Experiment, env: dict, argv: list[str], note: str = "") -> str:
    """The Markdown report."""
    lines = ["# stallscope overhead", ""]
    if exp.interrupted:
        lines += ["**Interrupted: partial results.**", ""]
    if note:
        lines += [note, ""]
    lines += [
        f"- Date: {exp.started} to {exp.finished}",
        f"- Host: {env['host']}, kernel {env['kernel']}, {env['cpus']} x {env['cpu_model']}",
        f"- {env['stallscope']} run as `{env['stallscope_command']}`; {env['perf']}; Python {env['python']}",
        f"- stallscope source: {env['source']} ({env['source_commit']}); fingerprint "
        f"{env['source_fingerprint_start']} at start, {env.get('source_fingerprint_end', '?')} at end"
        + ("" if env.get("source_fingerprint_end") == env["source_fingerprint_start"]
           else " -- **CHANGED during the run: the results mix versions**"),
        f"- Load average at start: {' '.join(env['loadavg_at_start'])}",
        f"- Invocation: `{shlex.join(argv)}`",
        f"- Pairs per condition: {exp.pairs_wanted}; each pair runs the baseline and the traced condition "
        "back to back, the baseline first in odd-numbered pairs, second in even ones. "
        "Ratio = traced / baseline of the workload's own `Total time`; slowdown = ratio - 1.",
        f"- 95% CI: percentile bootstrap of the median ({BOOTSTRAP_RESAMPLES:,} resamples, seed {BOOTSTRAP_SEED}).",
        "",
        "## Commands", "",
    ]
    for w in exp.workloads:
        for c in exp.conditions:
            lines.append(f"- {w.name} / {c.name}: `{shlex.join(c.command(w))}`")
    lines.append("")
    if exp.unavailable:
        lines += ["## Unavailable conditions", ""]
        lines += [f"- {name}: {reason}" for name, reason in exp.unavailable.items()]
        lines.append("")

    lines += ["## Slowdown", "",
              "| workload | condition | pairs | baseline median (s) | traced median (s) | median slowdown "
              "| 95% CI | min | max |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for w in exp.workloads:
        for c in exp.conditions:
            good = [p for p in exp.pairs if p.workload == w.name and p.condition == c.name and p.ok]
            if not good:
                why = exp.unavailable.get(c.name, "no successful pair")
                lines.append(f"| {w.name} | {c.name} | 0 | | | {why} | | | |")
                continue
            s = slowdown([p.ratio for p in good])
            base = statistics.median(p.baseline.total_s for p in good)
            traced = statistics.median(p.traced.total_s for p in good)
            lines.append(f"| {w.name} | {c.name} | {s.pairs} | {base:.3f} | {traced:.3f} | {s.median_pct:+.1f}% "
                         f"| {s.ci_pct[0]:+.1f}% to {s.ci_pct[1]:+.1f}% | {s.min_pct:+.1f}% | {s.max_pct:+.1f}% |")
    wall = [r for p in exp.pairs for r in (p.baseline, p.traced) if r.ok and r.metric == "wall"]
    if wall:
        lines += ["", f"{len(wall)} run(s) printed no `Total time`: their wall time was used instead."]
    lines.append("")

    lines += _bpf_section(exp)

    failed = [p for p in exp.pairs if not p.ok]
    lines += ["## Failed runs (their pairs are excluded)", ""]
    if not failed:
        lines.append("None.")
    for p in failed:
        for role, r in (("baseline", p.baseline), ("traced", p.traced)):
            if not r.ok:
                lines.append(f"- {p.workload} / {p.condition} pair {p.index + 1}, {role} run: {r.error}")
    lines += ["", "Raw per-pair measurements: the JSON file written with `--raw`.", ""]
    return "\n".join(lines)


def _cost_table(overheads: list[dict]) -> list[str]:
    lines = ["| program | runs | events per run | ns per event | events/s | BPF ms per run | recursion misses |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for c in program_costs(overheads):
        lines.append(f"| {c.program} | {c.runs} | {c.events_per_run:,.0f} | {c.ns_per_event:,.0f} "
                     f"| {c.events_per_s:,.0f} | {c.ms_per_run:,.1f} | {c.recursion_misses} |")
    return lines


def _bpf_section(exp: Experiment) -> list[str]:
    lines = []
    for w in exp.workloads:
        for cond in exp.conditions:
            traced = [p.traced for p in exp.pairs
                      if p.workload == w.name and p.condition == cond.name and p.ok and p.traced.overhead is not None]
            if not traced:
                continue
            overheads = [r.overhead for r in traced]
            lines += [f"## BPF cost per event: {w.name} / {cond.name} ({len(traced)} recordings)", "",
                      f"Medians: workload Total time {statistics.median(r.total_s for r in traced):.3f} s, "
                      f"recording duration {statistics.median(o['duration_s'] for o in overheads):.3f} s, "
                      f"context switches recorded {statistics.median(o['switches'] or 0 for o in overheads):,.0f}.",
                      ""]
            lines += _cost_table(overheads)
            share = bpf_share_of_workload([(r.overhead, r.total_s) for r in traced])
            lines += ["", f"All programs together ran for {share:.3f} CPU s per second of the workload's Total "
                          f"time (median; {os.cpu_count()} CPUs)."]
            cpu = collector_cpu(overheads)
            if cpu:
                lines.append(f"Collector (stallscope's user space, from attach to exit): "
                             f"{statistics.median(o['collector_cpu_s'] for o in overheads):.3f} CPU s per run; "
                             f"{cpu[0]:.3f} CPU s per second of the recording's duration (median; min {cpu[1]:.3f}, "
                             f"max {cpu[2]:.3f}).")
            lines.append("")
    for (wname, cname), runs in exp.peer_costs.items():
        if not runs:
            continue
        lines += [f"## BPF cost per event: {wname} / {cname} ({len(runs)} separate runs, not timed in the pairs)",
                  "", "The peer started alone; the workload ran once its programs had attached; their "
                  "statistics were read before it stopped. Events/s are over the workload's wall time.", ""]
        lines += _cost_table(runs)
        lines.append("")
    if lines:
        lines += ["Medians over runs. `run_time_ns` (kernel.bpf_stats) excludes the dispatch cost of calling "
                  "the program (tens of ns per event, measured for an empty program; not measured here), so the "
                  "true cost per event is somewhat higher. Events/s and the collector's share are over the "
                  "recording's duration, which is longer than the workload's Total time (it also covers the "
                  "workload's set-up and exit), so they understate the rate while the "
                  "workload runs. The recording's duration ends where its last interval does, once the final "
                  "drain has read the maps; the collector's CPU also covers its start-up (loading kernel "
                  "symbols) and the symbolising of that last drain, so its CPU per second of duration "
                  "overstates its steady load on a short run; the slowdown above is the measure of what it "
                  "cost the workload.", ""]
    return lines


# ---- command line -----------------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="messaging,pipe",
                    help="comma-separated: messaging, pipe, pipe-1cpu (both ends of the pipe on CPU 0)")
    ap.add_argument("--conditions", default="stallscope,perf-sched",
                    help="comma-separated traced conditions: stallscope (the default probe set), stallscope-sched "
                         "(scheduler probes only), stallscope+GROUP (scheduler probes and that group), groups "
                         "(stallscope-sched and stallscope+GROUP for every group), perf-sched, perf-lock, "
                         "bpftrace-count (the floor), bpftrace-offcpu, bpftrace-runqlat, bpftrace-klockstat, peers (all six), "
                         "baseline-vs-baseline")
    ap.add_argument("--noise", action="store_true", help="add baseline-vs-baseline pairs (the noise floor)")
    ap.add_argument("--pairs", type=int, default=None, help="pairs per condition and workload (default 15)")
    ap.add_argument("--peer-cost-runs", type=int, default=5, metavar="N",
                    help="after the pairs, N separate runs per bpftrace peer and workload that read the peer's own "
                         "BPF cost per event (default 5; 0: none)")
    ap.add_argument("--cost-peers", default="", metavar="PEERS",
                    help="comma-separated bpftrace peers whose BPF cost per event is measured in the separate runs "
                         "without timing them in pairs (e.g. bpftrace-count,bpftrace-offcpu)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 pairs and smaller -l")
    ap.add_argument("--messaging-loops", type=int, default=None, help="-l for messaging (default 600)")
    ap.add_argument("--pipe-loops", type=int, default=None, help="-l for pipe (default 60000)")
    ap.add_argument("--stallscope", type=shlex.split, default=None,
                    help="the stallscope command, e.g. 'env PYTHONPATH=DIR python -m stallscope' "
                         "(default: the stallscope script next to this Python)")
    ap.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="the stallscope source tree that command runs, fingerprinted before and after so a change "
                         "during the run shows (default: this repository, which the editable install runs)")
    ap.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds before a run is killed")
    ap.add_argument("--note", default="", help="a paragraph to put at the top of the report")
    ap.add_argument("--output", type=Path, help="also write the report here")
    ap.add_argument("--raw", type=Path, help="write every per-pair measurement here as JSON")
    args = ap.parse_args(argv)
    if args.pairs is None:
        args.pairs = 3 if args.quick else 15
    if args.messaging_loops is None:
        args.messaging_loops = 100 if args.quick else 600
    if args.pipe_loops is None:
        args.pipe_loops = 10_000 if args.quick else 60_000
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    return args


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def default_stallscope() -> tuple[str, ...]:
    beside = Path(sys.executable).parent / "stallscope"
    return (str(beside) if beside.exists() else (shutil.which("stallscope") or "stallscope"),)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    stallscope = tuple(args.stallscope or default_stallscope())
    known_w = workloads(args.messaging_loops, args.pipe_loops)
    known_c = conditions(stallscope)
    names_w = [n for n in args.workloads.split(",") if n]
    names_c = []
    for n in filter(None, args.conditions.split(",")):
        if n == "groups":
            names_c += ["stallscope-sched"] + [f"stallscope+{g}" for g in optional_groups(stallscope)]
        elif n == "peers":
            names_c += ["perf-sched", "perf-lock", *BPFTRACE_PEERS]
        else:
            names_c.append(n)
    names_c = list(dict.fromkeys(names_c))
    for n in names_c:
        if n.startswith("stallscope+") and n not in known_c:
            known_c[n] = stallscope_groups(stallscope, "none,+" + n.split("+", 1)[1])
    if args.noise and "baseline-vs-baseline" not in names_c:
        names_c.append("baseline-vs-baseline")
    mount_tracefs()
    unknown = [n for n in names_w if n not in known_w] + [n for n in names_c if n not in known_c or n == "baseline"]
    if unknown:
        print(f"unknown workload or condition: {', '.join(unknown)}", file=sys.stderr)
        return 2

    cost_only = [n for n in filter(None, args.cost_peers.split(",")) if n not in names_c]
    bad = [n for n in cost_only if n not in BPFTRACE_PEERS]
    if bad:
        print(f"--cost-peers takes bpftrace peers only ({', '.join(BPFTRACE_PEERS)}): {', '.join(bad)}",
              file=sys.stderr)
        return 2
    exp = Experiment([known_w[n] for n in names_w], [known_c[n] for n in names_c], args.pairs,
                     peer_cost_runs=max(args.peer_cost_runs, 0), cost_only=[known_c[n] for n in cost_only])
    env = environment(stallscope, args.source)
    # SIGTERM (and SIGINT even when started in the background, where it is inherited as ignored) stop the
    # experiment like Ctrl-C: the runs are in their own sessions, so nothing else stops them.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    run_experiment(exp, stallscope, args.timeout, lambda msg: print(msg, file=sys.stderr, flush=True))
    env["source_fingerprint_end"] = source_fingerprint(args.source)

    text = report(exp, env, ["python", "-m", "benchmarks.overhead", *argv], args.note)
    print(text)
    if args.output:
        args.output.write_text(text)
    if args.raw:
        args.raw.write_text(json.dumps(raw_document(exp, env, argv), indent=1, sort_keys=True) + "\n")
    return 130 if exp.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
