"""An interval's records summed into a report's series in C (analyzer/seriesfold.c) are summed as the Python sums
them: the same tables, the same values of the same types, the same order, the same errors, whatever the records
hold; a real recording's series are the same either way."""

from __future__ import annotations

import copy
from array import array
from dataclasses import asdict

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stallscope.analyzer import series as S
from stallscope.analyzer.causes import IDLE
from stallscope.analyzer.sample import TaskDelta, TaskId

C = S._seriesfold
pytestmark = pytest.mark.skipif(C is None, reason="analyzer/_seriesfold is built by `make install`")

_TASKS = [TaskId(p, 1000 + p) for p in range(1, 6)]
_ints = st.integers(min_value=-5, max_value=2**70)  # beyond 64 bits: Python's own integers
_hist = st.lists(st.tuples(st.integers(min_value=-2, max_value=45), _ints), max_size=4).map(tuple)
_task_delta = st.builds(TaskDelta, st.sampled_from(_TASKS), _ints, _ints, _ints, _ints, _ints, _ints, _ints, _ints,
                        _ints, _hist, _ints, _ints)
_tasks = st.sets(st.sampled_from(_TASKS))
_NAMES = ["Waiting for I/O", "mutex contention", "Reading from a pipe", "Sleeping"]
_frac = st.one_of(st.just(1), st.floats(min_value=0.0, max_value=1.0, allow_nan=False))


def _sink(scope=None, waited=frozenset(), tgid_of=None) -> tuple[S.Series, S.Sink]:
    out = S.Series()
    return out, S.Sink(out, scope, set(waited), dict(tgid_of or {}))


