"""The command line: help for every command, doctor, and clear one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import STALLSCOPE, needs_bpf, run_stallscope

COMMANDS = ["top", "record", "export", "doctor", "causes", "locks", "slab", "profile", "diff", "recommend", "apply",
            "report"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    out = run_stallscope(command, "--help").stdout
    assert f"stallscope {command}" in out


def test_top_level_help_lists_the_commands():
    out = run_stallscope("--help").stdout
    for c in COMMANDS:
        assert c in out


@needs_bpf
def test_doctor_reports_each_probe_with_its_mechanism():
    proc = run_stallscope("doctor", "--json")
    doc = json.loads(proc.stdout)
    for group in ("offcpu", "runq", "switches", "wakers", "migrations"):
        p = doc["probes"][group]
        assert p["enabled"] is True and p["mechanism"] == "tp_btf", p
    assert set(doc["mechanisms"]) >= {"tp_btf", "raw_tp", "fentry", "kprobe"}
    for name in ("CAP_BPF", "CAP_PERFMON", "CAP_SYSLOG", "CAP_SYS_PTRACE", "CAP_SYS_ADMIN"):
        assert doc["privileges"][name]["ok"] is True


@needs_bpf
def test_doctor_text_names_what_is_off_and_why():
    out = run_stallscope("doctor").stdout
    assert "probe groups" in out and "offcpu" in out
    mech = json.loads(run_stallscope("doctor", "--json").stdout)["mechanisms"]
    for name, check in mech.items():
        if not check["ok"]:
            assert check["detail"] and check["detail"] in out


def test_doctor_without_privileges_says_what_is_missing():
    if os.geteuid() != 0:
        proc = subprocess.run([STALLSCOPE, "doctor"], capture_output=True, text=True)
    else:  # drop every capability and become nobody, as an unprivileged user would run it
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "--inh-caps=-all", "--bounding-set=-all", STALLSCOPE, "doctor"],
                              capture_output=True, text=True, env={"PATH": os.environ["PATH"], "HOME": "/tmp"})
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "CAP_BPF" in errors[0] and "Traceback" not in proc.stderr


def test_record_without_privileges_is_one_line():
    if os.geteuid() != 0:
        pytest.skip("runs as nobody from root")
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                           "--bounding-set=-all", STALLSCOPE, "record", "-o", "/tmp/never.stall", "-d", "1"],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"], "HOME": "/tmp"})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "missing CAP_BPF" in proc.stderr


@needs_bpf
def test_record_for_a_pid_that_does_not_exist():
    proc = run_stallscope("record", "-o", "/tmp/never.stall", "-p", "4194303", "-d", "1", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "no process with PID 4194303" in proc.stderr


@needs_bpf
def test_record_stops_when_the_traced_process_exits(tmp_path):
    sleeper = subprocess.Popen(["sleep", "4"])  # outlives the probes' set-up on a loaded machine
    path = tmp_path / "p.stall"
    proc = run_stallscope("record", "-o", str(path), "-p", str(sleeper.pid), "-i", "0.2", "-d", "30")
    sleeper.wait()
    assert f"process {sleeper.pid} exited" in proc.stderr
    doc = json.loads(run_stallscope("export", str(path)).stdout)
    assert {t["tgid"] for t in doc["tasks"]} == {sleeper.pid}


@needs_bpf
def test_record_into_a_missing_directory():
    proc = run_stallscope("record", "-o", "/nonexistent/dir/x.stall", "-d", "1", check=False)
    assert proc.returncode == 2 and "no directory" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,words", [
    (["record", "-o", "x.stall", "-d", "soon"], "not a duration"),
    (["record", "-d", "5"], "required"),
    (["export", "x.stall", "--format", "xml"], "invalid choice"),
])
def test_bad_arguments_are_explained(args, words):
    proc = run_stallscope(*args, check=False)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


@needs_bpf
def test_top_prints_a_ranking_and_stops_after_n_refreshes():
    proc = run_stallscope("top", "-n", "2", "-i", "0.3", timeout=60)
    assert proc.stdout.count("stallscope top") == 2
    assert "BLOCKER" in proc.stdout and "TASK" in proc.stdout
    assert "\x1b[" not in proc.stdout  # not a terminal: plain frames, no escape codes


def test_probe_spec_starts_from_the_default_set_or_a_named_one():
    from stallscope.cli import DEFAULT_PROBES, OPTIONAL_PROBES, _probe_spec

    assert _probe_spec("-locks") == DEFAULT_PROBES - {"locks"}
    assert _probe_spec("none") == frozenset()
    assert _probe_spec("none,+locks") == frozenset({"locks"})
    assert _probe_spec("all") == frozenset(OPTIONAL_PROBES)
    assert _probe_spec("default") == DEFAULT_PROBES


def test_doctor_lists_the_optional_groups_that_probes_takes():
    doc = json.loads(run_stallscope("doctor", "--json", check=False).stdout)
    from stallscope.cli import OPTIONAL_PROBES

    assert set(doc["optional_groups"]) == set(OPTIONAL_PROBES)


def test_causes_command_shows_a_latencytop_table_and_the_unmatched_stacks(tmp_path):
    import sys

    sys.path.insert(0, str(__import__("conftest").ROOT / "tests"))
    from synthetic import two_interval_recording, write_recording

    path = tmp_path / "two.stall"
    write_recording(path, *two_interval_recording())
    out = run_stallscope("causes", str(path)).stdout
    rows = out.splitlines()
    head = next(i for i, r in enumerate(rows) if r.startswith("CAUSE"))
    assert rows[head].split()[:3] == ["CAUSE", "MAX", "TOTAL"]
    assert rows[head + 1].startswith("Reading from a pipe")  # the sleep is idle: the task asked for it
    assert rows[head + 2].startswith("Waiting for CPU")
    assert "Application requested delay" not in out
    assert "Application requested delay" in run_stallscope("causes", "--all", str(path)).stdout
    assert "context switches" in out  # vmstat's first look heads the table
    by_process = run_stallscope("causes", str(path), "--by", "process").stdout
    assert "sleeper[100]" in by_process or "reader[100]" in by_process
    assert "no rule matched" in run_stallscope("causes", str(path), "--unknown").stdout
    missing = run_stallscope("causes", str(path), "--causes", str(tmp_path / "nope.toml"), check=False)
    assert missing.returncode == 2 and "no cause table" in missing.stderr


# A crash of stallscope's own (a bug) run as a user runs it: a subprocess whose command raises. The command is
# made to fail from outside (a wrapper replacing one command), as no input is known to make one fail.
_CRASHING = """
import sys
from stallscope import cli
def crash(args):
    raise RuntimeError("boom \\x1b[31m[bold]x[/bold]")
