"""`stallscope top`'s Textual screens, driven as a person would (Textual's pilot) over a recording built
by hand (tests/tui_fixture.py), and over a live source that hands intervals in as they come."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rich.text import Text
from textual.app import App
from textual.widgets import DataTable, Static

from stallscope.analyzer.recommend import RECOMMENDED, Recommendation
from stallscope.analyzer.timeline import Timeline
from stallscope.errors import StallscopeError
from stallscope.sources import Event, RecordingSource
from stallscope.tui.app import ConfirmApply, DetailScreen, TopApp
from tui_fixture import HOSTILE, INTERVALS, tui_intervals, tui_meta, write_tui_recording


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tui") / "tui.stall"
    write_tui_recording(path)
    return str(path)


def run(coro):
    return asyncio.run(coro)


def cells(app: TopApp, view: str) -> list[list[str]]:
    """The rows a view's table shows, in its order, each cell whole (the table draws a long name with its middle
    left out: test_a_long_name_loses_its_middle_not_its_end)."""
    table = app.query_one(f"#table-{view}", DataTable)
    rows = app.rows.get(view, [])
    assert len(rows) == table.row_count
    return [[c.plain if isinstance(c, Text) else str(c) for c in r.cells] for r in rows]


def status(app: TopApp) -> str:
    return app.status_text().plain


def test_the_views_rank_what_the_recording_holds_and_digits_switch_them(recording):
    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            rows = cells(app, "blockers")
            assert [r[0] for r in rows] == ["Waiting for CPU", "mutex contention: cgroup_kn_lock_live",
                                            "Reading from a pipe"], rows
            assert rows[2][1] == "250.00ms"  # (1+2+3+4) x 3 x 100 ms over 12 s
            assert "intervals 0..11 of 0..11" in status(app) and "totals exact: waker_map_full=2" in status(app)
            await pilot.press("2")
            assert app.active_view().name == "tasks"
            assert cells(app, "tasks")[0][0] in ("hog", HOSTILE.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e"))
            await pilot.press("3")
            locks = cells(app, "locks")
            assert locks[0][0] == "cgroup_mutex" and locks[0][1] == "mutex" and locks[0][2] == "72"
            await pilot.press("5")
            assert [r[0] for r in cells(app, "cpus")] == ["cpu0", "cpu1"]
            await pilot.press("4")
            assert "--probes +slab" in str(app.query_one("#empty-slab", Static).render())
    run(go())


def test_a_wide_terminal_widens_the_name_columns_and_a_narrow_one_keeps_them(recording):
    """The Blockers' cause and the Locks' lock name take a wide terminal's spare cells (their ends name the lock,
    the caller, the work: "rwsem contention: file_rwsem (fil..." at 120 columns) as far as their longest names
    need, and the blockers' Tasks (who waited) what is left; a column keeps its width while the rows change;
    resized narrow, they are back."""
    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            columns = app.query_one("#table-blockers", DataTable).ordered_columns
            cause, tasks = columns[0], columns[7]
            assert cause.width == 34 and tasks.width == 16
            await pilot.resize_terminal(170, 40)
            await pilot.pause()
            rows = app.rows["blockers"]
            longest = max(r.cells[0].cell_len for r in rows)
            assert longest > 34 and cause.width == longest  # whole, and no wider: the rest is the names'
            table = app.query_one("#table-blockers", DataTable)
            assert 16 < tasks.width <= max(r.cells[7].cell_len for r in rows)
            assert sum(c.get_render_width(table) for c in columns) <= table.size.width - 2  # within the table
            wide = cause.width
            await pilot.press("slash", *"pipe", "enter")  # only a shorter name left: the columns stay
            await pilot.pause()
            assert len(app.rows["blockers"]) == 1 and cause.width == wide
            await pilot.press("escape")
            await pilot.press("3")
            await pilot.pause()
            lock = app.query_one("#table-locks", DataTable).ordered_columns[0]
            assert lock.width == max(32, *(r.cells[0].cell_len for r in app.rows["locks"]))
            await pilot.press("1")
            await pilot.resize_terminal(100, 30)
            await pilot.pause()
            assert cause.width == 34
    run(go())


def test_a_tall_terminal_shows_the_selected_rows_evidence_under_the_table(recording):
    """At 40 rows or more the evidence Enter opens shows under the table, for the row the cursor is on, and
    follows it; `d` hides it and shows it again; a shorter terminal has no room for it."""
    def pane(app) -> str:
        return str(app.query_one(f"#preview-body-{app.active_view().name}", Static).render())

    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            tabs = app.query_one("#tabs")
            assert tabs.has_class("previewing") and app.query_one("#preview-blockers").display
            assert pane(app).startswith("Blocker: Waiting for CPU") and "Held up by" in pane(app)
            # measured at the run queue, with no stack of its own: not "named by stack"
            assert "at the run queue: each wakeup" in pane(app) and "named by" not in pane(app)
            assert "a wait for a CPU has no stack of its own" in pane(app)
            await pilot.press("down")
            await pilot.pause()
            assert pane(app).startswith("Blocker: mutex contention: cgroup_kn_lock_live")
            await pilot.press("3")
            await pilot.pause()
            assert pane(app).startswith("Lock: cgroup_mutex") and "Contention points" in pane(app)
            await pilot.press("d")
            await pilot.pause()
            assert not tabs.has_class("previewing") and not app.query_one("#preview-locks").display
            await pilot.press("d")
            await pilot.pause()
            assert app.query_one("#preview-locks").display
            await pilot.resize_terminal(120, 30)
            await pilot.pause()
            assert not tabs.has_class("previewing") and not app.query_one("#preview-locks").display
    run(go())


def test_a_wide_windows_evidence_is_gathered_in_a_thread_once_the_cursor_rests(recording, monkeypatch):
    """The detail pane of a window of many waits (minutes of a recording: a blocker's evidence took 0.1-1.7 s
    to gather) says it is gathering, gathers it in a thread once the cursor has rested, and shows it if the
    cursor is still on that row; the screen answers keys meanwhile."""
    import stallscope.tui.app as app_module

    monkeypatch.setattr(app_module, "PREVIEW_INLINE", 0)  # the fixture's window counts as a wide one

    def pane(app) -> str:
        return str(app.query_one("#preview-body-blockers", Static).render())

    async def settled(pilot, start: str) -> str:
        for _ in range(500):
            await pilot.pause(0.01)
            if pane(pilot.app).startswith(start):
                return pane(pilot.app)
        raise AssertionError(pane(pilot.app))

    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await _shown(pilot)
            await pilot.pause()
            assert pane(app).startswith(("gathering the evidence of intervals 0..11", "Blocker: Waiting for CPU"))
            assert "Held up by" in await settled(pilot, "Blocker: Waiting for CPU")
            await pilot.press("down", "down")  # past the second row before it rests: the third's is gathered
            assert pane(app).startswith("gathering the evidence")
            await settled(pilot, "Blocker: Reading from a pipe")
            await pilot.press("enter")  # the detail screen at once, its evidence gathered in a thread too
            assert isinstance(app.screen, DetailScreen)
            for _ in range(500):
                await pilot.pause(0.01)
                text = str(app.screen.query(Static).last().render())
                if "gathering" not in text:
                    break
            assert text.startswith("Reading from a pipe") and "anon_pipe_read" in text, text
    run(go())


def test_hostile_names_show_as_their_characters_never_as_markup_or_escapes(recording):
    shown = HOSTILE.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e")

    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(200, 40)) as pilot:
            await pilot.pause()
            await pilot.press("2")
            names = [r[0] for r in cells(app, "tasks")]
            assert shown in names, names
            await pilot.press("1")
            import html

            svg = html.unescape(app.export_screenshot()).replace("\xa0", " ")
            assert "[bold red]x[/]" in svg  # drawn as characters (the cell is cut at its width)
            assert "\x1b" not in svg and "\u202e" not in svg
            await pilot.press("down", "enter")
            assert isinstance(app.screen, DetailScreen)
            body = app.screen.query(Static).last().render()
            assert shown in str(body)
    run(go())


def test_sort_filter_and_drill_down(recording):
    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.click("#table-blockers", offset=(3, 0))  # the Cause header: alphabetical
            assert [r[0] for r in cells(app, "blockers")] == ["mutex contention: cgroup_kn_lock_live",
                                                              "Reading from a pipe", "Waiting for CPU"]
            await pilot.click("#table-blockers", offset=(3, 0))  # again: reversed
            assert cells(app, "blockers")[0][0] == "Waiting for CPU"
            await pilot.press("s", "s", "s", "s", "s")  # Wait/s, Share, Max, p99, then Count: largest first
            assert app.sorts["blockers"] == (5, False) and cells(app, "blockers")[0][0] == "Waiting for CPU"
            await pilot.press("slash", *"pipe", "enter")
            assert [r[0] for r in cells(app, "blockers")] == ["Reading from a pipe"]
            await pilot.press("enter")
            assert isinstance(app.screen, DetailScreen)
            text = str(app.screen.query(Static).last().render())
            assert "anon_pipe_read" in text and "woken by sleeper[100]" in text and "reader[101]" in text
            await pilot.press("escape")
            assert not isinstance(app.screen, DetailScreen)
            await pilot.press("escape")  # clears the filter
            assert len(cells(app, "blockers")) == 3
    run(go())


def test_replay_steps_an_interval_widens_a_range_and_jumps_to_the_ends(recording):
    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("end")
            assert app.current_window() == (INTERVALS - 1, INTERVALS - 1)
            assert f"window: interval {INTERVALS - 1} of 0..{INTERVALS - 1}" in status(app)
            pipe = lambda: next(r for r in cells(app, "blockers") if r[0] == "Reading from a pipe")  # noqa: E731
            assert pipe()[1] == "400.00ms"  # interval 11: k = 4
            await pilot.press("left")
            assert app.current_window() == (10, 10) and pipe()[1] == "300.00ms"
            await pilot.press("shift+left", "shift+left")
            assert app.current_window() == (8, 10) and pipe()[1] == "200.00ms"  # (100 + 200 + 300 ms) / 3 s
            await pilot.press("home")
            assert app.current_window() == (0, 0) and pipe()[1] == "100.00ms"
            await pilot.press("w")  # the whole recording again
            assert app.current_window() == (0, INTERVALS - 1)
    run(go())


def test_a_range_is_folded_in_a_thread_while_the_screen_answers_keys(recording, monkeypatch):
    """A range not folded yet is folded in a thread: the window shown stays, the status line says which is
    being folded, keys work meanwhile; a range asked for while another is folded replaces it; when done,
    it is shown. The whole recording's snapshot stays cached (`w` shows it at once)."""
    from stallscope.analyzer.timeline import WindowFold

    gate, entered, adds = __import__("threading").Event(), __import__("threading").Event(), []
    add = WindowFold.add

    def held_add(self, count=1):
        adds.append((self.first, self.last))
        entered.set()
        gate.wait(10)
        return add(self, count)

    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            whole = app.timeline.cached(0, INTERVALS - 1)
            assert whole is not None
            await pilot.press("end")
            monkeypatch.setattr(WindowFold, "add", held_add)
            app.action_widen(-1)  # as shift+left does, without the pilot's wait for the fold's end
            await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
            last = INTERVALS - 1
            assert app.snapshot.first == app.snapshot.last == last  # the window shown stays meanwhile
            assert f"folding intervals {last - 1}..{last}" in status(app)
            await pilot.press("2")  # the screen answers
            assert app.active_view().name == app.views[1].name
            app.action_widen(-1)  # a wider range asked for while the first is folded
            assert f"folding intervals {last - 2}..{last}" in status(app)
            gate.set()
            for _ in range(100):
                await pilot.pause(0.05)
                if app.folding is None:
                    break
            assert (app.snapshot.first, app.snapshot.last) == (last - 2, last)
            assert "folding" not in status(app)
            assert (last - 2, last) in adds
            for i in range(INTERVALS):  # many windows since: the whole recording's stays
                app.timeline.window(i, i)
            assert app.timeline.cached(0, last) is whole
    run(go())


