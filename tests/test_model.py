"""Model, blockers, wakers, store and export on synthetic recordings: no kernel needed."""

from __future__ import annotations

import json
from dataclasses import replace
import subprocess
import sys

from stallscope.analyzer import export
from stallscope.analyzer.blockers import NO_STACK_LABELS, STACK_RATE_LIMITED, rank_blockers
from stallscope.analyzer.load import load_model
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import OffcpuDelta, TaskDelta, TaskId, TaskInfo
from stallscope.analyzer.store import Recording
from stallscope.analyzer.wakers import waker_context
from synthetic import A, B, INFOS, PIPE, SEC, SLEEP, TIMER, interval, meta, two_interval_recording, write_recording


def _model(m, intervals):
    stacks = {s.id: s for iv in intervals for s in iv.stacks}
    infos = {t.task: t for iv in intervals for t in iv.task_info}
    return Model.from_intervals(m, intervals, infos, stacks)


def test_totals_are_the_sum_of_the_intervals():
    model = _model(*two_interval_recording())
    a = model.tasks[A]
    assert a.offcpu_ns == 1_700_000_000 and a.offcpu_count == 85 and a.voluntary_switches == 85
    assert a.offcpu_max_ns == 20_000_000  # the rise recorded in the first interval
    assert model.duration_s == 2.0 and model.switches_per_s == 1000
    assert model.matrix[0][1] == 1


def test_blockers_rank_causes_from_the_cause_table():
    model = _model(*two_interval_recording())
    blockers = rank_blockers(model, include_cpu=False)
    # the sleep is a delay the task asked for: idle, after the blockers, with no share
    assert [b.cause for b in blockers] == ["Reading from a pipe", "Application requested delay"]
    assert [b.frame.split("+")[0] for b in blockers] == ["anon_pipe_read", "do_nanosleep"]
    assert blockers[1].total_ns == 1_700_000_000 and blockers[1].count == 85 and blockers[1].cls == "idle"
    assert blockers[0].share_pct == 100 and blockers[1].share_pct == 0
    assert blockers[1].tasks == (A,)


def test_unsampled_waits_are_shared_by_the_tasks_sampled_causes_and_marked_estimated():
    m, ivs = two_interval_recording()
    unsampled_only = TaskId(7, 1)
    extra = interval(2, offcpu=(OffcpuDelta(B, 100, 1, STACK_RATE_LIMITED, 0, 10, 100_000_000, 0),
                                OffcpuDelta(unsampled_only, 7, 1, STACK_RATE_LIMITED, 0, 1, 5, 0)),
                     tasks=(TaskDelta(B, offcpu_ns=100_000_000, offcpu_count=10),))
    model = _model(m, ivs + [extra])
    by = {b.cause: b for b in rank_blockers(model, include_cpu=False)}
    assert by["Reading from a pipe"].total_ns == 600_000_000
    assert by["Reading from a pipe"].estimated_ns == 100_000_000
    # a task with no sampled stack at all keeps an honest label
    assert by[NO_STACK_LABELS[STACK_RATE_LIMITED]].tasks == (unsampled_only,)
    # per-task totals are never touched by the estimate
    assert model.tasks[B].offcpu_ns == 600_000_000


def test_waker_context_comes_from_the_stack_or_the_interrupt_flag():
    assert waker_context(0, TIMER) == "timer"
    assert waker_context(1234, TIMER) == "timer"  # a timer interrupt that landed on a task
    assert waker_context(1234, None, in_interrupt=True) == "irq"
    assert waker_context(0, None) == "irq"  # the idle task never wakes anybody by itself
    assert waker_context(1234, PIPE) == "task"


def test_store_round_trip_keeps_everything(tmp_path):
    m, ivs = two_interval_recording()
    path = tmp_path / "syn.stall"
    write_recording(path, m, ivs)
    rec = Recording(str(path))
    assert rec.meta == m
    assert rec.stacks()[SLEEP.id] == SLEEP
    assert rec.tasks()[A] == INFOS[0]
    back = list(rec.intervals())
    assert [iv.tasks for iv in back] == [iv.tasks for iv in ivs]
    assert [iv.offcpu for iv in back] == [iv.offcpu for iv in ivs]
    assert [iv.wakers for iv in back] == [iv.wakers for iv in ivs]
    assert load_model(str(path)).tasks == _model(m, ivs).tasks


def test_each_intervals_throttled_cgroups_survive_the_store_and_a_damaged_row_is_left_out(tmp_path):
    import sqlite3
    from dataclasses import replace

    from stallscope.analyzer.sample import Throttled

    m, ivs = two_interval_recording()
    ivs = [replace(ivs[0], throttled=(Throttled("/sys/fs/cgroup/cpu/a", 5, 400_000_000, 20_000, 100_000),
                                      Throttled("/b", 1, 10, 0, 0)),
                   cpu_time=((0, 300_000_000, 1_000_000_000), (1, 1_000_000_000, 1_000_000_000))),
           replace(ivs[1], cpu_time=((0, 500_000_000, 1_000_000_000), (1, 0, 1_000_000_000)))]
    path = tmp_path / "syn.stall"
    write_recording(path, m, ivs)
    assert [iv.throttled for iv in Recording(str(path)).intervals()] == [iv.throttled for iv in ivs]
    assert [iv.cpu_time for iv in Recording(str(path)).intervals()] == [iv.cpu_time for iv in ivs]
    db = sqlite3.connect(path)
    db.execute("UPDATE throttled SET periods = -3 WHERE cgroup = '/b'")  # what no kernel counts
    db.commit()
    db.close()
    rec = Recording(str(path))
    assert [iv.throttled for iv in rec.intervals()] == [ivs[0].throttled[:1], ()]
    assert rec.damaged["throttled"] == 1


def test_a_windows_cpu_busy_is_its_intervals_where_they_keep_it_else_the_recordings():
    """/proc/stat's per interval: a window's busy shares, its CPUs view and the tasks running on average; a
    recording made before reads its start and end."""
    from dataclasses import replace

    from stallscope.analyzer.signals import signals, window_busy_pct
    from stallscope.analyzer.timeline import Snapshot

    m, ivs = two_interval_recording()
    ivs = [replace(ivs[0], cpu_time=((0, 300_000_000, 1_000_000_000), (1, 1_000_000_000, 1_000_000_000))),
           replace(ivs[1], cpu_time=((0, 500_000_000, 1_000_000_000), (1, 0, 1_000_000_000)))]
    recorded = replace(m, machine={"cpu_busy_pct": {"0": 11.0, "1": 22.0}})
    kept = replace(recorded, options={**m.options, "cpu_time_per_interval": True})
    assert window_busy_pct(_model(kept, ivs)) == ({"0": 40.0, "1": 50.0}, "window")
    assert window_busy_pct(_model(kept, ivs[1:])) == ({"0": 50.0, "1": 0.0}, "window")
    assert window_busy_pct(_model(recorded, ivs[1:])) == ({"0": 11.0, "1": 22.0}, "recording")
    assert [c.busy_pct for c in Snapshot(_model(kept, ivs[:1])).cpus] == [30.0, 100.0]
    # running on average: the busy CPUs' share, then the waiting tasks
    one = _model(kept, ivs[:1])
    assert abs(signals(one, waits=False).runnable_avg - (1.3 + signals(one, waits=False).waiting_avg)) < 1e-9


