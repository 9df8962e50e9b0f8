"""A closed recording is one private file that opens anywhere; one cut off says what it needs;
`record --redact` leaves out command lines and paths."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, STALLSCOPE, needs_bpf, run_stallscope

sys.path.insert(0, str(ROOT / "tests"))
from synthetic import SLEEP, interval, meta, two_interval_recording, write_recording  # noqa: E402

from stallscope.analyzer.sample import (  # noqa: E402
    LockDelta, ProbeStatus, RecordingMeta, Stack, TaskId, Throttled,
)
from stallscope.analyzer.symbols import Frame  # noqa: E402

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]


def _as_nobody(*args) -> subprocess.CompletedProcess:
    if os.geteuid() != 0:
        pytest.skip("runs as nobody from root")
    return subprocess.run([*NOBODY, STALLSCOPE, *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ["PATH"], "HOME": "/tmp"})


def _header_wal(path) -> bool:
    with open(path, "rb") as f:
        return f.read(20)[18:20] == b"\2\2"


@pytest.fixture
def shared_place():
    """A directory only root may write, for files their owner made readable to all: as a recording
    handed to another user, or kept on read-only storage, is read."""
    where = Path(tempfile.mkdtemp(prefix="stallscope-shared-", dir="/tmp"))
    os.chmod(where, 0o755)
    yield where
    shutil.rmtree(where)


def test_a_closed_recording_is_one_private_file_out_of_wal_mode(tmp_path):
    path = tmp_path / "run.stall"
    write_recording(path, *two_interval_recording())
    assert os.listdir(tmp_path) == ["run.stall"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not _header_wal(path)


def test_a_closed_recording_opens_copied_read_only_for_another_user(tmp_path, shared_place):
    path = tmp_path / "run.stall"
    write_recording(path, *two_interval_recording())
    shared = shared_place / "run.stall"
    shutil.copy(path, shared)
    os.chmod(shared, 0o444)
    proc = _as_nobody("export", str(shared))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["meta"]["intervals"] == 2
    assert os.listdir(shared.parent) == ["run.stall"]


def _recording_left_in_wal_mode(path, folded: bool) -> None:
    """A recording as stallscope left them before they left WAL mode on close: `folded`, closed (its
    log folded in and removed); otherwise cut off before anything was folded: all of it in its -wal."""
    made = str(path) + ".made"
    write_recording(made, *two_interval_recording())
    db = sqlite3.connect(made)
    if folded:
        db.execute("PRAGMA journal_mode=WAL")
        db.close()
        os.replace(made, path)
        return
    cut = sqlite3.connect(str(path) + ".cut", isolation_level=None)
    cut.execute("PRAGMA journal_mode=WAL")
    cut.execute("PRAGMA wal_autocheckpoint=0")
    db.backup(cut)
    shutil.copy(str(path) + ".cut-wal", str(path) + "-wal")  # as the recorder was killed: before any fold
    shutil.copy(str(path) + ".cut", path)
    cut.close()
    db.close()


def test_an_older_closed_recording_in_wal_mode_opens_for_another_user(shared_place):
    path = shared_place / "old.stall"
    _recording_left_in_wal_mode(path, folded=True)
    assert _header_wal(path) and not os.path.exists(str(path) + "-wal")
    os.chmod(path, 0o444)
    proc = _as_nobody("export", str(path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["meta"]["intervals"] == 2


def test_a_cut_off_recording_copied_without_its_wal_says_to_copy_the_wal(tmp_path):
    path = tmp_path / "killed.stall"
    _recording_left_in_wal_mode(path, folded=False)
    alone = tmp_path / "copy"
    alone.mkdir()
    shutil.copy(path, alone / "killed.stall")
    proc = run_stallscope("export", str(alone / "killed.stall"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "copy it with its -wal file" in proc.stderr, proc.stderr
    shutil.copy(str(path) + "-wal", alone / "killed.stall-wal")
    assert json.loads(run_stallscope("export", str(alone / "killed.stall")).stdout)["meta"]["intervals"] == 2


@needs_bpf
def _killed_recording(tmp_path) -> tuple[int, subprocess.CompletedProcess]:
    """A recording killed after 8 intervals: the intervals its file opens with in place (with its -wal), and the
    export of a copy made without the -wal."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "run.stall"
    proc = subprocess.Popen([STALLSCOPE, "record", "-o", str(path), "-i", "0.2", "-d", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            n = db.execute("SELECT COUNT(*) FROM intervals").fetchone()[0]
            db.close()
            if n >= 8:
                break
        except sqlite3.Error:
            pass
        time.sleep(0.2)
    proc.kill()
    proc.wait(30)
    for side in ("-wal", "-shm"):  # SQLite gives its files the recording's mode
        assert stat.S_IMODE(os.stat(str(path) + side).st_mode) == 0o600
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(path, alone / "run.stall")
    in_place = json.loads(run_stallscope("export", str(path)).stdout)["meta"]["intervals"]
    return in_place, run_stallscope("export", str(alone / "run.stall"), check=False)


def test_a_killed_recording_opens_in_place_and_copied_alone(tmp_path):
    """In place, with its -wal, a killed recording opens whole. Copied alone it holds what the last fold (about
    once a second) wrote into the file, unless the kill came during a fold, which SQLite writes into the file in
    place: then the copy reads as damaged, in one line with the way to recover it (one CI run of five hit that).
    So a kill is tried up to three times: every copy opens or says so, and one opens."""
    for attempt in range(3):
        in_place, copied = _killed_recording(tmp_path / str(attempt))
        assert in_place >= 8
        if copied.returncode == 0:
            assert 0 < json.loads(copied.stdout)["meta"]["intervals"] <= in_place  # all but the last second at most
            return
        lines = copied.stderr.strip().splitlines()
        assert copied.returncode == 2 and len(lines) == 1 and "is damaged" in lines[0] and ".recover" in lines[0], \
            copied.stderr
    pytest.fail("a copy made without the -wal never opened in three kills")


# ---- --redact -----------------------------------------------------------------------------------------

def _user_frame(module: str) -> Frame:
    return Frame(0x401000, "main", 0x10, module, "ab" * 20, 0x1000, "user")


def test_redaction_drops_command_lines_and_paths_and_keeps_the_rest():
    from stallscope.analyzer.redact import PATH_REDACTED, Redactor

    r = Redactor()
    m = RecordingMeta(format_version=1, stallscope_version="t", host="h", kernel="6.18", cpus=2, start_wall=0.0,
                      start_ns=0, interval_s=1.0, probes={"offcpu": ProbeStatus(True, "tp_btf")},
                      options={"command": {"argv": ["/home/alice/bin/app", "--token", "s3cret"], "pid": 7}},
                      machine={"cpu_side": {"throttled": [{"cgroup": "/sys/fs/cgroup/user.slice/alice.scope",
                                                           "nr_throttled": 1, "throttled_ns": 5}],
                                            "cgroup_psi": [{"cgroup": "/sys/fs/cgroup"}]}})
    red = r.meta(m)
    assert red.options["command"] == {"argv": ["app"], "pid": 7}
    assert red.options["redacted"] == ["command lines", "paths"]
    ustack = Stack(0x5000, "user", (_user_frame("/home/alice/secret/bin/app"), _user_frame("[heap]")))
    lock = LockDelta(TaskId(1, 1), 1, 0xffff0000, 0, 0, 1, 1, 10, field="ext4_inode_info.vfs_inode.i_rwsem",
                     object="/home/alice/secret")
    other = LockDelta(TaskId(1, 1), 1, 0xffff0001, 0, 0, 1, 1, 10, object="in a kmalloc-64 object")
    iv = r.interval(interval(0, stacks=(SLEEP, ustack), locks=(lock, other),
                             cgroups=((1, 1, "/user.slice/alice.scope"), (2, 2, "/"), (3, 3, "/system.slice/db")),
                             throttled=(Throttled("/sys/fs/cgroup/user.slice/alice.scope", 3, 9, 20_000, 100_000),)))
    assert [f.module for f in iv.stacks[1].frames] == ["app", "[heap]"]
    assert iv.stacks[1].frames[0].build_id == "ab" * 20 and iv.stacks[1].frames[0].symbol == "main"
    assert iv.stacks[0] == SLEEP  # kernel stacks hold no paths
    assert [lk.object for lk in iv.locks] == [PATH_REDACTED, "in a kmalloc-64 object"]
    assert iv.locks[0].field == lock.field
    # the same cgroup keeps one name, in the intervals and in the machine's pressure and throttling
    assert [c[2] for c in iv.cgroups] == ["/cgroup-1", "/", "/cgroup-2"]
    assert red.machine["cpu_side"]["throttled"][0]["cgroup"] == "/cgroup-1"
    assert red.machine["cpu_side"]["cgroup_psi"][0]["cgroup"] == "/"
    assert iv.throttled == (Throttled("/cgroup-1", 3, 9, 20_000, 100_000),)
    assert "alice" not in json.dumps([red.options, red.machine, [c[2] for c in iv.cgroups]])


@needs_bpf
def test_record_redact_leaves_no_argument_or_directory_in_the_file(tmp_path):
    secret = tmp_path / "s3cret-dir"
    secret.mkdir()
    path = tmp_path / "run.stall"
    run_stallscope("record", "-o", str(path), "--redact", "-i", "0.2", "--", "sh", "-c",
                   f"cd {secret} && for i in 1 2 3 4 5; do ls {secret} >/dev/null; sleep 0.1; done", timeout=180)
    doc = json.loads(run_stallscope("export", str(path)).stdout)
    assert doc["meta"]["options"]["command"]["argv"] == ["sh"]
    assert doc["meta"]["options"]["redacted"] == ["command lines", "paths"]
    raw = open(path, "rb").read()
    assert b"s3cret-dir" not in raw
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    modules = {f[3] for (frames,) in db.execute("SELECT frames FROM stacks WHERE kind='user'")
               for f in json.loads(frames)}
    assert modules and not any("/" in m for m in modules), modules
    assert all(p == "/" or p.startswith("/cgroup-") for (p,) in db.execute("SELECT path FROM cgroups"))


def test_reading_a_fifo_or_a_directory_as_a_recording_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        proc = run_stallscope("export", str(path), check=False, timeout=30)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a recording" in proc.stderr


def test_a_recording_a_reader_holds_at_close_says_to_keep_its_wal_and_opens_with_it(tmp_path):
    from stallscope.analyzer.store import Recording, RecordingWriter
    from stallscope.errors import StallscopeError

    path = tmp_path / "held.stall"
    m, intervals = two_interval_recording()
    writer = RecordingWriter(str(path), m)
    for iv in intervals:
        writer.append(iv)
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM intervals").fetchone()  # a read in progress: no fold past it
    with pytest.raises(StallscopeError, match="copy it with its -wal file"):
        writer.close()
    reader.close()
    rec = Recording(str(path))
    assert rec.interval_count() == 2
    rec.close()
