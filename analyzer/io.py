"""Block I/O per device and operation, iostat's figures from the request tracepoints, and the devices
behind the tasks' I/O waits. Pure functions over the model (the io group's records).

Per device and operation: requests/s and bytes/s, counted as /proc/diskstats counts them; await
(each request's time from its start to its completion, diskstats' own definition) split at the issue
into the time queued (plug, I/O scheduler, waiting for a tag) and the time at the device (the driver
and the device), each as a log2 histogram with p50/p99; the request sizes. Per device: %util (time
with at least one request at the device), the depth (requests at the device: on average over the
window by Little's law, and as each request was issued), and who submitted.

Saturation is judged by where the time goes, not by aqu-sz or %util: a device that serves requests in
parallel (NVMe, multi-queue virtio) is 100% "utilised" with one request in flight and can take many
more. Requests that wait in the queue about as long as the device takes to serve them say the device
(or the queue depth it is given) is the bottleneck; requests that hardly wait, whatever %util says,
say it is not.

iostat's `svctm` is not computed: sysstat dropped it as meaningless on devices that serve requests
in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stallscope.analyzer.attribution import attribute_strata
from stallscope.analyzer.blockers import percentiles
from stallscope.analyzer.causes import CauseTable
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import IO_OPS, IoDelta, TaskId

SECTOR = 512
# saturation verdicts
SATURATED, QUEUEING, NOT_SATURATED, IDLE_DEVICE = "saturated", "queueing", "not saturated", "idle"
SATURATED_RATIO = 1.0  # queued at least as long as served: the queue, not the device's speed, sets the latency
QUEUEING_RATIO = 0.25  # a quarter of the service time spent queued: queueing has begun
MIN_QUEUED_NS = 50_000  # ... and enough to matter (a few us of plug and dispatch is not a queue)


def device_dev_text(dev: int) -> str:
    """`MAJOR:MINOR` of a dev_t in the kernel's encoding (MAJOR << 20 | MINOR)."""
    return f"{dev >> 20}:{dev & 0xFFFFF}"


def devices_described(model: Model) -> dict[str, dict]:
    """The block devices the recording described when it started (sysfs), by name."""
    return ((model.meta.options or {}).get("io") or {}).get("devices") or {}


def bios_counted(model: Model) -> bool:
    """Whether the recording counted the bios of bio-based devices (the bio tracepoints were attached)."""
    return bool(((model.meta.options or {}).get("io") or {}).get("bio_event"))


def device_names(model: Model) -> dict[int, str]:
    """dev -> the disk's name: as the probe read it (gendisk), else as sysfs listed it at start."""
    names = {d["dev"]: name for name, d in devices_described(model).items() if isinstance(d, dict) and "dev" in d}
    names.update({dev: q.name for dev, q in model.io_queue.items() if q.name})
    return names


def device_name(model: Model, dev: int, names: dict[int, str] | None = None) -> str:
    return (names if names is not None else device_names(model)).get(dev) or device_dev_text(dev)


def _hist_dict(hist: tuple[tuple[int, int], ...]) -> dict[int, int]:
    return {s: c for s, c in hist if c}


@dataclass(frozen=True)
class Latency:
    """Times of one kind over a set of requests: average and log2-bucket percentiles (upper bounds)."""

    count: int
    avg_ns: float
    p50_ns: int = 0
    p99_ns: int = 0
    hist: dict = field(default_factory=dict)  # log2(ns) slot -> requests

    @classmethod
    def of(cls, count: int, total_ns: int, hist: tuple[tuple[int, int], ...]) -> "Latency":
        h = _hist_dict(hist)
        p = percentiles(h, 0, (0.5, 0.99))
        return cls(count, total_ns / count if count else 0.0, p.get("p50_ns", 0), p.get("p99_ns", 0), h)


@dataclass(frozen=True)
class IoOpRow:
    """One device's requests of one operation group over the window."""

    dev: int
    device: str
    op: str  # read, write, discard, flush
    requests: int
    requests_per_s: float
    bytes: int  # as diskstats counts sectors (x 512)
    bytes_per_s: float
    await_: Latency  # start to completion: diskstats' time, of every request counted
    queued: Latency  # start to issue, of the requests seen at their issue
    device_time: Latency  # issue to completion
    timed: int
    avg_size: float  # bytes, of the timed requests
    size_hist: dict  # log2(bytes) slot -> requests
    unaccounted: int  # completions the kernel does not count (passthrough, iostats off)


@dataclass(frozen=True)
class Submitter:
    tgid: int
    comm: str
    requests: int
    bytes: int


