"""The block I/O collector: loads io.bpf.o and drains, once per interval, each request-based
device's requests per operation group (counted as /proc/diskstats counts them, with their time
split at the issue into queued and at the device), the device's busy time and depth, who submitted,
and which device's completions ended the waits of tasks blocked in I/O.

A kernel without the block request tracepoints turns the group off with the reason. Bio-based
devices (dm, md, zram) make no requests: the status names them.
"""

from __future__ import annotations

import ctypes
import os

from stallscope.analyzer.sample import (
    IoDelta, IoQueueDelta, IoSubmitDelta, IoWakeDelta, ProbeStatus, TaskId, WaitLink,
)
from stallscope.bpf import abi, blockdev, features
from stallscope.bpf.collector import (
    HealthDeltas, ProgramDeltas, _possible_cpus, _thread_size, object_path,
)
from stallscope.bpf.groups import GroupDrain
from stallscope.bpf.libbpf import BpfError, BpfObject
from stallscope.bpf.mapdiff import MapDiff, identity

NEEDED = ("block:block_rq_issue", "block:block_rq_complete", "block:block_rq_requeue")
WAKE_WINDOW_NS = 500_000  # a wakeup this soon after a completion on the same stack is taken as its
_HISTS = ("size_hist", "total_hist", "queued_hist", "device_hist")
_HIST_SLOTS = (abi.IO_SIZE_SLOTS, abi.IO_TIME_SLOTS, abi.IO_TIME_SLOTS, abi.IO_TIME_SLOTS)
_SUMS = ("requests", "sectors", "total_ns", "timed", "queued_ns", "device_ns", "bytes", "unaccounted")
_WAKE_KEY, _WAKE_VAL = abi.unpacker(abi.IoWakeKey), abi.unpacker(abi.IoWakeVal)


def _slot_size(struct_type) -> int:
    """A per-CPU map's value: one 8-byte aligned slot per possible CPU."""
    n = ctypes.sizeof(struct_type)
    return n + (-n) % 8


def _hist_delta(now: list[int], before: list[int] | None) -> tuple[tuple[int, int], ...]:
    if before is None:
        return tuple((s, n) for s, n in enumerate(now) if n)
    return tuple((s, n - b) for s, (n, b) in enumerate(zip(now, before)) if n != b)


