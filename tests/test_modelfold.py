"""A window's records folded in C (analyzer/modelfold.c) are folded as the Python folds them: the same
accumulators, the same model, the same errors, whatever the records hold; a real recording's model is the same
either way."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stallscope.analyzer import model as M
from stallscope.analyzer.load import load_model
from stallscope.analyzer.sample import (OffcpuDelta, OngoingWait, Stack, TaskDelta, TaskId, TaskInfo, WaitSince,
                                        blocked_only)

C = M._modelfold
pytestmark = pytest.mark.skipif(C is None, reason="analyzer/_modelfold is built by `make install`")

_TASKS = [TaskId(p, 1000 + p) for p in range(1, 5)]
_ints = st.integers(min_value=-5, max_value=2**70)  # beyond 64 bits: Python's own integers
_hist = st.lists(st.tuples(st.integers(min_value=-2, max_value=45), _ints), max_size=4).map(tuple)
_task_delta = st.builds(TaskDelta, st.sampled_from(_TASKS), _ints, _ints, _ints, _ints, _ints, _ints, _ints, _ints,
                        _ints, _hist, _ints, _ints)
_offcpu = st.builds(OffcpuDelta, st.sampled_from(_TASKS), st.integers(1, 3), st.integers(0, 2), st.integers(0, 3),
                    st.integers(0, 3), _ints, _ints, _ints, _hist, st.integers(0, 2), st.sampled_from([0, 0xffff1, 7]),
                    st.one_of(st.none(), _ints), _ints, _ints, st.tuples(_ints, _ints, _ints))


def _both(py, c, acc: dict, batches):
    """The accumulators after each fold, Python's and C's, from copies of `acc`."""
    a, b = copy.deepcopy(acc), copy.deepcopy(acc)
    for records in batches:
        py(a, records)
        c(b, records)
    return a, b


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_task_delta, max_size=6), max_size=4))
def test_task_records_fold_alike(batches):
    py, c = _both(M.py_fold_tasks, lambda t, r: C.fold_tasks(t, r, M.RUNQ_SLOTS), {}, batches)
    assert c == py
    assert [type(v) for acc in c.values() for v in acc] == [type(v) for acc in py.values() for v in acc]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_offcpu, max_size=6), max_size=4))
def test_offcpu_records_fold_alike(batches):
    kept_py, kept_c = [], []
    py, c = _both(lambda w, r: M.py_fold_waits(w, r, kept_py), lambda w, r: C.fold_waits(w, r, M.RUNQ_SLOTS, kept_c),
                  {}, batches)
    assert c == py
    assert list(c) == list(py)  # the order first met, which the model's waits keep
    # each record as a report's series keeps it, its key numbered as the model orders its waits
    assert kept_c == kept_py and len(kept_c) == sum(map(len, batches))
    assert [n for n, *_rest in kept_c] == [py[(o.task, o.tgid, o.state, o.kstack, o.ustack, o.why, o.func)][8]
                                           for records in batches for o in records]
    with pytest.raises(TypeError):
        C.fold_waits({}, [], M.RUNQ_SLOTS, ())  # kept: a list or None


@settings(max_examples=200, deadline=None)
@given(st.lists(_task_delta, max_size=8), st.lists(_offcpu, max_size=8))
def test_the_models_records_are_made_alike(tasks, waits):
    t, w = {}, {}
    M.py_fold_tasks(t, tasks)
    M.py_fold_waits(w, waits)
    infos = {_TASKS[0]: TaskInfo(_TASKS[0], 1, 0, "app")}  # the others unknown
    stacks = {1: Stack(1, "kernel", ()), 2: Stack(2, "user", ())}
    funcs = {0xffff1: "worker_thread"}  # 7: not named
    t2 = copy.deepcopy(t)
    assert C.made_totals(t2, infos, M._unknown_task, M.NO_HIST, M._new_totals) == M.py_made_totals(t, infos)
    assert t2 == t  # the accumulators' histograms left as tuples alike
    made_c = C.made_waits(w, stacks, funcs, M._unnamed_function, M._new_stack_wait)
    assert made_c == M.py_made_waits(w, stacks, funcs)
    assert {x.func for x in made_c} <= {"", "worker_thread", "0x7"}


_carried = st.builds(OngoingWait, st.sampled_from(_TASKS), st.integers(1, 3), st.integers(0, 2), st.integers(0, 3),
                     st.integers(0, 3), st.integers(0, 2), st.sampled_from([0, 0xffff1, 7]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_task_delta, max_size=4), st.lists(_offcpu, max_size=4), st.lists(_carried, max_size=8), _ints,
       st.one_of(st.none(), st.lists(_ints, max_size=9)), _ints)
def test_waits_carried_on_fold_alike(tasks, waits, keys, ns, since, late):
    """Into accumulators that hold some of the same tasks and waits already (a window's earlier records), keys
    repeated, with and without their beginnings (`since` shorter than the keys: zip's length)."""
    t, w = {}, {}
    M.py_fold_tasks(t, tasks)
    M.py_fold_waits(w, waits)
    t2, w2 = copy.deepcopy(t), copy.deepcopy(w)
    M.py_fold_ongoing(t, w, keys, ns, since, late)
    C.fold_ongoing(t2, w2, tuple(keys), ns, None if since is None else tuple(since), late)
    assert (t2, w2) == (t, w)
    assert list(w2) == list(w)  # the order first met
    assert [type(k) for k in w2] == [type(k) for k in w]  # a key first met is kept as it came (an OngoingWait)


def test_waits_carried_on_are_charged_as_their_records_would_be():
    """Each wait carried on is what its charge-only record and its task's blocked-only record would fold to,
    with its long-open part where it began LONG_OPEN_NS or more before the interval's end."""
    keys = (OngoingWait(_TASKS[0], 1, 1, 5, 0, 2, 0), OngoingWait(_TASKS[1], 2, 1, 5, 0, 2, 0),
            OngoingWait(_TASKS[0], 1, 2, 6, 0, 0, 7))
    end = 10 * M.LONG_OPEN_NS
    since = (end - M.LONG_OPEN_NS, end - M.LONG_OPEN_NS + 1, 0)
    for fold in (M.py_fold_ongoing, C.fold_ongoing):
        t, w = {}, {}
        fold(t, w, keys, 900, since, end - M.LONG_OPEN_NS)
        t2, w2 = {}, {}
        M.py_fold_waits(w2, [k.charged(900) for k in keys])
        M.py_fold_tasks(t2, [blocked_only(k.task, 900) for k in keys])
        w2[keys[0]][9] = w2[keys[2]][9] = 900  # begun a second or more before the end; keys[1] a nanosecond after
        assert (t, w) == (t2, w2)


@pytest.mark.parametrize("bad, error", [
    ((("x", 1),), TypeError),  # a slot that is no integer
    (((1, 2, 3),), ValueError),  # no pair
    (((1, "n"),), TypeError),  # a count that is no number
])
def test_a_damaged_histogram_fails_alike(bad, error):
    first = TaskDelta(_TASKS[0], runq_hist=((1, 1),))
    record = TaskDelta(_TASKS[0], runq_hist=bad)
    for fold in (M.py_fold_tasks, lambda t, r: C.fold_tasks(t, r, M.RUNQ_SLOTS)):
        with pytest.raises(error):
            fold({}, [first, record])
    with pytest.raises(TypeError):
        C.fold_tasks([], [], 40)
    with pytest.raises(ValueError):
        C.fold_waits({}, [], -1)
    for fold in (M.py_fold_ongoing, C.fold_ongoing):
        with pytest.raises(TypeError):  # a key that is no tuple
            fold({}, {}, (5,), 1, None, 0)
        with pytest.raises(TypeError):  # an accumulator that is no list
            fold({}, {OngoingWait(_TASKS[0], 1, 1, 1, 1, 0, 0): (0,) * 10}, (OngoingWait(_TASKS[0], 1, 1, 1, 1, 0, 0),),
                 1, None, 0)


def test_the_fold_takes_the_c_loops_where_built(monkeypatch):
    calls = []
    monkeypatch.setattr(M, "_modelfold", type("Spy", (), {
        name: staticmethod(lambda *a, _f=getattr(C, name), _n=name: calls.append(_n) or _f(*a))
        for name in ("fold_tasks", "fold_waits", "made_waits", "made_totals")}))
    M.ModelFold(M.RecordingMeta(1, "0", "h", "k", 2, 0.0, 0, 1.0, {})).model({}, {})
    assert calls == ["made_totals", "made_waits"]


def test_a_real_recordings_model_is_the_same_folded_in_python(report_recording, monkeypatch):
    path = str(report_recording["stall"])
    in_c = load_model(path)
    monkeypatch.setattr(M, "_modelfold", None)
    in_py = load_model(path)
    assert len(in_c.tasks) > 50 and len(in_c.waits) > 100
    assert in_c.tasks == in_py.tasks
    assert in_c.waits == in_py.waits
    assert in_c.waits_now == in_py.waits_now


# ---- a model's waits grouped for its ranking (asleep_scan, waits_now_groups) ------------------------------------

_STACKS = {0: None, 5: Stack(5, "kernel", ()), 6: Stack(6, "kernel", ("frame",))}  # none, walked empty, walked
_wait = st.builds(
    lambda task, state, kstack, count, charged, woken, other: M.StackWait(
        task, task.pid // 2, state, _STACKS[kstack], None, count, 7, 7, kstack_id=kstack or 3, charged_ns=charged,
        woken=woken, ustack_id=other[0], why=other[1], func=other[2]),
    st.sampled_from(_TASKS), st.integers(1, 2), st.sampled_from([0, 5, 6]), st.integers(0, 1),
    st.integers(-1, 3), st.sampled_from([(0, 0, 0), (1, 0, 0)]),
    # most alike (a run of one process's threads), some apart in one field each: the user stack, the evidence, the function
    st.sampled_from([(0, 0, "")] * 4 + [(4, 0, ""), (0, 2, ""), (0, 0, "worker_thread")]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_wait, max_size=12))
def test_sleeping_threads_waits_are_grouped_in_c_as_in_python(waits):
    """attribution.py _asleep's pass: the waits alone in their task, their kernel stacks walked or not, grouped alike
    in the order first met (each group's tasks, charges and waits in the model's order), the others' places in
    order."""
    _grouped_as_in_python(tuple(waits))


def _grouped_as_in_python(waits: tuple) -> None:
    """asleep_scan's groups and others, as attribution.py py_asleep's pass makes them."""
    groups, rest = C.asleep_scan(waits)
    tasks = [w.task for w in waits]
    want: dict = {}
    for i, w in enumerate(waits):
        if tasks.count(w.task) != 1:
            continue
        g = want.setdefault((w.tgid, w.state, w.why, w.func, w.woken, w.kstack_id, w.ustack_id), [w, [], [], [], []])
        g[1].append(w.task)
        g[2].append(w.charged)
        g[3].append([w])
        g[4].append(i)
    assert groups == want and list(groups) == list(want)
    assert rest == [i for i in range(len(waits)) if all(i not in g[4] for g in want.values())]


_asleep_fields = st.tuples(st.sampled_from([10, 11]), st.integers(1, 2), st.sampled_from([0, 5]),
                           st.sampled_from([(0, 0, 0), (1, 0, 0)]),
                           st.sampled_from([(0, 0, "")] * 4 + [(4, 0, ""), (0, 2, ""), (0, 0, "worker_thread")]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_asleep_fields, st.integers(1, 4)), max_size=8), st.sampled_from([None, 0, 3]))
def test_runs_of_threads_asleep_alike_are_grouped_in_c_as_in_python(runs, twice):
    """Threads asleep each alone in its task, in runs alike (one process's, as the dump meets them), runs apart in
    one field each, and a task with a second wait (`twice`: its place, none waits alone then)."""
    waits = []
    for (tgid, state, kstack, woken, (ustack_id, why, func)), n in runs:
        for _ in range(n):
            task = TaskId(100 + len(waits), 1)
            waits.append(M.StackWait(task, tgid, state, _STACKS[kstack], None, 0, 0, 0, kstack_id=kstack or 3,
                                     charged_ns=9, woken=woken, ustack_id=ustack_id, why=why, func=func))
    if twice is not None and len(waits) > twice:
        waits.append(M.StackWait(waits[twice].task, 10, 1, None, None, 0, 0, 0, kstack_id=3, charged_ns=1))
    _grouped_as_in_python(tuple(waits))


_now_key = st.builds(lambda task, state, other: OngoingWait(task, task.pid // 2, state, *other),
                     st.sampled_from(_TASKS), st.integers(1, 2),
                     # most alike, some apart in one field each: the stacks, the evidence, the function
                     st.sampled_from([(3, 4, 0, 0)] * 4 + [(5, 4, 0, 0), (3, 6, 0, 0), (3, 4, 1, 0), (3, 4, 0, 7)]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_now_key, st.integers(90, 110), st.integers(-1, 3)), max_size=12),
       st.lists(_wait, min_size=4, max_size=4), st.one_of(st.none(), st.sets(st.sampled_from(_TASKS))))
def test_waits_in_progress_are_grouped_in_c_as_in_python(entries, waits, scope):
    """blockers.py waits_now_by_cause's pass, with beginnings on both sides of (and at) the second's mark."""
    from stallscope.analyzer import blockers

    now = M.WaitsNow(tuple(k for k, _, _ in entries), tuple(s for _, s, _ in entries),
                     tuple(p for _, _, p in entries), tuple(waits), 100 + M.LONG_OPEN_NS)
    assert C.waits_now_groups(now.keys, now.since, now.places, now.waits, scope, 100) == \
        blockers.py_waits_now_groups(now, scope)


# ---- the last interval's waits carried on, made into the model at once (carried_made) ----------------------------

_META = M.RecordingMeta(1, "0", "h", "k", 2, 0.0, 0, 1.0, {})
_ASLEEP = [TaskId(p, 1000 + p) for p in range(3, 9)]  # two of them have records too
_asleep = st.builds(OngoingWait, st.sampled_from(_ASLEEP), st.integers(1, 3), st.integers(0, 2), st.integers(0, 3),
                    st.integers(0, 3), st.integers(0, 2), st.sampled_from([0, 0xffff1, 7]))
_interval = st.builds(
    lambda tasks, waits, keys, twice, ns, since, opened: (
        tasks, waits, keys + ([keys[0]._replace(state=9)] if twice and keys else []), ns, since, opened),
    st.lists(_task_delta, max_size=3), st.lists(_offcpu, max_size=3),
    st.lists(_asleep, max_size=6, unique_by=lambda k: k.task), st.booleans(),
    st.integers(0, 3 * M.LONG_OPEN_NS), st.lists(st.integers(0, 8 * M.LONG_OPEN_NS), max_size=7),
    st.one_of(st.none(), st.booleans()))


def _intervals(specs) -> list:
    """Intervals one after another, each 2 LONG_OPEN_NS long, from (tasks, waits, carried keys, their charge, their
    beginnings, whether the dump's handed waits are kept: None not, False none, True its waits' keys)."""
    out = []
    for i, (tasks, waits, keys, ns, since, opened) in enumerate(specs):
        start = (i + 1) * 2 * M.LONG_OPEN_NS
        handed = None if opened is None else tuple(
            WaitSince((o.task, o.tgid, o.state, o.kstack, o.ustack, o.why, o.func), start) for o in waits
        ) if opened else ()
        out.append(M.Interval(i, start, start + 2 * M.LONG_OPEN_NS, 0.0, 0, tasks=tuple(tasks), offcpu=tuple(waits),
                              ongoing=tuple(keys), ongoing_ns=ns, ongoing_since=tuple(since[:len(keys)]),
                              opened=handed))
    return out


def _models(make) -> tuple:
    """make()'s model with the last interval's waits carried on made at once, and folded as any others'."""
    infos = {_TASKS[0]: TaskInfo(_TASKS[0], 1, 0, "app")}  # the others unknown
    stacks = {1: Stack(1, "kernel", ()), 2: Stack(2, "user", ()), 3: Stack(3, "kernel", ())}
    at_once = make().model(infos, stacks)
    M.CARRIED_AT_ONCE = False
    try:
        folded = make().model(infos, stacks)
    finally:
        M.CARRIED_AT_ONCE = True
    return at_once, folded


def _same(a, b) -> None:
    assert list(a.tasks.items()) == list(b.tasks.items())  # in the order first met
    assert a.waits == b.waits
    assert (a.waits_now is None) == (b.waits_now is None)
    if a.waits_now is not None:
        assert (a.waits_now.keys, a.waits_now.since, a.waits_now.places) == (
            b.waits_now.keys, b.waits_now.since, b.waits_now.places)
        assert tuple(a.waits_now) == tuple(b.waits_now)


made = {True: 0, False: 0}  # the windows whose last interval's waits carried on were made at once, and the others


def _carried_made_at_once(ivs) -> bool:
    fold = M.ModelFold(_META, lazy=True).add(ivs)
    return fold._carried is not None and M._carried_made(fold._carried, fold.tasks, fold.waits, {}, {}, {}) is not None


@settings(max_examples=400, deadline=None)
@given(st.lists(_interval, min_size=1, max_size=3), st.integers(1, 2))
def test_waits_carried_on_made_at_once_are_the_models_folded(specs, split):
    """A window of intervals, folded at once and as two folds merged (a live view's wide window): its model the same
    whether the last interval's waits carried on are made at once or folded, whatever the window met of their keys
    and tasks before (then folded) and with a task carried twice (folded)."""
    ivs = _intervals(specs)
    _same(*_models(lambda: M.ModelFold(_META, lazy=True).add(ivs)))
    made[_carried_made_at_once(ivs)] += 1

    def merged():
        head, tail = M.ModelFold(_META, lazy=True).add(ivs[:split]), M.ModelFold(_META, lazy=True).add(ivs[split:])
        return head.merge(tail)

    _same(*_models(merged))


def test_the_windows_drawn_made_them_at_once_and_folded_them():
    """Run after the one above: both of its ways were taken, each many times (made at once in about one window of
    eight drawn: 40-60 of 400)."""
    if not sum(made.values()):
        pytest.skip("counts what the test above drew: run with it")
    assert made[True] >= 10 and made[False] >= 10, made


def test_waits_carried_on_made_at_once_where_they_can_be(monkeypatch):
    """Made at once for keys and tasks the fold did not meet; folded for a task met before, or carried twice."""
    calls = []
    real = C.carried_made
    monkeypatch.setattr(M, "_modelfold", type("Spy", (), {
        **{n: staticmethod(getattr(C, n)) for n in ("fold_tasks", "fold_waits", "made_waits", "made_totals")},
        "fold_ongoing": staticmethod(lambda *a: calls.append("fold_ongoing") or C.fold_ongoing(*a)),
        "carried_made": staticmethod(lambda *a: (lambda made: calls.append(made is not None) or made)(real(*a)))}))
    asleep = (OngoingWait(_TASKS[0], 1, 1, 1, 2, 0, 0), OngoingWait(_TASKS[1], 1, 1, 1, 2, 0, 7))
    iv = M.Interval(0, 0, 10, 0.0, 0, ongoing=asleep, ongoing_ns=10, ongoing_since=(0, 0), opened=())
    model = M.ModelFold(_META, lazy=True).add([iv]).model({}, {1: Stack(1, "kernel", ())})
    assert calls == [True]
    assert [w.func for w in model.waits] == ["", "0x7"] and model.tasks[_TASKS[1]].offcpu_ns == 10
    assert model.waits[0].kstack == Stack(1, "kernel", ()) and model.waits[0].ustack is None
    calls.clear()
    met = M.Interval(0, 0, 10, 0.0, 0, tasks=(TaskDelta(_TASKS[1], run_ns=5),), ongoing=asleep, ongoing_ns=10)
    M.ModelFold(_META, lazy=True).add([met]).model({}, {})
    assert calls == [False, "fold_ongoing"]
    calls.clear()
    twice = M.Interval(0, 0, 10, 0.0, 0, ongoing=(asleep[0], asleep[0]._replace(state=2)), ongoing_ns=10)
    M.ModelFold(_META, lazy=True).add([twice]).model({}, {})
    assert calls == [False, "fold_ongoing"]
