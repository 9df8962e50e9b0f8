"""bpf/mapdiff.c through bpf/mapdiff.py: the changed entries of a cumulative map, read after read, with the
maps faked as their entries (no BPF needed), against a plain Python account of the same reads."""

from __future__ import annotations

import random
import struct

import pytest

from stallscope.analyzer.sample import TaskId
from stallscope.bpf.mapdiff import MapDiff

KEY = struct.Struct("<IIQQ")  # pid, waker pid, start, waker start: two task identities, as a waker key
VAL = struct.Struct("<QQ")


class FakeMap:
    def __init__(self):
        self.entries: dict[bytes, bytes] = {}
        self.deleted: list[bytes] = []

    def items_batch(self):
        return list(self.entries.items())

    def delete_many(self, keys):
        for k in keys:
            self.deleted.append(k)
            self.entries.pop(k, None)


def key(pid, start, waker=0, waker_start=0):
    return KEY.pack(pid, waker, start, waker_start)


def test_only_new_and_changed_entries_come_back_with_their_previous_values():
    m, d = FakeMap(), MapDiff(KEY.size, VAL.size, ((0, 8), (4, 16)))
    m.entries = {key(1, 10): VAL.pack(1, 100), key(2, 20): VAL.pack(2, 200)}
    first = list(d.read(m, set()))
    assert sorted(first, key=repr) == sorted(
        [(key(1, 10), VAL.pack(1, 100), None), (key(2, 20), VAL.pack(2, 200), None)], key=repr)
    m.entries[key(2, 20)] = VAL.pack(3, 300)
    assert list(d.read(m, set())) == [(key(2, 20), VAL.pack(3, 300), VAL.pack(2, 200))]
    assert list(d.read(m, set())) == []  # nothing moved
    assert len(d) == 2


def test_the_changed_entries_as_flat_rows_are_the_entries_unpacked_a_new_ones_previous_value_zeros():
    """Changed.rows (one unpack of the whole read, as the lock drain reads it) holds what the entries hold: flags,
    key, value, previous value; a new entry's previous value is zeros. Records are padded to 8 bytes: a key of 12
    bytes and values of 10 leave 2 bytes after each record, which the rows skip."""
    key3, val5 = struct.Struct("<IQ"), struct.Struct("<HQ")
    m, d = FakeMap(), MapDiff(key3.size, val5.size, ((0, 4),))
    m.entries = {key3.pack(1, 10): val5.pack(7, 100), key3.pack(2, 20): val5.pack(8, 200)}
    first = d.read(m, set())
    assert sorted(first.rows("IQ", "HQ")) == [(1, 1, 10, 7, 100, 0, 0), (1, 2, 20, 8, 200, 0, 0)]
    m.entries[key3.pack(2, 20)] = val5.pack(9, 300)
    again = d.read(m, set())
    rows = list(again.rows("IQ", "HQ"))
    assert rows == [(0, 2, 20, 9, 300, 8, 200)]
    assert [key3.unpack(k) + val5.unpack(v) + val5.unpack(p) for k, v, p in again] == [r[1:] for r in rows]
    assert list(d.read(m, set()).rows("IQ", "HQ")) == []
    m.entries[key3.pack(1, 10)] = val5.pack(6, 101)
    assert list(d.read(m, set()).rows("IQ", "HQ", "H8x")) == [(0, 1, 10, 6, 101, 7)]  # the previous count only
    with pytest.raises(ValueError):
        d.read(m, set()).rows("IQ", "HQ", "H")  # a previous value's layout must cover its bytes


