"""The ctypes binding over libbpf, with a small object compiled for the test."""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import time

import pytest

from conftest import ROOT, needs_bpf
from stallscope.bpf.libbpf import BpfError, BpfObject

pytestmark = needs_bpf


@pytest.fixture(scope="module")
def probe_object(tmp_path_factory) -> str:
    clang = shutil.which("clang")
    if not clang:
        pytest.fail("clang is missing: `make install` installs it")
    out = tmp_path_factory.mktemp("bpf") / "ringbuf_probe.bpf.o"
    subprocess.run([clang, "-g", "-O2", "-target", "bpf", "-D__TARGET_ARCH_x86", f"-I{ROOT / 'bpf'}",
                    "-c", str(ROOT / "tests" / "bpf" / "ringbuf_probe.bpf.c"), "-o", str(out)], check=True)
    return str(out)


def test_missing_object_is_an_error_with_errno_text(tmp_path):
    with pytest.raises(BpfError) as exc:
        BpfObject(str(tmp_path / "absent.bpf.o"))
    assert exc.value.errno == 2
    assert "No such file" in str(exc.value)


def test_maps_update_lookup_batch_and_delete(probe_object):
    with BpfObject(probe_object) as obj:
        obj.load()
        m = obj.map("numbers")
        for i in range(10):
            m.update(i.to_bytes(8, "little"), (i * i).to_bytes(8, "little"))
        items = {int.from_bytes(k, "little"): int.from_bytes(v, "little") for k, v in m.items_batch(chunk=3)}
        assert items == {i: i * i for i in range(10)}
        assert m.delete((3).to_bytes(8, "little"))
        assert m.lookup((3).to_bytes(8, "little")) is None
        assert sorted(int.from_bytes(k, "little") for k in m.keys()) == [i for i in range(10) if i != 3]


