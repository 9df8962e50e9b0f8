"""Test helpers for HTML reports: a recording with hostile names and paths (built by hand, as a
damaged or crafted file could hold them), and a parser that reads a page back into its tables."""

from __future__ import annotations

import json
import random
from html.parser import HTMLParser
from pathlib import Path

from stallscope.analyzer.sample import (
    Interval, LockDelta, OffcpuDelta, ProbeStatus, RecordingMeta, Stack, TaskDelta, TaskId, TaskInfo, WakerDelta,
)
from stallscope.analyzer.symbols import Frame

SEC = 1_000_000_000
HOSTILE_IMG = "<img src=x onerror=alert(1)>"
HOSTILE_SCRIPT = "</script><script>window.__pwned=1</script>"
SECRET_DIR = "/home/alice/secret-project/data"
SECRET_CGROUP = "/sys/fs/cgroup/alice.slice/payroll.scope"
SECRET_ARG = "--token=hunter2"


def _kframe(name: str, addr: int) -> Frame:
    return Frame(0xFFFFFFFF81000000 + addr, name, 0x10, "kernel", None, None, "kernel")


def hostile_intervals(n: int = 6) -> tuple[RecordingMeta, list[Interval]]:
    """Two threads named to inject markup, a kernel frame named so too, a contended directory lock whose
    path is private, a cgroup path and a command line with a secret: every string a report must show as
    text (or, redacted, not at all)."""
    a, b = TaskId(4242, 7 * SEC), TaskId(4243, 7 * SEC)
    infos = (TaskInfo(a, 4242, 1, HOSTILE_IMG), TaskInfo(b, 4242, 1, HOSTILE_SCRIPT))
    evil = Stack(0x5000, "kernel", (_kframe("__schedule", 1), _kframe(HOSTILE_IMG, 2), _kframe("ksys_read", 3)))
    lock_stack = Stack(0x6000, "kernel", (_kframe("down_write", 4), _kframe("filename_create", 5),
                                          _kframe("do_mkdirat", 6)))
    meta = RecordingMeta(
        format_version=1, stallscope_version="test", host="testhost", kernel="6.18", cpus=2,
        start_wall=1_700_000_000.0, start_ns=0, interval_s=1.0,
        probes={"offcpu": ProbeStatus(True, "tp_btf"), "locks": ProbeStatus(True, "tp_btf"),
                "oncpu": ProbeStatus(False, "", "not asked for")},
        options={"command": {"argv": ["/home/alice/bin/run.sh", SECRET_ARG, f"{SECRET_DIR}/input"], "pid": 4242,
                             "exit_status": 0}},
        end_ns=n * SEC)
    intervals = []
    for i in range(n):
        k = i + 1
        intervals.append(Interval(
            index=i, start_ns=i * SEC, end_ns=(i + 1) * SEC, wall_start=1_700_000_000.0 + i, switches=1000 * k,
            task_info=infos if i == 0 else (), stacks=(evil, lock_stack) if i == 0 else (),
            tasks=(TaskDelta(a, offcpu_ns=100_000_000 * k, offcpu_count=10 * k, offcpu_max_ns=20_000_000,
                             voluntary_switches=10 * k, involuntary_switches=k, migrations=k,
                             runq_wait_ns=1_000_000 * k, runq_count=5 * k, runq_hist=((12, 3 * k), (20, 2 * k)),
                             run_ns=300_000_000),
                   TaskDelta(b, offcpu_ns=50_000_000 * k, offcpu_count=5 * k, voluntary_switches=5 * k,
                             runq_wait_ns=500_000 * k, runq_count=k, runq_hist=((14, k),), run_ns=100_000_000)),
            offcpu=(OffcpuDelta(a, 4242, 1, evil.id, 0, 10 * k, 100_000_000 * k, 20_000_000,
                                hist=((22, 5 * k), (24, 5 * k))),
                    OffcpuDelta(b, 4242, 2, lock_stack.id, 0, 5 * k, 50_000_000 * k, 15_000_000,
                                hist=((23, 5 * k),))),
            wakers=(WakerDelta(a, b, 4242, HOSTILE_SCRIPT, 0x2, 10 * k, 100_000_000 * k),),
            migrations=((0, 1, k), (1, 0, 2 * k)),
            locks=(LockDelta(b, 4242, 0xFFFF888012345678, lock_stack.id, 4, 2, 5 * k, 50_000_000 * k,
                             max_ns=15_000_000, min_ns=1_000_000, sleep_ns=50_000_000 * k, cache="ext4_inode_cache",
                             blocked_ns=45_000_000 * k, runnable_ns=5_000_000 * k,
                             field="ext4_inode_info.vfs_inode.i_rwsem", object=SECRET_DIR),),
            cgroups=((4242, 7 * SEC, SECRET_CGROUP),) if i == 0 else (),
        ))
    return meta, intervals


