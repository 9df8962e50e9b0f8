"""User-space lock contention (futex waits) against what the workloads measure themselves."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from conftest import example, needs_bpf, record_command, run_stallscope
from stallscope.analyzer.load import load_model
from stallscope.analyzer.locks import futex_caller, futex_op_waits, lock_stats, user_frames
from stallscope.analyzer.model import FutexWaits
from stallscope.analyzer.sample import FutexDelta, Stack, TaskId, TaskInfo
from stallscope.analyzer.sample import Frame
from stallscope.bpf import abi
from synthetic import interval, meta, two_interval_recording, write_recording

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


@pytest.fixture(scope="module")
def convoy_run(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root to record")
    tmp = tmp_path_factory.mktemp("convoy")
    # drained every 100 ms: the process is read (maps, symbols) while it lives
    return record_command(tmp, [example("mutex_convoy"), "-t", "2", "-n", "100", "-m", "2"], "-i", "100ms")


@needs_bpf
def test_convoy_threads_wait_in_the_futex_as_long_as_they_measure_around_pthread_mutex_lock(convoy_run):
    doc, truth, path = convoy_run
    model = load_model(str(path))
    convoy = [t for t in truth if t["role"] == "convoy"]
    assert len(convoy) == 2
    for t in convoy:
        ours = sum(w.total_ns for w in model.futex_waits
                   if w.task.pid == t["tid"] and futex_caller(w).startswith("take_lock+"))
        # each of 100 rounds waits about the other thread's 2 ms hold
        assert t["blocked_ns"] > 100_000_000
        assert abs(ours - t["blocked_ns"]) <= 0.10 * t["blocked_ns"], (t["tid"], ours, t["blocked_ns"])


@needs_bpf
def test_every_interval_keeps_its_own_longest_and_shortest_futex_wait(tmp_path):
    """Each convoy thread waits about the other's 2 ms hold, interval after interval: every key that waited
    in an interval has that interval's extremes (bpf/interval.h), within the waits' bounds, not only the
    interval where its longest or shortest ever moved. At nice -20, so that a busy machine does not merge
    the 100 ms intervals."""
    from stallscope.analyzer.store import Recording

    _, truth, path = record_command(tmp_path, [example("mutex_convoy"), "-t", "2", "-n", "200", "-m", "2"],
                                    "-i", "100ms", "--nice", "-20")
    convoy = {t["tid"] for t in truth if t["role"] == "convoy"}
    rec = Recording(str(path))
    try:
        waits = [(iv.index, f) for iv in rec.intervals() for f in iv.futex if f.count and f.task.pid in convoy]
    finally:
        rec.close()
    assert len({i for i, _ in waits}) >= 3, waits
    for i, f in waits:
        assert 0 < f.min_ns <= f.max_ns <= f.total_ns and f.max_ns * f.count >= f.total_ns, (i, f)


@needs_bpf
def test_convoy_lock_is_named_by_its_variable_process_and_the_function_that_took_it(convoy_run):
    doc, truth, _ = convoy_run
    tgid = truth[0]["tgid"]
    mine = [lk for lk in doc["locks"] if lk["type"] == "futex" and lk["process"]["pid"] == tgid]
    assert len(mine) == 1, mine  # one mutex, one futex word
    lk = mine[0]
    assert lk["name"] == f"lock (mutex_convoy[{tgid}])"
    assert lk["process"] == {"pid": tgid, "comm": "mutex_convoy"}
    assert lk["function"] == "take_lock"
    assert [c["caller"].split("+")[0] for c in lk["callers"]] == ["take_lock"]
    assert {t["pid"] for t in lk["tasks"]} == {t["tid"] for t in truth if t["role"] == "convoy"}
    assert lk["sleep_ns"] == lk["wait_total_ns"] and lk["spin_ns"] == 0
    assert lk["wait_min_ns"] <= lk["wait_avg_ns"] <= lk["wait_max_ns"]
    blocked = sum(t["blocked_ns"] for t in truth if t["role"] == "convoy")
    assert abs(lk["wait_total_ns"] - blocked) <= 0.10 * blocked


@needs_bpf
def test_futex_probe_reports_its_mechanism_and_cost(convoy_run):
    doc, _, _ = convoy_run
    assert doc["meta"]["probes"]["futex"] == {"enabled": True, "mechanism": "sched_switch+uprobe", "reason": ""}
    progs = doc["meta"]["overhead"]["bpf_programs"]
    # the scheduler program runs at each context switch, no program on system calls; the uprobe only
    # where a lock call takes its slow path (__lll_lock_wait, which may wait several times in one call)
    assert progs["futex_switch"]["run_cnt"] > 0
    assert not {"futex_enter", "futex_exit", "futex_sys_enter", "futex_sys_exit"} & set(progs)
    assert progs["lock_call"]["run_cnt"] > 0


@needs_bpf
def test_the_uprobe_trap_is_measured_and_the_budget_removes_the_uprobes_past_its_last_level(tmp_path):
    """The trap each uprobe hit costs is measured at start and charged per hit; with a budget the
    per-event work alone exceeds, the uprobes are removed (stated) and no lock call traps after."""
    from stallscope.analyzer.store import Recording

    doc, _, path = record_command(tmp_path, [example("mutex_convoy"), "-t", "3", "-n", "400", "-m", "1"],
                                  "-i", "100ms", "--overhead-budget", "0.001", defaults=True)
    trap = doc["meta"]["options"]["futex"]["uprobe_trap_ns"]
    assert 100 < trap < 100_000, trap  # a breakpoint's round trip into the kernel: 1-10 us
    o = doc["meta"]["overhead"]
    assert o["uprobe_trap_ns"] == trap and o["uprobe_traps_pct"] > 0
    removed = [c for c in o["changes"] if not c["lock_call_uprobes"]]
    assert removed and "uprobes' traps" in removed[0]["reason"], o["changes"]
    rec = Recording(str(path))
    try:
        hits = [sum(p.run_cnt for p in iv.programs if p.name == "lock_call") for iv in rec.intervals()]
    finally:
        rec.close()
    after = hits[removed[0]["after_interval"] + 2:]
    assert sum(hits) > 0 and after and not any(after), hits


@needs_bpf
def test_locks_command_shows_futex_locks_with_their_callers(convoy_run):
    _, truth, path = convoy_run
    out = run_stallscope("locks", str(path), "--type", "futex", "-n", "50").stdout
    assert f"lock (mutex_convoy[{truth[0]['tgid']}])" in out
    assert "take_lock+0x" in out
    kernel_only = run_stallscope("locks", str(path), "--type", "kernel", "-n", "50").stdout
    assert "(mutex_convoy[" not in kernel_only


# Each op on its own futex word, three times, timing out after 20 ms where it waits; the workload
# prints the word's address and the time it measured around the calls.
FUTEX_OPS_WORKLOAD = textwrap.dedent("""
    import ctypes, json, os, resource, threading, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    L = ctypes.c_long
    class Timespec(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
    class Waitv(ctypes.Structure):
        _fields_ = [("val", ctypes.c_uint64), ("uaddr", ctypes.c_uint64), ("flags", ctypes.c_uint32),
                    ("reserved", ctypes.c_uint32)]
    WAIT_NS, PRIVATE, FUTEX2 = 20_000_000, 128, 0x02 | 0x80  # FUTEX2_SIZE_U32 | FUTEX2_PRIVATE
    def at(clock):
        t = time.clock_gettime_ns(clock) + WAIT_NS
        return ctypes.byref(Timespec(t // 10**9, t % 10**9))
    rel = lambda: ctypes.byref(Timespec(0, WAIT_NS))
    owner = threading.Event()
    holder = threading.Thread(target=owner.wait)
    holder.start()
    words = {}
    def word(name, value=0):
        words[name] = ctypes.c_uint32(value)
        return L(ctypes.addressof(words[name]))
    def waitv(a):
        v = Waitv(0, a.value, FUTEX2, 0)
        words[id(v)] = v
        return libc.syscall(L(449), ctypes.byref(v), L(1), L(0), at(time.CLOCK_MONOTONIC), L(1))
    ops = {
        "FUTEX_WAIT": (True, lambda a: libc.syscall(L(202), a, L(0 | PRIVATE), L(0), rel())),
        "FUTEX_WAIT_BITSET": (True, lambda a: libc.syscall(L(202), a, L(9 | PRIVATE), L(0),
                                                          at(time.CLOCK_MONOTONIC), L(0), L(0xffffffff))),
        "FUTEX_LOCK_PI": (True, lambda a: libc.syscall(L(202), a, L(6 | PRIVATE), L(0), at(time.CLOCK_REALTIME))),
        "futex_wait": (True, lambda a: libc.syscall(L(455), a, L(0), L(0xffffffff), L(FUTEX2),
                                                   at(time.CLOCK_MONOTONIC), L(1))),
        "futex_waitv": (True, waitv),
        "FUTEX_WAKE": (False, lambda a: libc.syscall(L(202), a, L(1 | PRIVATE), L(1))),
        "FUTEX_TRYLOCK_PI": (False, lambda a: libc.syscall(L(202), a, L(8 | PRIVATE))),
        "FUTEX_WAKE_OP": (False, lambda a: libc.syscall(L(202), a, L(5 | PRIVATE), L(1), L(1), a, L(0))),
    }
    def sleeps():  # this thread's voluntary context switches: the kernel's count of its sleeps
        return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    for name, (waits, call) in ops.items():
        a = word(name, holder.native_id if "PI" in name else 0)  # a PI futex owned by another thread
        rcs, slept, elapsed, calls, slept_calls = [], 0, 0, 0, 0
        # a call whose absolute deadline passed before it entered the kernel (the caller preempted
        # for 20 ms) returns at once without sleeping: such calls are repeated, and their time left out
        while calls < 10 and (slept < 3 if waits else calls < 3):
            n0, t0 = sleeps(), time.monotonic_ns()
            rcs.append(call(a))
            t1, n = time.monotonic_ns(), sleeps() - n0
            calls += 1
            if n:
                slept, elapsed, slept_calls = slept + n, elapsed + t1 - t0, slept_calls + 1
        print(json.dumps({"role": name, "tgid": os.getpid(), "tid": threading.get_native_id(), "uaddr": a.value,
                          "calls": calls, "sleeps": slept, "slept_calls": slept_calls, "waits": waits,
                          "elapsed_ns": elapsed, "rcs": rcs}),
              flush=True)
    owner.set()
    holder.join()
""")


@needs_bpf
def test_only_the_futex_ops_that_can_sleep_are_counted_as_waits(tmp_path):
    doc, truth, path = record_command(tmp_path, [sys.executable, "-c", FUTEX_OPS_WORKLOAD], "-i", "100ms")
    model = load_model(str(path))
    # sleeps whose wakeup and switch-in the kernel did not trace (docs/reliability.md: on this VM's kernel,
    # some switches out of an idle CPU are not traced): lost, and counted as lost
    lost = model.health.get("switch_out_open", 0)
    assert len(truth) == 8
    for t in truth:
        waits = [w for w in model.futex_waits if w.tgid == t["tgid"] and w.uaddr == t["uaddr"]]
        if not t["waits"]:
            assert waits == [], t["role"]
            continue
        assert all(rc == -1 for rc in t["rcs"]), t  # timed out, as asked
        # a wait is a sleep inside the call: each call that slept has one at least (but those counted as
        # lost), and there are no more than the voluntary switches the kernel counted around the calls (a
        # call retried after a spurious wakeup sleeps twice; a page fault around it may sleep too)
        assert t["sleeps"] >= 3, t
        counted = sum(w.count for w in waits)
        assert t["slept_calls"] - lost <= counted <= t["sleeps"], (t["role"], counted, t, lost)
        seen = min(counted, t["slept_calls"])  # the calls whose sleep was seen
        total = sum(w.total_ns for w in waits)
        # each call timed out 20 ms after a deadline set just before it entered the kernel: its sleep is
        # shorter than 20 ms by that much (tens of microseconds)
        assert 0.98 * 20_000_000 * seen <= total <= t["elapsed_ns"], (t["role"], total, t["elapsed_ns"])
        expected = t["elapsed_ns"] * seen / t["slept_calls"]
        assert abs(total - expected) <= 0.10 * expected, (t["role"], total, t["elapsed_ns"], seen)
        assert {w.op for w in waits} == {OPS[t["role"]]}


OPS = {"FUTEX_WAIT": abi.FUTEX_WAIT, "FUTEX_WAIT_BITSET": abi.FUTEX_WAIT_BITSET, "FUTEX_LOCK_PI": abi.FUTEX_LOCK_PI,
       "futex_wait": abi.FUTEX_OP_WAIT2, "futex_waitv": abi.FUTEX_OP_WAITV}


@pytest.mark.parametrize("op,waits", [
    (0, True), (0 | 128, True), (0 | 256, True), (9 | 128, True), (6, True), (13 | 128, True), (11, True),
    (1, False), (1 | 128, False), (3, False), (4, False), (5, False), (7, False), (8, False), (8 | 128, False),
    (10, False), (12, False), (2, False), (14, False),
])
def test_futex_ops_that_can_sleep_are_waits(op, waits):
    assert futex_op_waits(op) is waits
    # the BPF filter's set (bpf/futex.h FUTEX_WAIT_CMDS, mirrored in abi) says the same
    assert ((op & abi.FUTEX_CMD_MASK) in abi.FUTEX_WAIT_CMDS) is waits


def _uframe(name: str | None, module: str, addr: int = 0x1000) -> Frame:
    return Frame(addr, name, 0x10 if name else 0, module, None, 0x100 if module.startswith("/") else None, "user")


def _waits(stack: Stack | None, caller: str = "", caller_addr: int = 0, stack_id: int = 0) -> FutexWaits:
    return FutexWaits(TaskId(10, 1), 10, 0x5000, 0, stack, stack.id if stack else stack_id, caller_addr, caller,
                      "", 1, 100, 100, 100)


def test_user_stack_through_code_without_frame_pointers_stops_at_the_first_non_code_address():
    stack = Stack(99, "user", (_uframe("__lll_lock_wait", LIBC), _uframe(None, "[unknown]"),
                               _uframe("main", "/usr/bin/app")))
    frames, truncated = user_frames(stack)
    assert [f.symbol for f in frames] == ["__lll_lock_wait"] and truncated


def test_futex_caller_prefers_the_proven_lock_call_then_the_first_frame_outside_libc():
    stack = Stack(99, "user", (_uframe("__lll_lock_wait", LIBC), _uframe("___pthread_mutex_lock", LIBC),
                               _uframe("worker", "/usr/bin/app"), _uframe("start_thread", LIBC)))
    assert futex_caller(_waits(stack, caller="take_lock+0x30", caller_addr=0x1234)) == "take_lock+0x30"
    assert futex_caller(_waits(stack)) == "worker+0x10"
    only_libc = Stack(98, "user", (_uframe("__lll_lock_wait", LIBC), _uframe(None, "[anon]")))
    assert futex_caller(_waits(only_libc)) == "(caller not on the stack: no frame pointers)"
    assert futex_caller(_waits(None, stack_id=abi.STACK_RATE_LIMITED)) == "(stack not sampled)"


def test_futex_waits_of_one_word_are_one_lock_per_process_summed_over_intervals(tmp_path):
    m, ivs = two_interval_recording()
    leader, worker = TaskId(300, 7), TaskId(301, 8)
    info = (TaskInfo(leader, 300, 1, "app"), TaskInfo(worker, 300, 1, "worker"))
    d = dict(tgid=300, uaddr=0x601040, op=0, ustack=0, caller_addr=0x401234, caller="take+0x14", lock_name="big_lock")
    ivs = [ivs[0], ivs[1], interval(2, task_info=info, futex=(
        FutexDelta(worker, count=3, total_ns=30, max_ns=20, min_ns=2, **d),
        FutexDelta(leader, count=1, total_ns=5, max_ns=5, min_ns=5, **d),
    )), interval(3, futex=(FutexDelta(worker, count=1, total_ns=40, max_ns=40, min_ns=40, **d),))]
    path = tmp_path / "futex.stall"
    write_recording(path, m, ivs)
    model = load_model(str(path))
    rows = lock_stats(model, kind="futex")
    assert len(rows) == 1
    s = rows[0]
    assert (s.name, s.type, s.contentions, s.wait_total_ns, s.wait_max_ns, s.wait_min_ns) == \
        ("big_lock (app[300])", "futex", 5, 75, 40, 2)
    assert (s.pid, s.comm, s.function, s.sleep_ns, s.spin_ns) == (300, "app", "take", 75, 0)
    assert lock_stats(model, kind="kernel") == []


def test_a_recording_without_the_futex_table_reads_it_as_empty(tmp_path):
    import sqlite3

    m, ivs = two_interval_recording()
    path = tmp_path / "older.stall"
    write_recording(path, m, ivs)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE futex")
    db.commit()
    db.close()
    assert load_model(str(path)).futex_waits == ()


@needs_bpf
def test_probes_option_turns_the_futex_probe_off(tmp_path):
    doc, _, _ = record_command(tmp_path, [example("mutex_convoy"), "-t", "2", "-n", "5", "-m", "1"], "--probes", "-futex")
    assert doc["meta"]["probes"]["futex"]["enabled"] is False
    assert [lk for lk in doc["locks"] if lk["type"] == "futex"] == []
    assert not any(name.startswith(("futex_", "lock_call")) for name in doc["meta"]["overhead"]["bpf_programs"])


@needs_bpf
def test_uncontended_locks_never_reach_the_uprobe(tmp_path):
    """The uprobes sit on the calls into the slow path: 100,000 free pthread_mutex_lock calls trap none."""
    script = ("import ctypes\nlibc = ctypes.CDLL(None)\nm = ctypes.create_string_buffer(64)\n"
              "for _ in range(100000):\n    libc.pthread_mutex_lock(m)\n    libc.pthread_mutex_unlock(m)\n")
    doc, _, _ = record_command(tmp_path, [sys.executable, "-c", script])
    assert doc["meta"]["probes"]["futex"]["mechanism"] == "sched_switch+uprobe"
    # system-wide: other processes' contended locks are counted too, a few hundred at most
    assert doc["meta"]["overhead"]["bpf_programs"]["lock_call"]["run_cnt"] < 10000


BLOCKED_WORKLOAD = textwrap.dedent("""
    import ctypes, json, os, threading, time
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    class Timespec(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
    word = ctypes.c_uint32(0)
    L = ctypes.c_long
    print(json.dumps({"role": "blocked", "tgid": os.getpid(), "tid": threading.get_native_id(),
                      "uaddr": ctypes.addressof(word), "begin_boottime_ns": time.clock_gettime_ns(time.CLOCK_BOOTTIME)}),
          flush=True)
    libc.syscall(L(202), L(ctypes.addressof(word)), L(0 | 128), L(0), ctypes.byref(Timespec(8, 0)))
""")


@needs_bpf
def test_a_wait_still_in_progress_when_the_recording_stops_is_charged_up_to_the_stop(tmp_path):
    doc, truth, path = record_command(tmp_path, [sys.executable, "-c", BLOCKED_WORKLOAD], "-d", "1.5s")
    model = load_model(str(path))
    t = truth[0]
    waits = [w for w in model.futex_waits if w.tgid == t["tgid"] and w.uaddr == t["uaddr"]]
    assert sum(w.count for w in waits) == 1
    charged = sum(w.total_ns for w in waits)
    # charged in the last drain, right after the scheduler's drain closed the last interval
    until_end = model.end_ns - t["begin_boottime_ns"]
    # the wait times out after 8 s: a recording that long (a starved machine) proves nothing
    assert 1_000_000_000 < until_end < 7_500_000_000, until_end
    assert abs(until_end - charged) < 100_000_000, (charged, until_end)
