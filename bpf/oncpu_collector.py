"""The on-CPU sampling collector: one software cpu-clock perf event per online
CPU (perf_event_open(2) through ctypes) runs oncpu.bpf.o's program, which
counts samples per (thread, kernel stack, user stack) in the kernel. Each
interval drains the cumulative counts into deltas, with each CPU's totals and
the time its event counted, so a lost sample shows.

A kernel or VM without the event, a sampling rate above the kernel's limit, or
a load failure turns the group off with the reason; the other probes go on.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import struct

from stallscope.analyzer.sample import CpuSamplesDelta, OncpuDelta, ProbeStatus, TaskId, Tuning
from stallscope.analyzer.symbols import Symbolizer
from stallscope.bpf import abi
from stallscope.bpf.collector import (
    HealthDeltas, ProgramDeltas, StackReader, _possible_cpus, object_path,
)
from stallscope.bpf.groups import GroupDrain
from stallscope.bpf.libbpf import BpfObject
from stallscope.bpf.mapdiff import MapDiff, identity
from stallscope.bpf.sizing import DEFAULT_SIZES, MapSizes
from stallscope.errors import StallscopeError

_SAMPLES = struct.Struct("<QQ")  # an oncpu_val's samples and period_ns, first

DEFAULT_SAMPLE_HZ = 99  # not a divisor of the 100/250/1000 Hz tick: samples do not beat with it

PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_FLAG_FD_CLOEXEC = 8
PERF_ATTR_SIZE_VER0 = 64
_ATTR_DISABLED = 1 << 0
_ATTR_FREQ = 1 << 10
_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331, "riscv64": 241}


class PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr up to config1 (PERF_ATTR_SIZE_VER0): all a sampling event needs."""

    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_freq", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64)]


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.syscall.restype = ctypes.c_long