class Page(HTMLParser):
    """A report read back: its sections, tables (rows of cells with their attributes and text),
    inline scripts and styles, the CSP, and the script's JSON data."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.sections: list[str] = []
        self.tables: dict[str, list[list[dict]]] = {}
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.data_json = ""
        self.csp = ""
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self._table: list[str] = []
        self._cell: dict | None = None
        self._raw: list | None = None
        self._raw_kind = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.sections.append(a["id"])
        elif tag == "table":
            self._table.append(a.get("id") or f"anonymous-{len(self.tables)}")
            self.tables[self._table[-1]] = []
        elif tag == "tr" and self._table:
            self.tables[self._table[-1]].append([])
        elif tag in ("td", "th") and self._table and self.tables[self._table[-1]]:
            self._cell = {"tag": tag, "attrs": a, "text": ""}
            self.tables[self._table[-1]][-1].append(self._cell)
        elif tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp = a.get("content", "")
        elif tag in ("script", "style"):
            self._raw, self._raw_kind = [], (tag if a.get("type") != "application/json" else "json")

    def handle_endtag(self, tag):
        if tag == "table" and self._table:
            self._table.pop()
        elif tag in ("td", "th"):
            self._cell = None
        elif tag in ("script", "style") and self._raw is not None:
            text = "".join(self._raw)
            {"script": self.scripts, "style": self.styles}.get(self._raw_kind, []).append(text)
            if self._raw_kind == "json":
                self.data_json = text
            self._raw = None

    def handle_data(self, data):
        if self._raw is not None:
            self._raw.append(data)
        elif self._cell is not None:
            self._cell["text"] += data

    def body_rows(self, table: str) -> list[list[dict]]:
        """The rows of a table that hold data cells (the header row left out)."""
        return [r for r in self.tables[table] if any(c["tag"] == "td" for c in r)]

    @property
    def data(self) -> dict:
        return json.loads(self.data_json)


def num(cell: dict):
    """A cell's raw value (data-v) as a number, None when empty."""
    v = cell["attrs"].get("data-v")
    if v in (None, ""):
        return None
    return float(v)


def fifty_thousand_stacks(seed: int = 7) -> list:
    """50,000 distinct stacks 6 to 40 frames deep over a vocabulary of 4,000 functions and 50 threads."""
    rng = random.Random(seed)
    functions = [f"fn_{i}_{rng.choice(('read', 'write', 'lock', 'wait', 'alloc'))}" for i in range(4000)]
    stacks, seen = [], set()
    while len(stacks) < 50_000:
        depth = rng.randint(6, 40)
        frames = (f"thread-{rng.randrange(50)}",) + tuple(rng.choice(functions) for _ in range(depth))
        if frames in seen:
            continue
        seen.add(frames)
        stacks.append((frames, {"blocker": rng.randint(1, 1000) * 1000.0}, "Reading from a pipe"))
    return stacks


def fifty_thousand_stack_page(directory) -> Path:
    """A report of the hostile recording whose off-CPU flame graph is made of `fifty_thousand_stacks` (1.1
    million frames), written as DIRECTORY/big.html."""
    from stallscope import reports
    from stallscope.reports.flametree import build_tree
    from synthetic import write_recording

    stall = Path(directory) / "h.stall"
    write_recording(stall, *hostile_intervals())
    data = reports.build(str(stall))
    tree = build_tree(fifty_thousand_stacks(), ("blocker", "cpu", "idle"), {"Reading from a pipe": "blocker"},
                      min_share=0)
    data["script"]["flame"]["offcpu"] = tree
    html = Path(directory) / "big.html"
    html.write_text(reports.render(data))
    return html
