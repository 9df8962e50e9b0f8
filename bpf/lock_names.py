"""Names for locks inside slab objects: the struct field that holds the lock, from the cache's geometry
and the kernel's BTF, and for a directory's i_rwsem the directory's path.

The lock probe gives, for a lock in a slab object, the cache's name and geometry (bpf/locks.h
lock_object). A slab is a naturally aligned block of PAGE_SIZE << order bytes (fallback order
min_order), its objects `slot_size` apart after `red_left_pad`: so the lock's offset in its object
follows from its address. The structs a cache holds come from its name, its aliases (a merged cache,
`:0000512`, serves several) and a small table; a name is accepted only where the offset lands exactly on
a lock-typed field of exactly one candidate (`ext4_inode_info.vfs_inode.i_rwsem`). A slab's order is not
known, so the two orders give two offsets, one of them wrong; where both land on lock fields, the one of the
contention's kind of lock (a spinning lock, a mutex, an rwsem: lock_kind) is taken; where both are of that kind,
the one its call site took in the contentions the geometry did name (SiteFields). Otherwise the lock stays
"inside an object of the merged cache X" and is named by its contending function.

Resolved at record time, on the machine the locks lived on, and stored in the recording.
"""

from __future__ import annotations

import os
import stat

from stallscope.bpf import abi
from stallscope.bpf.btf import LOCK_KINDS, BtfError, KernelBtf, running_kernel

SLAB_SYSFS = "/sys/kernel/slab"
# caches whose objects' struct is not named after them (the others are: task_struct, mm_struct, ...)
CACHE_STRUCTS = {
    "ext4_inode_cache": "ext4_inode_info", "inode_cache": "inode", "shmem_inode_cache": "shmem_inode_info",
    "proc_inode_cache": "proc_inode", "sock_inode_cache": "socket_alloc", "file_lock_ctx": "file_lock_context",
    "file_lock_cache": "file_lock", "sighand_cache": "sighand_struct", "signal_cache": "signal_struct",
    "files_cache": "files_struct", "fs_cache": "fs_struct", "bdev_cache": "bdev_inode", "xfs_inode": "xfs_inode",
    "btrfs_inode": "btrfs_inode", "fuse_inode": "fuse_inode", "nfs_inode_cache": "nfs_inode",
    "ovl_inode": "ovl_inode", "kernfs_node_cache": "kernfs_node", "TCP": "tcp_sock", "TCPv6": "tcp6_sock",
    "UDP": "udp_sock", "UDPv6": "udp6_sock", "UNIX": "unix_sock", "RAW": "raw_sock", "RAWv6": "raw6_sock",
    "mqueue_inode_cache": "mqueue_inode_info", "hugetlbfs_inode_cache": "hugetlbfs_inode_info",
    "dax_cache": "dax_device", "ecryptfs_inode_cache": "ecryptfs_inode_info", "f2fs_inode_cache": "f2fs_inode_info",
    "vm_area_struct": "vm_area_struct", "request_queue": "request_queue", "eventpoll_epi": "epitem",
    "eventpoll_pwq": "eppoll_entry", "pid": "pid", "cred_jar": "cred", "mnt_cache": "mount",
}
DIRECTORY_SEARCH_ENTRIES = 5000  # per directory looked for: the waiters' cwds and open descriptors, 2 levels down


def lock_kind(flags: int) -> str:
    """The kind of lock (bpf/btf.py LOCK_KINDS) a contention's flags say it was on, "" when they do not say."""
    if flags & (abi.LCB_F_MUTEX | abi.LCB_F_RT):
        return "mutex"
    if flags & abi.LCB_F_SPIN:
        return "spin"
    if flags & (abi.LCB_F_READ | abi.LCB_F_WRITE | abi.LCB_F_PERCPU):
        return "rwsem"
    return ""


def _aliases() -> dict[str, tuple[str, ...]]:
    """Each cache name -> every name of its cache (merged caches: the symlinks to one directory)."""
    by_target: dict[str, list[str]] = {}
    try:
        entries = list(os.scandir(SLAB_SYSFS))
    except OSError:
        return {}
    for e in entries:  # an alias is a symlink to its cache's directory beside it (`:A-0000256`)
        try:
            target = os.path.basename(os.readlink(e.path)) if e.is_symlink() else e.name
        except OSError:
            continue
        by_target.setdefault(target, []).append(e.name)
    out = {}
    for names in by_target.values():
        names = tuple(sorted(n for n in names if not n.startswith(":")))
        for n in names:
            out[n] = names
    return out


