"""The futex group's ways into the futex system calls: each records the same waits, the cheapest the
kernel allows is used, and the other system calls run no BPF under the tracepoint one."""

from __future__ import annotations

import ctypes
import os
import threading
import time

import pytest

from conftest import needs_bpf
from stallscope.bpf import abi, futex_collector, libbpf
from stallscope.bpf.futex_collector import MECHANISMS, PROGRAMS, FutexCollector
from stallscope.bpf.libbpf import BpfError

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_L = ctypes.c_long
WAIT_NS = 20_000_000


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


def _timed_out_waits(word: ctypes.c_uint32, n: int) -> tuple[int, int]:
    """n FUTEX_WAITs of 20 ms that time out, in a thread of our own: (its tid, the time it measured)."""
    out = {}

    def run():
        out["tid"] = threading.get_native_id()
        t0 = time.monotonic_ns()
        for _ in range(n):
            _libc.syscall(_L(202), _L(ctypes.addressof(word)), _L(0 | 128), _L(0),
                          ctypes.byref(_Timespec(0, WAIT_NS)))
        out["elapsed_ns"] = time.monotonic_ns() - t0

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out["tid"], out["elapsed_ns"]


def _collector(mechanisms=MECHANISMS) -> FutexCollector:
    from stallscope.analyzer.symbols import Symbolizer

    return FutexCollector(Symbolizer(), targ_tgid=os.getpid(), mechanisms=mechanisms)


def _run_cnt(c: FutexCollector, name: str) -> int:
    return c.obj.program(name).stats().run_cnt


@needs_bpf
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_each_mechanism_times_a_futex_wait_as_long_as_the_waiter_measures_it(mechanism):
    c = _collector((mechanism,))
    status = c.start()
    try:
        assert status.enabled, status.reason
        assert status.mechanism in (mechanism, f"{mechanism}+uprobe")
        word = ctypes.c_uint32(0)
        tid, elapsed = _timed_out_waits(word, 3)
        waits = [w for w in c.drain(set()).records["futex"] if w.uaddr == ctypes.addressof(word)]
    finally:
        c.close()
    assert {w.task.pid for w in waits} == {tid}
    assert {w.op for w in waits} == {abi.FUTEX_WAIT}
    assert sum(w.count for w in waits) == 3
    total = sum(w.total_ns for w in waits)
    assert 3 * WAIT_NS <= total <= elapsed, (total, elapsed)


@needs_bpf
def test_other_system_calls_run_no_bpf_under_the_tracepoints_or_the_scheduler_but_do_under_tp_btf():
    """200,000 getppid() calls of ours: the tracepoint programs run only for the machine's futex calls
    meanwhile, the scheduler's for its context switches, the tp_btf ones for every one of ours too."""
    calls = 200_000
    runs = {}
    stats = libbpf.RunTimeStats()  # run counts are kept only while statistics are on
    assert stats.fd >= 0, stats.error
    for mechanism in MECHANISMS:
        c = _collector((mechanism,))
        try:
            assert c.start().enabled
            enter = PROGRAMS[mechanism][0]
            before = _run_cnt(c, enter)
            for _ in range(calls):
                os.getppid()
            runs[mechanism] = _run_cnt(c, enter) - before
        finally:
            c.close()
    stats.close()
    assert runs["tp_btf"] >= calls
    assert runs["tracepoint"] < calls // 2 and runs["sched_switch"] < calls // 2, runs


@needs_bpf
def test_without_the_syscall_tracepoints_the_group_falls_back_to_tp_btf_and_says_why(monkeypatch):
    def missing(category, names):
        raise BpfError("no syscalls:sys_enter_futex tracepoint (CONFIG_FTRACE_SYSCALLS off?)", 2)

    monkeypatch.setattr(futex_collector, "tracepoint_ids", missing)
    c = _collector(("tracepoint", "tp_btf"))  # the syscall hooks, where the scheduler's is not wanted
    status = c.start()
    try:
        assert status.enabled
        assert status.mechanism.split("+")[0] == "tp_btf"
        assert "tracepoint: no syscalls:sys_enter_futex tracepoint" in status.reason
        assert "tp_btf instead (two programs on every system call)" in status.reason
        word = ctypes.c_uint32(0)
        _timed_out_waits(word, 1)
        assert sum(w.count for w in c.drain(set()).records["futex"] if w.uaddr == ctypes.addressof(word)) == 1
    finally:
        c.close()


@needs_bpf
def test_a_group_with_no_mechanism_left_is_off_with_every_reason(monkeypatch):
    monkeypatch.setattr(futex_collector, "tracepoint_ids",
                        lambda category, names: (_ for _ in ()).throw(BpfError("no tracefs", 2)))
    c = _collector(("tracepoint",))
    try:
        status = c.start()
    finally:
        c.close()
    assert not status.enabled and status.reason.startswith("tracepoint: no tracefs")


@needs_bpf
def test_tracepoint_ids_are_read_in_a_private_mount_where_tracefs_is_not_mounted(monkeypatch):
    names = ["sys_enter_futex", "sys_exit_futex", "sys_enter_no_such_call"]
    mounted = libbpf.tracepoint_ids("syscalls", names)
    assert set(mounted) == {"sys_enter_futex", "sys_exit_futex"}
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    monkeypatch.setattr(libbpf, "TRACEFS_DIRS", ("/nonexistent/tracing",))
    assert libbpf.tracepoint_ids("syscalls", names) == mounted
    with open("/proc/self/mountinfo") as f:
        assert f.read() == mounts  # nothing mounted for the system
