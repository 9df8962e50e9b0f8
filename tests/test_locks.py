"""Kernel lock contention against the kernel's own event counts, and lock naming."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess

import pytest

from conftest import ALL_STACKS, example, needs_bpf, record_command, run_stallscope
from stallscope.analyzer.load import load_model
from stallscope.analyzer.locks import contention_point, lock_type
from stallscope.analyzer.sample import Stack, TaskId
from stallscope.bpf import abi
from stallscope.bpf.mapdiff import Changed
from synthetic import kframe, kstack


@pytest.fixture(scope="module")
def churn_run(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root to record")
    tmp = tmp_path_factory.mktemp("churn")
    # every stack walked (no rate limit): the callers must be there to be checked
    return record_command(tmp, [example("mmap_churn"), "-n", "500"], *ALL_STACKS)


@needs_bpf
def test_threads_churning_mappings_contend_on_their_mmap_lock(churn_run):
    doc, truth, _ = churn_run
    tgid = truth[0]["tgid"]
    mmap = [lk for lk in doc["locks"] if lk["name"] == f"mmap_lock (mmap_churn[{tgid}])"]
    assert {lk["type"] for lk in mmap} == {"rwsem:R", "rwsem:W"}
    callers = " ".join(c["caller"] for lk in mmap for c in lk["callers"])
    assert "lock_mm_and_find_vma" in callers  # page faults: read side
    assert "vm_mmap_pgoff" in callers or "__vm_munmap" in callers  # mmap and munmap: write side
    workers = {t["tid"] for t in truth if t["role"] == "mmap-churn"}
    assert workers <= {t["pid"] for lk in mmap for t in lk["tasks"]}
    for lk in mmap:
        assert lk["sleep_ns"] + lk["spin_ns"] == lk["wait_total_ns"]
        assert lk["wait_min_ns"] <= lk["wait_avg_ns"] <= lk["wait_max_ns"]


@needs_bpf
def test_the_sleeping_locks_call_sites_are_named_alike_from_their_records_alone(churn_run):
    """locks.locks_by_site folds only the sleeping locks' records where the lock table is not folded yet: on every
    interval of a real recording of threads churning their mappings (mmap_lock, every stack walked), each
    interval's model as a live view folds it (its lock table when first read) names the same call sites as the
    whole table does, from the same rows (tests/test_lockgroups.py: the same on made-up records)."""
    from stallscope.analyzer import locks as L
    from stallscope.analyzer.store import Recording
    from stallscope.analyzer.timeline import Timeline

    rec = Recording(str(churn_run[2]))
    try:
        intervals, names = list(rec.intervals()), (rec.tasks(), rec.stacks(), rec.functions(), rec.slab_caches())
        meta = rec.meta
    finally:
        rec.close()
    timelines = [Timeline(meta, keep=2, live=True) for _ in range(2)]
    for tl in timelines:
        for have, new in zip((tl.task_info, tl.stacks, tl.functions, tl.slab_caches), names):
            have.update(new)
    sites = sleeping = 0
    for iv in intervals:
        alone, whole = (tl.add(iv) or tl.window(iv.index, iv.index).model for tl in timelines)
        L.lock_stats(whole, kind="kernel")
        found = L.locks_by_site(alone)
        assert found == L.locks_by_site(whole), iv.index
        theirs = tuple(w for w in whole.lock_waits if L._sleeping(w.flags))
        assert alone.lock_waits.only(L._sleeping) == theirs, iv.index
        sites += len(found)
        sleeping += len(theirs)
    assert sleeping and sites  # the mmap locks' waits, walked at their call sites


@needs_bpf
def test_each_locks_waiters_add_up_to_its_row_the_most_waiting_first(churn_run):
    """A lock's evidence lists its tasks with their own contentions and wait (analyzer/locks.py waiters_of): summed,
    they are the row's, kernel locks and futexes alike."""
    from stallscope.analyzer.locks import lock_stats, waiters_of

    model = load_model(str(churn_run[2]))
    rows = lock_stats(model)
    assert any(not s.is_futex for s in rows)  # the mmap locks at least
    for s in rows:
        w = waiters_of(model, s)
        assert {t for t, _n, _ns in w} == set(s.tasks), s.name
        assert sum(n for _t, n, _ns in w) == s.contentions and sum(ns for *_, ns in w) == s.wait_total_ns, s.name
        assert [ns for *_, ns in w] == sorted((ns for *_, ns in w), reverse=True)


