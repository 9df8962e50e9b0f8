"""How stallscope scales: many threads, a high event rate, an hour's recording. Times and memory.

    python -m benchmarks.scale [--scenarios threads,analyzer,hour] [--output benchmarks/RESULTS-scale.md]
                               [--raw benchmarks/results-scale.json]

- threads: 10,000 mostly idle threads (examples/bin/idle_threads) and hackbench while `stallscope record`
  (real BPF, the default probe set) records: the recorder's peak RSS and CPU, its CPU per interval, the
  file's size, the threads it saw against the ground truth, the maps' loss counters, hackbench's slowdown.
- analyzer: synthetic interval snapshots equivalent to 1M context switches a second, pushed through the
  live view's path (model, rank_blockers, render) and the recording's (the store): time per simulated
  second, and memory over time.
- hour: a synthetic hour (3600 one-second intervals) written through the store, then `stallscope export
  --format json`, `stallscope causes` and `stallscope diff` on such files, run as a user would: wall time,
  peak RSS, size; the same for a quarter and a half of the hour (a step that grows faster than the
  recording shows there); and a replay: one-interval windows read at the start, middle and end.
- soak: every probe group (`--probes all`) under a hackbench loop with 5,000 idle threads for minutes:
  the recorder's RSS every second (bounded or growing), the intervals kept, every loss counter.

Each synthetic scenario runs in a child process of its own, so its peak RSS (wait4's ru_maxrss) is its own.
Standard library and stallscope only. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shlex
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks.overhead import command_output, cpu_model

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("threads", "analyzer", "hour", "soak")
_TOTAL_TIME_PREFIX = "Total time:"


# ---- synthetic intervals (pure, deterministic) ---------------------------------------------------------

@dataclass(frozen=True)
class SyntheticLoad:
    """What one second of a machine looks like once the kernel has aggregated it into map entries.

    `events_per_s` are context switches: each is one off-CPU wait, counted in exactly one `offcpu` entry
    and in one task's voluntary or involuntary switches; each voluntary one was ended by a wakeup,
    counted in one `wakers` entry. (Each switch also runs sched_waking and sched_wakeup: the probes see
    about three tracepoint events per switch, so this mapping is the harder one for the analyzer.)
    The entries per interval do not grow with the rate, only the counts in them: the rate is what the
    kernel absorbs, the cardinalities are what user space pays for.
    """

    events_per_s: int = 1_000_000
    cpus: int = 64  # a machine that switches 1M times a second has many CPUs
    tasks: int = 5000  # threads active in each interval
    processes: int = 500
    waits_per_task: int = 4  # distinct (state, kernel stack, user stack) per active thread per interval
    wakers_per_task: int = 4  # distinct (waker, waker stack) per active thread per interval
    kernel_stacks: int = 20_000  # described in the first interval
    user_stacks: int = 10_000
    new_stacks_per_s: int = 300  # first seen later, half kernel, half user
    locks_per_s: int = 10_000  # lock entries (task, lock, stack) per interval
    lock_events_per_s: int = 200_000  # contentions counted in them (not part of events_per_s)
    futex_per_s: int = 1000
    oncpu_per_s: int = 3000  # distinct (thread, stacks) sampled per interval
    new_tasks_per_s: int = 400  # threads that exit each second, replaced by new ones (task churn)

    @property
    def offcpu_entries(self) -> int:
        return self.tasks * self.waits_per_task

    @property
    def waker_entries(self) -> int:
        return self.tasks * self.wakers_per_task

    def entries_per_interval(self) -> dict[str, int]:
        """Records of each kind in one interval after the first (the first also carries every stack)."""
        return {"tasks": self.tasks, "task_info": self.new_tasks_per_s * 2, "offcpu": self.offcpu_entries,
                "wakers": self.waker_entries, "locks": self.locks_per_s, "futex": self.futex_per_s,
                "oncpu": self.oncpu_per_s, "oncpu_cpus": self.cpus, "stacks": self.new_stacks_per_s}


# 1M context switches a second through the analyzer (scenario "analyzer").
ANALYZER_LOAD = SyntheticLoad()
# A moderately busy server over an hour (scenario "hour"): a hundred threads active each second, about
# 600 delta rows a second (2.1 million in the hour). Recordings of this 2-CPU VM under other people's
# hackbench hold ~28,000 rows a second: scale the figures by the rows.
HOUR_LOAD = SyntheticLoad(events_per_s=20_000, cpus=4, tasks=100, processes=30, waits_per_task=2,
                          wakers_per_task=2, kernel_stacks=1500, user_stacks=1000, new_stacks_per_s=1,
                          locks_per_s=30, lock_events_per_s=1000, futex_per_s=5, oncpu_per_s=40,
                          new_tasks_per_s=5)

# Innermost frames of off-CPU kernel stacks, below __schedule/schedule: what the cause table reads.
_SLEEP_PATHS = (
    ("do_nanosleep", "hrtimer_nanosleep", "common_nsleep", "__x64_sys_clock_nanosleep"),
    ("anon_pipe_read", "vfs_read", "ksys_read", "__x64_sys_read"),
    ("futex_wait_queue", "__futex_wait", "futex_wait", "do_futex", "__x64_sys_futex"),
    ("ep_poll", "do_epoll_wait", "__x64_sys_epoll_wait"),
    ("unix_stream_read_generic", "unix_stream_recvmsg", "sock_recvmsg", "__sys_recvfrom"),
    ("rwsem_down_read_slowpath", "down_read", "lock_mm_and_find_vma", "do_user_addr_fault", "exc_page_fault"),
    ("__mutex_lock", "mutex_lock", "pipe_write", "vfs_write", "ksys_write"),
    ("io_schedule", "folio_wait_bit_common", "filemap_fault", "__do_fault", "handle_mm_fault"),
    ("do_wait", "kernel_wait4", "__do_sys_wait4"),
    ("schedule_timeout", "wait_woken", "n_tty_read", "tty_read", "vfs_read"),
)
_USER_LEAVES = ("__GI___clock_nanosleep", "__GI___libc_read", "__futex_abstimed_wait_common",
                "___pthread_mutex_lock", "epoll_wait", "__libc_recv", "__GI___libc_write", "__poll")
_FILLER = 2000  # synthetic function names for the rest of each stack
STATE_SLEEPING, STATE_DISK = 1, 2


class SyntheticSource:
    """Deterministic interval snapshots for a SyntheticLoad: `interval(i)` for i = 0, 1, 2, ... in order.

    Interval 0 describes every initial stack and task; later ones describe only what is new. Each active
    thread keeps its stacks for its life; `new_tasks_per_s` threads exit each interval (their last
    TaskInfo carries TS_DEAD) and as many new ones start.
    """

    def __init__(self, load: SyntheticLoad, seed: int = 1, start_wall: float = 1_700_000_000.0):
        from stallscope.analyzer.sample import ProbeStatus, RecordingMeta
        from stallscope.analyzer.symbols import Frame

        self.load = load
        self.rng = random.Random(seed)
        self.start_wall = start_wall
        self._Frame = Frame
        self.meta = RecordingMeta(
            format_version=1, stallscope_version="synthetic", host="synthetic", kernel="6.18", cpus=load.cpus,
            start_wall=start_wall, start_ns=0, interval_s=1.0,
            probes={name: ProbeStatus(True, "tp_btf") for name in ("offcpu", "runq", "switches", "wakers",
                                                                   "migrations", "locks", "oncpu", "futex")},
            options={"interval_s": 1.0, "stallscope_pid": 1, "synthetic": asdict(load)})
        self._kframes = [Frame(0xFFFFFFFF81000000 + 0x40 * i, f"kfunc_{i}", 0x1a, "kernel", None, None, "kernel")
                         for i in range(_FILLER)]
        self._uframes = [Frame(0x400000 + 0x40 * i, f"app_fn_{i}", 0x10, "/usr/bin/app", "ab" * 20, 0x1000 + 0x40 * i,
                               "user") for i in range(_FILLER)]
        self.kstacks: list[int] = []
        self.ustacks: list[int] = []
        self.waker_stacks: list[int] = []
        self._pending_stacks: list = []
        self.first_pid = self._next_pid = 1000
        self._next_index = 0
        self._active: list[tuple] = []  # (TaskId, tgid, kstacks, ustacks)
        self._pending_info: list = []
        for _ in range(load.kernel_stacks):
            self._new_stack("kernel")
        for _ in range(load.user_stacks):
            self._new_stack("user")
        for _ in range(load.tasks):
            self._active.append(self._new_task())
        self._lock_addrs = [0xFFFF888000000000 + 0x1000 * i for i in range(500)]

    def _stack_id(self) -> int:
        return self.rng.getrandbits(63) | (1 << 40)  # content hashes; ids below 16 are reasons

    def _new_stack(self, kind: str) -> None:
        from stallscope.analyzer.sample import Stack

        rng, F = self.rng, self._Frame
        sid = self._stack_id()
        if kind == "kernel":
            path = _SLEEP_PATHS[rng.randrange(len(_SLEEP_PATHS))]
            head = [F(0xFFFFFFFF82000000 + 0x100 * j, name, 0x20, "kernel", None, None, "kernel")
                    for j, name in enumerate(("__schedule", "schedule", *path))]
            frames = head + rng.sample(self._kframes, rng.randrange(3, 10))
            self.kstacks.append(sid)
            if len(self.kstacks) % 10 == 0:
                self.waker_stacks.append(sid)
        else:
            leaf = _USER_LEAVES[rng.randrange(len(_USER_LEAVES))]
            head = [F(0x7F0000000000 + 0x100 * rng.randrange(64), leaf, 0x30, "/usr/lib/x86_64-linux-gnu/libc.so.6",
                      "cd" * 20, 0x20000, "user")]
            frames = head + rng.sample(self._uframes, rng.randrange(4, 14))
            self.ustacks.append(sid)
        self._pending_stacks.append(Stack(sid, kind, tuple(frames)))

    def _new_task(self) -> tuple:
        from stallscope.analyzer.sample import TaskId, TaskInfo

        load, rng = self.load, self.rng
        pid = self._next_pid
        self._next_pid += 1
        tid = TaskId(pid, pid * 1_000_000)
        tgid = 1000 + (pid % load.processes)
        self._pending_info.append(TaskInfo(tid, tgid, 1, f"worker-{tgid % 97}"))
        ks = tuple(self.kstacks[rng.randrange(len(self.kstacks))] for _ in range(load.waits_per_task))
        us = tuple(self.ustacks[rng.randrange(len(self.ustacks))] for _ in range(load.waits_per_task))
        return tid, tgid, ks, us

    def interval(self, index: int):
        """The snapshot of second `index`; call with 0, 1, 2, ... in order."""
        from stallscope.analyzer.sample import (
            CpuSamplesDelta, FutexDelta, Interval, LockDelta, OffcpuDelta, OncpuDelta, ProgramCost, TaskDelta,
            TaskInfo, WakerDelta,
        )

        assert index == self._next_index, "intervals are generated in order"
        self._next_index += 1
        load, rng = self.load, self.rng
        if index > 0:
            for _ in range(load.new_stacks_per_s):
                self._new_stack("kernel" if rng.random() < 0.5 else "user")
            for _ in range(load.new_tasks_per_s):  # churn: one thread exits, a new one starts
                j = rng.randrange(len(self._active))
                tid, tgid, _, _ = self._active[j]
                self._pending_info.append(TaskInfo(tid, tgid, 1, f"worker-{tgid % 97}", flags=8))  # TS_DEAD
                self._active[j] = self._new_task()
        stacks, self._pending_stacks = tuple(self._pending_stacks), []
        infos, self._pending_info = tuple(self._pending_info), []

        n_waits = load.offcpu_entries
        base, extra = divmod(load.events_per_s, n_waits)
        tasks, offcpu, wakers = [], [], []
        k = 0
        w_per = load.wakers_per_task
        for t, (tid, tgid, ks, us) in enumerate(self._active):
            switches = 0
            for j in range(load.waits_per_task):
                c = base + (1 if k < extra else 0)
                k += 1
                if c == 0:
                    continue
                switches += c
                mean = 2_000_000 + 1000 * (k % 4096)
                slot = mean.bit_length() - 1
                offcpu.append(OffcpuDelta(tid, tgid, STATE_DISK if j == 3 else STATE_SLEEPING, ks[j], us[j], c,
                                          c * mean, mean * 4, ((slot - 1, c // 4), (slot, c - c // 4 - c // 8),
                                                               (slot + 2, c // 8))))
            invol = switches // 8
            vol = switches - invol
            tasks.append(TaskDelta(tid, offcpu_ns=sum(o.total_ns for o in offcpu[-load.waits_per_task:]),
                                   offcpu_count=switches, runq_wait_ns=switches * 50_000, runq_count=switches,
                                   runq_max_ns=3_000_000, voluntary_switches=vol, involuntary_switches=invol,
                                   migrations=switches // 100, runq_hist=((14, switches // 2), (16, switches - switches // 2)),
                                   runq_latency_ns=switches * 50_000))
            wb, wx = divmod(vol, w_per)
            for j in range(w_per):
                c = wb + (1 if j < wx else 0)
                if c == 0:
                    continue
                waker_tid, waker_tgid, _, _ = self._active[(t + 1 + j * 7) % len(self._active)]
                wks = self.waker_stacks[(t * w_per + j) % len(self.waker_stacks)]
                wakers.append(WakerDelta(tid, waker_tid, waker_tgid, f"worker-{waker_tgid % 97}", wks, c,
                                         c * 2_000_000))
        locks = []
        lb, lx = divmod(load.lock_events_per_s, max(load.locks_per_s, 1))
        for j in range(load.locks_per_s):
            tid, tgid, ks, _ = self._active[(j * 13) % len(self._active)]
            c = lb + (1 if j < lx else 0)
            locks.append(LockDelta(tid, tgid, self._lock_addrs[j % len(self._lock_addrs)], ks[0], 33, 0, c, c * 20_000,
                                   100_000, 1000, c * 5000, c * 15_000))
        futex = []
        for j in range(load.futex_per_s):
            tid, tgid, _, us = self._active[(j * 17) % len(self._active)]
            futex.append(FutexDelta(tid, tgid, 0x7F0000100000 + 0x40 * (j % 200), 0, us[0], 0x401000 + j % 50,
                                    f"app_fn_{j % 50}+0x10", "", 10, 1_000_000))
        oncpu = []
        for j in range(load.oncpu_per_s):
            tid, tgid, ks, us = self._active[(j * 11) % len(self._active)]
            oncpu.append(OncpuDelta(tid, tgid, f"worker-{tgid % 97}", ks[-1], us[-1], 2, 20_202_020))
        cpus = tuple(CpuSamplesDelta(c, 99, 1_000_000_000, 20, 200_000_000, 1_000_000_000) for c in range(load.cpus))
        migrations = tuple((c, (c + 1) % load.cpus, 100) for c in range(load.cpus))
        programs = tuple(ProgramCost(name, load.events_per_s, load.events_per_s * 300, 0)
                         for name in ("sched_switch", "sched_waking", "sched_wakeup", "sched_migrate_task",
                                      "contention_begin", "contention_end", "sys_enter", "sys_exit", "oncpu_sample"))
        sec = 1_000_000_000
        return Interval(index=index, start_ns=index * sec, end_ns=(index + 1) * sec,
                        wall_start=self.start_wall + index, switches=load.events_per_s, tasks=tuple(tasks),
                        task_info=infos, offcpu=tuple(offcpu), wakers=tuple(wakers), migrations=migrations,
                        stacks=stacks, health={}, programs=programs, collector_cpu_ns=100_000_000,
                        kernel_switches=load.events_per_s, locks=tuple(locks), oncpu=tuple(oncpu), oncpu_cpus=cpus,
                        futex=tuple(futex))


# ---- small pure helpers -------------------------------------------------------------------------------

def status_kib(text: str, key: str) -> int | None:
    """A `Key:  1234 kB` field of /proc/PID/status, in KiB."""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def parse_total_time(text: str) -> float | None:
    """perf bench's `Total time: X [sec]`."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(_TOTAL_TIME_PREFIX):
            try:
                return float(line[len(_TOTAL_TIME_PREFIX):].split("[")[0])
            except ValueError:
                return None
    return None


