"""A recording interval by interval: the time series a report draws, and the per-interval parts of its
tables, so that any window of intervals gets its own table by summing them. Pure functions, no I/O.

Every per-interval figure is a part of the whole recording's figure, computed the same way, so the
parts of all intervals add up to what the model (and the JSON export) says for the whole:

- causes: each wait record goes to its causes as the whole recording's attribution sends it
  (analyzer/attribution.py `split_waits`: a drawn wait to its stack's cause, an undrawn one shared in
  its stratum's fixed fractions), its time, count and log2 histogram alike; a window's percentiles come
  from its summed histograms, never from averaged percentiles;
- threads, processes, the run-queue latency histogram, migrations: the task deltas as recorded;
- locks: each contention to its lock_stat row (analyzer/locks.py row keys);
- slab caches and on-CPU functions: each delta to its cache, each sample to its functions.

Rates are per second of each interval's own length (a stretched interval is not a spike).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Iterable, Iterator

from stallscope.analyzer.attribution import idle_input_name, long_input_cause, split_waits
from stallscope.analyzer.blockers import WAITING_FOR_CPU
from stallscope.analyzer.causes import IDLE, CauseTable
from stallscope.analyzer.locks import LOCK_KIND_SLAB, lock_stats, lock_type, row_key
from stallscope.analyzer.model import LockWaits, Model, OncpuSamples, add_pair, long_open_parts
from stallscope.analyzer.oncpu import FunctionsOf, selected_samples
from stallscope.analyzer.sample import Interval, TaskId
from stallscope.analyzer.scope import in_scope
from stallscope.analyzer.slab import list_lock_caches

RUNQ_SLOTS = 40


@dataclass
class CauseSeries:
    """One cause's waiting time, waits, longest measured wait and log2(ns) histogram, per interval
    (sparse: intervals without any are absent). Shared-out parts make time, count and histogram
    fractional."""

    cls: str
    ns: dict[int, float] = field(default_factory=dict)
    count: dict[int, float] = field(default_factory=dict)
    max_ns: dict[int, int] = field(default_factory=dict)
    hist: dict[int, dict[int, float]] = field(default_factory=dict)


@dataclass
class Series:
    """Per interval, in recording order. `start_ns` is relative to the first interval's start."""

    start_ns: list[int] = field(default_factory=list)
    duration_ns: list[int] = field(default_factory=list)
    switches: list[int] = field(default_factory=list)  # context switches on all CPUs (the probes' count)
    run_ns: list[int] = field(default_factory=list)  # time the recorded tasks spent on a CPU
    runq_ns: list[int] = field(default_factory=list)  # ... and waiting for one
    migrations: list[int] = field(default_factory=list)
    lock_wait_ns: list[int] = field(default_factory=list)  # waits of the lock_stat rows that are locks
    runq_hist: list[dict[int, int]] = field(default_factory=list)  # wakeup-to-run latency, recorded tasks
    # the CPUs busy on average (each CPU's busy share of its time, summed: /proc/stat at each drain), None where
    # the interval did not keep it (a recording made before)
    cpus_busy: list[float | None] = field(default_factory=list)
    # the time a CPU quota throttled, summed over the cgroups and their CPUs (cpu.stat), and the periods throttled
    throttled_ns: list[int] = field(default_factory=list)
    throttled_periods: list[int] = field(default_factory=list)
    matrix: list[tuple[tuple[int, int, int], ...]] = field(default_factory=list)  # (src, dst, migrations)
    # per CPU: interval -> [busy ns, total ns (/proc/stat), run-queue wait ns, run-queue waits (those that ended
    # on it)]; an interval that kept neither is absent
    cpus: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    oncpu_samples: list[int] = field(default_factory=list)  # samples of the profiled (non-stallscope) tasks
    causes: dict[str, CauseSeries] = field(default_factory=dict)
    # per thread: interval -> [offcpu_ns, runq_wait_ns, voluntary, involuntary, migrations]
    tasks: dict[TaskId, dict[int, list[int]]] = field(default_factory=dict)
    # per process (tgid), per cause (Waiting for CPU included): interval -> ns
    process_causes: dict[int, dict[str, dict[int, float]]] = field(default_factory=dict)
    # per lock_stat row (name, type): interval -> [contentions, wait ns]
    locks: dict[tuple[str, str], dict[int, list[int]]] = field(default_factory=dict)
    # per slab cache address: interval -> [allocs, frees, bytes_alloc, list_lock contentions, list_lock wait ns]
    slab: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    # per (function, kind): interval -> [self samples, inclusive samples]
    functions: dict[tuple[str, str], dict[int, list[int]]] = field(default_factory=dict)

    @property
    def intervals(self) -> int:
        return len(self.start_ns)