@needs_bpf
def test_contentions_not_drawn_for_a_walk_still_name_their_contention_points(tmp_path):
    """At the budget's last stack scale (T = 10 s) a contention of microseconds is drawn with p ~ 1e-6: none
    is. Each may still get a short walk of its call site (bpf/stacks.bpf.h SITE_DEPTH, at most
    SITE_WALKS_PER_S per CPU): the mmap_lock rows name their callers as when every stack is walked, and such a
    stack stands for no other contention (weight 0)."""
    # a thread holding mmap_lock for write again and again (mprotect) makes the churn contend every run: a
    # thousand contentions or so on the write side (without it, from 59 to 14,000 from run to run)
    doc, truth, path = record_command(tmp_path, [example("mmap_churn"), "-t", "1", "-w", "16", "-n", "4000"],
                                      "--stack-scale", "10")
    tgid = truth[0]["tgid"]
    mmap = [lk for lk in doc["locks"] if lk["name"] == f"mmap_lock (mmap_churn[{tgid}])"]
    assert mmap and sum(lk["contentions"] for lk in mmap) > 100, "the workload should contend"
    # a row of 300 contentions or more gets a dozen walks or so of the ~100 the run's buckets allow
    busy = [lk for lk in mmap if lk["contentions"] >= 300]
    assert busy, mmap
    for lk in busy:
        named = {c["caller"].split("+")[0] for c in lk["callers"] if not c["caller"].startswith("(")}
        side = ({"lock_mm_and_find_vma", "do_user_addr_fault"} if lk["type"] == "rwsem:R"  # page faults
                else {"vm_mmap_pgoff", "__vm_munmap", "vm_munmap", "do_mprotect_pkey"})  # mmap, munmap, mprotect
        assert named & side, (lk["type"], lk["callers"])
    for lk in mmap:  # every contention is in one of its rows' points, named or not, the undrawn shared in whole units
        assert sum(c["contentions"] for c in lk["callers"]) == lk["contentions"]
        assert sum(c["wait_total_ns"] for c in lk["callers"]) == lk["wait_total_ns"]
    model = load_model(str(path))
    walked = [w for w in model.lock_waits if w.stack is not None and w.tgid == tgid]
    sites = [w for w in walked if not w.weighted_ns]  # a drawn one (a wait of milliseconds: p ~ 1e-3) stands for d/p
    assert sites and all(len(w.stack.frames) <= 12 for w in sites)
    assert sum(w.count for w in walked) < sum(lk["contentions"] for lk in mmap)  # the rate cap: not every one


@needs_bpf
def test_each_threads_mmap_lock_wait_covers_the_time_it_slept_in_mmap_and_faults(tmp_path):
    """A sibling holds mmap_lock for write again and again (mprotect of a populated region). Each
    churning thread measures the time it slept inside mmap, munmap and its page faults (wall less its
    own CPU time less its run-queue wait). With no more threads than CPUs and regions that never merge,
    nothing but mmap_lock puts it to sleep there; the lock wait also holds the wakeup-to-run part, so
    it is at least that sleep, and never more than the whole time inside the calls. (A writer's
    optimistic spin on a running owner precedes contention_begin: on the CPU, in neither figure.)"""
    steal_before = _steal_ns()
    _, truth, path = record_command(tmp_path, [example("mmap_churn"), "-n", "2000", "-w", "32"])
    steal_ns = _steal_ns() - steal_before
    model = load_model(str(path))
    workers = [t for t in truth if t["role"] == "mmap-churn"]
    assert workers
    for t in workers:
        asleep_ns = t["extra"]["asleep_ns"]
        assert asleep_ns > 5_000_000, f"thread {t['tid']} should sleep on its sibling's mmap_lock"
        waited_ns = sum(w.total_ns for w in model.lock_waits if w.task.pid == t["tid"] and w.kind == 1)
        # a vCPU the host stops looks asleep to the thread (wall time without CPU time or queueing):
        # what the host stole from this VM meanwhile bounds that part
        assert 0.9 * asleep_ns - steal_ns <= waited_ns <= t["blocked_ns"], \
            (t["tid"], waited_ns, asleep_ns, steal_ns, t["blocked_ns"])


@needs_bpf
def test_a_wait_still_in_progress_when_the_recording_stops_is_charged(tmp_path):
    """A thread that sleeps on mmap_lock most of the time (its sibling holds it for write for tens of
    ms at a stretch) is, at a random stop, usually inside a wait: that wait is charged up to the stop
    (an iterator over the tasks at stop), counted in meta.health, and its part is a real contention."""
    workload = subprocess.Popen([example("mmap_churn"), "-n", "1000000", "-w", "512"], stdout=subprocess.DEVNULL)
    try:
        for attempt in range(8):
            out = tmp_path / f"open{attempt}.stall"
            run_stallscope("record", "-o", str(out), "-d", "0.5", "-p", str(workload.pid))
            doc = json.loads(run_stallscope("export", str(out)).stdout)
            if doc["meta"]["health"].get("locks.open_waits_charged", 0) >= 1:
                break
        else:
            pytest.fail("in 8 recordings no mmap_lock wait was in progress at the stop")
    finally:
        workload.kill()
        workload.wait()
    mmap = [lk for lk in doc["locks"] if lk["name"].startswith("mmap_lock")]
    assert mmap and all(lk["spin_ns"] + lk["sleep_ns"] == lk["wait_total_ns"] for lk in mmap)
    assert sum(lk["wait_total_ns"] for lk in mmap) <= 2 * doc["meta"]["duration_s"] * 1e9