def diskstats_ios(path: str = "/proc/diskstats") -> dict[int, int]:
    """Each device's completed requests as the kernel counts them (reads, writes, discards and flushes),
    by dev_t in the kernel's encoding."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                v = line.split()
                if len(v) < 14:
                    continue
                ios = int(v[3]) + int(v[7]) + (int(v[14]) if len(v) > 17 else 0) + (int(v[18]) if len(v) > 19 else 0)
                out[blockdev.kernel_dev(int(v[0]), int(v[1]))] = ios
    except (OSError, ValueError):
        pass
    return out


def bio_note(devices: dict[str, dict], bios_seen: bool = False) -> str:
    bio = blockdev.bio_based(devices)
    if not bio:
        return ""
    if bios_seen:
        return (f"bio-based devices make no requests: {', '.join(bio)} counted per bio (block_bio_queue to "
                "block_bio_complete), as their drivers account bios")
    return (f"bio-based devices make no requests, so the request tracepoints never fire for them: "
            f"{', '.join(bio)} (their I/O is counted on the devices beneath, if any)")


class IoCollector:
    def __init__(self, targ_tgid: int = 0, sched_state_fd: int = -1):
        self.targ_tgid = targ_tgid
        self.sched_state_fd = sched_state_fd
        self.obj: BpfObject | None = None
        self.nr_cpus = _possible_cpus()
        self.submitter_event = ""
        self.end_event = ""
        self.bio_event = ""
        self.devices: dict[str, dict] = {}
        self._health = HealthDeltas(abi.IoHealth, prefix="io.")
        self._programs = ProgramDeltas()
        self._prev_stats: dict[bytes, tuple[list[int], list[list[int]]]] = {}
        self._prev_devices: dict[int, tuple[int, int, int, list[int]]] = {}
        self._prev_submit: dict[bytes, tuple[int, int]] = {}
        self._wakes_diff = MapDiff.of(abi.IoWakeKey, abi.IoWakeVal, (identity(abi.IoWakeKey),))  # bpf/mapdiff.py
        self._kernel_base: dict[int, int] = {}  # /proc/diskstats' requests per device when the probe attached
        self._lost: dict[int, int] = {}  # completions the kernel counted and the probe never saw, reported

    def start(self) -> ProbeStatus:
        """Load and attach; never raises for a kernel that cannot: the status says why."""
        tps = features.tracepoints()
        missing = [n for n in NEEDED if not tps.get(n, features.Check(False)).ok]
        if missing:
            return ProbeStatus(False, "", f"no {', '.join(missing)} tracepoint in this kernel")
        # the submitter: where a request begins (6.5+), else where it enters the scheduler or plug
        start_ok = tps.get("block:block_io_start", features.Check(False)).ok
        self.submitter_event = "block_io_start" if start_ok else "block_rq_insert"
        # where a request's end is counted: block_io_done (6.5+), where the kernel counts it, else its completion
        done_ok = tps.get("block:block_io_done", features.Check(False)).ok
        self.end_event = "block_io_done" if done_ok else "block_rq_complete"
        obj = None
        try:
            obj = BpfObject(object_path("io.bpf.o"))
            cfg = abi.IoConfig(targ_tgid=self.targ_tgid, self_tgid=os.getpid(), wake_window_ns=WAKE_WINDOW_NS,
                               has_sched_state=int(self.sched_state_fd >= 0), thread_size=_thread_size(),
                               has_io_done=int(done_ok))
            image = obj.section_map(".rodata").initial_value()
            ctypes.memmove(image, ctypes.addressof(cfg), ctypes.sizeof(cfg))
            if self.sched_state_fd >= 0:
                obj.map("task_stats").reuse_fd(self.sched_state_fd)
            skip = "block_rq_insert" if start_ok else "block_io_start"
            skipped = {skip} if done_ok else {skip, "block_io_done"}
            # bio-based devices (dm, md, zram): their bios, where the kernel has the bio tracepoints
            self.bio_event = "block_bio_queue/complete" if all(
                tps.get(f"block:{n}", features.Check(False)).ok for n in ("block_bio_queue", "block_bio_complete")) else ""
            if not self.bio_event:
                skipped |= {"block_bio_queue", "block_bio_complete"}
            for name in skipped:
                obj.program(name).autoload = False
            obj.load()
            for prog in obj.programs():
                if prog.name not in skipped:
                    obj.attach(prog)
        except BpfError as exc:
            if obj is not None:
                obj.close()
            return ProbeStatus(False, "", exc.message)
        self.obj = obj
        self._kernel_base = diskstats_ios()
        self.devices = blockdev.describe()
        notes = [f"submitter from {self.submitter_event}", f"requests counted at {self.end_event}"]
        if self.sched_state_fd < 0:
            notes.append("without the scheduler's task state: I/O waits are tied to devices without their length")
        note = bio_note(self.devices, bool(self.bio_event))
        if note:
            notes.append(note)
        return ProbeStatus(True, "tp_btf", "; ".join(notes))

    def meta_options(self) -> dict:
        """What the recording keeps about the machine's block devices, beside the records."""
        return {"devices": self.devices, "submitter_event": self.submitter_event, "end_event": self.end_event,
                "bio_event": self.bio_event,
                "wake_window_ns": WAKE_WINDOW_NS}

    def drain(self, dead: set[TaskId]) -> GroupDrain:
        assert self.obj is not None
        kernel = diskstats_ios()  # first: every completion it counts has passed the tracepoint already
        stats = self._drain_stats()
        health = self._health.drain(self.obj)
        lost = self._completions_lost(kernel)
        if lost:
            health["io.completions_lost"] = lost
        return GroupDrain({"io": stats, "io_queue": self._drain_devices(),
                           "io_submitters": self._drain_submitters(), "io_wakes": self._drain_wakes(dead)},
                          (), health, self._programs.drain(self.obj))

    def _completions_lost(self, kernel: dict[int, int]) -> int:
        """Completions /proc/diskstats counted since the probe attached that the probe never saw (the
        kernel, now and then, does not run a tracepoint's BPF program for an event, without counting a
        recursion miss: seen here as a few requests in thousands on a loaded machine). The kernel counts a
        request after its tracepoint, and its counts are read before the probe's: the probe is never
        behind for timing, so a gap is a loss. Lost data is never silent: the new part of the gap is
        reported."""
        ours: dict[int, int] = {}
        for kraw, (sums, _h) in self._prev_stats.items():
            dev = int.from_bytes(kraw[:4], "little")
            ours[dev] = ours.get(dev, 0) + sums[0]
        new = 0
        for dev, counted in ours.items():
            if dev not in kernel or dev not in self._kernel_base:
                continue
            gap = kernel[dev] - self._kernel_base[dev] - counted
            if gap > self._lost.get(dev, 0):
                new += gap - self._lost.get(dev, 0)
                self._lost[dev] = gap
        return new

    def _drain_stats(self) -> tuple[IoDelta, ...]:
        slot = _slot_size(abi.IoStats)
        out = []
        for kraw, vraw in self.obj.map("stats").items_batch(value_size=slot * self.nr_cpus):
            k = abi.decode(abi.IoKey, kraw)
            sums = [0] * len(_SUMS)
            hists = [[0] * n for n in _HIST_SLOTS]
            for cpu in range(self.nr_cpus):
                v = abi.decode(abi.IoStats, vraw[cpu * slot:(cpu + 1) * slot])
                for i, name in enumerate(_SUMS):
                    sums[i] += getattr(v, name)
                for i, name in enumerate(_HISTS):
                    h = getattr(v, name)
                    acc = hists[i]
                    for s in range(len(acc)):
                        acc[s] += h[s]
            prev = self._prev_stats.get(kraw)
            psums, phists = prev if prev is not None else ([0] * len(_SUMS), None)
            delta = [a - b for a, b in zip(sums, psums)]
            if any(delta):
                out.append(IoDelta(k.dev, k.op, *delta,
                                   **{h: _hist_delta(hists[i], phists[i] if phists else None)
                                      for i, h in enumerate(_HISTS)}))
            self._prev_stats[kraw] = (sums, hists)
        return tuple(out)

    def _drain_devices(self) -> tuple[IoQueueDelta, ...]:
        out = []
        for kraw, vraw in self.obj.map("devices").items_batch():
            dev = int.from_bytes(kraw[:4], "little")
            v = abi.decode(abi.IoDevice, vraw)
            hist = v.depth_hist[:]
            prev = self._prev_devices.get(dev)
            pi, pb, pd, ph = prev if prev is not None else (0, 0, 0, None)
            if v.issued != pi or v.busy_ns != pb or v.inflight:
                out.append(IoQueueDelta(dev, abi.c_string(v.name), v.issued - pi, v.busy_ns - pb, v.depth_sum - pd,
                                        _hist_delta(hist, ph), max(v.inflight, 0)))
            self._prev_devices[dev] = (v.issued, v.busy_ns, v.depth_sum, hist)
        return tuple(out)

    def _drain_submitters(self) -> tuple[IoSubmitDelta, ...]:
        out = []
        for kraw, vraw in self.obj.map("submitters").items_batch():
            k = abi.decode(abi.IoSubmitKey, kraw)
            v = abi.decode(abi.IoSubmitVal, vraw)
            pr, ps = self._prev_submit.get(kraw, (0, 0))
            if v.requests != pr or v.sectors != ps:
                out.append(IoSubmitDelta(k.dev, k.op, k.tgid, abi.c_string(v.comm), v.requests - pr, v.sectors - ps))
            self._prev_submit[kraw] = (v.requests, v.sectors)
        return tuple(out)

    def _drain_wakes(self, dead: set[TaskId]) -> tuple[IoWakeDelta, ...]:
        out = []
        for kraw, vraw, praw in self._wakes_diff.read(self.obj.map("wakes"), dead):
            pid, tgid, start_ns, dev, op, submit_tgid, state, func, why, _ = _WAKE_KEY.unpack(kraw)
            count, wait, req, timed, queued, device, comm = _WAKE_VAL.unpack(vraw)
            pc, pw, pr, pt, pq, pd = _WAKE_VAL.unpack(praw)[:6] if praw is not None else (0, 0, 0, 0, 0, 0)
            if count != pc:
                out.append(IoWakeDelta(TaskId(pid, start_ns), tgid, dev, op, submit_tgid, abi.c_string(comm),
                                       WaitLink(func, state, why), count - pc, wait - pw, req - pr, timed - pt,
                                       queued - pq, device - pd))
        return tuple(out)

    def close(self) -> None:
        if self.obj:
            self.obj.close()
            self.obj = None