class _Keys:
    """Record keys numbered in the order first seen: a ledger row holds a key's number, not the key."""

    def __init__(self) -> None:
        self.index: dict[tuple, int] = {}
        self.keys: list[tuple] = []

    def number(self, key: tuple) -> int:
        n = self.index.get(key)
        if n is None:
            n = self.index[key] = len(self.keys)
            self.keys.append(key)
        return n


@dataclass(frozen=True)
class LedgerEntry:
    """One interval as the series reads it: its records, the off-CPU and lock ones as (key number, values)."""

    start_ns: int
    duration_ns: int
    switches: int
    migrations: tuple
    tasks: tuple
    offcpu: tuple  # (wait key number, charged ns, count, max ns, hist)
    locks: array  # (lock key number, count, total ns) after one another: the most numerous records, kept flat
    futex: tuple
    slab: tuple
    oncpu: tuple
    long_open: dict  # wait key number -> its part while in progress a second and more (model.long_open_parts)
    cpu_time: tuple = ()  # (cpu, busy ns, total ns)
    throttled: tuple = ()  # sample.Throttled
    cpu_runq: tuple = ()  # (cpu, run-queue wait ns, waits): the waits that ended on it


class _LockKeys(Sequence):
    """The keys of a model's lock records, in its order, each made when read: a series of the model they were
    folded into reads its records by number and never their keys (a long recording has hundreds of thousands)."""

    __slots__ = ("_waits",)

    def __init__(self, lock_waits) -> None:
        self._waits = lock_waits

    def __len__(self) -> int:
        return len(self._waits)

    def __getitem__(self, n):
        if isinstance(n, slice):
            return [self[i] for i in range(*n.indices(len(self)))]
        w = self._waits[n]
        return (w.task, w.tgid, w.addr, w.flags, w.kind, w.cache, w.stack_id)


class Ledger:
    """A window's intervals as `interval_series` reads them. Kept while the model is folded from the same
    stream, the series needs no second read of the recording: each wait and lock record is a key number and
    its values. Kept by the model's fold itself (`keep`: a report's), each wait key is numbered as the model's
    waits are ordered, and no key is kept here; kept beside it (`tee`), the keys are kept here, once. Iterated
    once it is filled, or `streamed` from intervals, each entry made and dropped (nothing kept but the keys)."""

    def __init__(self) -> None:
        self.waits = _Keys()  # (task, tgid, state, kstack, ustack, why, func address)
        self.locks = _Keys()  # the model's lock key (analyzer/model.py): (task, tgid, addr, flags, kind, cache, kstack)
        self.entries: list[LedgerEntry] = []
        self.folded = False  # every interval kept as the model was folded from them: its lock keys number alike
        # the wait keys numbered as the model's waits are ordered (`keep`), not here: key n is model.waits[n]
        self.by_model = False

    def entry(self, iv: Interval, offcpu: tuple | None = None, long_open: dict | None = None) -> LedgerEntry:
        """An interval's entry; its off-CPU records and its waits' long-open parts numbered here, unless given."""
        wait, lock = self.waits.number, self.locks.number
        if offcpu is None:
            offcpu = tuple((wait((o.task, o.tgid, o.state, o.kstack, o.ustack, o.why, o.func)), o.charged, o.count,
                            o.max_ns, o.hist) for o in iv.offcpu_records())
            long_open = {wait(tuple(k)): ns for k, ns in long_open_parts(iv)}
        return LedgerEntry(
            iv.start_ns, iv.duration_ns, iv.switches, iv.migrations, iv.task_records(), offcpu,
            array("q", [v for lk in iv.locks for v in (
                lock((lk.task, lk.tgid, lk.addr, lk.flags, lk.kind, lk.cache, lk.kstack)), lk.count, lk.total_ns)]),
            iv.futex, iv.slab, iv.oncpu, long_open, iv.cpu_time, iv.throttled, iv.cpu_runq)

    def keep(self, iv: Interval, offcpu: tuple, long_open: dict) -> None:
        """An interval as the model's fold keeps it (analyzer/model.py ModelFold `keep`): its off-CPU records and
        its waits' long-open parts numbered by the fold, as the model's waits are ordered (no key kept here: the
        fold has made each one already)."""
        self.by_model = True
        self.entries.append(self.entry(iv, offcpu, long_open))

    def kept_all(self) -> None:
        """Every interval of the model is kept (`keep`): the keys are only read from here on."""
        self.locks.index.clear()
        self.folded = True

    def tee(self, intervals: Iterable[Interval]) -> Iterator[Interval]:
        """`intervals`, each kept here as it passes."""
        for iv in intervals:
            self.entries.append(self.entry(iv))
            yield iv
        self.waits.index.clear()  # numbered: only the keys are read from here on
        self.locks.index.clear()
        self.folded = True

    def keep_locks(self, indexes: list[int], parts: dict[int, array], lock_waits) -> None:
        """The lock records of the intervals kept (`indexes`, in order), folded apart from them
        (analyzer/load.py fold_recording): per interval, (key number, count, wait ns) after one another, the
        keys numbered as the model's `lock_waits` are ordered. An index met twice (a damaged file's) has its
        records once, as a reader of intervals hands them out."""
        none = array("q")
        self.entries = [replace(e, locks=parts.pop(i, none)) for e, i in zip(self.entries, indexes)]
        self.locks.keys = _LockKeys(lock_waits)

    def streamed(self, intervals: Iterable[Interval]) -> Iterator[LedgerEntry]:
        for iv in intervals:
            yield self.entry(iv)