def _steal_ns() -> int:
    """Time the hypervisor took from this VM's CPUs (/proc/stat steal, all CPUs)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _mount_tracefs() -> None:
    """perf resolves tracepoint ids through tracefs, which need not be mounted (BPF does not need it)."""
    if not os.path.exists("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)


@needs_bpf
def test_contention_counts_equal_perf_stat_on_the_same_tracepoint(tmp_path, perf_available):
    """perf stat counts lock:contention_end for the workload's threads; each contention ends once."""
    _mount_tracefs()
    counts = tmp_path / "perf.csv"
    doc, truth, path = record_command(tmp_path, [perf_available, "stat", "-x,", "-o", str(counts), "-e",
                                                 "lock:contention_end", "--", example("mmap_churn"), "-n", "1000"])
    perf = next(int(line.split(",")[0]) for line in counts.read_text().splitlines()
                if "lock:contention_end" in line)
    model = load_model(str(path))
    workload = {t for t in model.descendants(doc["meta"]["options"]["command"]["pid"])
                if model.tasks[t].info.tgid == truth[0]["tgid"]}  # the workload, not perf stat itself
    ours = sum(w.count for w in model.lock_waits if w.task in workload)
    misses = sum(p["recursion_misses"] for name, p in doc["meta"]["overhead"]["bpf_programs"].items()
                 if name.startswith("contention_"))
    assert perf > 100, "the workload should contend"
    # perf stat starts counting at the workload's exec, the probe at its fork: a contention inside
    # execve() itself is ours only. Apart from that window the counts are the same events.
    assert 0 <= ours - (perf - misses) <= 3, (ours, perf, misses, doc["meta"]["health"])


@needs_bpf
def test_locks_command_prints_a_lock_stat_table(churn_run):
    _, _, path = churn_run
    out = run_stallscope("locks", str(path), "--sort", "max", "-n", "5").stdout
    assert out.splitlines()[0].split()[:3] == ["LOCK", "TYPE", "CONTENTIONS"]
    assert "mmap_lock" in out


@needs_bpf
def test_probes_option_turns_the_lock_probe_off(tmp_path):
    doc, _, _ = record_command(tmp_path, [example("sleeper"), "-n", "3", "-m", "5"], "--probes", "-locks")
    assert doc["meta"]["probes"]["locks"]["enabled"] is False
    assert [lk for lk in doc["locks"] if lk["type"] != "futex"] == []  # user-space locks are the futex group's


@pytest.mark.parametrize("flags,expected", [
    (1, "spinlock"), (1 | 2, "rwlock:R"), (1 | 4, "rwlock:W"), (32, "mutex"), (32 | 1, "mutex"), (2, "rwsem:R"),
    (4, "rwsem:W"), (8, "rt-mutex"), (16 | 2, "percpu-rwsem:R"), (0, "semaphore"),
])
def test_lock_type_follows_the_contention_flags(flags, expected):
    assert lock_type(flags) == expected


def test_contention_point_skips_the_lock_internal_frames():
    stack = Stack(99, "kernel", tuple(kframe(n) for n in (
        "bpf_trace_run2", "__traceiter_contention_begin", "queued_spin_lock_slowpath", "_raw_spin_lock_irqsave",
        "get_partial_node", "___slab_alloc", "kmem_cache_alloc_noprof")))
    assert contention_point(stack).startswith("get_partial_node")


def test_unknown_probe_group_is_refused():
    proc = run_stallscope("record", "-o", "/tmp/x.stall", "--probes", "+nosuch", check=False)
    assert proc.returncode == 2 and "no probe group 'nosuch'" in proc.stderr


def test_a_static_lock_is_named_by_its_variable_where_kallsyms_lists_data_symbols():
    """This kernel has no data symbols (no CONFIG_KALLSYMS_ALL); a kallsyms that has them names the lock."""
    from stallscope.analyzer.model import LockWaits
    from stallscope.analyzer.locks import lock_name
    from stallscope.analyzer.sample import TaskId
    from stallscope.analyzer.symbols import KernelDataSymbols

    kallsyms = (b"ffffffff81000000 T _stext\n"
                b"ffffffff82a01000 D tasklist_lock\n"
                b"ffffffff82a01040 d pidmap_lock\n"
                b"ffffffff83000000 B jiffies_lock\n"
                b"ffffffffc0001000 d some_module_lock\t[mod]\n")
    data = KernelDataSymbols.parse(kallsyms)
    assert data.resolve(0xFFFFFFFF82A01000) == "tasklist_lock"
    assert data.resolve(0xFFFFFFFF82A01048) == "pidmap_lock+0x8"
    assert data.resolve(0xFFFF888100000000) is None  # a slab object is nobody's variable
    assert data.resolve(0xFFFFFFFFC0001000) is None  # module data is not in this table
    w = LockWaits(TaskId(1, 1), 1, 0xFFFFFFFF82A01000, 1, 0, "", None, 0, 1, 10, 10, 10, 10, 0,
                  symbol="tasklist_lock")
    assert lock_name(w, lambda tgid: "x") == "tasklist_lock"


