"""A recording's kernel lock contentions folded per key in C (analyzer/rowfold.c), straight from the file.

The same fold as LockFold.add and LockFold.check over `Recording.lock_rows`, on the rows the same
statement selects, without a Python tuple per row: a report of 10 minutes of hackbench reads 1.3 million
lock rows. Used by `Recording.fold_lock_rows` when the library is built (`make install`); without it, or
when a total would not fit in 64 bits, the fold is Python's.
"""

from __future__ import annotations

import ctypes
from array import array
from dataclasses import dataclass
from importlib import resources
from itertools import chain
from typing import Callable, Iterator

from stallscope.analyzer import rowread
from stallscope.analyzer.model import LockWaits, _new_lock_waits
from stallscope.analyzer.recording_checks import INT, INT_OR_NULL, TEXT, TEXT_OR_NULL
from stallscope.analyzer.sample import Stack, TaskId

_LIBRARY = "librowfold.so.1"  # not `.so`: the package would list it among its modules
_KEY_WORDS, _ACC_WORDS = 8, 15
_U64 = (1 << 64) - 1  # SQLite's signed 64 bits, as the model's unsigned addresses and ids
_lib: ctypes.CDLL | None = None
_LOCK_WAITS_FIELDS = rowread.fields_of(LockWaits)
_missing = False


class RowFoldError(Exception):
    """SQLite could not read the rows (its message)."""


@dataclass
class LockRows:
    """A fold's result, as LockFold keeps one: the keys in the order first met with their totals (flat: the
    key's KEY_WORDS, then its ACC_WORDS, text cells as ids into `strings`), the invariants' counts, the
    rows left out as damaged, and per interval its rows' (key number, count, wait ns) one after another
    (what fold_recording keeps for the series)."""

    keys: array
    totals: array
    strings: list[str]
    too_long: int
    bad_split: int
    damaged: int
    parts: dict[int, array]

    def _rows(self) -> Iterator[tuple[tuple, tuple]]:
        """Each key's words and its totals' words, text cells in place."""
        cells = self.strings + ["", None]  # analyzer/rowfold.c ID_EMPTY (-2) and ID_NULL (-1)
        k, e = iter(self.keys), iter(self.totals)
        for key, acc in zip(zip(*[k] * _KEY_WORDS), zip(*[e] * _ACC_WORDS)):
            yield ((*key[:6], cells[key[6]], key[7]),
                   (*acc[:7], cells[acc[7]], cells[acc[8]], *acc[9:13], cells[acc[13]], cells[acc[14]]))

    @property
    def index(self) -> dict[tuple, int]:
        """LockFold.index: each key (its cache's name in place) and its number."""
        return {key: i for i, (key, _acc) in enumerate(self._rows())}

    @property
    def acc(self) -> list[list]:
        """LockFold.acc: each key's totals, its text cells in place."""
        return [list(acc) for _key, acc in self._rows()]

    def result(self, stacks: dict[int, Stack]) -> tuple[LockWaits, ...]:
        """LockFold.result: the model's table, in the keys' order (addresses and stack ids unsigned)."""
        if rowread.available():  # made in C (analyzer/rowread.c lock_waits): 643,659 in 10 minutes of hackbench
            return rowread.lock_waits(self.keys, self.totals, self.strings + ["", None], stacks, _LOCK_WAITS_FIELDS)
        make, get = _new_lock_waits, stacks.get
        return tuple(make(TaskId(pid, start), tgid, addr & _U64, flags, kind, cache, get(ks & _U64), ks & _U64, *acc)
                     for (pid, start, tgid, addr, flags, kind, cache, ks), acc in self._rows())