def _wait_key(task: TaskId, tgid: int, state: int, kstack: int, ustack: int, why: int, func: str) -> tuple:
    return (task, tgid, state, kstack, ustack, why, func)


def _add(d: dict, i: int, v: float) -> None:
    d[i] = d.get(i, 0) + v


def _add_list(d: dict, i: int, values) -> None:
    e = d.get(i)
    if e is None:
        d[i] = list(values)
    else:
        for j, v in enumerate(values):
            e[j] += v


def interval_series(model: Model, intervals: Iterable[Interval] | Ledger, table: CauseTable | None = None) -> Series:
    """The series of `intervals` (or of the ledger kept while the model was folded from them), the ones
    `model` was built from (its classification, lock rows and stacks name each record), for the tasks a
    report shows: every task but stallscope's own."""
    return series_parts(model, intervals, table)(0, None)


def series_parts(model: Model, intervals: Iterable[Interval] | Ledger,
                 table: CauseTable | None = None) -> Callable[[int, int | None], Series]:
    """interval_series in parts: what each record comes to worked out here, once, and a function that makes the
    series of intervals first..last - 1 (last None: to the end) alone, numbered as in the whole. The parts of a
    ledger kept as the model was folded (`Ledger.folded`: every key numbered at once) may be made in any order, in
    any process, and `joined` in interval order: the same Series as the whole made at once (a report shares them
    out between two processes: reports/build.py). Intervals streamed are made in one part, from the first."""
    scope = in_scope(model, None)
    own_tgid = model.meta.options.get("stallscope_pid")
    funcs = model.functions
    if isinstance(intervals, Ledger):
        ledger, entries = intervals, intervals.entries
    else:
        ledger = Ledger()
        entries = ledger.streamed(intervals)

    # where each wait record's time goes, from the whole recording's attribution: by the model's wait (a ledger
    # kept as the model was folded numbers its keys as the model's waits are ordered), else by its key
    by_model = ledger.by_model
    splits = {}
    for stratum_splits in split_waits(model, scope, table).values():
        for s in stratum_splits:
            w = s.wait
            splits[id(w) if by_model else _wait_key(w.task, w.tgid, w.state, w.kstack_id, w.ustack_id, w.why,
                                                    w.func)] = s
    tgid_of = {tid: t.info.tgid for tid, t in model.tasks.items()}
    # as blockers.cpu_parts: a task's run-queue waits count where it waited for a CPU at all
    waited = {tid for tid, t in model.tasks.items() if t.runq_wait_ns}

    # the lock_stat row of each lock group (analyzer/locks.py row keys: a kernel lock's field or address and
    # type, a futex's process and word), and whether the row is a lock (not a poll, event or join)
    lock_row: dict[tuple, tuple[str, str]] = {}
    is_lock: dict[tuple[str, str], bool] = {}
    for row in lock_stats(model):
        for key in row.keys:
            lock_row[key] = (row.name, row.type)
        is_lock[(row.name, row.type)] = row.is_lock
    node_owner = {addr: c.addr for addr, c in list_lock_caches(model).items()}
    types: dict[int, str] = {}
    # a ledger kept while this model was folded numbers the lock keys in the fold's own order: key n is
    # the model's n-th lock record; otherwise each key is found among the model's
    aligned = ledger.folded and len(ledger.locks.keys) == len(model.lock_waits)
    by_key: dict[tuple, LockWaits] | None = None

    def model_lock(n: int) -> LockWaits | None:
        nonlocal by_key
        if aligned:
            return model.lock_waits[n]
        if by_key is None:
            by_key = {(w.task, w.tgid, w.addr, w.flags, w.kind, w.cache, w.stack_id): w for w in model.lock_waits}
        return by_key.get(ledger.locks.keys[n])

    # what each numbered key of the ledger comes to, worked out when the key is first met
    # wait key number -> None (not in view) or (its causes as (name, class, fraction), its process, the name of
    # its input cause whose part in progress a second and more is idle and that idle cause's name (None, None for
    # any other wait), its count and longest wait are its cause's)
    wait_of: list = []
    lock_of: list = []  # lock key number -> (its row or None, the row is a lock, its slab cache or None) or None

    def wait_keys(start: int, end: int) -> Iterator[tuple]:
        """(task, tgid, split or None) of wait keys start..end - 1."""
        if by_model:
            for w in model.waits[start:end]:
                yield w.task, w.tgid, splits.get(id(w))
            return
        for task, tgid, state, kstack, ustack, why, func in ledger.waits.keys[start:end]:
            name = funcs.get(func, f"{func:#x}") if func else ""
            yield task, tgid, splits.get(_wait_key(task, tgid, state, kstack, ustack, why, name))

    def wait_to(n: int) -> None:
        for task, tgid, split in wait_keys(len(wait_of), n + 1):
            # a wait for input: the part of it in progress a second and more goes to its idle cause, as the
            # attribution moves it (analyzer/attribution.py _idle_input)
            if split is None:
                wait_of.append(None)
                continue
            quiet = long_input_cause(model, split.wait, table)
            wait_of.append((tuple((c.name, c.cls, frac) for c, frac in split.causes), tgid_of.get(task, tgid),
                            None if quiet is None else quiet.name,
                            None if quiet is None else idle_input_name(quiet.name), split.measured))

    # what a lock key comes to depends on its lock alone (its field or address, flags and kind), not on its task
    # or stack: worked out once per lock (10 minutes of a hackbench loop: 595,336 keys of a few thousand locks)
    lock_made: dict[tuple, tuple] = {}

    def lock_to(n: int) -> None:
        start = len(lock_of)
        for w in (model.lock_waits[start:n + 1] if aligned else map(model_lock, range(start, n + 1))):
            if w is None or scope is not None and w.task not in scope:
                lock_of.append(None)
                continue
            lock = (w.field, w.addr, w.flags, w.kind)
            made = lock_made.get(lock)
            if made is None:
                typ = types.get(w.flags)
                if typ is None:
                    typ = types[w.flags] = lock_type(w.flags)
                # the model's key names the field once for all its intervals
                row = lock_row.get(row_key(w, typ))
                made = lock_made[lock] = (row, row is not None and is_lock.get(row, True),
                                          node_owner.get(w.addr) if w.kind == LOCK_KIND_SLAB else None)
            lock_of.append(made)

    # each sampled stack's functions, once
    samples_of: dict[tuple, OncpuSamples] = {}
    for s in selected_samples(model):
        samples_of[(s.task, s.tgid, s.kstack_id, s.ustack_id)] = s
    sample_fns: dict[tuple, tuple[tuple[str, str], frozenset]] = {}
    functions_of = FunctionsOf()  # threads sharing a (kernel, user) stack share these

    # the start the series' times are relative to: the first interval's, whichever part is made
    first_start = [entries[0].start_ns if isinstance(entries, list) and entries else None]

    def part(first: int, last: int | None) -> Series:
        if not isinstance(entries, list) and first:
            raise ValueError("intervals streamed are made in one part, from the first")
        out = Series()
        sink = Sink(out, scope, waited, tgid_of)
        for i, e in enumerate(islice(entries, first, last), first):
            if first_start[0] is None:
                first_start[0] = e.start_ns
            one_interval(out, sink, i, e)
        return out

    def one_interval(out: Series, sink: Sink, i: int, e: LedgerEntry) -> None:
        out.start_ns.append(e.start_ns - first_start[0])
        out.duration_ns.append(e.duration_ns)
        out.switches.append(e.switches)
        out.migrations.append(sum(c for _s, _d, c in e.migrations))
        out.matrix.append(tuple(sorted(e.migrations)))
        hist: dict[int, int] = {}
        run, runq = _series_tasks(sink, i, e.tasks, hist)
        out.run_ns.append(run)
        out.runq_ns.append(runq)
        out.cpus_busy.append(sum(b / t for _c, b, t in e.cpu_time if t) if e.cpu_time else None)
        _cpus(out.cpus, i, e)
        out.throttled_ns.append(sum(t.throttled_ns for t in e.throttled))
        out.throttled_periods.append(sum(t.periods for t in e.throttled))
        out.runq_hist.append(hist)
        # keys first met in this interval (or, with a kept ledger, every key at once)
        waits_met = len(model.waits) if by_model else len(ledger.waits.keys)
        if len(wait_of) < waits_met:
            wait_to(waits_met - 1)
        if len(lock_of) < len(ledger.locks.keys):
            lock_to(len(ledger.locks.keys) - 1)
        _series_offcpu(sink, i, e.offcpu, wait_of, dict(e.long_open) if e.long_open else e.long_open)
        out.lock_wait_ns.append(_series_locks(sink, i, e.locks, lock_of) + _futex(out, i, e, scope, lock_row, is_lock))
        _slab(out, i, e)
        out.oncpu_samples.append(_oncpu(out, i, e, own_tgid, samples_of, sample_fns, functions_of))

    return part


