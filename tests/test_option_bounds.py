"""Numeric options out of range and impossible format versions are refused with the reason."""

from __future__ import annotations

import sqlite3
import sys

import pytest

from conftest import ROOT, run_stallscope

sys.path.insert(0, str(ROOT / "tests"))
from synthetic import two_interval_recording, write_recording  # noqa: E402

from stallscope.cli import build_parser  # noqa: E402

HUGE = "9" * 400  # parses as a float of infinity


# (arguments, words the refusal holds): every numeric option of every command
REFUSED = [
    (["record", "-o", "x.stall", "-i", "1ns"], "at least 10ms"),
    (["record", "-o", "x.stall", "-i", "9ms"], "at least 10ms"),
    (["top", "-i", "2h"], "at most 1h"),
    (["record", "-o", "x.stall", "-d", HUGE], "too long"),
    (["record", "-o", "x.stall", "-d", "0"], "not a duration"),
    (["record", "-o", "x.stall", "--stack-rate", "-5"], "0 (no cap) to 100000"),
    (["record", "-o", "x.stall", "--stack-rate", "5000000000"], "0 (no cap) to 100000"),
    (["top", "--user-stack-rate", "-1"], "0 (no cap) to 100000"),
    (["record", "-o", "x.stall", "--min-stack-wait", "2h"], "at most 1h"),
    (["record", "-o", "x.stall", "--stack-scale", f"{HUGE}h"], "too long"),
    (["record", "-o", "x.stall", "--stack-scale=-1ms"], "not a duration"),
    (["record", "-o", "x.stall", "--sample-hz", "0"], "must be positive"),
    (["top", "--sample-hz", "1000001"], "at most 1000000"),
    (["record", "-o", "x.stall", "-p", "0"], "must be positive"),
    (["record", "-o", "x.stall", "-p", "99999999999"], "PID_MAX_LIMIT"),
    (["record", "-o", "x.stall", "--overhead-budget", "0"], "above 0"),
    (["record", "-o", "x.stall", "--overhead-budget", "nan"], "above 0"),
    (["record", "-o", "x.stall", "--nice", "20"], "-20..19"),
    (["record", "-o", "x.stall", "--realtime", "0"], "1..99"),
    (["top", "--realtime", "100"], "1..99"),
    (["top", "--realtime=x"], "not a number"),
    (["top", "-n", "0"], "must be positive"),
    (["top", "--rows", "-3"], "must be positive"),
    (["causes", "x.stall", "-n", "0"], "must be positive"),
    (["locks", "x.stall", "--callers", "-1"], "must be positive"),
    (["slab", "x.stall", "-n", "0"], "must be positive"),
    (["profile", "x.stall", "--pid", "-1"], "must be positive"),
    (["profile", "x.stall", "-n", "0"], "must be positive"),
    (["diff", "a", "b", "--min-relative", "-5"], "0 or more"),
    (["diff", "a", "b", "--min-relative", "nan"], "0 or more"),
    (["diff", "a", "b", "--min-relative", "inf"], "0 or more"),
    (["diff", "a", "b", "--min-delta=-1ms"], "not a duration"),
    (["diff", "a", "b", "--min-events", "0"], "must be positive"),
    (["apply", "x.stall", "0"], "must be positive"),
]


@pytest.mark.parametrize("args,words", REFUSED, ids=[" ".join(a[:1] + a[-2:])[:60] for a, _ in REFUSED])
def test_an_out_of_range_value_is_refused_with_the_reason(tmp_path, args, words):
    # any file named is in the test's directory: a value wrongly accepted must not litter
    args = [str(tmp_path / a) if a.endswith(".stall") or a in ("a", "b") else a for a in args]
    proc = run_stallscope(*args, "-d", "1", check=False) if args[0] == "record" and "-d" not in args else \
        run_stallscope(*args, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith("stallscope ") and "error: argument" in error and words in error, proc.stderr


def test_the_interval_refusal_says_why(tmp_path):
    error = run_stallscope("record", "-o", str(tmp_path / "x.stall"), "-i", "1ns", "-d", "1", check=False).stderr
    assert "each drain reads every in-kernel map" in error


@pytest.mark.parametrize("args,field,value", [
    (["-i", "10ms"], "interval", 0.01),
    (["-i", "1h"], "interval", 3600.0),
    (["--min-stack-wait", "0"], "min_stack_wait", 0.0),
    (["--stack-scale", "0"], "stack_scale", 0.0),
    (["--stack-rate", "0"], "stack_rate", 0),
    (["--stack-rate", "100000"], "stack_rate", 100000),
    (["--user-stack-rate", "0"], "user_stack_rate", 0),
    (["--sample-hz", "1000000"], "sample_hz", 1000000),  # the kernel's limit turns the group off
    (["-p", "4194303"], "pid", 4194303),
])
def test_the_bounds_themselves_are_accepted(args, field, value):
    parsed = build_parser().parse_args(["record", "-o", "x.stall", *args])
    assert getattr(parsed, field) == value


@pytest.mark.parametrize("version,words", [("-1", "format version -1"), ("0", "format version 0"),
                                           (None, "unreadable"), ("x", "unreadable")])
def test_an_impossible_format_version_is_a_damaged_header(tmp_path, version, words):
    path = tmp_path / "v.stall"
    write_recording(path, *two_interval_recording())
    db = sqlite3.connect(path)
    if version is None:  # the column is NOT NULL: rebuilt without the constraint, as a hand-edit would
        db.executescript("ALTER TABLE meta RENAME TO old; CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
                         "INSERT INTO meta SELECT * FROM old; DROP TABLE old;")
    db.execute("UPDATE meta SET value=? WHERE key='format_version'", (version,))
    db.commit()
    db.close()
    proc = run_stallscope("export", str(path), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "damaged header" in proc.stderr and words in proc.stderr, proc.stderr
