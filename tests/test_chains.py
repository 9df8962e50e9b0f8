"""Wait chains: a waiter's time followed through who woke it to its root."""

from __future__ import annotations

import pytest

from conftest import example, needs_bpf, record_command
from stallscope.analyzer.chains import root_table
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import OffcpuDelta, TaskDelta, TaskId, TaskInfo, WaitLink, WakerDelta
from synthetic import interval, kstack, meta

APP, HOLDER, KWORKER = TaskId(10, 1), TaskId(11, 1), TaskId(12, 1)
FUTEX = 202 | 1 << 10  # bpf/sched.h: context syscall, futex
FDATASYNC = 75 | 1 << 10
LOCK = kstack(0x100, "__schedule", "schedule", "futex_wait_queue", "futex_wait", "do_futex")
SYNC = kstack(0x200, "__schedule", "schedule", "jbd2_log_wait_commit", "ext4_sync_file", "do_fsync")
INFOS = (TaskInfo(APP, 10, 1, "app"), TaskInfo(HOLDER, 10, 1, "app"), TaskInfo(KWORKER, 2, 2, "kworker/0:1"))


def _model(wakers, offcpu=None) -> Model:
    iv = interval(0, task_info=INFOS, stacks=(LOCK, SYNC), tasks=(
        TaskDelta(APP, offcpu_ns=1_000_000_000), TaskDelta(HOLDER, offcpu_ns=800_000_000, run_ns=100_000_000)),
        offcpu=offcpu or (OffcpuDelta(APP, 10, 1, LOCK.id, 0, 100, 1_000_000_000, why=FUTEX, weighted_ns=1_000_000_000),
                          OffcpuDelta(HOLDER, 10, 2, SYNC.id, 0, 100, 800_000_000, why=FDATASYNC,
                                      weighted_ns=800_000_000)),
        wakers=wakers)
    return Model.from_intervals(meta(), [iv], {i.task: i for i in INFOS}, {LOCK.id: LOCK, SYNC.id: SYNC})


def test_a_waiter_explained_by_its_wakers_blocked_time_runnable_time_and_running():
    """The holder woke the waiter; of the waiter's second, the holder was blocked in fdatasync for
    0.7 s and waited for a CPU for 0.1 s: the rest it ran."""
    w = WakerDelta(APP, HOLDER, 10, "app", 0, 100, 1_000_000_000, link=WaitLink(0, 2, FDATASYNC),
                   weighted_ns=1_000_000_000, link_blocked_ns=700_000_000, link_runq_ns=100_000_000,
                   wakee=WaitLink(0, 1, FUTEX))
    roots = {r.name: r for r in root_table(_model((w,))).by_cause["Userspace lock contention"]}
    assert abs(roots["fsync() on a file"].total_ns - 700_000_000) < 1000
    assert abs(roots["Waiting for CPU"].total_ns - 100_000_000) < 1000
    assert abs(roots["app[11] on a CPU"].total_ns - 200_000_000) < 1000
    assert roots["fsync() on a file"].chain == ("Userspace lock contention (app[10])", "fsync() on a file (app[11])")


def test_a_wait_ended_by_an_interrupt_or_with_no_waker_is_its_own_root():
    irq = WakerDelta(APP, TaskId(0, 0), 0, "swapper/0", 0, 100, 1_000_000_000, True, wakee=WaitLink(0, 1, FUTEX))
    for wakers in ((irq,), ()):
        roots = root_table(_model(wakers)).by_cause["Userspace lock contention"]
        assert [r.name for r in roots] == ["Userspace lock contention"]


