"""Synthetic recordings for tests that need no kernel: intervals built by hand."""

from __future__ import annotations

import os

from stallscope.analyzer.sample import (
    Interval, OffcpuDelta, ProbeStatus, RecordingMeta, Stack, TaskDelta, TaskId, TaskInfo, WakerDelta,
)
from stallscope.analyzer.sample import Frame

SEC = 1_000_000_000


def kframe(name: str, off: int = 0x10) -> Frame:
    return Frame(0xFFFFFFFF81000000 + hash(name) % 0x100000, name, off, "kernel", None, None, "kernel")


def kstack(sid: int, *names: str) -> Stack:
    return Stack(sid, "kernel", tuple(kframe(n) for n in names))


def meta(cpus: int = 2, **options) -> RecordingMeta:
    return RecordingMeta(format_version=1, stallscope_version="test", host="h", kernel="6.18", cpus=cpus,
                         start_wall=1_700_000_000.0, start_ns=0, interval_s=1.0,
                         probes={"offcpu": ProbeStatus(True, "tp_btf")}, options=options)


def interval(index: int, **kw) -> Interval:
    return Interval(index=index, start_ns=index * SEC, end_ns=(index + 1) * SEC, wall_start=1_700_000_000.0 + index,
                    switches=kw.pop("switches", 1000), **kw)


A = TaskId(100, 5 * SEC)
B = TaskId(101, 6 * SEC)
SLEEP = kstack(0x1000, "__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep", "__x64_sys_clock_nanosleep")
PIPE = kstack(0x2000, "__schedule", "schedule", "anon_pipe_read", "vfs_read", "ksys_read")
TIMER = kstack(0x3000, "try_to_wake_up", "hrtimer_wakeup", "__hrtimer_run_queues", "hrtimer_interrupt")
INFOS = (TaskInfo(A, 100, 1, "sleeper"), TaskInfo(B, 100, 1, "reader"))


def two_interval_recording():
    """Two tasks over two seconds: A sleeps (timer wakeups), B reads a pipe (woken by A)."""
    i0 = interval(0, task_info=INFOS, stacks=(SLEEP, PIPE, TIMER), tasks=(
        TaskDelta(A, offcpu_ns=800_000_000, offcpu_count=40, offcpu_max_ns=20_000_000, voluntary_switches=40,
                  runq_wait_ns=1000, migrations=1, runq_hist=((12, 40),)),
        TaskDelta(B, offcpu_ns=500_000_000, offcpu_count=50, offcpu_max_ns=10_000_000, voluntary_switches=50,
                  involuntary_switches=2),
    ), offcpu=(
        OffcpuDelta(A, 100, 1, SLEEP.id, 0, 40, 800_000_000, 20_000_000),
        OffcpuDelta(B, 100, 1, PIPE.id, 0, 50, 500_000_000, 10_000_000),
    ), wakers=(
        WakerDelta(A, TaskId(0, 0), 0, "swapper/0", TIMER.id, 40, 800_000_000, True),
        WakerDelta(B, A, 100, "sleeper", 0x2, 50, 500_000_000, False),
    ), migrations=((0, 1, 1),))
    i1 = interval(1, tasks=(TaskDelta(A, offcpu_ns=900_000_000, offcpu_count=45, voluntary_switches=45),), offcpu=(
        OffcpuDelta(A, 100, 1, SLEEP.id, 0, 45, 900_000_000, 21_000_000),))
    return meta(), [i0, i1]


def write_recording(path, m, intervals) -> None:
    """A recording file holding these intervals, as `stallscope record` writes it."""
    from stallscope.analyzer.store import RecordingWriter

    if os.path.exists(path):  # a test writing a path again means to replace it (the writer never would)
        os.unlink(path)
    w = RecordingWriter(str(path), m)
    for iv in intervals:
        w.append(iv)
    w.close()