def joined(parts: Sequence[Series]) -> Series:
    """Series of consecutive runs of intervals (series_parts' parts, in interval order) as one: each list
    followed by the next part's, each table's keys in the order first met across the parts, as the whole made at
    once has them."""
    out = Series()
    for p in parts:
        for f in _PER_INTERVAL:
            getattr(out, f).extend(getattr(p, f))
        for f, depth in _TABLES:
            _join_table(getattr(out, f), getattr(p, f), depth)
        for name, cs in p.causes.items():
            have = out.causes.get(name)
            if have is None:
                out.causes[name] = cs
                continue
            for d, more in ((have.ns, cs.ns), (have.count, cs.count), (have.max_ns, cs.max_ns), (have.hist, cs.hist)):
                d.update(more)  # each keyed by interval: a part's own
    return out


_PER_INTERVAL = ("start_ns", "duration_ns", "switches", "run_ns", "runq_ns", "migrations", "lock_wait_ns", "runq_hist",
                 "cpus_busy", "throttled_ns", "throttled_periods", "matrix", "oncpu_samples")
# each table of Series and the depth of its keys above the interval's (a table keyed by interval at depth 1)
_TABLES = (("cpus", 2), ("tasks", 2), ("process_causes", 3), ("locks", 2), ("slab", 2), ("functions", 2))