@dataclass(frozen=True)
class Saturation:
    verdict: str  # SATURATED, QUEUEING, NOT_SATURATED, IDLE_DEVICE
    queued_avg_ns: float
    device_avg_ns: float
    reason: str

    @property
    def ratio(self) -> float | None:
        return self.queued_avg_ns / self.device_avg_ns if self.device_avg_ns else None


@dataclass(frozen=True)
class IoDeviceRow:
    """One device over the window."""

    dev: int
    name: str
    ops: tuple[IoOpRow, ...]
    requests_per_s: float
    bytes_per_s: float
    util_pct: float | None  # time with a request at the device; None when not measured (no issue seen)
    avg_inflight: float  # requests at the device on average (sum of device time / window: Little's law)
    depth_at_issue_avg: float  # requests at the device just after each issue, averaged
    depth_p99: int  # ... its 99th percentile (log2 bucket upper bound)
    depth_hist: dict
    saturation: Saturation
    submitters: tuple[Submitter, ...]
    queue: dict  # sysfs queue settings when the recording started
    requests_based: bool = True
    io_wait_ns: int = 0  # time tasks in I/O wait waited for completions of this device
    io_waits: int = 0


def _op_row(d: IoDelta, name: str, secs: float) -> IoOpRow:
    total_bytes = d.sectors * SECTOR
    return IoOpRow(d.dev, name, IO_OPS[d.op] if 0 <= d.op < len(IO_OPS) else str(d.op), d.requests,
                   d.requests / secs, total_bytes, total_bytes / secs,
                   Latency.of(d.requests, d.total_ns, d.total_hist), Latency.of(d.timed, d.queued_ns, d.queued_hist),
                   Latency.of(d.timed, d.device_ns, d.device_hist), d.timed, d.bytes / d.timed if d.timed else 0.0,
                   _hist_dict(d.size_hist), d.unaccounted)


def saturation(queued_ns: int, device_ns: int, timed: int) -> Saturation:
    """Where the requests' time went: queued against at the device."""
    if not timed:
        return Saturation(IDLE_DEVICE, 0.0, 0.0, "no request issued in the window")
    q, d = queued_ns / timed, device_ns / timed
    ratio = q / d if d else float("inf")
    if q >= MIN_QUEUED_NS and ratio >= SATURATED_RATIO:
        return Saturation(SATURATED, q, d, f"requests waited {ratio:.1f} times as long in the queue as at the device: "
                                           "the device (or the depth it is given) is the bottleneck")
    if q >= MIN_QUEUED_NS and ratio >= QUEUEING_RATIO:
        return Saturation(QUEUEING, q, d, f"requests spent {100 * q / (q + d):.0f}% of their time queued")
    return Saturation(NOT_SATURATED, q, d, "requests hardly waited in the queue: the device kept up, whatever %util says")


def _depth_p99(hist: dict[int, int]) -> int:
    """The 99th percentile of a log2 histogram of depths, as its bucket's largest depth."""
    total = sum(hist.values())
    seen = 0
    for slot in sorted(hist):
        seen += hist[slot]
        if seen >= 0.99 * total:
            return (1 << (slot + 1)) - 1
    return 0


def _wait_totals(model: Model, tasks: set[TaskId] | None) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for w in model.io_wakes:
        if tasks is None or w.task in tasks:
            e = out.setdefault(w.dev, [0, 0])
            e[0] += w.wait_ns
            e[1] += w.count
    return out


