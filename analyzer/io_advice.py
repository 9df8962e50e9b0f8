"""I/O advice from the io group's records (the seed on I/O: request size against what the device takes,
the queue depth, where the time goes between the queue and the device), each with its evidence, the
command, the risk and how to verify it:

- small requests: most of a busy device's requests far below what it takes (max_sectors_kb, its
  optimal_io_size): many requests for little data (the seed's 2K requests to a device that takes 1M);
- a queue that is the bottleneck: requests wait in the queue at least as long as at the device;
- synchronous I/O stalling a worker: a thread that spends much of its time waiting for its own reads
  and writes to complete (asynchronous I/O or a dedicated I/O thread lets it work meanwhile);
- journal contention: fsync() waits ended mostly by the journal thread (jbd2), an fsync storm;
- writeback throttling: tasks throttled in rq_qos_wait (the block layer's writeback throttling).
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.advice import Fact, Recommendation, is_path_component, shell_command, verify, write_command
from stallscope.analyzer.blockers import held_up_by, rank_live
from stallscope.analyzer.io import SATURATED, IoDeviceRow, cause_devices, io_table
from stallscope.analyzer.model import Model
from stallscope.analyzer.units import fmt_bytes, fmt_ns
from stallscope.analyzer.untrusted import printable

FSYNC = "fsync() on a file"
MSYNC = "msync() on a file"  # msync(MS_SYNC): the same write-back and journal commit
# rq_qos_wait(): writeback throttling (wbt_wait) and the other rq_qos policies (causes.toml)
THROTTLED = ("Writeback throttling (wbt: the block layer limits writeback)", "Block I/O throttled (rq_qos)")


@dataclass(frozen=True)
class IoThresholds:
    busy_requests_per_s: float = 50.0  # a device doing less is not worth tuning
    small_request_bytes: int = 16 << 10  # requests this size or smaller are small ...
    small_share_pct: float = 80.0  # ... when they are this share of a device's requests ...
    size_headroom: float = 8.0  # ... and it takes requests this many times their average size
    min_timed: int = 50  # requests seen at their issue, for a size or a queue verdict
    io_wait_per_s_ns: float = 50e6  # a thread waiting 50 ms of every second for its I/O
    min_io_waits: int = 20
    fsync_per_s: float = 20.0  # fsyncs a second ...
    jbd2_share_pct: float = 50.0  # ... most of them ended by the journal thread
    throttled_per_s_ns: float = 10e6  # waits in rq_qos_wait, per second


def _small_share(hist: dict[int, int], limit: int) -> tuple[float, int]:
    """Percent of requests no larger than `limit` bytes (log2 slots wholly below it), and their count."""
    total = sum(hist.values())
    small = sum(c for s, c in hist.items() if (1 << (s + 1)) <= limit + 1)
    return (100.0 * small / total if total else 0.0), small


def _queue(row: IoDeviceRow, field: str) -> int | None:
    v = row.queue.get(field)
    return v if isinstance(v, int) else None


def _submitters(row: IoDeviceRow, n: int = 3) -> str:
    return ", ".join(f"{printable(s.comm) or '?'}[{s.tgid}]" for s in row.submitters[:n] if s.tgid) or "not seen"


def _sysfs(dev: str, name: str) -> str:
    """The path of a queue attribute of `dev`, a name read from the recording: used only when it is one
    path component (commands quote it; a name such as `../x` becomes DEV, for the reader to fill in)."""
    return f"/sys/block/{dev if is_path_component(dev) else 'DEV'}/queue/{name}"


def _node(dev: str) -> str:
    return f"/dev/{dev if is_path_component(dev) else 'DEV'}"


def rule_small_requests(model: Model, rows: list[IoDeviceRow], th: IoThresholds, whole: tuple) -> list[Recommendation]:
    out = []
    for row in rows:
        limit_kb = _queue(row, "max_sectors_kb")
        if row.requests_per_s < th.busy_requests_per_s or not limit_kb:
            continue
        optimal = _queue(row, "optimal_io_size") or 0
        for o in row.ops:
            if o.op not in ("read", "write") or o.timed < th.min_timed or not o.avg_size:
                continue
            share, _n = _small_share(o.size_hist, th.small_request_bytes)
            takes = max(limit_kb << 10, optimal)
            if share < th.small_share_pct or takes < th.size_headroom * o.avg_size:
                continue
            dev = printable(row.name)
            evidence = (f"{share:.0f}% of {dev}'s {o.op}s were {fmt_bytes(th.small_request_bytes)} or smaller "
                        f"(average {fmt_bytes(o.avg_size)}), {o.requests_per_s:,.0f} requests/s for "
                        f"{fmt_bytes(o.bytes_per_s)}/s",
                        f"the device takes requests up to {limit_kb} KiB (max_sectors_kb)"
                        + (f" and reports an optimal I/O size of {fmt_bytes(optimal)}" if optimal else
                           "; it reports no optimal I/O size"),
                        f"each {o.op} took {fmt_ns(o.await_.avg_ns)} on average (p99 {fmt_ns(o.await_.p99_ns)}); "
                        f"submitted by {_submitters(row)}")
            out.append(Recommendation(
                "io", dev, f"{dev}: small {o.op}s ({fmt_bytes(o.avg_size)} on average) to a device that takes "
                f"{limit_kb} KiB requests: many requests for little data", evidence,
                f"{shell_command('cat', _sysfs(row.name, 'max_sectors_kb'), _sysfs(row.name, 'optimal_io_size'))}; "
                f"{shell_command('blockdev', '--getra', _node(row.name))}  # then larger I/O from the application "
                f"(its block or page size), aligned to the optimal size when there is one; for sequential reads: "
                f"{shell_command('blockdev', '--setra', 1024, _node(row.name))}",
                "a larger request takes longer at the device, and a small read queued behind it waits longer; "
                "readahead wastes the page cache when the access is random",
                verify(dev, "the average request size should rise and requests per second fall for the same bytes "
                       "per second"),
                facts=(Fact("small requests", share, "%"), Fact("average request size", o.avg_size, "B"),
                       Fact("max_sectors_kb", limit_kb, "KiB"), Fact("requests", o.requests_per_s, "/s"),
                       Fact("await", o.await_.avg_ns, "ns"))))
    return out


def rule_queue_bottleneck(model: Model, rows: list[IoDeviceRow], th: IoThresholds, whole: tuple) -> list[Recommendation]:
    out = []
    for row in rows:
        s = row.saturation
        timed = sum(o.timed for o in row.ops)
        if s.verdict != SATURATED or timed < th.min_timed or row.requests_per_s < th.busy_requests_per_s:
            continue
        dev = printable(row.name)
        nr = _queue(row, "nr_requests")
        sched = row.queue.get("scheduler") or "?"
        rotational = _queue(row, "rotational")
        evidence = [f"requests waited {fmt_ns(s.queued_avg_ns)} on average before their issue to the driver and "
                    f"{fmt_ns(s.device_avg_ns)} at the device ({s.ratio:.1f}x)",
                    f"{row.requests_per_s:,.0f} requests/s, {row.avg_inflight:.1f} at the device on average, "
                    f"{row.depth_p99} at the 99th percentile of issues"
                    + (f"; %util {row.util_pct:.0f}" if row.util_pct is not None else ""),
                    f"queue: scheduler {sched}" + (f", nr_requests {nr}" if nr else "")
                    + (f", hardware queues {row.queue.get('hw_queues')}" if row.queue.get("hw_queues") else "")]
        if rotational == 0 and sched not in ("none", "?"):
            advice = (f"the I/O scheduler ({sched}) holds requests back on a device without seeks: try none",
                      write_command("none", _sysfs(row.name, "scheduler")))
        elif nr and row.depth_p99 >= nr:
            advice = (f"the device is given {nr} requests at most and uses them all: a deeper queue, or the I/O "
                      "spread over more devices", write_command(2 * nr, _sysfs(row.name, "nr_requests")))
        else:
            advice = ("the device is at its capacity: spread the I/O over devices (striping, more paths with "
                      "multipath) or do less of it", shell_command("cat", _sysfs(row.name, "nr_requests"),
                                                                _sysfs(row.name, "scheduler"))
                      + "  # and the device's own queue depth (SCSI: queue_depth)")
        out.append(Recommendation(
            "io", dev, f"{dev}: the queue is the bottleneck: requests wait {s.ratio:.1f} times as long to be issued "
            f"as the device takes to serve them; {advice[0]}", tuple(evidence), advice[1],
            "a deeper queue or no scheduler gives the device more at once: latency for each request can rise, and "
            "fairness between processes (what the scheduler provides) is lost",
            verify(dev, "time queued should fall against time at the device"),
            facts=(Fact("queued", s.queued_avg_ns, "ns"), Fact("at the device", s.device_avg_ns, "ns"),
                   Fact("requests", row.requests_per_s, "/s"), Fact("in flight", row.avg_inflight))))
    return out


def _is_kernel_thread(model: Model, task) -> bool:
    t = model.tasks.get(task)
    return t is None or t.info.tgid == 2 or t.info.ptgid == 2 or task.pid == 2


def rule_sync_io_worker(model: Model, rows: list[IoDeviceRow], th: IoThresholds, whole: tuple) -> list[Recommendation]:
    secs = model.duration_s or 1.0
    names = {r.dev: r.name for r in rows}
    by_task: dict = {}
    for w in model.io_wakes:
        e = by_task.setdefault(w.task, {"ns": 0, "n": 0, "req": 0, "own": 0, "devs": {}})
        e["ns"] += w.wait_ns
        e["n"] += w.count
        e["req"] += w.req_ns
        e["own"] += w.count if w.submit_tgid == w.tgid else 0
        e["devs"][w.dev] = e["devs"].get(w.dev, 0) + w.wait_ns
    out = []
    for task, e in sorted(by_task.items(), key=lambda kv: -kv[1]["ns"]):
        if e["ns"] / secs < th.io_wait_per_s_ns or e["n"] < th.min_io_waits or _is_kernel_thread(model, task):
            continue
        t = model.tasks[task]
        who = f"{printable(t.info.comm)}[{task.pid}]"
        devs = ", ".join(printable(names.get(d, f"{d >> 20}:{d & 0xFFFFF}"))
                         for d, _ns in sorted(e["devs"].items(), key=lambda kv: -kv[1]))
        evidence = (f"{who} waited {fmt_ns(e['ns'] / secs)} of every second for I/O to complete on {devs} "
                    f"({e['n']} waits, {fmt_ns(e['ns'] / e['n'])} each)",
                    f"the requests that ended its waits took {fmt_ns(e['req'] / e['n'])} on average; "
                    f"{100 * e['own'] / e['n']:.0f}% of them it submitted itself (synchronous I/O)",
                    f"it ran {fmt_ns(t.run_ns / secs)} of every second")
        out.append(Recommendation(
            "io", who, f"{who} stalls on synchronous I/O: {fmt_ns(e['ns'] / secs)} of every second waiting for {devs}",
            evidence, "",
            "none from measuring; the fix changes the program: submit the I/O asynchronously (io_uring, libaio) or "
            "from a dedicated I/O thread so the worker keeps working, prefetch what it will read "
            "(posix_fadvise WILLNEED, readahead); more I/O in flight also loads the device more",
            verify(who, "its I/O wait per second should fall"),
            facts=(Fact("I/O wait", e["ns"] / secs, "ns/s"), Fact("waits", e["n"]),
                   Fact("request latency", e["req"] / e["n"], "ns")), wait_ns_per_s=e["ns"] / secs))
        if len(out) >= 5:
            break
    return out


def rule_journal(model: Model, rows: list[IoDeviceRow], th: IoThresholds, whole: tuple) -> list[Recommendation]:
    secs = model.duration_s or 1.0
    out = []
    for b in rank_live(whole[0], whole[1]):  # as recommend.py _blockers: the ranking a view shows
        if b.cause not in (FSYNC, MSYNC) or b.count / secs < th.fsync_per_s:
            continue
        wakers = held_up_by(whole[0], b, n=5).wakers
        total = sum(ns for _l, _n, ns, _s in wakers)
        jbd2 = sum(ns for label, _n, ns, _s in wakers if "jbd2" in label)
        if not total or 100 * jbd2 / total < th.jbd2_share_pct:
            continue
        names = ", ".join(sorted({printable(model.tasks[t].info.comm) for t in b.tasks if t in model.tasks}))[:80]
        journal = [printable(label) for label, _n, _ns, _s in wakers if "jbd2" in label]
        journal_io = [d for d in cause_devices(model).get("Waiting for I/O", ())
                      if any(printable(x).startswith("jbd2") for x in d.submitters)]
        call = "msync" if b.cause == MSYNC else "fsync"
        evidence = [f"{b.count / secs:,.0f} {call} waits/s, {fmt_ns(b.total_ns / b.count)} each on average "
                    f"(max {fmt_ns(b.max_ns)}), {fmt_ns(b.total_ns / secs)} of waiting per second",
                    f"{100 * jbd2 / total:.0f}% of their waiting time was ended by the journal thread "
                    f"({', '.join(journal[:2])}): each {call} waits for a journal commit"]
        if journal_io:
            d = journal_io[0]
            evidence.append(f"the journal's writes to {printable(d.device)} took {fmt_ns(d.request_avg_ns)} each")
        out.append(Recommendation(
            "io", names, f"{call} storm: {b.count / secs:,.0f} {call}s a second from {names} wait on the journal "
            "commit (jbd2)", tuple(evidence), "cat /proc/fs/jbd2/*/info  # commit time, handles per transaction",
            f"batching writes between {call}s (group commit), fdatasync where metadata need not be durable and "
            "a journal on a faster or separate device cost nothing in safety; journal mount options "
            "(commit=, journal_async_commit) change what survives a crash",
            verify(names, f"{call} waits per second and their length should fall"),
            facts=(Fact("fsync waits", b.count / secs, "/s"), Fact("fsync wait", b.total_ns / b.count, "ns"),
                   Fact("ended by jbd2", 100 * jbd2 / total, "%")), wait_ns_per_s=b.total_ns / secs))
    return out


def rule_writeback_throttle(model: Model, rows: list[IoDeviceRow], th: IoThresholds,
                            whole: tuple) -> list[Recommendation]:
    secs = model.duration_s or 1.0
    by_name = {r.name: r for r in rows}
    out = []
    for b in rank_live(whole[0], whole[1]):  # as recommend.py _blockers: the ranking a view shows
        if b.cause not in THROTTLED or b.total_ns / secs < th.throttled_per_s_ns:
            continue
        devices = cause_devices(model).get(b.cause, ())
        names = ", ".join(sorted({printable(model.tasks[t].info.comm) for t in b.tasks if t in model.tasks}))[:80]
        evidence = [f"{fmt_ns(b.total_ns / secs)} of every second throttled in rq_qos_wait ({b.count} waits, max "
                    f"{fmt_ns(b.max_ns)}) by {names}"]
        dev = devices[0].device if devices else ""
        row = by_name.get(dev)
        lat = row.queue.get("wbt_lat_usec") if row else None
        if dev:
            evidence.append(f"released by completions on {printable(dev)}" + (
                f", whose writeback throttling targets {lat} us (wbt_lat_usec)" if lat is not None else ""))
        path = _sysfs(dev, "wbt_lat_usec")
        out.append(Recommendation(
            "io", printable(dev) or names, f"writeback throttling holds {names} back: "
            f"{fmt_ns(b.total_ns / secs)} of every second in rq_qos_wait", tuple(evidence),
            f"{shell_command('cat', path)}  # a larger target lets more writeback through; 0 turns throttling off: "
            f"{write_command(0, path)}",
            "writeback throttling keeps reads and synchronous writes fast while a burst of dirty pages is written: "
            "without it they can wait behind the burst",
            verify(names, "time in rq_qos_wait should fall; watch the device's read await"),
            facts=(Fact("throttled", b.total_ns / secs, "ns/s"), Fact("waits", b.count)), wait_ns_per_s=b.total_ns / secs))
    return out


RULES = (rule_small_requests, rule_queue_bottleneck, rule_sync_io_worker, rule_journal, rule_writeback_throttle)


def io_recommendations(model: Model, th: IoThresholds | None = None,
                       whole: tuple[Model, set | None] | None = None) -> list[Recommendation]:
    """Every I/O rule's findings; none without the io group's records but the journal and throttling
    rules, which read the scheduler's (they name the device when the io group ran). `whole`: the model
    `model` was restricted from and the tasks kept, whose ranked blockers are the same and already
    computed (analyzer/recommend.py `Whole`)."""
    th = th or IoThresholds()
    rows = io_table(model)
    whole = whole or (model, None)
    return [r for rule in RULES for r in rule(model, rows, th, whole)]
