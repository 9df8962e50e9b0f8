"""HTML post-mortems and diff reports, read back as HTML: every section there, every number the JSON
export's, the same bytes for the same recording, hostile names as text, a policy that lets nothing
else run, and --redact leaving out what it says. (tests/test_report_browser.py runs the pages.)"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import time

import pytest
from markupsafe import escape

from conftest import ROOT, needs_bpf, run_stallscope

sys.path.insert(0, str(ROOT / "tests"))
from reportpage import (  # noqa: E402
    HOSTILE_IMG, HOSTILE_SCRIPT, SECRET_ARG, SECRET_CGROUP, SECRET_DIR, Page, hostile_intervals, num,
)
from synthetic import two_interval_recording, write_recording  # noqa: E402

SECTIONS = ("summary", "fixes", "flame", "timeline", "blockers", "processes", "threads", "locks", "slab", "devices",
            "runq", "migrations", "oncpu", "recording")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    stall = d / "hostile.stall"
    write_recording(stall, *hostile_intervals())
    html = d / "hostile.html"
    run_stallscope("report", str(stall), "-o", str(html))
    return {"stall": stall, "html": html, "text": html.read_text(), "dir": d,
            "doc": json.loads(run_stallscope("export", str(stall)).stdout)}


# ---- what the page holds -----------------------------------------------------------------------


@needs_bpf
def test_every_section_of_a_real_recording_is_present(report_recording):
    page = Page(report_recording["text"])
    assert [s for s in SECTIONS if s not in page.sections] == []
    for table in ("t-blockers", "t-processes", "t-threads", "t-locks", "t-slab", "t-runq", "t-matrix", "t-functions",
                  "t-probes", "t-knobs"):
        assert page.body_rows(table), f"{table} is empty"
    data = page.data
    assert data["series"]["charts"]["t"] and data["flame"]["offcpu"]["name"] and data["flame"]["oncpu"]["name"]
    # each interval's CPUs busy, as /proc/stat counted it then (4 significant digits on the page)
    from stallscope.analyzer.store import Recording

    busy = [sum(b / t for _c, b, t in iv.cpu_time) for iv in Recording(str(report_recording["stall"])).intervals()]
    assert data["series"]["charts"]["cpus_busy"] == pytest.approx(busy, rel=1e-3)
    assert all(0 <= b <= report_recording["doc"]["meta"]["cpus"] for b in busy) and any(busy)


@needs_bpf
def test_the_numbers_in_the_page_are_the_json_exports(report_recording):
    doc, page = report_recording["doc"], Page(report_recording["text"])
    blockers = page.body_rows("t-blockers")
    assert len(blockers) == len(doc["blockers"])
    for row, b in zip(blockers, doc["blockers"]):
        assert row[0]["text"].strip().startswith(b["cause"])
        # no wait ended (a cause of waits still going on): no longest, "-" as a window's table says
        assert num(row[2]) == b["total_ns"] and num(row[5]) == b["count"] and num(row[9]) == (b["max_ns"] or None)
        assert (num(row[4]) is None) == (b["share_pct"] is None)
        if b["share_pct"] is not None:
            assert num(row[4]) == pytest.approx(b["share_pct"])
        for cell, key in ((row[6], "p50_ns"), (row[7], "p90_ns"), (row[8], "p99_ns")):
            assert num(cell) == b["latency"].get(key)
    tasks = {t["pid"]: t for t in doc["tasks"]}
    threads = page.body_rows("t-threads")
    assert threads
    for row in threads:
        t = tasks[int(num(row[0]))]
        assert (num(row[5]), num(row[6]), num(row[7]), num(row[8]), num(row[9])) == (
            t["runq_wait_ns"], t["offcpu_ns"], t["voluntary_switches"], t["involuntary_switches"], t["migrations"])
    # each process with waiting a row, its waiting the sum of its threads'; those that only waited idly named after
    from stallscope.reports.tables import _task_waits

    waiting: dict[int, int] = {}
    for t in doc["tasks"]:
        if not t.get("stallscope"):
            blocked, cpu, _idle = _task_waits(t)
            waiting[t["tgid"]] = waiting.get(t["tgid"], 0) + blocked + cpu
    procs = page.body_rows("t-processes")
    assert len(procs) == min(100, sum(1 for ns in waiting.values() if ns))
    assert all(num(row[3]) == waiting[int(num(row[0]))] > 0 for row in procs)
    quiet = sorted(tgid for tgid, ns in waiting.items() if not ns)
    assert quiet and f"{len(quiet)} processes only waited idly" in report_recording["text"]
    named = report_recording["text"].split('id="t-processes"')[1].split("</section>")[0].split("only waited idly")[1]
    leaders = {t["pid"]: t["comm"] for t in doc["tasks"]}
    assert all(str(escape(leaders.get(tgid, ""))) in named for tgid in quiet)
    idle_threads = [t for t in doc["tasks"] if not t.get("stallscope") and not sum(_task_waits(t)[:2])]
    assert f"{len(idle_threads)} threads only waited idly" in report_recording["text"]
    assert all(num(row[3]) for row in threads)
    locks = page.body_rows("t-locks")
    assert len(locks) == min(len(doc["locks"]), 100)
    in_order = sorted(doc["locks"], key=lambda lk: not lk["is_lock"])  # the locks first, as `stallscope locks` lists them
    for row, lock in zip(locks, in_order):
        assert row[0]["text"] == lock["name"]
        assert (num(row[2]), num(row[3]), num(row[5]), num(row[6])) == (
            lock["contentions"], lock["wait_total_ns"], lock["wait_max_ns"], lock["wait_min_ns"])
    for row, cache in zip(page.body_rows("t-slab"), doc["slab"]):
        assert row[0]["text"] == cache["cache"]
        assert (num(row[3]), num(row[4]), num(row[5])) == (cache["allocs"], cache["frees"], cache["bytes_alloc"])
    for row, fn in zip(page.body_rows("t-functions"), doc["oncpu"]["functions"]):
        assert row[0]["text"] == fn["function"] and num(row[2]) == fn["self_samples"]
        assert num(row[4]) == fn["inclusive_samples"]
    matrix = [[int(num(c)) for c in row if "data-src" in c["attrs"]] for row in page.body_rows("t-matrix")]
    assert matrix == doc["migrations"]["matrix"]
    hist: dict[int, int] = {}
    for t in doc["tasks"]:
        if not t["stallscope"]:
            for slot, c in t["runq_hist_log2_ns"].items():
                hist[int(slot)] = hist.get(int(slot), 0) + c
    assert {int(num(r[0])).bit_length() - 1: int(num(r[2])) for r in page.body_rows("t-runq")} == hist
    summary = report_recording["text"].split('id="summary"')[1].split("</section>")[0]
    top = [b["cause"] for b in doc["blockers"] if b["class"] != "idle"][:5]
    assert [c for c in top if f">{escape(c)}</strong>" not in summary] == []


@needs_bpf
def test_the_windows_parts_add_up_to_the_whole_recording(report_recording):
    """Select every interval and the page would show the export's numbers again."""
    doc, data = report_recording["doc"], Page(report_recording["text"]).data
    w = data["series"]["window"]
    n = w["spans"]
    for b, parts in zip(doc["blockers"], w["causes"]):
        assert parts is not None, b["cause"]
        assert sum(parts["ns"]) == pytest.approx(b["total_ns"], abs=n)
        assert sum(parts["n"]) == pytest.approx(b["count"], abs=0.01 * n + 1)
        assert max(parts["max"]) == b["max_ns"]
        hist: dict[int, float] = {}
        for h in parts["h"]:
            for slot, c in zip(h[::2], h[1::2]):
                hist[slot] = hist.get(slot, 0) + c
        from stallscope.analyzer.blockers import percentiles

        assert percentiles(hist, b["max_ns"]) == {k: v for k, v in b["latency"].items() if k.startswith("p")}
    for lock, parts in zip(sorted(doc["locks"], key=lambda lk: not lk["is_lock"]), w["locks"]):
        assert sum(v[0] for v in parts["v"]) == lock["contentions"]
        assert sum(v[1] for v in parts["v"]) == lock["wait_total_ns"]
    for cache, parts in zip(doc["slab"], w["slab"]):
        assert sum(v[0] for v in parts["v"]) == cache["allocs"]
        assert sum(v[4] for v in parts["v"]) == cache["list_lock"]["wait_total_ns"]
    for fn, parts in zip(doc["oncpu"]["functions"], w["functions"]):
        assert sum(v[0] for v in parts["v"]) == fn["self_samples"]


