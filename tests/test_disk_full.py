"""A full disk or the file size limit: said in one line, counted right, every file left opens."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import subprocess
import sys
import time

import pytest

from conftest import ROOT, STALLSCOPE, example, needs_bpf, run_stallscope

sys.path.insert(0, str(ROOT / "tests"))
from synthetic import SLEEP, interval, meta  # noqa: E402

from stallscope.analyzer.sample import OffcpuDelta, TaskId  # noqa: E402


@pytest.fixture
def small_disk(tmp_path):
    """Mounts a tmpfs of the size asked for under tmp_path; unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    mounted = []

    def mount(size: str):
        where = tmp_path / f"disk-{len(mounted)}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)], check=True)
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def busy_interval(i: int, rows: int = 300):
    """An interval of `rows` off-CPU records: some 20 KiB in the file."""
    offcpu = tuple(OffcpuDelta(TaskId(1000 + k, k), 1000 + k, 1, SLEEP.id, 0, 1, 1000 * k, 10) for k in range(rows))
    return interval(i, offcpu=offcpu, stacks=(SLEEP,) if i == 0 else ())


# The writer as `record` drives it, in a process of its own (where RLIMIT_FSIZE can be set): appends
# until a write fails, closes, and reports what it said and counted as JSON.
WRITER = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[3])
from test_disk_full import busy_interval
from synthetic import meta
from stallscope.analyzer.store import RecordingWriter
from stallscope.errors import StallscopeError
path, limit = sys.argv[1], int(sys.argv[2])
if limit:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
out = {"error": None, "close_error": None}
try:
    w = RecordingWriter(path, meta())
except StallscopeError as exc:
    out["error"] = str(exc)
    out["created"] = False
    print(json.dumps(out)); sys.exit()
out["created"] = True
for i in range(10000):
    try:
        w.append(busy_interval(i))
    except StallscopeError as exc:
        out["error"] = str(exc)
        break
try:
    w.close()
except StallscopeError as exc:
    out["close_error"] = str(exc)
out["intervals"] = w.intervals
print(json.dumps(out))
"""


def write_until_it_fails(path, size_limit: int = 0) -> dict:
    proc = subprocess.run([sys.executable, "-c", WRITER, str(path), str(size_limit), str(ROOT / "tests")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def intervals_in(path) -> int:
    """As any reader sees the file: read-only, from a copy holding the file alone."""
    from stallscope.analyzer.store import Recording

    rec = Recording(str(path))
    try:
        return rec.interval_count()
    finally:
        rec.close()


def said_count(message: str) -> int:
    m = re.search(r"stopped after (\d+) intervals", message)
    return int(m.group(1)) if m else 0


@pytest.mark.parametrize("size", ["1m", "350k"])  # 350k: room for the schema, its indexes and an interval
def test_full_disk_is_said_and_the_count_is_what_the_file_holds(small_disk, size):
    disk = small_disk(size)
    path = disk / "run.stall"
    out = write_until_it_fails(path)
    assert out["created"], out
    error = out["error"]
    assert "no space left on the file system of" in error and "rollback" not in error
    assert out["close_error"] is None, out  # folded into the file: no -wal to keep beside it
    assert sorted(os.listdir(disk)) == ["run.stall"]
    assert said_count(error) == out["intervals"] == intervals_in(path)
    if size == "1m":
        assert out["intervals"] >= 5


def test_a_disk_too_small_for_the_metadata_leaves_no_file(small_disk):
    disk = small_disk("64k")
    out = write_until_it_fails(disk / "run.stall")
    assert not out["created"]
    assert "no space left" in out["error"] and "nothing recorded" in out["error"]
    assert os.listdir(disk) == []


def test_file_size_limit_is_said_and_the_count_is_what_the_file_holds(tmp_path):
    path = tmp_path / "run.stall"
    out = write_until_it_fails(path, size_limit=400 << 10)
    assert "file size limit (ulimit -f: 400 KiB)" in out["error"], out
    assert out["close_error"] is None, out
    assert sorted(os.listdir(tmp_path)) == ["run.stall"]
    assert os.path.getsize(path) <= 400 << 10
    assert out["intervals"] >= 5
    assert said_count(out["error"]) == out["intervals"] == intervals_in(path)


# ---- the recorder itself -----------------------------------------------------------------------------

def _bpf_descriptors(pid: int) -> list[str]:
    """The BPF programs and links a process holds open (a map alone attaches nothing)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target in ("anon_inode:bpf-prog", "anon_inode:bpf_link"):
            out.append(target)
    return out


def _wait_for_intervals(path, n: int, proc) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            if intervals_in(path) >= n:
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} intervals recorded in 120 s")


def _fill(disk) -> None:
    """Takes every free block of the disk, as another program would (none left: already full). Unbuffered: a
    buffered file holding bytes the full disk refused raised ENOSPC again as it closed."""
    try:
        f = open(disk / "ballast", "wb", buffering=0)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            return
        raise
    with f:
        try:
            while True:
                f.write(b"\0" * (64 << 10))
        except OSError:
            pass


@needs_bpf
def test_recorder_on_a_disk_that_fills_stops_its_probes_and_says_what_it_kept(small_disk):
    disk = small_disk("32m")
    path = disk / "run.stall"
    sleeper = subprocess.Popen([example("sleeper"), "-n", "100000", "-m", "5"], stdout=subprocess.DEVNULL)
    proc = subprocess.Popen([STALLSCOPE, "record", "-o", str(path), "-p", str(sleeper.pid), "-i", "0.2",
                             "-d", "120", "--", "sleep", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_intervals(path, 2, proc)
        _fill(disk)
        deadline = time.monotonic() + 60
        while "waiting for sleep" not in (line := proc.stderr.readline()):
            assert line and time.monotonic() < deadline, "the recorder did not stop"
            if "error:" in line:
                error = line
        # the command runs on; the recorder waits for it with its probes detached
        assert proc.poll() is None and _bpf_descriptors(proc.pid) == []
        proc.kill()
        rest = proc.communicate(timeout=30)[1]
    finally:
        sleeper.kill()
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in rest
    assert error.startswith("stallscope: error: no space left on the file system of"), error
    os.unlink(disk / "ballast")
    assert said_count(error) >= 2 and said_count(error) == intervals_in(path)
    doc = json.loads(run_stallscope("export", str(path)).stdout)
    assert doc["meta"]["intervals"] == said_count(error)


@needs_bpf
def test_recorder_at_the_file_size_limit_exits_2_with_one_error_line(tmp_path):
    path = tmp_path / "run.stall"
    limit = 1 << 20

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    proc = subprocess.run([STALLSCOPE, "record", "-o", str(path), "-i", "0.2", "-d", "120"],
                          capture_output=True, text=True, timeout=300, preexec_fn=limited)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "file size limit (ulimit -f: 1024 KiB)" in errors[0], proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["run.stall"]
    assert said_count(errors[0]) == intervals_in(path)
    json.loads(run_stallscope("export", str(path)).stdout)
