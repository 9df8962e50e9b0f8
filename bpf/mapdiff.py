"""The entries of a cumulative BPF map that changed since the last read, found in C (bpf/mapdiff.c).

Every drain reads each cumulative map whole (BPF_MAP_LOOKUP_BATCH) and hands over only what changed:
with thousands of sleeping threads and finished contentions, most entries have not, and comparing tens
of thousands of them in Python each interval cost more than decoding those that had (a drain under
hackbench beside 5,000 idle threads read 12,000 waker entries to find 600). The C side keeps each
entry's value from the last read and returns the changed ones with their previous values; an entry of
a task whose final switch was seen is returned if it changed, then deleted from the map and forgotten.

An entry that has not moved for IDLE_READS reads is taken out of the map (Map.take_many: its value as it
was deleted, so that nothing that moved it after the read is lost) and forgotten: if its key comes
again, the map makes it anew and the read returns it as new, all it holds being since. Without that,
the maps a drain reads whole kept every key they ever held, and what a drain cost grew with the time
`top` was left open (300 s under hackbench beside 5,000 threads that wake every 3 s: the lock map's
entries 1,365 -> 5,829, the wakers' 10,527 -> 14,851; benchmarks/RESULTS-tui.md).
"""

from __future__ import annotations

import ctypes
import re
import struct
from array import array
from functools import lru_cache
from importlib import resources
from typing import Iterator

from stallscope.analyzer.sample import TaskId
from stallscope.errors import StallscopeError

NEW = 1  # bpf/mapdiff.c MAPDIFF_NEW (MAPDIFF_GONE marks a dead task's last read, deleted after it)
# an entry unchanged for this many reads is taken out of its map (1 s intervals: 10 s); at most TAKE_MAX a read
# (a drain's added time bounded: a syscall each, ~1-2 us)
IDLE_READS = 10
TAKE_MAX = 4096
_LIBRARY = "libmapdiff.so"
_lib = None


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        path = resources.files("stallscope.bpf").joinpath(_LIBRARY)
        if not path.is_file():
            raise StallscopeError(f"{_LIBRARY} is missing", "run `make install` to build bpf/mapdiff.c")
        lib = ctypes.CDLL(str(path))
        vp, u32 = ctypes.c_void_p, ctypes.c_uint32
        lib.mapdiff_new.restype = vp
        lib.mapdiff_new.argtypes = [u32, u32, vp, vp, u32]
        lib.mapdiff_free.argtypes = [vp]
        lib.mapdiff_record_size.restype = u32
        lib.mapdiff_record_size.argtypes = [vp]
        lib.mapdiff_size.restype = u32
        lib.mapdiff_size.argtypes = [vp]
        lib.mapdiff_begin.argtypes = [vp, vp, u32]
        lib.mapdiff_feed.argtypes = [vp, vp, vp, u32]
        lib.mapdiff_end.restype = ctypes.c_long
        lib.mapdiff_end.argtypes = [vp, ctypes.POINTER(vp), ctypes.POINTER(vp), ctypes.POINTER(u32)]
        lib.mapdiff_stale.restype = ctypes.c_long
        lib.mapdiff_stale.argtypes = [vp, u32, u32, ctypes.POINTER(vp)]
        lib.mapdiff_evicted.argtypes = [vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, u32]
        lib.mapdiff_output.restype = ctypes.c_long
        lib.mapdiff_output.argtypes = [vp, ctypes.POINTER(vp)]
        _lib = lib
    return _lib


class Changed:
    """One read's changed entries: each (key, value, previous value or None when new), as bytes."""

    def __init__(self, blob: bytes, count: int, rec_size: int, ks: int, vs: int):
        self.blob, self.count, self._rs, self._ks, self._vs = blob, count, rec_size, ks, vs

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[bytes, bytes, bytes | None]]:
        blob, rs, ks, vs = self.blob, self._rs, self._ks, self._vs
        flags_of = _FLAGS.unpack_from
        for at in range(0, self.count * rs, rs):
            flags, = flags_of(blob, at)
            k = at + 8
            yield blob[k:k + ks], blob[k + ks:k + ks + vs], None if flags & NEW else blob[k + ks + vs:k + ks + 2 * vs]

    def rows(self, key_layout: str, value_layout: str, previous_layout: str | None = None) -> Iterator[tuple]:
        """Each changed entry as one flat tuple, unpacked in C: its flags, then its key's, its value's and its
        previous value's fields (`key_layout`, `value_layout`: their struct format characters, abi.layout;
        `previous_layout`, as `value_layout` when not given, may skip with `x` what a reader does not compare); a
        new entry's previous value reads as zeros. A drain of thousands of entries an interval saves the slices,
        the three unpacks of each and the integers it would not read."""
        fields = self._fields(key_layout, value_layout, previous_layout)
        if not self.count:
            return iter(())
        return struct.iter_unpack(f"{fields}{self._rs - struct.calcsize(fields)}x", self.blob)

    def raw(self, key_layout: str, value_layout: str, previous_layout: str | None = None) -> tuple:
        """What rows() unpacks, for a reader in C to read in place (analyzer/rowread.c lock_deltas): (the blob, the
        count, the record size, each row field's (offset, struct code, length) in rows()' order)."""
        return self.blob, self.count, self._rs, _places(self._fields(key_layout, value_layout, previous_layout))

    def _fields(self, key_layout: str, value_layout: str, previous_layout: str | None) -> str:
        """A record's struct format: the row's flags, the key, the value and the previous value."""
        fields = f"<I4x{key_layout}{value_layout}{value_layout if previous_layout is None else previous_layout}"
        if struct.calcsize(fields) > self._rs or (previous_layout is not None
                                                  and struct.calcsize(previous_layout) != self._vs):
            raise ValueError(f"fields {fields!r} do not fit records of {self._rs} bytes, values of {self._vs}")
        return fields


