"""Sources of intervals for the views: live collection and a recording, behind one interface.

A view asks a source for its events and feeds the intervals to a `Timeline`; it never knows which kind
it has. Live: the session runs in a worker thread (its BPF load, attach and drains stay off the view's
thread) and hands over what it makes through a bounded queue; notices such as a budget step are events,
not prints. Recording: the SQLite store, read at open but for its lock contentions, folded per window.
"""

from __future__ import annotations

import gc
import math
import queue
import threading
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable

from stallscope.analyzer.load import fold_locks, with_locks
from stallscope.analyzer.model import Model, wait_limit_ns
from stallscope.analyzer.sample import Interval, RecordingMeta
from stallscope.analyzer.store import Recording
from stallscope.analyzer.timeline import SlidingFold, Snapshot, Timeline
from stallscope.errors import StallscopeError
from stallscope.gc_work import interval_work

# what a live timeline keeps: the sparklines' minute and room for a range, at 1 s intervals
LIVE_KEEP = 600
# ... and fewer intervals when they hold more records than this (about 300 bytes each): under hackbench beside
# 5,000 sleeping threads an interval holds 20,000-30,000, and ten minutes of them would take gigabytes
LIVE_MAX_RECORDS = 1_000_000
# what the default view (Blockers, with each cause's history) and the status line read of each interval
PREFOLDED = ("ranked", "idle_ns", "shares", "cost", "lost")
LIVE_WINDOWS = (1, 10, 60)  # the intervals a live view's window spans (`w` cycles them); each folded here
# the share of an interval a wider window's fold may take in the session's thread, with each interval: what
# is left waits for the next one (the window shown is then that many intervals older, and says so), so that
# folding a minute of a loaded machine's records (1.5 s) never holds up a drain
WINDOW_FOLD_SHARE = 0.2
# intervals a fold in a thread (a replay's whole recording, a view's window) takes between two looks at whether it
# is still wanted and how far it is
FOLD_STEP = 8
# the share of a CPU a wider window's model and first views may take, on average: a window whose snapshot took
# longer than this share of an interval is made again that many intervals later (the view keeps the last one
# meanwhile, and says which intervals it spans). 10 intervals of 5,000 sleeping threads took 0.2-0.4 s.
WINDOW_VIEW_SHARE = 0.1
# intervals the source's fold timeline keeps beyond the widest window: their names, for a window whose fold
# took that long
WINDOW_FOLD_SLACK = 30
LIVE_GC_THRESHOLD = 100_000  # allocations between young-generation collections, live
_WITHOUT_LOCKS = frozenset({"locks"})


@dataclass(frozen=True)
class Event:
    """kind: "meta" (the recording's metadata, first), "interval", "notice" (a line for the user),
    "error" (the session failed: payload is the message), "end" (payload: the SessionResult)."""

    kind: str
    payload: Any = None
    snapshot: Any = None  # "interval": the interval's own snapshot, folded off the view's thread
    # "interval": the snapshot of the view's window ending with it (LiveSource.window_len > 1), or None while the
    # window's fold is behind its intervals or its last snapshot's cost has not yet taken its share (_prefold_window)
    window: Any = None


