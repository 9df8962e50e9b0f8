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


class CountingMap(FakeMap):
    """A cumulative map as the probes keep one: a key's entry made from zero by its first event, its counts
    added to; an entry can be taken out (Map.take_many), and `between` runs after the read, before the take
    (an event the read did not see)."""

    def __init__(self):
        super().__init__()
        self.between = None
        self.taken: list[bytes] = []

    def bump(self, k: bytes, n: int = 1) -> None:
        count, total = VAL.unpack(self.entries.get(k, VAL.pack(0, 0)))
        self.entries[k] = VAL.pack(count + n, total + 10 * n)

    def take_many(self, keys):
        if self.between is not None:
            self.between()
            self.between = None
        vals, present = [], bytearray(len(keys))
        for i, k in enumerate(keys):
            v = self.entries.pop(k, None)
            self.taken.append(k)
            vals.append(v if v is not None else bytes(VAL.size))
            present[i] = v is not None
        return b"".join(vals), bytes(present)


def _deltas(changed) -> dict[bytes, tuple[int, int]]:
    out = {}
    for k, v, prev in changed:
        c, t = VAL.unpack(v)
        pc, pt = VAL.unpack(prev) if prev is not None else (0, 0)
        out[k] = (c - pc, t - pt)
    return out


def test_an_entry_unchanged_for_idle_reads_is_taken_out_and_a_key_back_reads_as_new_with_what_came_since():
    m, d = CountingMap(), MapDiff(KEY.size, VAL.size, ((0, 8),), idle_reads=3)
    m.bump(key(1, 10), 5)
    m.bump(key(2, 20), 1)
    assert _deltas(d.read(m, set())) == {key(1, 10): (5, 50), key(2, 20): (1, 10)}
    for _ in range(2):  # unchanged for one read, then two
        m.bump(key(2, 20))
        assert _deltas(d.read(m, set())) == {key(2, 20): (1, 10)}
        assert key(1, 10) in m.entries
    m.bump(key(2, 20))
    assert _deltas(d.read(m, set())) == {key(2, 20): (1, 10)}
    assert key(1, 10) not in m.entries and m.taken == [key(1, 10)] and d.taken == 1 and len(d) == 1
    m.bump(key(1, 10), 2)  # its next event: made anew from zero
    assert list(d.read(m, set())) == [(key(1, 10), VAL.pack(2, 20), None)]


def test_an_entry_that_moved_after_the_read_and_before_its_take_is_handed_back_changed_in_that_read():
    m, d = CountingMap(), MapDiff(KEY.size, VAL.size, ((0, 8),), idle_reads=1)
    m.bump(key(1, 10), 5)
    d.read(m, set())
    m.between = lambda: m.bump(key(1, 10), 2)  # an event between the read (unchanged) and the take
    assert list(d.read(m, set())) == [(key(1, 10), VAL.pack(7, 70), VAL.pack(5, 50))]
    assert key(1, 10) not in m.entries and len(d) == 0
    m.bump(key(1, 10))
    assert _deltas(d.read(m, set())) == {key(1, 10): (1, 10)}


@pytest.mark.parametrize("idle", [1, 2, 5])
def test_what_every_read_hands_back_sums_to_every_event_whatever_is_taken_out(idle, monkeypatch):
    """Events on thousands of keys, some read after read, most now and then; tasks dying; at most TAKE_MAX
    taken a read: each key's deltas over the reads sum to its events, and the map keeps no entry unchanged
    for more reads than the idle ones and those over TAKE_MAX wait for."""
    from stallscope.bpf import mapdiff

    monkeypatch.setattr(mapdiff, "TAKE_MAX", 300)
    rng = random.Random(idle)
    m, d = CountingMap(), MapDiff(KEY.size, VAL.size, ((0, 8), (4, 16)), idle_reads=idle)
    events: dict[bytes, int] = {}
    seen: dict[bytes, int] = {}
    live = list(range(1, 2000))
    hot = live[:100]
    for step in range(60):
        for _ in range(rng.randrange(200, 1500)):
            pid = rng.choice(hot) if rng.random() < 0.5 else rng.choice(live)
            k = key(pid, pid * 7, rng.choice((0, 1, 2)), 0)
            n = rng.randrange(1, 4)
            m.bump(k, n)
            events[k] = events.get(k, 0) + n
        if step % 7 == 3:  # an event after the read, before a take
            k = rng.choice(sorted(m.entries))
            m.between = (lambda k=k: (m.bump(k), events.__setitem__(k, events[k] + 1)))
        dead = {TaskId(pid, pid * 7) for pid in rng.sample(live[100:], 20)} if step % 5 == 4 else set()
        for k, (c, _t) in _deltas(d.read(m, dead)).items():
            seen[k] = seen.get(k, 0) + c
        if dead:
            live = [p for p in live if TaskId(p, p * 7) not in dead] + list(range(2000 + 20 * step, 2020 + 20 * step))
    m.between = None  # an event left after the last read: in the next
    for k, (c, _t) in _deltas(d.read(m, set())).items():
        seen[k] = seen.get(k, 0) + c
    assert d.taken > 0
    assert seen == events
    assert len(m.entries) < len(events)


def test_a_map_that_cannot_take_an_entry_out_keeps_them_all():
    class Unable(CountingMap):
        def take_many(self, keys):
            return None

    m, d = Unable(), MapDiff(KEY.size, VAL.size, ((0, 8),), idle_reads=1)
    m.bump(key(1, 10))
    for _ in range(3):
        d.read(m, set())
    assert key(1, 10) in m.entries and len(d) == 1 and d.idle_reads == 0 and d.taken == 0
    m.bump(key(1, 10))
    assert _deltas(d.read(m, set())) == {key(1, 10): (1, 10)}


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
