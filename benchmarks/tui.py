"""What `stallscope top` costs and how fast it answers, live, under load.

    .venv/bin/python -m benchmarks.tui [--seconds 60] [--warm-up 10] [--idle 5000] [--window N] [--view N]
                                       [--output benchmarks/RESULTS-tui.md]

Runs the Textual app headless (Textual's own test driver: the same app, compositor and widgets, no
terminal) over the real live source while `perf bench sched messaging` loops and IDLE idle threads
exist, and measures:
- start: from the start, as `stallscope top` starts (the session's code imported, the probes loaded and
  attached, the screen's code imported, the app made), to its first screen (on_mount) and to the first
  interval shown; the interpreter's own start and the command line's parse come before (0.13 s here);
- steady state: the stallscope process's CPU time (collector thread and UI together, getrusage) per
  second of wall time, after WARM_UP seconds of data (10 by default), for SECONDS with no key pressed. The idle
  threads' waits in progress are walked for their kernel stacks by the task dumps as the stack-walk budget
  allows: under hackbench, most of 5,000 within about four minutes, and what each interval costs settles only
  then (`--warm-up 300` for the steady state of a `top` left open);
- key to frame: the time from a key event reaching the app to the next frame drawn after its action ran
  (`s`, a sort that rebuilds the table; the frame marked by Textual's call_after_refresh, asked for before the
  action runs, so that the mark is not held up by the detail pane's redraw the action asks for after it), pressed every
  0.25 s for SECONDS more, drains running meanwhile in the session's thread; p50/p99/max. (Textual's pilot waits for the
  process to go idle after a key, which a process whose collector thread is busy never does: its
  timings are not key-to-frame.)
It runs in a terminal session of its own (re-executed under setsid(1)), as `top` does in a terminal.
Standard library and the project only. Run as root.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.reference import reference_s

ROOT = Path(__file__).resolve().parent.parent
SESSION_THREAD = "stallscope-session"  # the live source's thread (stallscope/sources.py LiveSource)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _threads_cpu_s() -> dict[str, float]:
    """CPU seconds of each of this process's Python threads so far (by name; /proc, in clock ticks)."""
    import threading

    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue
        out[t.name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def steal_ns() -> int:
    """What the host of a virtual machine ran instead of its CPUs, all of them (/proc/stat's steal): stallscope's
    `machine.steal_ns`, read here without importing it, since the start is timed from before it and that module
    brings the record classes (40 ms) ahead of the screen's code."""
    with open("/proc/stat") as f:
        return int(f.readline().split()[8]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


WARM_UP_S = 10.0  # seconds of data before the steady state is measured (--warm-up)


async def measure(seconds: float, interval: float, realtime: int | None = None, window: int = 1,
                  view: int = 1, warm_up: float = WARM_UP_S) -> dict:
    # as `stallscope top` runs, from its start on (the interpreter's start and the command line's parse came
    # before: 0.13 s here): the session's and the screen's code imported, then the probes loaded as the screen draws
    t0 = time.monotonic()
    marks: dict[str, float] = {}
    stolen0 = steal_ns()  # what a virtual machine's host takes of its CPUs slows a start and costs more CPU time
    from stallscope.priority import DEFAULT_NICE, group_state
    from stallscope.session import SessionOptions
    from stallscope.sources import LiveSource

    # its first interval counted from the command's start (here, this function's)
    source = LiveSource(SessionOptions(interval_s=interval, nice=DEFAULT_NICE, realtime=realtime, started_at=t0))
    levels: list[int] = []  # every budget step, as the intervals arrive (the timeline forgets the oldest)
    take = source.events

    def watched():
        out = take()
        levels.extend(c.to.level for ev in out if ev.kind == "interval" for c in ev.payload.tuning)
        return out

    source.events = watched
    from stallscope.tui.app import TopApp
    from textual import events

    source.start()  # as `stallscope top` does: the screen's code imported, then the probes load as it draws

    class Timed(TopApp):
        def on_mount(self) -> None:  # Textual calls TopApp's own on_mount too (handlers run up the MRO)
            marks.setdefault("screen", time.monotonic() - t0)

        def refresh_data(self, force: bool = False) -> None:
            super().refresh_data(force)
            if self.snapshot is not None and "data" not in marks:
                marks["data"] = time.monotonic() - t0
                marks["data_steal_ns"] = steal_ns() - stolen0

    keys: list[float] = []

    class Keyed(Timed):
        sent = 0.0

        def action_sort(self) -> None:
            # marked first: the mark runs as soon as the frame with the sort is drawn, before what the action asked to
            # run after that frame (the detail pane of the row now under the cursor, drawn in the next one)
            sent = self.sent
            self.call_after_refresh(lambda: keys.append(time.monotonic() - sent))
            super().action_sort()

    app = Keyed(source)
    async with app.run_test(size=(160, 50)) as pilot:
        while "data" not in marks and time.monotonic() - t0 < 60:
            await pilot.pause(0.05)
        if window > 1:  # as `w` sets it
            app.window_len = source.window_len = window
        if view != 1:  # as its digit shows it
            await pilot.press(str(view))
        view_name = app.active_view().name
        warm = time.monotonic() + warm_up
        while time.monotonic() < warm:
            await pilot.pause(0.25)
        # steady state: the view left alone, as it is most of the time
        cpu0, wall0, threads0, stolen0 = _cpu_s(), time.monotonic(), _threads_cpu_s(), steal_ns()
        await asyncio.sleep(seconds)
        wall = time.monotonic() - wall0
        steady_steal = (steal_ns() - stolen0) / 1e9 / wall / (os.cpu_count() or 1)
        cpu = (_cpu_s() - cpu0) / wall
        threads1 = _threads_cpu_s()
        # the session's thread (drains, folds, the views' data) apart from the rest (the screen: Textual's loop)
        session_cpu = (threads1.get(SESSION_THREAD, 0) - threads0.get(SESSION_THREAD, 0)) / wall
        by_thread = {name: round(100 * (s - threads0.get(name, 0)) / wall, 2) for name, s in sorted(threads1.items())}
        # then a key every 0.25 s for as long
        wall0 = time.monotonic()
        while time.monotonic() - wall0 < seconds:
            app.sent = time.monotonic()
            app._driver.send_message(events.Key("s", "s"))
            await asyncio.sleep(0.25)
        level = max(levels, default=0)
        state = group_state()  # raised at once, as `top` raises it (main), or by the session
        group = state["nice"] if state["autogroup"] else None
        intervals = len(source.timeline)
        await pilot.press("q")
    source.join(15)
    return {"first_screen_s": round(marks.get("screen", -1), 3), "first_data_s": round(marks.get("data", -1), 3),
            "steal_pct_start": round(100 * marks.get("data_steal_ns", 0) / 1e9 / max(marks.get("data", 0), 1e-9)
                                     / (os.cpu_count() or 1), 1),
            "steal_pct_steady": round(100 * steady_steal, 1),
            "cpu_pct_of_one_cpu": round(100 * cpu, 2), "session_thread_cpu_pct": round(100 * session_cpu, 2),
            "threads_cpu_pct": by_thread,
            "key_p50_ms": round(1e3 * _pct(keys, 0.5), 1),
            "key_p99_ms": round(1e3 * _pct(keys, 0.99), 1), "key_max_ms": round(1e3 * max(keys, default=0), 1),
            "keys": len(keys), "intervals": intervals, "window": window, "view": view_name,
            "budget_level_reached": level,
            "group_nice": group,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


SESSION_ENV = "STALLSCOPE_BENCH_SESSION"


def own_session(module: str = "benchmarks.tui") -> None:
    """Run in a terminal session of its own, as `top` in a terminal is: stallscope raises its session's
    scheduling group (autogroup) only when no other program is in it (stallscope/priority.py), and a
    benchmark started beside other programs (a CI runner's, a shell's jobs) would measure a group left at
    the others' weight, which no user in a terminal of their own sees. Re-executed under setsid(1)."""
    if os.getsid(0) == os.getpid() or os.environ.get(SESSION_ENV) or not shutil.which("setsid"):
        return
    os.environ[SESSION_ENV] = "1"
    sys.stdout.flush()
    os.execvp("setsid", ["setsid", "--wait", sys.executable, "-m", module, *sys.argv[1:]])


IDLE_PERIOD_MS = 3000  # examples/idle_threads' default: each thread wakes every 3 s


class Detached:
    """A load program started outside stallscope's process tree: its own session, its parent init. A program
    started as this process's child would be one of stallscope's own tasks (analyzer/scope.py own_tasks: its
    process's descendants, which a view leaves out), so the views would rank nothing of the load, and a
    benchmark of them would leave out what a user's `top` does with it (for a `top` started beside the load,
    the load is never its child). A shell starts the program in the background and leaves; `setsid` makes
    the program's pid its session and group, which `stop` signals."""

    def __init__(self, argv: list[str]):
        self.args = argv
        out = subprocess.run(["sh", "-c", 'setsid "$@" </dev/null >/dev/null 2>&1 & echo $!', "sh", *argv],
                             check=True, capture_output=True, text=True).stdout
        self.pid = int(out.split()[0])

    def alive(self) -> bool:
        """Running: not gone, nor a zombie its new parent has not yet reaped."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM to its group (a loop's shell and the program it runs), SIGKILL after `timeout_s`."""
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 2.0)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                return
            end = time.monotonic() + wait_s
            while self.alive() and time.monotonic() < end:
                time.sleep(0.05)
            if not self.alive():
                return


def load_processes(idle: int, rt_mutex: bool, no_load: bool,
                   idle_period_ms: int = IDLE_PERIOD_MS) -> list[Detached]:
    """The load, each program in a session (a scheduling group) of its own and outside stallscope's process
    tree (Detached): IDLE idle threads, each waking every IDLE_PERIOD_MS, and hackbench in a loop (or
    stress-ng's real-time mutex threads); two seconds to start."""
    procs = []
    if idle:
        procs.append(Detached([str(ROOT / "examples/bin/idle_threads"), "-n", str(idle), "-p", str(idle_period_ms)]))
    if rt_mutex:
        procs.append(Detached(["stress-ng", "--mutex", "2"]))
    elif not no_load:
        procs.append(Detached(["bash", "-c", "while :; do perf bench sched messaging -g 10 -l 2000 "
                                             ">/dev/null 2>&1; done"]))
    time.sleep(2)
    return procs


def stop_load(procs: list[Detached]) -> None:
    for p in procs:
        p.stop()


def main() -> int:
    own_session()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="steady-state measuring time (default 60)")
    ap.add_argument("--warm-up", type=float, default=WARM_UP_S, metavar="S",
                    help=f"seconds of data before the steady state is measured (default {WARM_UP_S:g}; 300 for the "
                         "idle threads' stacks walked)")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--idle", type=int, default=5000, help="idle threads alive meanwhile (default 5000)")
    ap.add_argument("--idle-period", type=int, default=IDLE_PERIOD_MS, metavar="MS",
                    help="each idle thread wakes every MS ms (default 3000: 1,667 wakeups a second from 5,000; "
                         "3600000 leaves them asleep through a run)")
    ap.add_argument("--no-load", action="store_true", help="no hackbench: the machine as it is")
    ap.add_argument("--rt-mutex", action="store_true",
                    help="instead of hackbench, stress-ng --mutex 2: SCHED_FIFO threads holding both CPUs")
    ap.add_argument("--realtime", type=int, metavar="PRIO", help="as `top --realtime PRIO`")
    ap.add_argument("--window", type=int, default=1, metavar="N",
                    help="the view's window: the last N intervals, as `w` sets it (10 or 60; default 1)")
    ap.add_argument("--view", type=int, default=1, metavar="N",
                    help="the view shown while measuring, as its digit selects it (2: Tasks; default 1, Blockers)")
    ap.add_argument("--output", help="write the results as Markdown here (and JSON beside it)")
    args = ap.parse_args()
    speed = reference_s()  # this machine's speed today, before the load starts (benchmarks/reference.py)
    procs = load_processes(args.idle, args.rt_mutex, args.no_load, args.idle_period)
    try:
        from stallscope.priority import DEFAULT_NICE, at_group_nice, at_nice, enter_realtime

        if args.realtime:
            enter_realtime(args.realtime)  # as `top --realtime` does, before anything else
        # as `stallscope top` runs: its priority, and its terminal session's scheduling group raised, at once (cli.main)
        with at_nice(DEFAULT_NICE), at_group_nice(DEFAULT_NICE):
            result = asyncio.run(measure(args.seconds, args.interval, args.realtime, args.window, args.view,
                                         args.warm_up))
    finally:
        stop_load(procs)
    load = ("stress-ng --mutex 2" if args.rt_mutex else "none" if args.no_load else "perf bench sched messaging -g 10")
    result.update({"warm_up_s": args.warm_up, "idle_threads": args.idle, "idle_period_ms": args.idle_period, "load": load, "realtime": args.realtime, "reference_s": round(speed, 3),
                   "interval_s": args.interval, "kernel": platform.release(), "cpus": os.cpu_count()})
    print(json.dumps(result, indent=2))
    if args.output:
        Path(args.output).with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        Path(args.output).write_text(
            "# `stallscope top`: start, cost and key-to-frame latency, live\n\n"
            f"`python -m benchmarks.tui --seconds {args.seconds:g}"
            f"{' --warm-up %g' % args.warm_up if args.warm_up != WARM_UP_S else ''} --idle {args.idle}"
            f"{' --idle-period %d' % args.idle_period if args.idle_period != IDLE_PERIOD_MS else ''}"
            f"{' --no-load' if args.no_load else ''}{' --rt-mutex' if args.rt_mutex else ''}"
            f"{' --realtime %d' % args.realtime if args.realtime else ''}"
            f"{' --window %d' % args.window if args.window > 1 else ''}"
            f"{' --view %d' % args.view if args.view != 1 else ''}`; the {result['view']} view; kernel {result['kernel']}, "
            f"{result['cpus']} CPUs; load: {load if args.no_load or args.rt_mutex else load + ' in a loop'}, "
            f"{args.idle} idle threads; "
            f"{args.interval:g} s intervals; the Textual app headless (its test driver), in a session of its own.\n\n"
            "| measure | value | budget |\n|---|---|---|\n"
            f"| first screen | {result['first_screen_s']:.2f} s | 1 s |\n"
            f"| first data (BPF load and attach included) | {result['first_data_s']:.2f} s | interval + 0.5 s |\n"
            f"| stallscope's process CPU, steady state | {result['cpu_pct_of_one_cpu']:.1f}% of one CPU | 5% |\n"
            f"| &nbsp;&nbsp;of which the session's thread (drains, folds, the views' data) | "
            f"{result['session_thread_cpu_pct']:.1f}% | |\n"
            f"| key to frame p50 / p99 / max ({result['keys']} keys) | {result['key_p50_ms']:.0f} / "
            f"{result['key_p99_ms']:.0f} / {result['key_max_ms']:.0f} ms | p99 100 ms |\n"
            f"| intervals shown; budget level reached | {result['intervals']}; {result['budget_level_reached']} | |\n"
            f"| the process's peak resident memory | {result['peak_rss_mb']} MB | |\n"
            f"| the interpreter's reference, before the load (benchmarks/reference.py) | {speed:.3f} s | |\n"
            f"| the host's steal, of all CPUs' time: to the first data; steady state | "
            f"{result['steal_pct_start']:.1f}%; {result['steal_pct_steady']:.1f}% | |\n"
            f"| the process's scheduling group (autogroup) at | "
            f"{'nice %d' % result['group_nice'] if result['group_nice'] is not None else 'no autogroup'} | |\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
