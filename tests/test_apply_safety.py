"""A recording is a file anyone can hand over: `recommend` prints commands that stay commands when pasted,
and `apply` changes only what the running kernel defines, on tasks that are still the ones recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import run_stallscope
from stallscope import apply as applier
from stallscope.analyzer.sample import (
    LockDelta, ProbeStatus, SlabCache, SlabDelta, TaskDelta, TaskId, TaskInfo,
)
from stallscope.errors import StallscopeError
from synthetic import SEC, interval, meta, write_recording

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing another task's priority needs root")
HOG = TaskId(1001, 7 * SEC)


def _start_time_ns(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        text = f.read()
    return int(text[text.rfind(b")") + 2:].split()[19]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _migration_recording(path, knobs: dict) -> None:
    """The machine ping-pongs (100,000 migrations a second): the scheduler-knob rule fires."""
    m = replace(meta(), machine={"topology": {"online": [0, 1], "cpus": {}}, "sched_knobs": knobs})
    iv = interval(0, task_info=(TaskInfo(HOG, 1001, 1, "hog"),), migrations=((0, 1, 50_000), (1, 0, 50_000)))
    write_recording(path, m, [iv])


def _starved_recording(path, pid: int, start_ns: int, comm: str, cgroup: str = "") -> None:
    """Thread `pid` waits for a CPU behind a hog in another cgroup: the priority rule advises it first."""
    tid = TaskId(pid, start_ns)
    iv = interval(0, task_info=(TaskInfo(tid, pid, 1, comm), TaskInfo(HOG, 1001, 1, "hog")), tasks=(
        TaskDelta(tid, runq_wait_ns=400_000_000, runq_count=200, voluntary_switches=200, runq_hist=((22, 200),),
                  run_ns=20_000_000),
        TaskDelta(HOG, involuntary_switches=300, run_ns=900_000_000)),
        cgroups=((pid, start_ns, cgroup), (1001, 7 * SEC, "/system.slice/hog.service")) if cgroup else ())
    write_recording(path, meta(), [iv])


def _env(tmp_path) -> dict:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}


# ---- what apply writes --------------------------------------------------------------------------

def test_apply_never_writes_a_path_read_from_the_recording(tmp_path):
    """The recording names a knob whose path is a file of the user's; apply resolves the knob on this
    kernel instead, and the file is never touched (the command shown does not name it either)."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for key in ("sched_migration_cost_ns", "migration_cost_ns"):
        path = tmp_path / f"{key}.stall"
        _migration_recording(path, {key: {"path": str(victim), "value": "500000", "stable": True}})
        out = run_stallscope("recommend", str(path)).stdout
        assert "sched_knob" in out and str(victim) not in out
        proc = run_stallscope("apply", str(path), "1", "--yes", check=False, env=_env(tmp_path))
        assert "Traceback" not in proc.stderr
        if proc.returncode == 0:  # a kernel where the knob exists and is writable: put it back
            run_stallscope("apply", "--undo", env=_env(tmp_path))
        else:
            assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert victim.read_text() == "precious\n"


