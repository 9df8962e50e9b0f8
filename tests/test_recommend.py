"""Recommendations on synthetic recordings: each rule fires when it should and is silent when it should;
apply changes the right task only, and undo restores it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import replace

import pytest

from conftest import example, needs_bpf, record_command, run_stallscope
from stallscope.analyzer.model import Model
from stallscope.analyzer.export import to_json_doc
from stallscope.analyzer.recommend import NOT_HELPFUL, RECOMMENDED, Thresholds, recommend
from stallscope.analyzer.units import fmt_ns
from stallscope.tui.recommend import recommendations_text
from stallscope.analyzer.sample import (
    LockDelta, OffcpuDelta, ProbeStatus, SlabCache, SlabDelta, TaskDelta, TaskId, TaskInfo, Throttled,
)
from synthetic import SEC, interval, kstack, meta, write_recording

APP, HOG = TaskId(1000, 7 * SEC), TaskId(1001, 7 * SEC)
INFOS = (TaskInfo(APP, 1000, 1, "latency"), TaskInfo(HOG, 1001, 1, "hog"))


def _topology(n_cpus: int, llc_size: int) -> dict:
    cpus = {str(c): {"core": c, "package": 0, "node": 0, "llc": list(range(c - c % llc_size, c - c % llc_size + llc_size)),
                     "llc_level": 3, "siblings": [c]} for c in range(n_cpus)}
    return {"topology": {"online": list(range(n_cpus)), "cpus": cpus},
            "cpu_busy_pct": {str(c): 90.0 - c for c in range(n_cpus)}, "sched_knobs": {}}


def _model(ivs, machine=None, cpus=2, options=None, probes=None) -> Model:
    m = replace(meta(cpus=cpus, **(options or {})), machine=machine or {})
    if probes:
        m = replace(m, probes={**m.probes, **probes})
    stacks = {s.id: s for iv in ivs for s in iv.stacks}
    caches = {c.addr: c for iv in ivs for c in iv.slab_caches}
    return Model.from_intervals(m, ivs, {i.task: i for iv in ivs for i in iv.task_info}, stacks, slab_caches=caches)


def _kinds(model, **th):
    return [(r.kind, r.status) for r in recommend(model, Thresholds(**th))]


# ---- pin ----------------------------------------------------------------------------------------

def test_pin_fires_for_a_ping_ponging_thread_and_names_the_least_busy_cache_domain():
    iv = interval(0, task_info=INFOS, tasks=(TaskDelta(APP, migrations=400, voluntary_switches=500),))
    recs = [r for r in recommend(_model([iv], _topology(8, 4), cpus=8)) if r.kind == "pin"]
    assert len(recs) == 1 and recs[0].status == RECOMMENDED and recs[0].target == "latency[1000]"
    # cpu7 is the least busy; it shares its last-level cache with 4-7
    assert recs[0].command == "taskset -pc 4,5,6,7 1000"
    assert recs[0].action == {"type": "affinity", "tid": 1000, "start_time_ns": APP.start_time_ns,
                              "comm": "latency", "cpus": [4, 5, 6, 7]}
    assert any("400 CPU migrations" in e for e in recs[0].evidence)


def test_pin_says_it_cannot_help_on_a_small_machine_with_one_cache():
    iv = interval(0, task_info=INFOS, tasks=(TaskDelta(APP, migrations=400),))
    recs = [r for r in recommend(_model([iv], _topology(2, 2))) if r.kind == "pin"]
    assert recs and recs[0].status == NOT_HELPFUL and "share one last-level cache" in recs[0].finding
    assert not recs[0].runtime


def test_pin_on_a_small_machine_with_one_cache_is_one_finding_for_every_thread_that_moves():
    """The machine's finding, not a thread's: eight movers (sysbench's workers) make one entry, not five
    alike, naming the busiest and how many more, each thread's numbers (up to the rule's five) in its evidence."""
    workers = [TaskId(2000 + i, 7 * SEC) for i in range(8)]
    infos = INFOS + tuple(TaskInfo(w, 2000, 1, "sysbench") for w in workers)
    iv = interval(0, task_info=infos, tasks=tuple(TaskDelta(w, migrations=45 + 3 * i) for i, w in enumerate(workers)))
    recs = [r for r in recommend(_model([iv], _topology(2, 2))) if r.kind == "pin"]
    assert len(recs) == 1 and recs[0].status == NOT_HELPFUL and not recs[0].runtime
    assert recs[0].target == "sysbench[2007]"
    assert recs[0].finding.startswith("sysbench[2007] and 7 more threads migrate 45-66 times a second, but pinning "
                                      "cannot help much here: all 2 CPUs share one last-level cache"), recs[0].finding
    assert [e.split(":")[0] for e in recs[0].evidence[:5]] == [f"sysbench[{2007 - i}]" for i in range(5)]
    assert "3 more threads migrate" in recs[0].evidence[5]
    assert recs[0].facts[0].value == 66


def test_pin_is_silent_for_a_thread_that_rarely_moves():
    iv = interval(0, task_info=INFOS, tasks=(TaskDelta(APP, migrations=5),))
    assert ("pin", RECOMMENDED) not in _kinds(_model([iv], _topology(8, 4), cpus=8))


# ---- priority -----------------------------------------------------------------------------------

def _starved(runq_ns: int, p99_slot: int):
    """The latency thread runs 100 us at each of 200 wakeups; the hog runs 900 ms of the second, 3 ms a time."""
    return interval(0, task_info=INFOS, tasks=(
        TaskDelta(APP, runq_wait_ns=runq_ns, runq_count=200, voluntary_switches=200, runq_hist=((p99_slot, 200),),
                  run_ns=20_000_000),
        TaskDelta(HOG, involuntary_switches=300, run_ns=900_000_000)))


def test_priority_fires_for_a_latency_thread_behind_a_cpu_hog_and_names_both():
    recs = [r for r in recommend(_model([_starved(400_000_000, 22)])) if r.kind == "priority"]
    assert len(recs) == 1
    r = recs[0]
    assert r.target == "latency[1000]" and r.command == "renice -n -5 -p 1000"
    assert "hog[1001]" in " ".join(r.evidence) and "hog[1001]" in r.risk
    assert r.action["type"] == "nice" and r.action["nice"] == -5


def test_priority_is_silent_when_the_thread_gets_its_cpu_quickly():
    assert not [r for r in recommend(_model([_starved(1_000_000, 12)])) if r.kind == "priority"]


# ---- locks, I/O, knobs ---------------------------------------------------------------------------

def _lock_model(total_ns: int):
    stack = kstack(0x40, "rwsem_down_write_slowpath", "down_write_killable", "vm_mmap_pgoff")
    return _model([interval(0, task_info=INFOS, stacks=(stack,), tasks=(TaskDelta(APP, offcpu_ns=1),), locks=(
        LockDelta(APP, 1000, 0xffff888000001000, 0x40, 4, 1, 100, total_ns, 5_000_000, 10_000, 0, total_ns),))])


def test_lock_rule_gives_mmap_lock_advice_when_the_lock_is_hot():
    recs = [r for r in recommend(_lock_model(200_000_000)) if r.kind == "lock"]
    assert recs and recs[0].target.startswith("mmap_lock") and "munmap" in recs[0].finding
    assert "MALLOC_MMAP_THRESHOLD_" in recs[0].command


def test_lock_rule_is_silent_for_a_cold_lock():
    assert not [r for r in recommend(_lock_model(1_000_000)) if r.kind == "lock"]


def _uprobe_lock_model(uprobe_ns: int, exit_ns: int):
    """A process's mmap_lock read at uprobe hits (find_active_uprobe_rcu falls back to it when its lock-free
    lookup fails) and at thread exits, while it is written by mmap()."""
    hit = kstack(0x70, "rwsem_down_read_slowpath", "down_read", "find_active_uprobe_rcu", "uprobe_notify_resume",
                 "irqentry_exit_to_user_mode", "asm_exc_int3")
    gone = kstack(0x71, "rwsem_down_read_slowpath", "down_read", "do_exit", "__x64_sys_exit")
    mm = 0xffff888000001000
    return _model([interval(0, task_info=INFOS, stacks=(hit, gone), tasks=(TaskDelta(APP, offcpu_ns=1),), locks=(
        LockDelta(APP, 1000, mm, 0x70, 2, 1, 100, uprobe_ns, 5_000_000, 10_000, 0, uprobe_ns),
        LockDelta(APP, 1000, mm, 0x71, 2, 1, 100, exit_ns, 5_000_000, 10_000, 0, exit_ns)))])


def test_a_lock_waited_for_at_uprobe_hits_says_that_part_is_the_tracings_and_advises_on_the_rest():
    """stress-ng --pthread traced: 80% of its mmap_lock read waits were uprobe hits (stallscope's futex group's
    uprobes on the C library's lock calls), which an untraced run does not have; the finding says so, its call
    site for advice is the program's own, and a lock whose waits are all but the tracing's gets no advice."""
    rec = next(r for r in recommend(_uprobe_lock_model(400_000_000, 100_000_000)) if r.kind == "lock")
    assert "80% of its waiting (400.00ms) is uprobe hits looking up their probe (find_active_uprobe_rcu+0x10), " \
           "the tracing's own cost" in rec.finding, rec.finding
    assert "--probes -futex" in rec.finding and "munmap" in rec.finding
    assert not [r for r in recommend(_uprobe_lock_model(400_000_000, 2_000_000)) if r.kind == "lock"]
    assert "uprobe" not in next(r for r in recommend(_lock_model(200_000_000)) if r.kind == "lock").finding


def test_a_uprobes_register_rwsem_waited_for_at_its_hits_gets_no_advice():
    """A probe being removed holds its register_rwsem while every hit waits in handler_chain (sysbench threads 8 as
    the budget removes the lock-call uprobes): the tracing's lock, nothing the program could change."""
    hits = kstack(0x72, "rwsem_down_read_slowpath", "down_read", "handler_chain", "uprobe_notify_resume",
                  "irqentry_exit_to_user_mode", "asm_exc_int3")
    probe = 0xffff888000002020
    model = _model([interval(0, task_info=INFOS, stacks=(hits,), tasks=(TaskDelta(APP, offcpu_ns=1),), locks=(
        LockDelta(APP, 1000, probe, 0x72, 2, 2, 100, 400_000_000, 8_000_000, 10_000, 0, 400_000_000),))])
    assert not [r for r in recommend(model) if r.kind == "lock"]


def test_a_futex_hash_buckets_lock_is_advised_as_the_futex_words_consequence_or_the_private_hash():
    """The bucket lock of a process's private futex hash (a kmalloc-cg object on 6.16+), contended at futex_wake:
    not "shorten the critical section there" (kernel code), but the futex words' own contention, or more buckets."""
    wake = kstack(0x73, "native_queued_spin_lock_slowpath", "_raw_spin_lock", "futex_wake", "do_futex")
    model = _model([interval(0, task_info=INFOS, stacks=(wake,), tasks=(TaskDelta(APP, offcpu_ns=1),), locks=(
        LockDelta(APP, 1000, 0xffff888000003040, 0x73, 1, 2, 5000, 300_000_000, 50_000, 300, 300_000_000, 0,
                  cache="kmalloc-cg-2k"),))])
    (rec,) = [r for r in recommend(model) if r.kind == "lock"]
    assert rec.target == "&futex_hash_bucket->lock (in a kmalloc-cg-2k object)", rec.target
    assert "PR_FUTEX_HASH_SET_SLOTS" in rec.finding and "shorten the critical section" not in rec.finding


def _rq_lock_model(yield_ns: int, wake_ns: int):
    """A run queue's lock taken by schedule() called from sched_yield() (its contention point is __schedule,
    as a sleep's is) and by wakeups."""
    yields = kstack(0x60, "_raw_spin_lock", "raw_spin_rq_lock_nested", "__schedule", "schedule",
                    "__x64_sys_sched_yield", "do_syscall_64")
    wakes = kstack(0x61, "_raw_spin_lock", "raw_spin_rq_lock_nested", "try_to_wake_up", "wake_up_q", "futex_wake")
    rq = 0xffff888627c2ba40
    return _model([interval(0, task_info=INFOS, stacks=(yields, wakes), locks=(
        LockDelta(APP, 1000, rq, 0x60, 1, 0, 100, yield_ns, 100_000, 1_000, yield_ns, 0),
        LockDelta(HOG, 1001, rq, 0x61, 1, 0, 100, wake_ns, 100_000, 1_000, wake_ns, 0)))])


def test_the_run_queue_lock_taken_by_sched_yield_gets_the_yield_advice_from_its_stacks():
    """The contention points alone say __schedule and try_to_wake_up; the stacks say who called schedule()."""
    from stallscope.analyzer.locks import SCHED_YIELD, drawn_share, lock_stats

    model = _rq_lock_model(300_000_000, 500_000_000)
    row = next(s for s in lock_stats(model) if s.name == "rq->__lock")
    assert row.callers[0].point.startswith("try_to_wake_up") and drawn_share(model, row, SCHED_YIELD) == 0.375
    rec = next(r for r in recommend(model) if r.kind == "lock")
    assert rec.finding.startswith("rq->__lock is contended: the run-queue lock, taken by sched_yield() in 38% of its "
                                  "drawn waits: threads that spin on sched_yield()"), rec.finding
    # a sliver of yields: wakeups across CPUs are the story
    rec = next(r for r in recommend(_rq_lock_model(50_000_000, 500_000_000)) if r.kind == "lock")
    assert "wakeups and migrations across CPUs" in rec.finding and "sched_yield" not in rec.finding


def _io_model(total_ns: int):
    io = kstack(0x50, "__schedule", "io_schedule", "folio_wait_bit_common", "filemap_fault", "handle_mm_fault")
    return _model([interval(0, task_info=INFOS, stacks=(io,), tasks=(TaskDelta(APP, offcpu_ns=total_ns),),
                            offcpu=(OffcpuDelta(APP, 1000, 2, 0x50, 0, 30, total_ns, total_ns // 10),))])


def test_io_rule_fires_on_io_waits_and_is_silent_without():
    recs = [r for r in recommend(_io_model(300_000_000)) if r.kind == "io"]
    assert recs and recs[0].command.startswith("iostat -x") and "Waiting for I/O" in recs[0].finding
    assert not [r for r in recommend(_io_model(5_000_000)) if r.kind == "io"]


def _lock_and_io_intervals(lock_ns: int, io_ns: int):
    """mmap_lock waited on lock_ns and the device io_ns, in one interval of one second."""
    lock = kstack(0x40, "rwsem_down_write_slowpath", "down_write_killable", "vm_mmap_pgoff")
    io = kstack(0x50, "__schedule", "io_schedule", "folio_wait_bit_common", "filemap_fault", "handle_mm_fault")
    return [interval(0, task_info=INFOS, stacks=(lock, io), tasks=(TaskDelta(APP, offcpu_ns=io_ns),),
                     offcpu=(OffcpuDelta(APP, 1000, 2, 0x50, 0, 30, io_ns, io_ns // 10),),
                     locks=(LockDelta(APP, 1000, 0xffff888000001000, 0x40, 4, 1, 100, lock_ns, 5_000_000,
                                      10_000, 0, lock_ns),))]


def _lock_and_io_model(lock_ns: int, io_ns: int):
    return _model(_lock_and_io_intervals(lock_ns, io_ns))


def test_fixes_are_ranked_by_the_waiting_each_is_aimed_at_and_numbered_so_everywhere():
    """sysbench fileio's fsync waits (1.59 s a second) had come after a lock of 31 ms a second, by kind."""
    for lock_ns, io_ns, first in ((100_000_000, 900_000_000, "io"), (900_000_000, 300_000_000, "lock")):
        recs = recommend(_lock_and_io_model(lock_ns, io_ns))
        assert [r.kind for r in recs] == [first, "lock" if first == "io" else "io"]
        waits = [r.wait_ns_per_s for r in recs]
        assert waits == sorted(waits, reverse=True)
        assert {r.kind: round(r.wait_ns_per_s / 1e6) for r in recs} == {"lock": lock_ns // 1e6, "io": io_ns // 1e6}
        doc = to_json_doc(_lock_and_io_model(lock_ns, io_ns))
        assert [(d["number"], d["kind"], d["wait_ns_per_s"]) for d in doc["recommendations"]] == [
            (n, r.kind, round(r.wait_ns_per_s)) for n, r in enumerate(recs, 1)]
        text = recommendations_text(recs)
        assert text.index(f"[1] {first}:") < text.index("[2] ")
        assert f"aimed at: {fmt_ns(recs[0].wait_ns_per_s)} of waiting per second" in text
    # the report's cards, in the same order, each with what it is aimed at
    from stallscope.reports.build import build
    from stallscope.reports.render import render

    ivs = _lock_and_io_intervals(100_000_000, 900_000_000)
    html = render(build(_model(ivs), ivs))
    cards = [html.index(f'id="fix-{n}"') for n in (1, 2)]
    assert cards[0] < html.index("<dd>900.00ms of waiting per second</dd>") < cards[1]
    assert cards[1] < html.index("<dd>100.00ms of waiting per second</dd>")


def test_a_fix_whose_gain_is_not_a_measured_wait_comes_after_those_that_are():
    ping = TaskDelta(APP, run_ns=400_000_000, migrations=200, voluntary_switches=300)
    lock = kstack(0x40, "rwsem_down_write_slowpath", "down_write_killable", "vm_mmap_pgoff")
    model = _model([interval(0, task_info=INFOS, stacks=(lock,), tasks=(ping,), locks=(
        LockDelta(APP, 1000, 0xffff888000001000, 0x40, 4, 1, 100, 60_000_000, 5_000_000, 10_000, 0, 60_000_000),))],
        machine=_topology(16, 8))
    recs = [r for r in recommend(model) if r.status == RECOMMENDED]
    assert [(r.kind, r.wait_ns_per_s is None) for r in recs] == [("lock", False), ("pin", True)]


def _queued_model(migrations: int = 0, cpu0_busy: float = 0.05, kept: bool = True):
    """Three hogs of one process waiting in cpu1's run queue (2.1 tasks waiting on average) for one second."""
    hogs = [TaskId(2000 + i, SEC) for i in range(3)]
    iv = interval(0, task_info=tuple(TaskInfo(h, 2000, 1, "burner") for h in hogs),
                  tasks=tuple(TaskDelta(h, runq_wait_ns=700_000_000, runq_count=500, run_ns=330_000_000,
                                        involuntary_switches=480, migrations=migrations) for h in hogs),
                  cpu_time=((0, int(cpu0_busy * SEC), SEC), (1, 950_000_000, SEC)),
                  cpu_runq=((0, 10_000_000, 100), (1, 2_100_000_000, 1500)))
    options = {"cpu_time_per_interval": True, "cpu_runq_per_interval": kept}
    return _model([iv], _topology(2, 2), options=options)


def test_threads_held_to_a_busy_cpu_while_another_idles_get_their_affinity_widened():
    recs = [r for r in recommend(_queued_model()) if r.kind == "affinity"]
    assert [r.target for r in recs] == ["burner[2000]", "burner[2001]", "burner[2002]"]
    r = recs[0]
    assert r.status == RECOMMENDED and r.runtime and r.command.startswith("taskset -pc 0,1 2000")
    assert r.action == {"type": "affinity", "tid": 2000, "start_time_ns": SEC, "comm": "burner", "cpus": [0, 1]}
    assert "cpu1's run queue held 2.10 tasks waiting" in r.evidence[0] and "cpu0 was 5% busy" in r.evidence[0]
    assert round(r.wait_ns_per_s) == 700_000_000
    # 2.1 tasks waiting on two CPUs, but not for want of CPUs: the machine is not called CPU-bound, as it is with
    # both CPUs busy
    assert "cpu" not in {k for k, _ in _kinds(_queued_model())}
    assert ("cpu", RECOMMENDED) in _kinds(_queued_model(cpu0_busy=0.9))
    # threads the balancer moved, no idle CPU, or a recording without per-CPU run queues: nothing to say
    for model in (_queued_model(migrations=4), _queued_model(cpu0_busy=0.9), _queued_model(kept=False)):
        assert not [r for r in recommend(model) if r.kind == "affinity"]


def _rcu_model(waiter: str, expedited: str | None = "0", normal: str = "0", total_ns: int = 300_000_000):
    """A task waiting in synchronize_rcu() (or in the expedited flavour), and the recorded RCU knobs."""
    if waiter == "expedited":
        frames = ("exp_funnel_lock", "synchronize_rcu_expedited", "namespace_unlock", "free_nsproxy", "do_exit")
    else:
        frames = ("__wait_rcu_gp", "synchronize_rcu_normal", "synchronize_rcu", waiter, "do_syscall_64")
    stack = kstack(0x60, *frames)
    knobs = {} if expedited is None else {
        "rcu_expedited": {"path": "/sys/kernel/rcu_expedited", "value": expedited, "stable": True},
        "rcu_normal": {"path": "/sys/kernel/rcu_normal", "value": normal, "stable": True}}
    return _model([interval(0, task_info=INFOS, stacks=(stack,), tasks=(TaskDelta(APP, offcpu_ns=total_ns),),
                            offcpu=(OffcpuDelta(APP, 1000, 2, 0x60, 0, 30, total_ns, total_ns // 10),))],
                  {**_topology(2, 2), "rcu_knobs": knobs})


def test_rcu_rule_expedites_normal_grace_periods_only_where_the_knob_would_shorten_them():
    recs = [r for r in recommend(_rcu_model("__x64_sys_membarrier")) if r.kind == "rcu"]
    assert len(recs) == 1 and recs[0].command == "echo 1 > /sys/kernel/rcu_expedited" and recs[0].runtime, recs
    assert "in __x64_sys_membarrier" in recs[0].finding and recs[0].action == {
        "type": "write", "knob": "rcu_expedited", "path": "/sys/kernel/rcu_expedited", "value": "1"}
    for model in (_rcu_model("__x64_sys_membarrier", expedited="1"),  # already expedited
                  _rcu_model("__x64_sys_membarrier", normal="1"),  # rcu_normal forbids expedited ones
                  _rcu_model("__x64_sys_membarrier", expedited=None),  # recorded before the knobs were read
                  _rcu_model("expedited"),  # a wait the knob does not shorten
                  _rcu_model("__x64_sys_membarrier", total_ns=5_000_000)):  # 5 ms a second: not worth a knob
        assert not [r for r in recommend(model) if r.kind == "rcu"]


def test_sched_knob_only_where_the_knob_exists_and_says_debugfs_is_not_stable():
    iv = interval(0, task_info=INFOS, migrations=((0, 1, 5000), (1, 0, 5000)))
    knob = {"migration_cost_ns": {"path": "/sys/kernel/debug/sched/migration_cost_ns", "value": "500000",
                                  "stable": False}}
    with_knob = [r for r in recommend(_model([iv], {**_topology(2, 2), "sched_knobs": knob})) if r.kind == "sched_knob"]
    assert with_knob and "not a stable interface" in with_knob[0].risk
    assert with_knob[0].command == "echo 1000000 > /sys/kernel/debug/sched/migration_cost_ns"
    assert not [r for r in recommend(_model([iv], _topology(2, 2))) if r.kind == "sched_knob"]


# ---- SLUB ---------------------------------------------------------------------------------------

KMALLOC_512 = SlabCache(0xFFFF888100000000, "kmalloc-512", 512, 512, 1, 16, 0, 0, 52, (0xFFFF888100001000,),
                        (":0000512", "skbuff_fclone_cache"), (("cpu_partial", 52), ("min_partial", 5)))


def _slab_model(cpus: int, switch_pct: int, lock_ns: int):
    boot = {"min_objects": 4 * (cpus.bit_length() + 1), "min_objects_default": 4 * (cpus.bit_length() + 1),
            "max_order": 3, "min_order": 0, "present_cpus": cpus, "cmdline": {}}
    allocs = 100_000
    iv = interval(0, task_info=INFOS, tasks=(TaskDelta(APP, offcpu_ns=1),), slab_caches=(KMALLOC_512,), slab=(
        SlabDelta(KMALLOC_512.addr, 1000, False, allocs, 0, allocs, 0, allocs * 400, allocs * 512, 0,
                  allocs * switch_pct // 100, allocs),), locks=(
        LockDelta(APP, 1000, KMALLOC_512.nodes[0] + 24, 0, 1, 2, 500, lock_ns, 100_000, 1_000, lock_ns, 0,
                  cache="kmem_cache_node"),))
    return _model([iv], cpus=cpus, options={"slab": {"boot": boot, "list_lock_offset": 24}},
                  probes={"slab": ProbeStatus(True, "tp_btf")})


def test_slub_rule_fires_with_slab_evidence_and_proposes_more_than_the_effective_value():
    recs = [r for r in recommend(_slab_model(32, 20, 50_000_000)) if r.kind == "slub"]
    boot = next(r for r in recs if r.target == "boot")
    assert "slub_min_objects=64" in boot.command and not boot.runtime  # 2 x 32 CPUs, above the default 28
    assert any("kmalloc-512" in e and "20.0%" in e for e in boot.evidence)
    partial = next(r for r in recs if r.target == "kmalloc-512")
    assert partial.command == "echo 104 > /sys/kernel/slab/kmalloc-512/cpu_partial"
    assert "skbuff_fclone_cache" in partial.risk and partial.action["affects"] == ["kmalloc-512", "skbuff_fclone_cache"]


def test_slub_rule_never_proposes_a_value_at_or_below_the_kernels_default():
    """2 CPUs: the default 4 * (fls(2) + 1) = 12 is already above 2 x CPUs = 4."""
    recs = [r for r in recommend(_slab_model(2, 20, 50_000_000)) if r.kind == "slub"]
    assert not [r for r in recs if r.target == "boot"]


def test_slub_rule_is_silent_without_slab_evidence():
    assert not [r for r in recommend(_slab_model(32, 2, 50_000_000)) if r.kind == "slub"]
    assert not [r for r in recommend(_slab_model(32, 20, 0)) if r.kind == "slub"]


@needs_bpf
def test_slub_rule_is_silent_on_a_2_cpu_hackbench_recording(tmp_path, perf_available):
    doc, _, _ = record_command(tmp_path, [perf_available, "bench", "sched", "messaging", "-g", "2", "-l", "200"],
                               "--probes", "+slab")
    assert doc["slab"], "the slab group should have recorded the caches"
    assert not [r for r in doc["recommendations"] if r["kind"] == "slub" and r["target"] == "boot"]


# ---- apply --------------------------------------------------------------------------------------

def _start_time_ns(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return int(text[text.rfind(")") + 2:].split()[19]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@pytest.fixture
def victim():
    proc = subprocess.Popen(["sleep", "60"])
    time.sleep(0.1)
    yield proc
    proc.kill()
    proc.wait()


def _victim_recording(tmp_path, pid: int, start_ns: int, comm: str = "sleep"):
    tid = TaskId(pid, start_ns)
    iv = interval(0, task_info=(TaskInfo(tid, pid, 1, comm), TaskInfo(HOG, 1001, 1, "hog")), tasks=(
        TaskDelta(tid, runq_wait_ns=400_000_000, runq_count=200, voluntary_switches=200, runq_hist=((22, 200),),
                  run_ns=20_000_000),
        TaskDelta(HOG, involuntary_switches=300, run_ns=900_000_000)))
    path = tmp_path / "victim.stall"
    write_recording(path, meta(), [iv])
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root")
def test_apply_raises_the_priority_of_the_recorded_task_and_undo_restores_it(tmp_path, victim):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    path = _victim_recording(tmp_path, victim.pid, _start_time_ns(victim.pid))
    assert os.getpriority(os.PRIO_PROCESS, victim.pid) == 0
    out = run_stallscope("apply", str(path), "1", "--yes", env=env).stdout
    assert "renice -n -5" in out and os.getpriority(os.PRIO_PROCESS, victim.pid) == -5
    undo = json.loads((tmp_path / "state" / "stallscope" / "undo.jsonl").read_text().splitlines()[-1])
    assert undo["before"] == {"nice": 0}
    run_stallscope("apply", "--undo", env=env)
    assert os.getpriority(os.PRIO_PROCESS, victim.pid) == 0


def test_apply_refuses_a_reused_thread_id_and_without_a_terminal_asks_for_yes(tmp_path, victim):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    wrong = _victim_recording(tmp_path, victim.pid, _start_time_ns(victim.pid) - 50 * SEC)
    proc = run_stallscope("apply", str(wrong), "1", "--yes", check=False, env=env)
    assert proc.returncode == 2 and "not the task in the recording" in proc.stderr
    right = _victim_recording(tmp_path, victim.pid, _start_time_ns(victim.pid))
    proc = run_stallscope("apply", str(right), "1", check=False, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "--yes" in proc.stderr
    assert os.getpriority(os.PRIO_PROCESS, victim.pid) == 0


def test_apply_refuses_a_kernel_thread(tmp_path):
    kthreadd_start = _start_time_ns(2)
    with open("/proc/2/comm") as f:
        comm = f.read().strip()
    path = _victim_recording(tmp_path, 2, kthreadd_start, comm)
    recs = json.loads(run_stallscope("export", str(path)).stdout)["recommendations"]
    # the rules leave kernel threads out; apply itself checks PF_KTHREAD as well
    assert not [r for r in recs if r["target"].endswith("[2]")]
    from stallscope import apply as applier
    from stallscope.errors import StallscopeError
    with pytest.raises(StallscopeError, match="kernel thread"):
        applier.check_same_task({"tid": 2, "start_time_ns": kthreadd_start, "comm": comm})


def _futex_model(timed_out: bool):
    """40 waits on one futex: a contended lock's, or a poll's, each a timed wait ended by its timer."""
    from stallscope.analyzer.sample import FutexDelta

    return _model([interval(0, task_info=INFOS, tasks=(TaskDelta(APP, offcpu_ns=900_000_000),), futex=(
        FutexDelta(APP, 1000, 0x7F0000001000, 0, 0, 0x401234, "take_lock+0x30", "lock", 40, 900_000_000,
                   50_000_000, 1_000_000, flags=1 if timed_out else 0, blocked_ns=890_000_000, runnable_ns=10_000_000,
                   woken_irq=40 if timed_out else 0),))])


def test_lock_rule_names_the_function_for_a_contended_futex_but_not_for_a_timeout_poll():
    recs = [r for r in recommend(_futex_model(False)) if r.kind == "lock"]
    assert recs and recs[0].target.startswith("lock (")
    # the futex named once, then where it is taken
    assert recs[0].finding == (f"{recs[0].target} is contended: a user-space lock, taken at take_lock+0x30; shorten "
                               "the critical section or shard the lock (one per CPU or per object)"), recs[0].finding
    assert not [r for r in recommend(_futex_model(True)) if r.kind == "lock"]


def test_pin_on_a_big_machine_with_one_cache_names_one_core_and_without_topology_says_nothing():
    iv = interval(0, task_info=INFOS, tasks=(TaskDelta(APP, migrations=400),))
    recs = [r for r in recommend(_model([iv], _topology(8, 8), cpus=8)) if r.kind == "pin"]
    assert recs and recs[0].status == RECOMMENDED and recs[0].command == "taskset -pc 7 1000"
    assert not [r for r in recommend(_model([iv], {}, cpus=8)) if r.kind == "pin"]


def test_a_real_time_or_background_thread_is_told_why_a_nice_value_will_not_help():
    for policy, words in ((1, "SCHED_FIFO thread and still waits"), (5, "runs as SCHED_IDLE")):
        iv = _starved(400_000_000, 22)
        iv = replace(iv, task_info=(TaskInfo(APP, 1000, 1, "latency", policy=policy), INFOS[1]))
        recs = [r for r in recommend(_model([iv])) if r.kind == "priority"]
        assert recs and recs[0].status == NOT_HELPFUL and words in recs[0].finding, recs
        assert "renice" not in recs[0].command


def test_threads_that_all_run_and_wait_alike_get_no_renice_but_the_machine_is_called_cpu_bound():
    """hackbench's way: 40 threads of one program, each running 1 ms in bursts of 100 us and waiting
    alike; the machine had 20 of them waiting for its 2 CPUs on average."""
    tasks = tuple(TaskDelta(TaskId(2000 + i, SEC), runq_wait_ns=500_000_000, runq_count=100,
                            voluntary_switches=100, runq_hist=((22, 100),), run_ns=10_000_000) for i in range(40))
    infos = tuple(TaskInfo(t.task, 2000, 1, "sched-messaging") for t in tasks)
    recs = recommend(_model([interval(0, task_info=infos, tasks=tasks)]))
    assert not [r for r in recs if r.kind == "priority"]
    cpu = [r for r in recs if r.kind == "cpu"]
    assert len(cpu) == 1 and cpu[0].finding == (
        "the machine is CPU-bound: 10.0 tasks waiting per CPU, 100% of the waiting sched-messaging's, whose threads "
        "wait alike: a priority for one of them would move the wait to the others"), cpu
    assert "sched-messaging" in " ".join(cpu[0].evidence)


def test_a_cpu_bound_machine_with_a_latency_thread_behind_its_hogs_points_at_the_priority_fix():
    """stress-ng's matrix workers on every CPU and cyclictest among them: the machine is CPU-bound and its
    workers wait alike, but cyclictest does not wait as they do; the CPU finding does not say it does."""
    hogs = [TaskId(3000 + i, SEC) for i in range(4)]
    iv = _starved(400_000_000, 22)
    iv = replace(iv, task_info=iv.task_info + tuple(TaskInfo(h, 3000, 1, "matrix") for h in hogs),
                 tasks=iv.tasks + tuple(TaskDelta(h, runq_wait_ns=600_000_000, runq_count=300, involuntary_switches=300,
                                                  run_ns=500_000_000) for h in hogs))
    recs = recommend(_model([iv]))
    assert [r.target for r in recs if r.kind == "priority" and r.status == RECOMMENDED] == ["latency[1000]"]
    cpu = next(r for r in recs if r.kind == "cpu")
    assert cpu.finding.startswith("the machine is CPU-bound: 1.4 tasks waiting per CPU, 86% of the waiting matrix's")
    assert cpu.finding.endswith("; a thread that wakes often and runs briefly behind them is another matter: see "
                                "the priority fixes"), cpu.finding


def test_a_lock_waited_on_mostly_for_a_cpu_says_so_and_one_with_no_name_or_call_site_gets_no_advice():
    stack = kstack(0x40, "rwsem_down_write_slowpath", "down_write_killable", "vm_mmap_pgoff")
    runnable = LockDelta(APP, 1000, 0xffff888000001000, 0x40, 4, 1, 100, 400_000_000, 5_000_000, 10_000, 0,
                         400_000_000, blocked_ns=100_000_000, runnable_ns=300_000_000)
    recs = [r for r in recommend(_model([interval(0, task_info=INFOS, stacks=(stack,), locks=(runnable,))]))
            if r.kind == "lock"]
    assert recs and "is for a CPU after the lock was handed over" in recs[0].finding
    assert any("woken and waiting for a CPU 300.00ms" in e for e in recs[0].evidence), recs[0].evidence
    nameless = LockDelta(APP, 1000, 0xffff888000002000, 5, 1, 0, 100, 400_000_000, 5_000_000, 10_000,
                         400_000_000, 0, blocked_ns=0, runnable_ns=0)  # a spin lock, never drawn for a stack
    assert not [r for r in recommend(_model([interval(0, task_info=INFOS, locks=(nameless,))])) if r.kind == "lock"]


@needs_bpf
def test_a_latency_thread_behind_equal_nice_cpu_hogs_gets_a_priority_fix_naming_them(tmp_path):
    """A thread that wakes every 5 ms for 100 us of work, beside four CPU burners at the same nice, on two
    CPUs, at default settings: it is advised (its wakeup-to-run latency is long against its work), the
    burners are named as what ran meanwhile, and none of them is advised."""
    script = (f"{example('cpu_burner')} -t 4 -m 2500 >/dev/null & "
              f"{example('sleeper')} -n 400 -m 5 -w 100; wait")
    doc, truth, _ = record_command(tmp_path, ["sh", "-c", script], defaults=True)
    tid = next(t["tid"] for t in truth if t["role"] == "sleeper")
    prio = [r for r in doc["recommendations"] if r["kind"] == "priority"]
    # the recording is the machine's: another thread the burners held up may be advised too (a process of the
    # machine's own, in the burners' terminal session, waited 1.15 s at p99 once), so the sleeper's is looked for
    ours = [r for r in prio if r["target"].endswith(f"[{tid}]")]
    assert ours, prio
    assert ours[0]["command"] == f"renice -n -5 -p {tid}" and "burner" in " ".join(ours[0]["evidence"]), ours
    burners = {t["pid"] for t in doc["tasks"] if t["comm"] == "burner"}
    assert not [r for r in prio if any(r["target"].endswith(f"[{b}]") for b in burners)]


@needs_bpf
def test_hackbench_threads_are_not_reniced_one_by_one(tmp_path):
    """perf bench sched messaging: hundreds of threads of one program that all wait alike. No thread is
    advised a priority; the machine is called CPU-bound."""
    doc, _, _ = record_command(tmp_path, ["perf", "bench", "sched", "messaging", "-g", "10", "-l", "100"],
                               defaults=True)
    kinds = [r["kind"] for r in doc["recommendations"]]
    assert "priority" not in kinds and "cpu" in kinds, [(r["kind"], r["target"]) for r in doc["recommendations"]]


def test_looking_for_cpu_hogs_costs_the_tasks_once_not_once_per_starved_thread(monkeypatch):
    """A 5-minute hackbench recording held 126,000 tasks, thousands of them starved and none a hog (all
    run briefly): each starved thread scanned every task for its hogs, and `export` had not finished
    after 10 CPU minutes. The busy threads are now found once."""
    import stallscope.analyzer.recommend as rec

    n = 2000
    tasks = tuple(TaskDelta(TaskId(3000 + i, SEC), runq_wait_ns=400_000_000, runq_count=200, voluntary_switches=200,
                            runq_hist=((22, 200),), run_ns=20_000_000) for i in range(n))
    infos = tuple(TaskInfo(t.task, 3000 + i, 1, f"worker-{i}") for i, t in enumerate(tasks))
    model = _model([interval(0, task_info=infos, tasks=tasks)])
    calls = []
    real = rec._is_kernel_thread
    monkeypatch.setattr(rec, "_is_kernel_thread", lambda t: calls.append(1) or real(t))
    assert not [r for r in recommend(model) if r.kind == "priority"]
    assert len(calls) <= 3 * n, len(calls)  # was n * n: every starved thread against every task


# ---- quota --------------------------------------------------------------------------------------

def _throttled(entries: list[dict], busy: float = 12.0):
    iv = interval(0, task_info=INFOS, tasks=(TaskDelta(APP, runq_wait_ns=900_000_000, runq_count=50, run_ns=100_000_000),))
    machine = {**_topology(2, 2), "cpu_busy_pct": {"0": busy, "1": busy}, "cpu_side": {"throttled": entries}}
    return [r for r in recommend(_model([iv], machine)) if r.kind == "quota"]


def test_a_cgroup_held_back_by_its_cpu_quota_is_told_so_with_the_command_for_its_hierarchy():
    """stress-ng's two CPU workers in a cgroup limited to 0.2 CPU: the CPUs 88% idle, its tasks wait for a CPU
    as if they were busy. The finding says the quota, not the CPUs; the command doubles the limit in the file
    of its hierarchy (v1's cpu.cfs_quota_us, v2's cpu.max), run by hand."""
    v1 = _throttled([{"cgroup": "/sys/fs/cgroup/cpu/ssthr", "nr_throttled": 9, "throttled_ns": 900_000_000,
                      "quota_us": 20_000, "period_us": 100_000}])
    assert len(v1) == 1 and v1[0].status == RECOMMENDED and not v1[0].runtime and v1[0].target == "/sys/fs/cgroup/cpu/ssthr"
    assert v1[0].finding == ("cgroup /sys/fs/cgroup/cpu/ssthr is held back by its CPU quota (0.20 CPU): throttled in "
                             "9 periods, 900.00ms of its run queues' time in 1.0 s, with the CPUs 88% idle; its tasks' "
                             "wait for a CPU is the quota's, not busy CPUs'"), v1[0].finding
    assert v1[0].command == "echo 40000 > /sys/fs/cgroup/cpu/ssthr/cpu.cfs_quota_us" and "cpu.shares" in v1[0].risk
    v2 = _throttled([{"cgroup": "/sys/fs/cgroup/app.slice", "nr_throttled": 9, "throttled_ns": 900_000_000,
                      "quota_us": 50_000, "period_us": 100_000}], busy=95.0)
    assert v2[0].command == "echo '100000 100000' > /sys/fs/cgroup/app.slice/cpu.max" and "cpu.weight" in v2[0].risk
    assert "idle" not in v2[0].finding  # busy CPUs: no claim that they sat idle
    # the limit gone by the recording's end: the finding stands, no command is guessed
    gone = _throttled([{"cgroup": "/sys/fs/cgroup/app.slice", "nr_throttled": 9, "throttled_ns": 900_000_000}])
    assert gone and gone[0].command == "" and "(0." not in gone[0].finding
    # throttled now and then (a tenth of the recording or less, or twice): no finding
    assert not _throttled([{"cgroup": "/sys/fs/cgroup/x", "nr_throttled": 9, "throttled_ns": 90_000_000}])
    assert not _throttled([{"cgroup": "/sys/fs/cgroup/x", "nr_throttled": 2, "throttled_ns": 900_000_000}])


def test_a_cgroup_name_from_the_recording_stays_one_word_in_the_quota_command():
    hostile = "/sys/fs/cgroup/x$(touch pwned);'\"y"
    rec = _throttled([{"cgroup": hostile, "nr_throttled": 9, "throttled_ns": 900_000_000, "quota_us": 10_000,
                       "period_us": 100_000}])[0]
    import shlex
    words = shlex.split(rec.command)
    assert words[:2] == ["echo", "20000 100000"] and words[-1] == f"{hostile}/cpu.max" and words[2] == ">"


def test_the_cpu_blocker_of_a_throttled_recording_names_the_quota_first_in_the_report_and_the_detail():
    """Two workers throttled by their group's quota are each other's 'hog' by their involuntary switches
    (throttling switches them out): the quota comes first among what held the CPU's waiters up."""
    from stallscope.analyzer.timeline import Snapshot
    from stallscope.reports.build import build
    from stallscope.tui.detail import blocker_detail

    workers = [TaskId(3000 + i, SEC) for i in range(2)]
    iv = interval(0, task_info=tuple(TaskInfo(w, 3000, 1, "stress-ng-cpu") for w in workers),
                  tasks=tuple(TaskDelta(w, runq_wait_ns=870_000_000, runq_count=12, involuntary_switches=12,
                                        run_ns=100_000_000) for w in workers))
    cg = "/sys/fs/cgroup/cpu/ssthr"
    machine = {**_topology(2, 2), "cpu_busy_pct": {"0": 12.0, "1": 12.0},
               "cpu_side": {"throttled": [{"cgroup": cg, "nr_throttled": 10, "throttled_ns": 1_740_000_000,
                                           "quota_us": 20_000, "period_us": 100_000}]}}
    model = _model([iv], machine)
    sentence = next(b for b in build(model, [iv])["page"]["summary"]["blockers"] if b["class"] == "cpu")
    assert sentence["held_up_by"] == [f"the CPU quota of {cg} (10 throttled periods)",
                                      "stress-ng-cpu (24 involuntary switches in 2 threads; throttled with them)"]
    snap = Snapshot(model)
    text = blocker_detail(snap, next(b for b in snap.ranked if b.cls == "cpu")).plain
    assert (f"the CPU quota of {cg} (its limit 0.20 CPU): throttled in 10 periods of the recording, 1.74s of its "
            "run queues' time") in text
    # no throttling: the hogs alone, as before
    calm = _model([iv], {**machine, "cpu_side": {"throttled": []}})
    assert not any("quota" in h for b in build(calm, [iv])["page"]["summary"]["blockers"] for h in b["held_up_by"])


def test_a_window_is_told_of_the_throttling_its_own_intervals_saw_not_the_recordings():
    """Where each interval says which cgroups a quota throttled in it (a live view's, a recording made since),
    a window reads its own: the CPU waits of a throttled second name the quota, with the window's periods and
    limit; a calm second of the same recording does not, whatever the recording's start and end saw."""
    from stallscope.analyzer.timeline import Snapshot
    from stallscope.tui.detail import blocker_detail

    workers = [TaskId(3000 + i, SEC) for i in range(2)]
    cg = "/sys/fs/cgroup/cpu/ssthr"
    infos = tuple(TaskInfo(w, 3000, 1, "stress-ng-cpu") for w in workers)
    busy = tuple(TaskDelta(w, runq_wait_ns=870_000_000, runq_count=12, involuntary_switches=12, run_ns=100_000_000)
                 for w in workers)
    throttled = interval(0, task_info=infos, tasks=busy,
                         throttled=(Throttled(cg, 6, 700_000_000, 20_000, 100_000), Throttled("/other", 1, 1000)))
    calm = interval(1, tasks=busy)
    # the recording's own figure (its start and end) says more: the window's is read instead
    machine = {**_topology(2, 2), "cpu_busy_pct": {"0": 12.0, "1": 12.0},
               "cpu_side": {"throttled": [{"cgroup": cg, "nr_throttled": 99, "throttled_ns": 9_000_000_000}]}}
    options = {"throttled_per_interval": True}
    model = _model([throttled], machine, options=options)
    assert [(t.cgroup, t.periods) for t in model.throttled] == [(cg, 6), ("/other", 1)]
    quota = [r for r in recommend(model) if r.kind == "quota"]
    assert len(quota) == 1 and "throttled in 6 periods" in quota[0].finding and "(0.20 CPU)" in quota[0].finding
    snap = Snapshot(model)
    text = blocker_detail(snap, next(b for b in snap.ranked if b.cls == "cpu")).plain
    assert f"the CPU quota of {cg} (its limit 0.20 CPU): throttled in 6 periods of the window, 700.00ms" in text
    # the workers preempted by the throttling are each other's 'hog' by their switches: said as throttled with them
    assert "throttled with them: stress-ng-cpu (24 involuntary switches in 2 threads" in text
    assert "ran instead: stress-ng-cpu" not in text
    # and the Blockers view says it above the ranking, where the wait for a CPU is ranked first
    from stallscope.tui.views import BlockersView

    summary = BlockersView().summary(snap, None).plain
    assert (f"CPU quota throttled {cg} (limit 0.20 CPU): 6.0 periods/s, 700.00ms/s; the wait for a CPU is the "
            "quota's (Fixes)") in summary
    assert not [r for r in recommend(_model([replace(calm, task_info=infos)], machine, options=options))
                if r.kind == "quota"]
    # two intervals: their periods and time summed, the limit the last read
    both = _model([throttled, interval(1, throttled=(Throttled(cg, 4, 300_000_000, 40_000, 100_000),))], machine,
                  options=options)
    assert both.throttled[0] == Throttled(cg, 10, 1_000_000_000, 40_000, 100_000)
    # a recording made before the intervals said it: the recording's figure, as before, over the recording's length
    old = [r for r in recommend(_model([throttled], machine)) if r.kind == "quota"]
    assert len(old) == 1 and "throttled in 99 periods" in old[0].finding
    before = _model([throttled], machine)
    before = replace(before, meta=replace(before.meta, end_ns=10 * SEC))
    assert "CPU quota throttled /sys/fs/cgroup/cpu/ssthr: 9.9 periods/s, 900.00ms/s" in \
        BlockersView().summary(Snapshot(before), None).plain


def test_apply_leaves_a_quota_to_the_user_and_says_why(tmp_path):
    """A run-time change, but one stallscope does not make: the limit may be a container's on purpose."""
    iv = interval(0, task_info=INFOS, tasks=(TaskDelta(APP, runq_wait_ns=900_000_000, runq_count=50),))
    machine = {**_topology(2, 2), "cpu_side": {"throttled": [
        {"cgroup": "/sys/fs/cgroup/app.slice", "nr_throttled": 9, "throttled_ns": 900_000_000, "quota_us": 20_000,
         "period_us": 100_000}]}}
    path = tmp_path / "quota.stall"
    write_recording(path, replace(meta(), machine=machine), [iv])
    recs = json.loads(run_stallscope("export", str(path)).stdout)["recommendations"]
    n = next(i for i, r in enumerate(recs, 1) if r["kind"] == "quota")
    proc = run_stallscope("apply", str(path), str(n), check=False, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "echo '40000 100000' > /sys/fs/cgroup/app.slice/cpu.max" in proc.stdout
    assert "not applied: this is a command stallscope does not run for you" in proc.stdout, proc.stdout


def test_throttling_figures_no_kernel_writes_make_no_quota_finding():
    """A damaged or edited recording's cpu_side: left out, never a traceback."""
    for entries in ([{"cgroup": "/x", "nr_throttled": "9", "throttled_ns": 900_000_000}],
                    [{"cgroup": 7, "nr_throttled": 9, "throttled_ns": 900_000_000}], ["x"], "x"):
        assert not _throttled(entries)


def _site_model(lock_flags=2, field="", wait_frame="some_fs_op", kind=0, cache="", frame="some_fs_op"):
    """One task's 300 ms of waits whose stack starts at `frame`+0x10 (walked at the switch-in: the lock's frames
    are scheduler text), and the contention tracepoints' record of a lock wanted at `wait_frame`+0x10."""
    wait = kstack(0x80, frame, "vfs_something", "do_syscall_64")
    lock = kstack(0x81, "rwsem_down_read_slowpath", "down_read", wait_frame, "vfs_something")
    return _model([interval(0, task_info=INFOS, stacks=(wait, lock), tasks=(TaskDelta(APP, offcpu_ns=300_000_000),),
                            offcpu=(OffcpuDelta(APP, 1000, 2, 0x80, 0, 30, 300_000_000, 20_000_000),),
                            locks=(LockDelta(APP, 1000, 0xffff888000002000, 0x81, lock_flags, kind, 30, 290_000_000,
                                             20_000_000, 1_000, 0, 290_000_000, cache=cache, field=field),))])


def test_an_unmatched_stack_that_starts_at_a_lock_tables_call_site_is_named_for_that_lock():
    """A stack walked at the switch-in starts at the lock's caller: where no rule names that caller, the wait is
    named for the sleeping lock the contention tracepoints saw wanted at the same call site (sym+0xoff), and
    `causes --unknown` still lists it with the rule that would name it without the lock probe."""
    from stallscope.analyzer.blockers import rank_blockers
    from stallscope.tui.causes import causes_text

    model = _site_model()
    top = rank_blockers(model)[0]
    assert (top.cause, top.total_ns, top.frame) == ("rwsem contention: some_fs_op", 300_000_000, "some_fs_op+0x10")
    text = causes_text(model, unknown=True)
    assert "1 cause(s) no rule matched" in text and "\nrwsem contention: some_fs_op  total 300.00ms" in text, text
    assert ("named from the lock table: its rwsem:R some_fs_op is contended at this same call site (some_fs_op+0x10); "
            'a rule in your cause table (docs/causes.md) with frames = ["some_fs_op"] and innermost = true names it '
            "without the lock probe") in text, text


def test_a_lock_named_by_its_struct_field_names_the_wait_as_the_cause_table_does():
    """An inode's i_rwsem is one cause however its waits were named (a rule or the lock table); other fields by
    their name, a plain one with its struct."""
    from stallscope.analyzer.blockers import rank_blockers

    for field, cause in (("ext4_inode_info.vfs_inode.i_rwsem", "rwsem contention: inode i_rwsem"),
                         ("shmem_inode_info.vfs_inode.i_data.i_mmap_rwsem", "rwsem contention: i_mmap_rwsem"),
                         ("anon_vma.rwsem", "rwsem contention: anon_vma->rwsem")):
        model = _site_model(field=field, kind=2, cache="some_cache")
        assert rank_blockers(model)[0].cause == cause, field


def test_a_wait_is_not_named_for_a_spin_lock_nor_for_a_lock_wanted_elsewhere():
    """A spinning lock's waiter never leaves its CPU for it; a lock wanted at another call site says nothing of
    this one: the stack keeps its frame's name."""
    from stallscope.analyzer.blockers import rank_blockers

    assert rank_blockers(_site_model(lock_flags=1))[0].cause == "some_fs_op"  # LCB_F_SPIN
    assert rank_blockers(_site_model(wait_frame="other_fs_op"))[0].cause == "some_fs_op"


def test_an_unless_lock_rule_names_its_call_site_unless_the_lock_table_saw_a_sleeping_lock_wanted_there():
    """swapoff() sleeps in wait_for_completion() right in __do_sys_swapoff, where it also takes swapon_mutex: the
    rule names the wait, but a mutex the contention tracepoints saw wanted at that same call site names it."""
    from stallscope.analyzer.blockers import rank_blockers

    swapoff = "swapoff(): waiting for the swap area's last users (an RCU callback)"
    model = _site_model(frame="__do_sys_swapoff", wait_frame="__do_sys_swapoff", kind=0)
    assert rank_blockers(model)[0].cause == "rwsem contention: __do_sys_swapoff"
    assert rank_blockers(_site_model(frame="__do_sys_swapoff", wait_frame="elsewhere"))[0].cause == swapoff
    assert rank_blockers(_site_model(frame="__do_sys_swapoff", lock_flags=1))[0].cause == swapoff  # a spin lock
    from stallscope.tui.causes import causes_text
    text = causes_text(model, unknown=True)
    assert f'without it, the rule "{swapoff}" names the wait' in text and "innermost = true" not in text, text
