"""Reports in a real browser: headless Chromium, driven through the DevTools protocol (tests/cdp.py).
The page loads offline with no console error and no request, the flame graph is drawn, search, zoom,
sort, filter and a window selected on a chart work, hostile names stay text and run nothing, and a
zoom over 50,000 distinct stacks lays out only the frames on screen (its time: benchmarks/flame.py)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from conftest import ROOT, run_stallscope
from stallscope.analyzer.units import fmt_ns

sys.path.insert(0, str(ROOT / "tests"))
from cdp import Browser, chromium_path  # noqa: E402
from reportpage import (  # noqa: E402
    HOSTILE_IMG, HOSTILE_SCRIPT, Page, fifty_thousand_stack_page, hostile_intervals,
)
from synthetic import write_recording  # noqa: E402


@pytest.fixture(scope="module")
def browser():
    if chromium_path() is None:
        pytest.fail("chromium is missing: `make install` installs it")
    with Browser(1400, 1000) as b:
        yield b


def load(browser: Browser, path) -> None:
    browser.events.clear()
    browser._consumed = set()
    browser.open(f"file://{path}")
    deadline = time.monotonic() + 30
    while not browser.evaluate("!!(window.__stallscope && window.__stallscope.ready)"):
        assert time.monotonic() < deadline, "the page's script never finished"
        time.sleep(0.1)


def painted_pixels(browser: Browser) -> int:
    return browser.evaluate("""(() => {
        const c = document.getElementById('flame-canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i]) n++;
        return n;
    })()""")


def test_a_report_loads_offline_and_its_controls_work(browser, report_recording):
    load(browser, report_recording["html"])
    url = f"file://{report_recording['html']}"
    assert browser.console_errors() == []
    assert browser.requests() == [url]  # the page itself, nothing else
    assert painted_pixels(browser) > 5000
    assert browser.evaluate("document.querySelectorAll('#charts .uplot').length") == 5
    # a laptop's width holds the page: the tables' cause lists wrap, a card's table scrolls within the card (the
    # threads' causes kept on one line each had made this page 1,495 pixels wide)
    assert browser.evaluate("[window.innerWidth, document.documentElement.scrollWidth]") == [1400, 1400]
    # each value axis is as wide as its widest label ("500 ms/s" had been cut to "00 ms/s" in a fixed width)
    cut = browser.evaluate("""__stallscope.charts.flatMap(u => u.axes.slice(1).flatMap(a => {
        u.ctx.font = a.font[0];
        return (a._values || []).filter(v => u.ctx.measureText(v).width / devicePixelRatio + a.ticks.size + a.gap
                                              > a._size);
    }))""")
    assert cut == []
    # the idle waits on an axis of their own from zero: thousands of sleeping threads would flatten the blockers
    scales = browser.evaluate("""(() => { const u = __stallscope.charts[1];
        return u.series.slice(1).map(s => [s.label, s.scale, u.scales[s.scale].min]); })()""")
    assert ["idle (not waiting)", "idle", 0] in scales and all(sc == "w" for label, sc, _m in scales
                                                                  if not label.startswith("idle")), scales

    # search: the matched share of "Waiting for CPU" is the run-queue wait's share of the waiting
    shares = report_recording["doc"]["meta"]["shares"]
    browser.evaluate("(() => { const s = document.getElementById('flame-search'); s.value = 'Waiting for CPU';"
                     " s.dispatchEvent(new Event('input')); })()")
    share = browser.evaluate("__stallscope.flame.matchShare")
    assert share == pytest.approx(shares["runq_ns"] / shares["waiting_ns"], abs=0.005)
    assert browser.evaluate("document.getElementById('flame-match').textContent").startswith("matched ")

    # zoom into the heaviest first frame, then reset
    before = painted_pixels(browser)
    browser.evaluate("(() => { const f = __stallscope.flame; let best = 1;"
                     " for (let i = 1; i < f.n; i++) if (f.depth[i] === 1 && f.v[i] > f.v[best]) best = i;"
                     " f.zoom(best); })()")
    assert browser.evaluate("__stallscope.flame.zoomed") > 0
    browser.evaluate("document.getElementById('flame-reset').click()")
    assert browser.evaluate("__stallscope.flame.zoomed") == 0 and painted_pixels(browser) == pytest.approx(before, rel=0.2)

    # the toggle to the on-CPU samples and back
    browser.evaluate("document.querySelector('button[data-flame=oncpu]').click()")
    assert browser.evaluate("__stallscope.flame.mode.keys") == ["oncpu"] and painted_pixels(browser) > 1000
    browser.evaluate("document.querySelector('button[data-flame=offcpu]').click()")
    assert browser.evaluate("__stallscope.flame.mode.keys") == ["blocker", "cpu"]

    # sort: Waits, largest first, then smallest first
    def column(table: str, col: int) -> list[float]:
        return browser.evaluate(f"Array.from(document.querySelectorAll('#{table} tbody tr')).map("
                                f"r => Number(r.cells[{col}].getAttribute('data-v') || -1))")

    browser.evaluate("document.querySelectorAll('#t-blockers thead th')[5].querySelector('button').click()")
    waits = column("t-blockers", 5)
    assert waits == sorted(waits, reverse=True)
    browser.evaluate("document.querySelectorAll('#t-blockers thead th')[5].querySelector('button').click()")
    assert column("t-blockers", 5) == sorted(waits)

    # filter
    browser.evaluate("(() => { const f = document.querySelector('input.filter[data-table=\"t-blockers\"]');"
                     " f.value = 'waiting'; f.dispatchEvent(new Event('input')); })()")
    visible = browser.evaluate("Array.from(document.querySelectorAll('#t-blockers tbody tr:not(.hidden)'))"
                               ".map(r => r.textContent.toLowerCase())")
    assert visible and all("waiting" in v for v in visible)
    browser.evaluate("(() => { const f = document.querySelector('input.filter[data-table=\"t-blockers\"]');"
                     " f.value = ''; f.dispatchEvent(new Event('input')); })()")
    assert browser.console_errors() == []

    # a window's cells are written by the page's formatter: durations read as the Python side writes them
    durations = [0, 950, 999.6, 12_345, 999_960, 4_561_000, 999_994_000, 999_999_000, 1_234_000_000,
                 999_994_999_999, 999_995_000_001, 3_600e9, 227_646_490_000_000]
    assert browser.evaluate(f"{durations}.map(__stallscope.fmt.ns)") == [fmt_ns(ns) for ns in durations]


def test_a_range_dragged_on_a_chart_filters_the_tables_to_that_window(browser, report_recording):
    load(browser, report_recording["html"])
    data = Page(report_recording["text"]).data
    n = len(data["series"]["start_s"])
    assert n >= 4, "the fixture should span several intervals"
    box = browser.evaluate("(() => { const o = document.querySelector('#charts .u-over'); o.scrollIntoView();"
                           " const r = o.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
    left, top, width, height = box
    # drag across the middle half of the first chart, as a user would
    x0, x1, y = left + width * 0.3, left + width * 0.7, top + height / 2
    for kind, x in (("mousePressed", x0), ("mouseMoved", (x0 + x1) / 2), ("mouseMoved", x1), ("mouseReleased", x1)):
        browser.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                  "buttons": 0 if kind == "mouseReleased" else 1, "clickCount": 1})
    first, last = browser.evaluate("__stallscope.window")
    assert 0 < first <= last < n - 1
    a, b = browser.evaluate("__stallscope.spans")  # the parts are per span of intervals
    assert not browser.evaluate("document.getElementById('window-bar').hidden")

    # the window's numbers are the sums of its intervals' parts; its percentiles come from summed histograms
    causes = data["series"]["window"]["causes"]
    rows = browser.evaluate("Array.from(document.querySelectorAll('#t-blockers tbody tr')).map(r => ["
                            "Number(r.getAttribute('data-i')), r.cells[2].getAttribute('data-v'),"
                            " r.cells[8].getAttribute('data-v'), r.classList.contains('empty-window')])")
    checked = 0
    for i, total, p99, empty in rows:
        parts = causes[i]
        idx = [k for k, iv in enumerate(parts["i"]) if a <= iv <= b]
        ns = sum(parts["ns"][k] for k in idx)
        assert float(total) == ns
        hist: dict[int, float] = {}
        for k in idx:
            for slot, c in zip(parts["h"][k][::2], parts["h"][k][1::2]):
                hist[slot] = hist.get(slot, 0) + c
        longest = max((parts["max"][k] for k in idx), default=0)
        if hist:
            total_n, seen = sum(hist.values()), 0
            for slot in sorted(hist):
                seen += hist[slot]
                if seen >= 0.99 * total_n - 1e-9:
                    bound = 2 ** (slot + 1)
                    want = min(bound, longest) if longest >= 2 ** slot else bound
                    break
            assert float(p99) == want
            checked += 1
        assert empty == (ns == 0 and not any(parts["n"][k] for k in idx))
    assert checked
    # each CPU's run queue in the window: tasks waiting on average over its seconds, its waits, their mean
    secs = sum(data["series"]["duration_s"][first:last + 1])
    cpu_rows = browser.evaluate("Array.from(document.querySelectorAll('#t-cpus tbody tr')).map(r => ["
                                "Number(r.getAttribute('data-i')), r.cells[2].getAttribute('data-v'),"
                                " r.cells[3].getAttribute('data-v'), r.cells[4].getAttribute('data-v')])")
    assert len(cpu_rows) == report_recording["doc"]["meta"]["cpus"]
    for i, waiting, waits, avg in cpu_rows:
        parts = data["series"]["window"]["cpus"][i]
        idx = [k for k, iv in enumerate(parts["i"]) if a <= iv <= b]
        ns, n = sum(parts["v"][k][2] for k in idx), sum(parts["v"][k][3] for k in idx)
        assert float(waiting) == pytest.approx(ns / 1e9 / secs) and float(waits) == n
        assert (avg == "") if not n else float(avg) == pytest.approx(ns / n)
    whole = browser.evaluate("document.querySelector('#t-blockers tbody tr').cells[2].textContent")
    browser.evaluate("document.getElementById('window-reset').click()")
    assert browser.evaluate("__stallscope.window") is None
    first = report_recording["doc"]["blockers"]
    totals = browser.evaluate("Array.from(document.querySelectorAll('#t-blockers tbody tr')).map("
                              "r => Number(r.cells[2].getAttribute('data-v')))")
    assert sorted(totals) == sorted(b["total_ns"] for b in first)  # the whole recording again
    waits = browser.evaluate("Array.from(document.querySelectorAll('#t-cpus tbody tr')).map(r => Number(r.cells[3].getAttribute('data-v')))")
    assert waits == [c["runq_waits"] for c in report_recording["doc"]["cpus"]]
    assert whole and browser.console_errors() == []


def test_hostile_names_are_shown_as_text_and_run_nothing(browser, tmp_path):
    stall = tmp_path / "hostile.stall"
    write_recording(stall, *hostile_intervals())
    html = tmp_path / "hostile.html"
    run_stallscope("report", str(stall), "-o", str(html))
    load(browser, html)
    assert browser.dialogs() == [] and browser.console_errors() == []
    assert browser.evaluate("window.__pwned === undefined")
    assert browser.evaluate("document.images.length + document.querySelectorAll('iframe,object,embed').length") == 0
    assert browser.evaluate("document.querySelectorAll('script').length") == 4  # the data and the three inlined
    text = browser.evaluate("document.body.innerText")
    assert HOSTILE_IMG in text and HOSTILE_SCRIPT in text
    # the flame graph's hover shows the name as text too
    tip = browser.evaluate(f"""(() => {{
        const f = __stallscope.flame, c = document.getElementById('flame-canvas');
        c.scrollIntoView();
        const node = f.tree.name.indexOf(f.tree.names.indexOf({json.dumps(HOSTILE_IMG)}));
        const r = f.rects.ids.indexOf(node), box = c.getBoundingClientRect();
        c.dispatchEvent(new MouseEvent('mousemove', {{clientX: box.left + f.rects.xs[r] + f.rects.ws[r] / 2,
                                                     clientY: box.top + f.depth[node] * 17 + 8, bubbles: true}}));
        const t = document.getElementById('flame-tip');
        return [t.hidden, t.textContent, t.querySelectorAll('*:not(div)').length];
    }})()""")
    assert tip[0] is False and HOSTILE_IMG in tip[1] and tip[2] == 0
    # a window's cause cells are rebuilt from data: still text
    browser.evaluate("__stallscope.setWindow(1, 3)")
    assert browser.evaluate("window.__pwned === undefined") and browser.evaluate("document.images.length") == 0
    rebuilt = browser.evaluate("document.querySelector('#t-processes td[data-w=causes]').textContent")
    assert rebuilt.startswith(HOSTILE_IMG)
    assert browser.dialogs() == [] and browser.console_errors() == []


def test_the_flame_graphs_frames_are_filled_in_their_colours(browser, report_recording):
    """Every frame wide enough to sample is filled in its own colour, a matched one in the match's, and the frames
    above the zoomed one faded: the rectangles of one colour are filled together, whatever their order."""
    load(browser, report_recording["html"])
    checked = browser.evaluate("""(() => {
        const f = __stallscope.flame, c = f.canvas, ctx = c.getContext('2d'), dpr = c.width / c.clientWidth;
        let deep = 1;  // the first frame two levels down with a child: zoomed, two frames above it
        for (let i = 1; i < f.n; i++) if (f.depth[i] === 2 && f.end[i] > i + 1) { deep = i; break; }
        f.zoom(deep);
        const last = f.rects.ids[f.rects.ids.length - 1];  // a frame drawn below it: its name matched there at least
        f.search(f.tree.names[f.nameIdx[last]]);
        const probe = document.createElement('canvas').getContext('2d', {willReadFrequently: true});
        const rgb = (colour) => { probe.clearRect(0, 0, 1, 1); probe.fillStyle = colour; probe.fillRect(0, 0, 1, 1);
                                  return Array.from(probe.getImageData(0, 0, 1, 1).data.slice(0, 3)); };
        const out = [];
        for (let r = 0; r < f.rects.ids.length; r++) {
            const i = f.rects.ids[r], x = f.rects.xs[r], w = f.rects.ws[r];
            if (w < 4) continue;
            const px = ctx.getImageData(Math.floor((Math.floor(x) + 1) * dpr), Math.floor((f.depth[i] * 17 + 2) * dpr),
                                        1, 1).data;
            const matched = !!(f.matched && f.matched[f.nameIdx[i]]);
            out.push({want: rgb(matched ? '#d35ce6' : f.colours[i]), got: Array.from(px.slice(0, 3)), alpha: px[3],
                      above: f.depth[i] < f.depth[deep], matched: matched});
        }
        return out;
    })()""")
    assert any(c["matched"] for c in checked) and any(not c["matched"] for c in checked)
    assert sum(c["above"] for c in checked) == 2
    for c in checked:
        assert all(abs(a - b) <= 2 for a, b in zip(c["got"], c["want"])), c
        assert (130 <= c["alpha"] <= 150) if c["above"] else c["alpha"] == 255, c


def test_a_zoom_over_50000_distinct_stacks_lays_out_only_what_is_on_screen(browser, tmp_path):
    """Each zoom over 1.1 million frames draws its frame across the whole width and its ancestors above it, and
    lays out only frames at least half a pixel wide: what it costs is what is on screen, not the tree's size
    (its time is measured in benchmarks/flame.py, against a budget of 100 ms)."""
    load(browser, fifty_thousand_stack_page(tmp_path))
    assert browser.console_errors() == []
    zooms = browser.evaluate("""(() => {
        const f = __stallscope.flame, picks = [0];
        let best = 1;
        for (let i = 1; i < f.n; i++) if (f.depth[i] === 1 && f.v[i] > f.v[best]) best = i;
        picks.push(best, best + 1, best + 2, Math.floor(f.n / 2), f.n - 1, 0);
        const width = f.canvas.clientWidth, out = [];
        for (const i of picks) {
            f.zoom(i);
            const L = f.rects, at = L.ids.indexOf(i);
            let ancestors = 0, narrowest = Infinity;
            for (const w of L.ws) if (w < narrowest) narrowest = w;
            for (let a = f.parent[i]; a >= 0; a = f.parent[a]) ancestors++;
            out.push({frame: i, frames: f.n, subtree: f.end[i] - i, drawn: L.ids.length, at: at,
                      x: L.xs[at], w: L.ws[at], width: width, ancestors: ancestors,
                      narrowest: narrowest, rows: L.deepest - f.depth[i] + 1});
        }
        f.search('lock');
        out.push(f.matchShare);
        return out;
    })()""")
    share = zooms.pop()
    assert zooms[0]["frames"] > 1_000_000
    for z in zooms:
        assert z["at"] == z["ancestors"] and z["x"] == 0 and z["w"] == z["width"], z  # the frame spans the width
        assert z["narrowest"] >= 0.5, z
        assert z["drawn"] <= z["ancestors"] + z["rows"] * z["width"] / 0.5, z  # no row holds more than fits
    root = zooms[0]
    assert root["drawn"] < root["subtree"] / 10, root  # the whole tree: most frames are too narrow to lay out
    assert 0 < share < 1
    assert painted_pixels(browser) > 5000


def test_a_recording_a_cpu_quota_throttled_charts_the_throttling_beside_the_cpus_busy(browser, tmp_path):
    """A recording whose intervals kept the throttling and each CPU's busy time: a throttling chart, and a
    CPUs-busy line beside the runnable tasks, drawn with no console error."""
    from dataclasses import replace

    from stallscope.analyzer.sample import Throttled
    from synthetic import two_interval_recording

    m, ivs = two_interval_recording()
    ivs = [replace(iv, cpu_time=((0, 200_000_000, 1_000_000_000), (1, 100_000_000, 1_000_000_000)),
                   throttled=(Throttled("/limited", 10, 1_700_000_000, 20_000, 100_000),)) for iv in ivs]
    write_recording(tmp_path / "q.stall", m, ivs)
    run_stallscope("report", str(tmp_path / "q.stall"), "-o", str(tmp_path / "q.html"))
    load(browser, tmp_path / "q.html")
    assert browser.console_errors() == []
    titles = browser.evaluate("Array.from(document.querySelectorAll('#charts .chart h4')).map(h => h.textContent)")
    assert len(titles) == 6 and titles[-1] == "CPU quota throttling", titles
    legend = browser.evaluate("document.querySelector('#charts .chart').textContent")
    assert "CPUs busy" in legend and "runnable tasks" in legend