def test_stack_ids_above_2_63_survive_the_store(tmp_path):
    m, _ = two_interval_recording()
    big = type(SLEEP)(0xF000000000000001, "kernel", SLEEP.frames)
    iv = interval(0, stacks=(big,), offcpu=(OffcpuDelta(A, 100, 1, big.id, 0, 1, 10, 10),))
    write_recording(tmp_path / "big.stall", m, [iv])
    rec = Recording(str(tmp_path / "big.stall"))
    assert big.id in rec.stacks()
    assert next(rec.intervals()).offcpu[0].kstack == big.id


def test_json_export_has_the_documented_keys():
    doc = export.to_json_doc(_model(*two_interval_recording()))
    assert doc["format"] == "stallscope" and doc["version"] == 2
    assert {"kernel", "cpus", "duration_s", "probes"} <= set(doc["meta"])
    assert doc["meta"]["probes"]["offcpu"] == {"enabled": True, "mechanism": "tp_btf", "reason": ""}
    task_keys = {"pid", "tgid", "start_time_ns", "comm", "offcpu_ns", "runq_wait_ns", "voluntary_switches",
                 "involuntary_switches", "migrations", "causes"}
    for t in doc["tasks"]:
        assert task_keys <= set(t)
        for c in t["causes"]:
            assert set(c) == {"cause", "class", "total_ns"}
    for b in doc["blockers"]:
        assert {"cause", "class", "frame", "matched", "total_ns", "count", "max_ns", "share_pct", "tasks",
                "stack"} <= set(b)
    for key in ("locks", "slab", "recommendations"):
        assert doc[key] == []
    assert doc["migrations"]["matrix"] == [[0, 1], [0, 0]]
    json.dumps(doc)  # serialisable


def test_json_export_is_deterministic():
    model = _model(*two_interval_recording())
    assert export.to_json(model) == export.to_json(model)


def test_wakers_of_a_task_group_interrupts_by_context():
    doc = export.to_json_doc(_model(*two_interval_recording()))
    a = next(t for t in doc["tasks"] if t["pid"] == A.pid)
    b = next(t for t in doc["tasks"] if t["pid"] == B.pid)
    assert a["wakers"] == [{"pid": 0, "tgid": 0, "comm": "", "context": "timer", "count": 40, "total_ns": 800_000_000}]
    assert b["wakers"][0]["pid"] == A.pid and b["wakers"][0]["context"] == "task"


def test_folded_export_is_outermost_first_with_kernel_markers():
    lines = export.to_folded(_model(*two_interval_recording())).splitlines()
    assert "sleeper;__x64_sys_clock_nanosleep+0x10_[k];hrtimer_nanosleep+0x10_[k];do_nanosleep+0x10_[k];" \
           "schedule+0x10_[k];__schedule+0x10_[k] 1700000000" in lines
    for line in lines:
        stack, value = line.rsplit(" ", 1)
        assert int(value) > 0 and " " not in stack


def test_process_tree_of_a_command():
    m, ivs = two_interval_recording()
    child = TaskId(200, 9 * SEC)
    ivs[0] = interval(0, task_info=INFOS + (TaskInfo(child, 200, 100, "child"),), tasks=ivs[0].tasks + (
        TaskDelta(child, voluntary_switches=1),))
    model = _model(m, ivs)
    assert model.descendants(100) == {A, B, child}
    assert model.descendants(200) == {child}


def test_process_tree_follows_each_life_of_a_reused_pid():
    """PIDs are reused (pid_max 32,768: stress-ng --vforkmany wrapped it in 4 s): a process that got a PID the
    command's tree had used, and what it started, are not the command's; nor a later life of the root's PID."""
    m, ivs = two_interval_recording()
    child = TaskId(200, 9 * SEC)  # the command's child, exits
    stranger = TaskId(200, 20 * SEC)  # PID 200 again, started by init
    strangers_child = TaskId(300, 21 * SEC)
    strangers_thread = TaskId(201, 22 * SEC)
    grandchild = TaskId(301, 10 * SEC)  # the command's child's child: a life of 200 that had begun
    later_root = TaskId(100, 30 * SEC)  # PID 100 once the command is gone
    infos = (TaskInfo(child, 200, 100, "child"), TaskInfo(stranger, 200, 1, "stranger"),
             TaskInfo(strangers_child, 300, 200, "its child"), TaskInfo(strangers_thread, 200, 1, "its thread"),
             TaskInfo(grandchild, 301, 200, "grandchild"), TaskInfo(later_root, 100, 1, "later"))
    ivs[0] = interval(0, task_info=INFOS + infos, tasks=ivs[0].tasks + tuple(
        TaskDelta(i.task, voluntary_switches=1) for i in infos))
    model = _model(m, ivs)
    assert model.descendants(100) == {A, B, child, grandchild}
    assert model.descendants(200) == {child, grandchild}


def test_a_process_no_task_names_as_its_parent_is_its_threads_as_the_walk_finds_them():
    """Model.descendants of a process that started none (a live view's own, asked every interval) takes its threads
    without the walk over every task (model.py process_threads): on random machines of reused PIDs, threads
    before, between and after their leaders' lives, and leaders never seen, the same tasks as the walk
    (process_tree) for every root no task names as its parent."""
    import random

    from stallscope.analyzer.model import process_threads, process_tree

    rng = random.Random(5)
    checked = 0
    for case in range(400):
        infos, pids = [], list(range(100, 100 + rng.randint(2, 8)))
        for _ in range(rng.randint(1, 40)):
            tgid = rng.choice(pids)
            pid = tgid if rng.random() < 0.4 else rng.randint(1000, 1100)
            infos.append(TaskInfo(TaskId(pid, rng.choice((0, 1, 5, 9, 12, 30)) * SEC + rng.randint(0, 3)), tgid,
                                  rng.choice(pids + [1, 1, 1]), "t"))
        parents = {i.ptgid for i in infos}
        for root in pids:
            if root in parents:
                continue
            assert process_threads(infos, root) == process_tree(infos, root), (case, root, infos)
            checked += 1
    assert checked > 300