@needs_bpf
def test_contention_end_is_attached_before_contention_begin():
    """A contention that began while only contention_begin was attached, and ended before contention_end
    was, stayed open, and the final walk of waits in progress charged it to the recording's end (seen:
    stallscope's own thread 'waiting' 5.1 s in a 5 s recording). With the ends attached first, every begin
    traced has its end traced."""
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf.lock_collector import LockCollector

    collector = LockCollector(Symbolizer())
    try:
        status = collector.start()
        assert status.enabled, status.reason
        names = [link.name for link in collector.obj.links]
        assert names.index("contention_end") < names.index("contention_begin"), names
    finally:
        collector.close()


def test_slab_lock_names_are_kept_but_a_directorys():
    """A slab-held lock is named once for its cache and place (thousands of records an interval name the
    same locks); a directory's i_rwsem is named each time, as its path may change."""
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf.lock_collector import LockCollector

    class Namer:
        def __init__(self):
            self.calls = []

        def describe(self, cache, addr, *rest):
            self.calls.append((cache, addr))
            return ("inode.i_rwsem", "/tmp") if cache == "inode_cache" else ("sock.sk_lock", "")

        def fields(self, cache, addr, *rest):  # asked only where describe named no field
            raise AssertionError((cache, addr))

    collector = LockCollector(Symbolizer())
    collector.namer = namer = Namer()
    place = (64, 0, 0, 0, 0, 0, 0)
    for _ in range(3):
        assert collector._describe(b"UNIX\0", 0x1000, *place, 7, "spin") == ("sock.sk_lock", "", ())
        assert collector._describe(b"inode_cache\0", 0x2000, *place, 7, "rwsem") == ("inode.i_rwsem", "/tmp", ())
    assert collector._describe(b"UNIX\0", 0x1040, *place, 7, "spin") == ("sock.sk_lock", "", ())
    assert namer.calls == [("UNIX", 0x1000), ("inode_cache", 0x2000), ("inode_cache", 0x2000),
                           ("inode_cache", 0x2000), ("UNIX", 0x1040)]


def test_a_slab_lock_left_between_two_fields_is_named_by_its_call_sites_field():
    """The lock collector learns, from the contentions the geometry named, the field each call site takes; one
    left between two spinlock fields, at a site that took one of them, is named by it (and joins its row); one at
    another site, or with no stack, stays unnamed."""
    from stallscope.analyzer.sample import LockDelta
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf.lock_collector import LockCollector

    wq, ilock = "socket_alloc.socket.wq.wait.lock", "socket_alloc.vfs_inode.i_lock"
    waitq = kstack(0x9100, "_raw_spin_lock_irqsave", "prepare_to_wait", "unix_stream_read_generic")
    other = kstack(0x9200, "_raw_spin_lock", "evict", "iput")
    where = "in a sock_inode_cache object"

    def delta(addr, sid, field="", obj=where):
        return LockDelta(TaskId(7, 1), 7, addr, sid, 1, 2, 1, 500, field=field, object=obj)

    out = [delta(0xA000, waitq.id, wq, ""), delta(0xB000, waitq.id), delta(0xC000, other.id), delta(0xD000, 5)]
    named = [(b"sock_inode_cache\0", "spin", waitq.id, wq)]
    between = [(i, b"sock_inode_cache\0", "spin", out[i].kstack, (wq, ilock)) for i in (1, 2, 3)]
    collector = LockCollector(Symbolizer())
    collector._by_site(out, (waitq, other), named, between)
    assert [(d.field, d.object) for d in out] == [(wq, ""), (wq, ""), ("", where), ("", where)]
    # a later drain: the stack was sent before, its site is remembered
    later = [delta(0xE000, waitq.id)]
    collector._by_site(later, (), [], [(0, b"sock_inode_cache\0", "spin", waitq.id, (wq, ilock))])
    assert later[0].field == wq


def _online_cpus() -> list[int]:
    out = []
    for part in open("/sys/devices/system/cpu/online").read().strip().split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