def summary(values: list[float]) -> dict:
    """Median, 95th percentile (nearest rank), maximum, count."""
    if not values:
        return {"n": 0}
    s = sorted(values)
    return {"n": len(s), "median": statistics.median(s), "p95": s[min(len(s) - 1, max(0, round(0.95 * len(s)) - 1))],
            "max": s[-1], "min": s[0]}


def slope_per_step(values: list[float]) -> float:
    """Least-squares slope of values against their index: growth per step (0 for fewer than 2)."""
    n = len(values)
    if n < 2:
        return 0.0
    mx = (n - 1) / 2
    my = sum(values) / n
    den = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (v - my) for i, v in enumerate(values)) / den


def threads_seen(export_doc: dict, tgid: int, comm: str | None = None) -> int:
    """Threads of one process in a JSON export (optionally only those with that name)."""
    return len({t["pid"] for t in export_doc["tasks"]
                if t["tgid"] == tgid and (comm is None or t["comm"] == comm)})


def mib(kib: float | None) -> str:
    return "?" if kib is None else f"{kib / 1024:,.0f} MiB"


def _fmt_s(v: float | None) -> str:
    return "?" if v is None else f"{v:.3f} s"


# ---- running things and measuring them ----------------------------------------------------------------

@dataclass
class Measured:
    argv: list[str]
    returncode: int
    wall_s: float
    maxrss_kib: int  # wait4's ru_maxrss: the child's peak resident set
    cpu_s: float  # user + system
    stdout: str = ""
    stderr: str = ""


