"""`stallscope top`: the Textual app. One screen of tabs over snapshots of a timeline, live or replayed.

The app reads a source (stallscope/sources.py) on a timer and shows one window of its timeline: live,
the last interval(s) as they come; in replay, a cursor over the recording. Collection runs in the
source's worker thread, so help, dialogs and a paused view never hold it up. The views (tui/views.py)
only turn a snapshot into rows; filtering, sorting, the cursor and drilling in are done here, once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from itertools import zip_longest
from typing import Any, Callable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, Label, Static, TabbedContent, TabPane, Button
from textual.widgets._data_table import DuplicateKey, Row as _TableRow, RowKey
from textual.containers import Horizontal

from stallscope.analyzer.data_loss import totals_kept
from stallscope.analyzer.overhead import DEFAULT_BUDGET_PCT
from stallscope.analyzer.recommend import RECOMMENDED
from stallscope.analyzer.timeline import Snapshot
from stallscope.errors import StallscopeError
from stallscope.sources import FOLD_STEP, LIVE_WINDOWS, prefolded
from stallscope.tui import detail
from stallscope.tui.cells import elide_middle, visible
from stallscope.tui.views import FLEX_MAX, Row, TaskGroup, View, default_views

MAX_ROWS = 500
_SCROLLBAR = 2  # a table's vertical scrollbar, in cells: kept free whether one shows yet or not
PREVIEW_MIN_HEIGHT = 40  # rows of a terminal that shows the detail pane under a view's table
PREVIEW_EVERY_S = 2.0  # a live view's detail pane redrawn with newer intervals at most this often
# a window of more waits and tasks than this has its detail pane's evidence gathered in a thread, once the cursor
# has rested PREVIEW_REST_S (an interval of 5,000 sleeping threads: about 11,000, some milliseconds; ten minutes of
# hackbench: 82,000, 0.1-1.7 s)
PREVIEW_INLINE = 20_000
PREVIEW_REST_S = 0.2
# a live view's table, sized to its rows, shrinks once it has not needed its height for this long: a row more or less
# with each interval (a cause coming and going) laid the whole screen out twice (the table, then the detail pane's
# scroll bar below it); a hold that ran out while the rows still came and went laid it out every few intervals
TABLE_HOLD_S = 30.0


class DetailScreen(Screen):
    """The evidence behind one row, of the window shown when it was opened; Esc goes back. The status line stays above
    it, kept up to date (TopApp.update_status): collection goes on behind."""

    BINDINGS = [Binding("escape,q,backspace", "app.pop_screen", "Back")]

    def __init__(self, title: str, body: Text, window: str = "", status: Text | None = None):
        super().__init__()
        self._title, self._body, self._window, self._status = title, body, window, status

    def compose(self) -> ComposeResult:
        if self._status is not None:
            yield Static(self._status, id="status")
        head = Text(visible(self._title), style="bold reverse")
        if self._window:
            head.append(f"  {self._window}", style="dim")
        yield Static(head, id="detail-title")
        with VerticalScroll(id="detail-body"):
            yield Static(self._body)
        yield Footer()

    def fill(self, body: Text) -> None:
        """Its evidence, gathered after it was shown (a wide window's)."""
        self._body = body
        self.query_one("#detail-body").query_one(Static).update(body)


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "Close")]

    TEXT = """\
 Views       {views}  (tab / shift+tab)
 Move        arrows, j/k, PgUp/PgDn          Enter  drill in     Esc  back
 Detail      d  the selected row's evidence below the table (a terminal 40 rows high or more)
 Find        /  filter rows (Esc clears)      s  next sort column (or click a header; again: reverse)
 Window      p  pause (collection goes on)    w  live window: 1, 10 or 60 intervals
 Replay      left/right step an interval; shift+left/right widen the range; Home/End; w whole recording
 Tasks       g  group by thread, process or cgroup
 Fixes       a  apply the selected run-time fix (asks first)   u  undo the last one applied
 Other       ctrl+p command palette   ?  this help   q or ctrl+c  quit
"""

    def __init__(self, views: list[str]):
        super().__init__()
        self._views = views  # the views' titles, in their keys' order

    def compose(self) -> ComposeResult:
        with Vertical(id="help"):
            yield Label(Text("stallscope top: keys", style="bold"))
            yield Static(Text(self.TEXT.format(views="  ".join(f"{i} {t}" for i, t in enumerate(self._views, 1)))))