@lru_cache(maxsize=16)
def _places(fields: str) -> tuple[tuple[int, str, int], ...]:
    """(offset, code, length) of each field a little-endian struct format unpacks, in order (no alignment: "<")."""
    out, at = [], 0
    for n, code in re.findall(r"(\d*)([xcbB?hHiIlLqQnNefds])", fields.lstrip("<")):
        count = int(n) if n else 1
        size = struct.calcsize(f"<{code}")
        if code == "x":
            at += count
        elif code == "s":
            out.append((at, code, count))
            at += count
        else:
            for _ in range(count):
                out.append((at, code, size))
                at += size
    return tuple(out)


_FLAGS = struct.Struct("<I")


def identity(struct_type, pid: str = "pid", start: str = "start_ns") -> tuple[int, int]:
    """Where a key struct (a ctypes mirror) holds a task's identity: (pid offset, start time offset)."""
    return getattr(struct_type, pid).offset, getattr(struct_type, start).offset


def _out_of_memory(m) -> StallscopeError:
    """What stops a drain whose comparison could not allocate: said in one line, the recording kept."""
    return StallscopeError(f"out of memory comparing the entries of map {getattr(m, 'name', '?')}",
                           "free memory, or trace fewer tasks (-p PID)")


class MapDiff:
    """The changed entries of one cumulative map, read after read. `ids`: where its keys hold task
    identities, as (pid offset, start time offset) pairs (a waker entry holds two: its wakee's and its
    waker's); an entry of a dead task (any of them) is read a last time and deleted. `idle_reads`: an entry
    unchanged for that many reads is taken out of a map that can (0: never)."""

    @classmethod
    def of(cls, key_type, value_type, ids: tuple[tuple[int, int], ...], idle_reads: int = IDLE_READS) -> "MapDiff":
        """For a map of these key and value structs (ctypes mirrors)."""
        return cls(ctypes.sizeof(key_type), ctypes.sizeof(value_type), ids, idle_reads)

    def __init__(self, key_size: int, value_size: int, ids: tuple[tuple[int, int], ...] = (),
                 idle_reads: int = IDLE_READS):
        self._lib = _library()
        self.idle_reads = idle_reads
        self.taken = 0  # entries taken out of the map unchanged, so far
        self.key_size, self.value_size = key_size, value_size
        # arrays of the array module, passed by address: a ctypes array type made for a size leaves a
        # reference cycle behind it (bpf/libbpf.py _chars)
        pids, starts = array("i", [p for p, _ in ids] or [0]), array("i", [s for _, s in ids] or [0])
        self._d = self._lib.mapdiff_new(key_size, value_size, pids.buffer_info()[0], starts.buffer_info()[0], len(ids))
        if not self._d:
            raise ValueError(f"no map diff for keys of {key_size} bytes and identities at {ids}")
        self._rs = self._lib.mapdiff_record_size(self._d)

    def __del__(self) -> None:
        d, self._d = getattr(self, "_d", None), None
        if d:
            self._lib.mapdiff_free(d)

    def __len__(self) -> int:
        """Entries kept from the last read."""
        return self._lib.mapdiff_size(self._d)

    def read(self, m, dead: set[TaskId]) -> Changed:
        """Read `m` whole; its changed entries. The entries of `dead` tasks are deleted from it."""
        lib, d = self._lib, self._d
        pairs = array("Q", [v for tid in dead for v in tid] or [0])
        if lib.mapdiff_begin(d, pairs.buffer_info()[0], len(dead)) < 0:
            raise _out_of_memory(m)
        batches = getattr(m, "batches", None)
        if batches is not None:
            for keys, vals, n in batches():
                if lib.mapdiff_feed(d, keys, vals, n) < 0:
                    raise _out_of_memory(m)
        else:  # a map faked as its entries
            items = m.items_batch()
            if items and lib.mapdiff_feed(d, b"".join(k for k, _ in items), b"".join(v for _, v in items),
                                          len(items)) < 0:
                raise _out_of_memory(m)
        out, gone, n_gone = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint32()
        count = lib.mapdiff_end(d, ctypes.byref(out), ctypes.byref(gone), ctypes.byref(n_gone))
        if count < 0:
            raise _out_of_memory(m)
        ks = self.key_size
        if n_gone.value:
            raw = ctypes.string_at(gone, n_gone.value * ks)
            m.delete_many([raw[i:i + ks] for i in range(0, len(raw), ks)])
        take = getattr(m, "take_many", None) if self.idle_reads else None
        if take is not None:
            stale = ctypes.c_void_p()
            n = lib.mapdiff_stale(d, self.idle_reads, TAKE_MAX, ctypes.byref(stale))
            if n < 0:
                raise _out_of_memory(m)
            if n:
                raw = ctypes.string_at(stale, n * ks)
                taken = take([raw[i:i + ks] for i in range(0, len(raw), ks)])
                if taken is None:  # the kernel cannot take an entry out of this map: kept as before
                    self.idle_reads = 0
                else:
                    if lib.mapdiff_evicted(d, raw, taken[0], taken[1], n) < 0:
                        raise _out_of_memory(m)
                    self.taken += n
                    count = lib.mapdiff_output(d, ctypes.byref(out))
        return Changed(ctypes.string_at(out, count * self._rs) if count else b"", count, self._rs, ks,
                       self.value_size)