@needs_bpf
def test_the_run_queue_locks_are_found_for_every_cpu_and_named_by_it_without_a_stack(tmp_path):
    """A run queue's lock is per-CPU data with no symbol (and this kernel lists no data symbols): it was named
    only where a stack was walked, so a live window without one showed a bare address. The lock probe finds
    each CPU's at start, through its per-CPU kernel threads' run queues. Under sysbench's threads test
    (sched_yield() and futex wakeups contend on them) every record on one is rq->__lock with its CPU, walked or
    not, and every walked stack taken through raw_spin_rq_lock is on one of those found: the stacks are the
    ground truth."""
    from stallscope.analyzer.locks import lock_stats
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf.lock_collector import RQ_LOCK, LockCollector

    probe = LockCollector(Symbolizer())
    status = probe.start()
    try:
        found = dict(probe.rq_locks)
    finally:
        probe.close()
    assert status.enabled, status.reason
    assert sorted(found.values()) == _online_cpus() and all(a >= 0xFFFF800000000000 for a in found), found
    # every contention drawn for a walk (--stack-scale 0: a run-queue lock's are microseconds, at the default scale
    # one in hundreds), the walks capped per CPU (--stack-rate's default): some walked, some not, in every run
    _, _, path = record_command(tmp_path, ["sysbench", "threads", "--threads=8", "--thread-locks=2", "--time=3",
                                           "run"], "--stack-scale", "0")
    model = load_model(str(path))
    on_rq = [w for w in model.lock_waits if w.addr in found]
    assert on_rq and {(w.symbol, w.object) for w in on_rq} <= {(RQ_LOCK, f"cpu{c}") for c in found.values()}
    assert all(w.object == f"cpu{found[w.addr]}" for w in on_rq)
    assert any(w.stack is None for w in on_rq), "some contentions were not walked (--stack-rate): named all the same"
    walked = [w for w in model.lock_waits if w.stack is not None
              and any((f.symbol or "").startswith(("raw_spin_rq_lock", "_raw_spin_rq_lock")) for f in w.stack.frames)]
    assert walked and all(w.addr in found for w in walked), [hex(w.addr) for w in walked if w.addr not in found]
    row = next(s for s in lock_stats(model) if s.name == RQ_LOCK)
    assert row.instances and all(where.startswith("cpu") for _addr, where, _ns in row.instances), row.instances
    assert not [s for s in lock_stats(model) if s.addr in found and s.name != RQ_LOCK]


def test_a_global_per_cpu_rwsem_is_named_by_its_takers_where_its_address_names_nothing():
    """Without data symbols a static lock reads as its caller: a per-CPU rwsem's caller says which global one
    it is (fs/locks.c's file_rwsem for flock(), and for /proc/locks, which writes it), as its waiters' causes
    name it; another lock taken at the same caller keeps the caller's name."""
    from stallscope.analyzer.locks import LCB_F_PERCPU, LCB_F_READ, LCB_F_SPIN, LCB_F_WRITE, lock_name
    from stallscope.analyzer.model import LockWaits
    from stallscope.analyzer.sample import TaskId

    def waits(flags, *frames):
        stack = Stack(1, "kernel", tuple(kframe(name) for name in frames))
        return LockWaits(TaskId(1, 1), 1, 0xFFFFFFFF83158B80, flags, 0, "", stack, 1, 1, 10, 10, 10, 0, 10)

    reader = waits(LCB_F_PERCPU | LCB_F_READ, "percpu_down_read", "flock_lock_inode", "locks_lock_inode_wait")
    writer = waits(LCB_F_PERCPU | LCB_F_WRITE, "percpu_down_write", "locks_start", "seq_read_iter")
    assert lock_name(reader, str) == lock_name(writer, str) == "file_rwsem (file locks)"
    assert lock_name(waits(LCB_F_PERCPU | LCB_F_READ, "percpu_down_read", "cpus_read_lock"), str) == "cpu_hotplug_lock"
    assert lock_name(waits(LCB_F_SPIN, "_raw_spin_lock", "flock_lock_inode"), str) == "flock_lock_inode"
    assert lock_name(waits(LCB_F_PERCPU | LCB_F_READ, "percpu_down_read", "some_driver_ioctl"), str) == "some_driver_ioctl"