def test_a_holder_that_sleeps_is_the_root_but_a_waker_idle_for_work_is_not():
    """The holder slept (nanosleep) while the waiter waited: the sleep is idle for the holder (it
    chose it) and the waiter's root. A kworker that waited for work before waking the waiter is no
    root: the wait was for what it waited on."""
    nap = kstack(0x300, "__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep", "__x64_sys_clock_nanosleep")
    idle = kstack(0x400, "__schedule", "schedule", "worker_thread", "kthread", "ret_from_fork")
    iv = interval(0, task_info=INFOS, stacks=(LOCK, nap, idle), tasks=(
        TaskDelta(APP, offcpu_ns=2_000_000_000), TaskDelta(HOLDER, offcpu_ns=900_000_000),
        TaskDelta(KWORKER, offcpu_ns=900_000_000)),
        offcpu=(OffcpuDelta(APP, 10, 1, LOCK.id, 0, 100, 2_000_000_000, why=FUTEX, weighted_ns=2_000_000_000),
                OffcpuDelta(HOLDER, 10, 1, nap.id, 0, 100, 900_000_000, weighted_ns=900_000_000),
                OffcpuDelta(KWORKER, 2, 0x402, idle.id, 0, 100, 900_000_000, weighted_ns=900_000_000)),
        wakers=(WakerDelta(APP, HOLDER, 10, "app", 0, 50, 1_000_000_000, link=WaitLink(0, 1, 0),
                           weighted_ns=1_000_000_000, link_blocked_ns=900_000_000, wakee=WaitLink(0, 1, FUTEX)),
                WakerDelta(APP, KWORKER, 2, "kworker/0:1", 0, 50, 1_000_000_000, link=WaitLink(0, 0x402, 0),
                           weighted_ns=1_000_000_000, link_blocked_ns=900_000_000, wakee=WaitLink(0, 1, FUTEX))))
    model = Model.from_intervals(meta(), [iv], {i.task: i for i in INFOS},
                                 {x.id: x for x in (LOCK, nap, idle)})
    roots = {r.name: r for r in root_table(model).by_cause["Userspace lock contention"]}
    assert abs(roots["Application requested delay"].total_ns - 900_000_000) < 1000, roots
    assert roots["Application requested delay"].cls == "idle"
    assert roots["Application requested delay"].chain == ("Userspace lock contention (app[10])",
                                                          "Application requested delay (app[11])")
    assert abs(roots["Userspace lock contention"].total_ns - 900_000_000) < 1000, roots  # the kworker's half
    assert "Kernel thread idle" not in roots


def test_threads_handing_a_lock_to_each_other_share_out_the_loop():
    """A woken by B, B by A, both blocked waiting for each other half the time, the rest running: the
    loop's time goes where the rest goes (each running), none of it stays with the lock."""
    offcpu = (OffcpuDelta(APP, 10, 1, LOCK.id, 0, 10, 1_000_000_000, why=FUTEX, weighted_ns=1_000_000_000),
              OffcpuDelta(HOLDER, 10, 1, LOCK.id, 0, 10, 1_000_000_000, why=FUTEX, weighted_ns=1_000_000_000))
    a = WakerDelta(APP, HOLDER, 10, "app", 0, 10, 1_000_000_000, link=WaitLink(0, 1, FUTEX),
                   weighted_ns=1_000_000_000, link_blocked_ns=500_000_000, wakee=WaitLink(0, 1, FUTEX))
    b = WakerDelta(HOLDER, APP, 10, "app", 0, 10, 1_000_000_000, link=WaitLink(0, 1, FUTEX),
                   weighted_ns=1_000_000_000, link_blocked_ns=500_000_000, wakee=WaitLink(0, 1, FUTEX))
    roots = {r.name: r.total_ns for r in root_table(_model((a, b), offcpu)).all}
    assert "Userspace lock contention" not in roots, roots
    assert abs(sum(roots.values()) - 2_000_000_000) < 1000


