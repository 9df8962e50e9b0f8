"""Maps that overflow for real: sized small with --max-tasks and --stack-map-entries, filled by real
threads, counted in meta.health and said by every command as data loss; and many sleeping threads,
all recorded with the maps sized for the machine."""

from __future__ import annotations

import json
import subprocess

from conftest import STALLSCOPE, example, needs_bpf, run_stallscope
from stallscope.analyzer.load import load_model
from stallscope.analyzer.store import Recording

THREADS = 300


def _record(tmp_path, *args) -> tuple[subprocess.CompletedProcess, dict, str]:
    out = tmp_path / "run.stall"
    proc = subprocess.run([STALLSCOPE, "record", "-o", str(out), "--no-degrade", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    export = run_stallscope("export", str(out))
    return proc, json.loads(export.stdout), str(out)


@needs_bpf
def test_maps_sized_for_64_tasks_overflow_with_300_threads_and_every_command_says_so(tmp_path):
    # 300 threads waking every 50 ms, then exiting together: more waits, wakers and final entries
    # than maps sized for 64 tasks hold
    proc, doc, path = _record(tmp_path, "--max-tasks", "64", "--",
                              example("idle_threads"), "-n", str(THREADS), "-p", "50", "-d", "2")
    sizes = doc["meta"]["options"]["map_sizes"]
    assert (sizes["tasks"], sizes["task_final"], sizes["offcpu"], sizes["wakers"]) == (64, 64, 128, 256)
    health = doc["meta"]["health"]
    # every thread exits within a few ms: the 64 final entries fill, the others' last totals are lost
    assert 0 < health["task_map_full"] <= THREADS + 1
    assert health["waker_map_full"] > 0 and health["offcpu_map_full"] > 0
    lost = {x["key"]: x for x in doc["meta"]["data_loss"]}
    assert lost["task_map_full"]["count"] == health["task_map_full"]
    assert lost["waker_map_full"]["remedy"] == "raise --max-tasks (now 64)"
    assert f"stallscope: data loss: task_map_full {health['task_map_full']:,}:" in proc.stderr  # record's summary
    for command in (["causes"], ["locks"], ["recommend"]):
        out = run_stallscope(*command, path).stdout
        assert f"data loss: waker_map_full {health['waker_map_full']:,}: wakeups recorded without their waker" in out
    assert "data loss: offcpu_map_full" in run_stallscope("export", path, "--format", "folded").stderr


@needs_bpf
def test_a_stack_map_of_64_entries_overflows_and_the_waits_keep_their_time(tmp_path):
    # every wait walked, in 300 processes that each exec (each its own addresses): many more than 64
    # stacks in a second
    proc, doc, path = _record(tmp_path, "--stack-map-entries", "64", "--stack-scale", "0", "--stack-rate", "0",
                              "--user-stack-rate", "0", "--probes", "none", "--",
                              "sh", "-c", "for i in $(seq 300); do sleep 0.001; done")
    assert doc["meta"]["options"]["map_sizes"]["stack_entries"] == 64
    full = doc["meta"]["health"]["stack_map_full"]
    assert full > 0
    assert f"data loss: stack_map_full {full:,}: stacks walked but not stored" in run_stallscope("causes", path).stdout
    assert "raise --stack-map-entries (now 64)" in proc.stderr
    # the waits whose stacks were lost are kept, with their time, their stacks marked as lost
    model = load_model(path)
    lost = {sid for sid, s in Recording(path).stacks().items() if s.truncated and not s.frames}
    waits = [w for w in model.waits if w.kstack_id in lost or w.ustack_id in lost]
    assert lost and waits and sum(w.total_ns for w in waits) > 0


@needs_bpf
def test_top_shows_the_loss_in_the_interval_it_happened():
    idle = subprocess.Popen([example("idle_threads"), "-n", str(THREADS), "-p", "50", "-d", "20"],
                            stdout=subprocess.DEVNULL)
    try:
        out = run_stallscope("top", "-n", "2", "--max-tasks", "64", "--rows", "3", timeout=120).stdout
    finally:
        idle.terminate()
        idle.wait()
    assert "data loss: waker_map_full" in out and "raise --max-tasks (now 64)" in out


@needs_bpf
def test_ten_thousand_sleeping_threads_are_all_recorded_with_nothing_lost(tmp_path):
    """Each thread's first wakeup after attach comes from a timer interrupt, where the kernel may refuse
    to create the thread's storage (another task-storage call on that CPU): such a wakeup is recorded
    at the thread's switch-in instead. The maps, sized for the machine, hold them all."""
    n = 10_000
    idle = subprocess.Popen([example("idle_threads"), "-n", str(n), "-p", "1000", "-s", "32"], stdout=subprocess.PIPE,
                            text=True)
    try:
        tgid = json.loads(idle.stdout.readline())["tgid"]
        proc, doc, path = _record(tmp_path, "-d", "3")
    finally:
        idle.terminate()
        idle.wait()
    health = doc["meta"]["health"]
    assert not [k for k in health if k.endswith("_map_full")], health
    assert health.get("storage_errors", 0) == 0, health
    switched = {t["pid"] for t in doc["tasks"] if t["tgid"] == tgid and t["voluntary_switches"] > 0}
    assert len(switched) >= n, (len(switched), health)
    # each entry is its own task's: the task dump makes the entries of the threads asleep since before while
    # timer wakeups make others' on the same CPU (one shared buffer put a kworker's into a thread's storage:
    # its switches went negative, and the thread was missing in 1 run of 4)
    wrong = [t for t in doc["tasks"] if min(t["voluntary_switches"], t["involuntary_switches"], t["run_ns"]) < 0]
    assert not wrong, wrong[:3]
    # a timer's wakeup is keyed without the task the interrupt landed on (it woke nobody): a sleeping
    # thread has a waker entry per kind of interrupt, not one per task its timers happened to interrupt
    irq = [w for w in load_model(path).wakeups if w.in_interrupt and w.task.pid in switched]
    assert irq and all(w.waker.pid == 0 and w.waker_comm == "" for w in irq)
