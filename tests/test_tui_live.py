"""`stallscope top` live, on the real kernel: in a real terminal (tmux), and what `top -o` records against
what the live view showed."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from conftest import STALLSCOPE, autogroup_in_use, example, group_nice, needs_bpf

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make installs it)")
# the pane's own size, whatever the tmux server's environment holds (a server started where COLUMNS=80 and LINES=24
# were set passes them on, and the screen is drawn at 80x24 in a 120x40 pane)
SIZED = "env -u COLUMNS -u LINES"


def _pane(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait_for_file(path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.2)


def _alternate_screen(session: str) -> str:
    return subprocess.run(["tmux", "display", "-p", "-t", session, "#{alternate_on}"], capture_output=True,
                          text=True).stdout.strip()


def _first_blocker(screen: str) -> str:
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("Blocker (cause)"):
            return lines[i + 1].strip() if i + 1 < len(lines) else ""
    return ""


@needs_bpf
@needs_tmux
def test_top_in_a_terminal_ranks_the_pipe_first_and_q_restores_the_terminal(tmp_path):
    workload = subprocess.Popen([example("pipe_reader"), "-n", "100000", "-m", "5"], stdout=subprocess.DEVNULL)
    session = f"stallscope-test-{os.getpid()}"
    done = tmp_path / "status"
    try:
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40",
                        f"{SIZED} {STALLSCOPE} top -p {workload.pid} -i 0.5; echo $? > {done}; sleep 60"], check=True)
        deadline, first, screen = time.monotonic() + 60, "", ""
        while time.monotonic() < deadline:
            time.sleep(0.5)
            screen = _pane(session)
            first = _first_blocker(screen)
            # the table and the status line are separate widgets: a capture may fall between their redraws
            if first.startswith("Reading from a pipe") and "cost " in screen:
                break
        assert first.startswith("Reading from a pipe"), screen
        assert "stallscope top" in screen and "cost " in screen and "probes:" in screen, screen
        # 40 rows: the detail pane under the table shows the evidence of the blocker the cursor is on
        while time.monotonic() < deadline and "Blocker: Reading from a pipe" not in screen:
            time.sleep(0.5)
            screen = _pane(session)
        assert "Blocker: Reading from a pipe" in screen and "Stacks its waits were seen in" in screen, screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        _wait_for_file(done)
        assert done.exists() and done.read_text().strip() == "0"
        assert _alternate_screen(session) == "0"  # the terminal is back from the TUI's alternate screen
        assert "Blocker (cause)" not in _pane(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        workload.kill()
        workload.wait()


@needs_bpf
@needs_tmux
def test_sigterm_to_top_detaches_the_probes_and_restores_the_terminal(tmp_path):
    session = f"stallscope-term-{os.getpid()}"
    done = tmp_path / "status"
    try:
        pid = [_top_in_tmux(session, "-i 0.5", f"echo $? > {done}; sleep 60")]
        grouped = autogroup_in_use()
        if grouped:  # the pane's session group raised with it (stallscope/priority.py)
            assert group_nice(int(pid[0])) == -20
        shell = int(subprocess.run(["tmux", "display", "-p", "-t", session, "#{pane_pid}"], capture_output=True,
                                   text=True).stdout)
        os.kill(int(pid[0]), 15)
        _wait_for_file(done)
        assert done.exists() and done.read_text().strip() == "0"
        assert _alternate_screen(session) == "0"
        if grouped:
            assert group_nice(shell) == 0  # and put back
        assert not os.path.exists(f"/proc/{pid[0]}")  # its links were file descriptors: gone with it
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


@needs_bpf
@needs_tmux
def test_a_closed_terminal_detaches_the_probes_and_keeps_the_recording(tmp_path):
    """Killing top's tmux session (SIGHUP to the pane's processes, its terminal gone): stallscope leaves,
    its probes detached, and what `-o` recorded is closed and readable; its closing line, with no terminal
    to go to, is no crash."""
    from stallscope.analyzer.store import Recording

    session = f"stallscope-hup-{os.getpid()}"
    path = tmp_path / "top.stall"
    try:
        pid = [_top_in_tmux(session, f"-i 0.5 -o {path}", "sleep 60", env=f"TMPDIR={tmp_path}")]
        time.sleep(1.5)  # a few intervals recorded
        subprocess.run(["tmux", "kill-session", "-t", session], check=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid[0]}"):
            time.sleep(0.2)
        assert not os.path.exists(f"/proc/{pid[0]}")  # gone, and its links (file descriptors) with it
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert not os.path.exists(f"{path}-wal")  # closed, not cut off
    rec = Recording(str(path))
    assert len(list(rec.intervals())) >= 2 and rec.meta.end_ns > rec.meta.start_ns
    assert not list(tmp_path.glob("stallscope-crash-*"))  # crash.py's report, kept where TMPDIR says


_STUCK_SCREEN = """
import os, queue, sys, time
from stallscope.tui.leaving import Leaving