@needs_bpf
def test_a_waiter_on_a_mutex_held_across_fdatasync_has_the_fsync_as_its_root(tmp_path):
    """examples/fsync_chain: the holder fdatasync()s while it holds the mutex the waiters take. At default
    settings, on a quiet machine the waiters' lock contention comes down first to the fsync (the holder's
    own time on a CPU and in the run queue follow); on a busy one, to waiting for CPUs (the holder's, and
    that of the worker that completes its sync)."""
    # the holder's own sleep in the sync, as stallscope measured it, against the holder's: every wait of the
    # holder's in the sync is charged to the fsync (they are one stratum, all drawn ones the fsync's), and their
    # sum came 4-16% under the holder's figure (its time in the call less its CPU time and schedstat's run_delay
    # there) in seventeen runs on 2026-12-01, quiet, on this code and the code before it alike, and 18% under in a
    # whole suite's run; never over. Held to that: 25% under at most, 5% over; a second run before failing
    def near(ours: int, theirs: int) -> bool:
        return 0.75 * theirs <= ours <= 1.05 * theirs

    for attempt in range(2):
        run = tmp_path / str(attempt)
        run.mkdir()
        doc, truth, path = record_command(run, [example("fsync_chain"), "-n", "300", "-f", str(tmp_path / "data")],
                                          defaults=True)
        holder = next(t for t in truth if t["role"] == "holder")
        ours = next(t for t in doc["tasks"] if t["pid"] == holder["tid"])
        slept = sum(c["total_ns"] for c in ours["causes"] if c["cause"] == "fsync() on a file")
        if near(slept, holder["extra"]["slept_ns"]):
            break
    lock = next(b for b in doc["blockers"] if b["cause"] == "Userspace lock contention")
    waiters = {t["tid"] for t in truth if t["role"] == "waiter"}
    assert {t["pid"] for t in lock["tasks"]} >= waiters
    # How much of the waiters' waits the holder spent asleep in fdatasync(), as the threads measured it (each
    # wait's overlap with the holder's call, scaled by the call's time asleep: less its CPU time and its
    # run-queue wait there). Not the holder's own share of its holding: the waiters' waits sit at the end of
    # each holding (they come back from a 1 ms pause while the holder holds), where the holder's last sleep,
    # its wakeup and its reads after the call are: on a disk that syncs in a millisecond the two can differ.
    waiting = [t for t in truth if t["role"] == "waiter"]
    blocked = sum(t["blocked_ns"] for t in waiting)
    asleep = sum(t["extra"]["in_sync_slept_ns"] for t in waiting) / blocked
    # ... and how much of its holding the holder waited for a CPU (schedstat's run_delay while holding)
    busy = holder["extra"]["runq_held_ns"] / holder["extra"]["held_ns"]
    assert near(slept, holder["extra"]["slept_ns"]), (slept, holder["extra"])
    roots = [r["root"] for r in lock["roots"]]
    seen = (f"waiters' waits {blocked / 1e6:.0f} ms, {asleep:.2f} of them the holder asleep in the sync; "
            f"holder waited for a CPU {busy:.3f} of its holding; lock's roots: "
            + "; ".join(f"{r['root']} {r['total_ns'] / lock['total_ns']:.2f} ({' > '.join(r['chain'])})"
                        for r in lock["roots"]))
    fsync = next((r for r in lock["roots"] if r["root"] == "fsync() on a file"), None)
    assert fsync is not None, seen
    assert fsync["chain"][-1].startswith("fsync() on a file (holder["), seen
    if busy >= 0.25:
        # A busy machine (the holder waited for a CPU for a quarter of its holding or more): waiting for CPUs
        # leads. The waiters' waits cluster at the end of each holding, where the holder, woken from its sync,
        # waits for a CPU; and the sync itself waited for the worker completing it, waiting for a CPU too (the
        # chain follows it there): under two CPU hogs "Waiting for CPU" took 86-91% of the lock wait in five
        # runs while the holder slept in the sync for 14-63% of its holding.
        assert roots[0] == "Waiting for CPU", seen
    else:
        # the fsync's part of the lock wait against the waiters' own measure: 0.48-0.88 against 0.52-0.89 on
        # a disk here, its writes throttled from 1,000 to 10,000 a second and not
        assert fsync["total_ns"] >= 0.5 * asleep * lock["total_ns"], seen
        if asleep >= 0.5:  # the holder asleep in the sync for most of the waits: the fsync is among the
            # largest parts (first on a quiet machine; a CPU hog's worker waits can put "Waiting for CPU"
            # just ahead: 38% against 35%)
            assert "fsync() on a file" in roots[:2] and fsync["total_ns"] >= 0.3 * lock["total_ns"], seen
        else:
            assert "holder[" in lock["roots"][0]["chain"][-1], seen
    # the waiters' time in the lock, as they measured it, against what the probe charged them
    measured = blocked
    ours = sum(c["total_ns"] for t in doc["tasks"] if t["pid"] in waiters for c in t["causes"]
               if c["cause"] == "Userspace lock contention")
    assert 0.7 * measured <= ours <= 1.3 * measured, (ours, measured)