def _voluntary_switches() -> int:
    with open("/proc/thread-self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


def test_a_map_lookup_beside_a_thread_busy_in_python_keeps_the_interpreter(probe_object):
    """A call that returns at once keeps the interpreter's lock: one that let it go waited to take it back from a
    thread busy in Python beside it, up to its switch interval (5 ms) a call (the probes' maps took 0.4-2.7 s to
    make beside the screen's start, rather than 0.05 s). Counted as the calling thread's sleeps: one a call when
    each lets the lock go, a few in all when it is kept (the other thread still gets its turns)."""
    import threading

    CALLS = 1000

    from stallscope.bpf.libbpf import NO_WAIT

    with BpfObject(probe_object) as obj:
        obj.load()
        m = obj.map("numbers")
        m.update((1).to_bytes(8, "little"), (7).to_bytes(8, "little"))
        stop = threading.Event()

        def busy():
            while not stop.is_set():
                sum(range(1000))

        other = threading.Thread(target=busy)
        other.start()
        try:
            time.sleep(0.05)
            before = _voluntary_switches()
            for _ in range(CALLS):
                assert m.lookup((1).to_bytes(8, "little")) == (7).to_bytes(8, "little")
            slept = _voluntary_switches() - before
        finally:
            stop.set()
            other.join()
    # kept, it sleeps when the other thread's turn comes, however many calls it makes: 42-103 times for 1,000 calls
    # here (30 for 300 in a whole suite's run); let go, once a call at least: 1,318 times
    assert slept < CALLS / 2, slept
    lib = obj._lib.lib
    assert all(getattr(lib, fn)._flags_ & ctypes._FUNCFLAG_PYTHONAPI for fn in NO_WAIT)
    # what may wait in the kernel lets the interpreter go: the screen runs meanwhile
    for fn in ("bpf_object__load", "bpf_program__attach", "bpf_link__destroy", "bpf_map_lookup_batch"):
        assert not getattr(lib, fn)._flags_ & ctypes._FUNCFLAG_PYTHONAPI, fn


def test_delete_many_deletes_in_batches_and_skips_keys_already_gone(probe_object):
    with BpfObject(probe_object) as obj:
        obj.load()
        m = obj.map("numbers")
        for i in range(10):
            m.update(i.to_bytes(8, "little"), b"\0" * 8)
        m.delete((4).to_bytes(8, "little"))
        # 4 is gone and 42 never existed: the batch stops at each and goes on after it
        assert m.delete_many([i.to_bytes(8, "little") for i in (1, 4, 5, 42, 7)]) == 3
        assert sorted(int.from_bytes(k, "little") for k in m.keys()) == [0, 2, 3, 6, 8, 9]
        assert m.delete_many([]) == 0


def test_full_map_reports_the_kernels_error(probe_object):
    with BpfObject(probe_object) as obj:
        obj.load()
        m = obj.map("numbers")
        for i in range(16):
            m.update(i.to_bytes(8, "little"), b"\0" * 8)
        with pytest.raises(BpfError) as exc:
            m.update((99).to_bytes(8, "little"), b"\0" * 8)
        assert exc.value.errno == 7  # E2BIG


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the test program filters x86-64's getpid number")
def test_ring_buffer_delivers_records_in_order(probe_object):
    got = []
    with BpfObject(probe_object) as obj:
        image = obj.section_map(".rodata").initial_value()
        ctypes.memmove(image, os.getpid().to_bytes(4, "little"), 4)
        obj.load()
        obj.attach(obj.program("on_sys_enter"))
        rb = obj.ring_buffer("events", lambda data: got.append(int.from_bytes(data[8:16], "little")))
        libc = ctypes.CDLL(None, use_errno=True)
        for _ in range(5):
            libc.syscall(39)  # getpid without glibc's cache
        rb.poll(100)
    assert got == [0, 1, 2, 3, 4]


def test_program_stats_count_runs(probe_object):
    from stallscope.bpf.libbpf import RunTimeStats

    stats = RunTimeStats()
    try:
        with BpfObject(probe_object) as obj:
            obj.load()
            obj.attach(obj.program("on_sys_enter"))
            for _ in range(20):
                os.getppid()
            s = obj.program("on_sys_enter").stats()
    finally:
        stats.close()
    assert s.run_cnt >= 20
    assert s.run_time_ns > 0
    assert s.recursion_misses == 0


@pytest.fixture(scope="module")
def bad_object(tmp_path_factory) -> str:
    """A program for an attach point this kernel lacks."""
    out = tmp_path_factory.mktemp("bad")
    src = out / "bad.bpf.c"
    src.write_text('#include "vmlinux.h"\n#include <bpf/bpf_helpers.h>\nchar LICENSE[] SEC("license") = "GPL";\n'
                   'SEC("tp_btf/no_such_tracepoint_here") int p(void *ctx) { return 0; }\n')
    subprocess.run(["clang", "-O2", "-target", "bpf", f"-I{ROOT / 'bpf'}", "-c", str(src), "-o", str(out / "bad.bpf.o")],
                   check=True)
    return str(out / "bad.bpf.o")


def test_load_failure_quotes_the_reason(bad_object):
    """A program for an attach point this kernel lacks fails with libbpf's words, not a bare errno."""
    with BpfObject(bad_object) as obj, pytest.raises(BpfError) as exc:
        obj.load()
    assert "no_such_tracepoint_here" in exc.value.log


def test_libbpf_debug_lines_stop_in_c_and_warnings_still_reach_the_log(probe_object, bad_object):
    """bpf/logfilter.c: libbpf's print function drops its debug lines (thousands a start-up, each of which a
    Python callback would take the interpreter's lock for) and passes the others on."""
    from stallscope.bpf import libbpf

    lib = libbpf._Lib.get()
    levels: list[int] = []

    @libbpf._PRINT_FN
    def count(level, fmt, args):
        levels.append(level)
        return 0

    def load(path):
        try:
            with BpfObject(path) as obj:
                obj.load()
        except BpfError:
            pass

    try:
        lib.lib.libbpf_set_print(count)  # every line, as libbpf logs it
        load(probe_object)
        unfiltered = list(levels)
        levels.clear()
        filtered = libbpf._log_filter(count)
        assert filtered is not None, "bpf/liblogfilter.so is not built (make install)"
        lib.lib.libbpf_set_print(filtered)
        load(probe_object)
        load(bad_object)
    finally:
        lib.lib.libbpf_set_print(libbpf._log_filter(lib._print_cb) or lib._print_cb)
    assert sum(1 for lv in unfiltered if lv >= libbpf.LIBBPF_DEBUG) > 20  # 38 for this small object
    assert levels and all(lv < libbpf.LIBBPF_DEBUG for lv in levels)  # the failure's warnings came through
    with BpfObject(bad_object) as obj, pytest.raises(BpfError) as exc:  # and the log quotes them again
        obj.load()
    assert "no_such_tracepoint_here" in exc.value.log