class FakeApplier:
    def __init__(self):
        self.applied, self.undone = [], 0

    def check_same_task(self, action):
        if action.get("tid") == 4:
            raise StallscopeError("thread 4 is now named '[bold red]x'", "record again")

    def current_state(self, action):
        return {"nice": 0}

    def apply(self, action):
        self.applied.append(action)
        return {"before": {"nice": 0}}

    def undo(self):
        self.undone += 1
        return {"action": {"type": "nice"}, "before": {"nice": 0}}


def _fix(tid: int) -> Recommendation:
    return Recommendation("priority", f"reader[{tid}]", "reader waits for a CPU behind the hogs", ("p99 8 ms",),
                          f"renice -n -5 -p {tid}", "the hogs run less", "diff before and after", RECOMMENDED, True,
                          {"type": "nice", "tid": tid, "start_time_ns": 1, "comm": "reader", "nice": -5})


def test_apply_asks_with_the_exact_command_then_applies_and_undo_restores(recording, monkeypatch):
    import stallscope.analyzer.timeline as timeline

    monkeypatch.setattr(timeline, "recommend", lambda model, tasks=None: [_fix(101), _fix(4)])
    applier = FakeApplier()

    async def go():
        app = TopApp(RecordingSource(recording), applier=applier)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("7")
            await pilot.press("a")
            assert isinstance(app.screen, ConfirmApply) and app.screen.command == "renice -n -5 -p 101"
            assert "restore nice = 0" in app.screen.undo
            await pilot.press("n")
            assert applier.applied == []
            await pilot.press("a", "y")
            assert [a["tid"] for a in applier.applied] == [101]
            await pilot.press("u")
            assert applier.undone == 1
            await pilot.press("down", "a")  # a task that is gone: refused before asking
            assert not isinstance(app.screen, ConfirmApply) and len(applier.applied) == 1
            said = [n for n in app._notifications if "now named" in n.message]
            assert said and "[bold red]x" in said[-1].message and not said[-1].markup  # a name, not markup
    run(go())


class FakeLive:
    """A live source fed by the test: what LiveSource hands over, without the kernel."""

    live = True

    def __init__(self, meta):
        self.meta = meta
        self.timeline = Timeline(meta, keep=600, live=True)
        self.pending: list[Event] = []
        self.stopped = False

    def start(self):
        pass

    def push(self, iv, window: int = 0):
        """`window`: with the snapshot of the last `window` intervals, as LiveSource hands over the view's."""
        self.pending.append(Event("interval", iv, window=window))

    def events(self):
        out, self.pending = self.pending, []
        for ev in out:
            tl = self.timeline
            tl.add(ev.payload)
            if ev.window:
                w = tl.fold_window(tl.last_index - ev.window + 1, tl.last_index)
                w.add(ev.window)
                tl.hold(w.snapshot())
        return out

    def stop(self):
        self.stopped = True


