"""A live view's window wider than one interval is folded in the live source's thread with each interval,
and kept by the view's timeline: the view's thread never folds minutes of records as an interval comes."""

from __future__ import annotations

from dataclasses import fields

import pytest

from stallscope.analyzer import timeline as timeline_mod
from stallscope.analyzer.sample import OffcpuDelta, TaskDelta
from stallscope.session import SessionOptions
from stallscope.sources import LIVE_WINDOWS, LiveSource
from conftest import needs_bpf
from synthetic import A, B, INFOS, PIPE, SLEEP, interval, meta


def _interval(i: int):
    first = i == 0
    return interval(i, task_info=INFOS if first else (), stacks=(SLEEP, PIPE) if first else (),
                    tasks=(TaskDelta(A, offcpu_ns=900_000_000, offcpu_count=1),
                           TaskDelta(B, offcpu_ns=10_000_000 * (i + 1), offcpu_count=1)),
                    offcpu=(OffcpuDelta(A, 100, 1, SLEEP.id, 0, 1, 900_000_000),
                            OffcpuDelta(B, 100, 1, PIPE.id, 0, 1, 10_000_000 * (i + 1))))


def _view_of(src: LiveSource, intervals: int) -> None:
    """The session's callbacks as its thread calls them, then the view's read of the queue."""
    src._on_start(meta())
    for i in range(intervals):
        src._on_interval(_interval(i))
    src.events()


def test_the_window_a_view_asked_for_comes_folded_and_the_views_thread_folds_nothing(monkeypatch):
    src = LiveSource(SessionOptions(interval_s=1.0))
    src.window_len = 10
    _view_of(src, 14)
    tl = src.timeline
    folds = []
    monkeypatch.setattr(timeline_mod.Model, "from_intervals", lambda *a, **k: folds.append(a) or pytest.fail("folded"))
    snap = tl.window(tl.last_index - 9, tl.last_index)
    assert (snap.first, snap.last) == (4, 13) and not folds
    assert snap.model.tasks[B].offcpu_ns == sum(10_000_000 * (i + 1) for i in range(4, 14))
    assert [b.cause for b in snap.ranked]  # the views' first reads were made with it
    # the window slides: one snapshot of its width is kept, not one an interval
    assert [k for k in tl._cache if k[0] != k[1]] == [(4, 13)]


def test_a_window_of_one_interval_folds_no_other(monkeypatch):
    src = LiveSource(SessionOptions(interval_s=1.0))
    _view_of(src, 3)
    assert all(k[0] == k[1] for k in src.timeline._cache)


def test_what_the_view_shown_reads_is_made_in_the_sources_thread(monkeypatch):
    """A view's `reads` (the Tasks view: its threads' rows), set by the view as it is shown, are made with each
    interval in the session's thread, for one interval's window and a wider one alike; the view's thread then
    makes none of them."""
    from stallscope.tui.views import BlockersView, TasksView

    for width in (1, 10):
        src = LiveSource(SessionOptions(interval_s=1.0))
        src.window_len = width
        src.reads = TasksView.reads
        _view_of(src, 12)
        tl = src.timeline
        snap = tl.window(tl.last_index - width + 1, tl.last_index)
        assert "tasks" in vars(snap), width  # made already: a cached property is in the instance's dict
        monkeypatch.setattr(timeline_mod, "causes_by_task", lambda *a: pytest.fail("made in the view's thread"))
        assert {r.task for r in snap.tasks} == {A, B}
        monkeypatch.undo()
    src = LiveSource(SessionOptions(interval_s=1.0))
    src.reads = BlockersView.reads
    _view_of(src, 2)
    snap = src.timeline.window(1, 1)
    assert "tasks" not in vars(snap)  # the view shown does not read them: not made
    # who waited for each blocker, by name, is read by the Blockers view: made with the ranking
    assert "waiters" in vars(snap) and set(snap.waiters) == {b.cause for b in snap.ranked}
    monkeypatch.setattr(timeline_mod, "waiters_by_name", lambda *a: pytest.fail("made in the view's thread"))
    assert all(snap.waiters_of(b) is snap.waiters[b.cause] for b in snap.ranked)


def test_early_the_window_is_what_is_held_and_the_widest_window_is_held_by_the_source():
    src = LiveSource(SessionOptions(interval_s=1.0))
    src.window_len = max(LIVE_WINDOWS)
    _view_of(src, 5)
    tl = src.timeline
    assert (0, 4) in tl._cache  # the view's window, clipped to what is held as the view clips it
    assert src._fold.keep >= max(LIVE_WINDOWS)


def _same_model(a, b) -> None:
    """Equal in every field, with the tasks and waits in the same order (views list them so)."""
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "waits_now" and x is not None and y is not None:
            x, y = (x.keys, x.since, x.places, tuple(x.waits)), (y.keys, y.since, y.places, tuple(y.waits))
        elif f.name == "tasks":
            x, y = list(x.items()), list(y.items())
        assert x == y, f.name


