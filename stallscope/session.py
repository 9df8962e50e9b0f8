"""A tracing session: attach the probes, optionally start a command, and hand
each interval to whoever consumes it (a recording file, a live view).

The wiring of collector, store and views lives in the CLI; this is the loop
they share: timing, signals, the command's lifetime, the final drain.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable

from stallscope import __version__, machine, procstat
from stallscope.analyzer.overhead import Governor, interval_cost, uprobe_trap_ns
from stallscope.analyzer.sample import Interval, ProbeStatus, RecordingMeta, Tuning
from stallscope.analyzer.store import FORMAT_VERSION
from stallscope.analyzer.symbols import Symbolizer
from stallscope.analyzer.untrusted import escaped
from stallscope.bpf import features
from stallscope.bpf.collector import SchedCollector, SchedOptions, boottime_ns
from stallscope.bpf.groups import GROUPS, GroupOptions, default_groups
from stallscope.bpf.sizing import DEFAULT_SIZES, machine_sizes
from stallscope.bpf import tune
from stallscope.bpf.tune import DEFAULT_SAMPLE_NS, DEFAULT_USER_WALKS_PER_S, DEFAULT_WALKS_PER_S
from stallscope.errors import StallscopeError
from stallscope.gc_work import interval_work, settle_gc, setup_work
from stallscope.priority import (
    at_nice, at_policy, caller_policy, own_nice, own_policy, raise_group, set_own_nice, set_own_policy,
)
from stallscope.warmup import KernelTables



@dataclass
class SessionOptions:
    interval_s: float = 1.0
    duration_s: float | None = None
    pid: int = 0
    command: list[str] = field(default_factory=list)
    min_stack_ns: int = 0
    user_stacks: bool = True
    stack_walks_per_s: int = DEFAULT_WALKS_PER_S  # a cap per CPU and probe object; 0 = none
    stack_scale_ns: int = DEFAULT_SAMPLE_NS  # T: a wait of d ns gets a stack with probability min(1, d/T)
    user_walks_per_s: int = DEFAULT_USER_WALKS_PER_S  # user stacks at a wait's start, per CPU
    probes: frozenset[str] = field(default_factory=default_groups)  # optional groups (bpf/groups.py)
    max_intervals: int | None = None
    sample_hz: int = 99  # on-CPU sampling per CPU (oncpu group)
    overhead_budget_pct: float = 1.0  # of the machine's CPU; measured and reported every interval
    degrade: bool = True  # over the budget, lower the stack walks and sampling (analyzer/overhead.py)
    nice: int | None = None  # the session's own priority (stallscope/priority.py); None: the caller's
    realtime: int | None = None  # run the session's threads at SCHED_FIFO at this priority; None: not
    max_tasks: int | None = None  # T of the BPF maps' sizes (bpf/sizing.py); None: sized for the machine
    stack_map_entries: int | None = None  # each probe object's stack map; None: sized for the machine
    # a live view's first interval ends this long after the session began (no sooner than
    # MIN_FIRST_INTERVAL_S after the set-up), so that its first data come within an interval of starting
    # rather than an interval after the probes' loading; None: a whole interval after the set-up
    first_interval_end_s: float | None = None
    # when the session began, for the above (time.monotonic()): the command's start, where the interpreter's
    # start and the imports before the session came first (0.2-0.3 s); None: when run() is called
    started_at: float | None = None


# after the first interval is handed over, the wait before the collection that settles start-up (at most half
# the time to the next drain): a live view draws its first data meanwhile, not behind the collection
SETTLE_GRACE_S = 0.3
MIN_FIRST_INTERVAL_S = 0.25  # a shortened first interval is no shorter than this
STRETCHED = 2.0  # an interval this many times the length asked (and 0.5 s longer) has stretched: said once


@dataclass
class SessionResult:
    meta: RecordingMeta
    intervals: int
    exit_status: int | None = None  # the command's, when there was one
    ended_by: str = ""


# Interval fields that name what later records refer to, each sent once, in the first interval that
# needs it: a drain that is dropped hands them on.
_NAMES_SENT_ONCE = ("task_info", "stacks", "functions", "cgroups", "slab_caches")


def say(message: str) -> None:
    """stallscope's own messages go to stderr: a traced command keeps stdout. What they quote is
    escaped; a closed or broken stderr (`record ... 2>&1 | head -1`) loses the message, never the
    recording."""
    try:
        print(f"stallscope: {escaped(message)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def check_privileges() -> None:
    missing = features.missing_for_tracing()
    if missing:
        raise StallscopeError(f"missing {' and '.join(missing)} to load and attach BPF programs",
                              "run as root (sudo), or grant them with setcap")


def process_exists(pid: int) -> bool:
    """Alive, not a zombie: a process that exited but is not yet reaped has nothing left to trace."""
    got = procstat.fields(pid)
    return bool(got) and got[0] not in (b"Z", b"X")


def waited_between(before: dict[int, int], after: dict[int, int]) -> int:
    """The threads' wait for a CPU from one reading to the next: a thread begun since counts from its start;
    one gone since, its wait after the first reading unknown, not at all."""
    return sum(ns - before.get(tid, 0) for tid, ns in after.items())


class Session:
    """`notify`: where notices go (a probe that is off, a budget step): stderr by default; a live view
    running the session in a worker thread takes them as events."""

    def __init__(self, options: SessionOptions, notify: Callable[[str], None] = say):
        self.options = options
        self.notify = notify
        self._stop_reason = ""
        self._halted = ""  # set by stop(): a consumer can take no more intervals
        self._signals: list[int] = []
        self.child: subprocess.Popen | None = None
        self.collector: SchedCollector | None = None
        self.groups: dict = {}  # name -> running optional collector
        self._drained = 0  # intervals drained since the recording started
        self._carried: dict[str, tuple] = {}  # names from the set-up's drain, for the first interval
        self._throttling = machine.Throttling()  # the limited cgroups' cpu.stat, read at each drain
        self._cpu_now: dict[int, tuple[int, int]] | None = None  # /proc/stat's CPU times at the last drain
        self._cpu_first: dict[int, tuple[int, int]] | None = None  # and at the set-up drain: the recording's start
        o = options
        self.tuning = Tuning(0, o.stack_walks_per_s, o.min_stack_ns, o.sample_hz, o.stack_scale_ns, o.user_walks_per_s)
        self.governor = Governor(self.tuning, o.overhead_budget_pct) if o.degrade else None
        self.sizes = DEFAULT_SIZES  # the BPF maps' sizes: chosen for the machine when run() starts
        self._restore_group = None  # puts the session's scheduling group back (stallscope/priority.py)
        self._loading_ns = 0  # CLOCK_BOOTTIME as the probes began to load: no wait is seen to begin before it

    def stop(self, reason: str) -> None:
        """For a consumer that can take no more intervals (a full disk): the session ends at its next
        drain and detaches the probes; a command it started is not signalled, and is waited for."""
        self._halted = self._halted or reason

    def _on_signal(self, signum, _frame) -> None:
        self._signals.append(signum)
        if not self._stop_reason:
            self._stop_reason = signal.Signals(signum).name

    def end(self, reason: str = "stopped") -> None:
        """Ends the session now, as a signal would, from any thread (a live view's quit)."""
        if not self._stop_reason:
            self._stop_reason = reason

    def _install_signals(self) -> dict:
        """SIGINT, SIGTERM and SIGHUP end the session cleanly; a signal the caller ignores (SIGHUP under
        nohup) stays ignored, as asked."""
        old = {}
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(s) == signal.SIG_IGN:
                continue
            old[s] = signal.signal(s, self._on_signal)
        return old

    def run(self, on_start: Callable[[RecordingMeta], None], on_interval: Callable[[Interval], None],
            handle_signals: bool = True) -> SessionResult:
        """`handle_signals`: install the signal handlers (only the main thread can); a session run in a
        worker thread is ended with end()."""
        o = self.options
        began = o.started_at if o.started_at is not None else time.monotonic()
        check_privileges()
        if o.pid and not process_exists(o.pid):
            raise StallscopeError(f"no process with PID {o.pid}", "check the PID with `ps -e`")
        symbolizer = Symbolizer()
        self.sizes = machine_sizes(o.max_tasks, o.stack_map_entries)
        self.collector = collector = SchedCollector(
            SchedOptions(targ_tgid=o.pid, user_stacks=o.user_stacks, stack_tune=tune.of_tuning(self.tuning),
                         max_tasks=self.sizes.tasks, max_stacks=self.sizes.stack_entries),
            symbolizer)
        old = self._install_signals() if handle_signals else {}
        exit_status = None
        rusage = None
        intervals = 0
        self._starved_said = self._stretch_said = False
        self._nice_before = own_nice()
        self._policy_before = own_policy()  # what the session puts back (the CLI may have set it already)
        self._raise_priority()
        try:
            # the probes load and attach one group after another, the set-up drain some time after the first (0.3 s and
            # more under load): a wait seen from its beginning then, under way at the recording's start, is longer
            # than the recording by up to that time (model.wait_limit_ns)
            self._loading_ns = boottime_ns()
            # the kernel's symbols and types, read while the probes load (the kernel's work): the set-up
            # drain and the first interval's find them read (still before a command starts)
            tables = KernelTables(symbolizer, locks="locks" in o.probes)
            tables.start()
            collector.prepare()  # the maps the other groups share: they start while its programs are verified
            status = self._start_all(symbolizer)
            tables.wait()
            with setup_work():
                self._skip_setup()
            self._run_delay = collector.dump_run_delay, collector.dump_monotonic
            start_ns = collector.interval_start_ns
            meta = replace(self._meta(status, start_ns), machine=machine.describe())
            self._cpu_first = self._cpu_now
            self._cpu_side = machine.cpu_side_snapshot()
            for name, st in status.items():
                if not st.enabled:
                    self.notify(f"probe {name} is off: {st.reason}")
            if o.command:
                self.child = self._spawn(o.command)
                meta = replace(meta, options={**meta.options, "command": {"argv": o.command, "pid": self.child.pid}})
            on_start(meta)
            deadline = time.monotonic() + o.duration_s if o.duration_s else None
            # the first interval began at the set-up drain's task dump: what came after it (parsing the
            # machine's tasks, naming their stacks) is inside the interval rather than before it
            next_tick = collector.dump_monotonic + o.interval_s
            if o.first_interval_end_s is not None:  # a live view: shorter, so that its data come soon
                next_tick = min(next_tick, max(began + o.first_interval_end_s,
                                               collector.dump_monotonic + MIN_FIRST_INTERVAL_S))
            next_tick = max(next_tick, time.monotonic())
            while True:
                stop = ""
                if intervals == 1:
                    # the first interval handed over, once a live view had the time to draw it (the interpreter's
                    # lock is held throughout a collection) and half the time to the next drain at most: what
                    # start-up and the first interval built (kernel symbols, ELF tables, the BPF objects) is
                    # collected and put out of the collector's view (a full collection, 0.09 s under load)
                    now = time.monotonic()
                    stop = self._halted or self._wait_until(now + min(SETTLE_GRACE_S, max(0.0, next_tick - now) / 2),
                                                            deadline)
                    settle_gc()
                stop = stop or self._halted or self._wait_until(next_tick, deadline)
                if self.child is not None and exit_status is None:
                    exit_status, rusage = self._reap(block=False)
                    if exit_status is not None:
                        stop = stop or "command exited"
                if o.pid and not stop and not process_exists(o.pid):
                    stop = f"process {o.pid} exited"
                if o.max_intervals and intervals + 1 >= o.max_intervals:
                    stop = stop or "done"
                if stop:
                    self._finish_groups()
                    collector.last_drain_next()
                with interval_work(freeze=intervals > 0):  # the first's: settle_gc, above, after it
                    iv = self._drain()
                    self._say_if_starved(iv, (collector.dump_run_delay, collector.dump_monotonic))
                    if not stop:
                        iv = self._keep_to_budget(iv, meta)
                    on_interval(iv)
                intervals += 1
                if stop:
                    self._stop_reason = self._stop_reason or stop
                    break
                next_tick += o.interval_s
                if next_tick < time.monotonic():  # a slow drain: skip ahead rather than burst
                    next_tick = time.monotonic() + o.interval_s
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            collector.close()
            for group in self.groups.values():
                group.close()
            set_own_nice(self._nice_before)
            if own_policy() != self._policy_before:
                set_own_policy(*self._policy_before)
            if self._restore_group is not None:
                self._restore_group()
                self._restore_group = None
        if self.child is not None and exit_status is None:
            exit_status, rusage = self._finish_child()
        end_ns = boottime_ns()
        # each CPU's busy share over the intervals recorded (the set-up drain to the last drain), so that the
        # intervals' own figures sum to it; the probes' detaching after it is not the machine's behaviour
        machine_info = {**meta.machine, "cpu_busy_pct": machine.busy_pct(self._cpu_first or {}, self._cpu_now or {}),
                        "cpu_side": machine.cpu_side(self._cpu_side, machine.cpu_side_snapshot(),
                                                     (end_ns - meta.start_ns) / 1e9, meta.cpus)}
        meta = replace(meta, end_ns=end_ns, machine=machine_info)
        if self.child is not None:
            cmd = dict(meta.options["command"])
            cmd["exit_status"] = exit_status
            if rusage is not None:
                cmd["rusage"] = {"ru_nvcsw": rusage.ru_nvcsw, "ru_nivcsw": rusage.ru_nivcsw,
                                 "ru_utime_s": rusage.ru_utime, "ru_stime_s": rusage.ru_stime}
            meta = replace(meta, options={**meta.options, "command": cmd})
        return SessionResult(meta, intervals, exit_status, self._stop_reason)

    def _start_all(self, symbolizer: Symbolizer) -> dict[str, ProbeStatus]:
        """The scheduler group's programs, and each optional group that was asked for (one that cannot
        run is off with its reason)."""
        o = self.options
        gopts = GroupOptions(targ_tgid=o.pid, stack_tune=tune.of_tuning(self.tuning), user_stacks=o.user_stacks,
                             sample_hz=o.sample_hz, sched_state_fd=self.collector.state_map_fd(),
                             max_tasks=self.sizes.tasks, max_stacks=self.sizes.stack_entries)
        status: dict[str, ProbeStatus] = {}
        # at once, the scheduler's programs among them: their BPF objects are verified in the kernel and
        # the futex group's helpers (objdump) run outside this process, so the groups' start-ups overlap
        # rather than add up (on a loaded machine, seconds). The kernel's tables are read meanwhile
        # (stallscope/warmup.py); the futex group's timing of a uprobe trap keeps the interpreter through its
        # rounds (bpf/futex_collector.py measure_uprobe_trap), so that it need not wait for them
        with ThreadPoolExecutor(max_workers=len(GROUPS), thread_name_prefix="stallscope-start") as pool:
            started = {name: pool.submit(self._start_group, group, symbolizer, gopts)
                       for name, group in GROUPS.items() if name in o.probes}
            error = None
            try:
                status.update(self.collector.start())
            except BaseException as exc:  # the groups started are kept, to be closed with the session
                error = exc
            for name in GROUPS:
                if name not in started:
                    status[name] = ProbeStatus(False, "", f"not requested (--probes +{name})")
                    continue
                try:
                    collector, status[name] = started[name].result()
                except BaseException as exc:  # the others are kept, to be closed with the session
                    error = error or exc
                    continue
                if collector is not None:
                    self.groups[name] = collector
        if error is not None:
            raise error
        return status

    @staticmethod
    def _start_group(group, symbolizer: Symbolizer, gopts: GroupOptions):
        """(the collector, its status); the collector None when it could not start (closed)."""
        collector = group.factory(symbolizer, gopts)
        st = collector.start()
        if st.enabled:
            return collector, st
        collector.close()
        return None, st

    def _finish_groups(self) -> None:
        for name, collector in self.groups.items():
            finish = getattr(collector, "finish", None)
            why = finish() if finish else ""
            if why:
                self.notify(f"{name}: {why}")

    def _skip_setup(self) -> None:
        """The probes are attached: what was measured while the others were set up (uprobe
        registration takes the traced processes' mmap_lock, helpers such as objdump run, kernel
        symbols are read) is stallscope's own start-up, not the machine's behaviour. It is drained
        and dropped, so the recording starts here; what names tasks, stacks, functions, cgroups and
        caches (each sent once) goes with the first interval."""
        iv = self._drain()
        self._carried = {name: getattr(iv, name) for name in _NAMES_SENT_ONCE}
        self._drained = 0

    def _drain(self) -> Interval:
        iv = self.collector.drain()
        for collector in self.groups.values():
            d = collector.drain(self.collector.last_dead)
            iv = replace(iv, stacks=iv.stacks + d.stacks, health={**iv.health, **d.health},
                         programs=iv.programs + d.programs,
                         **{name: getattr(iv, name) + records for name, records in d.records.items()})
        carried, self._carried = self._carried, {}
        # the cgroups a CPU limit throttled since the last drain (the set-up drain's: the baseline, dropped with it)
        throttled = self._throttling.since_last()
        cpu_now = machine.cpu_times()  # and each CPU's busy time (the set-up drain's: the baseline)
        cpu_before, self._cpu_now = self._cpu_now, cpu_now
        cpu_time = machine.cpu_time_since(cpu_before, cpu_now) if cpu_before is not None else ()
        iv = replace(iv, index=self._drained, throttled=throttled, cpu_time=cpu_time,
                     **{name: carried[name] + getattr(iv, name) for name in carried})
        self._drained += 1
        return iv

    def _keep_to_budget(self, iv: Interval, meta: RecordingMeta) -> Interval:
        """Judge the interval's cost; a step the budget takes is applied to every collector, said on
        stderr, and kept with the interval (the recording, the live view)."""
        if self.governor is None:
            return iv
        before = self.governor.current
        change = self.governor.observe(iv.index, interval_cost(iv, meta.cpus, uprobe_trap_ns(meta)), iv.health.get("waits_drawn", 0),
                                       iv.health.get("stacks_rate_limited", 0))
        if change is None:
            return iv
        if change.to != before:
            self.collector.retune(change.to)
            for group in self.groups.values():
                retune = getattr(group, "retune", None)
                if retune is not None:
                    retune(change.to)
        self.notify(f"overhead budget: {change.reason}; now {change.to.describe()}")
        return replace(iv, tuning=(change,))

    def _meta(self, status: dict[str, ProbeStatus], start_ns: int) -> RecordingMeta:
        o = self.options
        opts = {"interval_s": o.interval_s, "duration_s": o.duration_s, "pid": o.pid,
                "min_stack_ns": o.min_stack_ns, "user_stacks": o.user_stacks,
                "stack_walks_per_s": o.stack_walks_per_s, "stack_scale_ns": o.stack_scale_ns,
                "user_stack_walks_per_s": o.user_walks_per_s, "probes": sorted(o.probes), "sample_hz": o.sample_hz,
                "stallscope_pid": os.getpid(), "overhead_budget_pct": o.overhead_budget_pct,
                "degrade": o.degrade, "nice": own_nice(), "map_sizes": self.sizes.as_options(),
                # the intervals say which cgroups a CPU quota throttled in each (Interval.throttled), how
                # busy each CPU was (Interval.cpu_time) and the run-queue waits each CPU ended (Interval.cpu_runq)
                "throttled_per_interval": True, "cpu_time_per_interval": True, "cpu_runq_per_interval": True,
                "probes_loading_ns": self._loading_ns}
        if self._restore_group is not None:  # the session's scheduling group raised too (stallscope/priority.py)
            opts["group_nice"] = o.nice
        policy, rt_priority = own_policy()
        if policy == os.SCHED_FIFO:  # --realtime: the session's threads at SCHED_FIFO
            opts["realtime"] = rt_priority
        for name, collector in self.groups.items():  # what a group records about the machine once
            extra = getattr(collector, "meta_options", None)
            if extra is not None:
                opts[name] = extra()
        return RecordingMeta(
            format_version=FORMAT_VERSION, stallscope_version=__version__, host=socket.gethostname(),
            kernel=platform.release(), cpus=self.collector.nr_cpus if self.collector else os.cpu_count() or 1,
            start_wall=time.time(), start_ns=start_ns, interval_s=o.interval_s, probes=status, options=opts,
        )

    def _say_if_starved(self, iv: Interval, at_dump: tuple[dict[int, int], float]) -> None:
        """Once each, when stallscope's threads waited for a CPU a quarter of the time or more: while
        real-time tasks ran a tenth of it or more (no nice value gets stallscope a CPU they hold,
        --realtime does: stallscope/priority.py); or, among ordinary tasks, so long that the interval
        stretched to twice its length (the totals stay exact; the time series coarsen). Its wait from the
        kernel's own count (schedstat's run_delay), read at each drain's task dump (`at_dump`), where
        intervals end: over the interval's span, which the previous drain's own work stretches when it waits."""
        (delay, since), self._run_delay = self._run_delay, at_dump
        rt_said = self._starved_said or self.options.realtime is not None
        if rt_said and self._stretch_said:  # said, or nothing to say: the threads' waits no longer read
            if self.collector is not None:
                self.collector.watch_run_delay = False
            return
        now = at_dump[1]
        if not delay or not self._run_delay[0]:
            return
        waited = waited_between(delay, self._run_delay[0]) / 1e9
        if waited < (now - since) / 4:
            return
        if not rt_said and self._say_real_time(iv, waited, now - since):
            return
        asked, took = self.options.interval_s, iv.duration_ns / 1e9
        if self._stretch_said or took < max(STRETCHED * asked, asked + 0.5):
            return
        self._stretch_said = True
        fix = "--nice -20 keeps them" if own_nice() > -20 else "--realtime 1 keeps them"
        self.notify(f"intervals stretch under load: the last took {took:.1f} s for the {asked:g} s asked, stallscope's "
                    f"threads waiting {waited:.1f} s in all for a CPU; the totals stay exact, the "
                    f"series coarsen; {fix} (docs/recording.md)")

    def _say_real_time(self, iv: Interval, waited: float, over: float) -> bool:
        rt = self.collector.realtime_tasks() if self.collector is not None else {}
        ran = sorted(((d.run_ns, d.task) for d in iv.tasks if d.task in rt and d.run_ns >= iv.duration_ns / 10),
                     reverse=True)
        if not ran:
            return False
        self._starved_said = True
        names = ", ".join(f"{rt[tid][0]} ({tid.pid}, {'SCHED_FIFO' if rt[tid][1] == 1 else 'SCHED_RR'} {rt[tid][2]}, "
                          f"{100 * ns / iv.duration_ns:.0f}% of a CPU)" for ns, tid in ran[:3])
        more = f" and {len(ran) - 3} more" if len(ran) > 3 else ""
        top = max(rt[tid][2] for _ns, tid in ran)
        self.notify(f"stallscope's threads waited {waited:.1f} s in all over the last {over:.1f} s for CPUs that "
                    f"real-time tasks hold (no nice value helps): --realtime {min(top + 1, 99)} runs it above them. "
                    f"They are {names}{more}")
        return True

    def _raise_priority(self) -> None:
        """Before the probes load (the verifier, too, waits for a CPU on a busy machine)."""
        rt = self.options.realtime
        if rt is not None:
            why = set_own_policy(os.SCHED_FIFO, rt) if own_policy() != (os.SCHED_FIFO, rt) else ""
            if why:
                self.notify(f"cannot run at SCHED_FIFO priority {rt} ({why}): where real-time tasks hold the CPUs, "
                            "stallscope gets what their throttling leaves; run as root")
        nice = self.options.nice
        if nice is None:
            return
        why = set_own_nice(nice) if nice != self._nice_before else ""  # a live view's thread may be there already
        if why:
            self.notify(f"cannot run at nice {nice} ({why}): on a busy machine the intervals may stretch; "
                "run as root, or pass --nice to choose another priority")
            return
        if nice < 0 and not self.options.command:  # a command would run in the raised group too
            self._restore_group, why = raise_group(nice)
            if why:
                self.notify(why)

    def _spawn(self, argv: list[str]) -> subprocess.Popen:
        try:
            # Started only now, with the probes attached; it keeps our stdin/stdout/stderr, and the
            # caller's priority rather than the one stallscope raised for itself.
            with at_nice(self._nice_before), at_policy(*caller_policy()):
                return subprocess.Popen(argv)
        except OSError as exc:
            raise StallscopeError(f"cannot run {argv[0]}: {exc.strerror}", "check the command and its path") from None

    def _wait_until(self, tick: float, deadline: float | None) -> str:
        while True:
            if self._stop_reason:
                if self.child is None or self._child_done():
                    return self._stop_reason
                self._forward_signal()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return "duration reached"
            if now >= tick:
                return ""
            if self.child is not None and self._child_done():
                return ""
            time.sleep(min(0.05, tick - now))

    def _forward_signal(self) -> None:
        """A terminal's Ctrl-C already reached the command (same process group); a signal sent to
        stallscope alone is passed on, once, after a grace period."""
        if getattr(self, "_forwarded", False) or self.child is None:
            return
        if not hasattr(self, "_signal_at"):
            self._signal_at = time.monotonic()
        if time.monotonic() - self._signal_at > 0.5:
            sig = self._signals[-1] if self._signals else signal.SIGTERM
            try:
                self.child.send_signal(sig)
            except ProcessLookupError:
                pass
            self._forwarded = True

    def _child_done(self) -> bool:
        try:
            info = os.waitid(os.P_PID, self.child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def _reap(self, block: bool):
        try:
            pid, status, rusage = os.wait4(self.child.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return -1, None
        if pid == 0:
            return None, None
        self.child.returncode = os.waitstatus_to_exitcode(status)
        return self.child.returncode, rusage

    def _finish_child(self):
        if not self._child_done():
            self.notify(f"recording ended; waiting for {self.options.command[0]} (pid {self.child.pid}) to exit")
        while True:
            try:
                return self._reap(block=True)
            except KeyboardInterrupt:
                continue