def _library() -> ctypes.CDLL | None:
    global _lib, _missing
    if _lib is None and not _missing:
        path = resources.files("stallscope.analyzer").joinpath(_LIBRARY)
        if not path.is_file():
            _missing = True
            return None
        lib = ctypes.CDLL(str(path))
        vp, u32, i64p = ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int64)
        lib.rowfold_open.restype = vp
        lib.rowfold_open.argtypes = [ctypes.c_char_p]
        lib.rowfold_free.argtypes = [vp]
        lib.rowfold_error.restype = ctypes.c_char_p
        lib.rowfold_error.argtypes = [vp]
        lib.rowfold_locks.restype = ctypes.c_int
        lib.rowfold_locks.argtypes = [vp, ctypes.c_char_p, vp, vp, vp, u32]
        lib.rowfold_keys.restype = u32
        lib.rowfold_keys.argtypes = [vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]
        lib.rowfold_parts.restype = ctypes.c_uint64
        lib.rowfold_parts.argtypes = [vp, ctypes.POINTER(vp), ctypes.POINTER(vp), ctypes.POINTER(ctypes.c_uint64)]
        lib.rowfold_text.restype = u32
        lib.rowfold_text.argtypes = [vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]
        lib.rowfold_counts.argtypes = [vp, i64p]
        _lib = lib
    return _lib


def available() -> bool:
    return _library() is not None


KINDS = {INT: 1, INT_OR_NULL: 2, TEXT: 3, TEXT_OR_NULL: 4}  # analyzer/rowfold.c K_*: what a column holds


def fold_lock_rows(uri: str, sql: str, kinds: list[str | None] | None, limits: dict[int, int],
                   text: Callable[[bytes], str]) -> LockRows | None:
    """The lock rows `sql` selects (idx, LOCK_VALUES, ok; two parameters, the first and last interval) of
    the intervals `limits` names (each with its longest possible wait), folded; None when the library is
    not built or a total overflowed 64 bits (fold in Python then). A row is damaged when its `ok` is false
    or a column is not of its kind (`kinds`: recording_checks' kind of each column before `ok`, None for
    one not checked; None: `ok` alone). `text` decodes a text cell as the reader's connection does.
    RowFoldError when SQLite fails."""
    lib = _library()
    if lib is None:
        return None
    order = sorted(limits)
    idx, spans = array("q", order), array("q", [limits[i] for i in order])
    f = lib.rowfold_open(uri.encode())
    if not f:  # no memory for its state: Python's fold
        return None
    try:
        checked = array("b", [KINDS.get(k, 0) if k else 0 for k in kinds]) if kinds is not None else None
        rc = lib.rowfold_locks(f, sql.encode(), checked.buffer_info()[0] if checked is not None else None,
                               idx.buffer_info()[0], spans.buffer_info()[0], len(order))
        if rc == -2:
            return None
        if rc != 0:
            raise RowFoldError(lib.rowfold_error(f).decode(errors="replace"))
        return _result(lib, f, text)
    finally:
        lib.rowfold_free(f)


def _ints(ptr: int | None, count: int) -> array:
    out = array("q")
    if count:
        out.frombytes(ctypes.string_at(ptr, 8 * count))
    return out


def _result(lib: ctypes.CDLL, f, text: Callable[[bytes], str]) -> LockRows:
    blob, ends = ctypes.c_void_p(), ctypes.c_void_p()
    n_text = lib.rowfold_text(f, ctypes.byref(blob), ctypes.byref(ends))
    at = _ints(ends.value, n_text)
    raw = ctypes.string_at(blob, at[-1]) if n_text else b""
    strings = [text(raw[a:b]) for a, b in zip(chain((0,), at), at)]
    keys_p, acc_p = ctypes.c_void_p(), ctypes.c_void_p()
    n = lib.rowfold_keys(f, ctypes.byref(keys_p), ctypes.byref(acc_p))
    parts_p, segs_p, n_segs = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64()
    rows = lib.rowfold_parts(f, ctypes.byref(parts_p), ctypes.byref(segs_p), ctypes.byref(n_segs))
    flat, segs = _ints(parts_p.value, 3 * rows), _ints(segs_p.value, 2 * n_segs.value)
    parts: dict[int, array] = {}
    for s in range(n_segs.value):
        interval, first = segs[2 * s], segs[2 * s + 1]
        last = segs[2 * s + 3] if s + 1 < n_segs.value else rows
        parts[interval] = flat[3 * first:3 * last]
    counts = (ctypes.c_int64 * 3)()
    lib.rowfold_counts(f, counts)
    return LockRows(_ints(keys_p.value, n * _KEY_WORDS), _ints(acc_p.value, n * _ACC_WORDS), strings,
                    counts[1], counts[2], counts[0], parts)