class RecordingSource:
    """A recording file: every interval, but for their kernel lock contentions (a long recording's most
    numerous rows: 1.3 million in 10 minutes of hackbench), which each window folds from the file
    (analyzer/load.py fold_locks, in C where it is built). The file stays open until `stop`.

    Read at once, or (`background`) in a thread `start` begins, which also folds the whole recording's
    snapshot: a view's first screen does not wait for a long file, it says how far the reading is
    (`progress`); the timeline appears with a "meta" event once read, or an "error" event says why not."""

    live = False

    def __init__(self, path: str, background: bool = False):
        self.path = path
        self.timeline: Timeline | None = None
        self.error: str | None = None
        self.failure: Exception | None = None  # an error that is not a StallscopeError: a bug
        self.intervals_read = 0
        self.intervals_folded = 0  # of the whole recording's snapshot, folded after the reading
        self._events: list[Event] = []
        self._lock = threading.Lock()  # the events, and the file's closing
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._folding = 0  # the intervals the whole recording's fold spans, once it begins
        rec = Recording(path)
        self._rec: Recording | None = rec
        try:
            self.meta: RecordingMeta = rec.meta
            self.total = rec.interval_count()
            if not self.total:
                raise StallscopeError(f"{path} holds no interval", "record for longer than one interval")
            if not background:
                self.timeline = self._read(rec)
        except BaseException:
            self.stop()
            raise

    def _read(self, rec: Recording) -> Timeline:
        # a window's fold makes hundreds of thousands of records, none in a cycle: out of the collector's walks
        tl = Timeline(self.meta, work=interval_work)
        tl.locks = partial(self._with_locks, tl.stacks)
        tl.task_info.update(rec.tasks())
        tl.stacks.update(rec.stacks())
        tl.functions.update(rec.functions())
        tl.slab_caches.update(rec.slab_caches())
        with interval_work():  # what is read lives as long as the view: kept out of the cycle collector's walks
            for iv in rec.intervals(without=_WITHOUT_LOCKS):
                if self._stopping.is_set():
                    raise _Stopped
                tl.add(iv)
                self.intervals_read += 1
        if not len(tl):
            raise StallscopeError(f"{self.path} holds no interval that can be read", "the file is damaged")
        return tl

    def _with_locks(self, stacks: dict, model: Model, intervals: list[Interval]) -> Model:
        """A window's model with its lock contentions folded from the file (Timeline.locks)."""
        rec = self._rec
        if rec is None:  # stopped: the view is gone
            return model
        limits = {iv.index: wait_limit_ns(self.meta, iv) for iv in intervals}
        fold, _parts = fold_locks(rec, limits, keep_parts=False)
        return with_locks(model, fold, stacks)

    @property
    def progress(self) -> str | None:
        """How far a reading in the background is; None once done (or never begun)."""
        if self.timeline is not None or self._thread is None or self.error is not None:
            return None
        if self._folding:
            if self.intervals_folded < self._folding:
                return f"folding the whole recording: {self.intervals_folded:,} of {self._folding:,} intervals..."
            return f"ranking the whole recording's {self._folding:,} intervals..."
        return f"reading the recording: {self.intervals_read:,} of {self.total:,} intervals..."

    def start(self) -> None:
        if self.timeline is not None or self._thread is not None or self._rec is None:
            return
        self._thread = threading.Thread(target=self._run, name="replay-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            tl = self._read(self._rec)
            prefolded(self._fold_whole(tl))
            self.timeline = tl
            self._put(Event("meta", self.meta))
        except _Stopped:
            pass
        except StallscopeError as exc:
            self.error = str(exc)
            self._put(Event("error", self.error))
        except Exception as exc:  # noqa: BLE001 - the view must hear of it, and restore the terminal
            self.failure = exc  # a bug: the command says it once the view is gone, its traceback kept (crash.py)
            self.error = f"reading failed: {type(exc).__name__}: {exc}"
            self._put(Event("error", self.error))
        finally:
            if self._stopping.is_set():
                self._close()

    def _fold_whole(self, tl: Timeline) -> Snapshot:
        """The whole recording's snapshot, its intervals folded a few at a time: the status line says how far
        (a 10-minute recording's took 10 s here), and a view that quits meanwhile is not kept waiting for it."""
        fold = tl.fold_window(tl.first_index, tl.last_index)
        self._folding = fold.span
        while not fold.add(FOLD_STEP):
            self.intervals_folded = fold.folded
            if self._stopping.is_set():
                raise _Stopped
        self.intervals_folded = fold.span
        return fold.snapshot()

    def _put(self, ev: Event) -> None:
        with self._lock:
            self._events.append(ev)

    def events(self) -> list[Event]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def stop(self) -> None:
        """The file is closed (by the reading thread once it stops, when one runs)."""
        self._stopping.set()
        if self._thread is None or not self._thread.is_alive():
            self._close()

    def _close(self) -> None:
        with self._lock:
            rec, self._rec = self._rec, None
        if rec is not None:
            rec.close()

    def join(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def prefolded(snap, reads: tuple[str, ...] = ()):
    """The snapshot with what the default view and the status line read of it made (PREFOLDED), and `reads`:
    what the view shown reads of it besides (a view's `reads`, tui/views.py)."""
    if snap is not None:
        for name in PREFOLDED:
            getattr(snap, name)
        for name in reads:
            getattr(snap, name)
    return snap


class _Stopped(Exception):
    """The view went while a recording was read in the background."""


class LiveSource:
    """A session in a worker thread. `writer_factory(meta)`, when given, makes a writer whose
    `append(iv)` keeps every interval (`top -o FILE`), in the worker, before the view sees it."""

    live = True

    def __init__(self, options, writer_factory=None, max_queued: int = 64):
        from stallscope.session import Session  # the BPF side, loaded only for live data

        if options.first_interval_end_s is None:  # the first data an interval after starting, not after set-up
            options = replace(options, first_interval_end_s=options.interval_s)
        self.session = Session(options, notify=self._notice)
        self.meta: RecordingMeta | None = None
        self.timeline: Timeline | None = None
        self._start_ns = 0  # the session's start (its meta's), once started: notices say when they were made
        self.writer_factory = writer_factory
        self.writer = None
        self.result = None
        self.error: str | None = None
        self.failure: Exception | None = None  # an error that is not a StallscopeError: a bug
        self._queue: queue.Queue[Event] = queue.Queue(max_queued)
        self._thread = threading.Thread(target=self._run, name="stallscope-session", daemon=True)
        self._stopping = threading.Event()
        # called from the session's thread after each event is queued, when set: a view's way of being woken
        # at once (it must not block) rather than at its next poll
        self.on_event: Callable[[], None] | None = None
        # the intervals the view's window spans (set by the view): a wider window's snapshot is folded here
        # too, with each interval, so that the view's thread never folds minutes of records as one comes
        self.window_len = 1
        # what the view shown reads of a snapshot besides PREFOLDED (set by the view: its `reads`), made here too
        # with each interval, so that a view of thousands of threads does not make its rows' data as it draws
        self.reads: tuple[str, ...] = ()

    def start(self) -> None:
        if not self._thread.is_alive() and self._thread.ident is None:
            # each interval's fold makes tens of thousands of short-lived containers (a record, a part per
            # sleeping thread): with the default threshold (700) the young generation was collected a
            # hundred times an interval, a quarter of the fold's time; what outlives an interval is frozen
            # out of the collector's view (events), cycles are still collected
            gc.set_threshold(LIVE_GC_THRESHOLD, *gc.get_threshold()[1:])
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _put(self, event: Event) -> None:
        """Blocks while the queue is full (a view that stopped reading), until stop()."""
        while True:
            try:
                self._queue.put(event, timeout=0.2)
                wake = self.on_event
                if wake is not None:
                    wake()
                return
            except queue.Full:
                if self._stopping.is_set():
                    return

    def _notice(self, text: str) -> None:
        if self._start_ns:  # when, as the window's header says an interval's start: a notice stays shown
            # until the next, and "cost 13% of the CPUs is over the budget" must not read as now once it is 2%
            text = f"+{max(time.clock_gettime_ns(time.CLOCK_BOOTTIME) - self._start_ns, 0) / 1e9:.0f} s: {text}"
        self._put(Event("notice", text))

    def _on_start(self, meta: RecordingMeta) -> None:
        self._start_ns = meta.start_ns
        if self.writer_factory is not None:
            self.writer = self.writer_factory(meta)
        # the newest interval's snapshot is folded here, in the session's thread, with what the default
        # view and the status line read of it: the view's thread only draws (a key is not kept waiting
        # behind a fold); a timeline of its own, as the view's holds the same names and stacks
        self._fold = Timeline(meta, keep=max(2, *LIVE_WINDOWS) + WINDOW_FOLD_SLACK, live=True, cache_size=3)
        self._window: SlidingFold | None = None  # the view's window, sliding with the intervals
        self._window_next = 0  # the interval from which the window's next snapshot is made (WINDOW_VIEW_SHARE)
        self._put(Event("meta", meta))

    def _on_interval(self, iv: Interval) -> None:
        if self.writer is not None:
            try:
                self.writer.append(iv)
            except StallscopeError as exc:  # the disk: the view goes on, the file keeps what it has
                self._notice(f"recording stopped: {exc}")
                self._close_writer(None)
        snap = self._prefold(iv)
        self._put(Event("interval", iv, snap, self._prefold_window(iv)))

    def _prefold(self, iv: Interval):
        fold = getattr(self, "_fold", None)
        if fold is None:
            return None
        fold.add(iv)
        return prefolded(fold.window(iv.index, iv.index), self.reads)

    def _prefold_window(self, iv: Interval):
        """The snapshot of the view's window, when it spans more than one interval and its fold has caught up
        with the intervals (None otherwise). The window slides with each interval (timeline.py SlidingFold:
        each interval folded once, into a block). A window newly asked for begins with the intervals held,
        folded with each interval for at most WINDOW_FOLD_SHARE of one (two intervals at least, so that it
        catches up): an idle machine's is shown with the interval that asked for it, a loaded one's some
        intervals later."""
        fold, n = getattr(self, "_fold", None), self.window_len
        if fold is None or n <= 1:
            self._window = None
            return None
        w = self._window
        if w is None or w.width != n:  # none yet, or one of a width no longer asked for
            w = self._window = SlidingFold.over(fold, n)
            self._window_next = 0
        else:
            w.add(iv)
        interval_s = self.session.options.interval_s
        until = time.monotonic() + WINDOW_FOLD_SHARE * interval_s
        if not w.fold_some(lambda: time.monotonic() < until) or w.span == 1:
            return None  # behind its intervals, or the first interval: its own snapshot is the window
        if w.last < self._window_next:  # the last one's model and views took their share: the view keeps it a while
            return None
        began = time.thread_time()
        snap = prefolded(w.snapshot(), self.reads)
        spent = time.thread_time() - began
        self._window_next = w.last + max(1, math.ceil(spent / (WINDOW_VIEW_SHARE * interval_s)))
        return snap

    def _close_writer(self, meta: RecordingMeta | None) -> None:
        writer, self.writer = self.writer, None
        if writer is None:
            return
        try:
            if meta is not None:
                writer.update_meta(meta)
        except StallscopeError as exc:
            self._notice(f"recording: {exc}")
        writer.close()

    def _run(self) -> None:
        try:
            self.result = self.session.run(self._on_start, self._on_interval, handle_signals=False)
            self._close_writer(self.result.meta)
            self._put(Event("end", self.result))
        except StallscopeError as exc:
            self.error = str(exc)
            self._close_writer(None)
            self._put(Event("error", self.error))
        except Exception as exc:  # noqa: BLE001 - the view must hear of it, and restore the terminal
            self.failure = exc  # a bug: the command says it once the view is gone, its traceback kept (crash.py)
            self.error = f"collection failed: {type(exc).__name__}: {exc}"
            self._close_writer(None)
            self._put(Event("error", self.error))

    def events(self) -> list[Event]:
        """What arrived since the last call; intervals are added to the timeline here."""
        out = []
        while True:
            try:
                ev = self._queue.get_nowait()
            except queue.Empty:
                return out
            if ev.kind == "meta":
                self.meta = ev.payload
                self.timeline = Timeline(ev.payload, keep=LIVE_KEEP, live=True, max_records=LIVE_MAX_RECORDS)
            elif ev.kind == "interval" and self.timeline is not None:
                # what the timeline keeps (minutes of records, millions of objects, none in a cycle) was
                # frozen out of the cycle collector's view as the session made it (session.interval_work)
                self.timeline.add(ev.payload, snapshot=ev.snapshot)
                if ev.window is not None:
                    self.timeline.hold(ev.window)
            out.append(ev)

    def stop(self) -> None:
        self._stopping.set()
        self.session.end("quit")

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()
