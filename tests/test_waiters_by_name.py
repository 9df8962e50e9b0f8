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
from stallscope.analyzer.sample import TaskDelta, TaskId, TaskInfo
from stallscope.reports.build import _blocker_sentence
from stallscope.tui.views import _names
from stallscope.analyzer.timeline import Snapshot
from synthetic import interval, meta

SEC = 1_000_000_000
KTHREAD = TaskId(77, 1)
WORKERS = [TaskId(1000 + i, 2) for i in range(300)]
INFOS = (TaskInfo(KTHREAD, 77, 2, "kthread"),
         *(TaskInfo(t, t.pid, 1, "worker") for t in WORKERS))


def _model() -> Model:
    ivs = [interval(i, task_info=INFOS if i == 0 else (), tasks=(
        TaskDelta(KTHREAD, runq_wait_ns=SEC // 2, runq_count=10, involuntary_switches=1_000),
        *(TaskDelta(t, runq_wait_ns=SEC // 20, runq_count=2, involuntary_switches=100) for t in WORKERS[i::10])))
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


def test_the_export_and_the_reports_sentence_read_by_name():
    doc = json.loads(json.dumps(to_json_doc(_model())))
    b = next(b for b in doc["blockers"] if b["cause"] == "Waiting for CPU")
    assert b["waiters"] == [{"name": "worker", "wait_ns": 15 * SEC, "tasks": 300},
                            {"name": "kthread[77]", "wait_ns": 5 * SEC, "tasks": 1}]
    assert b["held_up_by"]["hog_names"][0] == {"name": "worker", "involuntary_switches": 30_000, "threads": 300}
    assert b["tasks"][0]["comm"] == "kthread"  # per task, as before
    sentence = _blocker_sentence(b, doc["meta"]["duration_s"])
    assert sentence["tasks"] == ["worker ×300", "kthread[77]"] and not sentence["more_names"]
    assert sentence["held_up_by"][0] == "worker (30,000 preemptions in 300 threads)"