def _join_table(into: dict, more: dict, depth: int) -> None:
    if depth == 1:  # keyed by interval: this part's alone
        into.update(more)
        return
    for k, v in more.items():
        have = into.get(k)
        if have is None:
            into[k] = v
        else:
            _join_table(have, v, depth - 1)


# ---- the series' loops over an interval's records, in C where analyzer/seriesfold.c is built -------------------
# A report of 10 minutes of hackbench sums 240,000 task records, 450,000 off-CPU records and 1.3 million lock
# records into its series, each a handful of dictionary reads and additions. The Python functions below are what
# the C does (tests/test_seriesfold.py checks that the two agree).

class Sink:
    """Where an interval's records go: the series' tables, and what says which records are in view."""

    def __init__(self, out: Series, scope, waited: set, tgid_of: dict) -> None:
        self.tasks, self.process_causes, self.locks, self.slab = out.tasks, out.process_causes, out.locks, out.slab
        self.scope, self.waited, self.tgid_of = scope, waited, tgid_of
        self.cpu_name, self.cpu_cls = WAITING_FOR_CPU.name, WAITING_FOR_CPU.cls
        self.causes: dict[str, tuple] = {}  # name -> its series' (ns, count, max_ns, hist) (`cause`)
        self._series = out.causes

    def cause(self, name: str, cls: str) -> tuple:
        """The (ns, count, max_ns, hist) of a cause's series, the series made when first met."""
        cs = self._series.get(name)
        if cs is None:
            cs = self._series[name] = CauseSeries(cls)
        dicts = self.causes[name] = (cs.ns, cs.count, cs.max_ns, cs.hist)
        return dicts


