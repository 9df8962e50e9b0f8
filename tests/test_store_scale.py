"""A recording read one window at a time (a replay's time cursor) costs the window, not the file."""

from __future__ import annotations

import sqlite3

from stallscope.analyzer.store import Recording
from synthetic import two_interval_recording, write_recording


def test_every_per_interval_table_is_read_by_window_through_an_index(tmp_path):
    """Without an index, a window of one interval scanned and sorted the whole table: stepping through
    an hour cost the square of its length."""
    path = tmp_path / "r.stall"
    write_recording(path, *two_interval_recording())
    db = sqlite3.connect(path)
    tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
              if "idx" in {r[1] for r in db.execute(f"PRAGMA table_info({t})")}]
    assert {"offcpu", "locks", "futex", "oncpu", "migrations", "programs", "cgroups"} <= set(tables)
    for t in tables:
        plan = " ".join(str(r[3]) for r in db.execute(
            f"EXPLAIN QUERY PLAN SELECT * FROM {t} WHERE idx BETWEEN 5 AND 5 ORDER BY idx"))
        assert "USING INDEX" in plan or "USING INTEGER PRIMARY KEY" in plan, (t, plan)
        assert "TEMP B-TREE" not in plan, (t, plan)


def test_a_window_reads_the_same_intervals_as_the_whole(tmp_path):
    path = tmp_path / "r.stall"
    m, ivs = two_interval_recording()
    write_recording(path, m, ivs)
    rec = Recording(str(path))
    whole = list(rec.intervals())
    assert [list(rec.intervals(i, i)) for i in range(len(whole))] == [[iv] for iv in whole]