@needs_bpf
def test_the_series_kept_while_folding_the_model_are_the_series_of_a_second_read(report_recording):
    """The report reads a recording once (the series' records kept as the model is folded): its series
    equal those of the intervals read again, record by record."""
    from stallscope.analyzer.model import Model
    from stallscope.analyzer.series import interval_series
    from stallscope.analyzer.store import Recording
    from stallscope.reports.build import load

    model, kept = load(str(report_recording["stall"]))
    rec = Recording(str(report_recording["stall"]))
    try:
        again = interval_series(model, rec.intervals())
        # and a model folded without a ledger is the same model
        assert Model.from_intervals(rec.meta, rec.intervals(), rec.tasks(), rec.stacks(),
                                    slab_caches=rec.slab_caches(), functions=rec.functions()) == model
    finally:
        rec.close()
    assert kept.intervals == again.intervals > 3
    assert kept.locks and kept.causes and kept.tasks
    assert kept == again


@needs_bpf
def test_the_same_recording_gives_the_same_bytes(report_recording):
    time.sleep(1.1)  # a clock read anywhere in the page would differ now
    again = report_recording["dir"] / "again.html"
    run_stallscope("report", str(report_recording["stall"]), "-o", str(again), timeout=300)
    assert again.read_bytes() == report_recording["html"].read_bytes()