def py_series_tasks(sink: Sink, i: int, records, hist: dict) -> tuple[int, int]:
    """An interval's task records (TaskDelta) into each thread's row, the run-queue histogram `hist`, and the
    waits for a CPU of the threads that waited for one; (time run, time waiting for a CPU) of those in view."""
    scope, waited, task_rows = sink.scope, sink.waited, sink.tasks
    run = runq = 0
    for d in records:
        task = d.task
        if scope is not None and task not in scope:
            continue
        run += d.run_ns
        runq += d.runq_wait_ns
        if d.runq_hist:
            for slot, c in d.runq_hist:
                if 0 <= slot < RUNQ_SLOTS:
                    hist[slot] = hist.get(slot, 0) + c
        row = task_rows.get(task)
        if row is None:
            row = task_rows[task] = {}
        t = row.get(i)
        if t is None:
            row[i] = [d.offcpu_ns, d.runq_wait_ns, d.voluntary_switches, d.involuntary_switches, d.migrations]
        else:
            t[0] += d.offcpu_ns
            t[1] += d.runq_wait_ns
            t[2] += d.voluntary_switches
            t[3] += d.involuntary_switches
            t[4] += d.migrations
        if task in waited and (d.runq_wait_ns or d.runq_count):
            ns, count, max_ns, chist = sink.causes.get(sink.cpu_name) or sink.cause(sink.cpu_name, sink.cpu_cls)
            ns[i] = ns.get(i, 0) + d.runq_wait_ns
            count[i] = count.get(i, 0) + d.runq_count
            if d.runq_max_ns:
                max_ns[i] = max(max_ns.get(i, 0), d.runq_max_ns)
            ch = chist.setdefault(i, {})
            for slot, c in d.runq_hist:
                ch[slot] = ch.get(slot, 0) + c
            pc = sink.process_causes.setdefault(sink.tgid_of.get(task, task.pid), {})
            waits = pc.setdefault(sink.cpu_name, {})
            waits[i] = waits.get(i, 0) + d.runq_wait_ns
    return run, runq


def py_series_offcpu(sink: Sink, i: int, records, wait_of: list, long_open: dict) -> None:
    """An interval's off-CPU records (key number, charged ns, count, max ns, histogram) into the series by cause
    and by process, each key's as `wait_of` says (interval_series); `long_open` (a copy: what is moved is taken
    from it, a key may have several records) says how much of a wait for input goes to its idle cause."""
    causes = sink.causes
    for n, charged, count, max_ns, hist in records:
        w = wait_of[n]
        if w is None:  # not in view (stallscope's own)
            continue
        parts, tgid, quiet, idle_name, measured = w
        pc = sink.process_causes.setdefault(tgid, {})
        for name, cls, frac in parts:
            ns_d, count_d, max_d, hist_d = causes.get(name) or sink.cause(name, cls)
            ns = charged * frac
            if quiet is not None and name == quiet and long_open.get(n):
                moved = min(float(long_open[n]), ns)
                long_open[n] -= moved
                ns -= moved
                idle = causes.get(idle_name) or sink.cause(idle_name, IDLE)
                _add(idle[0], i, moved)
                _add(pc.setdefault(idle_name, {}), i, moved)
            if ns:
                ns_d[i] = ns_d.get(i, 0) + ns
                d = pc.setdefault(name, {})
                d[i] = d.get(i, 0) + ns
            if count:
                count_d[i] = count_d.get(i, 0) + count * frac
            if measured and max_ns:
                max_d[i] = max(max_d.get(i, 0), max_ns)
            if hist:
                h = hist_d.setdefault(i, {})
                for slot, c in hist:
                    if 0 <= slot < RUNQ_SLOTS:
                        h[slot] = h.get(slot, 0) + c * frac