class Source:
    def stop(self):
        print("stopped", flush=True)
    def join(self, timeout=None):
        print("joined", flush=True)
        return sys.argv[1] == "stops"

Leaving(Source(), lambda: None, join_s=0.2, grace_s=0.5).install()
print("ready", flush=True)
full = queue.Queue(1)
full.put("frame")
full.put("frame")  # as Textual's shutdown waits on its dead output thread's full queue: forever
"""


@pytest.mark.parametrize("sig,source", [("SIGHUP", "stops"), ("SIGTERM", "stops"), ("SIGTERM", "hangs")])
def test_a_screen_that_cannot_close_is_ended_after_its_collection_stopped(sig, source):
    """When the screen does not close after SIGHUP or SIGTERM (its terminal gone under it), the collection is
    stopped and joined all the same, and the process ends with the signal's status and one line, which says
    whether the collection stopped."""
    import signal
    import sys

    proc = subprocess.Popen([sys.executable, "-c", _STUCK_SCREEN, source], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + getattr(signal, sig), (out, err)
    assert out.split() == ["stopped", "joined"]
    done = ("the probes were detached and the recording closed" if source == "stops" else
            "the collection did not stop within 0.2 s either: the probes go with the process, and a recording keeps "
            "what was written")
    assert err.strip() == f"stallscope: the screen did not close within 0.5 s of {sig}; {done}; exiting"


def _top_in_tmux(session: str, args: str, then: str, env: str = "") -> str:
    """`ENV stallscope top ARGS; THEN` started in a new tmux session, shown and attached: its pid (not the
    shell's)."""
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "30",
                    f"{SIZED} {env} {STALLSCOPE} top {args}; {then}"], check=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "every 0.5 s" not in _pane(session):
        time.sleep(0.3)
    pids = subprocess.run(["pgrep", "-f", f"{STALLSCOPE} top {args}"], capture_output=True, text=True).stdout.split()
    pid = [p for p in pids if open(f"/proc/{p}/comm").read().strip() == "stallscope"]
    assert pid and _stallscope_links(int(pid[0])) > 0, (pids, _pane(session))
    return pid[0]