def run_measured(argv: list[str], timeout_s: float = 600.0, stdout_path: str | None = None) -> Measured:
    """Run argv and reap it with wait4, for its own peak RSS and CPU. stdout goes to a file (large outputs)."""
    with tempfile.TemporaryFile("w+") as err, (open(stdout_path, "w+") if stdout_path
                                                 else tempfile.TemporaryFile("w+")) as out:
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
        timer = threading.Timer(timeout_s, lambda: _kill_group(proc.pid))
        timer.start()
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - start
        err.seek(0)
        text = ""
        if stdout_path is None:
            out.seek(0)
            text = out.read()
        return Measured(argv, proc.returncode, wall, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, text, err.read())


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def exited(pid: int) -> bool:
    """Whether a child has exited, without reaping it (its rusage stays for wait4)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _self_rss_kib() -> int:
    with open("/proc/self/status") as f:
        return status_kib(f.read(), "VmRSS") or 0


def default_stallscope() -> list[str]:
    beside = Path(sys.executable).parent / "stallscope"
    return [str(beside) if beside.exists() else "stallscope"]


def log(msg: str) -> None:
    print(f"[scale] {msg}", file=sys.stderr, flush=True)


# ---- scenario: threads -------------------------------------------------------------------------------

def thread_truth(tgid: int) -> dict:
    """Every thread of a process now, with its voluntary switch count (/proc/PID/task/TID/status)."""
    out = {}
    for tid in os.listdir(f"/proc/{tgid}/task"):
        try:
            with open(f"/proc/{tgid}/task/{tid}/status") as f:
                text = f.read()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                out[int(tid)] = int(line.split()[1])
    return out


def hackbench(loops: int) -> tuple[float | None, float]:
    """One `perf bench sched messaging -g 10 -l loops`: (its Total time, wall seconds)."""
    start = time.monotonic()
    r = subprocess.run(["perf", "bench", "sched", "messaging", "-g", "10", "-l", str(loops)],
                       capture_output=True, text=True, timeout=300)
    return parse_total_time(r.stdout), time.monotonic() - start


def scenario_threads(args, stallscope: list[str], tmp: Path) -> dict:
    binary = ROOT / "examples" / "bin" / "idle_threads"
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `make install`")
    res: dict = {"threads": args.threads, "period_ms": args.period_ms, "record_s": args.record_s,
                 "hackbench_loops": args.hackbench_loops}
    idle = subprocess.Popen([str(binary), "-n", str(args.threads), "-p", str(args.period_ms)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        t0 = time.monotonic()
        ready = json.loads(idle.stdout.readline())
        res["threads_start_s"] = round(time.monotonic() - t0, 3)
        tgid = ready["tgid"]
        log(f"threads: {ready['threads']} threads in process {tgid} ({res['threads_start_s']} s to start)")
        time.sleep(args.period_ms / 1000)  # every thread has slept once
        base = [hackbench(args.hackbench_loops) for _ in range(args.hackbench_runs)]
        res["hackbench_alone_s"] = [b[0] for b in base]
        log(f"threads: hackbench alone {res['hackbench_alone_s']}")

        before = thread_truth(tgid)
        out = tmp / "threads.stall"
        rec_log = tmp / "record.log"
        with open(rec_log, "w") as lf:
            rec = subprocess.Popen([*stallscope, "record", "-o", str(out), "-d", f"{args.record_s}s"],
                                   stdin=subprocess.DEVNULL, stdout=lf, stderr=lf, start_new_session=True)
        t_rec = time.monotonic()
        rss: list[tuple[float, int]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                try:
                    with open(f"/proc/{rec.pid}/status") as f:
                        v = status_kib(f.read(), "VmRSS")
                    if v:
                        rss.append((round(time.monotonic() - t_rec, 1), v))
                except OSError:
                    return
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        while not out.exists() and not exited(rec.pid):  # the file appears once the probes are attached
            time.sleep(0.1)
        res["attach_s"] = round(time.monotonic() - t_rec, 3)
        traced = []
        while not exited(rec.pid):
            total, _ = hackbench(args.hackbench_loops)
            if not exited(rec.pid):  # finished inside the recording: counts
                traced.append(total)
        _, status, ru = os.wait4(rec.pid, 0)
        rec.returncode = os.waitstatus_to_exitcode(status)
        stop.set()
        sampler.join()
        rec_wall = time.monotonic() - t_rec
        after = thread_truth(tgid)
        idle.send_signal(signal.SIGTERM)
        done = json.loads(idle.stdout.readline() or "{}")
        idle.wait(timeout=30)
    finally:
        if idle.poll() is None:
            idle.kill()
            idle.wait()
    res["hackbench_traced_s"] = traced
    res["recorder_returncode"] = rec.returncode
    res["recorder_maxrss_kib"] = ru.ru_maxrss
    res["recorder_cpu_s"] = round(ru.ru_utime + ru.ru_stime, 3)
    res["recorder_wall_s"] = round(rec_wall, 3)
    res["recorder_rss_timeline_kib"] = rss
    res["record_log"] = rec_log.read_text()[-2000:]
    res["file_bytes"] = out.stat().st_size if out.exists() else None
    res["truth"] = {"threads_alive": len(after), "threads_switched": sum(1 for t, v in after.items() if v != before.get(t)),
                    "idle_wakeups_total": done.get("wakeups"),
                    "voluntary_switches": sum(v - before.get(t, 0) for t, v in after.items())}

    ex = run_measured([*stallscope, "export", str(out), "--format", "json"], timeout_s=600,
                      stdout_path=str(tmp / "threads.json"))
    res["export"] = {"wall_s": round(ex.wall_s, 3), "maxrss_kib": ex.maxrss_kib, "returncode": ex.returncode,
                     "json_bytes": (tmp / "threads.json").stat().st_size}
    if ex.returncode == 0:
        doc = json.loads((tmp / "threads.json").read_text())
        meta = doc["meta"]
        res["seen"] = {"threads": threads_seen(doc, tgid), "idle_threads": threads_seen(doc, tgid, "idle"),
                       "voluntary_switches": sum(t["voluntary_switches"] for t in doc["tasks"] if t["tgid"] == tgid),
                       "tasks_total": len(doc["tasks"])}
        res["health"] = meta.get("health", {})
        res["duration_s"] = meta["duration_s"]
        res["intervals"] = meta["intervals"]
        res["switches_per_s"] = meta.get("switches_per_s")
        res["collector_cpu_s"] = meta["overhead"]["collector_cpu_s"]
        res["probes"] = {k: v["enabled"] for k, v in meta["probes"].items()}
    else:
        res["export"]["stderr"] = ex.stderr[-2000:]
    res.update(recording_shape(out))
    return res


# ---- scenario: soak ------------------------------------------------------------------------------------

class RssSampler:
    """A process's RSS every second, from /proc/PID/status, in a thread, until it exits or stop()."""

    def __init__(self, pid: int):
        self.pid, self.t0, self.samples = pid, time.monotonic(), []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    v = status_kib(f.read(), "VmRSS")
            except OSError:
                return
            if v:
                self.samples.append((round(time.monotonic() - self.t0, 1), v))
            self._stop.wait(1.0)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def hackbench_loop(loops: int) -> subprocess.Popen:
    """`perf bench sched messaging -g 10 -l LOOPS` over and over, in a process group of its own."""
    return subprocess.Popen(["sh", "-c", f"while :; do perf bench sched messaging -g 10 -l {loops} >/dev/null 2>&1; done"],
                            stdin=subprocess.DEVNULL, start_new_session=True)