def test_analyzer_never_imports_textual_or_jinja2():
    # every module of the analyzer, as found on disk (a new one is covered without editing this test)
    code = ("import sys, pkgutil, importlib, stallscope.analyzer as a;"
            "[importlib.import_module('stallscope.analyzer.' + m.name) for m in pkgutil.iter_modules(a.__path__)];"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'jinja2')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_pid_reuse_never_merges_two_tasks(tmp_path):
    m, _ = two_interval_recording()
    first, second = TaskId(300, 1 * SEC), TaskId(300, 7 * SEC)  # same pid, started at different times
    iv = interval(0, task_info=(TaskInfo(first, 300, 1, "old"), TaskInfo(second, 300, 1, "new")),
                  tasks=(TaskDelta(first, voluntary_switches=3), TaskDelta(second, voluntary_switches=5)))
    write_recording(tmp_path / "reuse.stall", m, [iv])
    model = load_model(str(tmp_path / "reuse.stall"))
    assert model.tasks[first].info.comm == "old" and model.tasks[first].voluntary_switches == 3
    assert model.tasks[second].info.comm == "new" and model.tasks[second].voluntary_switches == 5


def test_hostile_names_cannot_break_folded_lines_or_the_terminal():
    import io

    from stallscope.tui.text import LiveText

    m, ivs = two_interval_recording()
    evil = "a;b c\nd\x1b[2Jx"
    ivs[0] = interval(0, task_info=(TaskInfo(A, 100, 1, evil),) + INFOS[1:], stacks=ivs[0].stacks,
                      tasks=ivs[0].tasks, offcpu=ivs[0].offcpu)
    folded = export.to_folded(_model(m, ivs))
    assert all(len(line.rsplit(" ", 1)) == 2 and "\x1b" not in line for line in folded.splitlines())
    assert "a:b_c_d_[2Jx;" in folded
    view = LiveText(out=io.StringIO())
    view.start(m)
    view.update(ivs[0])
    screen = view.out.getvalue()
    assert "\x1b[2J" not in screen.replace(view.render.__globals__["CLEAR"], "") and "a;b c?d?[2Jx" in screen


def test_the_plain_view_lists_tasks_by_their_waiting_and_shows_it():
    """`top --plain` lists the tasks in the Tasks view's order, waiting (idle waits left out) first: it showed only
    their off-CPU time, so that a list led by a blocked task read as if sorted by nothing."""
    import io

    from stallscope.tui.text import LiveText

    m, ivs = two_interval_recording()
    view = LiveText(out=io.StringIO())
    view.start(m)
    view.update(ivs[0])
    screen = view.out.getvalue()
    head = next(line for line in screen.splitlines() if line.startswith("TASK "))
    assert head.split()[:4] == ["TASK", "PID", "WAITING/s", "OFF-CPU/s"], head


def test_a_recording_without_a_later_table_reads_it_as_empty(tmp_path):
    """Tables are added within a format version; an older file simply lacks them."""
    import sqlite3

    m, ivs = two_interval_recording()
    path = tmp_path / "older.stall"
    write_recording(path, m, ivs)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE locks")
    db.commit()
    db.close()
    model = load_model(str(path))
    assert model.lock_waits == () and model.tasks[A].offcpu_ns == 1_700_000_000


def test_a_blocker_says_who_held_it_up_and_waiting_for_cpu_names_the_hogs():
    from stallscope.analyzer.blockers import held_up_by

    model = _model(*two_interval_recording())
    by = {b.cause: b for b in rank_blockers(model)}
    pipe = held_up_by(model, by["Reading from a pipe"])
    assert pipe.wakers[0][0] == "sleeper[100]" and pipe.wakers[0][1] == 50  # A fed B's pipe
    sleep = held_up_by(model, by["Application requested delay"])
    assert sleep.wakers[0][0] == "timer"  # the hrtimer woke the sleeper
    cpu = held_up_by(model, by["Waiting for CPU"])
    assert cpu.hogs == (("reader[101]", 2),)  # B was preempted twice: it held a CPU
    assert by["Waiting for CPU"].latency == {"p50_ns": 8192, "p90_ns": 8192, "p99_ns": 8192}  # A's slot 12
    # measured at the run queue, never from a stack (its method said "stack" before)
    assert by["Waiting for CPU"].method == "runqueue" and by["Reading from a pipe"].method == "stack"


def test_a_blockers_wakers_are_those_of_its_own_waits_not_of_its_tasks_other_waits():
    """A reader that also sleeps: the writer that fed its pipe held up its pipe reads, the timer its sleeps.
    Each wakeup names its wakee's wait (its stratum), so each blocker lists only the wakers of its waits."""
    from stallscope.analyzer.blockers import held_up_by
    from stallscope.analyzer.sample import WaitLink, WakerDelta
    from synthetic import INFOS, PIPE, SLEEP, TIMER, interval, meta

    read, nap = WaitLink(0, 1, 3), WaitLink(0, 1, 7)  # (func, state, why): one task doing two things
    iv = interval(0, task_info=INFOS, stacks=(SLEEP, PIPE, TIMER), tasks=(
        TaskDelta(B, offcpu_ns=800_000_000, offcpu_count=60, voluntary_switches=60),), offcpu=(
        OffcpuDelta(B, 100, 1, PIPE.id, 0, 50, 500_000_000, 10_000_000, why=3),
        OffcpuDelta(B, 100, 1, SLEEP.id, 0, 10, 300_000_000, 30_000_000, why=7)), wakers=(
        WakerDelta(B, A, 100, "sleeper", 0x2, 50, 500_000_000, False, wakee=read),
        WakerDelta(B, TaskId(0, 0), 0, "swapper/0", TIMER.id, 10, 300_000_000, True, wakee=nap)))
    model = _model(meta(), [iv])
    by = {b.cause: b for b in rank_blockers(model, include_idle=True)}
    pipe = held_up_by(model, by["Reading from a pipe"])
    assert [(label, n, ns) for label, n, ns, _s in pipe.wakers] == [("sleeper[100]", 50, 500_000_000)]
    sleep = held_up_by(model, by["Application requested delay"])
    assert [(label, n, ns) for label, n, ns, _s in sleep.wakers] == [("timer", 10, 300_000_000)]


