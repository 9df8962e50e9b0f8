"""The scheduler probes against ground truth, on the real kernel.

The example workloads read their own /proc/thread-self counters at start and
just before they exit and print them; stallscope's numbers for the same
threads must agree: off-CPU time with the time measured inside the blocking
calls, switch counts and migrations exactly, run-queue wait with schedstat.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time

import pytest

from conftest import (ALL_STACKS, STALLSCOPE, autogroup_in_use, example, group_nice, needs_bpf, record_command,
                      run_stallscope)

pytestmark = needs_bpf


def _task(doc: dict, tid: int) -> dict:
    # PIDs wrap (pid_max is 32768 on small machines): a system-wide recording may hold an
    # older task with the same pid; the command's own tasks are the ones its tree created.
    found = [t for t in doc["tasks"] if t["pid"] == tid and t.get("in_command")]
    assert len(found) == 1, f"thread {tid} missing from the recording, or there twice"
    return found[0]


def _truth(truth: list[dict], role: str) -> dict:
    return next(t for t in truth if t["role"] == role)


def _steal_ns() -> int:
    """Time the hypervisor took from this VM's CPUs (/proc/stat steal, all CPUs)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


# Every stack walked: these tests check what the probes measure and which stack a wait has, not how
# stacks are sampled (tests/test_budget.py does); at the default rate the machine's other tasks may
# spend the walks of the moment.


def _record_with_steal(tmp_path, argv, *extra):
    before = _steal_ns()
    doc, truth, path = record_command(tmp_path, argv, *extra)
    doc["_test_steal_ns"] = _steal_ns() - before
    return doc, truth, path


@pytest.fixture(scope="module")
def sleeper_run(tmp_path_factory):
    return _record_with_steal(tmp_path_factory.mktemp("sleeper"), [example("sleeper"), "-n", "100", "-m", "20"],
                              *ALL_STACKS)


@pytest.fixture(scope="module")
def pipe_run(tmp_path_factory):
    return _record_with_steal(tmp_path_factory.mktemp("pipe"), [example("pipe_reader"), "-n", "100", "-m", "10"],
                              *ALL_STACKS)


def _stack_text(doc: dict, tid: int) -> str:
    return " ".join(" ".join(b["stack"]) for b in doc["blockers"] if any(t["pid"] == tid for t in b["tasks"]))



def _assert_inside_the_calls(doc: dict, ours: dict, t: dict) -> None:
    """Within 2%, never above; below by at most what the host stole meanwhile: a vCPU the host
    stops leaves the guest thinking the thread ran, so stolen time is inside the calls too.
    A block the recording did not count (at most one, see the sleeper's test) is a call's time
    missing too: one call's average length (with a tenth more for its wakeup) is allowed per block
    missing, no more."""
    inside = _inside_the_calls(ours)
    blocks = t["end"]["voluntary_switches"] - t["start"]["voluntary_switches"]
    missing = max(0, blocks - ours["offcpu_count"])
    per_call = t["blocked_ns"] / max(1, t["calls"])
    why = {"inside_ns": inside, "truth_ns": t["blocked_ns"], "steal_ns": doc["_test_steal_ns"],
           "blocks": blocks, "counted": ours["offcpu_count"],
           "health": {k: v for k, v in doc["meta"].get("health", {}).items() if v}}
    assert inside <= t["blocked_ns"] * 1.02, why
    assert inside >= t["blocked_ns"] * 0.98 - doc["_test_steal_ns"] - missing * 1.1 * per_call, why


def _inside_the_calls(ours: dict) -> int:
    """What the time measured inside the blocking calls is made of: blocked (off-CPU), then queued
    from the wakeup until the thread runs (measured with ktime; schedstat's run_delay misses part
    of it after wakeup preemptions, see README). Threads of these workloads do little else."""
    return ours["offcpu_ns"] + ours["runq_latency_ns"]


def test_sleeping_thread_is_off_cpu_for_the_time_it_slept(sleeper_run):
    doc, truth, _ = sleeper_run
    t = _truth(truth, "sleeper")
    ours = _task(doc, t["tid"])
    _assert_inside_the_calls(doc, ours, t)
    assert ours["offcpu_ns"] >= 0.8 * t["blocked_ns"] - doc["_test_steal_ns"]  # the sleeps dominate
    # One off-CPU wait per block, and the kernel counts each block as a voluntary switch. Rarely
    # (a few runs in ten) one block's switch-out shows the task RUNNING and the wait is not
    # recorded; meta.health.waking_unblocked counts such wakeups. Not yet explained: at most one.
    blocks = t["end"]["voluntary_switches"] - t["start"]["voluntary_switches"]
    assert blocks - 1 <= ours["offcpu_count"] <= blocks


def _schedstat(pid: int) -> tuple[int, int, int]:
    """What the kernel says the task did: time on a CPU, time queued, times it was switched in."""
    with open(f"/proc/{pid}/schedstat") as f:
        run, queued, slices = (int(v) for v in f.read().split())
    return run, queued, slices


