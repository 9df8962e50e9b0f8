"""The SLUB probe against the kernel's own tracepoint counts, /sys/kernel/slab and a known workload,
and its CPU-slab switch estimator run (the same BPF code) on synthetic allocations."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
import subprocess

import pytest

from conftest import ROOT, needs_bpf, record_command, run_stallscope
from stallscope.analyzer.load import load_model
from stallscope.analyzer.locks import lock_stats
from stallscope.analyzer.slab import METHOD_ESTIMATE, METHOD_SHEAVES, slab_rows
from stallscope.bpf.slab_collector import SysfsSlab, boot_parameters

TRACEPOINTS = ("kmem:kmalloc", "kmem:kmem_cache_alloc", "kmem:kfree", "kmem:kmem_cache_free")
FIELD = {"kmem:kmalloc": "kmallocs", "kmem:kmem_cache_alloc": "cache_allocs", "kmem:kfree": "kfrees",
         "kmem:kmem_cache_free": "cache_frees"}
PROGRAM = {"kmem:kmalloc": "kmalloc", "kmem:kmem_cache_alloc": "kmem_cache_alloc", "kmem:kfree": "kfree",
           "kmem:kmem_cache_free": "kmem_cache_free"}
GROUPS, LOOPS = 2, 200
MESSAGES = GROUPS * 20 * 20 * LOOPS  # perf bench sched messaging: 20 senders x 20 receivers per group


# ---- the estimator, on synthetic allocations, through BPF_PROG_TEST_RUN ----------------------------

@pytest.fixture(scope="module")
def switch_object(tmp_path_factory) -> str:
    clang = shutil.which("clang")
    if not clang:
        pytest.fail("clang is missing: `make install` installs it")
    out = tmp_path_factory.mktemp("bpf") / "slab_switch_test.bpf.o"
    subprocess.run([clang, "-g", "-O2", "-Wall", "-Werror", "-target", "bpf", "-D__TARGET_ARCH_x86",
                    f"-I{ROOT / 'bpf'}", "-c", str(ROOT / "tests" / "bpf" / "slab_switch_test.bpf.c"), "-o", str(out)],
                   check=True)
    return str(out)


def _estimate(obj_path: str, allocations) -> dict[int, tuple[int, int, int]]:
    """Run each (cpu, cache, object address, order) through the estimator; per cache
    (switches, same-slab allocations, first allocations seen on a CPU)."""
    from stallscope.bpf.libbpf import BpfObject

    with BpfObject(obj_path) as obj:
        obj.load()
        prog = obj.program("one_allocation")
        for cpu, cache, addr, order in allocations:
            prog.test_run(struct.pack("<3Q", cache, addr, order), cpu=cpu)
        out = {}
        for k, v in obj.map("verdicts").items_batch():
            out[int.from_bytes(k, "little")] = struct.unpack("<3Q", v)
        return out


SLAB_A, SLAB_B, SLAB_C = 0xFFFF888104000000, 0xFFFF888104008000, 0xFFFF888104010000  # 32 KiB apart
KMALLOC_512, SKBUFF = 0xFFFF888100042000, 0xFFFF888100042400


def _fill(cpu, cache, slab, objects, size, order):
    return [(cpu, cache, slab + i * size, order) for i in range(objects)]


@needs_bpf
@pytest.mark.parametrize("name,allocations,expected", [
    # a CPU fills three order-1 slabs of 16 x 512 bytes in turn: two switches
    ("fills slabs in turn", _fill(0, KMALLOC_512, SLAB_A, 16, 512, 1) + _fill(0, KMALLOC_512, SLAB_B, 16, 512, 1)
     + _fill(0, KMALLOC_512, SLAB_C, 16, 512, 1), {KMALLOC_512: (2, 45, 1)}),
    # the order decides what a slab is: 4 KiB apart is another order-0 slab, the same order-1 slab
    ("order 0: each page is a slab", [(0, SKBUFF, SLAB_A + (i % 2) * 4096, 0) for i in range(6)], {SKBUFF: (5, 0, 1)}),
    ("order 1: two pages are one slab", [(0, SKBUFF, SLAB_A + (i % 2) * 4096, 1) for i in range(6)], {SKBUFF: (0, 5, 1)}),
    # each CPU has its own slab: interleaved allocations on two CPUs from two slabs switch nothing
    ("CPUs keep their own slab", [(i % 2, KMALLOC_512, (SLAB_A, SLAB_B)[i % 2] + (i // 2) * 512, 1) for i in range(10)],
     {KMALLOC_512: (0, 8, 2)}),
    # and so does each cache on one CPU
    ("caches keep their own slab", [(0, (KMALLOC_512, SKBUFF)[i % 2], (SLAB_A, SLAB_B)[i % 2] + (i // 2) * 256, 1)
                                    for i in range(10)], {KMALLOC_512: (0, 4, 1), SKBUFF: (0, 4, 1)}),
    # going back to an earlier slab (e.g. a partial slab after remote frees) is a switch too
    ("back to an earlier slab", [(1, SKBUFF, SLAB_A, 0), (1, SKBUFF, SLAB_B, 0), (1, SKBUFF, SLAB_A + 256, 0)],
     {SKBUFF: (2, 0, 1)}),
])
def test_cpu_slab_switch_estimator_on_synthetic_allocations(switch_object, name, allocations, expected):
    if os.cpu_count() < 2 and any(a[0] for a in allocations):
        pytest.skip("needs two CPUs to run allocations on the second")
    assert _estimate(switch_object, allocations) == expected


# ---- configuration ----------------------------------------------------------------------------------

def test_merged_cache_is_shown_with_its_aliases(tmp_path):
    """/sys/kernel/slab: a merged cache is one directory named by its properties; its names are symlinks."""
    root = tmp_path / "slab"
    (root / ":0000512").mkdir(parents=True)
    (root / ":0000512" / "order").write_text("1\n")
    (root / ":0000512" / "objects").write_text("704 N0=704\n")
    for alias in ("skbuff_fclone_cache", "pool_workqueue", "sgpool-16"):
        (root / alias).symlink_to(":0000512")
    (root / "kmalloc-cg-512").mkdir()
    sysfs = SysfsSlab(str(root))
    aliases, config = sysfs.describe("pool_workqueue")
    assert aliases == (":0000512", "sgpool-16", "skbuff_fclone_cache")
    assert dict(config) == {"order": 1, "objects": 704}
    assert sysfs.describe("kmalloc-cg-512") == ((), ())
    assert sysfs.describe("no-such-cache") == ((), ())


@pytest.mark.parametrize("cmdline,cpus,min_objects,max_order", [
    ("console=ttyS0 quiet", 2, 12, 3),  # 4 * (fls(2) + 1)
    ("console=ttyS0", 64, 32, 3),  # 4 * (fls(64) + 1)
    ("slub_min_objects=32 slub_max_order=2", 2, 32, 2),
    ("slab_min_objects=8 slab_max_order=1", 2, 8, 1),  # the 6.8+ spelling
])
def test_effective_boot_parameters(cmdline, cpus, min_objects, max_order):
    boot = boot_parameters(cmdline, cpus)
    assert (boot["min_objects"], boot["max_order"]) == (min_objects, max_order)
    assert boot["min_objects_default"] == 4 * (cpus.bit_length() + 1)


# ---- on the real kernel, under hackbench --------------------------------------------------------------

def _mount_tracefs() -> None:
    """perf resolves tracepoint ids through tracefs, which need not be mounted (BPF does not need it)."""
    if not os.path.exists("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)


def _perf_stat_run(tmp_path, perf: str, workload: list[str], *extra: str):
    _mount_tracefs()
    counts = tmp_path / "perf.csv"
    doc, _, path = record_command(tmp_path, [perf, "stat", "-x,", "-o", str(counts), "-e", ",".join(TRACEPOINTS),
                                             "--", *workload], "--probes", "+slab", *extra)
    perf_counts = {}
    for line in counts.read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 3 and parts[2] in TRACEPOINTS:
            perf_counts[parts[2]] = int(parts[0])
    model = load_model(str(path))
    perf_stat = doc["meta"]["options"]["command"]["pid"]
    # the workload: what perf stat ran and all it forked, not perf stat itself
    workload_tasks = {t for t in model.descendants(perf_stat) if model.tasks[t].info.tgid != perf_stat}
    tgids = {model.tasks[t].info.tgid for t in workload_tasks}
    misses = {tp: doc["meta"]["overhead"]["bpf_programs"].get(PROGRAM[tp], {}).get("recursion_misses", 0)
              for tp in TRACEPOINTS}
    return doc, model, path, perf_counts, workload_tasks, tgids, misses


def _ours(model, tgids, exiting=False) -> dict[str, int]:
    return {tp: sum(getattr(d, f) for d in model.slab if d.tgid in tgids and d.exiting == exiting)
            for tp, f in FIELD.items()}


@pytest.fixture(scope="module")
def hackbench(tmp_path_factory, perf_available):
    if os.geteuid() != 0:
        pytest.skip("needs root to record")
    return _perf_stat_run(tmp_path_factory.mktemp("hackbench"), perf_available,
                          [perf_available, "bench", "sched", "messaging", "-g", str(GROUPS), "-l", str(LOOPS)])


@pytest.fixture(scope="module")
def exec_window(tmp_path_factory, perf_available):
    """What the probe counts and perf stat cannot: perf stat enables its counters in the workload's
    execve (enable_on_exec: perf_event_exec() in begin_new_exec()), after the binary was opened and
    the old mm (a copy of perf's) torn down. Measured on the same exec with nothing after it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to record")
    _, model, _, perf, _, tgids, misses = _perf_stat_run(tmp_path_factory.mktemp("exec"), perf_available,
                                                         [perf_available, "--version"])
    ours = _ours(model, tgids)
    return {tp: ours[tp] - perf[tp] for tp in TRACEPOINTS}, misses


@needs_bpf
def test_counts_equal_perf_stat_on_the_same_tracepoints(hackbench, exec_window):
    """Per tracepoint, the workload's events equal perf stat's, less what the probe lost to recursion.
    Two documented windows differ: the exec window (see the fixture), and a task's exit: perf stat
    stops counting a task in do_exit() at perf_event_exit_task(), before exit_mm() and exit_files(),
    while the probe counts the exit and keeps it apart (PF_EXITING)."""
    _, model, _, perf, _, tgids, misses = hackbench
    window, window_misses = exec_window
    ours = _ours(model, tgids)
    assert perf["kmem:kmalloc"] > MESSAGES and perf["kmem:kmem_cache_alloc"] > MESSAGES
    for tp in TRACEPOINTS:
        # the exec window is the same exec both times; an interrupt landing in it varies it slightly
        slack = misses[tp] + window_misses[tp] + max(10, perf[tp] // 1000)
        assert 0 <= window[tp] < 1000, (tp, window[tp])
        assert abs(ours[tp] - perf[tp] - window[tp]) <= slack, (tp, ours[tp], perf[tp], window[tp], misses[tp])


@needs_bpf
def test_exit_frees_are_counted_apart(hackbench):
    """Every process frees its mm at exit: vm_area_struct objects of the exiting tasks."""
    _, model, _, _, workload, tgids, _ = hackbench
    exiting = _ours(model, tgids, exiting=True)
    processes = len(tgids)
    assert processes >= GROUPS * 40
    assert exiting["kmem:kmem_cache_free"] >= processes  # at least a VMA each


@needs_bpf
def test_hackbench_kmalloc_lands_in_the_accounted_cache(hackbench):
    """Each message is one skb: its head from skbuff_head_cache, its data from kmalloc. Socket
    memory is charged to the memory cgroup (__GFP_ACCOUNT), so the data comes from kmalloc-cg-512,
    not kmalloc-512, which a size-class view would name."""
    _, model, _, _, workload, _, _ = hackbench
    rows = {r.cache: r for r in slab_rows(model, workload)}
    top_kmalloc = max(rows.values(), key=lambda r: r.kmallocs)
    top_cache_alloc = max(rows.values(), key=lambda r: r.cache_allocs)
    assert top_kmalloc.cache == "kmalloc-cg-512"
    assert top_cache_alloc.cache == "skbuff_head_cache"
    assert MESSAGES <= top_kmalloc.kmallocs <= MESSAGES * 1.02
    assert MESSAGES <= top_cache_alloc.cache_allocs <= MESSAGES * 1.02
    assert rows.get("kmalloc-512") is None or rows["kmalloc-512"].kmallocs < MESSAGES // 100
    # the estimate is there, labelled, and a plausible share of the allocations
    assert top_kmalloc.method == METHOD_ESTIMATE
    assert 0 < top_kmalloc.slab_switches < top_kmalloc.switch_allocs


@needs_bpf
def test_per_cache_sums_equal_the_tracepoint_totals(hackbench):
    """Pseudo caches included ((no object) for kfree(NULL), (page allocator) for large kmalloc),
    the rows add up to every event the probe counted."""
    _, model, _, _, workload, tgids, _ = hackbench
    rows = slab_rows(model, workload)
    total = {tp: sum(getattr(d, f) for d in model.slab if d.tgid in tgids) for tp, f in FIELD.items()}
    assert sum(r.kmallocs for r in rows) == total["kmem:kmalloc"]
    assert sum(r.cache_allocs for r in rows) == total["kmem:kmem_cache_alloc"]
    assert sum(r.allocs for r in rows) == total["kmem:kmalloc"] + total["kmem:kmem_cache_alloc"]
    assert sum(r.frees for r in rows) == total["kmem:kfree"] + total["kmem:kmem_cache_free"]
    names = {r.cache for r in rows}
    assert "(no object)" in names  # kfree(NULL) is traced (kfree() traces before its NULL check)


@needs_bpf
def test_merged_caches_carry_the_aliases_sys_kernel_slab_links(hackbench):
    """hackbench touches merged caches (anon_vma_chain is merged with others of 64 bytes here); each
    alias is a name that /sys/kernel/slab links to the same directory as the cache's own name."""
    _, model, _, _, _, _, _ = hackbench

    def sysfs_dir(name):
        path = f"/sys/kernel/slab/{name}"
        return os.path.basename(os.readlink(path)) if os.path.islink(path) else name

    merged = [c for c in model.slab_caches.values() if c.aliases and os.path.exists(f"/sys/kernel/slab/{c.name}")]
    assert merged, "some cache the workload used is merged"
    for c in merged:
        home = sysfs_dir(c.name)
        assert c.aliases[0] == home and home.startswith(":")
        assert {sysfs_dir(a) for a in c.aliases[1:]} <= {home}
        linked = {n for n in os.listdir("/sys/kernel/slab") if not n.startswith(":") and sysfs_dir(n) == home}
        assert set(c.aliases[1:]) | {c.name} == linked


@needs_bpf
def test_cache_geometry_matches_sys_kernel_slab(hackbench):
    """s->oo read in BPF gives the order and objects per slab that /sys/kernel/slab shows."""
    _, model, _, _, _, _, _ = hackbench
    checked = 0
    for c in model.slab_caches.values():
        d = f"/sys/kernel/slab/{c.name}"
        if not os.path.isdir(d):
            continue  # destroyed since
        assert (c.order, c.objs_per_slab) == (int(open(f"{d}/order").read()), int(open(f"{d}/objs_per_slab").read()))
        sheaf = f"{d}/sheaf_capacity"
        if os.path.exists(sheaf):
            assert c.sheaf_capacity == int(open(sheaf).read())
        checked += 1
    assert checked >= 10


@needs_bpf
def test_sheaf_caches_are_labelled_without_an_estimate(hackbench):
    _, model, _, _, _, _, _ = hackbench
    rows = slab_rows(model)
    sheaves = [r for r in rows if r.sheaf_capacity > 0]
    if not os.path.exists("/sys/kernel/slab/vm_area_struct/sheaf_capacity"):
        pytest.skip("this kernel has no sheaves (6.18+)")
    assert sheaves, "vm_area_struct and maple_node use sheaves on 6.18"
    for r in sheaves:
        assert r.method == METHOD_SHEAVES and r.slow_signal is None and r.slab_switches == 0
    assert all(r.method == METHOD_ESTIMATE for r in rows if r.sheaf_capacity == 0 and r.addr > 16)


@needs_bpf
def test_list_lock_contention_is_attributed_to_its_cache(hackbench):
    """A contended lock inside a kmem_cache_node is matched to the cache whose s->node[] holds it;
    the slab table and the lock table count the same contentions."""
    _, model, _, _, _, _, _ = hackbench
    list_locks = [s for s in lock_stats(model) if s.name.startswith("&kmem_cache_node->list_lock")]
    assert list_locks, "hackbench on two CPUs contends on the slab list_lock"
    caches = {c.name for c in model.slab_caches.values()}
    for s in list_locks:
        assert s.name.endswith(")"), f"{s.name} is not attributed to a cache"
        assert s.name[len("&kmem_cache_node->list_lock ("):-1] in caches
        # the list_lock is taken on the slow path (partial lists, slab allocation, __slab_free)
        assert any("slab" in c.point or "partial" in c.point or "(not drawn" in c.point for c in s.callers), s.callers
    rows = slab_rows(model)
    assert sum(r.lock_contentions for r in rows) == sum(s.contentions for s in list_locks)
    assert sum(r.lock_wait_ns for r in rows) == sum(s.wait_total_ns for s in list_locks)


@needs_bpf
def test_slab_command_prints_a_slabinfo_table(hackbench):
    _, _, path, _, _, _, _ = hackbench
    out = run_stallscope("slab", str(path), "-n", "10", "--command-only").stdout.splitlines()
    assert out[0].startswith("SLUB: min_objects ")
    assert out[1].split()[:5] == ["CACHE", "ALIASES", "OBJECTS", "ALLOCS", "FREES"]
    assert out[2].split()[0] in ("kmalloc-cg-512", "skbuff_head_cache")
    table = [line for line in out if not line.startswith("data loss:")]  # what the probes lost comes last
    assert "%Fast" not in "\n".join(out) and "estimate" in table[-1]


@needs_bpf
def test_export_fills_the_slab_keys(hackbench):
    doc, _, _, _, _, _, _ = hackbench
    keys = {"cache", "aliases", "allocs", "frees", "slow_signal", "method", "order", "objs_per_slab"}
    assert doc["slab"] and all(keys <= set(e) for e in doc["slab"])
    cg512 = next(e for e in doc["slab"] if e["cache"] == "kmalloc-cg-512")
    assert cg512["method"] == "estimate: CPU-slab switches" and cg512["slow_signal"] == cg512["slab_switches"] > 0
    assert doc["meta"]["options"]["slab"]["boot"]["min_objects"] >= 4
    slab = doc["meta"]["probes"]["slab"]
    assert (slab["enabled"], slab["mechanism"]) == (True, "tp_btf")
    assert "slow path estimated (CPU-slab switches)" in slab["reason"]


@needs_bpf
def test_slab_group_is_off_by_default(tmp_path):
    from conftest import example

    doc, _, path = record_command(tmp_path, [example("sleeper"), "-n", "2", "-m", "5"])
    assert doc["meta"]["probes"]["slab"]["enabled"] is False
    assert doc["slab"] == []
    proc = run_stallscope("slab", str(path), check=False)
    assert proc.returncode == 2 and "--probes +slab" in proc.stderr


def test_recording_from_before_the_slab_tables_reads_as_empty(tmp_path):
    from synthetic import two_interval_recording, write_recording

    path = tmp_path / "old.stall"
    write_recording(path, *two_interval_recording())
    db = sqlite3.connect(str(path))
    db.execute("DROP TABLE slab")
    db.execute("DROP TABLE slab_caches")
    db.commit()
    db.close()
    model = load_model(str(path))
    assert model.slab == () and model.slab_caches == {}
    assert json.loads(run_stallscope("export", str(path)).stdout)["slab"] == []