def rss_growth(samples: list[tuple[float, int]]) -> dict:
    """RSS at the quarters of the run and its growth over the second half (least squares, KiB a minute)."""
    if not samples:
        return {}
    vals = [v for _, v in samples]
    n = len(vals)
    half = samples[n // 2:]
    span = (half[-1][0] - half[0][0]) if len(half) > 1 else 0
    slope = slope_per_step([v for _, v in half]) * (len(half) - 1) / span * 60 if span else 0.0
    return {"quarters_kib": [vals[min(n - 1, (n * q) // 4)] for q in (1, 2, 3)] + [vals[-1]],
            "max_kib": max(vals), "second_half_kib_per_min": slope}


def scenario_soak(args, stallscope: list[str], tmp: Path) -> dict:
    binary = ROOT / "examples" / "bin" / "idle_threads"
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `make install`")
    res: dict = {"threads": args.soak_threads, "period_ms": args.period_ms, "record_s": args.soak_s,
                 "hackbench_loops": args.hackbench_loops, "probes": args.soak_probes}
    idle = subprocess.Popen([str(binary), "-n", str(args.soak_threads), "-p", str(args.period_ms)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    loop = None
    try:
        json.loads(idle.stdout.readline())
        loop = hackbench_loop(args.hackbench_loops)
        time.sleep(2)
        out, rec_log = tmp / "soak.stall", tmp / "soak.log"
        with open(rec_log, "w") as lf:
            rec = subprocess.Popen([*stallscope, "record", "-o", str(out), "-d", f"{args.soak_s}s", "--probes",
                                    args.soak_probes], stdin=subprocess.DEVNULL, stdout=lf, stderr=lf,
                                   start_new_session=True)
        sampler = RssSampler(rec.pid)
        _, status, ru = os.wait4(rec.pid, 0)
        res["rss_timeline_kib"] = sampler.stop()
    finally:
        if loop is not None:
            _kill_group(loop.pid)
            loop.wait()
        idle.terminate()
        idle.wait(timeout=60)
    res["recorder_returncode"] = os.waitstatus_to_exitcode(status)
    res["recorder_maxrss_kib"] = ru.ru_maxrss
    res["recorder_cpu_s"] = round(ru.ru_utime + ru.ru_stime, 3)
    res["record_log"] = rec_log.read_text()[-3000:]
    res["file_bytes"] = out.stat().st_size if out.exists() else None
    res["rss"] = rss_growth(res["rss_timeline_kib"])
    res.update(recording_losses(out))
    res.update(recording_shape(out))
    ex = run_measured([*stallscope, "export", str(out), "--format", "json"], timeout_s=args.export_timeout_s,
                      stdout_path=str(tmp / "soak.json"))
    res["export"] = {"wall_s": round(ex.wall_s, 3), "maxrss_kib": ex.maxrss_kib, "cpu_s": round(ex.cpu_s, 3),
                     "returncode": ex.returncode, "timeout_s": args.export_timeout_s}
    (tmp / "soak.json").unlink(missing_ok=True)
    return res


def recording_losses(path: Path) -> dict:
    """The recording's health counters and what they say was lost, read from the file itself (with this
    tree's analyzer: a recording by an earlier version reads the same), its intervals and probes."""
    from stallscope.analyzer.data_loss import data_losses

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        meta = json.loads(db.execute("SELECT value FROM meta WHERE key = 'meta'").fetchone()[0])
        health: dict[str, int] = {}
        for (text,) in db.execute("SELECT health FROM intervals"):
            for k, v in json.loads(text or "{}").items():
                health[k] = health.get(k, 0) + v
        programs = {name: (0, 0, misses) for name, misses in
                    db.execute("SELECT name, SUM(recursion_misses) FROM programs GROUP BY name")}
        first, last, n = db.execute("SELECT MIN(start_ns), MAX(end_ns), COUNT(*) FROM intervals").fetchone()
        switches = db.execute("SELECT SUM(switches) FROM intervals").fetchone()[0] or 0
    finally:
        db.close()
    duration = (last - first) / 1e9 if n else 0.0
    return {"health": health, "data_loss": [x.as_dict() for x in data_losses(health, programs, meta["options"])],
            "intervals": n, "duration_s": duration, "switches_per_s": switches / duration if duration else 0,
            "map_sizes": meta["options"].get("map_sizes"),
            "probes_on": sorted(k for k, v in meta["probes"].items() if v["enabled"])}


def recording_shape(path: Path) -> dict:
    """Rows per table and the collector's CPU per interval, read straight from the file."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in sorted(tables)}
        cpu = [r[0] / 1e6 for r in db.execute("SELECT collector_cpu_ns FROM intervals ORDER BY idx")]
        lengths = [(e - s) / 1e9 for s, e in db.execute("SELECT start_ns, end_ns FROM intervals ORDER BY idx")]
    finally:
        db.close()
    return {"rows": rows, "collector_cpu_ms_per_interval": cpu, "interval_lengths_s": lengths}


# ---- scenario: analyzer (in a child process) -------------------------------------------------------------

def _timed(fn, *args):
    """fn(*args), and the {"wall_s", "cpu_s"} it took (CPU: this thread's, robust to a loaded machine)."""
    w, c = time.perf_counter(), time.thread_time()
    out = fn(*args)
    return out, {"wall_s": time.perf_counter() - w, "cpu_s": time.thread_time() - c}


def worker_analyzer(seconds: int, path: str, load: SyntheticLoad = ANALYZER_LOAD) -> dict:
    """Push `seconds` synthetic intervals through the live view's path and the store; time each step."""
    import io

    from stallscope.analyzer.blockers import rank_blockers
    from stallscope.analyzer.model import Model
    from stallscope.analyzer.store import RecordingWriter
    from stallscope.tui.text import LiveText

    t0 = time.perf_counter()
    src = SyntheticSource(load)
    setup_s = time.perf_counter() - t0
    writer = RecordingWriter(path, src.meta)
    view = LiveText(rows=15, out=io.StringIO(), hide_tgid=1)
    view.start(src.meta)
    per = []
    for i in range(seconds):
        iv, gen = _timed(src.interval, i)
        # LiveText.update, step by step
        for t in iv.task_info:
            view.tasks[t.task] = t
        for s in iv.stacks:
            view.stacks[s.id] = s
        model, mod = _timed(Model.from_intervals, view.meta, [iv], view.tasks, view.stacks)
        shown = {t for t in model.tasks if model.tasks[t].info.tgid != view.hide_tgid}
        _, rank = _timed(rank_blockers, model, shown)
        text, render = _timed(view.render, model, iv)  # ranks again, then formats
        view.forget(iv)
        _, store = _timed(writer.append, iv)
        entries = len(iv.tasks) + len(iv.offcpu) + len(iv.wakers) + len(iv.locks) + len(iv.futex) + len(iv.oncpu)
        del iv, model, text
        per.append({"generate": gen, "model": mod, "rank": rank, "render": render, "store": store,
                    "entries": entries, "rss_kib": _self_rss_kib(), "view_tasks": len(view.tasks),
                    "view_stacks": len(view.stacks)})
    writer.close()
    import resource

    return {"load": asdict(load), "setup_s": setup_s, "intervals": per, "file_bytes": os.path.getsize(path),
            "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def scenario_analyzer(args, tmp: Path) -> dict:
    out = tmp / "analyzer.json"
    m = run_measured([sys.executable, "-m", "benchmarks.scale", "--worker", "analyzer",
                      "--seconds", str(args.analyzer_seconds), "--worker-file", str(tmp / "analyzer.stall")],
                     timeout_s=900, stdout_path=str(out))
    if m.returncode != 0:
        raise RuntimeError(f"analyzer worker failed: {m.stderr[-2000:]}")
    res = json.loads(out.read_text())
    res["child_maxrss_kib"] = m.maxrss_kib
    res["child_wall_s"] = m.wall_s
    return res


def analyzer_figures(res: dict) -> dict:
    """Per step, CPU and wall medians over the seconds after the first (which carries every stack and
    thread); the two paths' totals per simulated second; memory."""
    steady = res["intervals"][1:] or res["intervals"]
    first = res["intervals"][0]
    out: dict = {"entries_per_interval": steady[0]["entries"]}
    for clock in ("cpu_s", "wall_s"):
        out[clock] = {
            "live_path": summary([p["model"][clock] + p["render"][clock] for p in steady]),
            "store_path": summary([p["store"][clock] for p in steady]),
            **{step: statistics.median(p[step][clock] for p in steady)
               for step in ("generate", "model", "rank", "render", "store")},
            "first_live": first["model"][clock] + first["render"][clock], "first_store": first["store"][clock]}
    rss = [p["rss_kib"] for p in steady]
    out.update(rss_first_kib=first["rss_kib"], rss_last_kib=rss[-1], rss_growth_kib_per_s=slope_per_step(rss),
               view_tasks_last=steady[-1]["view_tasks"], view_stacks_last=steady[-1]["view_stacks"])
    return out


# ---- scenario: hour -----------------------------------------------------------------------------------

PID_SHIFT = 1_000_000  # per copy, for the threads born inside the copied block


def extend_recording(path: str, block: int, total: int, born_pid: int) -> None:
    """Grow a recording of intervals 0..block-1 to `total` intervals by copying that block in SQL, shifted
    in index and time. Threads born inside the block (pid >= born_pid) get new pids in every copy, so new
    threads keep arriving at the block's rate; the threads alive from the start persist. Stacks and slab
    caches are described once, as in a real recording."""
    sec = 1_000_000_000
    db = sqlite3.connect(path)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        plans = {}
        for t in tables:
            cols = [r[1] for r in db.execute(f"PRAGMA table_info({t})")]
            if "idx" not in cols or t in ("slab_caches", "cgroups"):
                continue
            exprs = []
            for c in cols:
                if c == "idx":
                    exprs.append("idx + :off")
                elif c in ("pid", "waker_pid"):
                    exprs.append(f"CASE WHEN {c} >= :born THEN {c} + :pshift ELSE {c} END")
                elif t == "intervals" and c in ("start_ns", "end_ns"):
                    exprs.append(f"{c} + :off * {sec}")
                elif t == "intervals" and c == "wall_start":
                    exprs.append(f"{c} + :off")
                else:
                    exprs.append(c)
            plans[t] = f"INSERT INTO {t} ({', '.join(cols)}) SELECT {', '.join(exprs)} FROM {t} WHERE idx < :block"
        task_cols = [r[1] for r in db.execute("PRAGMA table_info(tasks)")]
        task_exprs = ["pid + :pshift" if c == "pid" else "first_idx + :off" if c == "first_idx" else c
                      for c in task_cols]
        new_tasks = (f"INSERT OR IGNORE INTO tasks ({', '.join(task_cols)}) SELECT {', '.join(task_exprs)} "
                     f"FROM tasks WHERE pid >= :born AND pid < {PID_SHIFT}")
        for copy, off in enumerate(range(block, total, block), 1):
            args = {"off": off, "born": born_pid, "pshift": copy * PID_SHIFT,
                    "block": min(block, total - off)}
            with db:
                for sql in plans.values():
                    db.execute(sql, args)
                db.execute(new_tasks, args)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def worker_hour_write(seconds: int, path: str, seed: int, block: int = 60, load: SyntheticLoad = HOUR_LOAD) -> dict:
    """Write the first `block` synthetic intervals through the store, as `stallscope record` does, then
    copy them in SQL up to `seconds` intervals (see extend_recording)."""
    import resource

    from stallscope.analyzer.store import RecordingWriter

    src = SyntheticSource(load, seed=seed)
    writer = RecordingWriter(path, src.meta)
    gen = store = 0.0
    block = min(block, seconds)
    for i in range(block):
        t0 = time.perf_counter()
        iv = src.interval(i)
        t1 = time.perf_counter()
        writer.append(iv)
        store += time.perf_counter() - t1
        gen += t1 - t0
    writer.update_meta(replace(src.meta, end_ns=seconds * 1_000_000_000))
    writer.close()
    t0 = time.perf_counter()
    extend_recording(path, block, seconds, born_pid=src.first_pid + load.tasks)
    return {"block": block, "generate_s": gen, "store_s": store, "copy_s": time.perf_counter() - t0,
            "file_bytes": os.path.getsize(path), "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def scenario_hour(args, stallscope: list[str], tmp: Path) -> dict:
    res: dict = {"seconds": args.hour_seconds, "load": asdict(HOUR_LOAD), "writes": []}
    files = []
    for seed in (1, 2):
        path = tmp / f"hour-{seed}.stall"
        out = tmp / f"hour-{seed}.write.json"
        m = run_measured([sys.executable, "-m", "benchmarks.scale", "--worker", "hour", "--seconds",
                          str(args.hour_seconds), "--seed", str(seed), "--worker-file", str(path)],
                         timeout_s=1800, stdout_path=str(out))
        if m.returncode != 0:
            raise RuntimeError(f"hour writer failed: {m.stderr[-2000:]}")
        w = json.loads(out.read_text())
        w["wall_s"] = m.wall_s
        res["writes"].append(w)
        files.append(path)
        log(f"hour: wrote {path.name}: {w['file_bytes'] / 2**20:,.0f} MiB in {m.wall_s:.1f} s "
            f"(store {w['store_s']:.1f} s for {w['block']} intervals, copies {w['copy_s']:.1f} s)")
        if seed == 1:
            res.update(recording_shape(path))
            res.pop("collector_cpu_ms_per_interval", None)
            res.pop("interval_lengths_s", None)
    exp = tmp / "hour.json"
    ex = run_measured([*stallscope, "export", str(files[0]), "--format", "json"], timeout_s=1800,
                      stdout_path=str(exp))
    res["export"] = {"wall_s": round(ex.wall_s, 3), "maxrss_kib": ex.maxrss_kib, "cpu_s": round(ex.cpu_s, 3),
                     "returncode": ex.returncode, "json_bytes": exp.stat().st_size, "stderr": ex.stderr[-1500:]}
    log(f"hour: export {ex.wall_s:.1f} s, peak RSS {mib(ex.maxrss_kib)}, rc {ex.returncode}")
    exp.unlink(missing_ok=True)
    d = run_measured([*stallscope, "diff", str(files[0]), str(files[1])], timeout_s=1800)
    res["diff"] = {"wall_s": round(d.wall_s, 3), "maxrss_kib": d.maxrss_kib, "cpu_s": round(d.cpu_s, 3),
                   "returncode": d.returncode, "stdout_lines": len(d.stdout.splitlines()), "stderr": d.stderr[-1500:]}
    log(f"hour: diff {d.wall_s:.1f} s, peak RSS {mib(d.maxrss_kib)}, rc {d.returncode}")
    res["causes"] = _measured_doc(run_measured([*stallscope, "causes", str(files[0])], timeout_s=1800))
    log(f"hour: causes {res['causes']['wall_s']:.1f} s")
    res["scaling"] = [hour_reads(stallscope, tmp, n) for n in sorted({max(args.hour_seconds // 4, 1),
                                                                       max(args.hour_seconds // 2, 1)})]
    res["scaling"].append({"intervals": args.hour_seconds, "file_bytes": res["writes"][0]["file_bytes"],
                           "rows": sum(v for k, v in res["rows"].items() if k not in ("meta", "stacks", "tasks")),
                           "export": res["export"], "causes": res["causes"],
                           "replay": replay_steps(files[0])})
    return res


def _measured_doc(m: Measured) -> dict:
    return {"wall_s": round(m.wall_s, 3), "cpu_s": round(m.cpu_s, 3), "maxrss_kib": m.maxrss_kib,
            "returncode": m.returncode, "stderr": m.stderr[-1500:]}


def hour_reads(stallscope: list[str], tmp: Path, seconds: int) -> dict:
    """A recording of `seconds` intervals of the hour's load: its export, causes and replay steps, to set
    beside the whole hour's (the cost per interval stays the same unless a step grows faster)."""
    path = tmp / f"hour-part-{seconds}.stall"
    out = tmp / f"hour-part-{seconds}.write.json"
    m = run_measured([sys.executable, "-m", "benchmarks.scale", "--worker", "hour", "--seconds", str(seconds),
                      "--seed", "1", "--worker-file", str(path)], timeout_s=1800, stdout_path=str(out))
    if m.returncode != 0:
        raise RuntimeError(f"hour writer failed: {m.stderr[-2000:]}")
    shape = recording_shape(path)
    res = {"intervals": seconds, "file_bytes": path.stat().st_size,
           "rows": sum(v for k, v in shape["rows"].items() if k not in ("meta", "stacks", "tasks")),
           "export": _measured_doc(run_measured([*stallscope, "export", str(path), "-o", str(tmp / "part.json")],
                                                timeout_s=1800)),
           "causes": _measured_doc(run_measured([*stallscope, "causes", str(path)], timeout_s=1800)),
           "replay": replay_steps(path)}
    log(f"hour: {seconds} intervals: export {res['export']['cpu_s']:.1f} CPU s, causes {res['causes']['cpu_s']:.1f} "
        f"CPU s, replay step {res['replay']['step_cpu_ms']['middle']:.2f} ms")
    path.unlink(missing_ok=True)
    return res


REPLAY_STEPS = 50


# indexes a recording has only since every per-interval table got one (analyzer/store.py)
LATER_INDEXES = ("locks", "futex", "oncpu", "oncpu_cpus", "slab", "slab_caches", "migrations", "programs", "tuning",
                 "cgroups")


def replay_steps(path: Path, as_before: bool = True) -> dict:
    """A replay in a child process: the recording opened once, then windows of one interval read and
    made into a model, REPLAY_STEPS at its start, middle and end (what a time cursor does). With
    `as_before`, the same on a copy without the indexes recordings lacked before (`before`)."""
    out = path.with_suffix(".replay.json")
    m = run_measured([sys.executable, "-m", "benchmarks.scale", "--worker", "replay", "--worker-file", str(path)],
                     timeout_s=1800, stdout_path=str(out))
    if m.returncode != 0:
        raise RuntimeError(f"replay worker failed: {m.stderr[-2000:]}")
    res = json.loads(out.read_text())
    res["maxrss_kib"] = m.maxrss_kib
    if as_before:
        old = path.with_suffix(".before.stall")
        shutil.copyfile(path, old)
        db = sqlite3.connect(old)
        for t in LATER_INDEXES:
            db.execute(f"DROP INDEX IF EXISTS {t}_idx")
        db.commit()
        db.close()
        res["before"] = replay_steps(old, as_before=False)
        old.unlink()
    return res


def worker_replay(path: str) -> dict:
    from stallscope.analyzer.model import Model
    from stallscope.analyzer.store import Recording

    t0 = time.thread_time()
    rec = Recording(path)
    tasks, stacks, funcs, caches = rec.tasks(), rec.stacks(), rec.functions(), rec.slab_caches()
    n = rec.interval_count()
    open_s = time.thread_time() - t0
    steps = {}
    for where, first in (("start", 0), ("middle", max(n // 2 - REPLAY_STEPS // 2, 0)),
                         ("end", max(n - REPLAY_STEPS, 0))):
        cpu = []
        for i in range(first, min(first + REPLAY_STEPS, n)):
            c = time.thread_time()
            Model.from_intervals(rec.meta, rec.intervals(i, i), tasks, stacks, slab_caches=caches, functions=funcs)
            cpu.append((time.thread_time() - c) * 1000)
        steps[where] = statistics.median(cpu)
    rec.close()
    return {"intervals": n, "open_cpu_s": open_s, "step_cpu_ms": steps}


# ---- environment and report -----------------------------------------------------------------------------

def environment() -> dict:
    out = command_output
    commit = out(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = out(["git", "-C", str(ROOT), "status", "--porcelain", "--", ".", ":(exclude)benchmarks"])
    mem_kib = status_kib(Path("/proc/meminfo").read_text(), "MemTotal")
    return {"host": platform.node(), "kernel": platform.release(), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
            "mem_kib": mem_kib, "python": platform.python_version(),
            "commit": (commit + (" with uncommitted changes" if dirty else "")) if commit else "not a git checkout",
            "loadavg_start": Path("/proc/loadavg").read_text().split()[:3], "started": _now()}


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def report(results: dict, env: dict, argv: list[str]) -> str:
    lines = ["# stallscope at scale", "",
             f"- Date: {env['started']} to {env.get('finished', '?')}",
             f"- Host: {env['host']}, kernel {env['kernel']}, {env['cpus']} x {env['cpu_model']}, "
             f"{mib(env['mem_kib'])} RAM; Python {env['python']}",
             f"- stallscope commit: {env['commit']}",
             f"- Load average (1, 5, 15 min) at start: {' '.join(env['loadavg_start'])}; at end: "
             f"{' '.join(env.get('loadavg_end', ['?']))}. The machine is shared: other work ran meanwhile.",
             f"- Invocation: `{shlex.join(argv)}`", ""]
    if "threads" in results:
        lines += _threads_section(results["threads"])
    if "analyzer" in results:
        lines += _analyzer_section(results["analyzer"])
    if "hour" in results:
        lines += _hour_section(results["hour"])
    if "soak" in results:
        lines += _soak_section(results["soak"])
    for name, err in results.get("errors", {}).items():
        lines += [f"## {name}: failed", "", "```", err, "```", ""]
    return "\n".join(lines)


def _threads_section(r: dict) -> list[str]:
    seen = r.get("seen", {})
    truth = r["truth"]
    cpu = r["collector_cpu_ms_per_interval"]
    steady = cpu[1:-1] or cpu
    base = [t for t in r["hackbench_alone_s"] if t]
    traced = [t for t in r["hackbench_traced_s"] if t]
    ok = seen.get("idle_threads") == r["threads"]
    lines = [f"## threads: {r['threads']:,} idle threads and hackbench under `stallscope record`", "",
             f"`examples/bin/idle_threads -n {r['threads']} -p {r['period_ms']}` ({r['threads']} threads, 64 KiB "
             f"stacks, each waking every {r['period_ms']} ms, spread over the period; {r['threads_start_s']} s to "
             f"start them), `perf bench sched messaging -g 10 -l {r['hackbench_loops']}` in a loop, and "
             f"`stallscope record -d {r['record_s']}s` (default probes: "
             f"{', '.join(k for k, v in sorted(r.get('probes', {}).items()) if v)}).", "",
             "| measure | value |", "| --- | ---: |",
             f"| threads with their own task entry (named `idle`) / threads that exist | "
             f"{seen.get('idle_threads', '?'):,} / {r['threads']:,} {'(all)' if ok else '**(MISSING)**'} |",
             f"| threads of the process seen at all (a nameless one: waits only) / alive / switched between the truth reads | "
             f"{seen.get('threads', '?')} / {truth['threads_alive']} / {truth['threads_switched']} |",
             f"| voluntary switches of the process: recorded / truth (a wider window) | "
             f"{seen.get('voluntary_switches', 0):,} / {truth['voluntary_switches']:,} |",
             f"| tasks in the recording (all processes) | {seen.get('tasks_total', '?'):,} |",
             f"| context switches per second (recorded) | {r.get('switches_per_s') or 0:,.0f} |",
             f"| recorder peak RSS (wait4 ru_maxrss) | {mib(r['recorder_maxrss_kib'])} |",
             f"| recorder CPU (user+sys, start-up included) / wall | {_fmt_s(r['recorder_cpu_s'])} / "
             f"{r['recorder_wall_s']:.1f} s = {(r['recorder_cpu_s'] or 0) / r['recorder_wall_s']:.2f} CPU s per s |",
             f"| collector CPU per interval (median / max, {'intervals 2..n-1' if len(cpu) > 2 else 'all intervals'}) "
             f"| {statistics.median(steady):,.0f} ms / "
             f"{max(steady):,.0f} ms |",
             f"| first interval's collector CPU (every thread and stack new) | {cpu[0]:,.0f} ms |",
             f"| intervals recorded / duration | {r.get('intervals', '?')} / {r.get('duration_s', 0):.1f} s |",
             f"| interval length (median / max) | {statistics.median(r['interval_lengths_s']):.2f} s / "
             f"{max(r['interval_lengths_s']):.2f} s |",
             f"| attach (process start to file created) | {r['attach_s']:.1f} s |",
             f"| recording file | {r['file_bytes'] / 2**20:,.1f} MiB |",
             f"| export --format json of it: wall / peak RSS / JSON | {r['export']['wall_s']:.1f} s / "
             f"{mib(r['export']['maxrss_kib'])} / {r['export']['json_bytes'] / 2**20:,.1f} MiB |",
             f"| hackbench Total time alone / while recording (medians) | "
             f"{statistics.median(base) if base else float('nan'):.3f} s ({len(base)} runs) / "
             f"{statistics.median(traced) if traced else float('nan'):.3f} s ({len(traced)} runs) |",
             "", "Health counters (`meta.health`, summed over the recording; zero ones omitted): "
             + (", ".join(f"`{k}`={v:,}" for k, v in sorted(r.get("health", {}).items()) if v) or "none") + ".", "",
             "Rows per table: " + ", ".join(f"{k} {v:,}" for k, v in r["rows"].items() if v) + ".", "",
             "Recorder RSS over time (s after start: MiB): "
             + ", ".join(f"{t:g}: {v / 1024:.0f}" for t, v in r["recorder_rss_timeline_kib"][::5]) + ".", ""]
    return lines


def _analyzer_section(r: dict) -> list[str]:
    f = analyzer_figures(r)
    load = r["load"]
    e = SyntheticLoad(**load).entries_per_interval()
    c, w = f["cpu_s"], f["wall_s"]
    return [
        "## analyzer: 1M context switches a second of synthetic snapshots", "",
        f"{len(r['intervals'])} simulated seconds. Each second: {load['events_per_s']:,} context switches over "
        f"{load['tasks']:,} active threads in {load['processes']} processes on {load['cpus']} CPUs, aggregated "
        "as the kernel does: one `offcpu` entry per (thread, state, kernel stack, user stack), "
        f"{load['waits_per_task']} per thread ({e['offcpu']:,} entries whose counts add up to the switches); "
        f"{e['wakers']:,} waker entries (their counts add up to the voluntary switches); {e['tasks']:,} task deltas; "
        f"{e['locks']:,} lock entries ({load['lock_events_per_s']:,} contentions), {e['futex']:,} futex entries, "
        f"{e['oncpu']:,} on-CPU sample entries. {load['kernel_stacks']:,} kernel and {load['user_stacks']:,} user "
        f"stacks (6-16 frames) in the first interval, {load['new_stacks_per_s']} new ones a second after; "
        f"{load['new_tasks_per_s']} threads exit and {load['new_tasks_per_s']} start each second. "
        "Each switch also runs sched_waking and sched_wakeup in the kernel: the probes would see ~3M events a "
        "second for this load. The analyzer's cost follows the entries, not the event rate.", "",
        f"Per simulated second, {f['entries_per_interval']:,} records. CPU seconds (this thread's; robust to "
        "the machine's load) and wall seconds, medians over seconds 2..n (the first carries every stack and "
        "thread). To keep up, a path must take well under 1 s per simulated second:", "",
        "| path | CPU median | CPU p95 | CPU max | wall median | first second (CPU) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        f"| live view (`top`): model + render (render ranks) | {c['live_path']['median']:.3f} s | {c['live_path']['p95']:.3f} s "
        f"| {c['live_path']['max']:.3f} s | {w['live_path']['median']:.3f} s | {c['first_live']:.3f} s |",
        f"| recording (`record`): store append | {c['store_path']['median']:.3f} s | {c['store_path']['p95']:.3f} s "
        f"| {c['store_path']['max']:.3f} s | {w['store_path']['median']:.3f} s | {c['first_store']:.3f} s |",
        "", f"Parts, CPU medians: Model.from_intervals {c['model']:.3f} s, rank_blockers {c['rank']:.3f} s, "
        f"render (rank_blockers again, then text) {c['render']:.3f} s, store {c['store']:.3f} s; building the "
        f"snapshot dataclasses themselves (what the collector's decoding produces) {c['generate']:.3f} s.",
        "",
        f"Memory: peak RSS {mib(r['child_maxrss_kib'])} (wait4 of the child); RSS {mib(f['rss_first_kib'])} after "
        f"the first second, {mib(f['rss_last_kib'])} after the last: {f['rss_growth_kib_per_s']:,.0f} KiB more "
        f"per simulated second (least squares). The live view's name tables held {f['view_tasks_last']:,} tasks and "
        f"{f['view_stacks_last']:,} stacks at the end. Recording file: {r['file_bytes'] / 2**20:,.0f} MiB for "
        f"{len(r['intervals'])} s.", ""]


def _hour_section(r: dict) -> list[str]:
    load = r["load"]
    e = SyntheticLoad(**load).entries_per_interval()
    w = r["writes"]
    rows = sum(v for k, v in r["rows"].items() if k not in ("meta", "stacks", "tasks"))
    lines = [
        f"## hour: {r['seconds']:,} synthetic one-second intervals through the store, export and diff", "",
        f"Each interval: {e['tasks']} task deltas, {e['offcpu']:,} off-CPU entries, {e['wakers']:,} waker entries, "
        f"{e['locks']} lock, {e['futex']} futex and {e['oncpu']} on-CPU entries, {load['cpus']} CPUs; "
        f"{load['kernel_stacks']:,} + {load['user_stacks']:,} stacks at first, {load['new_stacks_per_s']} new a "
        f"second; {load['new_tasks_per_s']} threads exit and start a second. {rows:,} delta rows in all "
        f"({rows / r['seconds']:,.0f} per interval). For scale: recordings of this 2-CPU VM under other people's "
        "hackbench hold ~28,000 rows a second, mostly wakers (16.7k), locks (6.5k), off-CPU (2.7k), on-CPU (2.7k).", "",
        "| step | wall | CPU | peak RSS | output |", "| --- | ---: | ---: | ---: | ---: |"]
    for i, x in enumerate(w):
        lines.append(f"| write recording {i + 1}: {x.get('block', '?')} intervals through the store ({x['store_s']:.1f} s; "
                     f"generating them {x['generate_s']:.1f} s), the rest copied in SQL ({x.get('copy_s', 0):.1f} s) "
                     f"| {x['wall_s']:.1f} s | | {mib(x['maxrss_kib'])} | {x['file_bytes'] / 2**20:,.0f} MiB |")
    ex, d = r["export"], r["diff"]
    lines.append(f"| `stallscope export --format json` (recording 1) | {ex['wall_s']:.1f} s | {ex.get('cpu_s', 0):.1f} s "
                 f"| {mib(ex['maxrss_kib'])} | {ex['json_bytes'] / 2**20:,.1f} MiB"
                 f"{'' if ex['returncode'] == 0 else ' (FAILED rc ' + str(ex['returncode']) + ')'} |")
    lines.append(f"| `stallscope diff` (recording 1 vs 2) | {d['wall_s']:.1f} s | {d.get('cpu_s', 0):.1f} s "
                 f"| {mib(d['maxrss_kib'])} | {d['stdout_lines']} lines"
                 f"{'' if d['returncode'] == 0 else ' (FAILED rc ' + str(d['returncode']) + ')'} |")
    c = r.get("causes")
    if c:
        lines.append(f"| `stallscope causes` (recording 1) | {c['wall_s']:.1f} s | {c['cpu_s']:.1f} s | "
                     f"{mib(c['maxrss_kib'])} | |")
    lines += ["", "Rows per table: " + ", ".join(f"{k} {v:,}" for k, v in r["rows"].items() if v) + ".", ""]
    if r.get("scaling"):
        lines += _scaling_lines(r["scaling"])
    for name in ("export", "diff"):
        if r[name]["returncode"] != 0:
            lines += [f"{name} stderr:", "", "```", r[name]["stderr"], "```", ""]
    return lines


def _scaling_lines(points: list[dict]) -> list[str]:
    lines = ["The same load over a quarter, a half and the whole hour: a step that grows faster than the recording "
             "shows as a CPU cost per interval that rises down the table. Replay: the recording opened once (its "
             f"tasks and stacks read), then {REPLAY_STEPS} windows of one interval each read and made into a model "
             "at its start, middle and end (median CPU per step).", "",
             "| intervals | file | export CPU (per interval) | export peak RSS | causes CPU (per interval) | "
             "replay open | replay step: start / middle / end | the same without the later indexes |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in points:
        n, ex, ca, rp = p["intervals"], p["export"], p["causes"], p["replay"]
        st, bst = rp["step_cpu_ms"], rp.get("before", {}).get("step_cpu_ms")
        before = f"{bst['start']:.2f} / {bst['middle']:.2f} / {bst['end']:.2f} ms" if bst else "-"
        lines.append(f"| {n:,} | {p['file_bytes'] / 2**20:,.0f} MiB | {ex['cpu_s']:.1f} s ({1000 * ex['cpu_s'] / n:.2f} ms) "
                     f"| {mib(ex['maxrss_kib'])} | {ca['cpu_s']:.1f} s ({1000 * ca['cpu_s'] / n:.2f} ms) | "
                     f"{rp['open_cpu_s']:.2f} s | {st['start']:.2f} / {st['middle']:.2f} / {st['end']:.2f} ms | {before} |")
    return lines + [""]


def _export_cell(ex: dict) -> str:
    if ex["returncode"] != 0:
        return (f"stopped after {ex['wall_s']:.0f} s ({ex['cpu_s']:.0f} CPU s, {mib(ex['maxrss_kib'])}): did not "
                f"finish in {ex.get('timeout_s', '?')} s" if ex["wall_s"] >= ex.get("timeout_s", 1e9) - 1
                else f"failed (exit {ex['returncode']})")
    return f"{ex['wall_s']:.1f} s / {ex['cpu_s']:.1f} s / {mib(ex['maxrss_kib'])}"


def _soak_section(r: dict) -> list[str]:
    rss = r.get("rss", {})
    q = rss.get("quarters_kib", [])
    lengths = r.get("interval_lengths_s") or [0]
    loss = r.get("data_loss", [])
    lines = [f"## soak: every probe group under hackbench with {r['threads']:,} idle threads for "
             f"{r['record_s']} s", "",
             f"`examples/bin/idle_threads -n {r['threads']} -p {r['period_ms']}`, `perf bench sched messaging -g 10 "
             f"-l {r['hackbench_loops']}` in a loop, and `stallscope record -d {r['record_s']}s --probes "
             f"{r['probes']}` (groups on: {', '.join(r.get('probes_on', []))}). Map sizes: "
             f"{json.dumps(r.get('map_sizes'), sort_keys=True)}.", "",
             "| measure | value |", "| --- | ---: |",
             f"| recorder peak RSS (wait4 ru_maxrss) | {mib(r['recorder_maxrss_kib'])} |",
             f"| RSS at 1/4, 1/2, 3/4 of the run and at its end | {' / '.join(mib(v) for v in q)} |",
             f"| RSS growth over the second half (least squares) | {rss.get('second_half_kib_per_min', 0):,.0f} KiB "
             "a minute |",
             f"| recorder CPU (start-up included) | {_fmt_s(r['recorder_cpu_s'])} |",
             f"| intervals recorded / duration | {r.get('intervals', '?')} / {r.get('duration_s', 0):.1f} s |",
             f"| interval length (median / max) | {statistics.median(lengths):.2f} s / {max(lengths):.2f} s |",
             f"| context switches per second (recorded) | {r.get('switches_per_s') or 0:,.0f} |",
             f"| recording file | {(r['file_bytes'] or 0) / 2**20:,.1f} MiB |",
             f"| export of it: wall / CPU / peak RSS | {_export_cell(r['export'])} |", "",
             "Data loss (`meta.data_loss`): " + ("; ".join(f"`{x['key']}` {x['count']:,}" for x in loss) or "none")
             + ".", "",
             "Health counters (`meta.health`, zero ones omitted): "
             + (", ".join(f"`{k}`={v:,}" for k, v in sorted(r.get("health", {}).items()) if v) or "none") + ".", "",
             "Rows per table: " + ", ".join(f"{k} {v:,}" for k, v in r.get("rows", {}).items() if v) + ".", "",
             "Recorder RSS over time (s after start: MiB): "
             + ", ".join(f"{t:g}: {v / 1024:.0f}" for t, v in r["rss_timeline_kib"][::15]) + ".", ""]
    return lines


# ---- command line -----------------------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: threads, analyzer, hour")
    ap.add_argument("--threads", type=int, default=10_000, help="idle threads (threads scenario)")
    ap.add_argument("--period-ms", type=int, default=3000, help="each idle thread wakes this often")
    ap.add_argument("--record-s", type=int, default=30, help="seconds stallscope records (threads scenario)")
    ap.add_argument("--hackbench-loops", type=int, default=50, help="-l of perf bench sched messaging -g 10")
    ap.add_argument("--hackbench-runs", type=int, default=3, help="hackbench runs without recording")
    ap.add_argument("--analyzer-seconds", type=int, default=8, help="simulated seconds (analyzer scenario)")
    ap.add_argument("--hour-seconds", type=int, default=3600, help="intervals per synthetic recording")
    ap.add_argument("--soak-s", type=int, default=300, help="seconds the soak scenario records")
    ap.add_argument("--soak-threads", type=int, default=5000, help="idle threads in the soak scenario")
    ap.add_argument("--soak-probes", default="all", help="--probes of the soak scenario's recording")
    ap.add_argument("--export-timeout-s", type=int, default=1800, help="stop an export that takes longer (soak)")
    ap.add_argument("--stallscope", help="the stallscope command to measure (default: the one beside this "
                                         "Python); e.g. a snapshot: 'env PYTHONPATH=/tmp/ss/pkg python -m stallscope'")
    ap.add_argument("--output", type=Path, help="write the Markdown report here")
    ap.add_argument("--raw", type=Path, help="write the raw measurements here as JSON")
    ap.add_argument("--worker", choices=("analyzer", "hour", "replay"), help=argparse.SUPPRESS)
    ap.add_argument("--worker-file", help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=int, default=10, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    bad = [s for s in args.scenarios.split(",") if s and s not in SCENARIOS]
    if bad:
        ap.error(f"unknown scenario: {', '.join(bad)}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker == "analyzer":
        print(json.dumps(worker_analyzer(args.seconds, args.worker_file)))
        return 0
    if args.worker == "hour":
        print(json.dumps(worker_hour_write(args.seconds, args.worker_file, args.seed)))
        return 0
    if args.worker == "replay":
        print(json.dumps(worker_replay(args.worker_file)))
        return 0
    stallscope = shlex.split(args.stallscope) if args.stallscope else default_stallscope()
    env = environment()
    results: dict = {"errors": {}}
    with tempfile.TemporaryDirectory(prefix="stallscope-scale-") as d:
        tmp = Path(d)
        for name in [s for s in args.scenarios.split(",") if s]:
            log(f"{name}: starting (load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])})")
            start = time.monotonic()
            try:
                if name == "threads":
                    results[name] = scenario_threads(args, stallscope, tmp)
                elif name == "analyzer":
                    results[name] = scenario_analyzer(args, tmp)
                elif name == "soak":
                    results[name] = scenario_soak(args, stallscope, tmp)
                else:
                    results[name] = scenario_hour(args, stallscope, tmp)
                results[name]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
            except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
                results["errors"][name] = repr(exc)
            log(f"{name}: {time.monotonic() - start:.0f} s")
    env["finished"] = _now()
    env["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    text = report(results, env, ["python", "-m", "benchmarks.scale", *argv])
    print(text)
    if args.output:
        args.output.write_text(text)
    if args.raw:
        args.raw.write_text(json.dumps({"environment": env, "results": results}, indent=1, sort_keys=True) + "\n")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