def test_a_lock_in_a_generic_object_is_named_by_the_one_lock_its_taker_takes():
    """kmalloc-* objects have no one struct, and the global futex table no symbol: sysbench's threads contended on
    their private futex hash's bucket locks (futex_wake, futex_wait_setup) and, as the budget removed the lock-call
    uprobes, on a uprobe's register_rwsem (handler_chain); a function's other kind of lock keeps its caller's name."""
    from stallscope.analyzer.locks import LCB_F_READ, LCB_F_SPIN, LOCK_KIND_ADDR, LOCK_KIND_SLAB, lock_name
    from stallscope.analyzer.model import LockWaits

    def waits(flags, kind, cache, *frames):
        stack = Stack(1, "kernel", tuple(kframe(name) for name in frames))
        return LockWaits(TaskId(1, 1), 1, 0xFFFF888100000020, flags, kind, cache, stack, 1, 1, 10, 10, 10, 0, 10)

    hb = "&futex_hash_bucket->lock"
    assert lock_name(waits(LCB_F_SPIN, LOCK_KIND_SLAB, "kmalloc-cg-2k", "_raw_spin_lock", "futex_wake"), str) == (
        f"{hb} (in a kmalloc-cg-2k object)")
    assert lock_name(waits(LCB_F_SPIN, LOCK_KIND_ADDR, "", "_raw_spin_lock", "futex_wait_setup"), str) == hb
    assert lock_name(waits(LCB_F_READ, LOCK_KIND_SLAB, "kmalloc-256", "down_read", "handler_chain"), str) == (
        "&uprobe->register_rwsem (in a kmalloc-256 object)")
    assert lock_name(waits(LCB_F_SPIN, LOCK_KIND_ADDR, "", "_raw_spin_lock", "futex_unlock_pi"), str) == (
        "futex_unlock_pi")  # two spinning locks: its bucket's and the PI mutex's wait_lock
    assert lock_name(waits(LCB_F_READ, LOCK_KIND_ADDR, "", "down_read", "futex_wake"), str) == "futex_wake"


def test_an_instance_is_told_by_its_place_only_where_the_rows_name_does_not_say_it():
    """A directory's i_rwsem by its path; the locks in many objects of one cache all read "in a sock_inode_cache
    object", as the row does: `locks` and the report tell them apart by address instead."""
    from stallscope.analyzer.locks import instance_where

    assert instance_where("&ext4_inode_info->vfs_inode.i_rwsem", "/var/log") == "/var/log"
    assert instance_where("a lock in a sock_inode_cache object", "in a sock_inode_cache object") == ""
    assert instance_where("&unix_sock->lock", "") == ""


def test_a_lock_known_only_by_its_address_takes_the_name_its_other_side_has(tmp_path):
    """file_rwsem's readers were walked (flock_lock_inode names it), its writer not (/proc/locks, none walked in
    this recording): both rows read "file_rwsem (file locks)", apart by type as lock_stat's classes are."""
    from stallscope.analyzer.locks import LCB_F_PERCPU, LCB_F_READ, LCB_F_WRITE, lock_stats
    from stallscope.analyzer.sample import LockDelta
    from synthetic import A, B, interval, kstack, meta, write_recording

    addr = 0xFFFFFFFF83158B80
    flock = kstack(0x7000, "percpu_down_read", "flock_lock_inode", "locks_lock_inode_wait", "__do_sys_flock")
    iv = interval(0, stacks=(flock,), locks=(
        LockDelta(A, A.pid, addr, flock.id, LCB_F_PERCPU | LCB_F_READ, 0, 40, 4_000_000, weighted_ns=4_000_000),
        LockDelta(B, B.pid, addr, 5, LCB_F_PERCPU | LCB_F_WRITE, 0, 3, 900_000),  # 5: not drawn for a walk
    ))
    path = tmp_path / "rwsem.stall"
    write_recording(path, meta(), [iv])
    rows = {s.type: s.name for s in lock_stats(load_model(str(path)), kind="kernel")}
    assert rows == {"percpu-rwsem:R": "file_rwsem (file locks)", "percpu-rwsem:W": "file_rwsem (file locks)"}



def test_a_figure_is_apportioned_in_whole_units_that_sum_to_it():
    from stallscope.analyzer.locks import apportion

    assert apportion(100, [1, 1, 1]) == [34, 33, 33]  # each share rounded alone: 33 + 33 + 33
    assert apportion(7, [2, 1, 1]) == [3, 2, 2]  # 3.5, 1.75, 1.75: the largest remainders
    assert apportion(5, [1, 2, 7]) == [1, 1, 3] and sum(apportion(999_999, [3, 5, 11, 13])) == 999_999
    assert apportion(10, [0, 0]) == [5, 5] and apportion(7, []) == [] and apportion(0, [3, 1]) == [0, 0]