def test_the_wakers_share_out_the_time_the_causes_waits_measured_in_the_proportions_of_the_drawn_ones():
    """At T = 10 s (the budget's last step) four waits of 100 ms, 1 s in all, were drawn for their wakers: three
    woken by A and one by the timer, each standing for 10 s. Their d/p sums (30 s, 10 s) estimate the time each
    waker ended, wildly here; the page says 750 ms and 250 ms: the 1 s measured, shared in those proportions."""
    from stallscope.analyzer.blockers import held_up_by
    from stallscope.analyzer.sample import WaitLink, WakerDelta
    from synthetic import INFOS, PIPE, TIMER, interval, meta

    read = WaitLink(0, 1, 3)
    iv = interval(0, task_info=INFOS, stacks=(PIPE, TIMER), tasks=(
        TaskDelta(B, offcpu_ns=1_000_000_000, offcpu_count=10, voluntary_switches=10),), offcpu=(
        OffcpuDelta(B, 100, 1, PIPE.id, 0, 10, 1_000_000_000, 100_000_000, why=3, weighted_ns=40_000_000_000),),
        wakers=(WakerDelta(B, A, 100, "sleeper", 0x2, 3, 300_000_000, False, wakee=read, weighted_ns=30 * SEC),
                WakerDelta(B, TaskId(0, 0), 0, "swapper/0", TIMER.id, 1, 100_000_000, True, wakee=read,
                           weighted_ns=10 * SEC)))
    model = _model(meta(), [iv])
    pipe = held_up_by(model, next(b for b in rank_blockers(model) if b.cause == "Reading from a pipe"))
    assert [(label, n, ns) for label, n, ns, _s in pipe.wakers] == [("sleeper[100]", 3, 750_000_000),
                                                                     ("timer", 1, 250_000_000)]


def test_a_wakeup_of_a_stratum_two_causes_share_counts_for_each_in_its_part():
    """One task doing one thing (one stratum) whose drawn waits showed two stacks: 900 ms reading a pipe, 100 ms
    sleeping. Its one drawn wakeup goes 90% to the pipe and 10% to the sleep: each blocker names its waker, with
    its part of the time, and one wakeup, not 0."""
    from stallscope.analyzer.blockers import held_up_by
    from stallscope.analyzer.sample import WaitLink, WakerDelta
    from synthetic import INFOS, PIPE, SLEEP, interval, meta

    iv = interval(0, task_info=INFOS, stacks=(PIPE, SLEEP), tasks=(
        TaskDelta(B, offcpu_ns=1_000_000_000, offcpu_count=10, voluntary_switches=10),), offcpu=(
        OffcpuDelta(B, 100, 1, PIPE.id, 0, 9, 900_000_000, 100_000_000),
        OffcpuDelta(B, 100, 1, SLEEP.id, 0, 1, 100_000_000, 100_000_000)),
        wakers=(WakerDelta(B, A, 100, "sleeper", 0x2, 1, 100_000_000, False, wakee=WaitLink(0, 1, 0),
                           weighted_ns=1_000_000_000),))
    model = _model(meta(), [iv])
    by = {b.cause: b for b in rank_blockers(model, include_idle=True)}
    pipe = held_up_by(model, by["Reading from a pipe"])
    sleep = held_up_by(model, by["Application requested delay"])
    assert [(label, n, ns) for label, n, ns, _s in pipe.wakers] == [("sleeper[100]", 1, 900_000_000)]
    assert [(label, n, ns) for label, n, ns, _s in sleep.wakers] == [("sleeper[100]", 1, 100_000_000)]


def test_causes_rank_per_cgroup_and_the_cgroups_survive_the_recording(tmp_path):
    from stallscope.analyzer.blockers import process_causes

    m, ivs = two_interval_recording()
    ivs[0] = replace(ivs[0], cgroups=((100, 5 * SEC, "/system.slice/app.service"),))
    write_recording(tmp_path / "cg.stall", m, ivs)
    model = load_model(str(tmp_path / "cg.stall"))
    assert model.cgroups == {100: "/system.slice/app.service"}
    groups = process_causes(model, by_cgroup=True)
    assert [g.comm for g in groups] == ["/system.slice/app.service"]
    assert groups[0].causes[0][0] == "Reading from a pipe"


def test_blocker_percentiles_come_from_the_waits_log2_buckets_and_survive_the_recording(tmp_path):
    m, ivs = two_interval_recording()
    # 90 waits of ~10 ms (slot 23) and 10 of ~40 ms (slot 25) on the pipe
    ivs[0] = replace(ivs[0], offcpu=(ivs[0].offcpu[0], replace(ivs[0].offcpu[1], count=100, hist=((23, 90), (25, 10)),
                                                                 max_ns=45_000_000)))
    write_recording(tmp_path / "h.stall", m, ivs)
    pipe = next(b for b in rank_blockers(load_model(str(tmp_path / "h.stall"))) if b.cause == "Reading from a pipe")
    assert pipe.latency == {"p50_ns": 2 ** 24, "p90_ns": 2 ** 24, "p99_ns": 45_000_000}


def test_overhead_is_bpf_run_time_plus_dispatch_plus_collector_against_the_budget(tmp_path):
    from stallscope.analyzer.overhead import DISPATCH_NS_PER_EVENT, interval_cost
    from stallscope.analyzer.sample import ProgramCost

    m, ivs = two_interval_recording()  # 2 CPUs, 1 s intervals
    ivs[0] = replace(ivs[0], programs=(ProgramCost("sched_switch", 100_000, 20_000_000, 0),), collector_cpu_ns=10_000_000)
    ivs[1] = replace(ivs[1], programs=(ProgramCost("sched_switch", 1_000, 200_000, 0),), collector_cpu_ns=1_000_000)
    cost = interval_cost(ivs[0], 2)
    assert cost.dispatch_ns == 100_000 * DISPATCH_NS_PER_EVENT
    assert round(cost.total_pct, 3) == round(100 * (20e6 + 4e6 + 10e6) / 1e9 / 2, 3)  # 1.7% of 2 CPUs
    write_recording(tmp_path / "ov.stall", replace(m, options={"overhead_budget_pct": 1.0}), ivs)
    doc = export.to_json_doc(load_model(str(tmp_path / "ov.stall")))
    o = doc["meta"]["overhead"]
    assert o["budget_pct"] == 1.0 and o["over_budget_intervals"] == 1 and round(o["worst_interval_pct"], 1) == 1.7
    assert round(o["total_pct"], 3) == round(100 * (20.2e6 + 4.04e6 + 11e6) / 1e9 / 2 / 2, 3)


