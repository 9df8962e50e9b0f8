"""What `top` does with each live interval, replayed from a recording: its fold into a snapshot and the
views the screen reads first (stallscope/sources.py `PREFOLDED`), then the view's timeline, as the live
source does it, cycle collector included. Reports the CPU time per interval (best of --runs), each
interval's work kept out of the cycle collector as `top` keeps it (session.interval_work), and left to
the collector at the live source's young-generation threshold, what is kept frozen after each interval.

    python -m benchmarks.live_fold RECORDING [--runs 4]

The waits a recording of format 1 stores as the records they stand for (those the task dump carried on) are
taken back into each interval's `ongoing`, as the live collector hands them over. A recording of many sleeping threads shows the per-thread cost that dominates `top` on such a machine:
`stallscope record -o idle.stall -d 12` while `examples/bin/idle_threads -n 5000` runs.
Standard library and stallscope only.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
from collections import Counter
from dataclasses import replace

from stallscope.analyzer.sample import Interval, OngoingWait, TaskDelta
from stallscope.analyzer.store import Recording
from stallscope.analyzer.timeline import Timeline
from stallscope.errors import StallscopeError
from stallscope.gc_work import interval_work
from stallscope.sources import LIVE_GC_THRESHOLD, LIVE_KEEP, PREFOLDED


def carried(iv: Interval) -> Interval:
    """The interval as the live collector hands it over: a recording of format 1 stored each wait the task
    dump carried on (Interval.ongoing) as the records it stands for, a charge-only OffcpuDelta and a TaskDelta
    of the interval's span each; those are taken back into `ongoing`."""
    charges = Counter(o.charged for o in iv.offcpu if o.count == 0 and o.total_ns == 0)
    if not charges:
        return iv
    span = charges.most_common(1)[0][0]
    only = {d.task for d in iv.tasks if d == TaskDelta(d.task, offcpu_ns=span)}
    waits = [o for o in iv.offcpu if o.task in only and o.count == 0 and o.total_ns == 0 and o.charged == span]
    by_task = Counter(o.task for o in waits)
    keep = {o.task for o in waits if by_task[o.task] == 1}
    ongoing = tuple(OngoingWait(o.task, o.tgid, o.state, o.kstack, o.ustack, o.why, o.func) for o in waits if o.task in keep)
    return replace(iv, tasks=tuple(d for d in iv.tasks if d.task not in keep),
                   offcpu=tuple(o for o in iv.offcpu if not (o.task in keep and o.count == 0 and o.total_ns == 0)),
                   ongoing=ongoing, ongoing_ns=span)


def per_interval_ms(meta, intervals: list, names: tuple, runs: int, managed: bool) -> float:
    best = float("inf")
    for _ in range(runs):
        fold = Timeline(meta, keep=2, live=True)
        view = Timeline(meta, keep=LIVE_KEEP, live=True)
        for timeline in (fold, view):  # the names the collector sent as each task and stack was first seen
            for have, new in zip((timeline.task_info, timeline.stacks, timeline.functions, timeline.slab_caches),
                                 names):
                have.update(new)
        t = time.process_time()
        for iv in intervals:
            with interval_work() if managed else contextlib.nullcontext():
                fold.add(iv)
                snap = fold.window(iv.index, iv.index)
                for name in PREFOLDED:
                    getattr(snap, name)
                view.add(iv, snapshot=snap)
            if not managed:
                gc.freeze()
        best = min(best, time.process_time() - t)
        gc.unfreeze()
    return 1e3 * best / max(len(intervals), 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording")
    ap.add_argument("--runs", type=int, default=4)
    args = ap.parse_args(argv)
    try:
        rec = Recording(args.recording)
    except StallscopeError as exc:  # no such recording, a damaged one: said in one line
        raise SystemExit(f"benchmarks.live_fold: {exc}") from None
    try:
        meta, intervals = rec.meta, list(rec.intervals())
        if rec.format_version < 2:  # format 2 keeps them as they were carried
            intervals = [carried(iv) for iv in intervals]
        names = (rec.tasks(), rec.stacks(), rec.functions(), rec.slab_caches())
    finally:
        rec.close()
    records = sum(len(iv.tasks) + len(iv.offcpu) for iv in intervals) / max(len(intervals), 1)
    ongoing = sum(len(iv.ongoing) for iv in intervals) / max(len(intervals), 1)
    default = gc.get_threshold()
    print(f"{len(intervals)} intervals, {records:,.0f} task and off-CPU records and {ongoing:,.0f} waits carried on "
          f"each on average")
    gc.set_threshold(LIVE_GC_THRESHOLD, *default[1:])
    print(f"left to the collector, young generation every {LIVE_GC_THRESHOLD:,} allocations: "
          f"{per_interval_ms(meta, intervals, names, args.runs, False):.1f} ms of CPU per interval")
    print(f"outside the collector, frozen when done (as top does it): "
          f"{per_interval_ms(meta, intervals, names, args.runs, True):.1f} ms of CPU per interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