def test_a_locks_points_sum_to_its_row_with_the_undrawn_shared_among_them(tmp_path):
    """Three points that each stand for as much, and 100 contentions (1,000 ns) not drawn for a walk: rounded one
    by one, the shares of 33.3 made 99; the points now add up to the row, contentions and nanoseconds."""
    from stallscope.analyzer.locks import LCB_F_SPIN, lock_stats
    from stallscope.analyzer.sample import LockDelta
    from synthetic import A, interval, kstack, meta, write_recording

    addr = 0xFFFF888003000000
    stacks = tuple(kstack(0x7000 + 0x100 * i, "_raw_spin_lock", f"caller_{i}", "do_syscall_64") for i in range(3))
    drawn = tuple(LockDelta(A, A.pid, addr, s.id, LCB_F_SPIN, 0, 1, 10, spin_ns=10, weighted_ns=20) for s in stacks)
    undrawn = LockDelta(A, A.pid, addr, 5, LCB_F_SPIN, 0, 100, 1_000, spin_ns=1_000)  # 5: not drawn for a walk
    path = tmp_path / "points.stall"
    write_recording(path, meta(), [interval(0, stacks=stacks, locks=(*drawn, undrawn))])
    (row,) = [s for s in lock_stats(load_model(str(path)), kind="kernel") if s.addr == addr]
    assert (row.contentions, row.wait_total_ns) == (103, 1_030)
    assert sorted(c.count for c in row.callers) == [34, 34, 35]
    assert sum(c.total_ns for c in row.callers) == 1_030 and sum(c.estimated_ns for c in row.callers) == 1_000
    assert sum(c.spin_ns for c in row.callers) == row.spin_ns == 1_030


