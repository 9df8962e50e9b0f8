"""A live view's window wider than one interval is folded in the live source's thread with each interval,
and kept by the view's timeline: the view's thread never folds minutes of records as an interval comes."""

from __future__ import annotations

import pytest

from stallscope.analyzer import timeline as timeline_mod
from stallscope.analyzer.sample import OffcpuDelta, TaskDelta
from stallscope.session import SessionOptions
from stallscope.sources import LIVE_WINDOWS, LiveSource
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


def test_early_the_window_is_what_is_held_and_the_widest_window_is_held_by_the_source():
    src = LiveSource(SessionOptions(interval_s=1.0))
    src.window_len = max(LIVE_WINDOWS)
    _view_of(src, 5)
    tl = src.timeline
    assert (0, 4) in tl._cache  # the view's window, clipped to what is held as the view clips it
    assert src._fold.keep >= max(LIVE_WINDOWS)


def test_a_wide_window_whose_fold_takes_longer_than_its_share_is_folded_over_several_intervals(monkeypatch):
    """Under load a window's fold goes on with each interval for a share of it (WINDOW_FOLD_SHARE), so that
    no drain waits for it: here one interval's records each time. The view shows the newest window done,
    never folding one itself, and its totals are its intervals' as Timeline.window folds them at once."""
    from stallscope import sources

    monkeypatch.setattr(sources, "WINDOW_FOLD_SHARE", 0.0)  # the least: one interval's records a time
    src = LiveSource(SessionOptions(interval_s=1.0))
    src.window_len = 5
    src._on_start(meta())
    src._on_interval(_interval(0))
    src.events()
    assert src.timeline.held(5) is None  # the first interval is the only window there is
    for i in range(1, 12):
        src._on_interval(_interval(i))
    src.events()
    tl = src.timeline
    # begun at 1 ([0..1], done at 2), 3 ([0..3], done at 6), 7 ([3..7], done at 11)
    assert tl.held(5) == (3, 7)
    folds = []
    with monkeypatch.context() as m:
        m.setattr(timeline_mod.Model, "from_intervals", lambda *a, **k: folds.append(a) or pytest.fail("folded"))
        snap = tl.window(3, 7)
    assert not folds and snap.model.tasks[B].offcpu_ns == sum(10_000_000 * (i + 1) for i in range(3, 8))
    whole = timeline_mod.Timeline(meta())
    for i in range(12):
        whole.add(_interval(i))
    at_once = whole.window(3, 7).model
    for name in ("tasks", "waits", "wakeups", "lock_waits", "futex_waits", "interval_costs", "start_ns", "end_ns",
                 "switches", "intervals", "health", "matrix"):
        assert getattr(snap.model, name) == getattr(at_once, name), name
    # another width asked: the fold under way is dropped, and one of the new width begins
    src.window_len = 10
    src._on_interval(_interval(12))
    src.events()
    assert src._window is not None and src._window[0] == 10 and tl.held(10) is None