def _typed(value):
    """A table with each value's type beside it: 1 and 1.0 (and True) are equal, and must not pass for each other."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def _same(a: S.Series, b: S.Series) -> None:
    da, db = asdict(a), asdict(b)
    assert _typed(da) == _typed(db)
    for table in ("tasks", "process_causes", "causes", "locks", "slab"):  # the order first met, which pages keep
        assert list(da[table]) == list(db[table])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_task_delta, max_size=6), min_size=1, max_size=4), st.one_of(st.none(), _tasks), _tasks,
       st.dictionaries(st.sampled_from(_TASKS), st.integers(1, 3)))
def test_task_records_are_summed_alike(intervals, scope, waited, tgid_of):
    (py_out, py), (c_out, c) = _sink(scope, waited, tgid_of), _sink(scope, waited, tgid_of)
    for i, records in enumerate(intervals * 2):  # the same interval's records twice: the sums, not only the first
        i //= 2
        h_py, h_c = {}, {}
        got_py = S.py_series_tasks(py, i, tuple(records), h_py)
        got_c = C.series_tasks(c, i, tuple(records), h_c, S.RUNQ_SLOTS)
        assert _typed(got_c) == _typed(got_py)
        assert _typed(h_c) == _typed(h_py) and list(h_c) == list(h_py)
    _same(c_out, py_out)


_split = st.tuples(
    st.lists(st.tuples(st.sampled_from(_NAMES), st.sampled_from(["io", "lock", "sleep"]), _frac), max_size=3).map(tuple),
    st.integers(1, 3), st.sampled_from([None, _NAMES[2]]), st.booleans())


@st.composite
def _offcpu_case(draw):
    splits = draw(st.lists(st.one_of(st.none(), _split), min_size=1, max_size=5))
    wait_of = [None if s is None else (s[0], s[1], s[2], None if s[2] is None else f"{s[2]}, nothing came", s[3])
               for s in splits]
    n = st.integers(0, len(wait_of) - 1)
    record = st.tuples(n, _ints, _ints, _ints, _hist)
    intervals = draw(st.lists(st.lists(record, max_size=6).map(tuple), min_size=1, max_size=3))
    long_open = draw(st.dictionaries(n, st.integers(0, 2**40), max_size=3))
    return wait_of, intervals, long_open


@settings(max_examples=300, deadline=None)
@given(_offcpu_case())
def test_offcpu_records_are_summed_alike(case):
    wait_of, intervals, long_open = case
    (py_out, py), (c_out, c) = _sink(), _sink()
    for i, records in enumerate(intervals):
        open_py, open_c = dict(long_open), dict(long_open)
        S.py_series_offcpu(py, i, records, wait_of, open_py)
        C.series_offcpu(c, i, records, wait_of, open_c, S.RUNQ_SLOTS, IDLE)
        assert _typed(open_c) == _typed(open_py)  # what was moved taken alike
    _same(c_out, py_out)
    assert list(c.causes) == list(py.causes)


_lock_of = st.lists(st.one_of(st.none(), st.tuples(
    st.one_of(st.none(), st.sampled_from([("&rq->__lock", "spinlock"), ("tasklist_lock", "rwlock:W")])),
    st.booleans(), st.one_of(st.none(), st.sampled_from([0xffff0001, 0xffff0002])))), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(_lock_of, st.data())
def test_lock_records_are_summed_alike(lock_of, data):
    n = st.integers(-len(lock_of), len(lock_of) - 1)  # a negative number indexes from the end, as a list does
    value = st.integers(-2**63, 2**63 - 1)
    (py_out, py), (c_out, c) = _sink(), _sink()
    for i in range(data.draw(st.integers(1, 3))):
        flat = array("q", [v for t in data.draw(st.lists(st.tuples(n, value, value), max_size=6)) for v in t])
        flat.extend(data.draw(st.lists(value, max_size=2)))  # a broken last record: left out alike
        assert _typed(C.series_locks(c, i, flat, lock_of)) == _typed(S.py_series_locks(py, i, flat, lock_of))
    _same(c_out, py_out)


def _fails_alike(py_call, c_call, error) -> None:
    for call in (py_call, c_call):
        with pytest.raises(error):
            call()


@pytest.mark.parametrize("bad, error", [
    ((("x", 1),), TypeError),  # a slot that is no integer
    (((1, 2, 3),), ValueError),  # no pair
    (((1, "n"),), TypeError),  # a count that is no number
])
def test_a_damaged_histogram_fails_alike(bad, error):
    record = TaskDelta(_TASKS[0], runq_wait_ns=5, runq_hist=bad)
    _fails_alike(lambda: S.py_series_tasks(_sink(waited={_TASKS[0]})[1], 0, (record,), {}),
                 lambda: C.series_tasks(_sink(waited={_TASKS[0]})[1], 0, (record,), {}, S.RUNQ_SLOTS), error)
    wait_of = [((("Sleeping", "sleep", 0.5),), 1, None, None, True)]
    _fails_alike(lambda: S.py_series_offcpu(_sink()[1], 0, ((0, 10, 1, 5, bad),), wait_of, {}),
                 lambda: C.series_offcpu(_sink()[1], 0, ((0, 10, 1, 5, bad),), wait_of, {}, S.RUNQ_SLOTS, IDLE), error)


def test_a_key_beyond_the_table_fails_alike():
    lock_of = [None]
    flat = array("q", [3, 1, 1])
    _fails_alike(lambda: S.py_series_locks(_sink()[1], 0, flat, lock_of),
                 lambda: C.series_locks(_sink()[1], 0, flat, lock_of), IndexError)
    _fails_alike(lambda: S.py_series_offcpu(_sink()[1], 0, ((2, 1, 1, 1, ()),), [None], {}),
                 lambda: C.series_offcpu(_sink()[1], 0, ((2, 1, 1, 1, ()),), [None], {}, S.RUNQ_SLOTS, IDLE),
                 IndexError)
    with pytest.raises(TypeError):  # not int64 values
        C.series_locks(_sink()[1], 0, array("i", [0, 1, 1]), lock_of)
    with pytest.raises(TypeError):
        C.series_tasks(_sink()[1], 0, (), [], S.RUNQ_SLOTS)


def test_the_series_takes_the_c_loops_where_built(monkeypatch):
    calls = []
    monkeypatch.setattr(S, "_seriesfold", type("Spy", (), {
        name: staticmethod(lambda *a, _f=getattr(C, name), _n=name: calls.append(_n) or _f(*a))
        for name in ("series_tasks", "series_offcpu", "series_locks")}))
    out, sink = _sink()
    S._series_tasks(sink, 0, (TaskDelta(_TASKS[0], run_ns=3),), {})
    S._series_offcpu(sink, 0, (), [], {})
    S._series_locks(sink, 0, array("q"), [])
    S._series_locks(sink, 0, [], [])  # no int64 array: the Python loop
    assert calls == ["series_tasks", "series_offcpu", "series_locks"]
    assert out.tasks == {_TASKS[0]: {0: [0, 0, 0, 0, 0]}}


def test_a_real_recordings_series_are_the_same_summed_in_python(report_recording, monkeypatch):
    from stallscope.reports.build import load

    in_c = load(str(report_recording["stall"]))[1]
    monkeypatch.setattr(S, "_seriesfold", None)
    in_py = load(str(report_recording["stall"]))[1]
    assert in_c.intervals > 3 and in_c.locks and in_c.causes and len(in_c.tasks) > 50
    _same(in_c, in_py)
    copy.deepcopy(in_c)  # plain data: nothing of the C's left in it


def test_every_field_of_a_series_is_joined():
    from dataclasses import fields

    joined = set(S._PER_INTERVAL) | {f for f, _depth in S._TABLES} | {"causes"}
    assert joined == {f.name for f in fields(S.Series)}


@pytest.mark.parametrize("cuts", [(), (1,), (2, 3), "every", "random"])
def test_a_real_recordings_series_made_in_parts_is_the_whole(report_recording, cuts):
    """The parts of a report's series (analyzer/series.py series_parts), made in any order and joined in interval
    order, are the series made at once: the same values of the same types, every table's keys in the same order."""
    import random

    from stallscope.reports.build import fold

    model, ledger = fold(str(report_recording["stall"]))
    whole = S.interval_series(model, ledger)
    n = len(ledger.entries)
    assert n > 6
    if cuts == "every":
        cuts = tuple(range(1, n))
    elif cuts == "random":
        cuts = tuple(sorted(random.Random(n).sample(range(1, n), n // 2)))
    bounds = (0, *cuts, n)
    make = S.series_parts(model, ledger)
    ranges = list(zip(bounds, bounds[1:]))
    made = {r: make(*r) for r in reversed(ranges)}  # the last first: nothing carried from part to part
    _same(S.joined([made[r] for r in ranges]), whole)


def test_intervals_streamed_are_made_in_one_part(report_recording):
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.store import Recording

    path = str(report_recording["stall"])
    model, rec = load_model(path), Recording(path)
    try:
        make = S.series_parts(model, rec.intervals())
        with pytest.raises(ValueError, match="one part"):
            make(2, None)
        assert make(0, None).intervals == model.intervals
    finally:
        rec.close()


_values = st.lists(st.one_of(_ints, st.floats(allow_nan=False, allow_infinity=False)), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(min_value=-3, max_value=40), _values, max_size=12), st.integers(2, 7),
       st.sampled_from(["sum", "max"]))
@example({0: [1, 2.0], 1: [1.0, 2]}, 2, "max")  # equals: the span's first kept, as max() keeps it
@example({3: [1], 4: [1, 2]}, 5, "sum")  # a later interval with more values: IndexError
def test_spans_are_made_alike(parts, k, how):
    """A page's per-interval parts over spans of k intervals (reports/window.py), in C and in Python: the same
    values of the same types in the same order, or the same error (a span's later interval with more values)."""
    from stallscope.reports import window

    c_out = py_out = c_err = py_err = None
    try:
        c_out = C.spans(copy.deepcopy(parts), k, how == "max")
    except Exception as exc:  # noqa: BLE001 - compared below
        c_err = type(exc)
    try:
        py_out = window.py_spans(copy.deepcopy(parts), k, how)
    except Exception as exc:  # noqa: BLE001
        py_err = type(exc)
    assert c_err == py_err
    if c_err is None:
        assert _typed(c_out) == _typed(py_out) and list(c_out) == list(py_out)