def test_a_long_running_top_forgets_exited_tasks_and_keeps_the_stacks_it_uses_most_recently():
    import io

    from stallscope.analyzer.sample import TS_DEAD
    from stallscope.tui.text import LiveText
    from synthetic import kstack

    m, ivs = two_interval_recording()
    view = LiveText(out=io.StringIO(), max_stacks=3)
    view.start(m)
    view.update(ivs[0])
    assert set(view.tasks) == {A, B} and set(view.stacks) == {SLEEP.id, PIPE.id, TIMER.id}
    # A exits; a new stack arrives while SLEEP, the oldest, is still in use: PIPE, unused longest, goes
    extra = kstack(0x4000, "__schedule", "schedule", "futex_wait")
    view.update(interval(1, task_info=(replace(INFOS[0], flags=TS_DEAD),), stacks=(extra,),
                         offcpu=(OffcpuDelta(B, 100, 1, SLEEP.id, 0, 1, 1000, 1000),)))
    assert set(view.stacks) == {SLEEP.id, TIMER.id, extra.id}
    # A's final switch is in the interval shown: named there, forgotten once the next one replaces it
    view.update(interval(2))
    assert set(view.tasks) == {B}


def test_store_streams_intervals_in_order_with_gaps_and_windows(tmp_path):
    """Each table is read by its own cursor in interval order: an interval with no rows in a table gets
    none, and a window starts and ends where asked."""
    m, ivs = two_interval_recording()
    quiet = interval(2, tasks=(TaskDelta(B, voluntary_switches=1),))  # no off-CPU, waker or migration rows
    last = replace(ivs[1], index=3, start_ns=3 * SEC, end_ns=4 * SEC, migrations=((1, 0, 2),))
    path = tmp_path / "gaps.stall"
    write_recording(path, m, [*ivs, quiet, last])
    rec = Recording(str(path))
    back = list(rec.intervals())
    assert [iv.index for iv in back] == [0, 1, 2, 3]
    assert back[2].offcpu == () and back[2].wakers == () and back[2].tasks == quiet.tasks
    assert back[3].offcpu == last.offcpu and back[3].migrations == ((1, 0, 2),) and back[0].migrations == ((0, 1, 1),)
    window = list(rec.intervals(1, 2))
    assert [iv.index for iv in window] == [1, 2] and window[0].offcpu == ivs[1].offcpu
    assert load_model(str(path), 1, 2).switches == 2000


def test_the_live_view_forgets_threads_once_they_exit_but_names_them_in_their_last_interval():
    """`top` runs for days under task churn: a thread's name is kept while it lives, not forever."""
    import io

    from stallscope.tui.text import LiveText

    m, ivs = two_interval_recording()
    view = LiveText(out=io.StringIO())
    view.start(m)
    view.update(ivs[0])
    assert set(view.tasks) == {A, B}
    last = interval(1, task_info=(TaskInfo(B, 100, 1, "reader", flags=8),),  # TS_DEAD: B's final switch
                    tasks=(TaskDelta(B, offcpu_ns=300_000_000, offcpu_count=3, voluntary_switches=3),))
    view.update(last)
    assert "reader" in view.out.getvalue().rsplit("TASK", 1)[1]  # still named in the interval it died in
    view.update(interval(2))
    assert set(view.tasks) == {A}


def test_waits_carried_on_fold_as_the_charge_only_records_they_stand_for_and_are_stored_as_them(tmp_path):
    """An interval's ongoing waits (OngoingWait: carried on by the dump, each charged ongoing_ns) give the
    model what the records they stand for give (a charge-only OffcpuDelta and a TaskDelta each), beside other
    records of the same key and task in the window; the recording stores them as those records."""
    from stallscope.analyzer.sample import OngoingWait

    m, (i0, i1) = two_interval_recording()
    c = TaskId(102, 7 * SEC)
    carried = (OngoingWait(A, 100, 1, SLEEP.id, 0, 0, 0), OngoingWait(c, 100, 2, 5, 0, 0, 0))
    i1c = replace(i1, ongoing=carried, ongoing_ns=999_000_000)
    expanded = replace(i1, offcpu=i1c.offcpu_records(), tasks=i1c.task_records())
    assert len(expanded.offcpu) == len(i1.offcpu) + 2 and len(expanded.tasks) == len(i1.tasks) + 2
    folded, by_records = _model(m, [i0, i1c]), _model(m, [i0, expanded])
    assert folded.tasks == by_records.tasks
    assert sorted(folded.waits, key=repr) == sorted(by_records.waits, key=repr)
    assert folded.tasks[c].offcpu_ns == 999_000_000 and folded.tasks[A].offcpu_ns == 1_700_000_000 + 999_000_000
    path = tmp_path / "carried.stall"
    write_recording(path, m, [i0, i1c])
    assert load_model(str(path)).tasks[c].offcpu_ns == 999_000_000
    assert load_model(str(path)).tasks[A].offcpu_ns == folded.tasks[A].offcpu_ns


