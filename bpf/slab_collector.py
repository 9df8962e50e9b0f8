"""The SLUB collector: loads slab.bpf.o and drains its per-(cache, process)
allocation and free counts into interval deltas, with each cache described
once (name, geometry, kmem_cache_node addresses) and joined with its
/sys/kernel/slab configuration and aliases.

Per-allocation probes cost real time (the group is opt-in; see its `cost` in
bpf/groups.py). A kernel without the kmem tracepoints turns the group off with
the reason; without bpf_get_kmem_cache() (before 6.13) kmalloc and kfree are
counted under one pseudo cache and the status says so.
"""

from __future__ import annotations

import ctypes
import os
import re

from stallscope.analyzer.sample import ProbeStatus, SlabCache, SlabDelta, TaskId
from stallscope.bpf import abi, features
from stallscope.bpf.collector import HealthDeltas, ProgramDeltas, _possible_cpus, object_path
from stallscope.bpf.groups import GroupDrain
from stallscope.bpf.libbpf import BpfError, BpfObject

SYSFS_SLAB = "/sys/kernel/slab"
SYSFS_FIELDS = ("order", "objs_per_slab", "min_partial", "cpu_partial", "sheaf_capacity", "objects", "slabs",
                "object_size", "slab_size")
TRACEPOINTS = ("kmem:kmalloc", "kmem:kmem_cache_alloc", "kmem:kfree", "kmem:kmem_cache_free")
_COUNT_FIELDS = tuple(name for name, _ in abi.SlabCounts._fields_)
_SLAB_KEY, _SLAB_COUNTS = abi.unpacker(abi.SlabKey), abi.unpacker(abi.SlabCounts)
# What the status says about the slow path: exact counts would need fentry on ___slab_alloc /
# __slab_free (not used by this version) or CONFIG_SLUB_STATS (alloc_slowpath in /sys/kernel/slab).
SLOW_PATH_NOTE = "slow path estimated (CPU-slab switches): exact counts need fentry on ___slab_alloc or CONFIG_SLUB_STATS"


def _read_int(path: str) -> int | None:
    """The first number of a sysfs attribute (`objects` reads `1234 N0=1234`)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class SysfsSlab:
    """/sys/kernel/slab: each cache's directory, its aliases and its tunables."""

    def __init__(self, root: str = SYSFS_SLAB):
        self.root = root
        self.scan()

    def scan(self) -> None:
        self.dir_of: dict[str, str] = {}
        try:
            names = os.listdir(self.root)
        except OSError:
            names = []
        for name in names:
            path = os.path.join(self.root, name)
            # a merged cache is one directory named by its properties (":0000512", ":A-0001280");
            # every name merged into it is a symlink to it (mm/slub.c sysfs_slab_alias())
            self.dir_of[name] = os.path.basename(os.readlink(path)) if os.path.islink(path) else name
        self.names_in: dict[str, list[str]] = {}
        for name, d in self.dir_of.items():
            if not name.startswith(":"):
                self.names_in.setdefault(d, []).append(name)

    def describe(self, name: str) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
        """(aliases, tunables) of the cache the kernel calls `name`; empty when sysfs lacks it."""
        if name not in self.dir_of:
            self.scan()  # a cache created since the last scan
        d = self.dir_of.get(name)
        if d is None:
            return (), ()
        aliases = tuple(sorted(n for n in self.names_in.get(d, ()) if n != name))
        if d != name:
            aliases = (d, *aliases)
        config = []
        for field in SYSFS_FIELDS:
            v = _read_int(os.path.join(self.root, d, field))
            if v is not None:
                config.append((field, v))
        return aliases, tuple(config)


def _present_cpus() -> int:
    try:
        text = open("/sys/devices/system/cpu/present").read().strip()
    except OSError:
        return os.cpu_count() or 1
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def boot_parameters(cmdline: str | None = None, cpus: int | None = None) -> dict:
    """SLUB's boot parameters and their effective values.

    mm/slub.c calculate_order(): with no slub_min_objects, min objects is 4 * (fls(nr_cpus) + 1),
    nr_cpus being the present CPUs; slub_max_order defaults to PAGE_ALLOC_COSTLY_ORDER (3).
    Both spellings are accepted (slab_* since 6.8, slub_* before)."""
    if cmdline is None:
        try:
            cmdline = open("/proc/cmdline").read()
        except OSError:
            cmdline = ""
    cpus = cpus or _present_cpus()
    given: dict[str, int] = {}
    for key in ("min_objects", "max_order", "min_order"):
        m = re.search(rf"(?:^|\s)sl[au]b_{key}=(\d+)", cmdline)
        if m:
            given[key] = int(m.group(1))
    default_min_objects = 4 * (cpus.bit_length() + 1)
    return {
        "cmdline": {f"slub_{k}": v for k, v in sorted(given.items())},
        "min_objects": given.get("min_objects") or default_min_objects,
        "min_objects_default": default_min_objects,
        "max_order": given.get("max_order", 3),
        "min_order": given.get("min_order", 0),
        "present_cpus": cpus,
    }


def _nr_node_ids() -> int:
    try:
        text = open("/sys/devices/system/node/possible").read().strip()
        return int(text.split(",")[-1].split("-")[-1]) + 1
    except (OSError, ValueError):
        return 1