def _lock_row(addr, kstack_id, kind, count, prev_count, total, prev_total, *, flags=1, cache=b"", comm=b"owner\0",
              extremes=(0, 0, 0, 0, 0, 0), slot=(0, 0, 0, 0), pid=7, sums=(30, 20, 10, 5, 400, 9), prev_sums=None):
    """A changed lock entry as bpf/mapdiff.py Changed.rows unpacks it: the row's flags, the key (addr, kstack,
    start_ns, pid, tgid, flags, kind), the value (the sums, the owner, the slab object, the extremes), the
    previous value's sums."""
    spin, sleep, blocked, runnable, weighted, var = sums
    prev = prev_sums if prev_sums is not None else tuple(v // 2 for v in sums)
    value = (count, total, spin, sleep, blocked, runnable, weighted, var, 99, 0, comm, cache, *slot, 0o40755, 12, 8,
             0, *extremes)
    return (0, addr, kstack_id, 1000, pid, 7, flags, kind, *value, prev_count, prev_total, *prev)


def test_the_lock_drains_records_made_in_c_are_those_made_in_python():
    """analyzer/rowread.c lock_deltas makes the lock drain's records as bpf/lock_collector.py py_lock_deltas does,
    in every branch: an entry that did not move (skipped), a run queue's lock (its CPU), a static lock (its
    symbol, asked once), a slab-held lock named by its field or left between two, a mmap_lock, an entry counted
    once (its longest is its total), a counter that went back, each interval's extremes kept or not; and with no
    lock namer."""
    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf import lock_collector
    from stallscope.bpf.lock_collector import RQ_LOCK, LockCollector

    if lock_collector._c_lock_deltas is None:
        pytest.skip("analyzer/_rowread is not built (make)")

    class Namer:
        def describe(self, cache, addr, *rest):
            return ("sock.sk_lock", "") if addr & 0x100 else ("", "in a sock_inode_cache object")

        def fields(self, cache, addr, *rest):
            return ("socket.wq.wait.lock", "vfs_inode.i_lock") if addr & 0x200 else ("x.lock",)

    class Symbols(Symbolizer):
        asked: list = []

        def kernel_data(self, addr):
            self.asked.append(addr)
            return "jiffies_lock" if addr == 0x5000 else None

    e = 41
    rows = [
        _lock_row(0x1000, 16, 0, 5, 5, 900, 900),  # no contention since the last read
        _lock_row(0xA000, 17, 0, 9, 4, 9000, 4000, extremes=(800, 700, 20, 10, 42, 41)),  # a run queue's
        _lock_row(0x5000, 18, 0, 3, 1, 600, 100, extremes=(300, 0, 50, 0, 40, 0)),  # a static lock; no extremes of e
        _lock_row(0x5000, 18, 0, 4, 1, 700, 100, pid=4_000_008),  # the same lock, another task: its symbol asked once
        _lock_row(0x6000, 19, 0, 3, 1, 50, 10, extremes=(0, 90, 0, 5, 0, 41)),  # longest held to the total
        _lock_row(0x7100, 20, 2, 6, 2, 800, 300, cache=b"UNIX\0", slot=(1024, 0, 3, 0), extremes=(0, 200, 0, 7, 0, 42)),
        _lock_row(0x7200, 21, 2, 3, 2, 80, 20, cache=b"sock_inode_cache\0", slot=(832, 0, 3, 0)),  # between two
        _lock_row(0x7400, 22, 2, 3, 1, 80, 20, cache=b"sock_inode_cache\0", slot=(832, 0, 3, 0), flags=32),  # one
        _lock_row(0x7100, 20, 2, 8, 6, 900, 800, cache=b"UNIX\0", slot=(1024, 0, 3, 0), pid=9),  # described before
        _lock_row(0x8000, 23, 1, 2, 1, 40, 10, flags=4),  # a mmap_lock: counted once more
        _lock_row(0x9000, 24, 0, 7, 3, 100, 500, prev_sums=(40, 30, 20, 10, 900, 19)),  # counters that went back
        _lock_row(0x9100, 25, 0, 1 << 63, 1, (1 << 64) - 1, 0, extremes=(0, (1 << 64) - 1, 0, 1, 0, 41)),
    ]
    # the drain's input: a map diff's blob of those entries (the slack after each record as bpf/mapdiff.c leaves it)
    fmt = f"<I4x{lock_collector._KEY_LAYOUT}{lock_collector._VAL_LAYOUT}{lock_collector._PREV_LAYOUT}"
    blob = b"".join(struct.pack(fmt, *row) + b"\xa5" * 8 for row in rows)
    changed = Changed(blob, len(rows), struct.calcsize(fmt) + 8, ctypes.sizeof(abi.LockKey), ctypes.sizeof(abi.LockVal))
    unix, sock = b"UNIX".ljust(32, b"\0"), b"sock_inode_cache".ljust(32, b"\0")  # abi.LockVal.cache, as read
    for namer in (Namer(), None):
        made = []
        for in_c in (True, False):
            collector = LockCollector(Symbols())
            collector.namer = namer
            collector.rq_locks = {0xA000: 1}
            Symbols.asked = []
            made.append((collector.lock_deltas(changed, e, in_c=in_c), list(Symbols.asked)))
        (c, c_asked), (py, py_asked) = made
        assert c == py and c_asked == py_asked == [0x5000, 0x6000, 0x9000, 0x9100], (c_asked, py_asked)
        out, ids, named, between = c
        assert len(out) == len(rows) - 1 and set(ids) == set(range(17, 26))
        rq = out[0]
        assert (rq.symbol, rq.object, rq.count, rq.total_ns, rq.max_ns, rq.min_ns) == (RQ_LOCK, "cpu1", 5, 5000, 800, 10)
        assert [d.symbol for d in out[1:3]] == ["jiffies_lock"] * 2 and out[1].max_ns == 0
        assert out[2].task == TaskId(4_000_008, 1000)  # a 32-bit field read whole
        assert (out[3].max_ns, out[3].min_ns) == (40, 5)  # the longest of the two held to the total (40 ns)
        assert (out[-3].kind, out[-3].max_ns, out[-3].min_ns) == (1, 30, 30)  # counted once: its total
        assert out[-2].total_ns == -400 and out[-2].spin_ns == -10
        assert (out[-1].count, out[-1].total_ns, out[-1].max_ns) == ((1 << 63) - 1, (1 << 64) - 1, (1 << 64) - 1)
        if namer is not None:
            assert out[4].field == "sock.sk_lock" and named == [(unix, "spin", 20, "sock.sk_lock")] * 2
            assert between == [(5, sock, "spin", 21, ("socket.wq.wait.lock", "vfs_inode.i_lock"))]
            assert out[6].field == "" and out[6].object == "in a sock_inode_cache object"
        else:
            assert not named and not between and all(d.field == "" for d in out)


@needs_bpf
def test_a_live_lock_drains_records_are_the_same_made_in_c_or_in_python():
    """The lock probe attached while hackbench (its sockets' locks, in slab objects) and threads churning their
    mappings (a mmap_lock) run: each drain's changed entries, made into records by analyzer/rowread.c and by
    py_lock_deltas, one first and then the other, are the same records, stacks, and names."""
    import time

    from stallscope.analyzer.symbols import Symbolizer
    from stallscope.bpf import lock_collector
    from stallscope.bpf.lock_collector import LockCollector

    if lock_collector._c_lock_deltas is None:
        pytest.skip("analyzer/_rowread is not built (make)")
    probe = LockCollector(Symbolizer())
    status = probe.start()
    assert status.enabled, status.reason
    made, seen = probe.lock_deltas, []

    def both(changed, e, in_c=True):
        first = len(seen) % 2 == 0  # which one meets the names and symbols first, in turn
        a = made(changed, e, in_c=first)
        b = made(changed, e, in_c=not first)
        seen.append((len(changed), {d.kind for d in a[0]}, a == b))
        return a

    probe.lock_deltas = both
    load = [subprocess.Popen(["perf", "bench", "sched", "messaging", "-g", "4", "-l", "400"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            subprocess.Popen([example("mmap_churn"), "-n", "300"], stdout=subprocess.DEVNULL)]
    try:
        for _ in range(4):
            time.sleep(0.5)
            probe.drain(set())
    finally:
        for p in load:
            p.wait(60)
        probe.close()
    assert all(same for _n, _kinds, same in seen), seen
    assert sum(n for n, _kinds, _same in seen) > 100 and {2} <= set().union(*(k for _n, k, _s in seen)), seen