def test_the_same_synthetic_recording_gives_the_same_bytes(hostile):
    again = hostile["dir"] / "again.html"
    run_stallscope("report", str(hostile["stall"]), "-o", str(again))
    assert again.read_bytes() == hostile["html"].read_bytes()


def _pages_with_and_without_a_child(monkeypatch, make) -> tuple:
    """`make()` with a stage made in a forked child (a report's series and stacks, a diff's new export document),
    then in this process alone."""
    from stallscope.reports import beside

    forked = []
    real = beside.Beside.result

    def result(self):
        forked.append(self.forked)
        return real(self)

    monkeypatch.setattr(beside.Beside, "result", result)
    monkeypatch.setattr(beside, "worth_forking", lambda: True)
    with_child = make()
    monkeypatch.setattr(beside, "worth_forking", lambda: False)
    alone = make()
    assert forked == [True, False]
    return with_child, alone


@needs_bpf
def test_the_page_made_beside_a_child_is_the_page_made_alone(report_recording, monkeypatch):
    """The series and stacks made in a forked child (reports/beside.py) give the command's page, byte for
    byte, as it is made without one."""
    from stallscope import reports

    path = str(report_recording["stall"])
    pages = _pages_with_and_without_a_child(monkeypatch, lambda: reports.render(reports.build(path)).encode())
    assert pages[0] == pages[1] == report_recording["html"].read_bytes()


def test_the_diff_made_beside_a_child_is_the_diff_made_alone(hostile, tmp_path, monkeypatch):
    from stallscope import reports

    base = tmp_path / "base.stall"
    write_recording(base, *two_interval_recording())
    with_child, alone = _pages_with_and_without_a_child(
        monkeypatch, lambda: reports.render(reports.build_diff(str(base), str(hostile["stall"]))))
    assert with_child == alone and "regressions" in alone