def test_apply_refuses_a_knob_outside_the_kernels_tables_and_an_undo_entry_naming_another_file(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    for action in ({"type": "write", "path": str(victim), "value": "1"},
                   {"type": "write", "path": "/etc/passwd", "value": "1"},
                   {"type": "write", "knob": "core_pattern", "value": "1"},
                   {"type": "write", "cache": "../../../tmp", "attribute": "cpu_partial", "value": "1"},
                   {"type": "write", "cache": "kmalloc-512", "attribute": "../../../../tmp/victim", "value": "1"},
                   {"type": "write", "cache": "no-such-cache-here", "attribute": "cpu_partial", "value": "1"}):
        with pytest.raises(StallscopeError):
            applier.check(action, applier.target_state(action))
    state = tmp_path / "state" / "stallscope"
    state.mkdir(parents=True)
    (state / "undo.jsonl").write_text(json.dumps({"time": 0, "action": {"type": "write", "path": str(victim)},
                                                  "before": {"value": "0"}}) + "\n")
    proc = run_stallscope("apply", "--undo", check=False, env=_env(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert victim.read_text() == "precious\n"


def test_apply_refuses_values_no_kernel_or_machine_would_take(tmp_path):
    me = os.getpid()
    task = {"tid": me, "start_time_ns": _start_time_ns(me), "comm": applier.thread_name(me)}
    for action in ({**task, "type": "affinity", "cpus": [4096]},
                   {**task, "type": "affinity", "cpus": ["0"]},
                   {**task, "type": "affinity", "cpus": []},
                   {**task, "type": "nice", "nice": -21},
                   {**task, "type": "nice", "nice": "-5"},
                   {**task, "tid": 0, "type": "nice", "nice": 0},  # 0 would be stallscope itself
                   {**task, "tid": "1; reboot", "type": "nice", "nice": 0},
                   {**task, "type": "shell", "command": "touch x"},
                   {"type": "write", "cache": "kmalloc-512", "attribute": "cpu_partial", "value": "52; reboot"}):
        with pytest.raises(StallscopeError):
            applier.check(action, applier.target_state(action))


# ---- commands that are pasted -------------------------------------------------------------------

def _slab_recording(path, cache: str) -> None:
    """A hot cache whose node list_lock is waited on: the run-time cpu_partial advice fires for it."""
    kmalloc = SlabCache(0xFFFF888100000000, cache, 512, 512, 1, 16, 0, 0, 52, (0xFFFF888100001000,), (),
                        (("cpu_partial", 52), ("min_partial", 5)))
    app = TaskId(1000, 7 * SEC)
    boot = {"min_objects": 24, "min_objects_default": 24, "max_order": 3, "min_order": 0, "present_cpus": 32,
            "cmdline": {}}
    iv = interval(0, task_info=(TaskInfo(app, 1000, 1, "app"),), tasks=(TaskDelta(app, offcpu_ns=1),),
                  slab_caches=(kmalloc,), slab=(SlabDelta(kmalloc.addr, 1000, False, 100_000, 0, 100_000, 0,
                                                          40_000_000, 51_200_000, 0, 20_000, 100_000),),
                  locks=(LockDelta(app, 1000, kmalloc.nodes[0] + 24, 0, 1, 2, 500, 50_000_000, 100_000, 1_000,
                                   50_000_000, 0, cache="kmem_cache_node"),))
    m = replace(meta(cpus=32, slab={"boot": boot, "list_lock_offset": 24}),
                probes={**meta().probes, "slab": ProbeStatus(True, "tp_btf")})
    write_recording(path, m, [iv])


def _pasted_commands(text: str) -> list[str]:
    """Every command a reader would paste: the `command:` lines and the `...` spans of the other lines."""
    out = []
    for line in text.splitlines():
        body = line.strip()
        if body.startswith("command:"):
            out.append(body.removeprefix("command:").split("  [run time:")[0].strip())
        out += body.split("`")[1::2]
    return [c for c in out if c and not c.startswith("stallscope ")]


def _paste(command: str, cwd) -> subprocess.CompletedProcess:
    """Run a pasted command in sh, in a mount namespace of its own where /sys and /proc/sys are empty
    tmpfs: whatever it writes never reaches this kernel."""
    script = 'mount -t tmpfs none /sys && mount -t tmpfs none /proc/sys && cd "$1" && sh -c "$2"'
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(cwd),
                           command], capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="the paste sandbox needs root and unshare")
def test_commands_naming_a_cache_or_cgroup_from_the_recording_run_nothing_when_pasted(tmp_path):
    hostile = "x$(touch pwned);touch pwned2'$(touch pwned3)'\"$(touch pwned4)\""  # no backquote: it ends a `span`
    _slab_recording(tmp_path / "slab.stall", f"kmalloc-{hostile}")
    _starved_recording(tmp_path / "cgroup.stall", 4242, 5 * SEC, "app", cgroup=f"/user.slice/{hostile}")
    pasted = []
    for name in ("slab.stall", "cgroup.stall"):
        pasted += _pasted_commands(run_stallscope("recommend", str(tmp_path / name)).stdout)
    assert any("cpu_partial" in c for c in pasted) and any("cpu.weight" in c for c in pasted), pasted
    work = tmp_path / "cwd"
    work.mkdir()
    for command in pasted:
        if command.startswith(("taskset", "renice", "chrt", "iostat")):
            command = "echo " + command  # run the shell's part only: the words, not the tool
        _paste(command, work)
    assert not list(work.iterdir()), f"a pasted command ran something: {sorted(os.listdir(work))} from {pasted}"


# ---- the task ----------------------------------------------------------------------------------

@pytest.fixture
def unnamed():
    """A process whose name is not UTF-8 (bytes ff fe, set with prctl(PR_SET_NAME))."""
    code = ("import ctypes, sys, time\n"
            "ctypes.CDLL(None).prctl(15, b'\\xff\\xfesleeper', 0, 0, 0)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    with open(f"/proc/{proc.pid}/comm", "rb") as f:
        assert f.read() == b"\xff\xfesleeper\n"
    yield proc
    proc.kill()
    proc.wait()


@needs_root
def test_apply_on_a_thread_whose_name_is_not_utf8(tmp_path, unnamed):
    path = tmp_path / "unnamed.stall"
    # the collector records a name's bytes with the ones that are not UTF-8 replaced
    _starved_recording(path, unnamed.pid, _start_time_ns(unnamed.pid), b"\xff\xfesleeper".decode(errors="replace"))
    proc = run_stallscope("apply", str(path), "1", "--yes", check=False, env=_env(tmp_path))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert os.getpriority(os.PRIO_PROCESS, unnamed.pid) == -5
    run_stallscope("apply", "--undo", env=_env(tmp_path))
    assert os.getpriority(os.PRIO_PROCESS, unnamed.pid) == 0


@needs_root
def test_apply_refuses_a_thread_that_has_another_name_now(tmp_path, unnamed):
    path = tmp_path / "renamed.stall"
    _starved_recording(path, unnamed.pid, _start_time_ns(unnamed.pid), "\x1b[31mworker")
    proc = run_stallscope("apply", str(path), "1", "--yes", check=False, env=_env(tmp_path))
    assert proc.returncode == 2 and "is now named" in proc.stderr and "\x1b" not in proc.stderr
    assert os.getpriority(os.PRIO_PROCESS, unnamed.pid) == 0
