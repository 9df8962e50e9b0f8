"""Locks inside slab objects named by the struct field that holds them (BTF), lock_stat's classes, and
a contention split into on a CPU, blocked and runnable."""

from __future__ import annotations

import os
import struct

import pytest

from conftest import needs_bpf, record_command
from stallscope.analyzer.load import load_model
from stallscope.analyzer.locks import lock_stats
from stallscope.bpf.btf import LOCK_KINDS, STRUCT, UNION, BtfError, KernelBtf
from stallscope.bpf.lock_names import LockNamer

needs_btf = pytest.mark.skipif(not os.path.exists("/sys/kernel/btf/vmlinux"), reason="this kernel has no BTF")


def _offset(btf: KernelBtf, struct: str, *path: str) -> int:
    off, name = 0, struct
    for field in path:
        t = btf.types[btf.struct_id(name)]
        m = next(m for m in t[3] if m.name == field)
        off += m.offset
        name = btf.types[btf._resolve(m.type_id)[0]][1]
    return off


@needs_btf
def test_a_lock_is_found_at_its_fields_offset_and_only_there():
    btf = KernelBtf.load()
    i_rwsem = _offset(btf, "inode", "i_rwsem")
    assert btf.lock_at("inode", i_rwsem) == "i_rwsem"
    assert btf.lock_at("inode", i_rwsem + 8) is None  # inside the rwsem: not where a lock starts
    assert btf.lock_at("inode", _offset(btf, "inode", "i_ino")) is None  # not a lock
    vfs = _offset(btf, "ext4_inode_info", "vfs_inode")
    assert btf.lock_at("ext4_inode_info", vfs + i_rwsem) == "vfs_inode.i_rwsem"
    assert btf.lock_at("ext4_inode_info", _offset(btf, "ext4_inode_info", "i_data_sem")) == "i_data_sem"
    lru = _offset(btf, "mem_cgroup_per_node", "lruvec") + _offset(btf, "lruvec", "lru_lock")
    assert btf.lock_at("mem_cgroup_per_node", lru) == "lruvec.lru_lock"