cli.COMMANDS["causes"] = crash
sys.exit(cli.main(sys.argv[1:]))
"""


def _crash_file(stderr: str, tmp_path) -> str:
    line = stderr.strip()
    assert "\n" not in line and line.startswith("stallscope: internal error: RuntimeError: boom \\x1b[31m"), stderr
    assert "Traceback" not in stderr and "\x1b" not in stderr
    path = line.split("its traceback is in ", 1)[1].split(";", 1)[0]
    assert path.startswith(str(tmp_path)), line
    return path


def test_an_internal_error_is_one_line_with_its_traceback_kept_in_a_file(tmp_path):
    python = sys.executable
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("STALLSCOPE_DEBUG", None)
    proc = subprocess.run([python, "-c", _CRASHING, "causes", "x.stall"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 70, proc
    path = _crash_file(proc.stderr, tmp_path)
    assert os.stat(path).st_mode & 0o777 == 0o600  # it may hold command lines
    saved = open(path).read()
    assert "command: stallscope causes x.stall" in saved and "Traceback" in saved and "in crash" in saved
    assert "RuntimeError: boom" in saved
    # asked for, the traceback is printed as well
    proc = subprocess.run([python, "-c", _CRASHING, "causes", "x.stall"], capture_output=True, text=True,
                          env={**env, "STALLSCOPE_DEBUG": "1"}, timeout=60)
    assert proc.returncode == 70 and "Traceback" in proc.stderr and "in crash" in proc.stderr


_SCREEN_CRASHING = """
import sys
from stallscope import cli
from stallscope.sources import RecordingSource
from stallscope.tui.app import TopApp
def {name}(self, *args):
    raise RuntimeError("boom \\x1b[31m[bold]x[/bold]")
{owner}.{method} = {name}
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make installs it)")
@pytest.mark.parametrize("owner, method, name, shown, key", [
    ("TopApp", "action_sort", "sort", "Blocker (cause)", "s"),  # the screen's own code, on a key
    ("RecordingSource", "_read", "read", "reading failed: RuntimeError", "q"),  # the reading's, said on the screen
])
def test_an_internal_error_of_the_screen_restores_the_terminal_and_is_said_in_one_line(tmp_path, owner, method,
                                                                                        name, shown, key):
    """Not Textual's traceback, with its locals, over the terminal: the line, the file, the terminal back (the
    screen is drawn on stderr, as Textual does, so the line is read from the terminal)."""
    from tui_fixture import write_tui_recording

    rec, script, done = tmp_path / "t.stall", tmp_path / "crash.py", tmp_path / "status"
    write_tui_recording(rec)
    script.write_text(_SCREEN_CRASHING.format(owner=owner, method=method, name=name))
    session = f"stallscope-crash-{os.getpid()}"
    try:
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40",
                        f"TMPDIR={tmp_path} {sys.executable} {script} top --replay {rec}; "
                        f"echo $? > {done}; sleep 60"], check=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and shown not in _pane(session, joined=True):
            time.sleep(0.2)
        assert shown in _pane(session, joined=True), _pane(session)
        subprocess.run(["tmux", "send-keys", "-t", session, key], check=True)
        while time.monotonic() < deadline and not done.exists():
            time.sleep(0.2)
        assert done.read_text().strip() == "70"
        alternate = subprocess.run(["tmux", "display", "-p", "-t", session, "#{alternate_on}"], capture_output=True,
                                   text=True).stdout.strip()
        assert alternate == "0" and shown not in _pane(session)
        said = [ln for ln in _pane(session, joined=True).splitlines() if ln.startswith("stallscope: ")]
        saved = open(_crash_file("\n".join(said), tmp_path)).read()
        assert f"in {name}" in saved and "RuntimeError: boom" in saved
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def _pane(session: str, joined: bool = False) -> str:
    """The pane's text; `joined`: a line the terminal wrapped as one (capture-pane -J)."""
    return subprocess.run(["tmux", "capture-pane", "-p", *(["-J"] if joined else []), "-t", session],
                          capture_output=True, text=True).stdout


