"""The running kernel's BTF (/sys/kernel/btf/vmlinux), read for struct layouts: which field of which
struct lies at an offset. Used to name a lock by the field that holds it (a slab object's
`ext4_inode_info.vfs_inode.i_rwsem`), from the kernel's own member offsets: offsets compiled into a
program from a vmlinux.h can differ (Debian's bpftool emits some packed enums at full size).

Only what that needs is decoded: struct and union members, and the chains of typedefs, qualifiers and
arrays between them. Parsed once per process (`running_kernel`), each type decoded when first read (the
whole section's one pass takes about 0.05 s); types are kept as tuples.
"""

from __future__ import annotations

import struct
import threading
from array import array
from dataclasses import dataclass

BTF_PATH = "/sys/kernel/btf/vmlinux"
_MAGIC = 0xEB9F

# kinds (include/uapi/linux/btf.h)
INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FUNC_PROTO, VAR, DATASEC, \
    FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(1, 20)
_QUALIFIERS = (TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG)

# the struct types that are locks, as contention_begin's address points at them, each with the kind of lock a
# contention on it is (bpf/lock_names.py lock_kind: from contention_begin's flags)
LOCK_KINDS = {
    **dict.fromkeys(("spinlock", "raw_spinlock", "qspinlock", "qrwlock", "seqlock_t", "rwlock_t", "spinlock_t",
                     "raw_spinlock_t", "arch_spinlock_t", "arch_rwlock_t"), "spin"),
    **dict.fromkeys(("mutex", "rt_mutex", "rt_mutex_base", "ww_mutex"), "mutex"),
    **dict.fromkeys(("rw_semaphore", "percpu_rw_semaphore"), "rwsem"),
    "semaphore": "semaphore",
}
LOCK_STRUCTS = frozenset(LOCK_KINDS)


class BtfError(Exception):
    pass


_RUNNING: dict[str, KernelBtf | BtfError] = {}
_RUNNING_LOCK = threading.Lock()


def running_kernel(path: str = BTF_PATH) -> KernelBtf:
    """The running kernel's types, parsed once per process (they do not change while it runs): a session
    reads them in a thread while its probes load (stallscope/warmup.py), and every lock namer after shares
    them. A failure is kept and raised again."""
    with _RUNNING_LOCK:
        got = _RUNNING.get(path)
        if got is None:
            try:
                got = KernelBtf.load(path)
            except BtfError as exc:
                got = exc
            _RUNNING[path] = got
    if isinstance(got, BtfError):
        raise got
    return got


@dataclass(frozen=True)
class Member:
    name: str
    type_id: int
    offset: int  # bytes (bitfields: the byte holding their first bit)


class _Types:
    """`types[id]` of a parsed BTF, each decoded when first read: the kernel's 126,690 types take one pass
    that notes where each begins and names the structs, unions and typedefs; a lock namer reads the
    members of a few dozen structs. (Decoding every type up front took 0.18 s of a session's start.)"""

    def __init__(self, data: bytes, strings: bytes, starts: array):
        self._data, self._strings, self._starts = data, strings, starts
        self._decoded: dict[int, tuple] = {}

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, type_id: int):
        if type_id == 0:
            return None  # void
        t = self._decoded.get(type_id)
        if t is None:
            if not 0 < type_id < len(self._starts):
                raise IndexError(type_id)
            t = self._decoded[type_id] = _decode(self._data, self._starts[type_id], self._strings)
        return t


def _name(strings: bytes, off: int) -> str:
    if not off:
        return ""
    end = strings.find(b"\0", off)
    return strings[off:end if end >= 0 else len(strings)].decode("ascii", "replace")


_U3 = struct.Struct("<III")