class ConfirmApply(ModalScreen[bool]):
    """The exact command, and what undo will restore."""

    BINDINGS = [Binding("escape,n", "cancel", "No"), Binding("y", "confirm", "Yes")]

    def __init__(self, command: str, undo: str, finding: str):
        super().__init__()
        self.command, self.undo, self.finding = command, undo, finding

    def compose(self) -> ComposeResult:
        body = Text()
        body.append("Apply this fix?\n\n", style="bold")
        body.append(visible(self.finding) + "\n\n")
        body.append("command:  ", style="dim")
        body.append(visible(self.command) + "\n", style="bold")
        body.append("undo:     ", style="dim")
        body.append(visible(self.undo) + "\n")
        with Vertical(id="confirm"):
            yield Static(body)
            with Horizontal(id="confirm-buttons"):
                yield Button("Apply (y)", variant="warning", id="yes")
                yield Button("Cancel (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


_SHORT_JUSTIFY = (None, "default", "left", "right")  # the cells ViewTable._render_cell draws its own short way
_JOIN = Text("\n")  # a cell is drawn as Rich draws it: its lines joined, its own style a span
_NULL_STYLE = Style.null()


class ViewTable(DataTable):
    """A view's table: resized to a new width (the terminal, or its tab shown), its view is drawn again, so that a
    name column takes the width there is (TopApp._fit_flex). It measures and draws the views' own cells (one line
    of Text each) in fewer steps than Textual's general ones, to the same result: a Tasks view of thousands of
    threads is 500 rows a refresh."""

    _fitted_width: int | None = None  # the width its view's columns were last fitted to

    def _update_dimensions(self, new_rows) -> None:
        """Textual's, measuring the new rows' cells only in the columns sized to their content: a view's other
        columns have fixed widths, and measuring every cell of the 500 rows a refresh adds was a third of the
        Tasks view's refresh. Rows with a label, an automatic height or a cell that is not one line of Text (none
        of the views' own) are measured Textual's way."""
        new_rows = list(new_rows)
        rows, data = self.rows, self._data
        auto = [c for c in self.ordered_columns if c.auto_width]
        widths = [c.content_width for c in auto]
        for key in new_rows:
            row, cells = rows.get(key), data.get(key)
            if row is None or cells is None:
                continue  # removed before the table was laid out
            if row.label is not None or row.auto_height:
                return super()._update_dimensions(new_rows)
            for i, c in enumerate(auto):
                cell = cells.get(c.key)
                if not isinstance(cell, Text) or "\n" in cell.plain:
                    return super()._update_dimensions(new_rows)
                if cell.cell_len > widths[i]:
                    widths[i] = cell.cell_len
        for c, w in zip(auto, widths):
            c.content_width = w
        self._sized()

    def add_view_rows(self, rows: list[tuple[tuple[Text, ...], str]]) -> None:
        """Textual's add_row for each (cells, key), one line high and with no label, to the same table (a test compares
        them), with the columns ordered once for them all rather than twice a row, and the cursor checked once: a
        Tasks view adds 500 rows an interval, and Textual's way took a quarter of its screen's time."""
        columns = [c.key for c in self.ordered_columns]
        locations, data, made, new = self._row_locations, self._data, self.rows, self._new_rows
        first = self.row_count
        for at, (cells, key) in enumerate(rows, first):
            row_key = RowKey(key)
            if row_key in locations:
                raise DuplicateKey(f"The row key {row_key!r} already exists.")
            if len(cells) > len(columns):
                raise ValueError("More values provided than there are columns.")
            locations[row_key] = at
            data[row_key] = dict(zip_longest(columns, cells))
            made[row_key] = _TableRow(row_key, 1, None, False)
            new.add(row_key)
        if not rows:
            return
        self._require_update_dimensions = True
        self.cursor_coordinate = self.cursor_coordinate
        if first == 0 and len(self.columns) > 0 and self.show_cursor and self.cursor_type != "none":
            self._highlight_cursor()  # a cell for the cursor where there was none
        self._update_count += len(rows)
        self.check_idle()

    _held: tuple[int, float] | None = None  # the height it keeps (TABLE_HOLD_S), and until when

    def release_height(self) -> None:
        """The next rows size it as they are (a sort, a filter, a new width: what a key asked for shows at once)."""
        self._held = None

    def _sized(self) -> None:
        """Its virtual size, as Textual's _update_dimensions makes it from the widths and the rows, but that a live
        view's table keeps the height it had until its rows have not filled it for TABLE_HOLD_S, where it shows all
        of its rows: fewer rows leave blank lines at its foot rather than lay the screen out, and rows that come back
        to that height keep it longer."""
        width = sum(c.get_render_width(self) for c in self.columns.values()) + self._row_label_column_width
        height = self._total_row_height + (self.header_height if self.show_header else 0)
        now, held = time.monotonic(), self._held
        if (held is not None and height < held[0] <= self.size.height and now < held[1]
                and getattr(getattr(self.app, "source", None), "live", False)):
            height = held[0]
        else:  # grown, shrunk once the hold ran out, or as tall as held again: held from now
            self._held = (height, now + TABLE_HOLD_S)
        self.virtual_size = Size(width, height)

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int, cursor: bool = False,
                     hover: bool = False):
        """Textual's, with a short way for the views' own cells and their headers (one line of Text, in a row one line
        high, justified left, right or not at all): the same segments (a test compares them cell by cell), made
        without Rich's general wrapping and measuring. Drawing the 33 visible rows of a Tasks view took 35-45 ms a
        frame, most of it there; the header's cells, drawn Textual's way, were 0.18 ms each at every refresh. Any
        other cell is Textual's."""
        header = row_index == -1  # its labels: drawn again at every refresh of the rows, as Textual's cache has it
        if (column_index < self.fixed_columns or column_index < 0 or row_index < -1
                or (not header and row_index < self.fixed_rows)):
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._header_row_key if header else self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        cache = self._cell_render_cache
        cache_key = (row_key, column_key, base_style, cursor, hover, self._show_hover_cursor, self._update_count,
                     self._pseudo_class_state)
        lines = cache.get(cache_key)
        if lines is not None:
            return lines
        if header:  # as Textual's _compute_row_renderables gives it
            height, cell = self.header_height, self.ordered_columns[column_index].label
        else:
            row, cell = self.rows.get(row_key), self._data.get(row_key, {}).get(column_key)
            height = None if row is None else row.height
        inner = width - 2 * self.cell_padding
        if (height != 1 or type(cell) is not Text or inner <= 0 or cell.no_wrap is False
                or cell.justify not in _SHORT_JUSTIFY or "\n" in cell.plain or "\t" in cell.plain):
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        component_style, post_style = self._get_styles_to_render_cell(
            header, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
        pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
        line = cell.copy()
        overflow = cell.overflow or "fold"
        if cell.justify == "right":
            line.rstrip()
            line.truncate(inner, overflow=overflow)
            line.pad_left(inner - line.cell_len)
        elif cell.justify == "left":
            line.truncate(inner, overflow=overflow, pad=True)
        line.truncate(inner, overflow=overflow)
        console = self.app.console
        text = Segment.adjust_line_length(list(_JOIN.join([line]).render(console)), inner, style=_NULL_STYLE, pad=True)
        padding = Segment(" " * self.cell_padding, _NULL_STYLE)
        lines = [list(Segment.apply_style([padding, *text, padding], pre_style, post_style))] if self.cell_padding \
            else [list(Segment.apply_style(text, pre_style, post_style))]
        cache[cache_key] = lines
        return lines

    def on_resize(self, event) -> None:
        """Only a new width fits the columns again (the rows made for the window shown, reordered): the height
        of a table sized to its rows changes with their number as intervals come, and each change had made every
        row again (a live Blockers view: its rows twice an interval)."""
        width = event.size.width
        if width == self._fitted_width:
            return
        self._fitted_width = width
        refresh = getattr(self.app, "refresh_view", None)
        if refresh is not None and self.id == f"table-{self.app.active_view().name}":
            refresh(reorder=True)


def _scroll_to_row(table: DataTable, scrolled: tuple[float, float], row: int) -> None:
    """A table made again (clear() scrolls it to its top) scrolled back to `scrolled`, or as little from it as shows
    `row` (the cursor's: the views' rows are a line each), before a frame is drawn: else it was drawn twice, first at
    its top, then where the cursor was scrolled into view after that frame (a flicker, and half of a Tasks view's
    drawing an interval)."""
    x, y = scrolled
    shown = table.scrollable_content_region.height - (table.header_height if table.show_header else 0)
    if shown > 0:
        if row < y:
            y = row
        elif row >= y + shown:
            y = row - shown + 1
    if (x, y) != (table.scroll_x, table.scroll_y):
        table.scroll_to(x, y, animate=False, immediate=True)


def put_text(widget: Static, content: Text | str, fixed: bool = False, hold=None) -> None:
    """`widget` shows `content`, redrawn only where it reads differently, and the screen laid out again only where
    the widget's height may change: a layout re-renders every widget on the screen, and a live view's lines change
    with each interval. `fixed`: its height is set; else its height is its lines' count where each fits its width,
    and it is laid out again when that count changes or a line does not fit (wrapped, its height is Rich's to say).
    `hold`: what the text is of (the view a detail pane is under); while it is the same, the widget keeps the height
    it grew to, the text padded with blank lines, so that a line more or less with each newer interval, or another
    row's evidence, lays nothing out unless it is longer (the detail pane under a live view: a layout every other
    redraw)."""
    text = content if isinstance(content, Text) else Text(content)
    shown = (text.plain, tuple(text.spans), str(text.style), hold)
    before = getattr(widget, "_stallscope_shown", None)
    if shown == before:
        return
    width = widget.content_size.width
    lines = text.plain.split("\n")
    height = len(lines) if width and all(cell_len(line) <= width for line in lines) else None
    held = widget._stallscope_height if hold is not None and before is not None and before[3] == hold else None
    if height is not None and held is not None and height < held:
        text = text + Text("\n" * (held - height))
        height = held
    layout = not fixed and (before is None or height is None or height != widget._stallscope_height)
    widget._stallscope_shown, widget._stallscope_height = shown, height
    widget.update(text, layout=layout)  # a Text: a string is never read as markup


class TopApp(App):
    """`source`: a LiveSource or a RecordingSource; `applier`: what `a`/`u` call (stallscope.apply)."""

    TITLE = "stallscope top"
    CSS = """
    #status { height: 3; background: $panel; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    #notice { height: auto; max-height: 2; color: $warning; padding: 0 1; text-overflow: ellipsis; }
    .summary { height: auto; max-height: 3; padding: 0 1; color: $text-muted; }
    .empty { padding: 1 2; color: $text-muted; }
    #tabs, #tabs ContentSwitcher, #tabs TabPane { height: 1fr; }
    TabPane { padding: 0; }
    DataTable { height: 1fr; }
    #filter { dock: bottom; display: none; }
    #filter.shown { display: block; }
    #help, #confirm { width: 96; height: auto; padding: 1 2; border: thick $accent; background: $surface; }
    HelpScreen, ConfirmApply { align: center middle; }
    #confirm-buttons { height: 3; align-horizontal: right; }
    #detail-title { height: 1; padding: 0 1; }
    #detail-body { padding: 0 1; }
    .preview { display: none; height: 1fr; border-top: solid $panel-lighten-2; padding: 0 1; }
    #tabs.previewing .preview { display: block; }
    #tabs.previewing .has-preview DataTable { height: auto; max-height: 60%; }
    """

    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("slash", "filter", "Filter"),
        Binding("s", "sort", "Sort"),
        Binding("p", "pause", "Pause"),
        Binding("w", "window", "Window"),
        Binding("g", "group", "Group", show=False),
        Binding("d", "preview", "Detail pane", show=False),
        Binding("a", "apply", "Apply", show=False),
        Binding("u", "undo", "Undo", show=False),
        Binding("j", "cursor(1)", "Down", show=False),
        Binding("k", "cursor(-1)", "Up", show=False),
        Binding("left", "step(-1)", "Older", show=False, priority=True),
        Binding("right", "step(1)", "Newer", show=False, priority=True),
        Binding("shift+left", "widen(-1)", "Widen back", show=False, priority=True),
        Binding("shift+right", "widen(1)", "Widen on", show=False, priority=True),
        Binding("home", "edge(-1)", "First", show=False, priority=True),
        Binding("end", "edge(1)", "Last", show=False, priority=True),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        *[Binding(str(i), f"view({i})", show=False) for i in range(1, 10)],
    ]

    def __init__(self, source, applier=None, refresh_s: float = 0.25, views: list[View] | None = None,
                 title: str = ""):
        super().__init__()
        self.source = source
        self.applier = applier
        self.refresh_s = refresh_s
        self._status_shown: tuple | None = None
        self._needs: dict[tuple[str, int], tuple[int, int]] = {}  # (view, column) -> (table width, cells it needs)
        self.preview = True  # the selected row's evidence below the table, where the terminal is tall enough (`d`)
        self._preview_shown: tuple | None = None  # (view, row, snapshot) of the evidence shown there
        self._preview_at = 0.0  # when it was made (monotonic)
        self._preview_index = -1  # the cursor's row then
        self._height = 0  # the terminal's rows, as last resized
        self._preview_asked = self._preview_force = False  # a redraw of the pane asked for, not yet made
        self._preview_timer = None  # a wide window's evidence, gathered once the cursor rests
        self.views = views or default_views()
        self.label = title or ("live" if source.live else f"replay {getattr(source, 'path', '')}")
        self.paused = False
        self.window_len = LIVE_WINDOWS[0]
        self.cursor: tuple[int, int] | None = None  # replay and pause: the window shown (interval indexes)
        self.filters: dict[str, str] = {}
        self.sorts: dict[str, tuple[int, bool]] = {v.name: (v.default_sort, False) for v in self.views}
        self.rows: dict[str, list[Row]] = {}  # each view's rows as shown
        # the rows the view drawn last made (unsorted, unfiltered), with the snapshot and view state they are of: a
        # sort or a filter of the same window orders them again, not makes them again (5,000 threads' rows); one
        # view's only, so that no older snapshot is kept for a view not shown
        self._made: tuple | None = None
        self.keys: dict[str, list[str]] = {}  # ... and their table keys (made unique)
        self.notice = ""
        self.ended = ""
        self.snapshot: Snapshot | None = None
        self._shown: tuple | None = None
        # a wide window not yet folded is folded in a thread (_fold_wide): the newest asked for, the one under way
        self._fold_lock = threading.Lock()
        self._fold_asked = None  # a WindowFold, made in this thread from the intervals of the moment
        self.folding: tuple[int, int] | None = None  # the window being folded, for the status line
        self._fold_running = False
        self._leaving = False
        self._screen_loop: asyncio.AbstractEventLoop | None = None
        self._leave_asked = False
        self.crashed: Exception | None = None  # an error of the screen's own (a bug), for the command to say

    # ----- an error of the screen's own: the command says it in one line, its traceback kept (stallscope/crash.py)

    def _handle_exception(self, error: Exception) -> None:
        if self.crashed is None:
            self.crashed = error
        super()._handle_exception(error)  # Textual's: the app exits, the terminal is restored

    def _print_error_renderables(self) -> None:
        if self.crashed is not None:  # not Textual's traceback over the terminal
            self._exit_renderables.clear()
            return
        super()._print_error_renderables()

    # ----- layout

    def compose(self) -> ComposeResult:
        yield Static(Text("stallscope top: starting (loading and attaching the probes)"), id="status")
        yield Static("", id="notice")
        with TabbedContent(id="tabs"):
            for i, v in enumerate(self.views, 1):
                with TabPane(f"{i} {v.title}", id=v.name, classes="has-preview" if v.detail else ""):
                    yield Static("", classes="summary", id=f"summary-{v.name}")
                    yield Static("", classes="empty", id=f"empty-{v.name}")
                    table = ViewTable(id=f"table-{v.name}", cursor_type="row", zebra_stripes=True)
                    yield table
                    if v.detail:
                        with VerticalScroll(classes="preview", id=f"preview-{v.name}"):
                            yield Static("", id=f"preview-body-{v.name}")
        yield Input(placeholder="filter rows (Esc clears)", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self._console_size(self.size)
        for v in self.views:
            table = self._table_of(v)
            for c in v.columns:
                table.add_column(Text(c.label, justify="right" if c.numeric else "left"), width=c.width)
        loop = asyncio.get_running_loop()
        if self.source.live:
            # an interval is drawn as soon as the session hands it over, not at the next poll (up to
            # refresh_s later); never waits for the view, and a view already gone is not woken
            def wake() -> None:
                try:
                    loop.call_soon_threadsafe(self.call_next, self.poll)  # in the app's own message queue
                except RuntimeError:
                    pass

            self.source.on_event = wake
            self.source.reads = self.active_view().reads  # the first view's, made with each interval from the first
        self.source.start()
        self._screen_loop = loop
        if self._leave_asked:  # SIGTERM or SIGHUP before the screen was up
            self._leave()
        self.set_interval(self.refresh_s, self.poll)
        self.poll()

    # ----- data

    @property
    def timeline(self):
        return self.source.timeline

    def poll(self) -> None:
        changed = False
        for ev in self.source.events():
            if ev.kind == "interval":
                changed = True
            elif ev.kind == "notice":
                self.notice = ev.payload
            elif ev.kind == "error":
                self.ended = f"{'collection' if self.source.live else 'reading'} stopped: {ev.payload}"
            elif ev.kind == "end":
                self.ended = f"collection ended ({ev.payload.ended_by or 'stopped'})"
            elif ev.kind == "meta":
                changed = True
        try:
            if changed or self._shown is None:
                self.refresh_data()
                if self._preview_asked:  # newer data: the detail pane drawn in the table's frame, not one more after it
                    self._draw_preview()  # (a key's pane still waits for the frame its key made: update_preview)
            self.update_status()
        except NoMatches:
            # a tick while the screens change or the app closes, its widgets not there: the next tick draws
            pass

    def current_window(self) -> tuple[int, int] | None:
        tl = self.timeline
        if tl is None or not len(tl):
            return None
        if self.cursor is not None:
            return self.cursor
        if not self.source.live:
            return tl.first_index, tl.last_index
        if self.window_len > 1:  # the newest the source folded (its fold may take some intervals under load)
            return tl.held(self.window_len) or (tl.last_index, tl.last_index)
        return tl.last_index, tl.last_index

    def refresh_data(self, force: bool = False) -> None:
        window = self.current_window()
        if window is None:
            return
        tl = self.timeline
        snap = tl.cached(*window)
        if snap is None and window[0] != window[1]:
            # a range of a recording, or a paused live view widened: folded in a thread, the screen answering
            # keys meanwhile; the window shown stays until it is done (the status line says so)
            self._fold_wide(window)
            return
        self.folding = None
        snap = snap or tl.window(*window)
        if snap is None:
            return
        key = (snap.first, snap.last, id(snap))
        if key == self._shown and not force:
            return
        self._shown = key
        self.snapshot = snap
        self.refresh_view()

    def _fold_wide(self, window: tuple[int, int]) -> None:
        """Fold `window` in a thread: the newest asked for replaces one not yet begun, and one under way is
        left at its next step when another is asked (a key held down asks for a window a key)."""
        fold = self.timeline.fold_window(*window)
        if fold is None:
            return
        with self._fold_lock:
            if self.folding == (fold.first, fold.last) and self._fold_running:
                return  # asked again (a paused live view, as intervals come): the fold under way goes on
            self._fold_asked = fold
            self.folding = (fold.first, fold.last)
            start, self._fold_running = not self._fold_running, True
        self.update_status()
        if start:
            self.run_worker(self._fold_worker, thread=True, group="fold", exit_on_error=False)

    def _fold_worker(self) -> None:
        while True:
            with self._fold_lock:
                fold, self._fold_asked = self._fold_asked, None
                if fold is None or self._leaving:
                    self._fold_running = False
                    return
            error = None
            try:
                # a few intervals at a time: a window asked for since, or the view closing, leaves this one
                while not fold.add(FOLD_STEP) and self._fold_asked is None and not self._leaving:
                    pass
                if not fold.done:
                    continue
                snap = prefolded(fold.snapshot())
            except Exception as exc:  # a damaged recording: said in one line, the window shown stays
                snap, error = None, f"cannot fold intervals {fold.first}..{fold.last}: {exc}"
            try:
                self.call_from_thread(self._folded, snap, error)
            except RuntimeError:  # the app is gone
                with self._fold_lock:
                    self._fold_running = False
                return

    def _folded(self, snap: Snapshot | None, error: str | None) -> None:
        """In the screen's thread: a window folded (shown if it is still the one asked for), or why not."""
        if error:
            self.say(error, timeout=5)
            self.folding = None
        window = self.current_window()
        if snap is not None and window is not None and self.timeline.cached(*window) is snap:  # still the one asked
            self.refresh_data()
        self.update_status()

    def active_view(self) -> View:
        active = self.query_one(TabbedContent).active
        return next((v for v in self.views if v.name == active), self.views[0])

    def refresh_view(self, view: View | None = None, reorder: bool = False) -> None:
        """The view's table drawn again from the snapshot shown; `reorder` (a sort, a filter): from the rows it made
        of that snapshot last, where it did."""
        snap = self.snapshot
        if snap is None:
            return
        v = view or self.active_view()
        rows = list(self._view_rows(v, snap, reorder))
        text = self.filters.get(v.name, "").lower()
        if text:
            rows = [r for r in rows if any(text in c.plain.lower() for c in r.cells)]
        col, reverse = self.sorts[v.name]
        c = v.columns[col] if col < len(v.columns) else None
        descending = bool(c and c.numeric and not c.ascending)
        try:
            rows.sort(key=lambda r: _sort_key(r.sort[col]), reverse=descending != reverse)
        except TypeError:
            rows.sort(key=lambda r: str(r.sort[col]), reverse=descending != reverse)
        rows.sort(key=lambda r: r.group)  # stable: each group keeps the column's order
        summary = v.summary(snap, self.timeline)
        if len(rows) > MAX_ROWS:  # said, never silent: a sort or a filter reaches the others
            summary.append(f"\nthe first {MAX_ROWS:,} of {len(rows):,} rows in this order (s sorts, / filters all "
                           f"{len(rows):,})", style="dim")
            rows = rows[:MAX_ROWS]
        self.rows[v.name] = rows
        put_text(self.query_one(f"#summary-{v.name}", Static), summary)
        empty = self.query_one(f"#empty-{v.name}", Static)
        put_text(empty, Text(v.empty(snap) + (f" (filter: {text})" if text else "")) if not rows else "")
        empty.display = not rows
        table = self._table_of(v)
        if reorder:
            table.release_height()
        self._fit_flex(v, table, rows)
        # the cursor on a row below the first follows that row's item as the ranking moves; on the first row it stays
        # there, on whatever ranks first now (what a user at the top of a live ranking watches), but in a view that
        # does not keep its top (View.keeps_top: the Fixes)
        selected = None
        if table.row_count and (0 if v.keeps_top else -1) < table.cursor_row < len(self.keys.get(v.name, [])):
            selected = self.keys[v.name][table.cursor_row]
        scrolled = (table.scroll_x, table.scroll_y)
        table.clear()
        keys, seen = [], {}
        # the name column's cells, longer than it, lose their middle (their ends say the most)
        flex = v.flex if v.flex is not None and v.flex < len(table.ordered_columns) else None
        width = table.ordered_columns[flex].width if flex is not None else 0
        added = []
        for r in rows:  # rows that read the same (a lock's read and write sides) stay apart
            n = seen[r.key] = seen.get(r.key, 0) + 1
            key = r.key if n == 1 else f"{r.key}#{n}"
            keys.append(key)
            cells = r.cells
            if width and cells[flex].cell_len > width:
                cells = (*cells[:flex], elide_middle(cells[flex], width), *cells[flex + 1:])
            added.append((cells, key))
        table.add_view_rows(added)
        self.keys[v.name] = keys
        row = keys.index(selected) if selected is not None and selected in keys else 0
        _scroll_to_row(table, scrolled, row)
        if row:
            table.move_cursor(row=row, animate=False)
        if v is self.active_view():
            self.update_preview(force=reorder)  # a sort or a filter: the pane of the row under the cursor now

    def _table_of(self, v: View) -> ViewTable:
        return self.query_one(f"#table-{v.name}", ViewTable)

    def _view_rows(self, v: View, snap: Snapshot, reuse: bool) -> list[Row]:
        state = (v.name, getattr(v, "group", None))
        made = self._made
        if reuse and made is not None and made[0] == state and made[1] is snap:
            return made[2]
        rows = v.rows(snap, self.timeline) if v.available(snap) else []
        self._made = (state, snap, rows)
        return rows

    def _fit_flex(self, v: View, table: DataTable, rows: list[Row]) -> None:
        """The view's flex column widened by the spare width of a wide terminal, as far as its longest cell needs
        (at most FLEX_MAX cells more), and its spill column (the names of who waited) by what is left, as far as
        its own needs; back to their own widths on a narrow terminal. A column keeps the width it took while the
        table's width stays, so that rows coming and going in a live view do not move the columns."""
        columns = table.ordered_columns
        if v.flex is None or len(columns) != len(v.columns) or v.columns[v.flex].width is None:
            return
        spill = v.spill if v.spill is not None and v.columns[v.spill].width is not None else None
        grown = [v.flex] if spill is None else [v.flex, spill]
        # the others as drawn: a column sized to its content (width None) as wide as its widest cell so far
        others = sum(c.get_render_width(table) for i, c in enumerate(columns) if i not in grown)
        total = table.size.width or self.size.width
        spare = total - _SCROLLBAR - others - sum(v.columns[i].width + 2 * table.cell_padding for i in grown)
        for i in grown:
            own = v.columns[i].width
            at, need = self._needs.get((v.name, i), (None, own))
            need = max([need if at == total else own, *(r.cells[i].cell_len for r in rows)])
            self._needs[(v.name, i)] = (total, need)
            more = max(0, min(spare, need - own, FLEX_MAX if i == v.flex else spare))
            spare -= more
            if columns[i].width != own + more:
                columns[i].width = own + more
                table.refresh(layout=True)

    def update_status(self) -> None:
        """The status line and the notice, redrawn only when they read differently (each update lays the
        screen out again: four times a second, most of an idle view's cost)."""
        text = self.status_text()
        note = self.ended or self.notice
        shown = (text.plain, tuple(text.spans), note)
        if shown == self._status_shown or not self.screen_stack:  # the same, or the app closing: nothing to draw on
            return
        self._status_shown = shown
        main = self.screen_stack[0]  # the views' screen, under any other
        put_text(main.query_one("#status", Static), text, fixed=True)  # its height is set (#status)
        if isinstance(self.screen, DetailScreen):  # the status line stays in view over a row's evidence
            for shown_there in self.screen.query("#status").results(Static):
                put_text(shown_there, text, fixed=True)
        box = main.query_one("#notice", Static)
        put_text(box, Text(visible(note)) if note else "")
        box.display = bool(note)

    def status_text(self) -> Text:
        src = self.source
        meta = getattr(src, "meta", None)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("stallscope top", style="bold")
        t.append(f"  {visible(self.label)}")
        if meta is None:
            t.append("  starting: loading and attaching the probes...")
            return t
        reading = getattr(src, "progress", None)
        if reading:  # a recording read in the background
            t.append(f"  {reading}")
            return t
        snap = self.snapshot
        if snap is not None:
            tl = self.timeline
            t.append(f"  window: {self.window_text(snap)} of {tl.first_index}..{tl.last_index} ({snap.seconds:.1f} s, "
                     f"at +{(snap.model.start_ns - meta.start_ns) / 1e9:.0f} s)")
            if self.source.live and self.cursor is None and self.window_len > 1 and snap.first == snap.last:
                t.append(f"  (folding the last {self.window_len} intervals)", style="dim")
            elif self.folding is not None and self.folding != (snap.first, snap.last):
                t.append(f"  (folding intervals {self.folding[0]}..{self.folding[1]})", style="dim")
        t.append(f"  every {meta.interval_s:g} s")
        if self.paused:
            t.append("  PAUSED", style="bold reverse yellow")
        if snap is not None:
            t.append("\n")
            # the row's details (the cost's parts, what a level reduces) give way where the terminal is narrow, before
            # the lost counters after the cost are cut
            lost: dict[str, int] = {}  # by what was lost, summed over the programs and groups that lost it
            for k, v in snap.lost.items():
                lost[k.rsplit(".", 1)[-1]] = lost.get(k.rsplit(".", 1)[-1], 0) + v
            level = max((c.to.level for c in snap.model.tuning), default=None)
            if level is None:
                level = _level_before(self.timeline, snap)
            room = self.size.width - 2  # the status's padding
            row = self._loss_and_cost(snap, meta, lost, level, compact=False)
            if 0 < room < row.cell_len:
                row = self._loss_and_cost(snap, meta, lost, level, compact=True)
            t.append_text(row)
        probes = ", ".join(f"{n} {p.mechanism}" for n, p in sorted(meta.probes.items()) if p.enabled)
        t.append(f"\nprobes: {probes}", style="dim")
        return t

    @staticmethod
    def _loss_and_cost(snap: Snapshot, meta, lost: dict[str, int], level: int, compact: bool) -> Text:
        """The status line's second row: what was lost (`lost`, by counter), stallscope's cost against its budget, and
        the budget's level; `compact`, without the cost's parts and what the level reduces."""
        t = Text()
        # data loss first, never silent: in red where events or totals were lost; apart, in yellow, those after which
        # every total stays exact (a stack, a waker or a name went; a wait's time came from its task's counters or went
        # to the interval before): the report's "totals exact, details missing". The red first, then stallscope's
        # cost, then the yellow, which a narrow terminal cuts before the cost
        TopApp._append_lost(t, lost, False, "LOST: ", "bold red", "bold red")
        cost, budget = snap.cost, meta.options.get("overhead_budget_pct", DEFAULT_BUDGET_PCT)
        if cost is not None:
            over = cost.total_pct > budget
            t.append(f"cost {cost.total_pct:.2f}% of the CPUs", style="bold yellow" if over else "")
            if not compact:
                t.append(f" (BPF {cost.probes_pct:.2f}%, process "
                         f"{100 * cost.collector_ns / 1e9 / (cost.seconds or 1):.1f}% of a CPU)")
            t.append(f", budget {budget:g}%")
        t.append(f", level {level}" + (" (stacks and sampling reduced)" if level and not compact else ""))
        if not lost:
            t.append("   lost: nothing", style="green")
        else:
            t.append("   ")
            TopApp._append_lost(t, lost, True, "totals exact: ", "bold yellow", "yellow")
        return t

    @staticmethod
    def _append_lost(t: Text, by: dict[str, int], kept: bool, label: str, label_style: str, style: str) -> None:
        """The lost-data counters after which every total stays exact (`kept`), or the others, after `label`."""
        counters = [(k, v) for k, v in sorted(by.items()) if totals_kept(k) == kept]
        if counters:
            t.append(label, style=label_style)
            t.append(", ".join(f"{k}={v:,}" for k, v in counters), style=style)
            if not kept:
                t.append("   ")

    # ----- actions

    def action_view(self, n: int) -> None:
        if 1 <= n <= len(self.views):
            self.query_one(TabbedContent).active = self.views[n - 1].name

    def on_tabbed_content_tab_activated(self, _event) -> None:
        if self.source.live:  # what the view shown reads, made in the session's thread from the next interval on
            self.source.reads = self.active_view().reads
        self._table_of(self.active_view()).release_height()  # a view shown anew: sized to its rows
        self.refresh_view()
        self._table_of(self.active_view()).focus()

    def action_pause(self) -> None:
        self.paused = not self.paused
        if self.source.live:
            self.cursor = self.current_window() if self.paused else None
            self._preview_shown = None  # paused, the pane follows the wait chains too
            self.update_preview(force=True)
        self.update_status()

    def action_window(self) -> None:
        if self.source.live:
            i = LIVE_WINDOWS.index(self.window_len) if self.window_len in LIVE_WINDOWS else 0
            self.window_len = LIVE_WINDOWS[(i + 1) % len(LIVE_WINDOWS)]
            self.source.window_len = self.window_len  # folded with each interval from the next on, in its thread
            if self.paused and self.cursor:
                self.cursor = (self.cursor[1] - self.window_len + 1, self.cursor[1])
        else:
            self.cursor = None
        self.say(f"window: {self._window_words()}", timeout=2)
        self.refresh_data()
        self.update_status()

    def _window_words(self) -> str:
        if not self.source.live:
            return "the whole recording" if self.cursor is None else "a range"
        return f"the last {self.window_len} interval(s)"

    def _movable(self) -> bool:
        return not self.source.live or self.paused

    def _bounds(self) -> tuple[int, int] | None:
        """The intervals a cursor may move over; None when it may not move (live and not paused)."""
        tl = self.timeline
        if not self._movable() or tl is None or not len(tl):
            return None
        return tl.first_index, tl.last_index

    def _show_window(self, first: int, last: int) -> None:
        self.cursor = (first, last)
        self.refresh_data()
        self.update_status()

    def action_step(self, d: int) -> None:
        bounds = self._bounds()
        if bounds is None:
            return
        first, last = self.current_window()
        # a range collapses to its end (right) or start (left); one interval steps
        i = (last if d > 0 else first) if first != last else last + d
        i = min(max(i, bounds[0]), bounds[1])
        self._show_window(i, i)

    def action_widen(self, d: int) -> None:
        bounds = self._bounds()
        if bounds is None:
            return
        first, last = self.current_window()
        if d < 0:
            first = max(first - 1, bounds[0])
        else:
            last = min(last + 1, bounds[1])
        self._show_window(first, last)

    def action_edge(self, d: int) -> None:
        bounds = self._bounds()
        if bounds is not None:
            i = bounds[1] if d > 0 else bounds[0]
            self._show_window(i, i)

    def action_cursor(self, d: int) -> None:
        table = self._table_of(self.active_view())
        table.move_cursor(row=max(0, table.cursor_row + d))

    def action_sort(self) -> None:
        v = self.active_view()
        col, reverse = self.sorts[v.name]
        self.sorts[v.name] = ((col + 1) % len(v.columns), False)
        self.say(f"sorted by {v.columns[self.sorts[v.name][0]].label}", timeout=1.5)
        self.refresh_view(v, reorder=True)

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        v = self.active_view()
        col, reverse = self.sorts[v.name]
        self.sorts[v.name] = (event.column_index, not reverse if col == event.column_index else False)
        self.refresh_view(v, reorder=True)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = self.filters.get(self.active_view().name, "")
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.filters[self.active_view().name] = event.value
            self.refresh_view(reorder=True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.remove_class("shown")
            self._table_of(self.active_view()).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.filters.pop(self.active_view().name, None)
        self.refresh_view(reorder=True)
        self._table_of(self.active_view()).focus()

    def action_group(self) -> None:
        v = self.active_view()
        if hasattr(v, "GROUPS"):
            v.group = v.GROUPS[(v.GROUPS.index(v.group) + 1) % len(v.GROUPS)]
            self._table_of(v).release_height()
            self.refresh_view(v)

    def selected(self) -> Row | None:
        v = self.active_view()
        table = self._table_of(v)
        rows = self.rows.get(v.name, [])
        if not rows or not (0 <= table.cursor_row < len(rows)):
            return None
        return rows[table.cursor_row]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.open_detail()

    def open_detail(self) -> None:
        v, row, snap = self.active_view(), self.selected(), self.snapshot
        if not self._wide(snap):
            shown = self._detail_of(v, row, snap)
            if shown is not None:
                self.push_screen(DetailScreen(*shown, self._detail_window(snap), self.status_text()))
            return
        if row is None or row.item is None or not v.detail:
            return
        # a wide window's evidence takes up to seconds to gather: the screen is shown at once, filled in a thread
        screen = DetailScreen(self._title_of(v, row), Text(f"gathering the evidence of {self.window_text(snap)}...",
                                                           style="dim"), self._detail_window(snap), self.status_text())
        self.push_screen(screen)
        number = self._number_of(v, row)  # read here: the rows shown may change while the thread gathers
        self._gather("detail", lambda: self._detail_of(v, row, snap, number=number),
                     lambda made: screen.fill(made[1]) if made is not None and screen.is_attached else None)

    def _detail_window(self, snap: Snapshot) -> str:
        """What a detail screen's evidence is of: its window, and, live, that newer intervals do not change it."""
        shown = self.window_text(snap)
        return f"{shown} (frozen: Esc, Enter for newer)" if self.source.live else shown

    def _gather(self, group: str, make: Callable[[], Any], done: Callable[[Any], None]) -> None:
        """`make()` in a thread, `done` called with what it made in the screen's; an error it raised is raised in
        the screen's thread, as the screen's own (crash.py)."""
        def gather() -> None:
            error = made = None
            try:
                made = make()
            except Exception as exc:  # noqa: BLE001 - raised again below, in the screen's thread
                error = exc
            try:
                self.call_from_thread(self._gathered, done, made, error)
            except RuntimeError:  # the app is gone
                pass

        self.run_worker(gather, thread=True, group=group, exit_on_error=False)

    @staticmethod
    def _gathered(done: Callable[[Any], None], made, error: Exception | None) -> None:
        if error is not None:
            raise error
        done(made)

    @staticmethod
    def _wide(snap: Snapshot | None) -> bool:
        """A window whose evidence is gathered in a thread: more waits and tasks than PREVIEW_INLINE."""
        return snap is not None and len(snap.model.waits) + len(snap.model.tasks) > PREVIEW_INLINE

    @staticmethod
    def _title_of(v: View, row: Row) -> str:
        item = row.item
        if isinstance(item, TaskGroup):
            return f"Process: {item.label}[{item.key}]" if item.by == "process" else f"Cgroup: {item.label}"
        return {"blockers": lambda: f"Blocker: {item.cause}", "locks": lambda: f"Lock: {item.name}",
                "tasks": lambda: f"Task: {item.comm}[{item.task.pid}]",
                "fixes": lambda: f"Fix: {item.kind} {item.target}"}[v.name]()

    def _number_of(self, v: View, row: Row | None) -> int | None:
        """A fix's number, as `recommend` numbers it (its place among the rows shown)."""
        rows = self.rows.get(v.name, [])
        return rows.index(row) + 1 if v.name == "fixes" and row in rows else None

    def _detail_of(self, v: View, row: Row | None, snap: Snapshot | None, pane: bool = False,
                   number: int | None = None) -> tuple[str, Text] | None:
        """The title and evidence of a row (what Enter opens, and the detail pane shows); None: it has none. The
        pane of a live view, redrawn as intervals come, leaves a blocker's wait chains to Enter. `number`: a fix's,
        read in the screen's thread (None: read now)."""
        if row is None or row.item is None or snap is None or not v.detail:
            return None
        title = self._title_of(v, row)
        if v.name == "blockers":
            chains = not (pane and self.source.live and self.cursor is None)
            return title, detail.blocker_detail(snap, row.item, chains)
        if v.name == "locks":
            return title, detail.lock_detail(snap, row.item)
        if v.name == "tasks":
            if isinstance(row.item, TaskGroup):
                return title, detail.group_detail(snap, row.item)
            return title, detail.task_detail(snap, row.item)
        if v.name == "fixes":
            return title, detail.fix_detail(snap, row.item, number or self._number_of(v, row) or 0)
        return None

    # ----- the detail pane: the selected row's evidence under the table, on a terminal tall enough for both

    def _previewing(self) -> bool:
        return self.preview and (self._height or self.size.height) >= PREVIEW_MIN_HEIGHT

    def on_resize(self, event) -> None:
        self._height = event.size.height  # before the app's own handler takes the new size
        self._console_size(event.size)
        self._show_preview()
        self.update_status()  # its details fit to the new width

    def _console_size(self, size) -> None:
        """The screen's console told the terminal's size, which it otherwise asks the terminal for (an ioctl) each
        time a cell is measured or a widget drawn: thousands of times a second in a table of a machine's threads."""
        if size.width and size.height:
            self.console.size = (size.width, size.height)

    def action_preview(self) -> None:
        self.preview = not self.preview
        if self.preview and not self._previewing():
            self.say(f"the detail pane needs a terminal {PREVIEW_MIN_HEIGHT} rows high (Enter opens the detail)",
                     severity="warning")
        self._show_preview()

    def _show_preview(self) -> None:
        try:
            self.query_one("#tabs").set_class(self._previewing(), "previewing")
        except NoMatches:
            return
        self._preview_shown = None
        self.update_preview(force=True)

    def on_data_table_row_highlighted(self, _event) -> None:
        self.update_preview()  # another row: at once; the same one, its table redrawn: as newer data are

    def update_preview(self, force: bool = False) -> None:
        """The detail pane of the view shown, for its selected row, redrawn after the frame being made (the
        table's, a key's: the pane never holds them up), once for any number of asks meanwhile (a key held down).
        A live view's newer interval redraws it at most every PREVIEW_EVERY_S (its evidence takes some
        milliseconds to gather); another row or view, at once; `force`, whatever it shows. It says which window it
        is of."""
        self._preview_force = self._preview_force or force
        if not self._preview_asked:
            self._preview_asked = True
            self.call_after_refresh(self._draw_preview)

    def _draw_preview(self) -> None:
        force, self._preview_force, self._preview_asked = self._preview_force, False, False
        v = self.active_view()
        if not v.detail or not self._previewing():
            return
        row, snap = self.selected(), self.snapshot
        key = (v.name, row.key if row is not None else None, id(snap))
        if key == self._preview_shown:
            return
        shown = self._preview_shown
        now = time.monotonic()
        index = self._table_of(v).cursor_row
        # the same row, or newer data under a cursor that did not move (another task ranked first now)
        same = shown is not None and shown[0] == key[0] and (shown[1] == key[1] or self._preview_index == index)
        if not force and same and self.source.live and now - self._preview_at < PREVIEW_EVERY_S:
            return
        self._preview_shown, self._preview_at, self._preview_index = key, now, index
        if self._preview_timer is not None:
            self._preview_timer.stop()
            self._preview_timer = None
        if not self._wide(snap):
            self._put_preview(key, snap, self._detail_of(v, row, snap, pane=True))
            return
        # a wide window (minutes of a recording: a blocker's evidence takes a tenth of a second to seconds to
        # gather): gathered in a thread once the cursor rests, the screen answering keys meanwhile
        self._put_preview(key, snap, None, waiting=True)
        self._preview_timer = self.set_timer(PREVIEW_REST_S, lambda: self._gather_preview(key, v, row, snap))

    def _gather_preview(self, key: tuple, v: View, row: Row | None, snap: Snapshot) -> None:
        self._preview_timer = None
        if key == self._preview_shown:  # the cursor rested on it
            number = self._number_of(v, row)
            self._gather("preview", lambda: self._detail_of(v, row, snap, pane=True, number=number),
                         lambda made: self._put_preview(key, snap, made) if key == self._preview_shown else None)

    def _put_preview(self, key: tuple, snap: Snapshot | None, made: tuple[str, Text] | None,
                     waiting: bool = False) -> None:
        try:
            body = self.query_one(f"#preview-body-{key[0]}", Static)
        except NoMatches:
            return
        if waiting:
            put_text(body, Text(f"gathering the evidence of {self.window_text(snap)}...", style="dim"))
            return
        if made is None:
            put_text(body, Text("nothing selected", style="dim"))
            return
        title, text = made
        head = Text(visible(title), style="bold")
        if snap is not None:
            head.append(f"   {self.window_text(snap)}", style="dim")
        put_text(body, head + Text("\n") + text, hold=key[0])  # the pane keeps its height while the view is shown

    def action_help(self) -> None:
        self.push_screen(HelpScreen([v.title for v in self.views]))

    def action_apply(self) -> None:
        v, row = self.active_view(), self.selected()
        if v.name != "fixes" or row is None:
            self.say("select a fix in the Fixes view (7) first", severity="warning")
            return
        r = row.item
        if not r.runtime or not r.action:
            self.say("not a run-time fix: a boot-time or code change is not applied from here", severity="warning")
            return
        if r.status != RECOMMENDED:
            self.say(f"not applied: {r.status}", severity="warning")
            return
        if self.applier is None:
            self.say("applying is not available here", severity="error")
            return
        try:
            self.applier.check_same_task(r.action)
            before = self.applier.current_state(r.action)
        except StallscopeError as exc:
            self.say(f"not applied: {exc}", severity="error")
            return
        undo = "restore " + ", ".join(f"{k} = {v}" for k, v in sorted(before.items())) + " (u)"

        def done(yes: bool | None) -> None:
            if not yes:
                self.say("not applied")
                return
            try:
                entry = self.applier.apply(r.action)
            except StallscopeError as exc:
                self.say(f"not applied: {exc}", severity="error")
                return
            self.say(f"applied; was {entry.get('before')}; u undoes it")

        self.push_screen(ConfirmApply(r.command, undo, r.finding), done)

    def action_undo(self) -> None:
        if self.applier is None:
            return
        try:
            entry = self.applier.undo()
        except StallscopeError as exc:
            self.say(f"nothing undone: {exc}", severity="warning")
            return
        self.say(f"restored {entry['action']['type']} to {entry['before']}")

    @staticmethod
    def window_text(snap: Snapshot) -> str:
        return f"interval {snap.first}" if snap.first == snap.last else f"intervals {snap.first}..{snap.last}"

    def say(self, message: str, **kw) -> None:
        """A notification: its text may quote a thread name or a path, so it is never read as markup."""
        self.notify(visible(message), markup=False, **kw)

    def get_system_commands(self, screen: Screen):
        yield from super().get_system_commands(screen)
        for i, v in enumerate(self.views, 1):
            yield SystemCommand(f"View: {v.title}", f"show the {v.title} view (key {i})",
                                lambda n=i: self.action_view(n))
        for title, help_text, action in (
                ("Pause or resume", "freeze the view; collection goes on (p)", self.action_pause),
                ("Filter rows", "show only rows containing a text (/)", self.action_filter),
                ("Next sort column", "sort the table by its next column (s)", self.action_sort),
                ("Change window", "1, 10 or 60 intervals live; whole recording in replay (w)", self.action_window),
                ("Group tasks", "by thread, process or cgroup (g)", self.action_group),
                ("Detail pane", "the selected row's evidence under the table, on a tall terminal (d)",
                 self.action_preview),
                ("Apply the selected fix", "run-time fixes only, after asking (a)", self.action_apply),
                ("Undo the last fix", "restore what the last apply changed (u)", self.action_undo),
                ("Keys", "every key of this screen (?)", self.action_help)):
            yield SystemCommand(title, help_text, action)

    async def action_quit(self) -> None:
        self._leave()

    def _leave(self) -> None:
        self._leaving = True  # a window's fold under way stops at its next step
        self.source.stop()
        self.exit()

    def ask_leave(self) -> None:
        """Quit as `q` does, asked from a signal handler (tui/leaving.py): at the screen's loop's next turn."""
        if self._screen_loop is None:
            self._leave_asked = True
        else:
            self._screen_loop.call_soon_threadsafe(self._leave)


def _sort_key(value):
    return value.lower() if isinstance(value, str) else value


def _level_before(tl, snap: Snapshot) -> int:
    """The budget's level in force in a window with no step of its own: the last step before it (among
    the intervals forgotten, when none held is)."""
    step = tl.step_before(snap.first)
    return step.to.level if step is not None else 0
