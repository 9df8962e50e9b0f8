"""What `stallscope top`'s screen costs by itself: a recording's intervals handed to the Textual app one an
interval, as the live source hands them over, with no collector and no load beside it.

    .venv/bin/python -m benchmarks.screen RECORDING [--seconds 30] [--size 160x50] [--view N]

Each interval is folded into its snapshot, with what the live source makes of it in its own thread (the
default view's ranking, the status line's figures: stallscope/sources.py `prefolded`), before the run; the app
(headless, Textual's test driver) then gets one every `--interval` seconds, the recording's intervals in a
loop, through a source that hands them over as the live one does (kept by the view's timeline in the screen's
thread, the app woken at once). Measured after a warm-up of 8 intervals, for SECONDS: the screen's thread's CPU
time (`time.thread_time`) per interval, the frames Textual drew (`Screen._compositor_refresh`) and the layouts
(`Screen._refresh_layout`) per interval, each with its CPU time. Without the drains and a machine's load beside
it, its CPU figure varies by about a tenth from run to run (pinned to one CPU: `taskset -c 1`), where `tui.py`'s
whole process varies by a fifth to a third, and the frames and layouts it counts hardly at all: two versions of the
screen are compared on medians of a few alternated runs. A recording of `top`'s machine: `stallscope record -o FILE -d 15` while `tui.py`'s load runs
(hackbench in a loop and `examples/bin/idle_threads -n 5000 -p 3600000`).
Standard library and stallscope only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import defaultdict

from stallscope.analyzer.store import Recording
from stallscope.analyzer.timeline import Timeline
from stallscope.errors import StallscopeError
from stallscope.sources import LIVE_KEEP, LIVE_MAX_RECORDS, Event, prefolded

WARM_INTERVALS = 8


class Timed:
    """The count and thread CPU time of calls to some methods, while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.calls: dict[str, list] = defaultdict(lambda: [0, 0.0])

    def wrap(self, owner, name: str, label: str) -> None:
        f = getattr(owner, name)

        def timed(*args, **kwargs):
            if not self.on:
                return f(*args, **kwargs)
            began = time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                c = self.calls[label]
                c[0] += 1
                c[1] += time.thread_time() - began

        setattr(owner, name, timed)


def folded(path: str, reads: tuple[str, ...]) -> tuple:
    """(meta, names, the intervals' Events) of a recording, each with its prefolded snapshot."""
    rec = Recording(path)
    try:
        meta, intervals = rec.meta, list(rec.intervals())
        names = (rec.tasks(), rec.stacks(), rec.functions(), rec.slab_caches())
    finally:
        rec.close()
    fold = Timeline(meta, keep=3, live=True, cache_size=3)
    _named(fold, names)
    events = []
    for iv in intervals:
        fold.add(iv)
        events.append(Event("interval", iv, prefolded(fold.window(iv.index, iv.index), reads)))
    return meta, names, events


def _named(timeline: Timeline, names: tuple) -> None:
    for have, new in zip((timeline.task_info, timeline.stacks, timeline.functions, timeline.slab_caches), names):
        have.update(new)


class Replayed:
    """A live source over intervals folded beforehand: `hand` gives the app one more, as LiveSource does."""

    live = True

    def __init__(self, meta, names: tuple):
        self.meta = meta
        self.timeline = Timeline(meta, keep=LIVE_KEEP, live=True, max_records=LIVE_MAX_RECORDS)
        _named(self.timeline, names)
        self.pending: list[Event] = []
        self.on_event = None
        self.reads: tuple[str, ...] = ()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def hand(self, ev: Event) -> None:
        self.pending.append(ev)
        if self.on_event is not None:
            self.on_event()

    def events(self) -> list[Event]:
        out, self.pending = self.pending, []
        for ev in out:
            self.timeline.add(ev.payload, snapshot=ev.snapshot)
        return out


async def measure(path: str, seconds: float, size: tuple[int, int], view: int, interval: float) -> dict:
    from textual.screen import Screen

    from stallscope.tui.app import TopApp

    timed = Timed()
    timed.wrap(Screen, "_compositor_refresh", "frames")
    timed.wrap(Screen, "_refresh_layout", "layouts")
    meta, names, events = folded(path, ())
    source = Replayed(meta, names)
    app = TopApp(source)
    handed = 0
    async with app.run_test(size=size) as pilot:
        if view != 1:
            await pilot.press(str(view))
        reads = app.active_view().reads  # what the view shown reads besides, made as the live source makes it
        events = [Event(e.kind, e.payload, prefolded(e.snapshot, reads)) for e in events]

        async def hand(n: int) -> None:
            nonlocal handed
            for _ in range(n):
                source.hand(events[handed % len(events)])
                handed += 1
                await asyncio.sleep(interval)

        await hand(WARM_INTERVALS)
        n = max(1, round(seconds / interval))
        timed.on = True
        cpu0, wall0 = time.thread_time(), time.monotonic()
        await hand(n)
        cpu, wall = time.thread_time() - cpu0, time.monotonic() - wall0
        timed.on = False
        view_name = app.active_view().name
        await pilot.press("q")
    frames, layouts = timed.calls["frames"], timed.calls["layouts"]
    return {"screen_cpu_pct_of_one_cpu": round(100 * cpu / wall, 2), "ms_per_interval": round(1e3 * cpu / n, 1),
            "frames_per_interval": round(frames[0] / n, 2),
            "ms_per_frame": round(1e3 * frames[1] / max(frames[0], 1), 1),
            "layouts_per_interval": round(layouts[0] / n, 2),
            "ms_per_layout": round(1e3 * layouts[1] / max(layouts[0], 1), 1),
            "intervals": n, "recording_intervals": len(events), "view": view_name, "size": f"{size[0]}x{size[1]}",
            "interval_s": interval}


def _size(text: str) -> tuple[int, int]:
    cols, sep, rows = text.lower().partition("x")
    if not (sep and cols.isdigit() and rows.isdigit() and int(cols) > 0 and int(rows) > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not COLUMNSxROWS, e.g. 160x50")
    return int(cols), int(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording")
    ap.add_argument("--seconds", type=float, default=30.0, help="measuring time after the warm-up (default 30)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between two intervals handed over")
    ap.add_argument("--size", default="160x50", type=_size, help="the terminal's columns x rows (default 160x50)")
    ap.add_argument("--view", type=int, default=1, help="the view shown, as its digit selects it (default 1)")
    args = ap.parse_args()
    try:
        result = asyncio.run(measure(args.recording, args.seconds, args.size, args.view, args.interval))
    except StallscopeError as exc:  # no such recording, a damaged one: said in one line
        raise SystemExit(f"benchmarks.screen: {exc}") from None
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