@needs_btf
def test_types_decoded_when_read_are_those_of_the_whole_section_and_a_cut_one_is_refused():
    """The parse notes where each type begins and decodes it when first read: every struct read back has
    members inside its size, in order; a section cut inside a type, or left with bytes over, is not BTF."""
    data = open("/sys/kernel/btf/vmlinux", "rb").read()
    btf = KernelBtf.parse(data)
    structs = 0
    for type_id in range(1, len(btf.types)):
        t = btf.types[type_id]
        if t[0] in (STRUCT, UNION) and t[1]:
            structs += 1
            assert all(0 <= m.offset <= t[2] for m in t[3]), t[1]
            assert [m.offset for m in t[3]] == sorted(m.offset for m in t[3]) or t[0] == UNION, t[1]
    assert structs > 1000
    assert btf.types[btf.struct_id("inode")][1] == "inode"
    type_len = struct.unpack_from("<I", data, 12)[0]  # btf_header.type_len
    for cut in (type_len - 4, type_len - 13):  # a type's members cut short; a type's header cut short
        bad = bytearray(data)
        struct.pack_into("<I", bad, 12, cut)
        with pytest.raises(BtfError):
            KernelBtf.parse(bytes(bad))
    with pytest.raises(BtfError, match="past its end"):  # a file cut short: an error, not struct's
        KernelBtf.parse(data[:len(data) // 2])


@needs_btf
def test_the_field_follows_from_the_address_and_the_caches_geometry():
    """A slab of order 2 (16 KiB) with 1 KiB slots after a 64-byte red zone: the lock 3 slots in, at
    i_rwsem's offset in its inode."""
    btf = KernelBtf.load()
    namer = LockNamer()
    off = _offset(btf, "inode", "i_rwsem")
    slab = 0xFFFF888100000000 + 7 * (4096 << 2)
    addr = slab + 64 + 3 * 1024 + off
    assert off in namer.offsets(addr, 1024, 64, 2, 0)  # and where a fallback order-0 slab would put it
    assert namer.field("inode_cache", addr, 1024, 64, 2, 2) == "inode.i_rwsem"
    assert namer.field("inode_cache", addr + 8, 1024, 64, 2, 2) == ""  # not at a lock's start


@needs_btf
def test_where_both_slab_orders_land_on_a_lock_the_contentions_kind_of_lock_decides():
    """A slab's order is not known: the preferred order and the fallback give two offsets, one wrong. Where both
    land on locks, of a mutex and of a spinlock, the contention's flags say which it was on; of one kind, none."""
    from stallscope.bpf.lock_names import lock_kind

    btf = KernelBtf.load()
    locks = {}  # kind -> (offset, field) of mm_struct's first lock of that kind under 2 KiB
    for off in range(2048):
        typed = btf.typed_lock_at("mm_struct", off)
        kind = typed and LOCK_KINDS[typed[1]]
        if kind and kind not in locks:
            locks[kind] = (off, f"mm_struct.{typed[0]}")
    (mutex_off, mutex), (spin_off, spin) = locks["mutex"], locks["spin"]
    # an order-1 slab with this slot size puts its second object's mutex where an order-0 one would see the spinlock
    slot = 4096 - mutex_off + spin_off
    addr = 0xFFFF888100000000 + slot + mutex_off
    namer = LockNamer()
    assert namer.offsets(addr, slot, 0, 1, 0) == {mutex_off, spin_off}
    assert namer.field("mm_struct", addr, slot, 0, 1, 0) == ""  # two locks: no name
    assert namer.field("mm_struct", addr, slot, 0, 1, 0, lock_kind(32)) == mutex  # LCB_F_MUTEX
    assert namer.field("mm_struct", addr, slot, 0, 1, 0, lock_kind(1)) == spin  # LCB_F_SPIN
    assert namer.field("mm_struct", addr, slot, 0, 1, 0, lock_kind(4)) == ""  # an rwsem: neither
    # every candidate, as a call site's field is looked for among them (SiteFields)
    assert namer.fields("mm_struct", addr, slot, 0, 1, 0) == tuple(sorted((mutex, spin)))
    assert namer.fields("mm_struct", addr, slot, 0, 1, 0, lock_kind(1)) == (spin,)
    assert namer.fields("mm_struct", addr + 1, slot, 0, 1, 0) == ()


def test_a_call_site_names_the_field_it_took_elsewhere_among_a_contentions_two_candidates():
    """socket_alloc's wait-queue lock and its inode's i_lock are both spinlocks: where the two slab orders land on
    one each, prepare_to_wait's contention is named by the field the geometry named for it in another object."""
    from stallscope.bpf.lock_names import SiteFields

    wq, ilock, other = "socket_alloc.socket.wq.wait.lock", "socket_alloc.vfs_inode.i_lock", "socket_alloc.x.lock"
    sites = SiteFields()
    assert sites.field("sock_inode_cache", "spin", "prepare_to_wait+0x21", (wq, ilock)) == ""  # nothing learnt yet
    sites.learn("sock_inode_cache", "spin", "prepare_to_wait+0x21", wq)
    sites.learn("sock_inode_cache", "spin", "", ilock)  # no call site: nothing learnt
    assert sites.field("sock_inode_cache", "spin", "prepare_to_wait+0x21", (wq, ilock)) == wq
    assert sites.field("sock_inode_cache", "spin", "prepare_to_wait+0x21", (ilock, other)) == ""  # not a candidate
    assert sites.field("sock_inode_cache", "spin", "finish_wait+0x40", (wq, ilock)) == ""  # another site
    assert sites.field("UNIX", "spin", "prepare_to_wait+0x21", (wq, ilock)) == ""  # another cache
    assert sites.field("sock_inode_cache", "mutex", "prepare_to_wait+0x21", (wq, ilock)) == ""  # another kind
    sites.learn("sock_inode_cache", "spin", "prepare_to_wait+0x21", wq)
    assert sites.field("sock_inode_cache", "spin", "prepare_to_wait+0x21", (wq, ilock)) == wq
    sites.learn("sock_inode_cache", "spin", "prepare_to_wait+0x21", ilock)  # a site seen at two fields names none
    sites.learn("sock_inode_cache", "spin", "prepare_to_wait+0x21", wq)
    assert sites.field("sock_inode_cache", "spin", "prepare_to_wait+0x21", (wq, ilock)) == ""


@needs_btf
def test_a_merged_cache_names_a_lock_only_when_one_candidate_has_a_lock_there():
    """file_lock_ctx is merged into another cache of its size here; its objects' flc_lock is at 0."""
    namer = LockNamer()
    namer._aliases = {"ftrace_event_field": ("file_lock_ctx", "ftrace_event_field"),
                      "file_lock_ctx": ("file_lock_ctx", "ftrace_event_field")}
    assert namer.candidates("ftrace_event_field") == ("ftrace_event_field", "file_lock_context")
    slab = 0xFFFF888100000000
    assert namer.field("ftrace_event_field", slab + 5 * 64, 64, 0, 0, 0) == "file_lock_context.flc_lock"
    field, where = namer.describe("ftrace_event_field", slab + 5 * 64 + 24, 64, 0, 0, 0)
    assert field == "" and where == "in an object of the merged cache ftrace_event_field (ftrace_event_field, file_lock_context)"


@pytest.mark.skipif(not os.path.isdir("/sys/kernel/slab"), reason="this kernel has no /sys/kernel/slab (SLUB sysfs)")
def test_a_merged_caches_names_are_those_whose_sysfs_entries_resolve_to_one_directory():
    """Each cache name's aliases, read from the symlinks' targets, are what resolving every entry of
    /sys/kernel/slab gives: the names whose paths lead to one directory, those of the directories themselves
    (`:A-0000256`) left out."""
    from stallscope.bpf.lock_names import SLAB_SYSFS, _aliases

    by_target: dict[str, list[str]] = {}
    for e in os.scandir(SLAB_SYSFS):
        by_target.setdefault(os.path.realpath(e.path), []).append(e.name)
    expected = {n: names for names in (tuple(sorted(n for n in v if not n.startswith(":"))) for v in by_target.values())
                for n in names}
    got = _aliases()
    assert got == expected
    with open("/proc/cmdline") as f:
        if "slab_nomerge" not in f.read():  # caches are merged: some names share a directory
            assert any(len(names) > 1 for names in got.values())


@needs_bpf
def test_stress_ng_dir_contends_on_its_directories_i_rwsem_named_by_field_and_path(tmp_path):
    """stress-ng's dir stressor creates and removes directories in its own directory: the lock is that
    directory's i_rwsem, one lock_stat class with the directories as its instances. At default
    settings."""
    _, _, path = record_command(tmp_path, ["stress-ng", "--dir", "2", "-t", "3", "--temp-path", str(tmp_path)],
                                defaults=True)
    model = load_model(str(path))
    cmd = model.descendants(model.meta.options["command"]["pid"])
    stats = lock_stats(model, tasks=cmd, kind="kernel")
    top = stats[0]
    assert top.name == "&ext4_inode_info->vfs_inode.i_rwsem", [s.name for s in stats[:5]]
    assert any(str(tmp_path) in where for _a, where, _ns in top.instances), top.instances
    assert any(c.point.startswith(("do_rmdir", "filename_create", "iterate_dir", "lookup")) for c in top.callers)


@needs_bpf
def test_a_tasks_blocked_time_on_locks_never_exceeds_its_blocked_time(tmp_path):
    """stress-ng's flock stressor on 2 CPUs: lock waits are mostly run-queue wait. Split by the waiter's
    state, each thread's blocked part of its lock waits stays within what the scheduler saw it blocked
    (a little slack for a wait charged across an interval's edge), and every split adds up."""
    _, _, path = record_command(tmp_path, ["stress-ng", "--flock", "4", "-t", "3", "--temp-path", str(tmp_path)],
                                defaults=True)
    model = load_model(str(path))
    blocked: dict = {}
    for w in model.lock_waits:
        assert w.split and w.blocked_ns + w.runnable_ns + w.spin_ns == w.total_ns
        blocked[w.task] = blocked.get(w.task, 0) + w.blocked_ns
    for f in model.futex_waits:
        assert f.split and f.blocked_ns + f.runnable_ns <= f.total_ns
        blocked[f.task] = blocked.get(f.task, 0) + f.blocked_ns
    for task, ns in blocked.items():
        off = model.tasks[task].offcpu_ns if task in model.tasks else 0
        assert ns <= off + 20_000_000, (task, ns, off)
    flc = [s for s in lock_stats(model, kind="kernel") if s.name == "&file_lock_context->flc_lock"]
    assert flc and flc[0].blocked_ns == 0 and flc[0].spin_ns == flc[0].wait_total_ns  # a spinlock: on a CPU
    sleepy = max(lock_stats(model, kind="kernel"), key=lambda s: s.sleep_ns)
    assert sleepy.runnable_ns > 0 and sleepy.blocked_ns + sleepy.runnable_ns == sleepy.sleep_ns