def test_a_reads_part_after_its_first_second_is_idle_and_the_series_agree():
    """A read of a pipe from 0.5 s to 2.5 s, over three one-second intervals: at the first's end it had gone on
    0.5 s, at the second's 1.5 s, then it ended. What was charged while it had gone on a second and more (the
    second interval's part, 1 s) is the idle "Reading from a pipe, nothing came"; the rest (0.5 s before,
    0.5 s in the interval it ended) is the blocker, with its one wait of 2 s. The task's blocked time is the
    whole 2 s; the report's per-interval series put the same amounts in the same intervals."""
    from stallscope.analyzer.sample import OffcpuDelta, OngoingWait, WaitSince
    from stallscope.analyzer.series import interval_series

    reading = OngoingWait(B, 100, 1, PIPE.id, 0, 0, 0)
    ivs = [interval(0, task_info=INFOS, stacks=(PIPE,), tasks=(TaskDelta(B, offcpu_ns=SEC // 2),),
                    offcpu=(reading.charged(SEC // 2),), opened=(WaitSince(reading, SEC // 2),)),
           interval(1, ongoing=(reading,), ongoing_ns=SEC,  # carried on: no record, no task delta
                    ongoing_since=(SEC // 2,), opened=()),
           interval(2, tasks=(TaskDelta(B, offcpu_ns=SEC // 2, offcpu_count=1, voluntary_switches=1),),
                    offcpu=(OffcpuDelta(B, 100, 1, PIPE.id, 0, 1, 2 * SEC, 2 * SEC, charged_ns=SEC // 2),),
                    opened=())]
    model = Model.from_intervals(meta(), ivs, {t.task: t for t in INFOS}, {PIPE.id: PIPE})
    ranked = {b.cause: b for b in rank_blockers(model, include_idle=True)}
    fed, quiet = ranked["Reading from a pipe"], ranked["Reading from a pipe, nothing came"]
    assert (fed.cls, fed.total_ns, fed.count, fed.max_ns) == ("blocker", SEC, 1, 2 * SEC)
    assert (quiet.cls, quiet.total_ns, quiet.count) == ("idle", SEC, 0)
    assert model.tasks[B].offcpu_ns == 2 * SEC
    series = interval_series(model, ivs)
    assert series.causes["Reading from a pipe"].ns == {0: SEC // 2, 2: SEC // 2}
    # the roots are of the same waiting time: the idle second is no one's root (it had counted 2 s, the
    # roots of a recording then summing to more than the waiting they explain)
    from stallscope.analyzer.chains import root_table
    roots = root_table(model)
    assert [(r.name, r.total_ns, round(r.share_pct)) for r in roots.all] == [("Reading from a pipe", SEC, 100)]
    assert series.causes["Reading from a pipe, nothing came"].ns == {1: SEC}
    # a window of the second interval alone: its whole part is idle, and the wait is in progress there
    second = Model.from_intervals(meta(), ivs[:2], {t.task: t for t in INFOS}, {PIPE.id: PIPE})
    now = {b.cause: b for b in rank_blockers(second, include_idle=True)}
    assert now["Reading from a pipe, nothing came"].in_progress == 1
    assert now["Reading from a pipe"].in_progress == 0
    # by thread, the wait still going is its longest, marked as the cause table marks it (no wait ended: it read 0)
    from stallscope.tui.causes import causes_text
    text = causes_text(second, by="thread", include_idle=True)
    assert "  total 1.50s (" in text and "max 1.50s+\n" in text, text
    assert "    Reading from a pipe, nothing came" in text and "1.50s+ max" in text and "\n+ : a wait still going" in text


def test_the_waits_in_progress_at_a_windows_end_are_its_last_intervals_with_their_length_so_far(tmp_path):
    """An interval keeps the waits in progress at its end: those carried on (with their beginnings, in the
    order of `ongoing`) and those its dump handed over (`opened`). A window's model holds those of its last
    interval only, as the StackWaits of their keys with their length at the window's end; the
    ranking gives each cause its count and longest; the export, each task's. A recording keeps them; one
    made before they were kept reads as not knowing them (None), never as nothing in progress."""
    import sqlite3

    from stallscope.analyzer.sample import OngoingWait, WaitSince

    m, (i0, i1) = two_interval_recording()
    c = TaskId(102, 7 * SEC)
    sleep, pipe = OngoingWait(A, 100, 1, SLEEP.id, 0, 0, 0), OngoingWait(c, 100, 1, PIPE.id, 0, 0, 0)
    infos = INFOS + (TaskInfo(c, 100, 1, "hung"),)
    # A's sleep began 0.25 s before i1's end (handed over by its dump); c has been reading since before i0
    i0c = replace(i0, task_info=infos, offcpu=i0.offcpu + (pipe.charged(SEC),), opened=(WaitSince(pipe, 0),))
    i1c = replace(i1, offcpu=i1.offcpu + (sleep.charged(250_000_000),), ongoing=(pipe,), ongoing_ns=SEC,
                  ongoing_since=(0,), opened=(WaitSince(sleep, 2 * SEC - 250_000_000),))
    stacks = {s.id: s for s in i0.stacks}
    model = Model.from_intervals(m, [i0c, i1c], {t.task: t for t in infos}, stacks)
    assert [(w.wait.task, w.since_ns, w.so_far_ns) for w in model.waits_now] == [
        (c, 0, 2 * SEC), (A, 2 * SEC - 250_000_000, 250_000_000)]
    assert model.waits_now[0].wait.kstack == PIPE
    # a window of the first interval alone: what was in progress at its end
    first = Model.from_intervals(m, [i0c], {t.task: t for t in infos}, stacks)
    assert [(w.wait.task, w.so_far_ns) for w in first.waits_now] == [(c, SEC)]
    ranked = {b.cause: b for b in rank_blockers(model)}
    # a read of a pipe in progress for a second and more at each interval's end got nothing all along: idle
    quiet = ranked["Reading from a pipe, nothing came"]
    assert (quiet.cls, quiet.total_ns, quiet.in_progress, quiet.longest_now_ns) == ("idle", 2 * SEC, 1, 2 * SEC)
    fed = ranked["Reading from a pipe"]  # B's waits, which ended: a reader held up by its writer
    assert fed.in_progress == 0 and c not in fed.tasks and fed.total_ns == 500_000_000
    assert ranked["Application requested delay"].in_progress == 1
    assert ranked["Application requested delay"].longest_now_ns == 250_000_000
    doc = export.to_json_doc(model)
    assert {t["pid"]: t["blocked_now_ns"] for t in doc["tasks"]} == {100: 250_000_000, 101: None, 102: 2 * SEC}
    pipe_doc = next(b for b in doc["blockers"] if b["cause"] == "Reading from a pipe, nothing came")
    assert (pipe_doc["in_progress"], pipe_doc["in_progress_longest_ns"]) == (1, 2 * SEC)

    path = tmp_path / "now.stall"
    write_recording(path, m, [i0c, i1c])
    read = list(Recording(str(path)).intervals())
    assert [iv.waits_now() for iv in read] == [i0c.waits_now(), i1c.waits_now()]
    assert load_model(str(path)).waits_now == model.waits_now
    db = sqlite3.connect(path)  # as a recording made before the beginnings were kept
    db.execute("DROP TABLE opened")
    db.execute("ALTER TABLE ongoing DROP COLUMN since_ns")
    db.commit()
    db.close()
    assert [iv.waits_now() for iv in Recording(str(path)).intervals()] == [None, None]
    old = load_model(str(path))
    assert old.waits_now is None and old.tasks == model.tasks
    assert all(b.in_progress == 0 for b in rank_blockers(old))
    assert all(t["blocked_now_ns"] is None for t in export.to_json_doc(old)["tasks"])


def test_a_lazy_model_folds_its_wakeups_and_lock_waits_when_first_read_into_what_an_eager_one_holds():
    """Model.from_intervals(lazy=True), as a timeline folds its windows: the ranking of causes reads neither
    table, so they are folded when a view first reads them, and are then what the eager fold gives."""
    from stallscope.analyzer.model import Folded
    from stallscope.analyzer.sample import LockDelta

    m, ivs = two_interval_recording()
    ivs[1] = replace(ivs[1], locks=(LockDelta(A, 100, 0xABC, 0, 1, 0, 3, 300, 200, 50),))
    infos = {t.task: t for iv in ivs for t in iv.task_info}
    stacks = {s.id: s for iv in ivs for s in iv.stacks}
    lazy = Model.from_intervals(m, ivs, infos, stacks, lazy=True)
    eager = Model.from_intervals(m, ivs, infos, stacks)
    assert isinstance(lazy.wakeups, Folded) and lazy.wakeups._items is None
    rank_blockers(lazy)  # the ranking reads neither
    assert lazy.wakeups._items is None and lazy.lock_waits._items is None
    assert lazy.wakeups == eager.wakeups and list(lazy.lock_waits) == list(eager.lock_waits)
    assert len(lazy.lock_waits) == 1 and lazy.lock_waits[0].total_ns == 300 and lazy == eager


def test_a_recording_of_format_1_with_its_carried_waits_stored_as_records_reads_as_one_of_format_2(tmp_path):
    """Format 2 keeps the waits carried on in a table of their own (`ongoing`, and `intervals.ongoing_ns`);
    format 1 stored each as the charge-only off-CPU and task rows it stands for, without the table or the
    column. Both give the same model; a reader of format 1 refuses format 2 (it would miss the table)."""
    import sqlite3

    from stallscope.analyzer.sample import OngoingWait
    from stallscope.analyzer.store import FORMAT_VERSION

    m, (i0, i1) = two_interval_recording()
    c = TaskId(102, 7 * SEC)
    carried = replace(i1, ongoing=(OngoingWait(A, 100, 1, SLEEP.id, 0, 0, 0), OngoingWait(c, 100, 2, 5, 0, 0, 0)),
                      ongoing_ns=999_000_000)
    new, old = tmp_path / "v2.stall", tmp_path / "v1.stall"
    write_recording(new, m, [i0, carried])
    write_recording(old, m, [i0, replace(carried, offcpu=carried.offcpu_records(), tasks=carried.task_records(),
                                         ongoing=(), ongoing_ns=0)])
    db = sqlite3.connect(old)
    db.execute("DROP TABLE ongoing")
    db.execute("ALTER TABLE intervals DROP COLUMN ongoing_ns")
    db.execute("UPDATE meta SET value='1' WHERE key='format_version'")
    db.commit()
    db.close()
    assert FORMAT_VERSION == 2
    assert Recording(str(new)).format_version == 2 and Recording(str(old)).format_version == 1
    a, b = load_model(str(new)), load_model(str(old))
    assert a.tasks == b.tasks and sorted(a.waits, key=repr) == sorted(b.waits, key=repr)
    assert [iv.ongoing for iv in Recording(str(new)).intervals()][1] == carried.ongoing


def test_a_recording_folded_with_its_lock_rows_read_apart_is_the_model_of_its_intervals(tmp_path):
    """fold_recording folds a recording's kernel lock contentions from its rows, no record made for each:
    the same model (its lock table, order, invariants and all) and the same series as Model.from_intervals
    over the same intervals, damaged rows and rows of intervals not read left out alike."""
    import sqlite3
    from dataclasses import asdict, fields

    from stallscope.analyzer.load import fold_recording
    from stallscope.analyzer.sample import LockDelta
    from stallscope.analyzer.series import Ledger, interval_series
    from stallscope.analyzer.store import Recording
    from synthetic import A, B, INFOS, SLEEP, interval, meta, write_recording

    lock, other = 0xFFFF8880_12345678, 0xFFFFFFFF_82000040  # kernel addresses: above 2^63, kept signed
    ivs = [
        interval(0, task_info=INFOS, stacks=(SLEEP,), locks=(
            LockDelta(A, 100, lock, SLEEP.id, 0x2, 0, 3, 3_000_000, 2_000_000, 100_000, 0, 3_000_000,
                      blocked_ns=None, runnable_ns=None),
            LockDelta(B, 100, lock, SLEEP.id, 0x2, 0, 1, 50_000, 50_000, 50_000, 50_000, 0, owner_pid=100,
                      owner_comm="sleeper", blocked_ns=0, runnable_ns=0))),
        interval(1, locks=(
            LockDelta(A, 100, lock, SLEEP.id, 0x2, 0, 2, 1_000_000, 900_000, 0, 0, 1_000_000, symbol="big_lock",
                      blocked_ns=800_000, runnable_ns=200_000, weighted_ns=7, var_us2=3),
            LockDelta(B, 100, other, 0, 0x4, 2, 5, 10_000_000, 9_000_000, 10, 0, 10_000_000, cache="dentry",
                      blocked_ns=9_000_000, runnable_ns=2_000_000, field="dentry.d_lock", object="/tmp"),
            LockDelta(A, 100, other, 0, 0x4, 2, 1, 99 * 10**9, 99 * 10**9, 99 * 10**9, 0, 0, cache="dentry"))),
        interval(2, locks=(LockDelta(B, 100, lock, SLEEP.id, 0x2, 0, 4, 400, 200, 50, 400, 0, owner_pid=101,
                                     owner_comm="reader", blocked_ns=100, runnable_ns=0),)),
        interval(3, locks=(LockDelta(A, 100, lock, SLEEP.id, 0x2, 0, 1, 10, 10, 10, 10, 0),)),
        interval(4, locks=(LockDelta(A, 100, lock, SLEEP.id, 0x2, 0, 1, 10, 10, 10, 10, 0, symbol="later_name"),
                           LockDelta(B, 100, other, 0, 0x4, 2, 1, 20, 20, 20, 0, 20, cache="dentry",
                                     blocked_ns=20, runnable_ns=0, field="other.field"))),
    ]
    path = tmp_path / "locks.stall"
    write_recording(path, meta(), ivs)
    db = sqlite3.connect(path)
    db.execute("UPDATE locks SET count = 'x' WHERE idx = 2")  # a damaged row
    db.execute("DELETE FROM intervals WHERE idx = 3")  # its lock row belongs to no interval read
    db.execute("UPDATE meta SET value = json_set(value, '$.end_ns', 0) WHERE key = 'meta'")  # cut off
    db.commit()
    db.close()

    rec, kept = Recording(str(path)), Ledger()
    want = Model.from_intervals(rec.meta, kept.tee(rec.intervals()), rec.tasks(), rec.stacks(),
                                slab_caches=rec.slab_caches(), functions=rec.functions())
    damaged = dict(rec.damaged)
    rec.close()
    rec, ledger = Recording(str(path)), Ledger()
    got = fold_recording(rec, ledger=ledger)
    assert dict(rec.damaged) == damaged == {"locks": 1}
    rec.close()
    assert len(got.lock_waits) == 4 and got.health.get("invariant.wait_longer_than_recording") == 1
    assert got.health.get("invariant.lock_split_above_total") == 1
    assert {f.name: getattr(got, f.name) for f in fields(Model)} == {f.name: getattr(want, f.name) for f in fields(Model)}
    assert [w.addr for w in got.lock_waits] == [lock, lock, other, other]
    assert got.lock_waits[0].symbol == "big_lock" and got.lock_waits[2].field == "dentry.d_lock"
    assert got.lock_waits[0].count == 6  # intervals 0, 1 and 4 (3 + 2 + 1): not 3
    assert asdict(interval_series(got, ledger)) == asdict(interval_series(want, kept))


def test_a_blockers_stacks_are_the_drawn_waits_with_what_they_stand_for_the_undrawn_not_listed_again():
    """A reader's pipe waits: 10 drawn (each standing for ten, p = 1/10), 90 not drawn, 5 drawn whose walk the
    rate cap refused. The drawn ones stand for the undrawn: listed beside them, the undrawn counted twice
    (their own time as a "stack" of their own). The stacks' shares are of what the drawn waits stand for."""
    from stallscope.analyzer.blockers import STACK_NOT_DRAWN, STACK_RATE_LIMITED
    from stallscope.analyzer.timeline import Snapshot
    from stallscope.tui.detail import blocker_detail
    from synthetic import INFOS, PIPE, interval, meta

    READ_PIPE = 1 << 10 | 0 | 1 << 13  # in a system call (read, 0 on x86_64) on a pipe: the evidence names it
    iv = interval(0, task_info=INFOS, stacks=(PIPE,), tasks=(
        TaskDelta(B, offcpu_ns=1_050_000_000, offcpu_count=105, voluntary_switches=105),), offcpu=(
        OffcpuDelta(B, 100, 1, PIPE.id, 0, 10, 100_000_000, 10_000_000, why=READ_PIPE, weighted_ns=800_000_000),
        OffcpuDelta(B, 100, 1, STACK_NOT_DRAWN, 0, 90, 900_000_000, 10_000_000, why=READ_PIPE),
        OffcpuDelta(B, 100, 1, STACK_RATE_LIMITED, 0, 5, 50_000_000, 10_000_000, why=READ_PIPE, weighted_ns=200_000_000)))
    snap = Snapshot(_model(meta(), [iv]))
    b = next(b for b in snap.blockers if b.cause == "Reading from a pipe")
    text = blocker_detail(snap, b).plain
    stacks = text[text.index("Stacks its waits"):text.index("Held up by") if "Held up by" in text else None]
    assert "  80.0%  measured 100.00ms in 10 waits" in stacks and "anon_pipe_read" in stacks, stacks
    assert "  20.0%  measured 50.00ms in 5 waits" in stacks and "(stack not sampled)" in stacks, stacks
    assert "not drawn" not in stacks and "900.00ms" not in stacks, stacks


def test_a_threads_undrawn_waits_its_evidence_cannot_name_are_shared_by_its_processs_drawn_ones():
    """A pool of threads, each waiting a few times in lseek(): one thread's waits were drawn (its file's
    f_pos_lock), another's were not. lseek() names no cause by itself, so the second thread's time is shared by
    the process's drawn waits of the same kind, estimated, with a margin; a thread of another process with none
    drawn keeps its evidence's name. The grouped reading (the live ranking's) gives the same parts."""
    from stallscope.analyzer.attribution import attribute, attribute_grouped
    from stallscope.analyzer.blockers import STACK_NOT_DRAWN
    from synthetic import kstack

    lseek_file = 1 << 10 | 8 | 3 << 13  # in lseek() (8 on x86_64) on a file
    fpos = kstack(0x4000, "__fdget_pos", "ksys_lseek", "__x64_sys_lseek", "do_syscall_64")
    other = TaskId(300, 7 * SEC)
    infos = INFOS + (TaskInfo(other, 300, 1, "loner"),)
    iv = interval(0, task_info=infos, stacks=(fpos,), tasks=(
        TaskDelta(A, offcpu_ns=100_000_000, offcpu_count=10), TaskDelta(B, offcpu_ns=300_000_000, offcpu_count=30),
        TaskDelta(other, offcpu_ns=50_000_000, offcpu_count=5)), offcpu=(
        OffcpuDelta(A, 100, 2, fpos.id, 0, 10, 100_000_000, 10_000_000, why=lseek_file, weighted_ns=400_000_000,
                    var_us2=1e6),
        OffcpuDelta(B, 100, 2, STACK_NOT_DRAWN, 0, 30, 300_000_000, 10_000_000, why=lseek_file),
        OffcpuDelta(other, 300, 2, STACK_NOT_DRAWN, 0, 5, 50_000_000, 10_000_000, why=lseek_file)))
    model = _model(meta(), [iv])
    by = {b.cause: b for b in rank_blockers(model, include_cpu=False)}
    fpos_lock = by["mutex contention: f_pos_lock"]
    assert (fpos_lock.total_ns, fpos_lock.estimated_ns, set(fpos_lock.tasks)) == (400_000_000, 300_000_000, {A, B})
    assert fpos_lock.error_ns > 0 and fpos_lock.pooled_ns == 300_000_000
    doc = next(b for b in export.to_json_doc(model)["blockers"] if b["cause"] == fpos_lock.cause)
    assert doc["estimated_by_process_ns"] == 300_000_000
    assert by["In lseek() on a file"].tasks == (other,) and by["In lseek() on a file"].estimated_ns == 0
    parts = {(p.task, p.cause.name): round(p.ns) for p in attribute(model, None)}
    grouped = attribute_grouped(model, None)
    again = {(p.task, p.cause.name): round(p.ns) for p in grouped.parts}
    for a in grouped.alike:
        again.update({(t, a.cause.name): round(ns) for t, ns in zip(a.tasks, a.ns)})
    assert parts == again == {(A, "mutex contention: f_pos_lock"): 100_000_000,
                              (B, "mutex contention: f_pos_lock"): 300_000_000,
                              (other, "In lseek() on a file"): 50_000_000}


def test_stacks_hash_by_id_and_kind_and_compare_whole():
    """A stack's hash is its id's and kind's (cause lookups key by stacks, hundreds an interval: the dataclass's own
    hashed every frame); equal stacks hash alike, and stacks that share an id but not their frames stay apart."""
    from stallscope.analyzer.sample import Frame, Stack

    frame = Frame(0xffffffff81000000, "schedule", 0x10, "kernel", None, None, "kernel")
    a, same, other = Stack(7, "kernel", (frame,)), Stack(7, "kernel", (frame,)), Stack(7, "kernel", ())
    assert a == same and hash(a) == hash(same)
    assert a != other and a != Stack(7, "user", (frame,)) and a != Stack(7, "kernel", (frame,), truncated=True)
    table = {a: "a", other: "other"}
    assert table[same] == "a" and table[Stack(7, "kernel", ())] == "other" and len(table) == 2