def _slide(meta_, intervals, width: int, block: int) -> list:
    """Each window a SlidingFold makes as the intervals come, against the same window folded at once from a
    timeline of the same intervals (the names they sent so far)."""
    tl, whole = timeline_mod.Timeline(meta_, live=True), timeline_mod.Timeline(meta_)
    w, seen = None, []
    for iv in intervals:
        tl.add(iv)
        whole.add(iv)
        if w is None:
            w = timeline_mod.SlidingFold.over(tl, width, block)
        else:
            w.add(iv)
        assert w.fold_some()
        snap = w.snapshot()
        assert (snap.first, snap.last) == (max(0, iv.index - width + 1), iv.index)
        _same_model(snap.model, whole.window(snap.first, snap.last).model)
        seen.append((snap.first, snap.last))
    return seen


@pytest.mark.parametrize("width,block", [(2, 1), (3, 2), (5, 2), (5, 3), (7, 3), (12, 4), (20, 4)])
def test_a_sliding_window_is_the_window_folded_at_once(width, block):
    """Each interval folded once into its block, the window made of the oldest block's part folded again, the
    complete blocks merged and the newest block: the model of the window folded at once, order included."""
    from tui_fixture import tui_intervals, tui_meta

    seen = _slide(tui_meta(), tui_intervals(), width, block)
    assert len(seen) == 12 and seen[-1] == (max(0, 12 - width), 11)


@needs_bpf
def test_a_sliding_window_of_a_real_recording_is_the_window_folded_at_once(report_recording):
    """A real recording's records of every kind it holds (scheduler, kernel locks, futex, slab, on-CPU samples):
    merged folds are the fold of their intervals at once, and so are the sliding windows."""
    import random

    from stallscope.analyzer.model import ModelFold
    from stallscope.analyzer.store import Recording

    rec = Recording(str(report_recording["stall"]))
    try:
        m, ivs, tasks, stacks = rec.meta, list(rec.intervals()), rec.tasks(), rec.stacks()
        caches, funcs = rec.slab_caches(), rec.functions()
    finally:
        rec.close()
    assert len(ivs) > 6
    for kind in ("offcpu", "wakers", "locks", "futex", "slab", "oncpu"):
        assert any(getattr(iv, kind) for iv in ivs), kind
    rng = random.Random(7)
    for _ in range(8):
        cuts = sorted(rng.sample(range(len(ivs) + 1), 4))
        folded = ModelFold(m, caches, funcs, lazy=True).add(ivs[cuts[0]:cuts[1]])
        for low, high in zip(cuts[1:], cuts[2:]):
            folded.merge(ModelFold(m, caches, funcs, lazy=True).add(ivs[low:high]))
        at_once = ModelFold(m, caches, funcs, lazy=True).add(ivs[cuts[0]:cuts[-1]])
        _same_model(folded.model(tasks, stacks), at_once.model(tasks, stacks))
    for width, block in ((4, 2), (9, 3)):
        assert _slide(m, ivs, width, block)[-1][1] == ivs[-1].index


def whole_of(n: int):
    whole = timeline_mod.Timeline(meta())
    for i in range(n):
        whole.add(_interval(i))
    return whole


def test_a_live_wide_window_slides_with_each_interval_and_its_views_keep_to_their_share(monkeypatch):
    """The source folds each interval once into the view's sliding window. Its snapshot is made with the
    interval while its model and views take less than their share of an interval (WINDOW_VIEW_SHARE); one
    that took more is made again that many intervals later, the view keeping the last meanwhile."""
    from stallscope import sources

    monkeypatch.setattr(sources, "WINDOW_FOLD_SHARE", 0.0)  # the least: two intervals a time, and it catches up
    monkeypatch.setattr(sources, "WINDOW_VIEW_SHARE", 1e9)
    src = LiveSource(SessionOptions(interval_s=1.0))
    src.window_len = 5
    src._on_start(meta())
    src._on_interval(_interval(0))
    src.events()
    assert src.timeline.held(5) is None  # the first interval is the only window there is
    for i in range(1, 12):
        src._on_interval(_interval(i))
        src.events()
        assert src.timeline.held(5) == (max(0, i - 4), i)
    tl = src.timeline
    folds = []
    with monkeypatch.context() as m:
        m.setattr(timeline_mod.Model, "from_intervals", lambda *a, **k: folds.append(a) or pytest.fail("folded"))
        snap = tl.window(7, 11)
    assert not folds and snap.model.tasks[B].offcpu_ns == sum(10_000_000 * (i + 1) for i in range(7, 12))
    _same_model(snap.model, whole_of(12).window(7, 11).model)
    # views that take more than their share: the next window comes that many intervals later
    monkeypatch.setattr(sources, "WINDOW_VIEW_SHARE", 1e-12)
    src._window_next = 0
    src._on_interval(_interval(12))
    src.events()
    assert tl.held(5) == (8, 12) and src._window_next > 10**6
    src._on_interval(_interval(13))
    src.events()
    assert tl.held(5) == (8, 12)  # kept, and the window goes on sliding in the source
    assert src._window.last == 13 and src._window.first == 9
    # another width asked: a sliding window of it from the intervals held, folded two intervals at a time
    # here (the least), one more coming with each: it catches up, then is shown with each interval
    monkeypatch.setattr(sources, "WINDOW_VIEW_SHARE", 1e9)
    src.window_len = 10
    i = 14
    while tl.held(10) is None:
        src._on_interval(_interval(i))
        src.events()
        assert src._window.width == 10 and i < 24
        i += 1
    assert tl.held(10) == (i - 10, i - 1)
    _same_model(tl.window(i - 10, i - 1).model, whole_of(i).window(i - 10, i - 1).model)
