"""SLUB caches as `slabinfo -AD` would show them, from the slab probe's per-(cache, process) counts.

Every allocation and free is charged to the cache that holds the object, so
kmalloc appears under the cache that served it (kmalloc-cg-512 for an
accounted allocation), and a merged cache under one name with its aliases.

The slow path is not observable without fentry on ___slab_alloc/__slab_free
or CONFIG_SLUB_STATS. What is shown instead, labelled as such, is the
CPU-slab switch estimate (bpf/slab_switch.bpf.h): how often one CPU's
allocations from a cache moved to another slab. It is never a fast-path
percentage. Caches served by sheaves allocate from per-CPU arrays of objects
that need not come from one slab: they are labelled, with no estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import SlabCache, TaskId
from stallscope.analyzer.scope import in_scope

SLAB_CACHE_NO_OBJECT, SLAB_CACHE_PAGE_ALLOC, SLAB_CACHE_UNKNOWN = 1, 2, 3
LOCK_KIND_SLAB = 2

PSEUDO_CACHES = {
    SLAB_CACHE_NO_OBJECT: "(no object)",  # kfree(NULL), ZERO_SIZE_PTR, a failed allocation
    SLAB_CACHE_PAGE_ALLOC: "(page allocator)",  # large kmalloc beyond the biggest kmalloc cache
    SLAB_CACHE_UNKNOWN: "(kmalloc: cache unknown)",  # no bpf_get_kmem_cache() before 6.13
}

METHOD_EXACT = "exact"
METHOD_ESTIMATE = "estimate: CPU-slab switches"
METHOD_SHEAVES = "sheaves"

BLIND_SPOTS = (
    "a refill from the same slab (remote frees emptied and refilled it) is no switch",
    "a fallback-order slab (s->min) is judged with the preferred order's size",
    "an allocation that migrates before its tracepoint is charged to the new CPU",
    "bulk allocations (kmem_cache_alloc_bulk) are not traced",
    "caches served by sheaves are not estimated",
)


@dataclass(frozen=True)
class SlabRow:
    cache: str
    addr: int  # kmem_cache address; below 16 a pseudo cache
    aliases: tuple[str, ...]
    kmallocs: int
    cache_allocs: int
    kfrees: int
    cache_frees: int
    bytes_req: int
    bytes_alloc: int
    failed: int
    slab_switches: int
    switch_allocs: int
    method: str
    order: int | None
    objs_per_slab: int | None
    object_size: int | None
    sheaf_capacity: int = 0
    objects: int | None = None  # objects in use (sysfs) when the probe first saw the cache
    config: dict = field(default_factory=dict)  # /sys/kernel/slab tunables then
    lock_contentions: int = 0  # waits on the cache's kmem_cache_node list_lock (locks group)
    lock_wait_ns: int = 0
    allocs_at_exit: int = 0  # the parts of allocs and frees made by exiting tasks (PF_EXITING)
    frees_at_exit: int = 0

    @property
    def allocs(self) -> int:
        return self.kmallocs + self.cache_allocs

    @property
    def frees(self) -> int:
        return self.kfrees + self.cache_frees

    @property
    def slow_signal(self) -> int | None:
        """The slow-path signal by `method`: switches for the estimate; None where there is none."""
        return self.slab_switches if self.method == METHOD_ESTIMATE else None

    @property
    def switch_pct(self) -> float | None:
        if self.method != METHOD_ESTIMATE or not self.switch_allocs:
            return None
        return 100.0 * self.slab_switches / self.switch_allocs


def method_of(cache: SlabCache | None, addr: int) -> str:
    if addr in PSEUDO_CACHES:
        return "unavailable: not a slab cache"
    if cache is None:
        return "unavailable: cache not described (caches map full)"
    if cache.sheaf_capacity > 0:
        return METHOD_SHEAVES
    return METHOD_ESTIMATE


def list_lock_caches(model: Model) -> dict[int, SlabCache]:
    """The address of each kmem_cache_node's list_lock -> the cache owning that node."""
    offset = (model.meta.options.get("slab") or {}).get("list_lock_offset", 0)
    return {node + offset: c for c in model.slab_caches.values() for node in c.nodes if node}


