"""Output paths: `record -o`, `export -o` and `diff -o` never destroy what is there."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, STALLSCOPE, needs_bpf, run_stallscope

sys.path.insert(0, str(ROOT / "tests"))
from synthetic import two_interval_recording, write_recording  # noqa: E402


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "two.stall"
    write_recording(path, *two_interval_recording())
    return path


def _one_line_error(proc, *words):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("stallscope: error:")
    for w in words:
        assert w in lines[0], lines[0]


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# the three commands that write, each with the arguments that make it write to OUT
WRITERS = {
    "export": lambda rec, out: ["export", str(rec), "-o", out],
    "diff": lambda rec, out: ["diff", str(rec), str(rec), "-o", out],
    "report": lambda rec, out: ["report", str(rec), "-o", out],
    "record": lambda rec, out: ["record", "-o", out, "-d", "1"],
}


# ---- new files --------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["export", "diff"])
def test_a_new_output_file_is_private_and_holds_what_stdout_would(tmp_path, recording, command):
    out = tmp_path / "out.txt"
    run_stallscope(*WRITERS[command](recording, str(out)))
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    args = WRITERS[command](recording, str(out))[:-2]
    assert out.read_text() == run_stallscope(*args).stdout


def test_a_recording_file_is_created_private(tmp_path):
    path = tmp_path / "r.stall"
    write_recording(path, *two_interval_recording())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["r.stall"]  # no -wal or -shm left beside it


# ---- what is there already ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["export", "diff", "report", "record"])
def test_an_existing_file_is_never_overwritten_without_force(tmp_path, recording, command):
    out = tmp_path / "precious"
    out.write_bytes(b"do not lose me\n")
    before = _digest(out)
    proc = run_stallscope(*WRITERS[command](recording, str(out)), check=False)
    _one_line_error(proc, str(out), "exists", "--force")
    assert _digest(out) == before


@pytest.mark.parametrize("command", ["export", "diff", "report"])
def test_a_refused_output_is_refused_before_the_recording_is_read(tmp_path, command):
    """A report of a long recording takes seconds: `-o` is checked first, not after the work."""
    out = tmp_path / "precious"
    out.write_bytes(b"do not lose me\n")
    missing = tmp_path / "no-such.stall"
    proc = run_stallscope(*WRITERS[command](missing, str(out)), check=False)
    _one_line_error(proc, str(out), "exists", "--force")
    assert "no-such" not in proc.stderr
    proc = run_stallscope(*WRITERS[command](missing, str(tmp_path / "no-dir" / "x")), check=False)
    _one_line_error(proc, "no-dir")


def test_an_existing_recording_is_never_recorded_over(tmp_path, recording):
    before = _digest(recording)
    proc = run_stallscope("record", "-o", str(recording), "-d", "1", check=False)
    _one_line_error(proc, "exists")
    assert _digest(recording) == before


@pytest.mark.parametrize("command", ["export", "diff"])
def test_force_replaces_a_file_with_a_new_private_one(tmp_path, recording, command):
    out = tmp_path / "old.txt"
    out.write_text("old\n")
    os.chmod(out, 0o644)
    run_stallscope(*WRITERS[command](recording, str(out)), "--force")
    assert out.read_text() != "old\n" and out.read_text()
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == sorted(["old.txt", recording.name])  # no temporary file left


def test_an_empty_file_of_ones_own_is_free_to_use(tmp_path, recording):
    """`export -o $(mktemp)`: nothing is there to lose."""
    out = tmp_path / "made-by-mktemp"
    out.touch()
    run_stallscope("export", str(recording), "-o", str(out))
    assert json.loads(out.read_text())["format"] == "stallscope"


@pytest.mark.parametrize("command", ["export", "diff", "record"])
@pytest.mark.parametrize("where", ["", "directory"])
def test_an_empty_name_or_a_directory_is_one_line(tmp_path, recording, command, where):
    out = str(tmp_path) if where == "directory" else ""
    proc = run_stallscope(*WRITERS[command](recording, out), check=False)
    _one_line_error(proc, "directory" if where else "empty")
    assert os.path.isdir(tmp_path)


@pytest.mark.parametrize("command", ["export", "diff", "record"])
def test_a_symlink_planted_for_a_regular_file_is_not_followed(tmp_path, recording, command):
    """Root writing to /tmp/out through a link someone planted there would overwrite the link's target."""
    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    link = tmp_path / "out"
    link.symlink_to(victim)
    proc = run_stallscope(*WRITERS[command](recording, str(link)), check=False)
    _one_line_error(proc, "symbolic link")
    assert victim.read_text() == "secret\n"
    assert os.path.islink(link)
    proc = run_stallscope(*WRITERS[command](recording, str(link)), "--force", check=False)
    assert proc.returncode == 2 and victim.read_text() == "secret\n"


@pytest.mark.parametrize("command", ["export", "diff", "record"])
def test_a_dangling_symlink_creates_nothing_at_its_target(tmp_path, recording, command):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "planted-target")
    proc = run_stallscope(*WRITERS[command](recording, str(link)), check=False)
    _one_line_error(proc, "symbolic link")
    assert not os.path.lexists(tmp_path / "planted-target")