def io_table(model: Model, tasks: set[TaskId] | None = None) -> list[IoDeviceRow]:
    """Every device with requests in the window, busiest first (by requests/s). Device figures are the
    whole device's, whoever submitted; `tasks` only chooses whose I/O waits are summed."""
    secs = model.duration_s or 1.0
    names = device_names(model)
    described = devices_described(model)
    by_dev: dict[int, list[IoDelta]] = {}
    for d in model.io:
        by_dev.setdefault(d.dev, []).append(d)
    subs: dict[int, list[Submitter]] = {}
    for s in model.io_submitters:
        if s.requests or s.sectors:
            subs.setdefault(s.dev, []).append(Submitter(s.tgid, s.comm, s.requests, s.sectors * SECTOR))
    waits = _wait_totals(model, tasks)
    rows = []
    for dev in sorted(set(by_dev) | set(model.io_queue)):
        name = device_name(model, dev, names)
        ops = tuple(sorted((_op_row(d, name, secs) for d in by_dev.get(dev, ())), key=lambda r: IO_OPS.index(r.op)
                           if r.op in IO_OPS else 9))
        q = model.io_queue.get(dev)
        timed = sum(d.timed for d in by_dev.get(dev, ()))
        queued = sum(d.queued_ns for d in by_dev.get(dev, ()))
        device_ns = sum(d.device_ns for d in by_dev.get(dev, ()))
        depth = _hist_dict(q.depth_hist) if q else {}
        merged: dict[tuple[int, str], list[int]] = {}
        for s in subs.get(dev, ()):
            e = merged.setdefault((s.tgid, s.comm), [0, 0])
            e[0] += s.requests
            e[1] += s.bytes
        submitters = tuple(sorted((Submitter(t, c, r, b) for (t, c), (r, b) in merged.items()),
                                  key=lambda s: (-s.requests, -s.bytes, s.tgid)))
        info = described.get(name) or {}
        w = waits.get(dev, [0, 0])
        rows.append(IoDeviceRow(
            dev, name, ops, sum(o.requests for o in ops) / secs, sum(o.bytes for o in ops) / secs,
            min(100.0, 100.0 * q.busy_ns / (secs * 1e9)) if q and q.issued else None,
            device_ns / (secs * 1e9), q.depth_sum / q.issued if q and q.issued else 0.0,
            _depth_p99(depth),
            depth, saturation(queued, device_ns, timed), submitters, dict(info.get("queue") or {}),
            bool(info.get("requests", True)), w[0], w[1]))
    rows.sort(key=lambda r: (-r.requests_per_s, r.name))
    return rows


@dataclass(frozen=True)
class CauseDevice:
    """The part of one cause's waits ended by one device's completions (tied at the wakeup)."""

    dev: int
    device: str
    op: str
    wait_ns: float  # the tasks' blocked time these completions ended, shared into the cause by its stratum
    count: float
    request_avg_ns: float  # the waking requests' own latency, averaged
    queued_avg_ns: float  # ... its parts, of the requests seen at their issue
    device_avg_ns: float
    submitters: tuple[str, ...]  # `comm[tgid]` of the processes that submitted the waking requests


def _func_name(model: Model, addr: int) -> str:
    return model.functions.get(addr, f"{addr:#x}") if addr else ""


def cause_devices(model: Model, tasks: set[TaskId] | None = None,
                  table: CauseTable | None = None) -> dict[str, list[CauseDevice]]:
    """For each cause, the devices whose completions ended its waits, heaviest first. A wait is tied
    to a device at its wakeup; its time joins the causes of the wait's stratum (the task doing one
    thing: state, system call, file kind, kernel function) in proportion to each cause's share of it."""
    if not model.io_wakes:
        return {}
    strata = attribute_strata(model, tasks, table)
    names = device_names(model)
    acc: dict[tuple[str, int, int], list] = {}
    for w in model.io_wakes:
        if tasks is not None and w.task not in tasks:
            continue
        parts = strata.get((w.task, w.wakee.state, w.wakee.why, _func_name(model, w.wakee.func)))
        if not parts:
            continue
        total = sum(p.ns for p in parts.values())
        if total <= 0:
            continue
        for cause, p in parts.items():
            share = p.ns / total
            if share <= 0:
                continue
            e = acc.setdefault((cause, w.dev, w.op), [0.0, 0.0, 0, 0, 0, 0, 0, {}])
            e[0] += w.wait_ns * share
            e[1] += w.count * share
            e[2] += w.count
            e[3] += w.req_ns
            e[4] += w.timed
            e[5] += w.queued_ns
            e[6] += w.device_ns
            label = f"{w.submit_comm}[{w.submit_tgid}]" if w.submit_tgid else "(not seen: began before the recording)"
            e[7][label] = e[7].get(label, 0) + w.count
    out: dict[str, list[CauseDevice]] = {}
    for (cause, dev, op), e in acc.items():
        n, timed = e[2] or 1, e[4] or 1
        subs = tuple(k for k, _ in sorted(e[7].items(), key=lambda kv: (-kv[1], kv[0])))
        out.setdefault(cause, []).append(CauseDevice(
            dev, device_name(model, dev, names), IO_OPS[op] if 0 <= op < len(IO_OPS) else str(op), e[0], e[1],
            e[3] / n, e[5] / timed, e[6] / timed, subs))
    for rows in out.values():
        rows.sort(key=lambda r: (-r.wait_ns, r.device, r.op))
    return out


def bio_based(devices: dict[str, dict]) -> list[str]:
    """The devices the recording described as bio-based: no requests; counted per bio where the kernel
    has the bio tracepoints (`meta.options.io.bio_event`), else not seen at all."""
    return [name for name, d in sorted(devices.items()) if isinstance(d, dict) and not d.get("requests", True)]


def probe_ran(model: Model) -> bool:
    st = model.meta.probes.get("io")
    return bool(st and st.enabled)