def test_a_reading_command_leaves_without_freeing_and_loses_no_output(tmp_path):
    """The command line's reading commands keep what they read until the process ends, then leave with
    os._exit once stdout is flushed (stallscope/exiting.py): all of the output arrives, through a pipe and
    into a file, with the command's exit status; main() called in a process of its own keeps nothing."""
    import sys

    sys.path.insert(0, str(__import__("conftest").ROOT / "tests"))
    from synthetic import two_interval_recording, write_recording

    from stallscope import cli, exiting

    path = tmp_path / "two.stall"
    write_recording(path, *two_interval_recording())
    piped = run_stallscope("export", str(path))
    doc = json.loads(piped.stdout)  # the whole document: a buffer not flushed would cut it
    assert doc["format"] == "stallscope" and piped.stderr == ""
    with open(tmp_path / "out.json", "w") as f:
        assert subprocess.run([STALLSCOPE, "export", str(path)], stdout=f, timeout=120).returncode == 0
    assert json.loads((tmp_path / "out.json").read_text()) == doc
    # by `python -m stallscope` too, and a command's error keeps its status and message
    missing = subprocess.run([sys.executable, "-m", "stallscope", "causes", str(tmp_path / "nope.stall")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == cli.EXIT_ERROR and missing.stderr.startswith("stallscope: error:"), missing
    # a caller of main() is not left holding every model it reads
    assert cli.main(["export", str(path), "-o", str(tmp_path / "again.json")]) == 0
    assert not exiting.leaving_early()


def test_top_takes_its_priority_before_the_session_and_the_screen_start(monkeypatch):
    """`stallscope top` runs at its --nice from before the session's code and the screen's are imported and
    started (its threads inherit it), and the caller's priority is put back after: on a busy machine those
    imports took seconds at the caller's."""
    import stallscope.sources as sources
    from stallscope import cli
    from stallscope.errors import StallscopeError
    from stallscope.priority import own_nice

    before, seen = own_nice(), {}

    class Source:
        def __init__(self, options, writer_factory=None):
            seen["nice"], seen["started_at"] = own_nice(), options.started_at
            raise StallscopeError("stop here")

    monkeypatch.setattr(sources, "LiveSource", Source)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert cli.main(["top", "--nice", "-7"]) == cli.EXIT_ERROR
    assert seen["nice"] == -7 and own_nice() == before
    # its first interval counts from the process's start: before now, and not long before
    assert time.monotonic() - 600 < seen["started_at"] < time.monotonic()


def test_a_group_raised_already_is_left_without_looking_for_its_other_processes(monkeypatch):
    """raise_group reads every process's /proc entry to find who else is in the group (0.16 s under a hackbench
    loop) only where it would raise the group: `top` raises it as it starts, and its session, which asks again
    on the way to its first data, finds it raised and looks no further."""
    from stallscope import priority

    looked = []
    monkeypatch.setattr(priority, "group_sharers", lambda name: looked.append(name) or [(4242, "sh")])
    monkeypatch.setattr(priority, "_own_group", lambda: (True, ("/autogroup-7", -20)))
    assert priority.raise_group(-20) == (None, "") and priority.raise_group(-10) == (None, "") and not looked
    monkeypatch.setattr(priority, "_own_group", lambda: (False, ("/autogroup-7", 0)))  # not grouped by session
    assert priority.raise_group(-20) == (None, "") and not looked
    monkeypatch.setattr(priority, "_own_group", lambda: (True, ("/autogroup-7", 0)))
    restore, why = priority.raise_group(-20)
    assert restore is None and looked == ["/autogroup-7"] and "sh (4242) shares" in why


@pytest.mark.parametrize("argv, nice", [
    (["top"], -20), (["top", "-i", "0.5"], -20), (["top", "--nice", "-5"], -5), (["top", "--nice=3"], 3),
    (["top", "--replay", "x.stall"], None), (["top", "--replay=x.stall"], None), (["record", "--", "top"], None),
    ([], None), (["top", "--nice", "x"], None), (["top", "--nice", "-30"], None),
    # abbreviated, as the parser takes them
    (["top", "--nic", "5"], 5), (["top", "--ni=-3"], -3), (["top", "--rep", "x.stall"], None),
    (["top", "--rows", "5"], -20), (["top", "--no-degrade"], -20)])
def test_a_live_views_priority_is_read_before_the_parser_is_built(argv, nice):
    from stallscope.priority import live_nice_asked

    assert live_nice_asked(argv) == nice