class SlabCollector:
    def __init__(self, targ_tgid: int = 0, max_entries: int = 16384):
        self.targ_tgid = targ_tgid
        self.max_entries = max_entries
        self.obj: BpfObject | None = None
        self.nr_cpus = _possible_cpus()
        self.nr_node_ids = _nr_node_ids()
        self.list_lock_offset = 0
        self.kfunc = False
        self.sysfs: SysfsSlab | None = None
        self._health = HealthDeltas(abi.SlabHealth, prefix="slab.")
        self._programs = ProgramDeltas()
        self._prev: dict[bytes, bytes] = {}  # key -> its value's bytes at the last drain (all CPUs)
        self._retired: list[bytes] = []  # entries of exited processes, read for the last time
        self._described: set[int] = set()

    def start(self) -> ProbeStatus:
        """Load and attach; never raises for a kernel that cannot: the status says why."""
        missing = [n for n, c in features.tracepoints().items() if n in TRACEPOINTS and not c.ok]
        if missing:
            return ProbeStatus(False, "", f"no {', '.join(missing)} tracepoint in this kernel")
        k = features.kfuncs().get("bpf_get_kmem_cache")
        self.kfunc = bool(k and k.ok)
        obj = None
        try:
            obj = BpfObject(object_path("slab.bpf.o"))
            cfg = abi.SlabConfig(targ_tgid=self.targ_tgid, page_shift=(os.sysconf("SC_PAGE_SIZE")).bit_length() - 1,
                                 nr_node_ids=self.nr_node_ids, has_kmem_cache_kfunc=int(self.kfunc))
            image = obj.section_map(".rodata").initial_value()
            ctypes.memmove(image, ctypes.addressof(cfg), ctypes.sizeof(cfg))
            obj.map("counts").set_max_entries(self.counts_entries())
            obj.load()
            self.list_lock_offset = obj.program("list_lock_offset").test_run()
            for prog in obj.programs():
                if prog.section.startswith("tp_btf/"):
                    obj.attach(prog)
        except BpfError as exc:
            if obj is not None:
                obj.close()
            return ProbeStatus(False, "", exc.message)
        self.obj = obj
        self.sysfs = SysfsSlab()
        notes = [SLOW_PATH_NOTE]
        if not self.kfunc:
            notes.insert(0, "no bpf_get_kmem_cache (6.13+): kmalloc and kfree are not attributed to caches")
        return ProbeStatus(True, "tp_btf", "; ".join(notes))

    def counts_entries(self) -> int:
        """The preallocated per-CPU counts map holds entries x CPUs values: at most 64 MiB."""
        slot = ctypes.sizeof(abi.SlabCounts) + (-ctypes.sizeof(abi.SlabCounts)) % 8
        return max(1024, min(self.max_entries, (64 << 20) // (slot * self.nr_cpus)))

    def meta_options(self) -> dict:
        """What the recording keeps about SLUB on this machine, beside the per-cache records."""
        return {"boot": boot_parameters(), "list_lock_offset": self.list_lock_offset,
                "nr_node_ids": self.nr_node_ids, "page_size": os.sysconf("SC_PAGE_SIZE"),
                "kmem_cache_kfunc": self.kfunc}

    def drain(self, dead: set[TaskId]) -> GroupDrain:
        """Deltas since the last drain. Entries of processes whose leader exited are read one last time
        and deleted at the next drain; an event in between (a thread outliving its leader) is lost,
        a later one starts a new entry from zero."""
        assert self.obj is not None
        m = self.obj.map("counts")
        slot = ctypes.sizeof(abi.SlabCounts) + (-ctypes.sizeof(abi.SlabCounts)) % 8
        exited = {t.pid for t in dead}
        m.delete_many(self._retired)  # read for the last time one drain ago
        self._retired = []
        out = []
        counts, offsets = _SLAB_COUNTS.unpack_from, range(0, slot * self.nr_cpus, slot)
        for kraw, vraw in m.items_batch(value_size=slot * self.nr_cpus):
            cache, tgid, exiting = _SLAB_KEY.unpack(kraw)
            prev = self._prev.get(kraw)
            if prev is None or prev != vraw:  # unchanged (most, between a process's bursts): not decoded
                now = [sum(col) for col in zip(*(counts(vraw, off) for off in offsets))]
                before = ([sum(col) for col in zip(*(counts(prev, off) for off in offsets))] if prev is not None
                          else (0,) * len(now))
                delta = [a - b for a, b in zip(now, before)]
                if any(delta):
                    out.append(SlabDelta(cache, tgid, bool(exiting), *delta))
            if tgid and tgid in exited:
                self._retired.append(kraw)
                self._prev.pop(kraw, None)
            else:
                self._prev[kraw] = vraw
        caches = self._new_caches({d.cache for d in out})
        return GroupDrain({"slab": tuple(out), "slab_caches": caches}, (), self._health.drain(self.obj),
                          self._programs.drain(self.obj))

    def _new_caches(self, addrs: set[int]) -> tuple[SlabCache, ...]:
        todo = {a for a in addrs if a > abi.SLAB_CACHE_UNKNOWN and a not in self._described}
        if not todo:
            return ()
        out = []
        m = self.obj.map("caches")
        for a in sorted(todo):
            raw = m.lookup(a.to_bytes(8, "little"))
            if raw is None:  # the caches map was full: counted in slab.cache_map_full
                continue
            info = abi.decode(abi.SlabCacheInfo, raw)
            name = info.name.decode(errors="replace")
            aliases, config = self.sysfs.describe(name) if self.sysfs else ((), ())
            out.append(SlabCache(
                addr=a, name=name, object_size=info.object_size, size=info.size, order=info.order,
                objs_per_slab=info.objs_per_slab, min_order=info.min_order, sheaf_capacity=info.sheaf_capacity,
                cpu_partial=info.cpu_partial, nodes=tuple(n for n in info.node[: min(self.nr_node_ids, abi.SLAB_MAX_NODES)]),
                aliases=aliases, sysfs=config))
            self._described.add(a)
        return tuple(out)

    def close(self) -> None:
        if self.obj:
            self.obj.close()
            self.obj = None