def py_series_locks(sink: Sink, i: int, flat: array, lock_of: list) -> int:
    """An interval's kernel lock records, (key number, count, wait ns) after one another, into their lock_stat
    rows and (a slab cache's list_lock) their caches, each key's as `lock_of` says (interval_series); the wait
    of those whose row is a lock."""
    total = 0
    locks, slab = sink.locks, sink.slab
    it = iter(flat)
    for n, count, wait_ns in zip(it, it, it):
        lk = lock_of[n]
        if lk is None:  # not in view
            continue
        row, a_lock, cache = lk
        if row is not None:
            d = locks.get(row)
            if d is None:
                d = locks[row] = {}
            add_pair(d, i, count, wait_ns)
            if a_lock:
                total += wait_ns
        if cache is not None:
            _add_list(slab.setdefault(cache, {}), i, (0, 0, 0, count, wait_ns))
    return total


try:
    from stallscope.analyzer import _seriesfold
except ImportError:  # not built: the loops run in Python
    _seriesfold = None


def _series_tasks(sink: Sink, i: int, records, hist: dict) -> tuple[int, int]:
    if _seriesfold is not None:
        return _seriesfold.series_tasks(sink, i, records, hist, RUNQ_SLOTS)
    return py_series_tasks(sink, i, records, hist)


def _series_offcpu(sink: Sink, i: int, records, wait_of: list, long_open: dict) -> None:
    if _seriesfold is not None:
        _seriesfold.series_offcpu(sink, i, records, wait_of, long_open, RUNQ_SLOTS, IDLE)
    else:
        py_series_offcpu(sink, i, records, wait_of, long_open)


def _series_locks(sink: Sink, i: int, flat: array, lock_of: list) -> int:
    if _seriesfold is not None and type(flat) is array and flat.typecode == "q" and type(lock_of) is list:
        return _seriesfold.series_locks(sink, i, flat, lock_of)
    return py_series_locks(sink, i, flat, lock_of)


def _futex(out: Series, i: int, e: LedgerEntry, scope, lock_row: dict, is_lock: dict) -> int:
    """The interval's futex records into their lock_stat rows; the wait of those that are locks."""
    total = 0
    for fx in e.futex:
        if scope is not None and fx.task not in scope:
            continue
        row = lock_row.get((fx.tgid, fx.uaddr))
        if row is not None:
            _add_list(out.locks.setdefault(row, {}), i, (fx.count, fx.total_ns))
            if is_lock.get(row, True):
                total += fx.total_ns
    return total


def _cpus(cpus: dict[int, dict[int, list[int]]], i: int, e: LedgerEntry) -> None:
    """Each CPU's busy time and run-queue waits in interval `i` (every CPU's waits: a run queue is the machine's,
    as the model's cpu_runq is)."""
    for c, busy, total in e.cpu_time:
        row = cpus.setdefault(c, {}).setdefault(i, [0, 0, 0, 0])
        row[0] += busy
        row[1] += total
    for c, ns, waits in e.cpu_runq:
        row = cpus.setdefault(c, {}).setdefault(i, [0, 0, 0, 0])
        row[2] += ns
        row[3] += waits


def _slab(out: Series, i: int, e: LedgerEntry) -> None:
    for d in e.slab:
        _add_list(out.slab.setdefault(d.cache, {}), i, (d.allocs, d.frees, d.bytes_alloc, 0, 0))


def _oncpu(out: Series, i: int, e: LedgerEntry, own_tgid, samples_of: dict, sample_fns: dict,
           functions_of: FunctionsOf) -> int:
    total = 0
    functions = out.functions
    for o in e.oncpu:
        if own_tgid and o.tgid == own_tgid:
            continue
        key = (o.task, o.tgid, o.kstack, o.ustack)
        fns = sample_fns.get(key)
        if fns is None:
            s = samples_of.get(key)
            if s is None:
                continue
            fns = sample_fns[key] = functions_of(s)
        n = o.samples
        total += n
        leaf, inclusive = fns
        for fn in inclusive:  # a function of each sampled stack: 270,000 in a report
            d = functions.get(fn)
            if d is None:
                d = functions[fn] = {}
            add_pair(d, i, n if fn == leaf else 0, n)
    return total