def _decode(data: bytes, at: int, strings: bytes) -> tuple:
    """The type at `at`: (kind, name, size, members or target type id)."""
    name_off, info, size_or_type = _U3.unpack_from(data, at)
    at += 12
    kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
    if kind in (STRUCT, UNION):
        members = []
        for _ in range(vlen):
            m_name, m_type, m_off = _U3.unpack_from(data, at)
            at += 12
            bits = m_off & 0xFFFFFF if kflag else m_off
            members.append(Member(_name(strings, m_name), m_type, bits // 8))
        return (kind, _name(strings, name_off), size_or_type, tuple(members))
    if kind == ARRAY:
        elem, _index, nelems = _U3.unpack_from(data, at)
        return (kind, "", nelems, elem)
    if kind in _QUALIFIERS or kind == PTR:
        return (kind, _name(strings, name_off) if kind == TYPEDEF else "", 0, size_or_type)
    return (kind, "", size_or_type, 0)


# bytes after a type's 12-byte header, by kind: (fixed, per vlen item)
_TAIL = {STRUCT: (0, 12), UNION: (0, 12), ARRAY: (12, 0), INT: (4, 0), ENUM: (0, 8), FUNC_PROTO: (0, 8),
         VAR: (4, 0), DATASEC: (0, 12), DECL_TAG: (4, 0), ENUM64: (0, 12)}


class KernelBtf:
    """Struct layouts by name. `types[id]` is (kind, name, size, members or target type id)."""

    def __init__(self, types, by_name: dict[str, int]):
        self.types = types
        self._by_name = by_name

    @classmethod
    def load(cls, path: str = BTF_PATH) -> KernelBtf:
        try:
            with open(path, "rb") as f:
                return cls.parse(f.read())
        except OSError as exc:
            raise BtfError(f"cannot read {path}: {exc.strerror}") from None

    @classmethod
    def parse(cls, data: bytes) -> KernelBtf:
        if len(data) < 24:
            raise BtfError("not BTF: too short")
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<HBBIIIII", data)
        if magic != _MAGIC:
            raise BtfError("not BTF: bad magic")
        if max(hdr_len + type_off + type_len, hdr_len + str_off + str_len) > len(data):
            raise BtfError("not BTF: its sections run past its end")
        strings = data[hdr_len + str_off: hdr_len + str_off + str_len]
        starts = array("Q", [0])  # type id 0 is void
        by_name: dict[str, int] = {}
        at, end = hdr_len + type_off, hdr_len + type_off + type_len
        header, tail, named = _U3.unpack_from, _TAIL.get, (STRUCT, UNION, TYPEDEF)
        while at + 12 <= end:
            name_off, info, _size = header(data, at)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            if name_off and kind in named:
                name = _name(strings, name_off)
                key = name if kind != TYPEDEF else "typedef " + name
                if key not in by_name:
                    by_name[key] = len(starts)
            starts.append(at)
            fixed, per = tail(kind, (0, 0))
            at += 12 + fixed + per * vlen
        if at != end:  # each type is decoded later, when read: one cut short must not be taken for one
            raise BtfError("not BTF: its types do not fill the type section")
        return cls(_Types(data, strings, starts), by_name)

    def struct_id(self, name: str) -> int | None:
        return self._by_name.get(name)

    def _resolve(self, type_id: int) -> tuple[int, tuple]:
        """Through typedefs and qualifiers to the type itself; also the outermost named typedef seen."""
        t = self.types[type_id] if 0 < type_id < len(self.types) else None
        while t is not None and t[0] in _QUALIFIERS:
            type_id = t[3]
            t = self.types[type_id] if 0 < type_id < len(self.types) else None
        return type_id, t

    def _lock_name(self, type_id: int) -> str | None:
        """The lock type's name (`spinlock_t`, `rw_semaphore`) when `type_id` is a lock, through qualifiers and
        typedefs; None otherwise."""
        t = self.types[type_id] if 0 < type_id < len(self.types) else None
        while t is not None:
            if t[1] in LOCK_STRUCTS:
                return t[1]
            if t[0] not in _QUALIFIERS:
                return None
            t = self.types[t[3]] if 0 < t[3] < len(self.types) else None
        return None

    def _size(self, type_id: int) -> int:
        type_id, t = self._resolve(type_id)
        if t is None:
            return 0
        if t[0] == ARRAY:
            return t[2] * self._size(t[3])
        if t[0] == PTR:
            return 8
        return t[2]

    def lock_at(self, struct_name: str, offset: int) -> str | None:
        """The path of the lock-typed field that starts at `offset` in `struct_name`
        (`vfs_inode.i_rwsem`), or None when none does (an offset inside a lock, or no lock there)."""
        found = self.typed_lock_at(struct_name, offset)
        return found[0] if found is not None else None

    def typed_lock_at(self, struct_name: str, offset: int) -> tuple[str, str] | None:
        """lock_at's path with the lock's type name (`spinlock_t`, `rw_semaphore`), or None."""
        sid = self.struct_id(struct_name)
        if sid is None:
            return None
        return self._lock_in(sid, offset, 0)

    def _lock_in(self, type_id: int, offset: int, depth: int) -> tuple[str, str] | None:
        type_id, t = self._resolve(type_id)
        if t is None or depth > 12:
            return None
        if t[0] == ARRAY:
            size = self._size(t[3])
            if not size or offset >= size * t[2]:
                return None
            index, rest = divmod(offset, size)
            if rest == 0 and (kind := self._lock_name(t[3])) is not None:
                return f"[{index}]", kind
            inner = self._lock_in(t[3], rest, depth + 1)
            return (f"[{index}].{inner[0]}", inner[1]) if inner is not None else None
        if t[0] not in (STRUCT, UNION):
            return None
        for m in t[3]:
            size = self._size(m.type_id)
            if not (m.offset <= offset < m.offset + max(size, 1)):
                continue
            if offset == m.offset and (kind := self._lock_name(m.type_id)) is not None:
                return (m.name, kind) if m.name else None
            inner = self._lock_in(m.type_id, offset - m.offset, depth + 1)
            if inner is not None:
                path = inner[0]
                return ((f"{m.name}.{path}" if not path.startswith("[") else f"{m.name}{path}") if m.name else path,
                        inner[1])
        return None