def test_a_task_asleep_since_before_the_recording_is_charged_the_whole_recording(tmp_path):
    """`sleep 30` started before a 2 s recording of its process, and never woken while recorded: the
    set-up's task dump finds it blocked and opens its wait there (it has never switched out under the
    probes), so it is in the recording, blocked for all of it (within 2% of the recording's length; the
    kernel's schedstat says it never ran meanwhile), where it sleeps (the nanosleep stack, walked by a
    later dump), as an idle cause; marked `found_blocked`."""
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.3)  # asleep in nanosleep
        before = _schedstat(sleeper.pid)
        out = tmp_path / "run.stall"
        run_stallscope("record", "-o", str(out), *ALL_STACKS, "-d", "2", "-p", str(sleeper.pid))
        after = _schedstat(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert before == after  # the ground truth: it never ran while recorded
    doc = json.loads(run_stallscope("export", str(out)).stdout)
    ours = [t for t in doc["tasks"] if t["pid"] == sleeper.pid]
    assert len(ours) == 1, [t["pid"] for t in doc["tasks"]]
    recorded_ns = doc["meta"]["duration_s"] * 1e9
    assert abs(ours[0]["offcpu_ns"] - recorded_ns) <= 0.02 * recorded_ns, (ours[0]["offcpu_ns"], recorded_ns)
    assert ours[0]["comm"] == "sleep" and ours[0]["voluntary_switches"] == 0
    top = ours[0]["causes"][0]
    assert top["cause"] == "Application requested delay" and top["class"] == "idle"
    assert "nanosleep" in _stack_text(doc, sleeper.pid)
    assert ours[0]["found_blocked"]
    # in progress at the end, its length so far that of the recording (it began before: at least that)
    assert abs(ours[0]["blocked_now_ns"] - recorded_ns) <= 0.02 * recorded_ns
    delay = next(b for b in doc["blockers"] if b["cause"] == "Application requested delay")
    assert delay["in_progress"] == 1 and delay["in_progress_longest_ns"] == ours[0]["blocked_now_ns"]


def test_a_reader_that_gets_nothing_is_idle_after_a_second_and_one_fed_is_held_up_by_its_writer(tmp_path):
    """Two `cat`s read pipes this test holds the other ends of, over a 3 s recording: one is never written
    to (an idle reader, asleep in read() since before the recording), the other gets a line every 20 ms
    (a consumer held up by its producer). The fed one's waits are "Reading from a pipe", a blocker; the idle
    one's time, after the first second of its wait, is "Reading from a pipe, nothing came", an idle cause,
    so that it never leads the ranking of a machine's blockers (docs/causes.md, waits for input)."""
    import threading

    idle = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    fed = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    stop = threading.Event()

    def feed():
        while not stop.wait(0.02):
            fed.stdin.write(b"line\n")
            fed.stdin.flush()

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        time.sleep(0.3)
        out = tmp_path / "run.stall"
        run_stallscope("record", "-o", str(out), *ALL_STACKS, "-d", "3")
    finally:
        stop.set()
        writer.join()
        for p in (idle, fed):
            p.stdin.close()
            p.wait()
    doc = json.loads(run_stallscope("export", str(out)).stdout)
    recorded_ns = doc["meta"]["duration_s"] * 1e9
    causes = {t["pid"]: {c["cause"]: c for c in t["causes"]} for t in doc["tasks"] if t["pid"] in (idle.pid, fed.pid)}
    quiet = causes[idle.pid]["Reading from a pipe, nothing came"]
    assert quiet["class"] == "idle"
    # all but the first second (the recording began with the wait in progress: from then on it is known)
    assert recorded_ns - 1.1e9 <= quiet["total_ns"] <= recorded_ns * 1.02, (quiet["total_ns"], recorded_ns)
    assert causes[idle.pid].get("Reading from a pipe", {}).get("total_ns", 0) <= 1.1e9
    busy = causes[fed.pid]
    assert busy["Reading from a pipe"]["class"] == "blocker"
    assert busy["Reading from a pipe"]["total_ns"] >= 0.8 * recorded_ns, busy
    assert "Reading from a pipe, nothing came" not in busy
    blocker = next(b for b in doc["blockers"] if b["cause"] == "Reading from a pipe, nothing came")
    assert blocker["class"] == "idle" and blocker["in_progress"] >= 1


def test_each_interval_has_its_own_longest_wait(tmp_path):
    """100 sleeps of 20 ms over about 2 s: every interval in which some ended has its longest wait, about
    20 ms, for the thread and for its key, not only the interval where the longest ever grew. At nice -20,
    so that a busy machine does not merge the 250 ms intervals."""
    from stallscope.analyzer.store import Recording

    doc, truth, path = _record_with_steal(tmp_path, [example("sleeper"), "-n", "100", "-m", "20"],
                                          "-i", "250ms", "--nice", "-20")
    tid = _truth(truth, "sleeper")["tid"]
    high = 30e6 + doc["_test_steal_ns"]  # a vCPU the host stopped wakes the thread late
    rec = Recording(str(path))
    try:
        intervals = list(rec.intervals())
    finally:
        rec.close()
    # a wait's key is charged at its switch-in, the thread's totals at its wakeup: near an interval's end
    # the two may fall in consecutive intervals, so each is checked in the intervals where it moved
    keys = [(iv.index, max(o.max_ns for o in ended)) for iv in intervals
            if (ended := [o for o in iv.offcpu if o.task.pid == tid and o.count])]
    thread = [(iv.index, d.offcpu_max_ns) for iv in intervals for d in iv.tasks if d.task.pid == tid and d.offcpu_count]
    for seen in (keys, thread):
        assert len(seen) >= 2 and all(19.5e6 <= longest <= high for _i, longest in seen), seen


def test_sleep_is_attributed_to_the_nanosleep_stack(sleeper_run):
    doc, truth, _ = sleeper_run
    tid = _truth(truth, "sleeper")["tid"]
    assert "nanosleep" in _stack_text(doc, tid)
    top = _task(doc, tid)["causes"][0]
    # the task asked for it: idle (nothing held it up), never ranked among the machine's blockers
    assert top["cause"] == "Application requested delay" and top["class"] == "idle"


def test_pipe_reader_blocks_for_the_writers_period(pipe_run):
    doc, truth, _ = pipe_run
    t = _truth(truth, "pipe-reader")
    ours = _task(doc, t["tid"])
    _assert_inside_the_calls(doc, ours, t)
    blocks = t["end"]["voluntary_switches"] - t["start"]["voluntary_switches"]
    assert blocks - 1 <= ours["offcpu_count"] <= blocks  # see the sleeper's test
    assert "pipe_read" in _stack_text(doc, t["tid"])


def test_pipe_reader_is_woken_by_the_writer_and_the_sleeper_by_a_timer(pipe_run, sleeper_run):
    doc, truth, _ = pipe_run
    reader, writer = _truth(truth, "pipe-reader"), _truth(truth, "pipe-writer")
    ours = _task(doc, reader["tid"])
    wakers = ours["wakers"]
    assert wakers[0]["pid"] == writer["tid"] and wakers[0]["context"] == "task"
    # every blocking read ends with the writer's write (the last moments of the threads aside)
    by_writer = sum(w["count"] for w in wakers if w["pid"] == writer["tid"])
    assert by_writer >= ours["offcpu_count"] - 2

    doc, truth, _ = sleeper_run
    ours = _task(doc, _truth(truth, "sleeper")["tid"])
    # A timer ends every sleep: an interrupt, never the task it happened to land on. On a saturated
    # machine the timer softirq may run in ksoftirqd, which is then rightly the waker. A TASK_WAKING block
    # has no waker; nor has a wait whose wakeup and switch-in the kernel ran no program for (bpf/sched.bpf.c
    # close_unseen_wait: 2 of 100 sleeps in one run of twelve here, on a quiet machine), which the recording
    # counts (switch_out_closed, machine-wide) and says as data loss: a waker missing and not said fails, as do
    # more than four said.
    unseen = doc["meta"]["health"].get("switch_out_closed", 0)
    assert unseen == 0 or any(loss["key"] == "switch_out_open" for loss in doc["meta"]["data_loss"])
    missing = ours["offcpu_count"] - sum(w["count"] for w in ours["wakers"])
    assert missing <= 1 + min(unseen, 4), (missing, doc["meta"]["health"])
    for w in ours["wakers"]:
        assert w["context"] in ("timer", "irq") or w["comm"].startswith("ksoftirqd"), w


@pytest.mark.parametrize("role", ["sleeper", "pipe-reader", "pipe-writer"])
def test_switch_counts_and_migrations_are_the_kernels(role, sleeper_run, pipe_run):
    doc, truth, _ = sleeper_run if role == "sleeper" else pipe_run
    t = _truth(truth, role)
    ours = _task(doc, t["tid"])
    # The thread's whole life is inside the recording: its totals are the /proc values at its end.
    # Rarely (about one full suite run in six, under load) one of these counts is one below the
    # thread's own: an update lost for a live thread, not yet explained. The command-wide sums
    # against wait4() and perf stat stay exact.
    assert abs(ours["voluntary_switches"] - t["end"]["voluntary_switches"]) <= 1
    assert abs(ours["involuntary_switches"] - t["end"]["involuntary_switches"]) <= 1
    assert abs(ours["migrations"] - t["end"]["nr_migrations"]) <= 1


@pytest.mark.parametrize("role", ["sleeper", "pipe-reader"])
def test_run_queue_wait_matches_schedstat(role, sleeper_run, pipe_run):
    doc, truth, _ = sleeper_run if role == "sleeper" else pipe_run
    t = _truth(truth, role)
    ours = _task(doc, t["tid"])
    # schedstat's run_delay since the thread was created; 20 us absolute slack for the
    # thread's last moments after its final snapshot (print and exit).
    assert abs(ours["runq_wait_ns"] - t["end"]["runq_wait_ns"]) <= 0.05 * t["end"]["runq_wait_ns"] + 20_000
    # the measured wakeup-to-run latency histogram counts one entry per wakeup
    assert sum(ours["runq_hist_log2_ns"].values()) >= ours["offcpu_count"]


def test_command_tasks_sum_to_wait4_rusage_for_threads(tmp_path, perf_available):
    doc, _, _ = record_command(tmp_path, [perf_available, "bench", "sched", "messaging", "-t", "-g", "5", "-l", "50"])
    cmd = doc["meta"]["options"]["command"]
    tasks = [t for t in doc["tasks"] if t["in_command"]]
    assert len(tasks) == 5 * 40 + 1
    assert sum(t["voluntary_switches"] for t in tasks) == cmd["rusage"]["ru_nvcsw"]
    assert sum(t["involuntary_switches"] for t in tasks) == cmd["rusage"]["ru_nivcsw"]


@pytest.mark.parametrize("groups", [5, 10])
def test_command_tasks_sum_to_wait4_rusage_for_processes(tmp_path, perf_available, groups):
    """Processes: whether a parent's rusage holds a zombie's last switch depends on whether it read
    the counters before or after their increment, which the kernel does not order; the probe
    finds the parent's reap of the child in its own totals (final_switch_of_reaped_leader). A reap
    matched by its CPU time among alike children's (hackbench's parent waits for any child) can be
    another child's: one voluntary switch apart for each such reap, as the health counters say (seen
    in two full test runs of many: 1,399 against 1,398, 1,199 against 1,198, one reap each)."""
    doc, _, _ = record_command(tmp_path, [perf_available, "bench", "sched", "messaging", "-g", str(groups),
                                          "-l", "50"])
    cmd = doc["meta"]["options"]["command"]
    tasks = [t for t in doc["tasks"] if t["in_command"]]
    assert len(tasks) == groups * 40 + 1
    # on a mismatch, the health counters say how each zombie leader's last switch was matched
    health = {k: v for k, v in doc["meta"].get("health", {}).items() if k.startswith("reap_")}
    matched = health.get("reap_exact", 0) + health.get("reap_after_read", 0)
    assert abs(sum(t["voluntary_switches"] for t in tasks) - cmd["rusage"]["ru_nvcsw"]) <= min(matched, 2), health
    assert sum(t["involuntary_switches"] for t in tasks) == cmd["rusage"]["ru_nivcsw"], health


def test_system_switch_count_matches_proc_stat(sleeper_run):
    """The switches the probe counts are the kernel's nr_switches (/proc/stat ctxt, read by the
    collector at each drain): equal up to the few switches between the two reads."""
    doc, _, _ = sleeper_run
    ours, kernel = doc["meta"]["switches"], doc["meta"]["switches_kernel"]
    assert ours > 0
    assert abs(ours - kernel) <= 0.01 * kernel + 50


def _pid1_migrations() -> int:
    """The migrations of PID 1's threads so far (/proc/1/task/*/sched): on this machine the kernel's task
    iterator never visits that process (its 13 threads; a TGID iterator of pid 1 yields none either), so
    the entries its switches make are never read (docs/reliability.md)."""
    total = 0
    try:
        tids = os.listdir("/proc/1/task")
    except OSError:  # not readable here: no allowance
        return 0
    for tid in tids:
        try:
            with open(f"/proc/1/task/{tid}/sched") as f:
                total += next(int(line.split()[-1]) for line in f if line.startswith("se.nr_migrations"))
        except (OSError, StopIteration):
            pass
    return total


def test_migration_matrix_holds_every_migration(tmp_path):
    """The CPU x CPU matrix and the per-thread counts come from the same event, and the per-thread counts are
    the kernel's (test_switch_counts_and_migrations_are_the_kernels). Each drain reads the threads' counters,
    then the matrix: a migration in between is in the matrix of one interval and the thread's count of the
    next. At the recording's two ends migrations are not counted (bpf/sched.bpf.c migrations_off): else the
    last interval's would be in the matrix only (4 to 8 of them in 3 of 30 runs on a loaded machine). What
    the matrix holds beyond the threads' counts are those of threads the task dump never reads: here PID 1's,
    at most what the kernel counted for them over the recording (1 to 6 in one run of four while two CPU hogs
    ran; in the run looked into, all 4 were one thread of PID 1's)."""
    before = _pid1_migrations()
    doc, _, path = record_command(tmp_path, [example("sleeper"), "-n", "100", "-m", "20"], *ALL_STACKS)
    unread = _pid1_migrations() - before
    matrix = doc["migrations"]["matrix"]
    assert len(matrix) == doc["meta"]["cpus"] and all(len(row) == len(matrix) for row in matrix)
    assert all(matrix[i][i] == 0 for i in range(len(matrix)))
    per_thread = sum(t["migrations"] for t in doc["tasks"])
    with sqlite3.connect(path) as db:
        by_interval = db.execute("SELECT m.idx, m.n, coalesce(t.n, 0) FROM (SELECT idx, sum(count) n FROM migrations "
                                 "GROUP BY idx) m LEFT JOIN (SELECT idx, sum(migrations) n FROM task_deltas GROUP BY "
                                 "idx) t ON m.idx = t.idx ORDER BY m.idx").fetchall()
    assert per_thread > 0 and 0 <= doc["migrations"]["total"] - per_thread <= unread, (
        f"matrix {doc['migrations']['total']}, threads {per_thread}, PID 1's threads {unread}; "
        f"(interval, matrix, threads): {by_interval}")


def test_each_cpus_run_queue_holds_the_waits_that_ended_there(tmp_path):
    """Three CPU hogs pinned to one CPU: two of them wait in its run queue at any time, the other CPU's queue is
    near empty. The per-CPU counts come from the same event as the tasks' run-queue totals (add_runq_wait), so
    over the recording they agree, but for the few waits that end between a dump and the CPUs' read just after
    it, at the recording's two ends (6 of 2,086 in one run), and a thread the task dump never reads (PID 1's,
    see the matrix test above)."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: no other run queue to compare with")
    busy = f"taskset -c 1 {example('cpu_burner')} -t 3 -m 700 >/dev/null"
    doc, _, _ = record_command(tmp_path, ["sh", "-c", busy])
    secs = doc["meta"]["duration_s"]
    cpus = {c["cpu"]: c for c in doc["cpus"]}
    assert set(cpus) == set(range(doc["meta"]["cpus"])) and doc["meta"]["options"]["cpu_runq_per_interval"]
    waiting = {c: (e["runq_wait_ns"] or 0) / 1e9 / secs for c, e in cpus.items()}
    burners = [t for t in doc["tasks"] if t["comm"] == "burner"]
    burner_wait = sum(t["runq_wait_ns"] for t in burners) / 1e9 / secs
    # the burners ran about 2.1 s of CPU time in all, one at a time, two waiting meanwhile: while they ran, cpu1
    # held two waiting, and the recording is a little longer than they ran
    assert burner_wait > 1.0 and waiting[1] >= 0.95 * burner_wait, (waiting, burner_wait)
    assert waiting[0] < 0.2 * waiting[1], waiting
    tasks_ns = sum(t["runq_wait_ns"] for t in doc["tasks"])
    cpus_ns = sum(e["runq_wait_ns"] for e in cpus.values())
    assert abs(cpus_ns - tasks_ns) <= tasks_ns * 0.01 + 5_000_000, (tasks_ns, cpus_ns)
    cpus_n, tasks_n = sum(e["runq_waits"] for e in cpus.values()), sum(t["runq_count"] for t in doc["tasks"])
    assert abs(cpus_n - tasks_n) <= tasks_n * 0.01 + 10, (tasks_n, cpus_n)
    # what to do about it: each burner held to cpu1 while cpu0 idles has its affinity widened
    held = [r for r in doc["recommendations"] if r["kind"] == "affinity"]
    assert {r["target"].split("[")[0] for r in held} == {"burner"} and len(held) == 3, held
    assert all(r["command"].startswith("taskset -pc ") and r["runtime"] for r in held)


def test_the_collector_forgets_a_process_one_drain_after_its_leader_exited():
    """What the collector keeps per process stays bounded on a machine that runs many short ones."""
    from stallscope.analyzer.sample import TaskId
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf.collector import SchedCollector, SchedOptions

    c = SchedCollector(SchedOptions(), Symbolizer())
    c._leader_start.update({500: 7, 600: 9})
    c._remembered.update({500, 600})
    c._forget_dead_processes({TaskId(500, 7), TaskId(601, 9)})  # a leader, and a thread of another process
    assert c._leader_start == {600: 9} and c._remembered == {600}
    c._forget_dead_processes({TaskId(600, 8)})  # a later process with a reused pid is not this one
    assert c._leader_start == {600: 9}


def test_the_task_dump_reads_only_the_entries_events_changed():
    """Once per interval dump_tasks hands over the live tasks' entries, but only those an event
    changed since the last dump: a thread blocked throughout an interval is not read again, nor is its
    wait, which the last dump handed over (it is carried on: counted, not written), and it is read once
    it has run."""
    import threading
    import time

    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf import abi
    from stallscope.bpf.collector import SchedCollector, SchedOptions, parse_dump

    c = SchedCollector(SchedOptions(), Symbolizer())
    c.start()
    r, w = os.pipe()
    tids: list[int] = []

    def reader():
        tids.append(threading.get_native_id())
        os.read(r, 1)  # blocked until the first write
        os.read(r, 1)

    opened: dict[int, int] = {}

    def dumped() -> set[int]:
        raw, _final_entries, _final, _e = c._task_entries(c.obj)
        live, waits = parse_dump(raw)
        opened.clear()
        opened.update({pid: charged for pid, _tgid, _start, charged, *_rest in waits})
        return {abi.decode(abi.TaskKey, k).pid for k, _ in live}

    t = threading.Thread(target=reader)
    try:
        t.start()
        time.sleep(0.3)
        assert tids and tids[0] in dumped()  # its switch-out into the read
        time.sleep(0.3)
        assert 0 < opened.get(tids[0], 0) <= 0.6e9  # its wait so far, handed over
        c._health.drain(c.obj)
        time.sleep(0.3)
        assert tids[0] not in dumped()  # blocked since: nothing changed
        assert tids[0] not in opened  # its wait is carried on, without a record
        assert c._health.drain(c.obj).get("open_carried", 0) >= 1  # counted by the dump
        os.write(w, b"x")
        time.sleep(0.3)
        assert tids[0] in dumped()  # woken, ran, blocked again
    finally:
        os.write(w, b"xx")
        t.join()
        os.close(r)
        os.close(w)
        c.close()


def test_entries_taken_out_of_the_maps_once_idle_lose_no_wait():
    """The off-CPU and waker maps' entries are taken out once unchanged for a read (bpf/mapdiff.py, at its most
    eager), while 40 threads sleep 250 ms at a time under 0.1 s drains: each key taken out and made again some
    times, and each thread's waits as its records count them are still the waits its task totals count."""
    from collections import Counter

    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf.collector import SchedCollector, SchedOptions

    c = SchedCollector(SchedOptions(), Symbolizer())
    c._offcpu_diff.idle_reads = c._waker_diff.idle_reads = 1
    c.start()
    child = subprocess.Popen([example("idle_threads"), "-n", "40", "-p", "250", "-d", "3"], stdout=subprocess.PIPE,
                             text=True)
    try:
        tgid = json.loads(child.stdout.readline())["tgid"]
        ivs = []
        while child.poll() is None:
            time.sleep(0.1)
            ivs.append(c.drain())
        ivs += [c.drain(), c.drain()]
        wakeups = json.loads(child.stdout.readline())["wakeups"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        c.close()
    totals, records = Counter(), Counter()
    for iv in ivs:
        for t in iv.tasks:
            totals[t.task] += t.offcpu_count
        for o in iv.offcpu:
            if o.tgid == tgid:
                records[o.task] += o.count
    assert c._offcpu_diff.taken > 100 and c._waker_diff.taken > 100  # taken out, made again, taken out...
    assert sum(records.values()) >= wakeups
    assert dict(records) == {t: totals[t] for t in records}
    woken = sum(sum(o.woken) for iv in ivs for o in iv.offcpu if o.task in records)
    wakes = sum(w.count for iv in ivs for w in iv.wakers if w.task in records)
    assert 0.95 * woken <= wakes <= woken


def test_wakers_are_recorded_for_the_waits_long_enough_for_stacks(tmp_path):
    """--min-stack-wait (which the overhead budget raises) sheds the waker records of shorter waits:
    each is a hash update per wakeup and a record to drain. The task's own totals stay exact."""
    argv = [example("sleeper"), "-n", "20", "-m", "20"]
    (tmp_path / "above").mkdir()
    (tmp_path / "below").mkdir()
    doc, truth, _ = _record_with_steal(tmp_path / "above", argv, "--min-stack-wait", "60ms")
    t = _truth(truth, "sleeper")
    ours = _task(doc, t["tid"])
    blocks = t["end"]["voluntary_switches"] - t["start"]["voluntary_switches"]
    assert blocks - 1 <= ours["offcpu_count"] <= blocks
    _assert_inside_the_calls(doc, ours, t)
    # The 20 ms sleeps are below the minimum: no waker, unless the host stalled one past it.
    assert all(w["total_ns"] >= 60_000_000 * w["count"] for w in ours["wakers"]), ours["wakers"]
    assert sum(w["count"] for w in ours["wakers"]) <= 2

    doc, truth, _ = record_command(tmp_path / "below", argv, "--min-stack-wait", "5ms")
    ours = _task(doc, _truth(truth, "sleeper")["tid"])
    assert sum(w["count"] for w in ours["wakers"]) >= ours["offcpu_count"] - 1  # a TASK_WAKING block has no waker


def test_a_recording_keeps_the_callers_priority_unless_asked_and_the_command_always_does(tmp_path):
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    argv = ["sh", "-c", "echo nice=$(cut -d' ' -f19 /proc/self/stat)"]
    for name, extra, ours in (("default", (), caller), ("raised", ("--nice", "-7"), -7)):
        (tmp_path / name).mkdir()
        doc, _, _ = record_command(tmp_path / name, argv, *extra)
        assert doc["meta"]["options"]["nice"] == ours
        printed = (tmp_path / name / "truth.jsonl").read_text()
        assert f"nice={caller}" in printed, printed


def test_realtime_runs_stallscope_at_sched_fifo_and_the_command_at_the_callers_policy(tmp_path):
    doc, _, _ = record_command(tmp_path, ["sh", "-c", "chrt -p $$"], "--realtime", "3")
    assert doc["meta"]["options"]["realtime"] == 3
    ours = [t for t in doc["tasks"] if t["stallscope"] and t["comm"] not in ("objdump", "readelf")]
    assert ours and all((t["policy"], t["rt_priority"]) == ("SCHED_FIFO", 3) for t in ours), ours
    printed = (tmp_path / "truth.jsonl").read_text()
    assert "policy: SCHED_OTHER" in printed, printed
    (tmp_path / "plain").mkdir()
    doc, _, _ = record_command(tmp_path / "plain", ["true"])
    assert "realtime" not in doc["meta"]["options"]


def _rt_throttled() -> bool:
    try:
        with open("/proc/sys/kernel/sched_rt_runtime_us") as f:
            return int(f.read()) >= 0
    except (OSError, ValueError):
        return False


@pytest.mark.skipif(not _rt_throttled(), reason="real-time throttling is off (kernel.sched_rt_runtime_us -1): "
                                                "real-time busy loops would hold the CPUs for good")
def test_where_real_time_tasks_hold_every_cpu_stallscope_says_so_and_realtime_gets_it_a_cpu(tmp_path):
    """A busy loop at SCHED_FIFO 1 on every CPU leaves an ordinary task what real-time throttling does (5%),
    whatever its nice value: under stress-ng --mutex 2, top's first data came after 14-18 s. stallscope names
    the tasks and the priority that runs it above them; at that priority its threads hardly wait for a CPU,
    as the kernel counts it (their run-queue wait, schedstat). Its first interval may still stretch: the
    recording file is made then, and waits for the journal's kernel thread, an ordinary one."""
    import json

    hogs = [subprocess.Popen(["chrt", "-f", "1", "taskset", "-c", str(cpu), "timeout", "120", "sh", "-c",
                              "while :; do :; done"], start_new_session=True) for cpu in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.5)
        if any(p.poll() is not None for p in hogs):  # chrt refused: a cgroup without real-time time, no privilege
            pytest.skip("a SCHED_FIFO task cannot run here (chrt -f 1 failed)")
        # several intervals: one in which the loops leave it waiting is enough, and the kernel (its fair server,
        # real-time throttling) may run it at once in some
        starved = subprocess.run([STALLSCOPE, "record", "--probes", "none", "-d", "5", "-o", str(tmp_path / "a.stall")],
                                 capture_output=True, text=True, timeout=300)
        kept = subprocess.run([STALLSCOPE, "record", "--probes", "none", "--realtime", "2", "-d", "3",
                               "-o", str(tmp_path / "b.stall")], capture_output=True, text=True, timeout=300)
    finally:
        for p in hogs:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()
    assert starved.returncode == 0 and kept.returncode == 0, (starved.stderr, kept.stderr)
    assert "for CPUs that real-time tasks hold (no nice value helps)" in starved.stderr, starved.stderr
    assert "--realtime 2 runs it above them. They are sh (" in starved.stderr, starved.stderr
    assert "SCHED_FIFO 1" in starved.stderr and "real-time tasks" not in kept.stderr, kept.stderr
    doc = json.loads(subprocess.run([STALLSCOPE, "export", str(tmp_path / "b.stall")], capture_output=True,
                                    text=True, check=True).stdout)
    ours = [t for t in doc["tasks"] if t["stallscope"] and t["policy"] == "SCHED_FIFO"]
    waited = sum(t["runq_wait_ns"] for t in ours) / 1e9
    # at SCHED_FIFO 2 it still shares real-time throttling's 5% with the loops: 0.4 s of 8.8 s here
    assert ours and waited < 0.15 * doc["meta"]["duration_s"], (waited, doc["meta"]["duration_s"])


def test_a_recording_whose_intervals_stretch_under_load_says_so_once_and_what_keeps_them(tmp_path):
    """`record` keeps the caller's priority: among hackbench's 800 runnable tasks (`-- CMD`, in its group) its
    one-second intervals stretched to 3.7-6.1 s here (2 CPUs), the totals exact and the series coarse, and nothing
    said so. A notice now does, once, with the length the recording holds, and the --nice that keeps them; where
    the intervals kept their length (more CPUs), nothing is said."""
    path = tmp_path / "hb.stall"
    proc = subprocess.run([STALLSCOPE, "record", "--probes", "none", "-o", str(path), "--", "perf", "bench", "sched",
                           "messaging", "-g", "20", "-l", "800"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "intervals stretch under load" in line]
    with sqlite3.connect(path) as db:
        lengths = [(e - s) / 1e9 for s, e in db.execute("SELECT start_ns, end_ns FROM intervals ORDER BY idx")]
    if max(lengths) < 2.0:  # a machine with CPUs to spare kept them: then nothing is said
        assert not said, (lengths, said)
        return
    if max(lengths) < 2.2:  # about the threshold (twice the length asked, stallscope waiting a quarter of the time
        assert len(said) <= 1, (lengths, said)  # for a CPU): either way, at most once
        return
    assert len(said) == 1, (lengths, proc.stderr)
    took = float(said[0].split("the last took ")[1].split(" s")[0])
    assert took >= 2.0 and any(abs(took - n) <= 0.1 for n in lengths), (took, lengths)
    assert "for the 1 s asked" in said[0] and said[0].endswith("--nice -20 keeps them (docs/recording.md)")


def test_the_wait_for_a_cpu_that_stretches_intervals_is_every_thread_of_stallscopes():
    """A thread kept from a CPU while it holds the interpreter's lock keeps the session's thread asleep, not on a
    run queue (in `record` the writer's thread; a stretched interval of 12.3 s went unsaid, the session's thread
    itself having waited less than a quarter of it). Pinned to one CPU beside a busy loop, a second thread's wait
    is counted with the caller's, each from the kernel's schedstat."""
    import threading

    from stallscope.procstat import own_threads_run_delay_ns
    from stallscope.session import waited_between

    assert waited_between({1: 5, 2: 10}, {1: 8, 3: 4}) == 3 + 4  # one begun since from its start, one gone not at all
    cpu = min(os.sched_getaffinity(0))
    hog = subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c", "while :; do :; done"], start_new_session=True)
    own = {}

    def spin():
        with open("/proc/thread-self/schedstat") as f:
            own["before"] = int(f.read().split()[1])
        own["tid"] = threading.get_native_id()
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            time.sleep(0.001)  # woken each time onto the busy CPU: a wait for it each time
        with open("/proc/thread-self/schedstat") as f:
            own["after"] = int(f.read().split()[1])
        ready.wait()

    ready = threading.Event()
    affinity = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})  # the threads made from here on run on that CPU too
        before = own_threads_run_delay_ns()
        worker = threading.Thread(target=spin)
        worker.start()
        while "after" not in own:
            time.sleep(0.05)
        after = own_threads_run_delay_ns()
        ready.set()
        worker.join()
    finally:
        os.sched_setaffinity(0, affinity)
        os.killpg(hog.pid, 9)
        hog.wait()
    assert own["tid"] in after and own["tid"] not in before
    assert own["after"] > own["before"], own  # it did wait, beside the loop
    assert waited_between(before, after) >= after[own["tid"]] >= own["after"] > 0, (before, after, own)