class LockNamer:
    def __init__(self, btf_path: str | None = None, page_size: int | None = None):
        self._btf_path = btf_path
        self._btf: KernelBtf | None = None
        self._btf_failed = False
        self._aliases: dict[str, tuple[str, ...]] | None = None
        self.page_size = page_size or os.sysconf("SC_PAGE_SIZE")
        self._fields: dict[tuple, tuple[str, ...]] = {}
        self._dirs: dict[tuple[int, int], str] = {}

    def _kernel_btf(self) -> KernelBtf | None:
        if self._btf is None and not self._btf_failed:
            try:
                self._btf = KernelBtf.load(self._btf_path) if self._btf_path else running_kernel()
            except BtfError:
                self._btf_failed = True
        return self._btf

    def candidates(self, cache: str) -> tuple[str, ...]:
        """The structs objects of this cache may be: its names' structs (aliases of a merged cache)."""
        if self._aliases is None:
            self._aliases = _aliases()
        names = self._aliases.get(cache, (cache,))
        return tuple(dict.fromkeys(CACHE_STRUCTS.get(n, n) for n in (cache, *names)))

    def offsets(self, addr: int, slot_size: int, red_left_pad: int, order: int, min_order: int) -> set[int]:
        """The lock's offset in its object, for a slab of the preferred order and of the fallback one."""
        out = set()
        if slot_size <= 0:
            return out
        for o in {order, min_order}:
            in_slab = addr & ((self.page_size << o) - 1)
            if in_slab >= red_left_pad:
                out.add((in_slab - red_left_pad) % slot_size)
        return out

    def describe(self, cache: str, addr: int, slot_size: int, red_left_pad: int, order: int, min_order: int,
                 dev: int = 0, ino: int = 0, mode: int = 0, pids=(), kind: str = "") -> tuple[str, str]:
        """(field, where): the struct field holding the lock, or ""; and where: a directory's path for
        a directory's i_rwsem, or, with no field, the cache's names when it is merged. `kind`: lock_kind's."""
        field = self.field(cache, addr, slot_size, red_left_pad, order, min_order, kind)
        if field.endswith(".i_rwsem"):
            return field, self.directory(dev, ino, mode, pids)
        if not field:
            return "", self.unnamed(cache)
        return field, ""

    def unnamed(self, cache: str) -> str:
        """Where a lock of this cache's objects is, when no field names it."""
        names = self.candidates(cache)
        if len(names) > 1:
            return f"in an object of the merged cache {cache} ({', '.join(names)})"
        return f"in a {cache} object"

    def field(self, cache: str, addr: int, slot_size: int, red_left_pad: int, order: int, min_order: int,
              kind: str = "") -> str:
        """`struct.field.path` of the lock at `addr`, or "" when no single candidate has a lock there (of the
        contention's `kind` of lock, lock_kind's, where several have)."""
        found = self.fields(cache, addr, slot_size, red_left_pad, order, min_order, kind)
        return found[0] if len(found) == 1 else ""

    def fields(self, cache: str, addr: int, slot_size: int, red_left_pad: int, order: int, min_order: int,
               kind: str = "") -> tuple[str, ...]:
        """Every `struct.field.path` that may hold the lock at `addr`: a lock field at one of its offsets in one of
        the cache's structs (of the contention's `kind` of lock where several are); one, or none, for most."""
        offs = self.offsets(addr, slot_size, red_left_pad, order, min_order)
        key = (cache, frozenset(offs), kind)
        hit = self._fields.get(key)
        if hit is not None:
            return hit
        btf = self._kernel_btf()
        found: dict[str, str] = {}  # field -> its lock type
        if btf is not None:
            for struct in self.candidates(cache):
                for off in offs:
                    typed = btf.typed_lock_at(struct, off)
                    if typed:
                        found[f"{struct}.{typed[0]}"] = typed[1]
        if len(found) > 1 and kind:
            found = {f: t for f, t in found.items() if LOCK_KINDS[t] == kind}
        names = tuple(sorted(found))
        if len(self._fields) > 1 << 14:
            self._fields.clear()
        self._fields[key] = names
        return names

    def directory(self, dev: int, ino: int, mode: int, pids) -> str:
        """The path of the directory (kernel dev_t, inode number) where a waiter can see it: its cwd or
        an open descriptor, or two levels under its cwd; "" when not found (or not a directory)."""
        if not stat.S_ISDIR(mode) or not ino:
            return ""
        key = (dev, ino)
        if key in self._dirs:
            return self._dirs[key]
        want_dev = os.makedev(dev >> 20, dev & 0xFFFFF)
        found = ""
        for pid in pids:
            found = _find_directory(pid, want_dev, ino)
            if found:
                break
        self._dirs[key] = found
        return found


class SiteFields:
    """The field a call site takes its lock in, learnt from the contentions the geometry named, for those it left
    between two fields (a slab's order is not known: one of its two offsets is wrong, and both may land on a lock
    of the same kind). A call site (`sym+0xoff` of a kernel stack's contention point) that took the lock at one
    field of a cache's objects, and never at another, takes it there again: a contention left between that field
    and another is named by it. A site seen at two fields names nothing."""

    MAX_SITES = 1 << 14

    def __init__(self) -> None:
        self._by_site: dict[tuple[str, str, str], str] = {}  # (cache, kind, site) -> field, or "" for two

    def learn(self, cache: str, kind: str, site: str, field: str) -> None:
        if not site or not field:
            return
        key = (cache, kind, site)
        was = self._by_site.get(key)
        if was is None:
            if len(self._by_site) >= self.MAX_SITES:
                self._by_site.clear()
            self._by_site[key] = field
        elif was != field:
            self._by_site[key] = ""

    def field(self, cache: str, kind: str, site: str, candidates: tuple[str, ...]) -> str:
        """The one of `candidates` this site takes its lock in, or ""."""
        learnt = self._by_site.get((cache, kind, site), "") if site else ""
        return learnt if learnt in candidates else ""


def _find_directory(pid: int, dev: int, ino: int) -> str:
    roots = []
    try:
        roots.append(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return ""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                roots.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                continue
    except OSError:
        pass
    for path in roots:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_dev == dev and st.st_ino == ino and stat.S_ISDIR(st.st_mode):
            return path
    budget = DIRECTORY_SEARCH_ENTRIES
    level = [roots[0]]
    for _depth in range(2):
        nxt = []
        for d in level:
            try:
                with os.scandir(d) as it:
                    for e in it:
                        budget -= 1
                        if budget < 0:
                            return ""
                        if e.inode() == ino and e.is_dir(follow_symlinks=False):
                            try:
                                if e.stat(follow_symlinks=False).st_dev == dev:
                                    return e.path
                            except OSError:
                                continue
                        if e.is_dir(follow_symlinks=False):
                            nxt.append(e.path)
            except OSError:
                continue
        level = nxt
    return ""