def test_live_shows_the_newest_interval_pause_freezes_it_and_collection_goes_on():
    async def go():
        ivs = tui_intervals()
        src = FakeLive(tui_meta())
        app = TopApp(src, refresh_s=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            src.push(ivs[0])
            await pilot.pause(0.2)
            assert app.current_window() == (0, 0)
            src.push(ivs[1])
            await pilot.pause(0.2)
            assert app.current_window() == (1, 1)
            await pilot.press("p")
            assert "PAUSED" in status(app)
            src.push(ivs[2])
            src.push(ivs[3])
            await pilot.pause(0.2)
            assert app.current_window() == (1, 1) and src.timeline.last_index == 3  # collected meanwhile
            await pilot.press("question_mark")  # help over a paused view; collection still goes on
            src.push(ivs[4])
            await pilot.pause(0.2)
            assert src.timeline.last_index == 4
            await pilot.press("escape", "left")
            assert app.current_window() == (0, 0)
            await pilot.press("p")
            await pilot.pause(0.2)
            assert app.current_window() == (4, 4)
            await pilot.press("2")  # the Tasks view: its rows' data made in the source's thread from now on
            assert src.reads == ("tasks",)
            await pilot.press("1")
            assert src.reads == ("waiters",)
            await pilot.press("w")
            await pilot.pause(0.2)
            # the source folds the window in its thread: meanwhile the newest interval, and the status says so
            assert (app.snapshot.first, app.snapshot.last) == (4, 4) and "folding the last 10 intervals" in status(app)
            src.push(ivs[5], window=10)  # the window comes with the next interval
            await pilot.pause(0.2)
            assert (app.snapshot.first, app.snapshot.last) == (0, 5)  # the last 10 intervals: all 6 there are
            assert "folding" not in status(app)
            await pilot.press("q")
        assert src.stopped
    run(go())


def test_a_newer_intervals_detail_pane_is_drawn_with_its_table_not_a_frame_later(monkeypatch):
    """Newer data redraw the table and the detail pane under it together: one frame, where a pane asked for after
    the table's frame cost a frame more every time it was redrawn."""
    import stallscope.tui.app as app_module

    monkeypatch.setattr(app_module, "PREVIEW_EVERY_S", 0.0)  # each interval redraws the pane

    async def go():
        ivs = tui_intervals()
        src = FakeLive(tui_meta())
        app = TopApp(src, refresh_s=60)
        async with app.run_test(size=(120, 40)) as pilot:
            pane = lambda: str(app.query_one("#preview-body-blockers", Static).render())  # noqa: E731
            src.push(ivs[0])
            app.poll()
            await pilot.pause(0.1)
            assert "interval 0" in pane(), pane()
            src.push(ivs[1])
            app.poll()  # no frame drawn since: the pane is the newer interval's already
            assert "interval 1" in pane(), pane()
            await pilot.press("q")
    run(go())


def test_a_rows_evidence_keeps_the_status_line_in_view_and_says_which_window_it_is_of():
    async def go():
        ivs = tui_intervals()
        src = FakeLive(tui_meta())
        app = TopApp(src, refresh_s=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            src.push(ivs[0])
            await pilot.pause(0.2)
            await pilot.press("enter")
            assert isinstance(app.screen, DetailScreen)
            title = str(app.screen.query_one("#detail-title", Static).render())
            assert "interval 0 (frozen" in title, title
            shown = lambda: str(app.screen.query_one("#status", Static).render())  # noqa: E731
            assert "window: interval 0 of 0..0" in shown()
            src.push(ivs[1])  # collection goes on behind the evidence: the status line says so
            await pilot.pause(0.3)
            assert "window: interval 1 of 0..1" in shown(), shown()
            assert "interval 0 (frozen" in str(app.screen.query_one("#detail-title", Static).render())
            await pilot.press("escape")
            await pilot.pause(0.2)
            assert not isinstance(app.screen, DetailScreen) and app.current_window() == (1, 1)
            assert "window: interval 1 of 0..1" in str(app.query_one("#status", Static).render())
            await pilot.press("q")
    run(go())


def test_a_process_or_cgroup_row_opens_its_threads_evidence(recording):
    """Grouped by process or cgroup, a row had no evidence ("nothing selected", Enter did nothing)."""
    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("2", "g")
            assert app.views[1].group == "process"
            first = cells(app, "tasks")[0]
            await pilot.press("enter")
            assert isinstance(app.screen, DetailScreen)
            title = str(app.screen.query_one("#detail-title", Static).render())
            body = str(app.screen.query(Static).last().render())
            assert title.startswith(f"Process: {first[0].rsplit(' (', 1)[0]}[{first[1]}]"), title
            assert f"waiting         {first[2]}/s" in body, body  # the row's figure, summed over its threads
            assert "Causes (its threads' summed)" in body and "Threads, the most waiting first" in body
            await pilot.press("escape", "g")  # by cgroup
            await pilot.press("enter")
            assert isinstance(app.screen, DetailScreen)
            assert str(app.screen.query_one("#detail-title", Static).render()).startswith("Cgroup: ")
    run(go())


def test_a_blockers_evidence_lists_its_tasks_with_their_wait_the_most_first(recording):
    from stallscope.analyzer.units import fmt_ns

    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            b = app.rows["blockers"][0].item
            await pilot.press("enter")
            body = str(app.screen.query(Static).last().render()).splitlines()
            at = body.index(f"Tasks ({len(b.tasks):,}), the most waiting first")
            listed = body[at + 1:at + 1 + min(len(b.tasks), 20)]
            assert list(b.task_ns) == sorted(b.task_ns, reverse=True) and sum(b.task_ns) == pytest.approx(b.total_ns, 1e-6)
            for line, tid, ns in zip(listed, b.tasks, b.task_ns):
                assert line.split()[0] == fmt_ns(ns) and line.endswith(f"[{tid.pid}]"), line
    run(go())


def test_the_help_names_every_view_with_its_key(recording):
    from stallscope.tui.app import HelpScreen

    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            text = "\n".join(str(w.render()) for w in app.screen.query(Static))
            for i, v in enumerate(app.views, 1):
                assert f"{i} {v.title}" in text, (v.title, text)
            assert "8 Devices" in text
    run(go())


def test_a_fixs_numbers_with_long_labels_keep_a_gap_before_their_values(recording):
    from stallscope.analyzer.recommend import Fact
    from stallscope.tui import detail

    fix = replace(_fix(101), facts=(Fact("running or runnable", 185.45, ""), Fact("CPUs", 2, "")))
    lines = detail.fix_detail(None, fix, 1).plain.splitlines()
    numbers = lines[lines.index("Numbers") + 1:lines.index("Numbers") + 3]
    assert numbers == ["  running or runnable  185.45", "  CPUs                 2"], numbers


def test_a_paused_live_view_widened_is_folded_and_shown(monkeypatch):
    """Paused at interval 5, `w` asks for the last 10 intervals (reaching before the first held): folded in a
    thread, once although intervals keep coming meanwhile (each asks for the window again), then shown
    clipped to what is held, and the status line no longer says it is folding."""
    import threading

    from stallscope.analyzer.timeline import WindowFold

    gate, begun = threading.Event(), []
    add = WindowFold.add

    def held_add(self, count=1):
        if self._next == 0:
            begun.append((self.first, self.last))
        gate.wait(10)
        return add(self, count)

    async def go():
        ivs = tui_intervals()
        src = FakeLive(tui_meta())
        app = TopApp(src, refresh_s=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            for iv in ivs[:6]:
                src.push(iv)
            await pilot.pause(0.3)
            monkeypatch.setattr(WindowFold, "add", held_add)
            await pilot.press("p")
            app.action_window()  # as `w` does, without the pilot's wait for the fold's end
            for iv in ivs[6:8]:
                src.push(iv)
                await pilot.pause(0.2)
            assert "folding intervals 0..5" in status(app)
            gate.set()
            for _ in range(100):
                await pilot.pause(0.05)
                if app.folding is None:
                    break
            assert (app.snapshot.first, app.snapshot.last) == (0, 5)
            assert "intervals 0..5 of 0..7" in status(app) and "folding" not in status(app)
            assert begun == [(0, 5)]
            await pilot.press("q")
    run(go())


def test_a_wait_still_going_shows_in_max_with_a_plus_and_in_the_details():
    """C has been waiting on its kernel mutex for 4.5 s at the window's end (a wait handed over by the last
    dump): its cause's Max is that, marked as still going, and sorts as it; the cause's detail and the task's
    say so. B has been reading its pipe as long: a reader that got nothing for a second and more is idle
    ("Reading from a pipe, nothing came"), not ranked, and its cause's Max has no "+"."""
    from stallscope.analyzer.sample import OngoingWait, WaitSince

    from tui_fixture import MUTEX, B, C

    async def go():
        ivs = tui_intervals()
        stuck = OngoingWait(C, 102, 2, MUTEX.id, 0, 0, 0)
        reading = OngoingWait(B, 100, 1, ivs[0].offcpu[1].kstack, 0, 0, 0)
        since = ivs[1].end_ns - 4_500_000_000
        last = replace(ivs[1], offcpu=ivs[1].offcpu + (stuck.charged(500_000_000), reading.charged(500_000_000)),
                       opened=(WaitSince(stuck, since), WaitSince(reading, since)))
        src = FakeLive(tui_meta())
        app = TopApp(src, refresh_s=0.05)
        async with app.run_test(size=(120, 40)) as pilot:
            src.push(ivs[0])
            src.push(last)
            await pilot.pause(0.3)
            assert app.current_window() == (1, 1)
            rows = {r[0]: r for r in cells(app, "blockers")}
            mutex = next(cause for cause in rows if "mutex" in cause)
            assert rows[mutex][3] == "4.50s+"
            assert not any(r[3].endswith("+") for cause, r in rows.items() if cause != mutex)
            assert "Reading from a pipe, nothing came" not in rows and not rows["Reading from a pipe"][3].endswith("+")
            await pilot.press("p", "slash", *"mutex", "enter", "enter")  # paused: the window stays
            assert isinstance(app.screen, DetailScreen)
            assert "1 at the window's end, the longest 4.50s so far" in str(app.screen.query(Static).last().render())
            await pilot.press("escape", "escape", "2", "slash", *"link", "enter", "enter")
            text = str(app.screen.query(Static).last().render())
            assert f"blocked now     4.50s so far, in {mutex}" in text, text
            await pilot.press("escape", "escape", "slash", *"reader", "enter", "enter")
            text = str(app.screen.query(Static).last().render())
            assert "blocked now     4.50s so far, in Reading from a pipe, nothing came" in text, text
    run(go())


def test_analyzer_imports_neither_textual_nor_jinja2():
    import subprocess

    code = ("import sys, pkgutil, importlib, stallscope.analyzer as a\n"
            "for m in pkgutil.iter_modules(a.__path__):\n"
            "    importlib.import_module('stallscope.analyzer.' + m.name)\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'jinja2', 'rich')]\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_data_model_and_help_need_no_elf_reader():
    """pyelftools is for naming frames while recording: the model, the analyses and `--help` do without it."""
    import subprocess

    code = ("import sys\n"
            "import stallscope.analyzer.export, stallscope.analyzer.timeline, stallscope.cli\n"
            "stallscope.cli.build_parser()\n"
            "sys.exit(1 if 'elftools' in sys.modules else 0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


VIEWS = ("1", "2", "3", "4", "5", "6", "7", "8")


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
@pytest.mark.parametrize("key", VIEWS)
def test_each_view_looks_as_it_did(snap_compare, recording, key, size, tmp_path):
    """SVG snapshots (pytest-textual-snapshot): `pytest --snapshot-update` after a deliberate change."""
    assert snap_compare(_replay_app(recording, tmp_path), press=[key], terminal_size=size, run_before=_shown)


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
@pytest.mark.parametrize("keys", [("enter",), ("2", "g", "enter"), ("3", "enter")], ids=["blocker", "process", "lock"])
def test_a_rows_evidence_looks_as_it_did(snap_compare, recording, keys, size, tmp_path):
    """The evidence screen under its status line: a blocker's, a process's (Tasks by process), a lock's."""
    assert snap_compare(_replay_app(recording, tmp_path), press=list(keys), terminal_size=size, run_before=_shown)


def _replay_app(recording: str, tmp_path: Path) -> TopApp:
    """The screen over a copy of the recording whose status line reads the same on every run (it shows the path)."""
    import shutil

    fixed = tmp_path / "replay.stall"
    shutil.copy(recording, fixed)
    return TopApp(RecordingSource(str(fixed)), title="replay tui.stall")


async def _shown(pilot) -> None:
    """The recording read and its window shown before a key is pressed: the source reads it in a thread, which
    the pilot's pause does not wait for (on a loaded machine the screenshot caught the view still reading)."""
    for _ in range(2000):
        if pilot.app.snapshot is not None:
            # and laid out: the picture is of the screen settled, not of a frame before the layout its refresh asked
            # for (a loaded machine's caught the Blockers view's summary, grown to two lines, still one line high)
            pilot.app.screen.refresh(layout=True)
            await pilot.pause()
            return
        await pilot.pause(0.01)
    raise AssertionError("the recording's window was not shown in 20 s")


def test_a_timeline_keeps_few_snapshots_and_its_series_read_the_same_from_digests():
    """A snapshot holds its model (tens of MB for an interval of thousands of threads under load): a
    live timeline keeps `cache_size` of them, not one per interval held, and the series the sparklines
    plot read the same values from what an evicted interval's snapshot leaves (its Digest)."""
    meta, ivs = tui_meta(), tui_intervals()
    small, large = Timeline(meta, keep=600, live=True, cache_size=2), Timeline(meta, keep=600, live=True, cache_size=64)
    for iv in ivs:
        for tl in (small, large):
            tl.add(iv, snapshot=None)
            tl.task_info.update({t.task: t for t in iv.task_info})
            snap = tl.window(iv.index, iv.index)
            assert snap.ranked is not None
    assert len(small._cache) <= 2 and len(small._digests) >= len(ivs) - 2
    for value in (lambda s: {b.cause: b.total_ns / s.seconds for b in s.ranked}, lambda s: s.signals["runnable"],
                  lambda s: len(s.io)):
        assert small.series(0, len(ivs) - 1, value) == large.series(0, len(ivs) - 1, value)
    assert len(small._cache) <= 2


def test_a_live_timeline_holds_fewer_intervals_when_they_hold_many_records_and_its_series_go_on():
    """`max_records` bounds what the intervals held take (top under load: tens of thousands of records an
    interval); the oldest go first, and their digests keep the sparklines' minute."""
    meta, ivs = tui_meta(), tui_intervals()
    from stallscope.analyzer.timeline import records

    per = max(records(iv) for iv in ivs)
    tl, whole = Timeline(meta, keep=600, live=True, max_records=3 * per), Timeline(meta, keep=600, live=True)
    for iv in ivs:
        for t in (tl, whole):
            t.add(iv)
            t.task_info.update({x.task: x for x in iv.task_info})
            assert t.window(iv.index, iv.index).ranked is not None
    assert len(tl.intervals) <= 3 < len(ivs)
    assert tl.earliest == 0 and tl.first_index > 0
    value = (lambda s: {b.cause: b.total_ns / s.seconds for b in s.ranked})
    assert tl.series(0, len(ivs) - 1, value) == whole.series(0, len(ivs) - 1, value)


def test_the_budgets_level_outlives_the_interval_that_stepped_it():
    """A step of the overhead budget is carried by the interval where it happened: once a live timeline
    forgets that interval, the status line still says the level in force."""
    from stallscope.tui.app import _level_before

    meta, ivs = tui_meta(), tui_intervals()
    tl = Timeline(meta, keep=3, live=True)
    for iv in ivs:
        tl.add(iv)
    forgotten = [c for iv in ivs if iv.index < tl.first_index for c in iv.tuning]
    assert forgotten and not any(iv.tuning for iv in tl.intervals)  # the fixture's steps all forgotten
    assert tl.tuning_before == forgotten[-1] and forgotten[-1].to.level > 0
    assert _level_before(tl, tl.window(tl.first_index, tl.last_index)) == forgotten[-1].to.level
    # with the steps held, each window's is the last one before it
    whole = Timeline(meta, live=True)
    for iv in ivs:
        whole.add(iv)
    for first in range(whole.first_index, whole.last_index + 1):
        steps = [c for iv in ivs if iv.index < first for c in iv.tuning]
        assert whole.step_before(first) == (steps[-1] if steps else None)


def test_a_count_wider_than_its_column_is_shown_in_three_figures_not_cut():
    """The views' count columns are 8 wide: 17,116,170 was cut to `17,116,1`, another number."""
    from stallscope.tui.cells import count

    shown = {n: count(n).plain for n in (999_999, 1_000_000, 17_116_170, 999_600_000, 2_501_750_123)}
    assert shown == {999_999: "999,999", 1_000_000: "1.00M", 17_116_170: "17.1M", 999_600_000: "1.00G",
                     2_501_750_123: "2.50G"}
    assert all(len(text) <= 8 for text in shown.values())


def test_a_replay_read_in_the_background_shows_its_progress_then_the_same_screen(recording, monkeypatch):
    """`top --replay` reads the file in a thread: the screen comes at once and says how far the reading
    is; then the same ranking as a recording read before the screen; `q` while it reads quits."""
    import threading

    gate = threading.Event()
    real = RecordingSource._read

    def held(self, rec):
        assert gate.wait(30)
        return real(self, rec)

    monkeypatch.setattr(RecordingSource, "_read", held)

    async def go():
        source = RecordingSource(recording, background=True)
        assert source.timeline is None and source.total == 12
        app = TopApp(source)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            assert "reading the recording: 0 of 12 intervals" in status(app), status(app)
            assert cells(app, "blockers") == []
            await pilot.press("right", "w", "s")  # keys while it reads: nothing to move, no error
            gate.set()
            assert source.join(30) and source.error is None
            app.poll()
            await pilot.pause()
            rows = cells(app, "blockers")
            assert [r[0] for r in rows] == ["Waiting for CPU", "mutex contention: cgroup_kn_lock_live",
                                            "Reading from a pipe"], rows
            assert "intervals 0..11 of 0..11" in status(app)
        # the whole recording's fold says how far it is, and stops at its next step when the view quits
        folded: list[str] = []
        fold_whole = RecordingSource._fold_whole
        resume = threading.Event()
        resume.set()

        def watched(self, tl):
            fold = tl.fold_window(tl.first_index, tl.last_index)
            add = fold.add

            def step(n):
                folded.append(self.progress)
                assert resume.wait(30)
                return add(n)
            fold.add = step
            tl.fold_window = lambda first, last: fold
            return fold_whole(self, tl)

        monkeypatch.setattr(RecordingSource, "_fold_whole", watched)
        monkeypatch.setattr("stallscope.sources.FOLD_STEP", 5)
        source = RecordingSource(recording, background=True)
        source.start()
        assert source.join(30) and source.error is None
        assert folded == ["folding the whole recording: 0 of 12 intervals...",
                          "folding the whole recording: 5 of 12 intervals...",
                          "folding the whole recording: 10 of 12 intervals..."], folded
        source.stop()
        folded.clear()
        resume.clear()
        source = RecordingSource(recording, background=True)
        source.start()
        while not folded:  # the view goes while the fold runs: it stops at its next step
            await asyncio.sleep(0.01)
        source.stop()
        resume.set()
        assert source.join(30) and source.timeline is None and source._rec is None and len(folded) == 1
        # quit while it reads: the thread stops at its next interval and closes the file
        gate.clear()
        source = RecordingSource(recording, background=True)
        app = TopApp(source)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("q")
        gate.set()
        assert source.join(30) and source.timeline is None and source._rec is None
    run(go())


def test_a_replay_that_cannot_be_read_in_the_background_says_why(recording, monkeypatch):
    def damaged(self, rec):
        raise StallscopeError("tui.stall is damaged: database disk image is malformed", "record again")

    monkeypatch.setattr(RecordingSource, "_read", damaged)

    async def go():
        source = RecordingSource(recording, background=True)
        app = TopApp(source)
        async with app.run_test(size=(120, 40)) as pilot:
            assert source.join(30)
            app.poll()
            await pilot.pause()
            note = str(app.query_one("#notice", Static).render())
            assert "reading stopped: tui.stall is damaged" in note, note
            assert "reading the recording" not in status(app)
    run(go())


def test_a_long_name_loses_its_middle_not_its_end():
    """Names that differ at their ends (the caller, the lock, the process id) stay apart in a narrow column, and a
    blocker's dim estimate note gives way to the name; text that fits, or whose characters are wider, is left as it is."""
    from stallscope.tui.cells import elide_middle, lit

    a, b = ("Waiting for an RCU grace period in __x64_sys_membarrier",
            "Waiting for an RCU grace period in sync_runqueues_membarrier_state")
    shown = [elide_middle(lit(n), 34) for n in (a, b)]
    assert [s.cell_len for s in shown] == [34, 34] and shown[0].plain != shown[1].plain
    assert shown[0].plain == "Waiting for a…__x64_sys_membarrier", shown[0].plain
    def noted(name: str) -> Text:
        cell = lit(name)
        cell.append(" ~27% est", style="dim")
        return cell

    # a blocker's note gives way to its name: its word first, then the note, before the name loses a character;
    # a name too long alone keeps the note's short form
    cell = elide_middle(noted(b), 34)
    assert cell.plain == "Waiting for…_membarrier_state ~27%" and cell.cell_len == 34, cell.plain
    assert [(cell.plain[s.start:s.end], str(s.style)) for s in cell.spans] == [(" ~27%", "dim")]
    assert elide_middle(noted("Waiting for a file lock (fcntl)"), 37).plain == "Waiting for a file lock (fcntl) ~27%"
    alone = elide_middle(noted("Waiting for a file lock (fcntl)"), 34)
    assert alone.plain == "Waiting for a file lock (fcntl)" and not alone.spans and alone.no_wrap
    assert elide_middle(noted("Waiting for CPU"), 34).plain == "Waiting for CPU ~27% est"
    assert elide_middle(lit("Waiting for CPU"), 34).plain == "Waiting for CPU"
    wide = lit("名" * 40)
    assert elide_middle(wide, 34) is wide
    # a lock with its place: the lock kept whole, the place shortened, where the lock fits beside the place's end
    assert elide_middle(lit("&futex_hash_bucket->lock (in a kmalloc-cg-2k object)"), 35).plain == (
        "&futex_hash_bucket->lock (… object)")
    assert elide_middle(lit("&futex_hash_bucket->lock (in a kmalloc-cg-2k object)"), 30).plain == (
        "&futex_hash…lloc-cg-2k object)")
    # two futexes of one process differ in their addresses' last digits: those stay, with the process
    shown = [elide_middle(lit(f"futex 0x563a5ea1{tail} (sysbench[28441])"), 32).plain for tail in ("dd10", "ee10")]
    assert shown == ["futex 0x…1dd10 (sysbench[28441])", "futex 0x…1ee10 (sysbench[28441])"], shown
    assert elide_middle(lit("futex 0x563a5ea1dd10 (sysbench[28441])"), 24).plain == "futex 0x5…sbench[28441])"
    # a longer process name is shortened too: the address's tail and the process id both stay
    assert elide_middle(lit("futex 0x7f49a1b2c3d4 (stress-ng-futex[22135])"), 32).plain == (
        "futex 0x…b2c3d4 (stress…[22135])")


def test_futex_waits_that_are_not_for_a_lock_come_after_the_locks_whatever_the_sort(tmp_path):
    """A timed futex poll waits longest of all, yet it is not a contended lock: the Locks view lists it after the
    locks under every sort, as `stallscope locks` lists such waits apart."""
    from stallscope.analyzer.sample import FutexDelta
    from synthetic import A, write_recording

    ivs = tui_intervals()
    poll = FutexDelta(A, A.pid, 0x7F00_0000_1000, 0, 0, 0, "", "", 100, 9 * 10**9, 95_000_000, 85_000_000, flags=1,
                      woken_irq=100)
    ivs[3] = replace(ivs[3], futex=(poll,))
    path = tmp_path / "poll.stall"
    write_recording(path, tui_meta(), ivs)

    async def go():
        app = TopApp(RecordingSource(str(path)))
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            await pilot.press("3")
            for _ in range(len(app.active_view().columns)):
                rows = cells(app, "locks")
                assert rows[-1][1] == "futex:poll" and rows[0][1] != "futex:poll", rows
                await pilot.press("s")
    run(go())


def test_lost_counters_are_red_and_those_after_which_totals_stay_exact_apart(recording):
    """The status line's lost-data counters: red, after LOST, where events or totals were lost; apart, in yellow,
    after "totals exact", those after which every total stays exact (a waker, a stack went)."""
    from stallscope.analyzer.data_loss import TOTALS_KEPT, totals_kept

    assert totals_kept("waker_map_full") and totals_kept("locks.stack_errors") and totals_kept("switch_in_unseen")
    assert not totals_kept("task_map_full") and not totals_kept("contention_begin.recursion_misses")
    assert not totals_kept("locks.lock_map_full") and "recursion_misses" not in TOTALS_KEPT

    def styles(app: TopApp) -> dict[str, str]:
        text = app.status_text()
        return {text.plain[s.start:s.end].strip(", "): str(s.style) for s in text.spans
                if text.plain[s.start:s.end].strip(", ")}

    async def go(lost: dict[str, int]):
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            snap = app.snapshot
            snap.__dict__["lost"] = lost  # the snapshot's cached property, as a window with these losses has it
            return styles(app)

    only_kept = run(go({"waker_map_full": 2, "switch_in_unseen": 5}))
    assert "LOST:" not in only_kept and only_kept["totals exact:"] == "bold yellow"
    assert only_kept["switch_in_unseen=5, waker_map_full=2"] == "yellow"
    both = run(go({"waker_map_full": 2, "locks.lock_map_full": 7}))
    assert both["LOST:"] == "bold red" and both["lock_map_full=7"] == "bold red"
    assert both["totals exact:"] == "bold yellow" and both["waker_map_full=2"] == "yellow"


def test_the_status_lines_cost_gives_its_details_up_before_the_lost_counters_on_a_narrow_terminal(recording):
    """The second status row at 80 columns: the cost's parts go, so that the counters after it still show; a wide
    terminal shows them all, and a resize picks again."""
    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(200, 40)) as pilot:
            await pilot.pause()
            wide = app.status_text().plain.split("\n")[1]
            await pilot.resize_terminal(80, 24)
            await pilot.pause()
            return wide, app.status_text().plain.split("\n")[1], str(app.query_one("#status", Static).render())

    wide, narrow, shown = run(go())
    assert "(BPF " in wide and "totals exact: waker_map_full=2" in wide, wide
    assert "(BPF " not in narrow and len(narrow) <= 78 and narrow.endswith("totals exact: waker_map_full=2"), narrow
    assert "totals exact: waker_map_full=2" in shown


def test_a_long_notice_takes_a_second_line_rather_than_losing_its_end(recording):
    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            app.notice = ("+3 s: overhead budget: cost 15.92% of the CPUs is over the 1% budget at the lowest setting: "
                          "what remains is the per-event work that keeps the totals exact")
            app.update_status()
            await pilot.pause()
            long = app.query_one("#notice", Static).size.height
            app.notice = "+3 s: overhead budget: level 1"
            app.update_status()
            await pilot.pause()
            return long, app.query_one("#notice", Static).size.height

    assert run(go()) == (2, 1)


def test_a_view_of_thousands_of_rows_draws_only_the_cells_its_table_shows(recording):
    """A machine of 5,000 threads is 5,000 Tasks rows an interval: each row's cells are made only once it is
    among the rows the table keeps (sorted first, then cut at MAX_ROWS), not for every thread; a filter reads
    every row's cells, as it must to match them. A sort or a filter orders the rows made of the window again
    instead of making them again; the summary says how many rows there are past those shown."""
    from stallscope.tui import app as app_module
    from stallscope.tui.views import Column, Row, View

    made: list[int] = []
    asked: list[int] = []

    class Many(View):
        name, title = "many", "Many"
        columns = (Column("Name", 12, False), Column("Value", 8))

        def rows(self, snap, timeline):
            asked.append(snap.last)
            def cells(i: int):
                made.append(i)
                return (Text(f"thread {i}"), Text(str(i)))
            return [Row(str(i), (f"thread {i}", i), make=lambda i=i: cells(i)) for i in range(2_000)]

    async def go():
        app = TopApp(RecordingSource(recording), views=[Many()])
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            shown = cells(app, "many")
            assert len(shown) == app_module.MAX_ROWS and shown[0] == ["thread 1999", "1999"]
            assert set(made) == set(range(2_000 - app_module.MAX_ROWS, 2_000))  # each refresh: those kept
            summary = str(app.query_one("#summary-many", Static).render())
            assert f"the first {app_module.MAX_ROWS} of 2,000 rows" in summary, summary
            calls = len(asked)
            await pilot.press("s")  # by name, in order: "thread 0" first
            await pilot.pause()
            assert len(asked) == calls and cells(app, "many")[0] == ["thread 0", "0"]
            made.clear()
            app.filters["many"] = "thread 7"
            app.refresh_view()
            assert len(made) == 2_000 and cells(app, "many")[0] == ["thread 7", "7"]
    run(go())

    with pytest.raises(ValueError):
        Row("x", (1,))


def test_the_cursor_stays_on_the_first_row_or_follows_its_item_scrolled_to_before_a_frame(recording):
    """As the ranking moves: a cursor on the first row stays there, on what ranks first now (the top of a live
    ranking is what a user there watches); on another row it follows that row's item, and the table is scrolled to
    show it as it is made again, before a frame is drawn (it was drawn at its top first, then scrolled). In a view
    that does not keep its top (the Fixes), it follows its item from the first row too."""
    from stallscope.tui.views import Column, Row, View

    order = list(range(100))

    class Ranked(View):
        name, title = "ranked", "Ranked"
        columns = (Column("Name", 12, False), Column("Rank", 8))

        def rows(self, snap, timeline):
            return [Row(str(i), (f"item {i}", -pos), make=lambda i=i, pos=pos: (Text(f"item {i}"), Text(str(pos))))
                    for pos, i in enumerate(order)]

    def rerank(item: int, to: int) -> None:
        order.remove(item)
        order.insert(to, item)

    async def go():
        app = TopApp(RecordingSource(recording), views=[Ranked()])
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            table = app.query_one("#table-ranked", DataTable)
            assert cells(app, "ranked")[0][0] == "item 0" and table.cursor_row == 0
            rerank(0, 50)
            app.refresh_view()
            await pilot.pause()
            assert table.cursor_row == 0 and cells(app, "ranked")[0][0] == "item 1" and table.scroll_y == 0
            for _ in range(5):
                await pilot.press("down")
            await pilot.pause()
            followed = order[5]
            rerank(followed, 60)
            app.refresh_view()
            shown = table.scrollable_content_region.height - table.header_height
            assert table.cursor_row == 60 and table.scroll_y <= 60 < table.scroll_y + shown  # before any frame
            scrolled = table.scroll_y
            await pilot.pause()
            assert table.scroll_y == scrolled and cells(app, "ranked")[60][0] == f"item {followed}"
            rerank(followed, 58)  # still in view: the table stays where it is
            app.refresh_view()
            assert table.cursor_row == 58 and table.scroll_y == scrolled

    class Chosen(Ranked):  # as the Fixes: the item under the cursor stays under it, from the first row too
        name, title = "chosen", "Chosen"
        keeps_top = False

    async def chosen():
        order[:] = range(100)
        app = TopApp(RecordingSource(recording), views=[Chosen()])
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            table = app.query_one("#table-chosen", DataTable)
            assert table.cursor_row == 0 and cells(app, "chosen")[0][0] == "item 0"
            rerank(0, 7)
            app.refresh_view()
            await pilot.pause()
            assert table.cursor_row == 7 and cells(app, "chosen")[7][0] == "item 0"

    run(go())
    run(chosen())


def test_a_views_rows_are_added_as_textuals_add_row_adds_them():
    """ViewTable.add_view_rows: the same rows, cells, places, cursor and highlight events as add_row one by one,
    into an empty table and after rows; a key twice and too many cells fail alike."""
    from textual.widgets._data_table import DuplicateKey

    from stallscope.tui.app import ViewTable

    class Host(App):
        def compose(self):
            yield ViewTable(id="a", cursor_type="row")
            yield ViewTable(id="b", cursor_type="row")

        highlighted: list = []

        def on_data_table_row_highlighted(self, event) -> None:
            self.highlighted.append((event.data_table.id, event.cursor_row, event.row_key.value))

    def state(t):
        return ([(k.value, {c.value: v for c, v in cells.items()}) for k, cells in t._data.items()],
                [(k.value, t._row_locations.get(k)) for k in t.rows], [(r.height, r.label, r.auto_height)
                                                                       for r in t.rows.values()],
                sorted(k.value for k in t._new_rows), t.cursor_coordinate, t.row_count)

    async def go():
        app = Host()
        async with app.run_test(size=(80, 20)) as pilot:
            a, b = app.query_one("#a", ViewTable), app.query_one("#b", ViewTable)
            for t in (a, b):
                t.add_columns("x", "y", "z")
            rows = [((Text("1"), Text("2"), Text("3")), "r1"), ((Text("4"), Text("5")), "r2")]
            for cells, key in rows:
                a.add_row(*cells, key=key)
            b.add_view_rows(rows)
            await pilot.pause()
            assert state(a) == state(b)
            more = [((Text("6"),), "r3")]
            a.add_row(*more[0][0], key="r3")
            b.add_view_rows(more)
            b.add_view_rows([])
            assert state(a) == state(b)
            await pilot.pause()
            assert [h[1:] for h in app.highlighted if h[0] == "a"] == [h[1:] for h in app.highlighted if h[0] == "b"]
            assert app.highlighted
            for t, add in ((a, lambda: a.add_row(Text("x"), key="r1")), (b, lambda: b.add_view_rows([((Text("x"),), "r1")]))):
                with pytest.raises(DuplicateKey):
                    add()
            for add in (lambda: a.add_row(*[Text("x")] * 4, key="r9"), lambda: b.add_view_rows([((Text("x"),) * 4, "r9")])):
                with pytest.raises(ValueError):
                    add()

    run(go())


def test_a_table_measures_only_its_columns_sized_to_their_content():
    """A view's table measures the new rows' cells only where a column is sized to its content (width None): the
    fixed columns keep their widths however long their cells, the content-sized one grows to its widest cell, and
    a row of another kind (a label) is measured Textual's way, with the same result."""
    from stallscope.tui.app import ViewTable

    class Host(App):
        def compose(self):
            yield ViewTable(id="t")

    async def go():
        app = Host()
        async with app.run_test(size=(120, 20)) as pilot:
            table = app.query_one(ViewTable)
            fixed = table.add_column(Text("Fixed"), width=6)
            auto = table.add_column(Text("Auto"))
            table.add_row(Text("x" * 40), Text("a" * 9), key="1")
            table.add_row(Text("y"), Text("b" * 23), key="2")
            await pilot.pause()
            assert table.columns[fixed].get_render_width(table) == 6 + 2 * table.cell_padding
            assert table.columns[auto].content_width == 23
            assert table.virtual_size.height == 2 + table.header_height
            table.add_row(Text("z"), Text("c" * 31), key="3", label=Text("row"))  # Textual's own measure
            await pilot.pause()
            assert table.columns[auto].content_width == 31 and table.columns[fixed].width == 6
            assert table.virtual_size.height == 3 + table.header_height
    run(go())


def test_each_window_shown_makes_its_rows_once_and_a_new_width_fits_them_again(recording, monkeypatch):
    """With the detail pane shown, a table is as tall as its rows, and its height changes with the number of
    blockers as intervals come: that is no reason to make its rows again, once a window is enough. A new width
    fits the columns again, from the rows made already."""
    from textual import events
    from textual.geometry import Size

    from stallscope.tui.views import BlockersView

    made: list[int] = []
    rows = BlockersView.rows
    monkeypatch.setattr(BlockersView, "rows", lambda self, snap, tl: made.append(snap.last) or rows(self, snap, tl))

    async def go():
        app = TopApp(RecordingSource(recording))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("home")
            await pilot.pause()
            made.clear()
            table = app.query_one("#table-blockers", DataTable)
            width = table.size.width
            table.post_message(events.Resize(Size(width, 7), Size(width, 7)))  # taller by a row: the same width
            await pilot.pause()
            assert not made
            await pilot.press("right")
            await pilot.pause()
            assert made == [app.snapshot.last]
            flex = table.ordered_columns[BlockersView.flex].width
            await pilot.resize_terminal(160, 40)
            await pilot.pause()
            assert made == [app.snapshot.last]  # fitted again, from the rows made
            assert table.size.width > width and table.ordered_columns[BlockersView.flex].width > flex
    run(go())


def test_a_tables_cells_are_drawn_as_textual_draws_them(recording, monkeypatch):
    """ViewTable draws the views' own cells a short way (tui/app.py `_render_cell`): cell by cell, in every view,
    as the cursor's row and not, the segments are Textual's own, styles and all; the header's too. A hostile name
    (the fixture's HOSTILE) and cells wider than their column are among them."""
    from stallscope.tui.app import ViewTable

    textuals: list[int] = []  # the cells drawn Textual's way, by ViewTable too
    short = 0  # the cells ViewTable drew its own short way
    headers_textual = 0  # the header's cells drawn Textual's way: none, its labels are one line of Text
    textual_way = DataTable._render_cell
    monkeypatch.setattr(DataTable, "_render_cell", lambda *a, **k: textuals.append(1) or textual_way(*a, **k))

    async def go():
        nonlocal short, headers_textual
        app = TopApp(RecordingSource(recording))
        compared = 0
        async with app.run_test(size=(100, 40)) as pilot:
            await pilot.pause()
            for n, v in enumerate(app.views, 1):
                await pilot.press(str(n))
                await pilot.pause()
                table = app.query_one(f"#table-{v.name}", ViewTable)
                for row in range(-1, min(table.row_count, 12)):  # -1: the header
                    base = table._get_row_style(row, table.rich_style)
                    for col, column in enumerate(table.ordered_columns):
                        for width in (column.get_render_width(table), 5):  # as drawn; and narrower than most cells
                            for cursor, hover in ((False, False), (True, False), (False, True)):
                                table._cell_render_cache.clear()
                                before = len(textuals)
                                ours = table._render_cell(row, col, base, width, cursor, hover)
                                short += len(textuals) == before
                                headers_textual += row == -1 and len(textuals) != before
                                table._cell_render_cache.clear()
                                theirs = textual_way(table, row, col, base, width, cursor, hover)
                                assert ours == theirs, (v.name, row, col, width, cursor, hover)
                                compared += 1
        assert compared > 500 and short > 0.9 * compared, (compared, short)  # nearly all the short way
        assert headers_textual == 0
    run(go())


class _OneStatic(App):
    """A screen of one line of text (put_text's tests)."""

    CSS = "Static { height: auto; }"

    def compose(self):
        yield Static("")


def test_a_line_redrawn_lays_the_screen_out_only_when_its_height_may_change(monkeypatch):
    """put_text: the same text is not drawn again; a text of as many lines, each fitting, is drawn without a
    layout (which re-renders the whole screen); one more line, or a line wider than the widget, is laid out, so the
    widget's height follows its text."""
    from stallscope.tui.app import put_text

    async def go():
        app = _OneStatic()
        async with app.run_test(size=(40, 10)) as pilot:
            w = app.query_one(Static)
            w.styles.width = 20
            layouts = []
            update = w.update
            monkeypatch.setattr(w, "update", lambda content, layout=True: (layouts.append(layout),
                                                                             update(content, layout=layout)))
            put_text(w, Text("one"))
            await pilot.pause()
            put_text(w, Text("one"))  # the same: not drawn again
            put_text(w, Text("two"))  # as many lines, fitting: no layout
            await pilot.pause()
            assert layouts == [True, False] and w.size.height == 1
            put_text(w, Text("two\nlines"))  # one more line: laid out, the widget as high as its lines
            await pilot.pause()
            assert layouts[-1] is True and w.size.height == 2
            put_text(w, Text("a line wider than twenty\nx"))  # wraps: laid out, Rich says how high
            await pilot.pause()
            assert layouts[-1] is True and w.size.height == 3
            put_text(w, Text("back to\none"))  # from a wrapped text, laid out again
            await pilot.pause()
            assert layouts[-1] is True and w.size.height == 2
            put_text(w, Text("status", style="bold"), fixed=True)  # a height set in CSS: never laid out
            assert layouts[-1] is False

    run(go())


def test_a_detail_pane_keeps_its_height_while_it_shows_the_same_row(monkeypatch):
    """put_text with `hold`: the text of the same row one line shorter is padded to the height it grew to, and lays
    nothing out; a longer one grows it; another row's text takes its own height."""
    from stallscope.tui.app import put_text

    async def go():
        app = _OneStatic()
        async with app.run_test(size=(40, 10)) as pilot:
            w = app.query_one(Static)
            layouts = []
            update = w.update
            monkeypatch.setattr(w, "update", lambda content, layout=True: (layouts.append(layout),
                                                                             update(content, layout=layout)))
            put_text(w, Text("a\nb\nc"), hold=("blockers", "x"))
            await pilot.pause()
            put_text(w, Text("a\nb"), hold=("blockers", "x"))  # a line fewer: padded, not laid out
            await pilot.pause()
            assert layouts == [True, False] and w.size.height == 3
            assert "".join(s.text for s in w.render_line(2)).strip() == ""
            put_text(w, Text("a\nb\nc\nd"), hold=("blockers", "x"))  # a line more: grows
            await pilot.pause()
            assert layouts[-1] is True and w.size.height == 4
            put_text(w, Text("a"), hold=("blockers", "y"))  # another row: its own height
            await pilot.pause()
            assert layouts[-1] is True and w.size.height == 1

    run(go())


class _LiveTable(App):
    """A ViewTable sized to its rows, under a live source (its height held: ViewTable._sized)."""

    CSS = "ViewTable { height: auto; max-height: 20; }"

    def __init__(self):
        from types import SimpleNamespace

        super().__init__()
        self.source = SimpleNamespace(live=True)

    def compose(self):
        from textual.containers import Vertical

        from stallscope.tui.app import ViewTable

        with Vertical():
            yield ViewTable(id="t")


def test_a_live_tables_height_shrinks_at_most_once_a_hold(monkeypatch):
    """ViewTable: a live view's table with a row fewer keeps its height (blank at its foot, nothing laid out) for
    TABLE_HOLD_S; more rows grow it at once; a key's reorder (release_height) and a replay size it to its rows."""
    from types import SimpleNamespace

    from stallscope.tui import app as A

    def fill(table, n):
        table.clear()
        for i in range(n):
            table.add_row(Text(f"row {i}"), key=str(i))

    async def go():
        app = _LiveTable()
        async with app.run_test(size=(40, 30)) as pilot:
            table = app.query_one(A.ViewTable)
            table.add_column("name", key="name")
            fill(table, 5)
            await pilot.pause()
            assert table.virtual_size.height == 6 and table.size.height == 6  # five rows and the header
            fill(table, 4)
            await pilot.pause()
            assert table.virtual_size.height == 6 and table.row_count == 4  # held
            fill(table, 7)
            await pilot.pause()
            assert table.virtual_size.height == 8  # grown at once
            table.release_height()
            fill(table, 3)
            await pilot.pause()
            assert table.virtual_size.height == 4  # released: its rows
            monkeypatch.setattr(A, "TABLE_HOLD_S", 0.0)
            fill(table, 5)
            await pilot.pause()
            fill(table, 2)
            await pilot.pause()
            assert table.virtual_size.height == 3  # the hold over
            app.source = SimpleNamespace(live=False)
            monkeypatch.setattr(A, "TABLE_HOLD_S", 60.0)
            fill(table, 5)
            await pilot.pause()
            fill(table, 1)
            await pilot.pause()
            assert table.virtual_size.height == 2  # a replay's table is its rows

    run(go())


def test_a_live_tables_height_is_kept_while_its_rows_come_back_to_it(monkeypatch):
    """ViewTable: rows that fill the held height again keep it another TABLE_HOLD_S (a cause coming and going each
    interval lays nothing out); it shrinks once they have not filled it for TABLE_HOLD_S."""
    from types import SimpleNamespace

    from stallscope.tui import app as A

    now = [1000.0]
    monkeypatch.setattr(A, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(A, "TABLE_HOLD_S", 30.0)

    async def go():
        app = _LiveTable()
        async with app.run_test(size=(40, 30)) as pilot:
            table = app.query_one(A.ViewTable)
            table.add_column("name", key="name")

            async def fill(n: int, at: float) -> int:
                now[0] = 1000.0 + at
                table.clear()
                for i in range(n):
                    table.add_row(Text(f"row {i}"), key=str(i))
                await pilot.pause()
                return table.virtual_size.height

            assert await fill(5, 0) == 6  # five rows and the header
            assert await fill(4, 20) == 6  # held
            assert await fill(5, 25) == 6  # as tall as held again: held from now
            assert await fill(4, 40) == 6  # past the first hold, within the second
            assert await fill(4, 56) == 5  # not filled for 30 s: its rows

    run(go())


def test_a_line_given_as_a_string_is_shown_as_its_characters():
    from stallscope.tui.app import put_text

    async def go():
        app = _OneStatic()
        async with app.run_test(size=(60, 5)) as pilot:
            w = app.query_one(Static)
            put_text(w, "[bold red]x[/] [link=http://x]y[/link]")
            await pilot.pause()
            assert "[bold red]x[/] [link=http://x]y[/link]" in "".join(s.text for s in w.render_line(0))

    run(go())


def test_the_cpus_views_migration_rates_fit_their_columns_uncut():
    """`in/s` was 6 cells wide and read "1,134." for 1,134.3 migrations a second."""
    from stallscope.tui.views import CpusView, _per_s

    widths = {c.label: c.width for c in CpusView.columns}
    for n, shown in ((3.04, "3.0"), (99.94, "99.9"), (1134.3, "1,134"), (99_999.0, "99,999")):
        assert _per_s(n).plain == shown
        assert len(shown) <= widths["in/s"] and len(shown) <= widths["Migr out/s"]