def test_pages_from_templates_compiled_by_an_earlier_run_are_the_same_bytes(hostile, tmp_path, monkeypatch):
    """The templates are compiled once and kept (reports/render.py CompiledTemplates): a later run compiles none and
    writes the same page; a kept file that is damaged, or that another user could have written, is compiled anew."""
    import importlib

    from stallscope import reports

    render = importlib.import_module("stallscope.reports.render")  # the module (reports.render is its function)
    monkeypatch.setenv("STALLSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    data = reports.build(str(hostile["stall"]))
    compiled = []
    real = render.Environment.compile

    def compile(self, *args, **kwargs):
        compiled.append(args[1] if len(args) > 1 else kwargs.get("name"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(render.Environment, "compile", compile)

    def page() -> str:
        render.environment.cache_clear()  # a new run's environment
        return render.render(data)

    first = page()
    assert first == hostile["text"] and compiled  # the report's template and the one it extends
    kept = sorted((tmp_path / "cache").glob("template-*"))
    assert kept and all(oct(f.stat().st_mode & 0o777) == "0o600" for f in kept)
    compiled.clear()
    assert page() == first and compiled == []
    for f in kept:
        f.write_bytes(b"not compiled code")
    assert page() == first and compiled
    compiled.clear()
    for f in kept:
        f.chmod(0o620)  # a file its group could have written: never loaded
    assert page() == first and compiled


# ---- what the page must never do -----------------------------------------------------------------


def test_hostile_names_are_escaped_text(hostile):
    text = hostile["text"]
    assert HOSTILE_IMG not in text and HOSTILE_SCRIPT not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text  # shown, as text
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text
    page = Page(text)
    assert HOSTILE_IMG in json.dumps(page.data)  # and in the script's data, which JSON keeps intact
    assert "\\u003cimg" in page.data_json and "<" not in page.data_json
    assert [t for t, _a in page.tags if t in ("img", "iframe", "object", "embed", "link", "base", "form")] == []
    assert len(page.scripts) == 3  # the three inlined ones: a name closed no script element


def test_the_content_security_policy_allows_only_the_inlined_code(hostile):
    page = Page(hostile["text"])
    policy = dict(p.strip().split(" ", 1) for p in page.csp.split(";"))
    assert policy["default-src"] == "'none'" and policy["base-uri"] == "'none'"

    def sha(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    assert sorted(policy["script-src"].split()) == sorted(sha(s) for s in page.scripts)
    assert sorted(policy["style-src"].split()) == sorted(sha(s) for s in page.styles)
    for tag, attrs in page.tags:
        for name, value in attrs:
            assert not name.startswith("on") and name != "style", (tag, name)
            if name in ("src", "href", "action"):
                assert value.startswith("#"), (tag, name, value)
    assert not re.search(r"https?://", hostile["text"].split("<script>")[0])  # no URL before the code


def test_redact_leaves_out_the_command_line_and_paths(hostile, tmp_path):
    text = hostile["text"]
    assert SECRET_DIR in text and SECRET_ARG in text and SECRET_CGROUP in text  # the test can fail
    out = tmp_path / "shared.html"
    run_stallscope("report", str(hostile["stall"]), "-o", str(out), "--redact")
    shared = out.read_text()
    for secret in (SECRET_DIR, SECRET_ARG, SECRET_CGROUP, "/home/alice", "hostile.stall"):
        assert secret not in shared, secret
    assert "(redacted)" in shared and "run.sh" in shared  # the program is still named
    assert "&lt;img src=x onerror=alert(1)&gt;" in shared  # names stay


def test_a_model_without_intervals_renders_without_charts(tmp_path):
    from stallscope import reports
    from stallscope.analyzer.load import load_model

    path = tmp_path / "two.stall"
    write_recording(path, *two_interval_recording())
    page = Page(reports.render(reports.build(load_model(str(path)))))
    assert page.data["series"] is None and "blockers" in page.sections


def test_the_charts_carry_each_intervals_cpu_busy_and_quota_throttling(tmp_path):
    """Each interval's CPUs busy (each CPU's busy share of its time, summed) and the throttling a CPU quota
    did in it (summed over the cgroups), as the intervals hold them; a recording made before the intervals
    kept them charts no busy line (null) and no throttling."""
    from dataclasses import replace

    from stallscope.analyzer.sample import Throttled

    m, (i0, i1) = two_interval_recording()
    kept = [replace(i0, cpu_time=((0, 250_000_000, 1_000_000_000), (1, 750_000_000, 1_000_000_000)),
                    throttled=(Throttled("/a", 10, 1_500_000_000, 20_000, 100_000), Throttled("/b", 2, 100_000_000))),
            replace(i1, cpu_time=((0, 1_000_000_000, 1_000_000_000), (1, 0, 1_000_000_000)))]
    path = tmp_path / "kept.stall"
    write_recording(path, m, kept)
    run_stallscope("report", str(path), "-o", str(tmp_path / "kept.html"))
    charts = Page((tmp_path / "kept.html").read_text()).data["series"]["charts"]
    secs = [iv.duration_ns / 1e9 for iv in kept]
    assert charts["cpus_busy"] == [1.0, 1.0]
    assert charts["throttled"] == pytest.approx([1.6 / secs[0], 0], rel=1e-3)
    assert charts["throttled_per_s"] == pytest.approx([12 / secs[0], 0], rel=1e-3)
    write_recording(path, m, [i0, i1])
    run_stallscope("report", str(path), "-o", str(tmp_path / "old.html"), "--force")
    charts = Page((tmp_path / "old.html").read_text()).data["series"]["charts"]
    assert charts["cpus_busy"] == [None, None] and charts["throttled_per_s"] == [0, 0]


def test_data_loss_is_marked_as_data_loss_says_what_went(tmp_path):
    """A full off-CPU map lost waits' causes (red: lost); stack walks that returned nothing lost only stacks (amber:
    totals exact); waits drawn describe the method (unmarked). The summary says the first two apart."""
    from dataclasses import replace

    from stallscope import reports
    from stallscope.analyzer.load import load_model

    m, (i0, i1) = two_interval_recording()
    path = tmp_path / "lossy.stall"
    write_recording(path, m, [replace(i0, health={"offcpu_map_full": 3, "stack_errors": 7, "waits_drawn": 90}), i1])
    text = reports.render(reports.build(load_model(str(path))))
    rows = {name: cls for cls, name in re.findall(r'<tr class="(\w*)"><td><code>(\w+)</code>', text)}
    assert rows == {"offcpu_map_full": "bad", "stack_errors": "warn", "waits_drawn": ""}
    assert "without their stack or cause" in text and "raise --max-tasks" in text
    summary = text[text.index('<h3>The recording</h3>'):text.index('<section id="fixes">')]
    assert re.search(r'<strong class="bad">Data was lost:</strong> offcpu_map_full 3 ', summary)
    assert re.search(r'<strong class="warn">Totals exact, details missing:</strong> stack_errors 7', summary)
    assert "waits_drawn" not in summary


def test_the_summary_says_when_the_tracing_cost_more_than_its_budget(tmp_path):
    """A post-mortem of a run the tracing slowed (sysbench threads 8: 19.8% of the machine against 1%) says so where
    its reader looks first, not only in the cost card at the end."""
    from dataclasses import replace

    from stallscope import reports
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.sample import ProgramCost

    m, (i0, i1) = two_interval_recording()
    path = tmp_path / "costly.stall"
    write_recording(path, m, [replace(i0, programs=(ProgramCost("sched_switch", 100_000, 400_000_000, 0),)), i1])
    text = reports.render(reports.build(load_model(str(path))))
    summary = text[text.index('<h3>The recording</h3>'):text.index('<section id="fixes">')]
    assert re.search(r'<strong class="warn" id="over-budget">stallscope cost [0-9.]+% of the machine, over its budget '
                     r'of 1\.0%</strong>', summary), summary
    write_recording(path, m, [i0, i1])
    text = reports.render(reports.build(load_model(str(path))))
    assert 'id="over-budget"' not in text and "stallscope cost 0.00% of the machine (budget 1.0%)" in text


def test_each_cpus_run_queue_is_kept_per_interval_for_a_window(tmp_path):
    """The By CPU table's figures, per interval in the page's window parts: each CPU's busy time and total
    (/proc/stat), its run-queue wait and waits; over the whole recording they sum to the table's row (the export's)."""
    from dataclasses import replace

    from synthetic import meta

    _m, (i0, i1) = two_interval_recording()
    m = meta(cpu_time_per_interval=True, cpu_runq_per_interval=True)
    kept = [replace(i0, cpu_time=((0, 250_000_000, 1_000_000_000), (1, 750_000_000, 1_000_000_000)),
                    cpu_runq=((0, 10_000_000, 100), (1, 1_500_000_000, 900))),
            replace(i1, cpu_time=((0, 1_000_000_000, 1_000_000_000), (1, 0, 1_000_000_000)),
                    cpu_runq=((1, 500_000_000, 100),))]
    path = tmp_path / "cpus.stall"
    write_recording(path, m, kept)
    run_stallscope("report", str(path), "-o", str(tmp_path / "cpus.html"))
    page = Page((tmp_path / "cpus.html").read_text())
    parts = page.data["series"]["window"]["cpus"]
    assert parts == [{"i": [0, 1], "v": [[250_000_000, 1_000_000_000, 10_000_000, 100], [1_000_000_000, 1_000_000_000, 0, 0]]},
                     {"i": [0, 1], "v": [[750_000_000, 1_000_000_000, 1_500_000_000, 900], [0, 1_000_000_000, 500_000_000, 100]]}]
    rows = page.body_rows("t-cpus")
    secs = sum(iv.duration_ns for iv in kept) / 1e9
    assert [num(r[3]) for r in rows] == [100, 1000]
    assert [num(r[2]) for r in rows] == [round(10_000_000 / 1e9 / secs, 2), round(2_000_000_000 / 1e9 / secs, 2)]
    assert num(rows[1][4]) == 2_000_000


def test_the_summary_says_which_waits_were_still_going_when_the_recording_ended(tmp_path):
    """A task in I/O wait for the whole recording and still in it: its cause's sentence says so with its
    length so far; where no wait of the cause ended, without "over 0 waits, longest 0ns". A task reading a
    pipe as long got nothing: idle ("Reading from a pipe, nothing came"), so the pipe's sentence is that of
    its fed reader's waits alone."""
    from dataclasses import replace

    from stallscope import reports
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.sample import OffcpuDelta, OngoingWait, TaskId, TaskInfo, WaitSince
    from synthetic import INFOS, PIPE, SEC, kstack

    io = kstack(0x7000, "__schedule", "schedule", "io_schedule", "folio_wait_bit_common", "filemap_read")
    m, (i0, i1) = two_interval_recording()
    c, d = TaskId(102, 7 * SEC), TaskId(103, 7 * SEC)
    stuck, reading = OngoingWait(c, 102, 2, io.id, 0, 0, 0), OngoingWait(d, 103, 1, PIPE.id, 0, 0, 0)
    i0 = replace(i0, task_info=INFOS + (TaskInfo(c, 102, 1, "stuck"), TaskInfo(d, 103, 1, "reader")),
                 stacks=i0.stacks + (io,),
                 offcpu=i0.offcpu + (OffcpuDelta(c, 102, 2, io.id, 0, 3, 30_000_000, 10_000_000),
                                     stuck.charged(SEC - 30_000_000), reading.charged(SEC)),
                 opened=(WaitSince(stuck, 30_000_000), WaitSince(reading, 0)))
    i1 = replace(i1, ongoing=(stuck, reading), ongoing_ns=SEC, ongoing_since=(30_000_000, 0), opened=())
    path = tmp_path / "stuck.stall"
    write_recording(path, m, [i0, i1])
    text = " ".join(re.sub(r"<[^>]+>", " ", reports.render(reports.build(load_model(str(path))))).split())
    waiting = re.search(r"Waiting for I/O : [^;]*;", text).group(0)
    assert waiting.endswith("over 3 waits, longest 10.00ms, 1 still waiting when the recording ended (the longest "
                            "1.97s so far);"), waiting
    pipe = re.search(r"Reading from a pipe : [^;]*;", text).group(0)
    assert pipe.endswith("over 50 waits, longest 10.00ms;"), pipe
    # a cause none of whose waits ended: no count or longest of none
    i1 = replace(i1, offcpu=(), tasks=())
    i0 = replace(i0, offcpu=(stuck.charged(SEC), reading.charged(SEC)), tasks=(), wakers=(),
                 opened=(WaitSince(stuck, 0), WaitSince(reading, 0)))
    i1 = replace(i1, ongoing_since=(0, 0))
    write_recording(path, m, [i0, i1])
    text = " ".join(re.sub(r"<[^>]+>", " ", reports.render(reports.build(load_model(str(path))))).split())
    waiting = re.search(r"Waiting for I/O : [^;]*;", text).group(0)
    assert waiting.endswith("(1.00s/s), 1 still waiting when the recording ended (the longest 2.00s so far);"), waiting


# ---- the command line ---------------------------------------------------------------------------


def test_report_and_diff_errors_are_one_line(tmp_path):
    not_a_recording = tmp_path / "x.stall"
    not_a_recording.write_text("hello")
    for args in (["report", str(tmp_path / "missing.stall"), "-o", str(tmp_path / "r.html")],
                 ["report", str(not_a_recording), "-o", str(tmp_path / "r.html")],
                 ["report", str(not_a_recording), "-o", str(tmp_path / "no-such-dir" / "r.html")],
                 ["diff", str(not_a_recording), str(not_a_recording), "--format", "html"]):
        proc = run_stallscope(*args, check=False)
        assert proc.returncode == 2, args
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "r.html").exists()
    path = tmp_path / "two.stall"
    write_recording(path, *two_interval_recording())
    proc = run_stallscope("report", str(path), "-o", str(tmp_path / "no-such-dir" / "r.html"), check=False)
    assert proc.returncode == 2 and "cannot write" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_stallscope("diff", str(path), str(path), "--format", "html", check=False)
    assert proc.returncode == 2 and "-o" in proc.stderr


def test_tasks_that_only_waited_idly_are_named_under_their_tables_by_name_and_as_text(tmp_path):
    """Processes and threads with no waiting outside idle causes are not rows: they are named after the table, once
    per name ('comm[pid]' alone, 'comm ×N' where many share it: a pool of thousands of idle threads is one entry),
    escaped as every name is."""
    from dataclasses import replace

    from stallscope.analyzer.sample import TaskDelta, TaskId, TaskInfo

    meta, intervals = hostile_intervals()
    idle = [TaskId(5000 + i, 9_000_000_000) for i in range(3)]
    infos = (TaskInfo(idle[0], 5000, 1, HOSTILE_SCRIPT),
             *(TaskInfo(t, 5000, 1, "pool-worker") for t in idle[1:]),)
    first = intervals[0]
    intervals[0] = replace(first, task_info=first.task_info + infos,
                           tasks=first.tasks + tuple(TaskDelta(t, voluntary_switches=1) for t in idle))
    stall, out = tmp_path / "idle.stall", tmp_path / "idle.html"
    write_recording(stall, meta, intervals)
    run_stallscope("report", str(stall), "-o", str(out))
    text = out.read_text()
    procs, threads = (text.split(f'id="t-{t}"')[1].split("</section>")[0] for t in ("processes", "threads"))
    assert "1 process only waited idly" in procs and "3 threads only waited idly" in threads
    assert "pool-worker ×2" in threads and "pool-worker[5001]" not in threads
    assert HOSTILE_SCRIPT not in text and str(escape(HOSTILE_SCRIPT)) + "[5000]" in threads
    assert all(int(num(r[0])) < 5000 for r in Page(text).body_rows("t-threads"))


def test_diff_html_ranks_as_diff_json_does(hostile, tmp_path):
    base = tmp_path / "base.stall"
    write_recording(base, *two_interval_recording())
    out = tmp_path / "diff.html"  # the suffix chooses html
    run_stallscope("diff", str(base), str(hostile["stall"]), "-o", str(out))
    doc = json.loads(run_stallscope("diff", str(base), str(hostile["stall"]), "--format", "json").stdout)
    page = Page(out.read_text())
    assert {"compare", "regressions", "improvements", "flame", "timeline", "quiet"} <= set(page.sections)
    shown = []
    for table in ("t-regressions", "t-improvements", "t-quiet"):
        if table in page.tables:
            shown += [(int(num(r[0])), r[2]["text"], num(r[3]), num(r[4]), num(r[5])) for r in page.body_rows(table)]
    expected = [(i, c["name"], c["base_ns_per_s"], c["new_ns_per_s"], c["delta_ns_per_s"])
                for i, c in enumerate(doc["changes"], 1)]
    assert sorted(shown) == [e for e in expected if e[0] in {s[0] for s in shown}]
    assert [s[0] for s in shown if s[0] <= len([c for c in doc["changes"] if c["significant"]])] == \
        list(range(1, 1 + len([c for c in doc["changes"] if c["significant"]])))
    text = out.read_text()
    assert HOSTILE_IMG not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "10%" in text.split('id="guard"')[1].split("</section>")[0]  # the noise guard is stated
    proc = run_stallscope("diff", str(base), str(hostile["stall"]), "--format", "html", "-o", str(tmp_path / "d"),
                          "--redact")
    assert proc.returncode == 0 and SECRET_DIR not in (tmp_path / "d").read_text()


def test_a_long_recordings_window_parts_are_spans_that_still_add_up(tmp_path):
    """Past MAX_SPANS intervals the tables' parts are kept per span of intervals (the charts keep every
    interval): the page stays small, and the parts still add up to the export's numbers."""
    from stallscope.reports.window import MAX_SPANS

    path = tmp_path / "long.stall"
    write_recording(path, *hostile_intervals(2 * MAX_SPANS + 10))
    html = tmp_path / "long.html"
    run_stallscope("report", str(path), "-o", str(html))
    doc = json.loads(run_stallscope("export", str(path)).stdout)
    data = Page(html.read_text()).data
    w = data["series"]["window"]
    assert len(data["series"]["charts"]["t"]) == 2 * MAX_SPANS + 10
    assert w["span"] == 3 and w["spans"] == -(-(2 * MAX_SPANS + 10) // 3)
    for b, parts in zip(doc["blockers"], w["causes"]):
        assert max(parts["i"]) < w["spans"] and sum(parts["ns"]) == b["total_ns"]
        assert sum(parts["n"]) == pytest.approx(b["count"])
    for t, parts in zip((t for t in sorted(doc["tasks"], key=lambda t: -t["offcpu_ns"])), w["threads"]):
        assert sum(v[0] for v in parts["v"]) == t["offcpu_ns"]
    assert sum(x for m in w["matrix"]["m"] for x in m[2::3]) == doc["migrations"]["total"]


def test_the_analyzer_side_of_a_report_imports_no_template_engine():
    """The series and the stacks are analyses: views may use them without Jinja2."""
    import subprocess

    code = ("import sys, stallscope.analyzer.series, stallscope.analyzer.flame, stallscope.analyzer.export; "
            "sys.exit('jinja2' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