def test_a_dead_tasks_entries_are_read_a_last_time_deleted_and_forgotten_as_wakee_or_waker():
    m, d = FakeMap(), MapDiff(KEY.size, VAL.size, ((0, 8), (4, 16)))
    m.entries = {key(1, 10): VAL.pack(1, 1), key(2, 20, waker=1, waker_start=10): VAL.pack(1, 1),
                 key(3, 30): VAL.pack(1, 1), key(4, 40, waker=0): VAL.pack(1, 1)}
    d.read(m, set())
    m.entries[key(1, 10)] = VAL.pack(2, 2)  # moved before it died
    changed = list(d.read(m, {TaskId(1, 10)}))
    assert changed == [(key(1, 10), VAL.pack(2, 2), VAL.pack(1, 1))]
    # its own entry and the one it woke someone in: deleted from the map, forgotten here
    assert sorted(m.deleted) == sorted([key(1, 10), key(2, 20, waker=1, waker_start=10)])
    assert len(d) == 2
    # a pid reused by a later task is another task; pid 0 (an interrupt) never dies
    m.deleted.clear()
    assert list(d.read(m, {TaskId(3, 31), TaskId(0, 0)})) == [] and m.deleted == []


def test_entries_gone_from_the_map_are_forgotten_and_a_key_back_is_new():
    m, d = FakeMap(), MapDiff(KEY.size, VAL.size, ((0, 8),))
    m.entries = {key(1, 10): VAL.pack(1, 1), key(2, 20): VAL.pack(1, 1)}
    d.read(m, set())
    del m.entries[key(1, 10)]
    assert list(d.read(m, set())) == [] and len(d) == 1
    m.entries[key(1, 10)] = VAL.pack(1, 1)
    assert list(d.read(m, set())) == [(key(1, 10), VAL.pack(1, 1), None)]


def test_tens_of_thousands_of_entries_coming_and_going_read_as_a_python_account_reads_them():
    """Growth, deletions (backward shifts in the open-addressing table) and reuse of freed places, checked
    read after read against the same account kept in Python."""
    rng = random.Random(7)
    m, d = FakeMap(), MapDiff(KEY.size, VAL.size, ((0, 8), (4, 16)))
    kept: dict[bytes, bytes] = {}
    live = list(range(1, 3000))
    for step in range(40):
        for _ in range(rng.randrange(500, 3000)):
            pid, waker = rng.choice(live), rng.choice((0, rng.choice(live)))
            k = key(pid, pid * 7, waker, waker * 7)
            m.entries[k] = VAL.pack(rng.randrange(4), rng.randrange(4))
        for k in rng.sample(sorted(m.entries), min(len(m.entries), rng.randrange(0, 800))):
            del m.entries[k]
        dead = {TaskId(pid, pid * 7) for pid in rng.sample(live, 30)}
        dead_pids = {t.pid for t in dead}

        def is_dead(k):
            pid, waker, _s, _ws = KEY.unpack(k)
            return pid in dead_pids or (waker and waker in dead_pids and _ws == waker * 7)

        want = []
        for k, v in m.entries.items():
            prev = kept.get(k)
            if prev != v:
                want.append((k, v, prev))
        gone = sorted(k for k in m.entries if is_dead(k))
        m.deleted.clear()
        got = list(d.read(m, dead))
        assert sorted(got, key=repr) == sorted(want, key=repr), step
        assert sorted(m.deleted) == gone, step  # a dead task's entries, changed or not: deleted
        kept = {k: v for k, v in m.entries.items()}
        assert len(d) == len(kept)
        live = [p for p in live if p not in dead_pids] + list(range(3000 + 100 * step, 3000 + 100 * step + 30))


def test_a_comparison_that_cannot_allocate_stops_the_drain_with_a_line_not_a_traceback():
    """The C side returns -1 when it cannot allocate: the drain stops with a StallscopeError (one line,
    the recording kept), not a Python MemoryError."""
    import pytest

    from stallscope.errors import StallscopeError

    d = MapDiff(KEY.size, VAL.size, ((0, 8),))
    m = FakeMap()
    m.name = "wakers"
    m.entries[key(1, 2)] = VAL.pack(1, 1)

    class Failing:
        def __getattr__(self, name):
            return getattr(d._lib, name)

        @staticmethod
        def mapdiff_begin(*_args):
            return -1

    real, d._lib = d._lib, Failing()
    try:
        with pytest.raises(StallscopeError, match="out of memory comparing the entries of map wakers"):
            d.read(m, set())
    finally:
        d._lib = real
