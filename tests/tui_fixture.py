"""A recording for the TUI's tests, built by hand so that its screens are the same on every machine:
twelve one-second intervals of a pipe reader fed by a sleeper, two CPU hogs, a thread waiting on a
kernel mutex, CPU migrations, the budget stepping once, and a thread whose name is markup, an escape
sequence and a bidi override (it must show as those characters)."""

from __future__ import annotations

from stallscope.analyzer.sample import (
    LockDelta, OffcpuDelta, ProbeStatus, ProgramCost, TaskDelta, TaskId, TaskInfo, Tuning, TuningChange, WakerDelta,
)
from synthetic import INFOS, PIPE, SEC, SLEEP, TIMER, A, B, interval, kstack, meta, write_recording

HOSTILE = "[bold red]x[/][link=http://x]y\x1b[2J\u202e"
C = TaskId(102, 7 * SEC)  # the hostile name: waits on a kernel mutex
H1, H2 = TaskId(200, 8 * SEC), TaskId(201, 8 * SEC)  # CPU hogs
MUTEX = kstack(0x5000, "__schedule", "schedule", "schedule_preempt_disabled", "__mutex_lock.constprop.0",
               "cgroup_kn_lock_live", "cgroup_mkdir")
LCB_F_MUTEX = 1 << 5
INTERVALS = 12


def tui_meta():
    m = meta(cpus=2, overhead_budget_pct=1.0, stallscope_pid=999_999, cpu_runq_per_interval=True)
    probes = {"offcpu": ProbeStatus(True, "tp_btf"), "locks": ProbeStatus(True, "tp_btf"),
              "slab": ProbeStatus(False, "", "not requested (--probes +slab)"),
              "oncpu": ProbeStatus(False, "", "not requested (--probes +oncpu)")}
    from dataclasses import replace

    return replace(m, probes=probes)


def tui_intervals():
    ivs = []
    for i in range(INTERVALS):
        k = 1 + (i % 4)  # the pipe's wait grows and falls: sparklines have a shape
        first = i == 0
        ivs.append(interval(
            i,
            task_info=INFOS + (TaskInfo(C, 102, 1, HOSTILE), TaskInfo(H1, 200, 1, "hog"), TaskInfo(H2, 201, 1, "hog"))
            if first else (),
            stacks=(SLEEP, PIPE, TIMER, MUTEX) if first else (),
            tasks=(
                TaskDelta(A, offcpu_ns=600_000_000, offcpu_count=30, offcpu_max_ns=20_000_000 if first else 0,
                          voluntary_switches=30, runq_wait_ns=30_000_000, runq_count=30, migrations=2,
                          runq_hist=((20, 25), (22, 5)), run_ns=50_000_000),
                TaskDelta(B, offcpu_ns=100_000_000 * k, offcpu_count=10 * k, voluntary_switches=10 * k,
                          involuntary_switches=3, runq_wait_ns=20_000_000, runq_count=10 * k, migrations=1,
                          runq_hist=((18, 10 * k),), run_ns=80_000_000),
                TaskDelta(C, offcpu_ns=300_000_000, offcpu_count=6, voluntary_switches=6, runq_wait_ns=5_000_000,
                          runq_count=6, runq_hist=((19, 6),), run_ns=10_000_000),
                TaskDelta(H1, runq_wait_ns=400_000_000, runq_count=200, involuntary_switches=200,
                          runq_hist=((21, 200),), run_ns=600_000_000, migrations=3),
                TaskDelta(H2, runq_wait_ns=350_000_000, runq_count=180, involuntary_switches=180,
                          runq_hist=((21, 180),), run_ns=550_000_000),
            ),
            offcpu=(
                OffcpuDelta(A, 100, 1, SLEEP.id, 0, 30, 600_000_000, 20_000_000, hist=((24, 30),)),
                OffcpuDelta(B, 100, 1, PIPE.id, 0, 10 * k, 100_000_000 * k, 10_000_000, hist=((23, 10 * k),)),
                OffcpuDelta(C, 102, 2, MUTEX.id, 0, 6, 300_000_000, 60_000_000, hist=((25, 6),)),
            ),
            wakers=(
                WakerDelta(A, TaskId(0, 0), 0, "swapper/0", TIMER.id, 30, 600_000_000, True),
                WakerDelta(B, A, 100, "sleeper", 0x2, 10 * k, 100_000_000 * k, False),
            ),
            locks=(LockDelta(C, 102, 0xFFFF888100001000, MUTEX.id, LCB_F_MUTEX, 0, 6, 300_000_000,
                             60_000_000 if first else 0, 40_000_000 if first else 0, spin_ns=1_000_000,
                             sleep_ns=299_000_000, owner_pid=201, owner_comm="hog", symbol="cgroup_mutex",
                             blocked_ns=280_000_000, runnable_ns=19_000_000),),
            migrations=((0, 1, 3), (1, 0, 3)),
            # the tasks' run-queue waits (805 ms), by the CPU they ended on: the hogs' mostly on cpu1
            cpu_runq=((0, 55_000_000, 36 + 10 * k), (1, 750_000_000, 380)),
            programs=(ProgramCost("sched_switch", 2000, 2_000_000 + 100_000 * i, 0),),
            collector_cpu_ns=4_000_000,
            health={"waker_map_full": 2} if i == 7 else {},
            tuning=(TuningChange(5, Tuning(1, 50, 0, 49, 10_000_000, 50), "cost 2.1% over the 1% budget"),)
            if i == 5 else (),
        ))
    return ivs


def write_tui_recording(path) -> None:
    write_recording(path, tui_meta(), tui_intervals())