# ---- devices, FIFOs and /dev/stdout -----------------------------------------------------------------
# Each test makes its own device node and links (a build that replaced /dev/null or /dev/stdout
# would damage the machine, not only fail).

@pytest.fixture
def null_device(tmp_path):
    """A character device like /dev/null (1:3), private to the test."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a device node")
    path = tmp_path / "null"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


@pytest.mark.parametrize("command", ["export", "diff"])
def test_text_goes_through_a_device_and_leaves_it_a_device(recording, null_device, command):
    run_stallscope(*WRITERS[command](recording, str(null_device)))
    assert stat.S_ISCHR(os.lstat(null_device).st_mode)


def test_dev_stdout_writes_to_the_descriptor_as_it_is(tmp_path, recording):
    expected = run_stallscope("export", str(recording)).stdout
    link = tmp_path / "out"
    link.symlink_to("/dev/stdout")  # /dev/stdout itself, through a link of the test's own
    assert run_stallscope("export", str(recording), "-o", str(link)).stdout == expected
    appended = tmp_path / "log"
    appended.write_text("kept\n")
    with open(appended, "a") as f:  # `>> log`: what is there stays
        subprocess.run([STALLSCOPE, "export", str(recording), "-o", str(link)], stdout=f, check=True)
    assert appended.read_text() == "kept\n" + expected
    assert os.readlink(link) == "/dev/stdout"


def test_text_goes_through_a_fifo(tmp_path, recording):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("text", open(fifo).read()))
    reader.start()
    run_stallscope("export", str(recording), "-o", str(fifo))
    reader.join(10)
    assert json.loads(got["text"])["format"] == "stallscope"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("target", ["device", "stdout", "fifo"])
def test_record_refuses_what_is_not_a_regular_file(tmp_path, null_device, target):
    path = {"device": null_device, "stdout": tmp_path / "stdout", "fifo": tmp_path / "fifo"}[target]
    if target == "stdout":
        path.symlink_to("/dev/stdout")
    elif target == "fifo":
        os.mkfifo(path)
    before = os.lstat(path)
    proc = run_stallscope("record", "-o", str(path), "-d", "1", check=False)
    _one_line_error(proc, "regular file")
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


# ---- side files and other recorders -------------------------------------------------------------

def test_a_left_over_wal_file_is_refused_then_removed_with_force(tmp_path, recording):
    path = tmp_path / "new.stall"
    wal = tmp_path / "new.stall-wal"
    wal.write_bytes(b"a log left by a recording that was cut off")
    proc = run_stallscope("record", "-o", str(path), "-d", "1", check=False)
    _one_line_error(proc, "new.stall-wal exists")
    assert not path.exists() and wal.exists()
    from stallscope.outputs import create_recording

    target = create_recording(str(path), force=True)
    target.close()
    assert not wal.exists() and stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_force_never_takes_a_file_another_process_holds(tmp_path, recording):
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time\n"
                               f"f = open({str(recording)!r}, 'rb'); fcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('locked', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = _digest(recording)
        proc = run_stallscope("record", "-o", str(recording), "-d", "1", "--force", check=False)
        _one_line_error(proc, "in use by process", str(holder.pid))
        assert _digest(recording) == before
    finally:
        holder.kill()
        holder.wait()


def test_the_writer_refuses_a_path_that_exists(tmp_path, recording):
    from stallscope.analyzer.store import RecordingWriter
    from stallscope.errors import StallscopeError

    m, _ = two_interval_recording()
    before = _digest(recording)
    with pytest.raises(StallscopeError, match="exists"):
        RecordingWriter(str(recording), m)
    assert _digest(recording) == before


def _intervals_in(path) -> int:
    return json.loads(run_stallscope("export", str(path)).stdout)["meta"]["intervals"]


@needs_bpf
def test_a_second_recorder_on_the_same_path_loses_nothing_of_the_first(tmp_path):
    path = tmp_path / "run.stall"
    first = subprocess.Popen([STALLSCOPE, "record", "-o", str(path), "-i", "0.2", "-d", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while "recording to" not in (line := first.stderr.readline()):
            assert line and time.monotonic() < deadline, "the first recorder never started"
        for extra in ([], ["--force"]):
            second = run_stallscope("record", "-o", str(path), "-d", "1", *extra, check=False)
            _one_line_error(second, str(path), f"in use by process {first.pid}")
        time.sleep(0.6)
        first.send_signal(2)
        _out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
    said = int(err.split(" intervals (")[0].rsplit(None, 1)[-1])
    assert said >= 2 and _intervals_in(path) == said


def test_the_writer_never_writes_into_a_file_swapped_in_for_the_one_created(tmp_path):
    """SQLite opens the recording by name: a file put in its place after stallscope created it is left
    as it was, and stallscope says so."""
    from stallscope.analyzer.store import RecordingWriter
    from stallscope.errors import StallscopeError
    from stallscope.outputs import create_recording

    path = tmp_path / "run.stall"
    target = create_recording(str(path))
    os.unlink(path)
    path.write_bytes(b"")  # someone else's empty file, by the same name
    with pytest.raises(StallscopeError, match="was replaced"):
        RecordingWriter(str(path), two_interval_recording()[0], target)
    assert path.read_bytes() == b""