def tgids_of(model: Model, tasks: set[TaskId] | None) -> set[int] | None:
    if tasks is None:
        return None
    return {model.tasks[t].info.tgid for t in tasks if t in model.tasks}


def slab_rows(model: Model, tasks: set[TaskId] | None = None) -> list[SlabRow]:
    """One row per cache (pseudo caches included, so the sums equal the tracepoint counts), most
    active first. `tasks` limits the counts to those tasks' processes."""
    tgids = tgids_of(model, tasks)
    acc: dict[int, list[int]] = {}
    at_exit: dict[int, list[int]] = {}
    for d in model.slab:
        if tgids is not None and d.tgid not in tgids:
            continue
        if d.exiting:
            e = at_exit.setdefault(d.cache, [0, 0])
            e[0] += d.allocs
            e[1] += d.frees
        a = acc.setdefault(d.cache, [0] * 9)
        for i, v in enumerate((d.kmallocs, d.cache_allocs, d.kfrees, d.cache_frees, d.bytes_req, d.bytes_alloc,
                               d.failed, d.slab_switches, d.switch_allocs)):
            a[i] += v
    locks: dict[int, list[int]] = {}
    owners = list_lock_caches(model)
    lock_scope = in_scope(model, tasks)  # as in the lock table: never stallscope's own contentions
    # (no cache node known, as where the slab probes were off: no lock is a list_lock, and the lock table's hundreds
    # of thousands of keys are not read)
    for w in model.lock_waits if owners else ():
        if w.kind != LOCK_KIND_SLAB or (lock_scope is not None and w.task not in lock_scope):
            continue
        c = owners.get(w.addr)
        if c is not None:
            e = locks.setdefault(c.addr, [0, 0])
            e[0] += w.count
            e[1] += w.total_ns
    rows = []
    for addr in set(acc) | set(locks):
        a = acc.get(addr, [0] * 9)
        c = model.slab_caches.get(addr)
        sysfs = dict(c.sysfs) if c else {}
        name = PSEUDO_CACHES.get(addr) or (c.name if c else f"{addr:#x}")
        rows.append(SlabRow(
            name, addr, c.aliases if c else (), *a, method=method_of(c, addr),
            order=c.order if c else None, objs_per_slab=c.objs_per_slab if c else None,
            object_size=c.object_size if c else None, sheaf_capacity=c.sheaf_capacity if c else 0,
            objects=sysfs.get("objects"), config={k: v for k, v in sysfs.items() if k != "objects"},
            lock_contentions=locks.get(addr, [0, 0])[0], lock_wait_ns=locks.get(addr, [0, 0])[1],
            allocs_at_exit=at_exit.get(addr, [0, 0])[0], frees_at_exit=at_exit.get(addr, [0, 0])[1]))
    rows.sort(key=lambda r: (-(r.allocs + r.frees), -r.lock_wait_ns, r.cache))
    return rows


def boot_summary(model: Model) -> str:
    """The effective SLUB boot parameters, as recorded."""
    boot = (model.meta.options.get("slab") or {}).get("boot")
    if not boot:
        return "SLUB boot parameters: not recorded"
    given = boot.get("cmdline") or {}
    mo = boot["min_objects"]
    src = "slub_min_objects=" + str(given["slub_min_objects"]) if "slub_min_objects" in given else \
        f"default 4 * (fls({boot['present_cpus']} CPUs) + 1)"
    return (f"SLUB: min_objects {mo} ({src}), max_order {boot['max_order']}"
            f"{' (slub_max_order)' if 'slub_max_order' in given else ' (default)'}, min_order {boot['min_order']}")