def test_once_both_notices_are_said_the_threads_waits_are_no_longer_read_at_each_dump():
    """Reading every thread's schedstat takes 0.14 ms a drain with six threads: read while a notice may still come."""
    from types import SimpleNamespace

    from stallscope.session import Session, SessionOptions

    s = Session(SessionOptions(interval_s=1.0), notify=lambda line: None)
    s.collector = SimpleNamespace(watch_run_delay=True)
    s._run_delay = ({1: 0}, 0.0)
    s._starved_said, s._stretch_said = False, True
    s._say_if_starved(None, ({1: 0}, 1.0))  # a real-time notice may still come
    assert s.collector.watch_run_delay
    s._starved_said = True
    s._say_if_starved(None, ({1: 0}, 2.0))
    assert not s.collector.watch_run_delay


def test_top_refreshes_at_a_raised_priority():
    """Live triage must stay live on a saturated machine: top takes nice -20 unless told otherwise."""
    proc = subprocess.Popen([STALLSCOPE, "top", "-n", "2", "-i", "0.5"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline()  # the first refresh: the session is running
        with open(f"/proc/{proc.pid}/stat") as f:
            nice = int(f.read().rsplit(")", 1)[1].split()[16])
    finally:
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert nice == -20


@pytest.mark.skipif(not autogroup_in_use(), reason="the kernel does not group tasks by session here (autogroup off, "
                                                       "or a CPU cgroup of its own): a nice value ranks top among all")
@pytest.mark.parametrize("shared", [False, True])
def test_top_raises_its_terminals_scheduling_group_only_when_alone_in_it_and_puts_it_back(shared):
    """Tasks are grouped by session: a nice value alone ranks top only within its terminal's group, so
    under another terminal's load it waited for a CPU as if at nice 0. The group is raised while top runs
    and put back after; a workload started from the same terminal would be raised with it, so then the
    group is left alone, and a notice says why."""
    other = "sleep 60 & " if shared else ""
    script = f"{other}{STALLSCOPE} top -n 3 -i 0.5; cut -d' ' -f3 /proc/self/autogroup; kill $! 2>/dev/null; true"
    proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline()  # the first refresh: the session is running
        during = group_nice(proc.pid)
    finally:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    after = int(out.strip().splitlines()[-1])
    assert after == 0, out
    if shared:
        assert during == 0
        assert "sleep (" in err and "shares this terminal session's scheduling group, so it stays at nice 0" in err, err
    else:
        assert during == -20
        assert "scheduling group" not in err, err


@pytest.mark.skipif(not autogroup_in_use(), reason="the kernel does not group tasks by session here (autogroup off, "
                                                      "or a CPU cgroup of its own)")
def test_doctor_says_whether_top_would_raise_its_terminals_group():
    import json

    for other, sharers in (("", []), ("sleep 60 & ", ["sleep"])):
        out = subprocess.run(["sh", "-c", f"{other}{STALLSCOPE} doctor --json; kill $! 2>/dev/null; true"],
                             capture_output=True, text=True, start_new_session=True, timeout=120).stdout
        group = json.loads(out)["scheduling_group"]
        assert group["autogroup"] and group["nice"] == 0
        assert [p["comm"] for p in group["shared_with"]] == sharers


def test_a_task_renamed_after_it_was_first_seen_is_named_by_its_new_name(tmp_path):
    """The shell blocks (waiting for its child) under its own name, then execs `sleep`: the name
    arrives by task_rename, not by a copy at every switch."""
    doc, _, _ = record_command(tmp_path, ["sh", "-c", "sleep 0.3; exec sleep 0.3"])
    pid = doc["meta"]["options"]["command"]["pid"]
    assert _task(doc, pid)["comm"] == "sleep"


def test_a_wait_in_progress_is_known_at_each_interval_end_with_when_it_began():
    """A thread blocked in read() from 0.3 s into a session draining every 0.2 s, and released after it: every
    interval that ends while it waits holds its wait in progress, begun when it blocked (after the thread's own
    CLOCK_BOOTTIME reading just before read(), within 2 ms of it), handed over once and carried on after; the
    session's model has it in progress with its length so far (the last interval's end less its beginning),
    its key classified "Reading from a pipe"."""
    import threading

    from stallscope.analyzer.blockers import classify_wait
    from stallscope.analyzer.model import Model
    from stallscope.session import Session, SessionOptions

    r, w = os.pipe()
    began, tids = [], []

    def reader():
        tids.append(threading.get_native_id())
        began.append(time.clock_gettime_ns(time.CLOCK_BOOTTIME))
        os.read(r, 1)

    intervals, meta = [], []
    session = Session(SessionOptions(interval_s=0.2, duration_s=1.5, degrade=False), notify=lambda _m: None)

    def on_start(m):
        meta.append(m)
        threading.Timer(0.3, threading.Thread(target=reader).start).start()

    try:
        session.run(on_start, intervals.append, handle_signals=False)
    finally:
        os.write(w, b"x")
        time.sleep(0.1)
        os.close(r)
        os.close(w)
    assert began and tids
    tid, t0 = tids[0], began[0]
    waiting = [iv for iv in intervals if iv.end_ns > t0 + 10_000_000]
    assert len(waiting) >= 4
    for iv in waiting:
        mine = [ws for ws in iv.waits_now() if ws.wait.task.pid == tid]
        assert len(mine) == 1, iv.index
        assert t0 <= mine[0].since_ns <= t0 + 2_000_000, (mine[0].since_ns - t0)
    assert sum(any(ws.wait.task.pid == tid for ws in iv.opened) for iv in waiting) <= 2  # then carried on
    infos = {t.task: t for iv in intervals for t in iv.task_info}
    stacks = {s.id: s for iv in intervals for s in iv.stacks}
    model = Model.from_intervals(meta[0], intervals, infos, stacks)
    mine = [n for n in model.waits_now if n.wait.task.pid == tid]
    assert len(mine) == 1 and mine[0].so_far_ns == intervals[-1].end_ns - mine[0].since_ns
    assert abs(mine[0].so_far_ns - (intervals[-1].end_ns - t0)) <= 2_000_000
    # (the thread is stallscope's own here, left out of every ranking: its key is classified as they classify)
    assert classify_wait(model, mine[0].wait).name == "Reading from a pipe"


def test_a_thread_asleep_across_intervals_is_carried_on_and_charged_each_interval_its_exact_share():
    """A thread blocked in read() for 1.2 s while a session drains every 0.2 s: the first dump after it
    blocked hands its wait over, the following ones carry it on (the interval holds its key among
    `ongoing`, and neither a task nor an off-CPU record of it), and what each interval charges it adds up,
    with the rest charged at its wakeup, to the time it measured around its read (within 2%), the task's
    totals and its wait's key alike."""
    import threading

    from stallscope.analyzer.model import Model
    from stallscope.session import Session, SessionOptions

    r, w = os.pipe()
    measured, tids = [], []

    def reader():
        tids.append(threading.get_native_id())
        t0 = time.monotonic_ns()
        os.read(r, 1)
        measured.append(time.monotonic_ns() - t0)

    intervals, meta = [], []
    session = Session(SessionOptions(interval_s=0.2, duration_s=2.0, degrade=False), notify=lambda _m: None)

    def on_start(m):
        meta.append(m)
        t = threading.Thread(target=reader)
        t.start()
        threading.Timer(1.2, lambda: os.write(w, b"x")).start()

    try:
        session.run(on_start, intervals.append, handle_signals=False)
    finally:
        os.close(r)
        os.close(w)
    assert measured and tids
    tid = tids[0]
    carried = [iv for iv in intervals if any(k.task.pid == tid for k in iv.ongoing)]
    assert len(carried) >= 3, [len(iv.ongoing) for iv in intervals]
    for iv in carried:
        assert not any(d.task.pid == tid for d in iv.tasks)
        assert not any(o.task.pid == tid for o in iv.offcpu)
        # charged the span between the two dumps: the interval's own (a drain that came late shortens the next)
        assert abs(iv.ongoing_ns - iv.duration_ns) <= 1_000_000, (iv.ongoing_ns, iv.duration_ns)
        assert 0.05e9 <= iv.ongoing_ns <= 0.35e9
    infos = {t.task: t for iv in intervals for t in iv.task_info}
    stacks = {s.id: s for iv in intervals for s in iv.stacks}
    model = Model.from_intervals(meta[0], intervals, infos, stacks)
    task = next(t for tid_, t in model.tasks.items() if tid_.pid == tid)
    keys = [k for k in model.waits if k.task.pid == tid]
    assert abs(task.offcpu_ns - measured[0]) <= 0.02 * measured[0], (task.offcpu_ns, measured[0])
    read = max(keys, key=lambda k: k.total_ns)  # its one long wait, ended, whole
    assert abs(read.total_ns - measured[0]) <= 0.02 * measured[0]
    # charged to its keys as it went on (under the key it had then: a stack may be walked for it meanwhile)
    assert sum(k.charged for k in keys) == task.offcpu_ns


def _scan_state(c) -> tuple:
    """What a dump's scan changes of a scheduler collector, copied."""
    import copy

    return (copy.deepcopy(c._prev_tasks), dict(c._open.handed), c._open.carried_ns, set(c._open.asleep_at_start),
            dict(c._info), dict(c._leader_start), set(c._remembered), list(c._slot_deltas))


def _set_scan_state(c, state: tuple) -> None:
    import copy

    prevs, handed, carried, asleep, info, leaders, remembered, slot_deltas = copy.deepcopy(state)
    c._prev_tasks, c._open.handed, c._open.carried_ns, c._open.asleep_at_start = prevs, handed, carried, asleep
    c._info, c._leader_start, c._remembered, c._slot_deltas = info, leaders, remembered, slot_deltas


def test_a_live_task_dump_is_scanned_the_same_in_c_and_in_python():
    """The scheduler probes attached while threads wake every 20 ms, hackbench's processes come and go and
    commands exec: each drain's dump, scanned by analyzer/rowread.c scan_dump and by py_scan_dump from the same
    state (one first, then the other, in turn), gives the same deltas, task infos, dead tasks, waits in progress
    and processes first seen, and leaves the same state (each task's last entry, its name, the waits handed over,
    its own slots' waits)."""
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf import collector
    from stallscope.bpf.collector import SchedCollector, SchedOptions

    if collector._c_scan_dump is None:
        pytest.skip("analyzer/_rowread is not built (make)")
    c = SchedCollector(SchedOptions(), Symbolizer())
    c.start()
    scan, remember = c.scan_dump, c._remember_processes
    seen = []

    def both(raw, final_entries, e, in_c=True):
        first = len(seen) % 2 == 0
        before = _scan_state(c)
        found: list[dict] = []
        c._remember_processes = found.append
        try:
            a = scan(raw, final_entries, e, in_c=first)
            a_state = _scan_state(c)
            _set_scan_state(c, before)
            b = scan(raw, final_entries, e, in_c=not first)
        finally:
            c._remember_processes = remember
        same = (a == b, a_state == _scan_state(c), found[0] == found[1])
        seen.append((len(a[0]), len(a[1]), len(a[2]), len(a[5]), len(found[0]), same))
        remember(found[1])  # once, as a drain does
        return b

    c.scan_dump = both
    load = [subprocess.Popen([example("idle_threads"), "-n", "300", "-p", "20", "-d", "3"], stdout=subprocess.DEVNULL),
            subprocess.Popen(["perf", "bench", "sched", "messaging", "-g", "2", "-l", "300"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(5):
            for _ in range(5):
                subprocess.run(["sh", "-c", "exec true"], check=True)
            time.sleep(0.4)
            c.drain()
    finally:
        for p in load:
            p.wait(60)
        c.close()
    assert all(same == (True, True, True) for *_n, same in seen), seen
    deltas, infos, dead, opened, found = (sum(n[i] for n in seen) for i in range(5))
    assert deltas > 1000 and infos > 100 and dead > 10 and opened > 10 and found > 5, seen