def test_a_chain_worked_out_once_for_many_waiters_comes_to_what_it_comes_to_alone(monkeypatch):
    """Chains through the same threads, loops among them included: an explanation kept for its depth
    and reused below other chains gives the same roots, shares and paths as each worked out anew."""
    import random

    from stallscope.analyzer import chains

    rng = random.Random(7)
    tasks = [TaskId(100 + i, 1) for i in range(7)]
    infos = tuple(TaskInfo(t, 100, 1, f"t{i}") for i, t in enumerate(tasks))
    strata = ((LOCK, FUTEX), (SYNC, FDATASYNC))
    for _model_no in range(20):
        offcpu, wakers = [], []
        for t in tasks:
            for stack, why in strata:
                offcpu.append(OffcpuDelta(t, 100, 1 if why == FUTEX else 2, stack.id, 0, 10, 500_000_000, why=why,
                                          weighted_ns=500_000_000))
        for _ in range(rng.randrange(10, 40)):
            wakee, waker = rng.sample(tasks, 2)
            _stack, wakee_why = rng.choice(strata)
            _stack, link_why = rng.choice(strata)
            blocked = rng.randrange(0, 900_000_000)
            wakers.append(WakerDelta(wakee, waker, 100, "t", 0, 5, 1_000_000_000,
                                     link=WaitLink(0, 1 if link_why == FUTEX else 2, link_why),
                                     weighted_ns=1_000_000_000, link_blocked_ns=blocked,
                                     link_runq_ns=rng.randrange(0, 1_000_000_000 - blocked),
                                     wakee=WaitLink(0, 1 if wakee_why == FUTEX else 2, wakee_why)))
        iv = interval(0, task_info=infos, stacks=(LOCK, SYNC), offcpu=tuple(offcpu), wakers=tuple(wakers),
                      tasks=tuple(TaskDelta(t, offcpu_ns=1_000_000_000, run_ns=200_000_000) for t in tasks))
        model = Model.from_intervals(meta(), [iv], {i.task: i for i in infos}, {LOCK.id: LOCK, SYNC.id: SYNC})
        kept = chains._Chains(model, None)
        for t in tasks:
            for cause in ("Userspace lock contention", "fsync() on a file"):
                kept.explain(t, cause)
        assert kept.deep  # explanations were kept and met again
        memoised = repr(root_table(model))
        monkeypatch.setattr(chains, "_MET_LIMIT", 0)  # nothing kept: every chain worked out anew
        assert repr(root_table(model)) == memoised
        monkeypatch.undo()


