"""A session's start-up: the kernel's tables read in a thread while the probes load (stallscope/warmup.py),
and the futex group's uprobe timing waiting for them. libbpf's debug lines, dropped in C so that start-up does
not wait for the interpreter once per line: tests/test_libbpf.py."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from stallscope.bpf import btf, futex_collector
from stallscope.bpf.futex_collector import FutexCollector, LockCallSites
from stallscope.bpf.libbpf import BpfError
from stallscope.warmup import KernelTables


class SlowSymbolizer:
    """Reads its 'kernel symbols' in 0.2 s, and says when and in which thread."""

    def __init__(self):
        self.read_in: list[str] = []
        self.done_at = 0.0

    def preload_kernel(self, data: bool = False) -> None:
        time.sleep(0.2)
        self.read_in.append(threading.current_thread().name)
        self.done_at = time.monotonic()


def test_the_tables_are_read_in_their_thread_and_wait_returns_once_they_are(monkeypatch):
    read = []
    monkeypatch.setattr("stallscope.warmup.running_kernel", lambda: read.append("btf"))
    sym = SlowSymbolizer()
    tables = KernelTables(sym, locks=True)
    t0 = time.monotonic()
    tables.start()
    assert time.monotonic() - t0 < 0.1  # start() does not read them
    tables.wait()
    assert sym.read_in == ["stallscope-tables"]
    assert read == ["btf"]
    assert time.monotonic() >= sym.done_at


def test_without_the_lock_probes_the_kernel_types_are_not_read(monkeypatch):
    read = []
    monkeypatch.setattr("stallscope.warmup.running_kernel", lambda: read.append("btf"))
    tables = KernelTables(SlowSymbolizer(), locks=False)
    tables.start()
    tables.wait()
    assert read == []


def test_wait_before_start_returns_at_once():
    KernelTables(SlowSymbolizer(), locks=False).wait()


def test_a_kernel_without_btf_is_said_when_a_lock_is_named_not_raised_in_the_thread(monkeypatch, tmp_path):
    missing = str(tmp_path / "vmlinux")
    with pytest.raises(btf.BtfError):
        btf.running_kernel(missing)
    with pytest.raises(btf.BtfError):  # kept, not read again
        btf.running_kernel(missing)


def test_the_running_kernels_types_are_parsed_once_per_process():
    try:
        first = btf.running_kernel()
    except btf.BtfError as exc:
        pytest.skip(f"this kernel has no BTF: {exc}")
    assert btf.running_kernel() is first


class _Prog:
    def attach_uprobe(self, *args, **kwargs):
        raise BpfError("not attached in this test", 1)


class _Obj:
    links: list = []

    def program(self, name):
        return _Prog()


def test_the_uprobe_timing_is_not_disturbed_by_a_thread_busy_in_python(monkeypatch):
    """The futex group times a uprobe trap with a loop of calls while the kernel's tables are parsed in another
    thread: the calls keep the interpreter's lock through each round, so that thread is not timed with them. With
    a probe that traps nothing, the trap measured is nothing, three times in a row (each call letting the lock go,
    a call of 0.2 us took 11-43 us beside such a thread: the difference of two rounds was that noise)."""
    import ctypes.util

    class Link:
        def destroy(self):
            pass

    class Prog:
        def attach_uprobe(self, *args, **kwargs):
            return Link()

    libc = ctypes.util.find_library("c")
    stop = threading.Event()

    def busy():
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:
        before = sys.getswitchinterval()
        traps = [futex_collector.measure_uprobe_trap(Prog(), libc, off=1) for _ in range(3)]
        assert sys.getswitchinterval() == before  # put back
    finally:
        stop.set()
        thread.join()
    assert all(t < 1000 for t in traps), traps


def test_the_uprobe_timing_does_not_wait_for_the_kernels_tables(monkeypatch):
    """The group's start measures the trap and attaches its uprobes without waiting for other threads."""
    order = []
    monkeypatch.setattr(futex_collector, "lock_call_sites",
                        lambda tgid: LockCallSites("/lib/libc.so.6", {0x100: 8}, "", "", 0x10))
    monkeypatch.setattr(futex_collector, "libc_of", lambda pid: "/lib/libc.so.6")
    monkeypatch.setattr(futex_collector, "measure_uprobe_trap", lambda *a, **k: order.append("timed") or 7000)
    c = FutexCollector(None)
    c._attach_lock_calls(_Obj())
    assert order == ["timed"]
    assert c.uprobe_trap_ns == 7000


def test_a_table_that_cannot_be_read_is_left_for_the_first_use_to_say(monkeypatch):
    """The thread reports nothing (a traceback would print over the screen): the session's first use of
    the tables meets the failure again and says it there."""
    from stallscope.errors import StallscopeError

    class Hidden:
        def preload_kernel(self, data=False):
            raise StallscopeError("cannot read /proc/kallsyms: Permission denied")

    raised = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    tables = KernelTables(Hidden(), locks=True)
    tables.start()
    tables.wait()
    assert raised == []
