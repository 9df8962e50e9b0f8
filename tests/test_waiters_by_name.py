"""Who waited and who ran instead, by process name: a machine of thousands of short-lived tasks of one name
(hackbench forks 400 processes a run) and one long-lived thread. The long-lived thread is the single task
that waited and was preempted most, but the short-lived ones waited and ran far more together: every view
must name them first, not the one thread (a post-mortem that said "held up by kdamond.0" on 10 minutes of
hackbench sent its reader after the wrong process)."""

from __future__ import annotations

import json

from stallscope.analyzer.blockers import held_up_by, rank_blockers, waiters_by_name
from stallscope.analyzer.chains import root_table
from stallscope.analyzer.export import to_json_doc
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import OffcpuDelta, TaskDelta, TaskId, TaskInfo, WaitLink, WakerDelta
from stallscope.reports.build import _blocker_sentence
from stallscope.tui.detail import blocker_detail
from stallscope.tui.views import _names
from stallscope.analyzer.timeline import Snapshot
from synthetic import interval, kstack, meta

SEC = 1_000_000_000
KTHREAD = TaskId(77, 1)
WORKERS = [TaskId(1000 + i, 2) for i in range(300)]
INFOS = (TaskInfo(KTHREAD, 77, 2, "kthread"),
         *(TaskInfo(t, t.pid, 1, "worker") for t in WORKERS))


def _model() -> Model:
    ivs = [interval(i, task_info=INFOS if i == 0 else (), tasks=(
        TaskDelta(KTHREAD, runq_wait_ns=SEC // 2, runq_count=10, involuntary_switches=1_000),
        *(TaskDelta(t, runq_wait_ns=SEC // 20, runq_count=2, involuntary_switches=100, runq_hist=((12, 2),))
          for t in WORKERS[i::10])))
        for i in range(10)]
    return Model.from_intervals(meta(), ivs, {i.task: i for i in INFOS}, {})


def test_the_name_whose_tasks_waited_most_in_all_comes_first_not_the_heaviest_single_task():
    model = _model()
    cpu = next(b for b in rank_blockers(model) if b.cause == "Waiting for CPU")
    assert cpu.tasks[0] == KTHREAD  # 5 s, where each worker waited 0.05 s
    assert waiters_by_name(model, cpu) == (("worker", 15 * SEC, 300, "worker"), ("kthread[77]", 5 * SEC, 1, "kthread"))
    assert _names(Snapshot(model), cpu) == "worker, kthread"

    hogs = held_up_by(model, cpu)
    assert hogs.hogs[0] == ("kthread[77]", 10_000)  # the thread preempted most
    assert hogs.hog_names[:2] == (("worker", 30_000, 300, "worker"), ("kthread[77]", 10_000, 1, "kthread"))

    cpu_roots = root_table(model).by_cause["Waiting for CPU"]
    assert cpu_roots[0].chain == ("Waiting for CPU (worker)",)

    text = blocker_detail(Snapshot(model), cpu).plain
    by_name = text[text.index("Who waited, by name"):text.index("Tasks (301)")]
    assert by_name.index("worker in 300 tasks") < by_name.index("kthread[77]")
    latency = text[text.index("Wakeup-to-run latency"):]
    assert "600" in latency  # the workers' 300 x 2 wakeups of slot 12, the run-queue's histogram


def test_the_export_and_the_reports_sentence_read_by_name():
    doc = json.loads(json.dumps(to_json_doc(_model())))
    b = next(b for b in doc["blockers"] if b["cause"] == "Waiting for CPU")
    assert b["waiters"] == [{"name": "worker", "wait_ns": 15 * SEC, "tasks": 300},
                            {"name": "kthread[77]", "wait_ns": 5 * SEC, "tasks": 1}]
    assert b["held_up_by"]["hog_names"][0] == {"name": "worker", "comm": "worker", "involuntary_switches": 30_000,
                                               "threads": 300}
    assert b["tasks"][0]["comm"] == "kthread"  # per task, as before
    sentence = _blocker_sentence(b, doc["meta"]["duration_s"])
    assert sentence["tasks"] == ["worker ×300", "kthread[77]"] and not sentence["more_names"]
    assert sentence["held_up_by"][0] == "worker (30,000 involuntary switches in 300 threads)"


def test_the_sentence_names_a_root_only_when_it_explains_a_tenth_of_the_blocker():
    b = {"cause": "Sending on a socket", "class": "blocker", "total_ns": SEC, "share_pct": 16.8, "count": 1,
         "latency": {}, "max_ns": 1, "tasks": [{"pid": 1, "comm": "a"}], "estimated_ns": 0, "method": "stack",
         "held_up_by": {"wakers": [], "owners": [], "hogs": []},
         "roots": [{"root": "Sending on a socket", "share_pct": 16.0},
                   {"root": "a[2] on a CPU", "share_pct": 0.02}]}
    assert _blocker_sentence(b, 1.0)["root"] == ""
    b["roots"][1]["share_pct"] = 1.7
    assert _blocker_sentence(b, 1.0)["root"] == "a[2] on a CPU"


def test_wakers_and_the_roots_they_ran_are_summed_by_name():
    """A consumer woken by 50 short-lived producers (20 ms of its waiting each) and one long-lived one (100
    ms): the producers' name is who held it up, and "producer on a CPU" its root, before the single thread
    that woke it for longest."""
    futex = 202 | 1 << 10
    lock = kstack(0x100, "__schedule", "schedule", "futex_wait_queue", "futex_wait", "do_futex")
    app, loner = TaskId(10, 1), TaskId(11, 1)
    producers = [TaskId(100 + i, 1) for i in range(50)]
    infos = (TaskInfo(app, 10, 1, "app"), TaskInfo(loner, 11, 1, "loner"),
             *(TaskInfo(p, p.pid, 1, "producer") for p in producers))
    wakes = [WakerDelta(app, p, p.pid, "producer", 0, 1, 20_000_000, weighted_ns=20_000_000,
                        wakee=WaitLink(0, 1, futex)) for p in producers]
    wakes.append(WakerDelta(app, loner, 11, "loner", 0, 1, 100_000_000, weighted_ns=100_000_000,
                            wakee=WaitLink(0, 1, futex)))
    running = tuple(TaskDelta(t, run_ns=5_000_000) for t in (loner, *producers))
    iv = interval(0, task_info=infos, stacks=(lock,), tasks=(TaskDelta(app, offcpu_ns=1_100_000_000), *running),
                  offcpu=(OffcpuDelta(app, 10, 1, lock.id, 0, 51, 1_100_000_000, why=futex,
                                      weighted_ns=1_100_000_000),), wakers=tuple(wakes))
    model = Model.from_intervals(meta(), [iv], {i.task: i for i in infos}, {lock.id: lock})
    b = next(b for b in rank_blockers(model) if b.cause == "Userspace lock contention")
    h = held_up_by(model, b)
    assert h.wakers[0][0] == "loner[11]"  # per thread, as before
    assert [(label, n, threads) for label, n, _ns, threads, _s in h.waker_names] == [("producer", 50, 50),
                                                                                     ("loner[11]", 1, 1)]
    roots = root_table(model).by_cause["Userspace lock contention"]
    assert [(r.name, round(r.total_ns / 1e6)) for r in roots] == [("producer on a CPU", 1000),
                                                                  ("loner[11] on a CPU", 100)]