def _stallscope_links(pid: int) -> int:
    """BPF links held by the process (its probes, attached)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:bpf_link":
                n += 1
        except OSError:
            pass
    return n


@needs_bpf
def test_what_top_records_replays_as_the_same_snapshots(tmp_path):
    """`top -o FILE` keeps every interval the live view saw: replaying the file gives the same ranked
    blockers and tasks for the same window."""
    from stallscope.analyzer.store import RecordingWriter
    from stallscope.session import SessionOptions
    from stallscope.sources import LiveSource, RecordingSource

    path = str(tmp_path / "top.stall")
    # the workload as the session's command: a process this test started would be its own
    src = LiveSource(SessionOptions(interval_s=0.5, command=[example("pipe_reader"), "-n", "300", "-m", "5"],
                                    max_intervals=4),
                     writer_factory=lambda meta: RecordingWriter(path, meta))
    _run_to_end(src)
    live = src.timeline
    windows = [(i, i) for i in range(live.first_index, live.last_index + 1)] + [(live.first_index, live.last_index)]
    shown = {w: _view(live.window(*w)) for w in windows}
    replay = RecordingSource(path).timeline
    assert (replay.first_index, replay.last_index) == (live.first_index, live.last_index)
    for w in windows:
        assert _view(replay.window(*w)) == shown[w], w
    assert any(b[0] == "Reading from a pipe" for b in shown[windows[-1]][0]), shown[windows[-1]]


def _run_to_end(src) -> None:
    """A live source started and its events taken, as a view would, until its session ends."""
    src.start()
    deadline, kinds = time.monotonic() + 60, []
    while time.monotonic() < deadline and "end" not in kinds and "error" not in kinds:
        time.sleep(0.1)
        kinds += [ev.kind for ev in src.events()]
    assert "end" in kinds, (kinds, src.error)
    assert src.join(10)


def _view(snap):
    return ([(b.cause, b.total_ns, b.count, b.max_ns) for b in snap.ranked],
            [(r.task.pid, r.comm, round(r.waiting_per_s), r.vcs_per_s) for r in snap.tasks])


def test_a_session_that_fails_before_loading_its_probes_ends_at_once_with_its_error():
    """`top` draws its screen while the session's probes load; a session that fails first (no such PID, or no
    privileges) ends at once, and the view hears why."""
    from stallscope.session import SessionOptions
    from stallscope.sources import LiveSource

    # PIDs run below pid_max: pid_max itself is never a process's (the highest free PID below it may become one
    # before the session looks, once a long test session's forks have wrapped the PIDs around)
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read())
    assert not os.path.exists(f"/proc/{pid}")
    src = LiveSource(SessionOptions(pid=pid))
    t0 = time.monotonic()
    src.start()
    assert src.join(10)
    assert time.monotonic() - t0 < 5
    assert src.error and ("PID" in src.error or "root" in src.error), src.error
    assert [ev.payload for ev in src.events() if ev.kind == "error"] == [src.error]


@needs_bpf
def test_an_intervals_work_leaves_no_cycle_for_the_freeze_to_keep(monkeypatch):
    """Each interval's drain, fold and views run outside the cycle collector's view, and what they made
    is frozen when they are done (session.interval_work): an object in a reference cycle then would never
    be freed, an interval after another, for as long as `top` runs. The drains here read the maps, name
    the stacks of processes that start and end all along (their files read), and the futex group
    analyses their libc: none of it leaves a cycle (ctypes array types and ELF headers did)."""
    import gc

    from stallscope.session import SessionOptions
    from stallscope.sources import LiveSource

    freeze, unfreeze, calls = gc.freeze, gc.unfreeze, []  # ("freeze", the cycles it would keep) or ("unfreeze",)

    def checked_freeze():
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect(0)
        finally:
            gc.set_debug(0)
        calls.append(("freeze", sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage})))
        gc.garbage.clear()
        freeze()

    def seen_unfreeze():
        calls.append(("unfreeze",))
        unfreeze()

    gc.unfreeze()  # what earlier tests froze, garbage among it, is not this session's
    gc.collect()
    gc.garbage.clear()
    monkeypatch.setattr(gc, "freeze", checked_freeze)
    monkeypatch.setattr(gc, "unfreeze", seen_unfreeze)
    loop = f"for i in $(seq 30); do {example('pipe_reader')} -n 10 -m 20 >/dev/null; done"
    src = LiveSource(SessionOptions(interval_s=0.5, command=["sh", "-c", loop], max_intervals=8))
    _run_to_end(src)
    assert [c[0] for c in calls].count("freeze") >= 6, calls  # the start-up's, then one an interval
    # start-up's own cycles (ctypes types, files) are frozen unwalked after the set-up drain (gc_work.setup_work),
    # and settle_gc unfreezes them in the wait after the first interval to collect them: only those are let be, and only
    # the set-up's freeze has them; every freeze after settle_gc keeps none
    settled = calls.index(("unfreeze",))
    assert [c[0] for c in calls[:settled]] == ["freeze"], calls[:settled]
    kept = [c[1] for c in calls[settled + 1:] if c[1:] and c[1]]
    assert not kept, kept
    # what an interval made is still in use when it is frozen (the view's timeline holds its snapshot); a
    # cycle among it is garbage only once that snapshot goes, and frozen it would never be collected: the
    # frozen objects are looked at once more, the timeline dropped
    src.timeline = None
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
    finally:
        gc.set_debug(0)
    kept = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
                   if type(o).__module__.startswith("stallscope.analyzer")})
    gc.garbage.clear()
    assert not kept, kept


@needs_bpf
def test_a_live_views_first_interval_ends_an_interval_after_it_started():
    """A live view's first data come an interval after it started, not an interval after the probes were
    loaded and every task read once: its first interval is that much shorter (no shorter than 0.25 s),
    the next ones whole."""
    from stallscope.session import MIN_FIRST_INTERVAL_S, SessionOptions
    from stallscope.sources import LiveSource

    src = LiveSource(SessionOptions(interval_s=2.0, max_intervals=2))
    _run_to_end(src)
    first, second = list(src.timeline.intervals)
    # the session's set-up (loading, attaching, reading every task) took part of the first two seconds
    assert MIN_FIRST_INTERVAL_S * 1e9 <= first.duration_ns <= second.duration_ns - 0.05e9, (first.duration_ns,
                                                                                          second.duration_ns)
    assert second.duration_ns >= 1.9e9


@needs_bpf
def test_a_live_views_first_interval_counts_from_the_commands_start():
    """`stallscope top` counts its first interval from the command's start (`started_at`), where the
    interpreter's start and the imports came before the session: its first data come an interval after the
    command started, not after the session did (never less than 0.25 s after the set-up)."""
    from stallscope.session import MIN_FIRST_INTERVAL_S, SessionOptions
    from stallscope.sources import LiveSource

    started = time.monotonic() - 0.6  # as if the command had started 0.6 s before
    src = LiveSource(SessionOptions(interval_s=2.0, max_intervals=2, started_at=started))
    _run_to_end(src)
    first, second = list(src.timeline.intervals)
    boot_minus_mono = time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
    began = first.start_ns / 1e9 - boot_minus_mono  # the set-up's dump: where the first interval began
    ended = (first.start_ns + first.duration_ns) / 1e9 - boot_minus_mono
    assert abs(ended - max(started + 2.0, began + MIN_FIRST_INTERVAL_S)) < 0.15, (ended - started, began - started)
    assert ended < started + 0.6 + 2.0 - 0.3, (ended - started, began - started)  # sooner than from the session's start
    assert second.duration_ns >= 1.9e9


@needs_bpf
def test_a_notice_made_after_the_start_says_when():
    """A notice stays on the screen until the next one: one made after the session started says when (as the
    window's header says it of an interval), so that "cost 13% of the CPUs is over the budget" is not read as
    now once the status line says 2%. A budget no session keeps to steps down after the first interval."""
    from stallscope.session import SessionOptions
    from stallscope.sources import LiveSource

    loop = f"for i in $(seq 20); do {example('pipe_reader')} -n 10 -m 20 >/dev/null; done"
    src = LiveSource(SessionOptions(interval_s=0.5, command=["sh", "-c", loop], max_intervals=4,
                                    overhead_budget_pct=0.0001))
    src.start()
    deadline, notices, kinds = time.monotonic() + 60, [], []
    while time.monotonic() < deadline and "end" not in kinds and "error" not in kinds:
        time.sleep(0.1)
        for ev in src.events():
            kinds.append(ev.kind)
            # with the time since the session's start as this reader sees it now; a notice made before the start
            # ("probe slab is off") may be read in a poll before the one that reads the start
            if ev.kind == "notice" and src.meta is not None:
                notices.append((ev.payload, (time.clock_gettime_ns(time.CLOCK_BOOTTIME) - src.meta.start_ns) / 1e9))
    assert src.join(10) and "end" in kinds, (kinds, src.error)
    budget = [(n, now) for n, now in notices if "overhead budget" in n]
    assert budget, notices
    for n, now in budget:
        when, _, said = n.partition(" s: ")
        assert when.startswith("+") and when[1:].isdigit(), n
        # made before it was read (a poll of 0.1 s, on a busy machine later), rounded to the second
        assert now - 1.5 <= int(when[1:]) <= now + 0.5, (n, now)
        assert said.startswith("overhead budget: "), n
