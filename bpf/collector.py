"""The scheduler collector: loads sched.bpf.o, attaches what this kernel allows,
and once per interval drains the in-kernel aggregates into an immutable
`Interval` of deltas.

The BPF maps are cumulative; this side keeps the previous totals and emits
differences, so a drain never races with the kernel's updates. Entries of
tasks whose final switch was seen are deleted after being read: nothing can
change them any more, and the maps stay bounded.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from itertools import takewhile

from stallscope.analyzer.sample import (
    Interval, OffcpuDelta, OngoingWait, ProbeStatus, ProgramCost, Stack, TaskId, TaskInfo, Tuning, WaitLink,
    WakerDelta, record_maker,
)
from stallscope.analyzer.symbols import Symbolizer
from stallscope.analyzer.wholefile import read_whole
from stallscope.bpf import abi, features, task_dump, tune
from stallscope.bpf.tune import DEFAULT_TUNE, StackTune
from stallscope.bpf.intervals import IntervalNumbers
from stallscope.bpf.libbpf import BpfError, BpfObject, IterLink, Map, RunTimeStats
from stallscope.bpf.mapdiff import MapDiff, identity
from stallscope.bpf.sizing import DEFAULT_SIZES, MapSizes
from stallscope.errors import StallscopeError
from stallscope import procstat
from stallscope.procstat import image as process_image

CLOCK_BOOTTIME = 7
_NO_HIST = [0] * abi.RUNQ_SLOTS
_NO_WAITS = (0, 0, 0, 0, 0, 0, 0, 0, _NO_HIST)
_OFFCPU_KEY, _OFFCPU_VAL = abi.unpacker(abi.OffcpuKey), abi.unpacker(abi.OffcpuVal)
_WAKER_KEY, _WAKER_VAL = abi.unpacker(abi.WakerKey), abi.unpacker(abi.WakerVal)
_TASK_KEY = abi.unpacker(abi.TaskKey)
_HEADER = abi.unpacker(abi.DumpHeader)
_TASK_RECORD = ctypes.sizeof(abi.TaskKey) + ctypes.sizeof(abi.TaskStats)
_TASK_KEY_SIZE = ctypes.sizeof(abi.TaskKey)
# the records a drain makes by the thousand, every field given (the dataclasses' own __init__ is 1.45 us, these 0.24)
_new_offcpu, _new_waker = record_maker(OffcpuDelta), record_maker(WakerDelta)


def parse_dump(raw: bytes) -> tuple[list[tuple[bytes, bytes]], list[tuple]]:
    """The task dump's records (bpf/sched.bpf.c dump_tasks: each a DumpHeader, then its bytes): the live tasks'
    entries, (key, value), and the waits in progress it charged (OpenWait fields, unpacked)."""
    ks, hs = _TASK_KEY_SIZE, _HEADER.size
    live, opened, at, end = [], [], 0, len(raw)
    while at + hs <= end:
        kind, size = _HEADER.unpack_from(raw, at)
        at += hs
        if at + size > end:
            break
        if kind == abi.DUMP_TASK and size == _TASK_RECORD:
            live.append((raw[at:at + ks], raw[at + ks:at + size]))
        elif kind == abi.DUMP_OPEN and size == task_dump.OPEN_SIZE:
            opened.append(task_dump.open_record(raw, at))
        at += size
    return live, opened


def _scan_setup() -> tuple:
    """What analyzer/rowread.c scan_dump reads the dump with: its framing and the flags and values it reads (the
    order of rowread.c's SC_* names), and how it makes the records task_dump.py makes."""
    td = task_dump
    assert _HEADER.format == "<II" and _TASK_KEY.format == "<IIQ", "rowread.c scan_dump reads this framing"
    ints = (_HEADER.size, _TASK_KEY_SIZE, _TASK_RECORD, td.OPEN_SIZE, abi.DUMP_TASK, abi.DUMP_OPEN, abi.TS_DEAD,
            abi.TS_FOUND_BLOCKED, td.TGID, td.FLAGS, td.COMM, td.POLICY, td.NICE, td.RT_PRIORITY, td.PTGID,
            td.OFFCPU_NS, td.OFFCPU_COUNT)
    # values_of and open_record, as the struct's own methods
    return (ints, td._SCALARS.unpack_from, td._OPEN.unpack_from, td._C_DELTAS, td._C_SLOTS, td.py_task_delta,
            abi.name_text, TaskId, TaskInfo, td.Prev)


try:  # the dump's entries scanned in C (analyzer/rowread.c scan_dump), where it and task_dump's pieces are built
    from stallscope.analyzer._rowread import scan_dump as _c_scan_dump
    _SCAN_SETUP = _scan_setup() if task_dump._C_DELTAS is not None and task_dump._C_SLOTS is not None else None
except ImportError:
    _c_scan_dump = _SCAN_SETUP = None
if _SCAN_SETUP is None:
    _c_scan_dump = None


_IVAL = 9 + abi.RUNQ_SLOTS  # where an unpacked offcpu_val's extremes begin (v[8] is the pad)


def _offcpu_now(v: tuple) -> tuple:
    """An unpacked offcpu_val as the totals _offcpu_delta takes."""
    return (*v[:8], list(v[9:_IVAL]))


def _offcpu_delta(tid: TaskId, tgid: int, state: int, kstack: int, ustack: int, why: int, func: int, now: tuple,
                  before: tuple, longest: int) -> OffcpuDelta:
    """The waits of one off-CPU map key since `before`; `longest`: the
    interval's longest (bpf/interval.h)."""
    (c, t, ch, w, var, w0, w1, w2, h), (pc, pt, pch, pw, pvar, p0, p1, p2, ph) = now, before
    return _new_offcpu(tid, tgid, state, kstack, ustack, c - pc, t - pt, abi.bounded(longest, longest, c - pc, t - pt)[0],
                       task_dump.hist_delta(h, ph), why, func, ch - pch,
                       w - pw, var - pvar, (w0 - p0, w1 - p1, w2 - p2))


def boottime_ns() -> int:
    return time.clock_gettime_ns(CLOCK_BOOTTIME)


def clock_pair(tries: int = 4, within_ns: int = 20_000) -> tuple[int, int]:
    """The same instant on CLOCK_BOOTTIME (the intervals' clock) and CLOCK_MONOTONIC (the BPF side's): the
    monotonic reading between two boottime ones, taken again when they lie far apart (the interpreter may give
    another thread its turn between two readings, for up to its 5 ms switch interval). A wait in progress
    begins at the interval's end less its length on the BPF side's clock: both readings must be of one instant."""
    for _ in range(tries):
        b0 = time.clock_gettime_ns(CLOCK_BOOTTIME)
        mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        b1 = time.clock_gettime_ns(CLOCK_BOOTTIME)
        if b1 - b0 <= within_ns:
            break
    return (b0 + b1) // 2, mono


def object_path(name: str) -> str:
    """The compiled CO-RE object shipped as package data."""
    path = resources.files("stallscope.bpf").joinpath(name)
    if not path.is_file():
        raise StallscopeError(f"BPF object {name} is missing", "run `make install` to compile bpf/*.bpf.c")
    return str(path)


@dataclass(frozen=True)
class SchedOptions:
    targ_tgid: int = 0
    user_stacks: bool = True
    kernel_stacks: bool = True
    waker_stacks: bool = True
    stack_tune: StackTune = DEFAULT_TUNE  # which waits get stacks (bpf/tune.py)
    max_tasks: int = DEFAULT_SIZES.tasks  # T: the per-task maps are multiples of it (bpf/sizing.py)
    max_stacks: int = DEFAULT_SIZES.stack_entries

    @property
    def sizes(self) -> MapSizes:
        return MapSizes(self.max_tasks, self.max_stacks)


SCHED_GROUPS = ("offcpu", "runq", "switches", "wakers", "migrations")


@functools.cache
def _possible_cpus() -> int:
    """The CPUs a per-CPU map holds a value for (fixed at boot; read once: drains ask each interval)."""
    try:
        text = open("/sys/devices/system/cpu/possible").read().strip()
        return int(text.split("-")[-1].split(",")[-1]) + 1
    except (OSError, ValueError):
        return os.cpu_count() or 1


class SchedCollector:
    def __init__(self, options: SchedOptions, symbolizer: Symbolizer):
        self.options = options
        self.symbolizer = symbolizer
        self.nr_cpus = _possible_cpus()
        self.obj: BpfObject | None = None  # the maps (prepare())
        self.progs: list[BpfObject] = []  # the programs and their links (start())
        self.status: dict[str, ProbeStatus] = {}
        self._stats: RunTimeStats | None = None
        self._prev_tasks: dict[TaskId, task_dump.Prev] = {}
        self._info: dict[TaskId, tuple[str, int]] = {}
        # the intervals the extremes are kept by (bpf/interval.h): the offcpu map's (0) and the tasks' (1)
        self._numbers = IntervalNumbers(2)
        # the maps' entries as the last drain read them (bpf/mapdiff.py): unchanged ones are skipped, a changed
        # one comes with its previous value; a waker entry goes with its wakee or its waker, once dead
        self._offcpu_diff = MapDiff.of(abi.OffcpuKey, abi.OffcpuVal, (identity(abi.OffcpuKey),))
        self._waker_diff = MapDiff.of(abi.WakerKey, abi.WakerVal, (
            identity(abi.WakerKey), identity(abi.WakerKey, "waker_pid", "waker_start_ns")))
        self._prev_matrix: list[int] = [0] * (self.nr_cpus * self.nr_cpus)
        self._matrix_cells: list[int] = list(self._prev_matrix)
        self._migrations_counted = False  # bpf/sched.bpf.c migrations_off
        self._prev_cs = 0
        self._prev_runq: list[tuple[int, int]] = []  # each CPU's run-queue waits at the last drain (ns, count)
        self._runq_cells: list[tuple[int, int]] = []  # ... and at this one's dump
        self._health = HealthDeltas(abi.SchedHealth)
        self._programs = ProgramDeltas()
        self._stacks = StackReader(symbolizer, options.max_stacks)
        self._leader_start: dict[int, int] = {}
        self._remembered: set[int] = set()
        self._last_ns = 0
        self._last_cpu_ns = 0
        self._index = 0
        self.last_dead: set[TaskId] = set()  # threads whose final switch the last drain saw
        self._dead_before: set[TaskId] = set()
        self._new_cgroups: list[tuple[int, int, str]] = []
        self._dump: IterLink | None = None  # dump_tasks: the live tasks' entries
        self._renames_seen = False  # task_rename attached: TS_RENAMED tells an exec'd child from a fork
        self._slot_deltas: list[OffcpuDelta] = []  # from the tasks' own slots, drained with the offcpu map
        self._open_deltas: list[OffcpuDelta] = []  # waits in progress charged by the dump
        self._open = task_dump.OpenWaits()  # the waits in progress handed over, and those carried on
        self._ongoing: tuple[OngoingWait, ...] = ()  # the last dump's carried waits
        self._now = task_dump.InProgress((), (), ())  # the last dump's waits in progress, with their beginnings
        self._ongoing_ns = 0
        self._dump_clock = 0  # the last dump's instant (CLOCK_MONOTONIC ns), 0: every wait is handed over
        self._named_functions: set[int] = set()
        self._dump_ns = 0
        self.dump_monotonic = 0.0
        self.dump_run_delay: dict[int, int] = {}  # at the dump: how long each of our threads waited for a CPU
        self.watch_run_delay = True  # read at each dump while the session may still say it stretched (0.14 ms)
        self._irq_text: Future | None = None  # the interrupt entry's bounds, read from kallsyms (prepare())

    # ---- set-up -------------------------------------------------------
    def prepare(self) -> None:
        """The object's maps made, its programs not yet loaded: the other groups' objects can share the
        tasks' state (state_map_fd) and be verified while start() verifies these programs. The maps
        live in an object of their own, loaded with no program (`self.obj`); the programs' objects
        share every one of them (`self.progs`)."""
        if self.obj is not None:
            return
        # kallsyms (a 5 MB read, most of it the kernel's) is read while the programs are verified: the
        # interrupt entry's bounds are written before they are attached (_write_irq_text)
        self._irq_text = _in_thread(irqentry_text, "stallscope-kallsyms")
        obj = BpfObject(object_path("sched.bpf.o"))
        try:
            # .rodata is frozen here, before any program is known to load: a kernel without the
            # task_rename tracepoint (absent from its BTF) has names copied at every switch-out instead
            self._configure(obj, comm_at_switch=not _has_tracepoint("task_rename"))
            for prog in obj.programs():
                prog.autoload = False
            obj.load()
            _set_migrations_off(obj, True)  # until the first drain's matrix read
        except BaseException:
            obj.close()
            raise
        self.obj = obj

    def start(self) -> dict[str, ProbeStatus]:
        """The programs loaded and attached (the maps made first, if prepare() was not called). When it
        fails, the programs are detached; the maps stay until close(), as other groups may be loading
        objects that share them."""
        self.prepare()
        try:
            return self._start_programs()
        except BaseException:
            self._close_programs()
            raise

    def _close_programs(self) -> None:
        for obj in self.progs:
            obj.close()
        self.progs = []
        self._dump = None

    def _start_programs(self) -> dict[str, ProbeStatus]:
        path = object_path("sched.bpf.o")
        loaded, failed = self._probe_programs(path)
        if loaded:  # every program loaded: those objects are the ones used (verified once)
            self.progs = loaded
        else:
            self.progs = [progs := self._programs_object(path, lambda name: name not in failed)]
            for essential in ("sched_switch", "dump_tasks"):
                if essential in failed:
                    raise StallscopeError(f"the scheduler probes cannot run: {failed[essential]}",
                                          "see `stallscope doctor`")
            progs.load()
        self._write_irq_text()
        for progs in self.progs:
            for prog in progs.programs():
                if prog.name in failed or not prog.autoload:
                    continue
                try:
                    if prog.section.startswith("iter/"):
                        self._dump = prog.attach_iter()
                        progs.links.append(self._dump)
                    else:
                        progs.attach(prog)
                except BpfError as exc:
                    failed[prog.name] = str(exc)
        if self._dump is None:
            raise StallscopeError(f"the scheduler probes cannot run: {failed.get('dump_tasks', 'no task iterator')}",
                                  "see `stallscope doctor`")
        self._stats = RunTimeStats()
        self._renames_seen = "task_rename" not in failed
        self.status = self._group_status(failed)
        self._last_ns = boottime_ns()
        self._last_cpu_ns = _own_cpu_ns()
        self._prev_cs = self._switches()
        # the per-CPU run-queue counts start at zero with the object, as the tasks' own do: a baseline read here
        # would miss what ended between the programs' attach and this read (0.5 s on a loaded machine)
        self._prev_runq = self._runq_cells = [(0, 0)] * self.nr_cpus
        self._prev_ctxt = _proc_ctxt()
        return self.status

    def _write_irq_text(self) -> None:
        """The interrupt entry's bounds, where an interrupt's waker stack is cut (bpf/sched.h struct
        irq_text): before any program runs."""
        lo, hi = self._irq_text.result()  # started by prepare(), which start() calls first
        self.obj.section_map(".data.irq").update(b"\0\0\0\0", bytes(abi.IrqText(lo, hi)))

    def _programs_object(self, path: str, wanted=None) -> BpfObject:
        """An object whose programs (those `wanted(name)` says, all when None) run, with every map the maps
        object's (prepare()): its .rodata too, configured and frozen there, which is what the verifier
        reads."""
        obj = BpfObject(path)
        try:
            for m in obj.maps():
                m.reuse_fd(self.obj.map(m.name).fd)
            for prog in obj.programs():
                prog.autoload = wanted is None or wanted(prog.name)
        except BaseException:
            obj.close()
            raise
        return obj

    def _configure(self, obj: BpfObject, comm_at_switch: bool = False) -> None:
        o = self.options
        cfg = abi.SchedConfig(
            targ_tgid=o.targ_tgid, nr_cpus=self.nr_cpus,
            user_stacks=int(o.user_stacks), kernel_stacks=int(o.kernel_stacks), waker_stacks=int(o.waker_stacks),
            thread_size=_thread_size(), comm_at_switch=int(comm_at_switch), self_tgid=os.getpid(),
        )
        image = obj.section_map(".rodata").initial_value()
        if len(image) < ctypes.sizeof(cfg):
            raise StallscopeError("sched.bpf.o does not match this stallscope", "run `make install` again")
        ctypes.memmove(image, ctypes.addressof(cfg), ctypes.sizeof(cfg))
        tune.write(obj, o.stack_tune)
        obj.map("migration_matrix").set_max_entries(self.nr_cpus * self.nr_cpus)
        sizes = o.sizes
        obj.map("task_final").set_max_entries(sizes.task_final)
        obj.map("offcpu").set_max_entries(sizes.offcpu)
        obj.map("wakers").set_max_entries(sizes.wakers)
        obj.map("stacks").set_max_entries(sizes.stack_entries)

    def _probe_programs(self, path: str) -> tuple[list[BpfObject], dict[str, str]]:
        """Load every program: loaded, their objects are returned to be used; only if that fails, find which
        programs this kernel rejects (each alone in a copy), for a copy without them. The verifier takes
        most of a start-up, half of it on sched_switch: that program is verified in an object of its own,
        in another thread, beside the others (the kernel's work, outside the interpreter's lock)."""
        objs = []
        try:
            objs = [self._programs_object(path, lambda name: name in _VERIFIED_ALONE),
                    self._programs_object(path, lambda name: name not in _VERIFIED_ALONE)]
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="stallscope-verify") as pool:
                alone = pool.submit(objs[0].load)
                errors = []
                for load in (objs[1].load, alone.result):
                    try:
                        load()
                    except BpfError as exc:
                        errors.append(exc)
            if not errors:
                return objs, {}
        except BaseException:
            for obj in objs:
                obj.close()
            raise
        for obj in objs:
            obj.close()
        failed: dict[str, str] = {}
        with BpfObject(path) as probe:
            names = [p.name for p in probe.programs()]
        for name in names:
            with BpfObject(path) as obj:
                self._configure(obj)
                for prog in obj.programs():
                    prog.autoload = prog.name == name
                try:
                    obj.load()
                except BpfError as exc:
                    failed[name] = _first_reason(exc)
        return None, failed

    def _group_status(self, failed: dict[str, str]) -> dict[str, ProbeStatus]:
        def status(progs: list[str]) -> ProbeStatus:
            bad = [p for p in progs if p in failed]
            if bad:
                return ProbeStatus(False, "", f"{bad[0]}: {failed[bad[0]]}")
            return ProbeStatus(True, "tp_btf")

        waker = status(["sched_waking"])
        if waker.enabled and not self.options.waker_stacks:
            waker = ProbeStatus(True, "tp_btf", "waker stacks off")
        return {
            "offcpu": status(["sched_switch", "sched_waking"]),
            "runq": status(["sched_switch", "sched_wakeup", "sched_wakeup_new"]),
            "switches": status(["sched_switch", "sched_process_wait"]),
            "wakers": waker,
            "migrations": status(["sched_migrate_task"]),
        }

    @property
    def interval_start_ns(self) -> int:
        """Where the next interval begins (CLOCK_BOOTTIME): the last drain's task dump, or start()."""
        return self._last_ns

    def realtime_tasks(self) -> dict[TaskId, tuple[str, int, int]]:
        """The live tasks last seen at a real-time policy (SCHED_FIFO 1, SCHED_RR 2): name, policy, priority."""
        return {tid: (comm, policy, prio) for tid, (comm, _flags, policy, _nice, prio) in self._info.items()
                if policy in (1, 2)}

    # ---- draining -----------------------------------------------------
    def last_drain_next(self) -> None:
        """The next drain is the last: migrations stop being counted now, so that its matrix and its
        tasks' counts hold the same ones (bpf/sched.bpf.c migrations_off)."""
        if self.obj is not None:
            _set_migrations_off(self.obj, True)

    def drain(self) -> Interval:
        assert self.obj is not None, "start() first"
        obj = self.obj
        # The waits that ended first (the entries of threads seen dead by the last drain read a final
        # time), then the task dump, which charges each blocked task's wait up to now; the interval ends
        # right after it, so a task's blocked time in it matches its length. A collector starved of CPU
        # stretches the interval rather than dating late data early.
        offcpu = self._drain_offcpu(obj, self.last_dead)
        wakers = self._drain_wakers(obj, self.last_dead)
        tasks, infos, dead = self._drain_tasks(obj)
        migrations = self._matrix_deltas()
        start_ns, end_ns = self._last_ns, self._dump_ns
        self.last_dead = dead
        offcpu += self._take_task_waits()
        cs = self._switches()
        ctxt = _proc_ctxt()
        wall_start = time.time() - (end_ns - start_ns) / 1e9
        stack_ids: dict[int, tuple[str, int]] = {}
        for o in offcpu:
            stack_ids.setdefault(o.kstack, ("kernel", 0))
            stack_ids.setdefault(o.ustack, ("user", o.tgid))
        funcs = {o.func for o in offcpu if o.func}
        for w in wakers:
            stack_ids.setdefault(w.waker_kstack, ("kernel", 0))
            funcs.update(f for f in (w.link.func, w.wakee.func) if f)
        for w in self._ongoing:  # named when handed over; a stack forgotten since is read again
            stack_ids.setdefault(w.kstack, ("kernel", 0))
            stack_ids.setdefault(w.ustack, ("user", w.tgid))
        stacks = self._stacks.read(obj.map("stacks"), stack_ids, self._leader_start)
        functions = self._functions(funcs)
        # Kept one drain longer: the other threads of a process may be seen dead only in the next one.
        self._forget_dead_processes(self._dead_before)
        self._dead_before = dead
        cpu_ns = _own_cpu_ns()
        health = self._health.drain(obj)
        self._check_carried(health)
        interval = Interval(
            index=self._index, start_ns=start_ns, end_ns=end_ns, wall_start=wall_start,
            switches=cs - self._prev_cs, tasks=tasks, task_info=infos, offcpu=offcpu, wakers=wakers,
            migrations=migrations, stacks=stacks, health=health, ongoing=self._ongoing, ongoing_ns=self._ongoing_ns,
            ongoing_since=self._now.ongoing_since, opened=self._now.opened,
            programs=tuple(c for progs in self.progs for c in self._programs.drain(progs)),
            collector_cpu_ns=cpu_ns - self._last_cpu_ns,
            kernel_switches=ctxt - self._prev_ctxt, cgroups=tuple(self._new_cgroups), functions=functions,
            cpu_runq=self._runq_deltas(),
        )
        self._new_cgroups = []
        self._prev_cs, self._last_ns, self._last_cpu_ns, self._prev_ctxt = cs, end_ns, cpu_ns, ctxt
        self._index += 1
        return interval

    def _check_carried(self, health: dict[str, int]) -> None:
        """The dump carried on as many waits as this side charged: each side counts them. A difference (a
        task that vanished without its final switch, which would be charged on) is counted as inconsistent
        data, and the next dump hands every wait in progress over, which this side's table is rebuilt from."""
        carried = health.pop("open_carried", 0)
        if carried != len(self._ongoing):
            health["open_carried_mismatch"] = health.get("open_carried_mismatch", 0) + abs(carried - len(self._ongoing))
            self._dump_clock = 0

    def _take_task_waits(self) -> tuple[OffcpuDelta, ...]:
        """The waits the last task dump handed over: those kept in the tasks' own slots (keys without
        stacks), and the parts of waits in progress."""
        out = tuple(self._slot_deltas) + tuple(self._open_deltas)
        self._slot_deltas, self._open_deltas = [], []
        return out

    def _functions(self, addrs: set[int]) -> tuple[tuple[int, str], ...]:
        """Kernel functions (a kernel thread's, a work item's) not named before, named."""
        out = []
        for addr in addrs - self._named_functions:
            self._named_functions.add(addr)
            try:
                name = self.symbolizer.kernel(addr).symbol
            except StallscopeError:
                name = None
            out.append((addr, name or f"{addr:#x}"))
        return tuple(out)

    def _task_entries(self, obj: BpfObject) -> tuple[bytes, list[tuple[bytes, bytes]], Map, int]:
        """What events changed since the last drain: the dump (the live tasks' entries, each its key then its
        value, and the waits in progress it charged: parse_dump), the entries of tasks whose final switch came
        since, and the interval whose extremes they hold."""
        # the interval's end: the dump charges every wait in progress up to this instant, however
        # long it takes to reach each task (bpf_ktime_get_ns is CLOCK_MONOTONIC)
        self._dump_ns, mono_ns = clock_pair()
        self.dump_monotonic = mono_ns / 1e9  # where the interval ended, on time.monotonic()'s clock
        if self.watch_run_delay:  # what stretched it (Session._say_if_starved)
            self.dump_run_delay = procstat.own_threads_run_delay_ns()
        self._set_dump_clock(obj, mono_ns, self._dump_clock)
        # what a wait carried on is charged in this dump: the time since the last one (none after a
        # dump_clock of 0, which hands every wait over)
        self._span_ns = mono_ns - self._dump_clock if self._dump_clock else 0
        self._dump_clock = mono_ns
        e = self._numbers.advance(self.obj, 1)
        raw = self._dump.read() if self._dump is not None else b""
        # the matrix right after the dump, before any parsing, so that few migrations fall between them; and
        # each CPU's run-queue waits, which the tasks' entries hold too
        self._matrix_cells = self._read_matrix(obj)
        self._runq_cells = self._read_runq(obj)
        if not self._migrations_counted:  # the set-up drain: from here on both count them
            _set_migrations_off(obj, False)
            self._migrations_counted = True
        final = obj.map("task_final")
        return raw, final.items_batch(), final, e

    @staticmethod
    def _set_dump_clock(obj: BpfObject, mono_ns: int, last_ns: int) -> None:
        """This dump's instant, and the last one's: 0 when this side's table of waits handed over is to be
        rebuilt (the first dump, a mismatch), so that the dump carries none on."""
        try:
            m = obj.map("dump_clock")
        except (BpfError, KeyError):
            return
        m.update(b"\1\0\0\0", last_ns.to_bytes(8, "little"))
        m.update(b"\0\0\0\0", mono_ns.to_bytes(8, "little"))

    def _drain_tasks(self, obj: BpfObject):
        raw, final_entries, final, e = self._task_entries(obj)
        prevs, opens = self._prev_tasks, self._open
        if not self._span_ns:  # every wait in progress is handed over in this dump: the table is made anew
            opens.reset(prevs)
        if not self._index:
            opens.first_ns = self._dump_ns
        deltas, infos, dead, gone, seen, opened = self.scan_dump(raw, final_entries, e)
        final.delete_many(gone)
        # Waits in progress handed over (charged to their keys, and to their tasks unless their entries
        # came), and the waits the dump carried on, each charged the time since the last dump.
        open_deltas, self._now = opens.take(opened, self._span_ns, seen, prevs, deltas, self._dump_ns)
        self._ongoing = self._now.ongoing
        self._open_deltas.extend(open_deltas)
        self._ongoing_ns = self._span_ns
        return tuple(deltas), tuple(infos), dead

    def scan_dump(self, raw: bytes, final_entries: list[tuple[bytes, bytes]], e: int, in_c: bool = True):
        """The dump's task entries, then task_final's: each task's delta and its own slots' waits (into
        _slot_deltas), its name where it changed, its process where first seen, its bytes kept for the next dump;
        and the dump's waits in progress (OpenWait fields, unpacked). The deltas, the task infos, the dead tasks,
        their keys, the tasks seen, and those waits. The processes first seen are remembered after the entries
        are read, with their leaders' starts (a thread's entry may come before its leader's). In C where
        analyzer/rowread.c is built (a machine of 5,000 threads waking every 3 s changes 1,700 entries an
        interval); py_scan_dump is the same in Python."""
        if not in_c or _c_scan_dump is None:
            return self.py_scan_dump(raw, final_entries, e)
        opens = self._open
        deltas, infos, dead, gone, seen, found, renamed, opened = _c_scan_dump(
            raw, final_entries, _SCAN_SETUP,
            (self._prev_tasks, opens.handed, opens.carried_ns, self._info, self._leader_start, self._remembered,
             opens.asleep_at_start, not self._index, e, self._slot_deltas))
        if self.symbolizer:
            for tgid, start_ns in renamed:  # see py_scan_dump
                self.symbolizer.process(tgid, start_ns).refresh(force=True)
        self._remember_processes(found)
        return deltas, infos, dead, gone, seen, opened

    def py_scan_dump(self, raw: bytes, final_entries: list[tuple[bytes, bytes]], e: int):
        """scan_dump in Python."""
        live, opened = parse_dump(raw)
        return (*self._scan_entries(live + final_entries, e), opened)

    def _scan_entries(self, entries: list[tuple[bytes, bytes]], e: int):
        deltas, infos, dead, gone = [], [], set(), []
        seen: set[TaskId] = set()
        prevs, opens = self._prev_tasks, self._open
        # Only entries an event changed arrive (dump_tasks skips the others): most of a busy
        # machine's tasks in any one interval are neither read nor decoded.
        key_of, values_of = _TASK_KEY.unpack_from, task_dump.values_of
        found: dict[int, tuple[TaskId, int, int]] = {}  # the processes first seen: tgid -> (task, ptgid, flags)
        for kraw, vraw in entries:
            pid, _pad, start_ns = key_of(kraw)
            values = values_of(vraw)
            tid = TaskId(pid, start_ns)
            seen.add(tid)
            prev = prevs.get(tid)
            opens.settle(tid, prev)
            tgid, flags = values[task_dump.TGID], values[task_dump.FLAGS]
            before = self._info.get(tid)
            now_info = (task_dump.comm_of(values), flags, values[task_dump.POLICY], values[task_dump.NICE],
                        values[task_dump.RT_PRIORITY])
            if before != now_info:
                self._info[tid] = now_info
                infos.append(TaskInfo(tid, tgid, values[task_dump.PTGID], *now_info))
                if before is not None and before[0] != now_info[0] and pid == tgid and self.symbolizer:
                    # the leader's name changed: an exec replaced the image, and maps read before it
                    # (a command is first seen between its fork and its exec) would name nothing
                    self.symbolizer.process(tgid, start_ns).refresh(force=True)
            if pid == tgid:
                self._leader_start[tgid] = start_ns
            if flags & abi.TS_FOUND_BLOCKED and not self._index:  # asleep since before the first dump
                opens.asleep_at_start.add(tid)
            elif opens.asleep_at_start and values[task_dump.OFFCPU_COUNT]:  # that wait ended
                opens.asleep_at_start.discard(tid)
            if tgid not in self._remembered:  # after the loop, its leader's start read: the first dump's parents first
                found.setdefault(tgid, (tid, values[task_dump.PTGID], flags))
            d = task_dump.task_delta(tid, vraw, values, prev, e)
            if d is not None:
                deltas.append(d)
            self._slot_deltas.extend(task_dump.slot_deltas(tid, tgid, vraw, prev, e))
            if flags & abi.TS_DEAD:
                dead.add(tid)
                gone.append(kraw)
                prevs.pop(tid, None)
                self._info.pop(tid, None)
            else:
                prevs[tid] = task_dump.Prev(vraw, list(values))
        self._remember_processes(found)
        return deltas, infos, dead, gone, seen

    def _remember_processes(self, found: dict[int, tuple[TaskId, int, int]]) -> None:
        """The processes a dump first saw (tgid -> (task, ptgid, flags)), remembered, each parent before its
        children (in the dump's order otherwise). One forked while we watched (TS_NEW) takes its parent's maps
        unless it was renamed (an exec). One that was there before the probes attached (the first dump's, or a
        later dump's first sight of a task that had neither switched out nor slept since: hackbench's runnable
        workers at a start, a few hundred) takes its parent's maps when its image is its parent's
        (process_image: no exec since its fork), rather than reading its own."""
        images: dict[int, tuple[int, ...] | None] = {}

        def image(pid: int) -> tuple[int, ...] | None:
            if pid not in images:
                images[pid] = process_image(pid)
            return images[pid]

        left = dict(found)
        while left:
            ready = [tgid for tgid, (_tid, ptgid, _flags) in left.items() if ptgid not in left or ptgid == tgid]
            for tgid in ready or list(left):  # none ready: parents that are each other's (a pid reused)
                tid, ptgid, flags = left.pop(tgid)
                self._remember_process(tid, tgid, ptgid, flags, image)

    def _remember_process(self, tid: TaskId, tgid: int, ptgid: int, flags: int, image=None) -> None:
        """A process first seen: how its user stacks are to be named, and its cgroup. `image`: process_image, kept
        for the parents (_remember_processes)."""
        self._remembered.add(tgid)
        # forked from a process read already, no exec since: its parent's maps are its own. Forked while we
        # watched, and not renamed since; or found running, its image where its parent's is
        forked = ptgid != tgid and ptgid in self._remembered and (
            (self._renames_seen and tid.pid == tgid and flags & abi.TS_NEW and not flags & abi.TS_RENAMED)
            or (image is not None and not flags & abi.TS_NEW and (mine := image(tgid)) is not None
                and mine == image(ptgid)))
        if forked:
            self.symbolizer.remember_fork(tgid, self._leader_start.get(tgid, 0), ptgid, self._leader_start.get(ptgid, 0))
        else:
            self.symbolizer.remember(tgid, self._leader_start.get(tgid, 0))
        path = process_cgroup(tgid)
        if path is not None:
            self._new_cgroups.append((tgid, self._leader_start.get(tgid, 0), path))

    def _forget_dead_processes(self, dead: set[TaskId]) -> None:
        """A drain after the one that read a leader's last entries, what was kept per process goes
        (the symbolizer keeps its maps in its own bounded cache): these would otherwise grow with every
        process the machine ever ran. A pid reused later is a new process."""
        for tid in dead:
            if self._leader_start.get(tid.pid) == tid.start_time_ns:
                del self._leader_start[tid.pid]
                self._remembered.discard(tid.pid)

    def _drain_offcpu(self, obj: BpfObject, dead: set[TaskId]) -> tuple[OffcpuDelta, ...]:
        e = self._numbers.advance(self.obj, 0)  # the interval whose extremes are read now
        out = []
        key_of, val_of = _OFFCPU_KEY.unpack, _OFFCPU_VAL.unpack
        for kraw, vraw, praw in self._offcpu_diff.read(obj.map("offcpu"), dead):
            pid, tgid, start_ns, kstack, ustack, state, why, func = key_of(kraw)
            v = val_of(vraw)
            before = _offcpu_now(val_of(praw)) if praw is not None else _NO_WAITS
            if v[0] != before[0]:
                out.append(_offcpu_delta(TaskId(pid, start_ns), tgid, state, kstack, ustack, why, func, _offcpu_now(v),
                                         before, abi.extremes(v, _IVAL, e)[0]))
        return tuple(out)

    def _drain_wakers(self, obj: BpfObject, dead: set[TaskId]) -> tuple[WakerDelta, ...]:
        out = []
        key_of, val_of = _WAKER_KEY.unpack, _WAKER_VAL.unpack
        for kraw, vraw, praw in self._waker_diff.read(obj.map("wakers"), dead):
            (pid, waker_pid, start_ns, waker_start_ns, waker_kstack, waker_tgid, waker_flags,
             link_func, link_state, link_why, wakee_func, wakee_state, wakee_why) = key_of(kraw)
            count, total_ns, weighted, blocked, runq, waker_comm = val_of(vraw)
            pc, pt, pw, pb, pr = val_of(praw)[:5] if praw is not None else (0, 0, 0, 0, 0)
            if count != pc:
                out.append(_new_waker(TaskId(pid, start_ns), TaskId(waker_pid, waker_start_ns), waker_tgid,
                                      abi.name_text(waker_comm),
                                      waker_kstack, count - pc, total_ns - pt,
                                      bool(waker_flags & abi.WAKER_IN_INTERRUPT),
                                      bool(waker_flags & abi.WAKER_EXITING),
                                      WaitLink(link_func, link_state, link_why), weighted - pw,
                                      blocked - pb, runq - pr, WaitLink(wakee_func, wakee_state, wakee_why)))
        return tuple(out)

    def _read_matrix(self, obj: BpfObject) -> list[int]:
        n = self.nr_cpus
        cells = [0] * (n * n)
        for kraw, vraw in obj.map("migration_matrix").items_batch():
            idx = int.from_bytes(kraw[:4], "little")
            if idx < len(cells):
                cells[idx] = int.from_bytes(vraw[:8], "little")
        return cells

    def _matrix_deltas(self) -> tuple[tuple[int, int, int], ...]:
        """The migrations since the last drain, from the cells read right after the task dump."""
        n, cells = self.nr_cpus, self._matrix_cells
        out = []
        for idx, value in enumerate(cells):
            d = value - self._prev_matrix[idx]
            if d:
                out.append((idx // n, idx % n, d))
        self._prev_matrix = cells
        return tuple(out)

    def _read_runq(self, obj: BpfObject) -> list[tuple[int, int]]:
        """Each possible CPU's run-queue waits so far (bpf/sched.h struct cpu_runq: ns, count)."""
        raw = obj.map("runq_by_cpu").lookup(b"\0\0\0\0", value_size=16 * self.nr_cpus) or b""
        return [(int.from_bytes(raw[i:i + 8], "little"), int.from_bytes(raw[i + 8:i + 16], "little"))
                for i in range(0, len(raw) - 15, 16)]

    def _runq_deltas(self) -> tuple[tuple[int, int, int], ...]:
        """Each CPU's run-queue waits since the last drain, read right after the task dump: (cpu, ns, waits)."""
        now, before = self._runq_cells, self._prev_runq
        self._prev_runq = now
        return tuple((cpu, ns - b[0], n - b[1]) for cpu, ((ns, n), b) in enumerate(zip(now, before)) if n > b[1])

    def _switches(self) -> int:
        assert self.obj is not None
        m = self.obj.map("cs_count")
        raw = m.lookup(b"\0\0\0\0", value_size=8 * self.nr_cpus)
        if raw is None:
            return 0
        return sum(int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8))

    def state_map_fd(self) -> int:
        """The tasks' state (task storage), for the lock and futex objects to read (bpf/sched_state.bpf.h)."""
        return self.obj.map("task_stats").fd if self.obj is not None else -1

    def retune(self, t: Tuning) -> None:
        """The overhead budget's step: the running programs read it from their next event on."""
        if self.obj is not None:
            tune.write(self.obj, tune.of_tuning(t))

    def close(self) -> None:
        if self._stats:
            self._stats.close()
            self._stats = None
        self._close_programs()  # the programs' links first, then the maps they used
        if self.obj:
            self.obj.close()
            self.obj = None



class StackReader:
    """Copies new stacks out of an object's content-addressed stack map and symbolises them."""

    def __init__(self, symbolizer: Symbolizer, max_stacks: int):
        self.symbolizer = symbolizer
        self.max_stacks = max_stacks
        # Ids already copied, in generations that turn over at each trim, so that what is kept stays
        # bounded (processes come and go, and with them their user stacks' ids): `_known` since the
        # last trim, `_old` the generation before (an id used again moves back to `_known`), and
        # `_grace` the ids the last trim dropped, still known for one drain (a wait that reused one
        # between that drain's map reads and the trim's delete is read only now, its stack deleted).
        # An id forgotten and seen again was walked again, so it is in the map: copied and sent once
        # more (the store keeps one copy).
        self._known: set[int] = set()
        self._old: set[int] = set()
        self._grace: set[int] = set()
        self._since_trim = 0

    def known(self, sid: int) -> bool:
        if sid in self._known or sid in self._grace:
            return True
        if sid in self._old:
            self._old.discard(sid)
            self._known.add(sid)
            return True
        return False

    def read(self, m, ids: dict[int, tuple[str, int]], leader_start: dict[int, int]) -> tuple[Stack, ...]:
        """`ids`: stack id -> (kind, tgid for user stacks); ids below STACK_ID_MIN are reasons, not stacks."""
        out = []
        for sid, (kind, tgid) in ids.items():
            if sid < abi.STACK_ID_MIN or self.known(sid):
                continue
            self._known.add(sid)
            raw = m.lookup(sid.to_bytes(8, "little"))
            if raw is None:  # not stored: the stack map was full
                out.append(Stack(sid, kind, (), truncated=True))
                continue
            # the frames end at the first zero: a short walk (a lock's call site, bpf/stacks.bpf.h SITE_DEPTH)
            # leaves an earlier walk's frames after it in the buffer it was copied from
            ips = list(takewhile(bool, abi.decode(abi.Stack, raw).ips))
            truncated = len(ips) >= abi.MAX_STACK_DEPTH
            frames = self.symbolizer.stack(kind, tgid if kind == "user" else 0,
                                           leader_start.get(tgid, 0) if kind == "user" else 0, ips)
            out.append(Stack(sid, kind, tuple(frames), truncated))
        # Content-addressed: once copied, an entry may go; the kernel re-adds a stack
        # only if it is seen again. Trim when half the map's worth was copied since the last trim.
        self._since_trim += len(out)
        if self._since_trim > self.max_stacks // 2:
            m.delete_many([sid.to_bytes(8, "little") for sid in self._known | self._old])
            self._since_trim = 0
            self._grace, self._old, self._known = self._old, self._known, set()
        else:
            self._grace = set()
        return tuple(out)

    def kept(self) -> int:
        """Stack ids remembered (bounded: about two trims' worth, and those in use)."""
        return len(self._known) + len(self._old) + len(self._grace)


def _walks_refused(obj: BpfObject, budget: int = 0) -> int:
    """Stack walks a per-CPU budget refused (bpf/stacks.bpf.h walk_budget[budget].limited: 0 the walks,
    1 the user stacks at a wait's start), all CPUs."""
    try:
        m = obj.map("walk_budget")
    except BpfError:
        return 0
    stride = (m.value_size + 7) & ~7
    raw = m.lookup(budget.to_bytes(4, "little"), value_size=stride * _possible_cpus()) or b""
    return sum(abi.decode(abi.WalkBudget, raw[i:i + stride]).limited for i in range(0, len(raw) - stride + 1, stride))


class HealthDeltas:
    """The .bss loss counters of one object, as deltas per interval."""

    def __init__(self, struct_type, prefix: str = ""):
        self.struct_type = struct_type
        self.prefix = prefix
        self._prev: dict[str, int] = {}

    def drain(self, obj: BpfObject) -> dict[str, int]:
        raw = obj.section_map(".bss").lookup(b"\0\0\0\0")
        if raw is None:
            return {}
        h = abi.decode(self.struct_type, raw)
        now = {self.prefix + name: getattr(h, name) for name, _ in self.struct_type._fields_ if name != "pad"}
        if "stacks_rate_limited" in dict(self.struct_type._fields_):
            now[self.prefix + "stacks_rate_limited"] = _walks_refused(obj)
            refused_user = _walks_refused(obj, 1)
            if refused_user or self.prefix + "user_stacks_rate_limited" in self._prev:
                now[self.prefix + "user_stacks_rate_limited"] = refused_user
        out = {k: v - self._prev.get(k, 0) for k, v in now.items() if v != self._prev.get(k, 0)}
        self._prev = now
        return out


class ProgramDeltas:
    """Each attached program's run count, run time and recursion misses, as deltas per interval."""

    def __init__(self) -> None:
        self._prev: dict[str, tuple[int, int, int]] = {}

    def drain(self, obj: BpfObject) -> tuple[ProgramCost, ...]:
        out = []
        for name in dict.fromkeys(link.name for link in obj.links):  # a program may have a link per CPU
            try:
                s = obj.program(name).stats()
            except BpfError:
                continue
            pc, pt, pr = self._prev.get(s.name, (0, 0, 0))
            out.append(ProgramCost(s.name, s.run_cnt - pc, s.run_time_ns - pt, s.recursion_misses - pr))
            self._prev[s.name] = (s.run_cnt, s.run_time_ns, s.recursion_misses)
        return tuple(out)

def process_cgroup(tgid: int) -> str | None:
    """A process's cgroup: the unified (v2) path, else the v1 cpu controller's; None once it is gone."""
    try:  # hackbench's loop starts 400 processes a second: read in one call, the interpreter's lock released once
        lines = read_whole(f"/proc/{tgid}/cgroup").decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    v1 = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            return path
        if "cpu" in controllers.split(","):
            v1 = path
    return v1


@functools.lru_cache(maxsize=4)
def irqentry_text(kallsyms: str = "/proc/kallsyms") -> tuple[int, int]:
    """Where the kernel's interrupt entry code lies (__irqentry_text_start, __irqentry_text_end), or
    (0, 0) when kallsyms hides the addresses or lacks the symbols."""
    try:
        data = read_whole(kallsyms)  # read whole and searched: a Python loop over its 200,000 lines takes as long again
    except OSError:
        return 0, 0
    found = []
    for name in (b" __irqentry_text_start\n", b" __irqentry_text_end\n"):
        at = data.find(name)
        if at < 0:
            return 0, 0
        line = data[data.rfind(b"\n", 0, at) + 1:at].split()
        try:
            found.append(int(line[0], 16))
        except (IndexError, ValueError):
            return 0, 0
    lo, hi = found
    return (lo, hi) if 0 < lo < hi else (0, 0)


# verified in an object of its own, beside the others (_probe_programs): half of the verifier's time
_VERIFIED_ALONE = frozenset({"sched_switch"})


def _in_thread(fn, name: str) -> Future:
    """fn() run in a thread of its own; its result (or exception) in the Future."""
    out: Future = Future()

    def run() -> None:
        try:
            out.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the result
            out.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return out


def _has_tracepoint(name: str) -> bool:
    """Whether the kernel's BTF has the tracepoint (what tp_btf attaches to); True when there is no BTF to
    read, as the programs' load then tells."""
    names = features.btf_tracepoints()
    return not names or name in names


def _proc_ctxt() -> int:
    """The kernel's context switch count (sum of nr_switches), for comparison with ours."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("ctxt "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _set_migrations_off(obj: BpfObject, off: bool) -> None:
    """Whether migrations are counted (bpf/sched.bpf.c migrations_off); an object without the map (a test's
    stand-in) has nothing to set."""
    try:
        m = obj.map("migrations_off")
    except (BpfError, KeyError):
        return
    m.update(b"\0\0\0\0", (b"\1" if off else b"\0") + b"\0\0\0")


def _thread_size() -> int:
    """THREAD_SIZE: 16 KiB on x86-64 and arm64, doubled under KASAN."""
    try:
        with open("/proc/config.gz", "rb") as f:
            import gzip
            if b"CONFIG_KASAN=y" in gzip.decompress(f.read()):
                return 32768
    except OSError:
        pass
    return 16384


def _own_cpu_ns() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return int((r.ru_utime + r.ru_stime) * 1e9)


def _first_reason(exc: BpfError) -> str:
    """The line of libbpf's log that says why, not the whole verifier dump."""
    for line in exc.log.splitlines():
        low = line.lower()
        if "failed to find" in low or "not found" in low or "invalid" in low or "permission" in low:
            return line.strip()[:200]
    return exc.message
