"""stallscope's own set-up and teardown are not the machine's behaviour: the recording starts once
every probe is attached (the uprobe registrations that take traced processes' mmap_lock, the helpers
it runs, are before it) and the probes are detached only after the last drain (a detach waits for an
RCU grace period). What it does while recording is its cost, never a blocker, a lock or advice."""

from __future__ import annotations

from conftest import example, needs_bpf, record_command

from synthetic import kstack

from stallscope.analyzer.causes import default_table

# Kernel functions of a probe's set-up or teardown: none of them may hold a wait in the recording.
SETUP_TEARDOWN = ("uprobe_register", "uprobe_unregister", "perf_uprobe_destroy", "__free_event",
                  "perf_event_release_kernel", "bpf_link_release", "bpf_link_free", "tracepoint_probe_unregister",
                  "bpf_prog_load", "bpf_check")


def _stack(names):
    return kstack(1, *names)


def test_the_rcu_kthread_at_work_is_not_a_blocker_but_a_caller_of_synchronize_rcu_is():
    table = default_table()
    kthread = _stack(["__schedule", "schedule", "schedule_timeout", "synchronize_rcu_normal", "rcu_tasks_wait_gp",
                      "rcu_tasks_one_gp", "rcu_tasks_kthread", "kthread", "ret_from_fork"])
    c = table.classify(kthread, None, 0x2)
    assert c.name == "RCU kernel thread driving a grace period" and c.cls == "idle", c
    caller = _stack(["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "__wait_rcu_gp",
                     "synchronize_rcu_tasks_trace", "bpf_link_free", "bpf_link_release", "__fput", "task_work_run"])
    c = table.classify(caller, None, 0x2)
    assert c.name == "Waiting for an RCU grace period in bpf_link_free" and c.cls == "blocker", c


@needs_bpf
def test_set_up_and_teardown_stay_out_of_the_recording(tmp_path):
    from stallscope.analyzer.store import Recording

    # threads that wait on a mutex: the futex probe (uprobes in libc, detached at the end) has work
    doc, _, path = record_command(tmp_path, [example("mutex_convoy"), "-t", "3", "-n", "200"],
                                  "--probes", "default", "-i", "0.5")
    rec = Recording(str(path))
    try:
        meta = rec.meta
        intervals = list(rec.intervals())
        stacks = rec.stacks()
    finally:
        rec.close()
    # the first interval begins where the recording does, after the set-up's drain
    assert intervals[0].start_ns == meta.start_ns, (intervals[0].start_ns, meta.start_ns)
    assert [iv.index for iv in intervals] == list(range(len(intervals)))
    assert all(a.end_ns == b.start_ns for a, b in zip(intervals, intervals[1:]))
    # no wait and no lock contention of anyone in the probes' set-up or teardown
    ids = {o.kstack for iv in intervals for o in iv.offcpu} | {w.kstack for iv in intervals for w in iv.locks}
    held = [(s.id, f.symbol) for s in stacks.values() if s.id in ids for f in s.frames if f.symbol in SETUP_TEARDOWN]
    assert not held, held
    callers = [c["caller"] for lock in doc["locks"] for c in lock.get("callers", [])]
    assert not [c for c in callers if c.split("+")[0] in SETUP_TEARDOWN], callers
    # the grace-period kthreads its task storage keeps busy are never ranked for their waits on the
    # grace period (their run-queue waits are the CPU's, like anyone's)
    ranked = {x["comm"] for b in doc["blockers"] if b["class"] == "blocker" and b["cause"] != "Waiting for CPU"
              for x in b["tasks"]}
    assert not {c for c in ranked if c.startswith("rcu_")}, doc["blockers"]


def test_the_model_of_the_others_has_no_own_tasks_as_worked_out():
    """The advice reads the model restricted to every task but stallscope's own (analyzer/scope.py restrict): its own
    tasks are then known to be none, not worked out again through every process's tree, and that is what working
    them out gives; restricted to tasks that include its own, they are worked out."""
    from dataclasses import replace

    from stallscope.analyzer.memo import memoised
    from stallscope.analyzer.model import Model
    from stallscope.analyzer.sample import TaskDelta, TaskId, TaskInfo
    from stallscope.analyzer.scope import in_scope, own_tasks, restrict
    from synthetic import interval, meta

    me, helper, cmd, child, other = TaskId(20, 1), TaskId(21, 2), TaskId(30, 3), TaskId(31, 4), TaskId(40, 5)
    infos = {me: TaskInfo(me, 20, 1, "stallscope"), helper: TaskInfo(helper, 21, 20, "objdump"),
             cmd: TaskInfo(cmd, 30, 20, "app"), child: TaskInfo(child, 31, 30, "worker"),
             other: TaskInfo(other, 40, 1, "daemon")}
    iv = interval(0, task_info=tuple(infos.values()), tasks=tuple(TaskDelta(t, run_ns=1000) for t in infos))
    model = Model.from_intervals(meta(stallscope_pid=20, command={"pid": 30}), [iv], infos, {})
    assert own_tasks(model) == {me, helper}
    others = restrict(model, in_scope(model, None))
    assert memoised(own_tasks, others) == frozenset()  # known, not worked out
    assert own_tasks(replace(others)) == frozenset()  # a model of the same tasks, worked out
    everyone = restrict(model, set(infos))
    assert memoised(own_tasks, everyone) is None
    assert own_tasks(everyone) == {me, helper}