def _convoy(n: int) -> Model:
    """n threads on one mutex, each woken by every other, each blocked on the mutex most of the time it
    woke another (sysbench threads --thread-locks=1)."""
    tasks = [TaskId(200 + i, 1) for i in range(n)]
    infos = tuple(TaskInfo(t, 200, 1, "convoy") for t in tasks)
    offcpu = tuple(OffcpuDelta(t, 200, 1, LOCK.id, 0, 100, 800_000_000, why=FUTEX, weighted_ns=800_000_000)
                   for t in tasks)
    wakers = tuple(WakerDelta(wakee, waker, 200, "convoy", 0, 5, 50_000_000, link=WaitLink(0, 1, FUTEX),
                              weighted_ns=50_000_000, link_blocked_ns=40_000_000, link_runq_ns=2_000_000,
                              wakee=WaitLink(0, 1, FUTEX))
                   for wakee in tasks for waker in tasks if waker != wakee)
    iv = interval(0, task_info=infos, stacks=(LOCK,), offcpu=offcpu, wakers=wakers,
                  tasks=tuple(TaskDelta(t, offcpu_ns=800_000_000, run_ns=200_000_000) for t in tasks))
    return Model.from_intervals(meta(), [iv], {i.task: i for i in infos}, {LOCK.id: LOCK})


def test_chains_that_fan_out_too_widely_are_followed_less_deep_and_still_add_up():
    """16 threads handing a mutex around: four links deep would be millions of chains (a 16-thread sysbench
    recording took 33 s); the table stops a link short of where a depth costs more than CHAIN_WORK, says
    so, and its roots still hold all the waiting time."""
    model = _convoy(16)
    table = root_table(model)
    assert 1 <= table.depth < 4
    total = sum(r.total_ns for r in table.all)
    assert abs(total - sum(t.offcpu_ns for t in model.tasks.values())) < 1000
    assert {r.name for r in table.all} >= {"convoy on a CPU", "Waiting for CPU", "Userspace lock contention"}
    # the page and the screen say how deep the chains went
    from stallscope import reports
    from stallscope.analyzer.chains import depth_note
    from stallscope.analyzer.timeline import Snapshot
    from stallscope.tui.detail import blocker_detail

    note = depth_note(table.depth)
    assert note.startswith(f"chains followed {table.depth} link") and depth_note(4) == ""
    assert f"Root causes ({note})" in reports.render(reports.build(model))
    snap = Snapshot(model)
    lock = next(b for b in snap.ranked if b.cause == "Userspace lock contention")
    assert note in blocker_detail(snap, lock).plain


def test_a_table_followed_less_deep_is_the_table_of_that_depth(monkeypatch):
    """Where the full depth fits the budget it is used; where it does not, the deepest that fits: the same
    table as one made at that depth alone."""
    from stallscope.analyzer import chains

    model = _convoy(5)
    assert root_table(model).depth == 4
    monkeypatch.setattr(chains, "CHAIN_WORK", 200)
    limited = root_table(model)
    assert 1 <= limited.depth < 4
    monkeypatch.setattr(chains, "CHAIN_WORK", 10**9)
    monkeypatch.setattr(chains, "MAX_DEPTH", limited.depth)
    alone = root_table(model)
    assert (alone.all, alone.by_cause) == (limited.all, limited.by_cause)


@pytest.mark.parametrize("work", [30, 200, 1_000, 5_000, 50_000])
def test_the_depth_kept_is_the_deepest_that_takes_no_more_than_the_work_allowed(monkeypatch, work):
    """Tried from the deepest down, the depth kept is the one a try of each depth alone finds: the deepest within
    CHAIN_WORK (one link whatever it takes)."""
    from stallscope.analyzer import chains
    from stallscope.analyzer.attribution import attribute
    from stallscope.analyzer.causes import CPU, IDLE

    model = _convoy(8)
    monkeypatch.setattr(chains, "CHAIN_WORK", work)
    waiting = [(p.task, p.cause.name) for p in attribute(model, None) if p.cause.cls not in (IDLE, CPU)]

    def fits(depth: int) -> bool:
        c = chains._Chains(model, None, depth, work if depth > 1 else None)
        try:
            for key in waiting:
                c.explain(*key)
        except chains._TooDeep:
            return False
        return True

    assert root_table(model).depth == max(d for d in range(1, chains.MAX_DEPTH + 1) if fits(d))
