"""Recordings survive signals and bad files get one clear line, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time

import pytest

from conftest import STALLSCOPE, example, needs_bpf, run_stallscope


def _as_a_foreground_job() -> None:
    """SIGINT and SIGQUIT as a terminal's foreground job has them: a suite started in the background by a
    shell without job control inherits them ignored, and stallscope keeps a signal its caller ignores."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def _start_recording(path, *extra):
    proc = subprocess.Popen([STALLSCOPE, "record", "-o", str(path), "-i", "0.2", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_a_foreground_job)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until at least two intervals are on disk
        if path.exists():
            try:
                db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                n = db.execute("SELECT COUNT(*) FROM intervals").fetchone()[0]
                db.close()
                if n >= 2:
                    return proc
            except sqlite3.Error:
                pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the recording never wrote two intervals")


@needs_bpf
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_recording_ends_cleanly_on_signal_and_reads_back(tmp_path, sig):
    path = tmp_path / "run.stall"
    proc = _start_recording(path, "-d", "60")
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    doc = json.loads(run_stallscope("export", str(path)).stdout)
    assert doc["meta"]["duration_s"] > 0.3
    assert doc["tasks"], "a system-wide recording sees tasks"
    assert not os.path.exists(str(path) + "-wal") or os.path.getsize(str(path) + "-wal") == 0


@needs_bpf
def test_recording_killed_hard_keeps_the_intervals_written(tmp_path):
    path = tmp_path / "run.stall"
    proc = _start_recording(path, "-d", "60")
    proc.kill()
    proc.wait(timeout=30)
    doc = json.loads(run_stallscope("export", str(path)).stdout)
    assert doc["meta"]["intervals"] >= 2


@needs_bpf
def test_signal_to_stallscope_alone_reaches_the_command(tmp_path):
    """A SIGTERM sent to stallscope (not the terminal's process group) is passed to the command."""
    path = tmp_path / "run.stall"
    proc = subprocess.Popen([STALLSCOPE, "record", "-o", str(path), "--", example("sleeper"), "-n", "1000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err  # the command's fate is stallscope's status
    doc = json.loads(run_stallscope("export", str(path)).stdout)
    assert doc["meta"]["options"]["command"]["exit_status"] == -signal.SIGTERM


@needs_bpf
def test_command_keeps_its_stdio_and_exit_status(tmp_path):
    path = tmp_path / "run.stall"
    proc = subprocess.run([STALLSCOPE, "record", "-o", str(path), "--", "sh", "-c", "read x; echo got $x; exit 3"],
                          input="hello\n", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert proc.stdout == "got hello\n"
    assert "stallscope:" in proc.stderr and "stallscope:" not in proc.stdout


@pytest.fixture(scope="module")
def good_recording(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root to record")
    path = tmp_path_factory.mktemp("rec") / "good.stall"
    run_stallscope("record", "-o", str(path), "--", example("sleeper"), "-n", "5", "-m", "5")
    return path


def _assert_clear_error(proc, *words):
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("stallscope: error:")
    for w in words:
        assert w in lines[0]


def test_truncated_recording_gets_a_clear_error(tmp_path, good_recording):
    bad = tmp_path / "truncated.stall"
    data = good_recording.read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    _assert_clear_error(run_stallscope("export", str(bad), check=False), "damaged")


def test_garbage_file_gets_a_clear_error(tmp_path):
    bad = tmp_path / "garbage.stall"
    bad.write_bytes(os.urandom(4096))
    _assert_clear_error(run_stallscope("export", str(bad), check=False), "not a stallscope recording")


def test_corrupted_pages_get_a_clear_error(tmp_path, good_recording):
    bad = tmp_path / "corrupt.stall"
    data = bytearray(good_recording.read_bytes())
    for off in range(4096, len(data), 997):  # scribble over every page after the header
        data[off] ^= 0xFF
    bad.write_bytes(bytes(data))
    proc = run_stallscope("export", str(bad), check=False)
    _assert_clear_error(proc)


def test_newer_format_is_refused_with_the_reason(tmp_path, good_recording):
    newer = tmp_path / "newer.stall"
    shutil.copy(good_recording, newer)
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value='99' WHERE key='format_version'")
    db.commit()
    db.close()
    _assert_clear_error(run_stallscope("export", str(newer), check=False), "newer stallscope")


def test_other_sqlite_database_is_not_a_recording(tmp_path):
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    _assert_clear_error(run_stallscope("export", str(other), check=False), "not a stallscope recording")


def test_missing_file(tmp_path):
    _assert_clear_error(run_stallscope("export", str(tmp_path / "nope.stall"), check=False), "no such recording")


def test_recording_opens_read_only_files(tmp_path, good_recording):
    ro = tmp_path / "ro.stall"
    shutil.copy(good_recording, ro)
    os.chmod(ro, 0o444)
    doc = json.loads(run_stallscope("export", str(ro)).stdout)
    assert doc["format"] == "stallscope"


@needs_bpf
def test_a_session_says_when_its_probes_began_to_load(tmp_path):
    """meta.options.probes_loading_ns: before the recording's start, within the session's set-up (a wait seen from
    then may be longer than the recording: analyzer/model.py wait_limit_ns)."""
    from stallscope.analyzer.store import Recording

    path = tmp_path / "short.stall"
    before = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    run_stallscope("record", "-o", str(path), "-d", "1", "--probes", "none")
    rec = Recording(str(path))
    m = rec.meta
    rec.close()
    assert before < m.options["probes_loading_ns"] < m.start_ns < m.end_ns