def open_cpu_clock(cpu: int, sample_hz: int) -> int:
    """A disabled cpu-clock sampling event on `cpu` for every task (pid -1); raises OSError."""
    nr = _PERF_EVENT_OPEN.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"perf_event_open number unknown on {platform.machine()}")
    attr = PerfEventAttr(type=PERF_TYPE_SOFTWARE, size=PERF_ATTR_SIZE_VER0, config=PERF_COUNT_SW_CPU_CLOCK,
                         sample_freq=sample_hz, flags=_ATTR_DISABLED | _ATTR_FREQ)
    fd = _libc.syscall(ctypes.c_long(nr), ctypes.byref(attr), ctypes.c_int(-1), ctypes.c_int(cpu),
                       ctypes.c_int(-1), ctypes.c_ulong(PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def online_cpus() -> list[int]:
    """CPUs in /sys/devices/system/cpu/online ("0-3,5")."""
    try:
        text = open("/sys/devices/system/cpu/online").read().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def max_sample_hz() -> int | None:
    """kernel.perf_event_max_sample_rate: the kernel refuses a higher frequency (and lowers it
    itself when sampling takes too long)."""
    try:
        return int(open("/proc/sys/kernel/perf_event_max_sample_rate").read())
    except (OSError, ValueError):
        return None


def _open_error(exc: OSError, sample_hz: int) -> str:
    if exc.errno in (errno.ENOENT, errno.ENODEV, errno.EOPNOTSUPP):
        return f"no software cpu-clock perf event here ({exc.strerror})"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "perf_event_open not permitted: needs CAP_PERFMON (or root), see kernel.perf_event_paranoid"
    if exc.errno == errno.EINVAL:
        limit = max_sample_hz()
        if limit is not None and sample_hz > limit:
            return f"--sample-hz {sample_hz} is above kernel.perf_event_max_sample_rate ({limit})"
    return f"perf_event_open: {exc.strerror}"


class OncpuCollector:
    def __init__(self, symbolizer: Symbolizer, targ_tgid: int = 0, sample_hz: int = DEFAULT_SAMPLE_HZ,
                 user_stacks: bool = True, kernel_stacks: bool = True, max_stacks: int = DEFAULT_SIZES.stack_entries,
                 max_tasks: int = DEFAULT_SIZES.tasks):
        self.targ_tgid = targ_tgid
        self.sample_hz = sample_hz
        self.user_stacks = user_stacks
        self.kernel_stacks = kernel_stacks
        self.max_stacks = max_stacks
        self.sizes = MapSizes(max_tasks, max_stacks)
        self.obj: BpfObject | None = None
        self.cpus: list[int] = []
        self._fds: dict[int, int] = {}  # cpu -> perf event fd (owned by its link once attached)
        self._links: dict = {}  # cpu -> the link of that event
        self._event_base: dict[int, int] = {}  # cpu -> ns counted by the events a retune replaced
        self._stacks = StackReader(symbolizer, max_stacks)
        self._health = HealthDeltas(abi.OncpuHealth, prefix="oncpu.")
        self._programs = ProgramDeltas()
        self._diff = MapDiff.of(abi.OncpuKey, abi.OncpuVal, (identity(abi.OncpuKey),))  # bpf/mapdiff.py
        self._dead_before: set[TaskId] = set()
        self._prev_cpu: dict[int, tuple[int, int, int, int, int]] = {}
        self._leader_start: dict[int, int] = {}

    def start(self) -> ProbeStatus:
        """Open the events, load, attach; never raises for a kernel that cannot: the status says why."""
        cpus = online_cpus()
        fds: dict[int, int] = {}
        try:
            for cpu in cpus:
                fds[cpu] = open_cpu_clock(cpu, self.sample_hz)
        except OSError as exc:
            for fd in fds.values():
                os.close(fd)
            return ProbeStatus(False, "", _open_error(exc, self.sample_hz))
        obj = None
        try:
            obj = BpfObject(object_path("oncpu.bpf.o"))
            cfg = abi.OncpuConfig(targ_tgid=self.targ_tgid, user_stacks=int(self.user_stacks),
                                  kernel_stacks=int(self.kernel_stacks))
            image = obj.section_map(".rodata").initial_value()
            ctypes.memmove(image, ctypes.addressof(cfg), ctypes.sizeof(cfg))
            obj.map("stacks").set_max_entries(self.max_stacks)
            obj.map("oncpu").set_max_entries(self.sizes.oncpu)
            obj.load()
            prog = obj.program("oncpu_sample")
            for cpu in cpus:
                # libbpf owns the event fd from here: destroying the link disables and closes it
                link = prog.attach_perf_event(fds[cpu])
                obj.links.append(link)
                self._links[cpu] = link
                self._fds[cpu] = fds.pop(cpu)
        except StallscopeError as exc:  # a BpfError, or the object missing: this group off, not the session
            for fd in fds.values():  # the ones not attached; the links close the others
                os.close(fd)
            if obj is not None:
                obj.close()
            self._fds = {}
            return ProbeStatus(False, "", exc.message)
        self.obj, self.cpus = obj, cpus
        return ProbeStatus(True, "perf_event")

    def drain(self, dead: set[TaskId]) -> GroupDrain:
        """Deltas since the last drain; entries of threads that died are read one last time and dropped."""
        assert self.obj is not None
        cpus = self._drain_cpus()
        out, ids = [], {}
        for kraw, vraw, praw in self._diff.read(self.obj.map("oncpu"), dead):
            k = abi.decode(abi.OncpuKey, kraw)
            v = abi.decode(abi.OncpuVal, vraw)
            ps, pp = _SAMPLES.unpack_from(praw) if praw is not None else (0, 0)
            tid = TaskId(k.pid, k.start_ns)
            if k.pid == k.tgid:
                self._leader_start[k.tgid] = k.start_ns
            if v.samples != ps:
                out.append(OncpuDelta(tid, k.tgid, v.comm.decode(errors="replace"), k.kstack, k.ustack,
                                      v.samples - ps, v.period_ns - pp))
                ids.setdefault(k.kstack, ("kernel", 0))
                ids.setdefault(k.ustack, ("user", k.tgid))
        stacks = self._stacks.read(self.obj.map("stacks"), ids, self._leader_start)
        # a leader dead since the drain before this one: its threads' last samples have been read
        for tid in self._dead_before:
            if self._leader_start.get(tid.pid) == tid.start_time_ns:
                del self._leader_start[tid.pid]
        self._dead_before = dead
        return GroupDrain({"oncpu": tuple(out), "oncpu_cpus": cpus}, stacks, self._health.drain(self.obj),
                          self._programs.drain(self.obj))

    def _drain_cpus(self) -> tuple[CpuSamplesDelta, ...]:
        m = self.obj.map("cpu_samples")
        size = ctypes.sizeof(abi.OncpuCpu)
        stride = (size + 7) // 8 * 8  # per-CPU values are copied out 8-byte aligned, one per possible CPU
        raw = m.lookup(b"\0\0\0\0", value_size=stride * _possible_cpus()) or b""
        out = []
        for cpu in self.cpus:
            chunk = raw[cpu * stride:cpu * stride + size]
            if len(chunk) < size:
                continue
            c = abi.decode(abi.OncpuCpu, chunk)
            event_ns = self._event_ns(cpu)
            now = (c.samples, c.period_ns, c.idle_samples, c.idle_ns, event_ns)
            prev = self._prev_cpu.get(cpu, (0, 0, 0, 0, 0))
            self._prev_cpu[cpu] = now
            d = tuple(a - b for a, b in zip(now, prev))
            if any(d):
                out.append(CpuSamplesDelta(cpu, *d))
        return tuple(out)

    def _event_ns(self, cpu: int) -> int:
        """What the CPU's cpu-clock event counted since it was enabled, in ns."""
        fd = self._fds.get(cpu)
        if fd is None:
            return 0
        try:
            return self._event_base.get(cpu, 0) + int.from_bytes(os.read(fd, 8), "little")
        except OSError:
            return 0

    def retune(self, t: Tuning) -> None:
        """The overhead budget's step: the sampling frequency. Each CPU's event is opened anew at the
        new frequency and attached before the old one is dropped (changing a frequency-mode event in
        place with PERF_EVENT_IOC_PERIOD restarts it with a spent period: a burst of samples). Each
        sample keeps its own period, so time estimates stay right across the change."""
        if t.sample_hz == self.sample_hz or self.obj is None:
            return
        prog = self.obj.program("oncpu_sample")
        for cpu in list(self._fds):
            try:
                fd = open_cpu_clock(cpu, t.sample_hz)
            except OSError:
                continue  # this CPU keeps its rate
            try:
                link = prog.attach_perf_event(fd)
            except StallscopeError:
                os.close(fd)
                continue
            old = self._links.get(cpu)
            self._event_base[cpu] = self._event_ns(cpu)  # what the old event counted goes on
            self._links[cpu], self._fds[cpu] = link, fd
            self.obj.links.append(link)
            if old is not None:
                old.destroy()  # disables and closes the old event
        self.sample_hz = t.sample_hz

    def close(self) -> None:
        if self.obj:
            self.obj.close()  # destroys the links, which disable and close the events
            self.obj = None
        self._fds = {}
        self._links = {}


