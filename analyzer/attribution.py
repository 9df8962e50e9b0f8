"""Which cause each task's blocked time goes to, measured where a stack was walked and estimated, with
its error, where none was.

Every wait has its exact time and its evidence (what the task was doing when it blocked: analyzer/why.py);
a wait of d ns is drawn for a stack walk with probability p = min(1, d/T) (bpf/stacks.bpf.h). The waits
of one task with one state and one piece of evidence form a stratum. In a stratum:

- a drawn wait's time is its cause's, measured;
- the undrawn waits' time (exact, as a sum) is shared among the causes of the stratum's drawn waits in
  proportion to what each drawn wait stands for beyond itself, d/p - d (Horvitz-Thompson): a short wait
  drawn with p = 1/10 stands for nine like it. So a wait is only ever charged to a cause seen in waits
  of the same task doing the same thing (or, below, of its process's threads); the estimate's variance
  comes from the same terms (sum of (1 - p)/p^2 d^2, kept per key), by linearising the ratio;
- a stratum with no drawn wait is named by its evidence alone (the cause table's evidence rules: a
  read() on a pipe is "Reading from a pipe"), measured, never estimated; where no evidence rule names it
  ("In lseek()"), its undrawn waits are shared as above among the causes of the drawn waits of its
  process's other threads doing the same thing (same state and evidence): a pool of thousands of threads,
  each waiting a few times, has few waits of any one thread drawn, and their causes are the pool's.

Waits shorter than --min-stack-wait, stallscope's own, and those of recordings made with stacks off
can never be drawn: they are named by their evidence too, not shared. A recording made before waits
were drawn by length (no weights) shares its unwalked waits by the walked ones' time, as it did then.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import compress, count
from operator import attrgetter
from typing import Iterable, Iterator, NamedTuple

from stallscope.analyzer.memo import memoised, per_model
from stallscope.analyzer.causes import BLOCKER, IDLE, Cause, CauseTable, default_table
from stallscope.analyzer.model import Model, StackWait
from stallscope.analyzer.locks import locks_by_site
from stallscope.analyzer.sample import LOST_STACK, NO_STACK_LABELS, SHARABLE, STACK_NOT_DRAWN, Stack, TaskId
from stallscope.analyzer.why import decode, woken_by

try:  # a model's sleeping threads' waits grouped in C (analyzer/modelfold.c asleep_scan; py_asleep without it)
    from stallscope.analyzer._modelfold import asleep_scan as _c_asleep_scan
except ImportError:
    _c_asleep_scan = None



def no_stack_cause(stack_id: int) -> Cause:
    return Cause(NO_STACK_LABELS.get(stack_id, LOST_STACK), BLOCKER, "", matched=False, method="evidence")


@dataclass(slots=True)
class Part:
    """One task's blocked time for one cause in the window: measured (drawn waits, and strata named by
    their evidence) plus estimated (undrawn waits shared out), with the estimate's variance."""

    cause: Cause
    task: TaskId
    ns: float = 0.0
    estimated_ns: float = 0.0
    var_ns2: float = 0.0
    count: float = 0.0
    max_ns: int = 0
    stacks: dict = field(default_factory=dict)  # stack id -> [charged ns, Stack]
    hist: dict = field(default_factory=dict)  # log2 slot -> waits
    pooled_ns: float = 0.0  # of estimated_ns: shared by the drawn waits of its process's other threads (a Pool)


def _arch(model: Model) -> str | None:
    return (model.meta.machine or {}).get("arch")


def wait_evidence(model: Model, w: StackWait, arch: str | None = None):
    return decode(w.why, w.func, w.woken, arch if arch is not None else _arch(model))


def classify_wait(model: Model, w: StackWait, table: CauseTable | None = None) -> Cause:
    """One wait record's cause: from its stack when it has one, else from its evidence. A stack no rule names
    that starts where the contention tracepoints saw a sleeping lock wanted is named for that lock
    (locks.locks_by_site: the same call site, `sym+0xoff`), as is one an `unless_lock` rule names."""
    cause = (table or default_table()).classify(w.kstack, w.ustack, w.state, wait_evidence(model, w))
    if cause is None:
        return no_stack_cause(w.kstack_id)
    if (not cause.matched or cause.unless_lock) and cause.method == "stack":
        site = locks_by_site(model).get(cause.frame)
        if site is not None:
            return site.cause
    return cause


def idle_input_name(cause: str) -> str:
    """The idle cause of a wait for input that got nothing for a second and more ("Reading from a pipe,
    nothing came")."""
    return f"{cause}, nothing came"


def input_cause(model: Model, w: StackWait, table: CauseTable | None = None) -> Cause | None:
    """The cause of a wait when it is a blocker that waits for input (Rule.input; its stack's, or, with none
    walked for it, its evidence's); None otherwise."""
    cause = classify_wait(model, w, table)
    if not cause.matched and not _drawn(w):
        cause = (table or default_table()).classify(None, w.ustack, w.state, wait_evidence(model, w)) or cause
    return cause if cause.input and cause.cls == BLOCKER else None


def long_input_cause(model: Model, w: StackWait, table: CauseTable | None = None) -> Cause | None:
    """The input cause of a wait part of whose charge went on a second and more (StackWait.long_open_ns):
    that part is its idle cause's (_idle_input); None for any other wait."""
    return input_cause(model, w, table) if w.long_open_ns else None


def _waits_for_input(model: Model, table: CauseTable | None,
                     waits: Iterable[StackWait] | None = None) -> Iterator[tuple[StackWait, Cause]]:
    """The waits for input part of whose charge went on a second and more (StackWait.long_open_ns), in the
    model's order, each with its input cause (asked once for the waits alike); of `waits` (None: the model's)."""
    named: dict[tuple, Cause | None] = {}
    for w in model.waits if waits is None else waits:
        if not w.long_open_ns:
            continue
        like = (w.state, w.kstack_id, w.ustack_id, w.why, w.func, w.woken)
        if like not in named:
            named[like] = input_cause(model, w, table)
        cause = named[like]
        if cause is not None:
            yield w, cause


def _idle_input(merged: dict[tuple[TaskId, str], Part], moves: Iterable[tuple[StackWait, Cause]]) -> None:
    """A wait for input is a consumer held up by its producer; but the part of it charged while it had
    already gone on for LONG_OPEN_NS (StackWait.long_open_ns: a reader that got nothing, an idle one) moves
    from its blocker cause to the idle one, "NAME, nothing came" (`moves`: _waits_for_input). The parts
    changed are copies: the strata keep theirs."""
    for w, cause in moves:
        p = merged.get((w.task, cause.name))
        if p is None or p.ns <= 0:
            continue
        moved = min(float(w.long_open_ns), p.ns)
        moved_est = max(0.0, moved - (p.ns - p.estimated_ns))
        stacks = {sid: list(e) for sid, e in p.stacks.items()}
        walked = stacks.get(w.kstack_id)
        if walked is not None:
            walked[0] = max(0.0, walked[0] - moved)
        pooled = p.pooled_ns * moved_est / p.estimated_ns if p.estimated_ns else 0.0  # in proportion
        left = replace(p, ns=p.ns - moved, estimated_ns=p.estimated_ns - moved_est, stacks=stacks, hist=dict(p.hist),
                       pooled_ns=p.pooled_ns - pooled)
        if left.ns <= 0 and not left.count:
            del merged[(w.task, cause.name)]
        else:
            merged[(w.task, cause.name)] = left
        idle = Cause(idle_input_name(cause.name), IDLE, cause.frame, cause.matched, cause.method)
        q = merged.get((w.task, idle.name))
        if q is None:
            q = merged[(w.task, idle.name)] = Part(idle, w.task)
        q.ns += moved
        q.estimated_ns += moved_est
        q.pooled_ns += pooled
        if walked is not None:
            e = q.stacks.setdefault(w.kstack_id, [0, walked[1]])
            e[0] += moved


def _drawn(w: StackWait) -> bool:
    return w.kstack is not None and bool(w.kstack.frames)


def attribute(model: Model, tasks: set[TaskId] | None, table: CauseTable | None = None) -> list[Part]:
    """Every (task, cause) part of the blocked time of `tasks` (None: every task) in the window. A part
    is one task's: the parts of some tasks are those of all, merged once per model."""
    every = _attribute(model, table)
    return list(every) if tasks is None else [p for p in every if p.task in tasks]


@per_model
def _attribute(model: Model, table: CauseTable | None) -> tuple[Part, ...]:
    """Kept per model (the blockers, each task's causes and the advice ask alike); readers never change
    the parts."""
    merged: dict[tuple[TaskId, str], Part] = {}
    alone: set[tuple[TaskId, str]] = set()  # a task's only part of a cause: the stratum's own, shared
    for by_cause in attribute_strata(model, None, table).values():
        _merge_stratum(merged, alone, by_cause)
    _idle_input(merged, _waits_for_input(model, table))
    return tuple(merged.values())


class Alike:
    """The parts of many tasks alike: thousands of sleeping threads, each with the waits of one stratum, named by
    the same evidence or the same walked stack. Each task's part of `cause` is its waits' charge, measured, as
    attribute() gives it in a Part of its own; grouped for the readers that sum the parts by cause (the ranking and
    its denominator, blockers.py), which need no Part per task. Their count, longest wait, histogram and walked
    stacks are summed when first read: a view that leaves idle causes out never reads them."""

    __slots__ = ("cause", "tasks", "ns", "waits", "_sums")

    def __init__(self, cause: Cause, tasks: list[TaskId], ns: list[int], waits: list):
        self.cause = cause
        self.tasks = tasks
        self.ns = ns  # each task's time, in `tasks`' order
        self.waits = waits  # each task's wait records (none: time moved to an idle cause, _idle_input)
        self._sums: tuple[int, int, dict[int, int]] | None = None

    @property
    def count(self) -> int:
        return self._summed()[0]

    @property
    def max_ns(self) -> int:
        return self._summed()[1]

    @property
    def hist(self) -> dict[int, int]:
        return self._summed()[2]

    @property
    def stacks(self) -> dict[int, list]:
        """The walked kernel stacks of its waits, as a Part holds them: stack id -> [charged ns, Stack]."""
        return self._summed()[3]

    def _summed(self) -> tuple[int, int, dict[int, int], dict[int, list]]:
        if self._sums is None:
            count = max_ns = 0
            hist: dict[int, int] = {}
            stacks: dict[int, list] = {}
            for task_waits in self.waits:
                for w in task_waits:
                    if w.count:
                        count += w.count
                        if w.max_ns > max_ns:
                            max_ns = w.max_ns
                    if w.hist:
                        for slot, c in nonzero_slots(w.hist):
                            hist[slot] = hist.get(slot, 0) + c
                    if _drawn(w):  # as _add_measured charges a drawn wait's stack
                        e = stacks.get(w.kstack.id)
                        if e is None:
                            stacks[w.kstack.id] = [w.charged, w.kstack]
                        else:
                            e[0] += w.charged
            self._sums = (count, max_ns, hist, stacks)
        return self._sums

    def of(self, tasks: set[TaskId]) -> "Alike | None":
        """These parts of `tasks` only (None: none)."""
        if isinstance(tasks, (set, frozenset)) and tasks.issuperset(self.tasks):  # the default scope leaves out
            return self  # only stallscope's own: a pass in C
        kept = [i for i, t in enumerate(self.tasks) if t in tasks]
        if len(kept) == len(self.tasks):
            return self
        if not kept:
            return None
        return Alike(self.cause, [self.tasks[i] for i in kept], [self.ns[i] for i in kept],
                     [self.waits[i] for i in kept])


class Grouped(NamedTuple):
    """The parts of attribute(), some grouped: `parts` as attribute() gives them, less those in `alike`."""

    parts: list[Part]
    alike: list[Alike]


def attribute_grouped(model: Model, tasks: set[TaskId] | None, table: CauseTable | None = None) -> Grouped:
    """attribute(), with the parts of tasks alike grouped (Alike), for a reader that sums the parts by cause: it
    reads thousands of sleeping threads' parts in a fraction of the time (a test checks that the two agree)."""
    every = _grouped(model, table)
    if tasks is None:
        return every
    return Grouped([p for p in every.parts if p.task in tasks],
                   [a for a in (x.of(tasks) for x in every.alike) if a is not None])


def parts_at_hand(model: Model, tasks: set[TaskId] | None, table: CauseTable | None = None) -> Grouped:
    """The parts of `tasks` as cheaply as they are had for a reader that sums them per task and cause: attribute()'s
    where this model's are made already (a report ranks by them), else attribute_grouped()'s (a live view ranks by
    those), with no group."""
    if memoised(_attribute, model, table) is not None:
        return Grouped(attribute(model, tasks, table), [])
    return attribute_grouped(model, tasks, table)


@per_model
def _grouped(model: Model, table: CauseTable | None) -> Grouped:
    """_attribute's parts, those of the strata whose waits were none drawn grouped by cause (Alike): such a
    stratum is named by its evidence alone and all of its time is measured. It stays a Part where its task's part
    of the cause is not its alone: the task has another part of it (from another stratum, or one that a wait
    for input moves time from: _idle_input), so that every part is what _attribute makes of it, merged and moved
    alike. A machine's sleeping threads, thousands of strata of one wait each, are grouped first (_asleep)."""
    table = table or default_table()
    arch = _arch(model)
    asleep, rest = _asleep(model, table, arch)
    strata = _by_stratum(model, rest)
    named = _named_by_evidence(model, table, arch, strata)
    movers, moves_own, touched = _input_moves(model, table, named, rest)
    keys: dict[tuple[TaskId, str], int] = {}  # (task, cause) -> strata named by evidence
    for stratum, cause in named.items():
        key = (stratum[0], cause.name)
        keys[key] = keys.get(key, 0) + 1
    parts_of: dict[Stratum, dict[str, Part]] = {}  # the strata made into Parts
    for stratum, waits in strata.items():
        cause = named.get(stratum)
        if cause is None or keys[(stratum[0], cause.name)] > 1 or (stratum[0], cause.name) in touched:
            parts_of[stratum] = _stratum_parts(model, table, stratum[0],
                                               _splits_of(model, table, arch, stratum, waits))
    others = {(p.task, p.cause.name) for by_cause in parts_of.values() for p in by_cause.values()}
    alike: dict[int, list] = {}  # a cause (its id: one per evidence) -> [cause, tasks, strata]
    for stratum, cause in named.items():
        if stratum in parts_of:
            continue
        if (stratum[0], cause.name) in others:  # merged with the task's other part of the cause
            parts_of[stratum] = _stratum_parts(model, table, stratum[0],
                                               [WaitSplit(w, ((cause, 1.0),), True) for w in strata[stratum]])
            continue
        g = alike.get(id(cause))
        if g is None:
            g = alike[id(cause)] = [cause, [], []]
        g[1].append(stratum[0])
        g[2].append(stratum)
    merged: dict[tuple[TaskId, str], Part] = {}
    alone: set[tuple[TaskId, str]] = set()
    for stratum in strata:  # in _attribute's order
        by_cause = parts_of.get(stratum)
        if by_cause is not None:
            _merge_stratum(merged, alone, by_cause)
    own = {s: moves for s, moves in moves_own.items() if s not in parts_of}
    _idle_input(merged, [(w, c) for w, c in movers if (w.task, w.state, w.why, w.func) not in own]
                if own else movers)
    return Grouped(list(merged.values()), _alike_parts(strata, alike.values(), own) + asleep)


def _asleep(model: Model, table: CauseTable, arch: str | None) -> tuple[list[Alike], list[StackWait]]:
    """The waits of a machine's sleeping threads, grouped, and the others (in the model's order). A wait alone in its
    task is a stratum whose part is all its wait's, measured, and named the same for every wait of its process alike
    (state, evidence, stacks): by its evidence when no stack was walked for it, else by its walked stack (a sleeping
    thread's wait is walked by a task dump once it has gone on long enough: after some minutes, most of them). Each
    such group is asked once whether what names it needs no pool (_pool_of, for an undrawn wait) and whether it
    waits for input (whose long part _idle_input moves); if so, its waits are an Alike of their own (per cause, in the
    model's order), each task's part its wait's charge. Thousands of threads asleep are then one pass here rather than
    a stratum each through _grouped's: in C where analyzer/modelfold.c is built (asleep_scan), else py_asleep."""
    waits = model.waits
    if _c_asleep_scan is None or not isinstance(waits, tuple):
        return py_asleep(model, table, arch)
    likes, rest_at = _c_asleep_scan(waits)
    by_cause: dict[int, Alike] = {}  # one Alike per cause, as _grouped makes them
    refused: list[int] = []  # the places of the waits of groups not kept as one
    named: dict[tuple, tuple[Cause, bool]] = {}
    for first, tasks, ns, task_waits, places in likes.values():
        g = _asleep_group(model, table, arch, first, named)
        if g is None:
            refused += places
            continue
        a = by_cause.get(id(g[0]))
        if a is None:
            by_cause[id(g[0])] = Alike(g[0], tasks, ns, task_waits)
        else:
            a.tasks += tasks
            a.ns += ns
            a.waits += task_waits
    if refused:  # in the model's order
        rest_at = sorted(rest_at + refused)
    return list(by_cause.values()), [waits[i] for i in rest_at]


def py_asleep(model: Model, table: CauseTable, arch: str | None) -> tuple[list[Alike], list[StackWait]]:
    """_asleep in Python."""
    waits = model.waits
    alone = Counter(map(_TASK, waits))
    groups: dict[tuple, list | None] = {}  # a wait's like key -> [cause, tasks, ns, waits], None: not grouped
    named: dict[tuple, tuple[Cause, bool]] = {}
    rest: list[StackWait] = []
    for w in waits:
        if alone[w.task] != 1:
            rest.append(w)
            continue
        like = (w.tgid, w.state, w.why, w.func, w.woken, w.kstack_id, w.ustack_id)
        g = groups.get(like, False)
        if g is False:
            g = groups[like] = _asleep_group(model, table, arch, w, named)
        if g is None:
            rest.append(w)
            continue
        g[1].append(w.task)
        g[2].append(w.total_ns if w.charged_ns < 0 else w.charged_ns)
        g[3].append([w])
    by_cause: dict[int, Alike] = {}  # one Alike per cause, as _grouped makes them
    for g in groups.values():
        if g is None or not g[1]:
            continue
        a = by_cause.get(id(g[0]))
        if a is None:
            by_cause[id(g[0])] = Alike(g[0], g[1], g[2], g[3])
        else:
            a.tasks += g[1]
            a.ns += g[2]
            a.waits += g[3]
    return list(by_cause.values()), rest


_TASK = attrgetter("task")


def _asleep_group(model: Model, table: CauseTable, arch: str | None, w: StackWait,
                  named: dict[tuple, tuple[Cause, bool]]) -> list | None:
    """The group of the waits like `w` (_asleep): [its cause, tasks, ns, waits]; None where they are not grouped (a
    pool shares them, or they wait for input). Their cause is their walked stack's (classify_wait, as _splits_of
    names a drawn wait alone in its stratum), else their evidence's. What names them and whether they wait for input
    are asked once for the groups of every process (`named`: by what they read of the wait, its stacks' ids among
    it, and of how its waits ended, the kind of waker that ended most: hackbench's 400 processes wait alike); whether
    a pool of their process shares undrawn ones, for each."""
    evidence = (w.state, w.why, w.func, woken_by(w.woken), w.kstack_id, w.ustack_id)
    known = named.get(evidence)
    drawn = _drawn(w)
    if known is None:
        cause = classify_wait(model, w, table) if drawn else _alone_cause(table, arch, w.state, w.why, w.func, w)
        known = named[evidence] = (cause, input_cause(model, w, table) is not None)
    cause, for_input = known
    if not drawn and not cause.matched and _pool_of(model, table, [w], cause):
        return None
    if for_input:
        return None
    return [cause, [], [], []]


def _named_by_evidence(model: Model, table: CauseTable, arch: str | None,
                       strata: dict[Stratum, list[StackWait]]) -> dict[Stratum, Cause]:
    """The strata whose waits were none drawn for a stack walk, and the cause their evidence names (as
    _split_all names them), each asked once for the thousands of sleeping threads that share it; not those
    whose waits are named one by one (no rule matched the evidence of several), nor those shared by their
    process's drawn waits (_pool_of)."""
    causes: dict[tuple, Cause | None] = {}
    out: dict[Stratum, Cause] = {}
    for stratum, waits in strata.items():
        _task, state, why, func = stratum
        if len(waits) == 1:
            w = waits[0]
            if _drawn(w):
                continue
            like = (state, why, func, w.woken, w.kstack_id)
            cause = causes.get(like)
            if cause is None:
                cause = causes[like] = _alone_cause(table, arch, state, why, func, w)
        else:
            if any(map(_drawn, waits)):
                continue
            woken = tuple(sum(w.woken[i] for w in waits) for i in range(3))
            like = (state, why, func, woken)
            if like in causes:
                cause = causes[like]
            else:
                cause = causes[like] = table.classify(None, None, state, decode(why, func, woken, arch))
            if cause is None:
                continue
        if not cause.matched and _pool_of(model, table, waits, cause):
            continue
        out[stratum] = cause
    return out


def _input_moves(model: Model, table: CauseTable, named: dict[Stratum, Cause], waits: list[StackWait]):
    """The waits for input that had gone on a second (_idle_input moves their time from their task's part of
    their input cause), of `waits` (those _asleep leaves), in the model's order; those of the strata `named` that
    move time from their stratum's own part, by stratum, each with its input cause; and the (task, cause) parts
    the others move time from."""
    movers = list(_waits_for_input(model, table, waits))
    moves_own: dict[Stratum, list[tuple[StackWait, Cause]]] = {}
    touched: set[tuple[TaskId, str]] = set()
    for w, cause in movers:
        stratum = (w.task, w.state, w.why, w.func)
        own = named.get(stratum)
        if own is not None and own.name == cause.name:
            moves_own.setdefault(stratum, []).append((w, cause))
        else:
            touched.add((w.task, cause.name))
    return movers, moves_own, touched


def _alike_parts(strata: dict[Stratum, list[StackWait]], groups, moves: dict[Stratum, list]) -> list[Alike]:
    """Each group of strata (cause, tasks, strata) as an Alike, the time that waits for input move from their
    own stratum's part moved to idle causes of their own, as _idle_input moves it."""
    out, idle = [], {}  # an idle cause (its fields) -> [cause, tasks, ns]
    for cause, tasks, in_strata in groups:
        waits = [strata[s] for s in in_strata]
        ns = [w[0].charged if len(w) == 1 else sum(x.charged for x in w) for w in waits]
        if moves:
            kept = []
            for i, stratum in enumerate(in_strata):
                n = ns[i]
                for w, to in moves.get(stratum, ()):
                    if n <= 0:
                        break
                    moving = min(w.long_open_ns, n)
                    n -= moving
                    name = idle_input_name(to.name)
                    e = idle.get((name, to.frame, to.matched, to.method))
                    if e is None:
                        e = idle[(name, to.frame, to.matched, to.method)] = [
                            Cause(name, IDLE, to.frame, to.matched, to.method), [], []]
                    e[1].append(tasks[i])
                    e[2].append(moving)
                ns[i] = n
                if n > 0 or any(w.count for w in waits[i]):  # _idle_input drops a part left with nothing
                    kept.append(i)
            if len(kept) < len(tasks):
                tasks, ns, waits = [tasks[i] for i in kept], [ns[i] for i in kept], [waits[i] for i in kept]
        if tasks:
            out.append(Alike(cause, tasks, ns, waits))
    return out + [Alike(cause, tasks, ns, [()] * len(tasks)) for cause, tasks, ns in idle.values()]


def _splits_of(model: Model, table: CauseTable, arch: str | None, stratum: Stratum,
               waits: list[StackWait]) -> list[WaitSplit]:
    """_split_all's splits of one stratum."""
    _task, state, why, func = stratum
    if len(waits) > 1:
        return _split_stratum(model, table, arch, state, why, func, waits)
    w = waits[0]
    if _drawn(w):
        return [WaitSplit(w, ((classify_wait(model, w, table), 1.0),), True)]
    cause = _alone_cause(table, arch, state, why, func, w)
    pool = _pool_of(model, table, waits, cause)
    return _pooled_splits(pool, waits) if pool else [WaitSplit(w, ((cause, 1.0),), True)]


def _merge_stratum(merged: dict[tuple[TaskId, str], Part], alone: set[tuple[TaskId, str]],
                   by_cause: dict[str, Part]) -> None:
    """A stratum's parts into the task's parts so far (_attribute)."""
    for p in by_cause.values():
        key = (p.task, p.cause.name)
        m = merged.get(key)
        if m is None:
            merged[key] = p
            alone.add(key)
            continue
        if key in alone:  # a second stratum: the sum is a part of its own
            alone.discard(key)
            first, m = m, Part(m.cause, m.task)
            merged[key] = m
            _merge_into(m, first)
        _merge_into(m, p)


def _merge_into(m: Part, p: Part) -> None:
    m.ns += p.ns
    m.estimated_ns += p.estimated_ns
    m.pooled_ns += p.pooled_ns
    m.var_ns2 += p.var_ns2
    m.count += p.count
    m.max_ns = max(m.max_ns, p.max_ns)
    for slot, c in p.hist.items():
        m.hist[slot] = m.hist.get(slot, 0) + c
    for sid, (ns, stack) in p.stacks.items():
        e = m.stacks.setdefault(sid, [0, stack])
        e[0] += ns


Stratum = tuple  # (task, state, why, func name): the waits of one task doing one thing


class WaitSplit(NamedTuple):
    """Where one wait record's time goes: a wait drawn for a stack walk, or named by its evidence, all
    to one cause (`measured`: its count, its longest wait and its stack are that cause's); an undrawn
    wait shared among its stratum's drawn causes in fixed fractions (its time, count and histogram are
    shared alike; it has no longest wait of its own). Applied to a window's waits or to one interval's,
    the same fractions give parts that add up. A tuple: one is made for every wait record of a window."""

    wait: StackWait
    causes: tuple[tuple[Cause, float], ...]
    measured: bool


def split_waits(model: Model, tasks: set[TaskId] | None,
                table: CauseTable | None = None) -> dict[Stratum, list[WaitSplit]]:
    """Each stratum's wait records of `tasks` (None: every task), each with where its time goes. A
    stratum is one task's: the splits of some tasks are those of all, kept once per model."""
    every = _split_all(model, table or default_table())
    return every if tasks is None else {k: v for k, v in every.items() if k[0] in tasks}


def _by_stratum(model: Model, waits: Iterable[StackWait] | None = None) -> dict[Stratum, list[StackWait]]:
    """The window's wait records by stratum, in the model's order (not kept: its readers keep what they make); of
    `waits` (None: the model's)."""
    strata: dict[tuple, list[StackWait]] = {}
    for w in model.waits if waits is None else waits:
        strata.setdefault((w.task, w.state, w.why, w.func), []).append(w)
    return strata


@dataclass(slots=True)
class Pool:
    """A process's drawn waits of one kind (state, evidence), with their causes, and the time of the undrawn
    waits of its threads with none of that kind drawn (what the pool may be asked to share)."""

    drawn: list[StackWait] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    undrawn_ns: int = 0
    _terms: tuple | None = None
    _fractions: tuple | None = None

    @property
    def terms(self) -> tuple:
        """share_terms of its drawn waits, made once for every thread it shares."""
        if self._terms is None:
            self._terms = share_terms(self.drawn, self.causes)
        return self._terms

    @property
    def fractions(self) -> tuple[tuple[Cause, float], ...]:
        """WaitSplit.causes of its threads' undrawn waits."""
        if self._fractions is None:
            self._fractions = tuple((t.cause, t.share) for t in self.terms)
        return self._fractions


@per_model
def _process_pools(model: Model, table: CauseTable) -> dict[tuple, Pool]:
    """(tgid, state, why, func) -> the drawn waits of that process's threads that waited so, with their causes:
    what the undrawn waits of its threads with none drawn are shared by where their evidence names nothing."""
    out: dict[tuple, Pool] = {}
    with_drawn = set()
    for w in model.waits:
        if _drawn(w):
            pool = out.get((w.tgid, w.state, w.why, w.func))
            if pool is None:
                pool = out[(w.tgid, w.state, w.why, w.func)] = Pool()
            pool.drawn.append(w)
            pool.causes.append(classify_wait(model, w, table))
            with_drawn.add((w.task, w.state, w.why, w.func))
    for w in model.waits:
        if not _drawn(w) and _sharable(w) and (w.task, w.state, w.why, w.func) not in with_drawn:
            pool = out.get((w.tgid, w.state, w.why, w.func))
            if pool is not None:
                pool.undrawn_ns += w.charged
    return out


def _sharable(w: StackWait) -> bool:
    """An undrawn wait that drawn ones may stand for (not one that could never be drawn: too short, own)."""
    return w.kstack_id in SHARABLE or w.kstack is not None


def _pool_of(model: Model, table: CauseTable, undrawn: list[StackWait], cause: Cause | None) -> Pool | None:
    """The process's pool the undrawn waits of a stratum with none drawn are shared by (_process_pools): where
    their evidence names nothing (`cause`, the evidence's: None or unmatched), some could have been drawn, and
    their process's threads doing the same had waits drawn."""
    if (cause is not None and cause.matched) or not any(map(_sharable, undrawn)):
        return None
    w = undrawn[0]
    return _process_pools(model, table).get((w.tgid, w.state, w.why, w.func))


def _pooled_splits(pool: Pool, shared: list[StackWait]) -> list[WaitSplit]:
    fractions = pool.fractions
    return [WaitSplit(w, fractions, False) for w in shared]


def _alone_cause(table: CauseTable, arch: str | None, state: int, why: int, func: str, w: StackWait) -> Cause:
    """The cause of an undrawn wait alone in its stratum: its evidence's, else its lack of a stack's. What it
    reads of the wait is its `like` key (_split_all)."""
    cause = table.classify(None, None, state, decode(why, func, w.woken, arch))
    return cause if cause is not None else no_stack_cause(w.kstack_id)


@per_model
def _split_all(model: Model, table: CauseTable) -> dict[Stratum, list[WaitSplit]]:
    arch = _arch(model)
    out: dict[Stratum, list[WaitSplit]] = {}
    by_evidence: dict[tuple, tuple] = {}  # thousands of sleeping threads share a few: ((cause, 1.0),) each
    for (task, state, why, func), waits in _by_stratum(model).items():
        if len(waits) == 1:  # most strata (a sleeping thread's one wait): drawn, or alone with its evidence
            w = waits[0]
            if _drawn(w):
                causes = ((classify_wait(model, w, table), 1.0),)
            else:
                like = (state, why, func, w.woken, w.kstack_id)
                causes = by_evidence.get(like)
                if causes is None:
                    causes = by_evidence[like] = ((_alone_cause(table, arch, state, why, func, w), 1.0),)
                if not causes[0][0].matched and (pool := _pool_of(model, table, waits, causes[0][0])):
                    out[(task, state, why, func)] = _pooled_splits(pool, waits)
                    continue
            out[(task, state, why, func)] = [WaitSplit(w, causes, True)]
            continue
        out[(task, state, why, func)] = _split_stratum(model, table, arch, state, why, func, waits)
    return out


def _split_stratum(model: Model, table: CauseTable, arch: str | None, state: int, why: int, func: str,
                   waits: list[StackWait]) -> list[WaitSplit]:
    """Where each wait of a stratum of several goes."""
    drawn, shared, alone = [], [], []
    for w in waits:
        if _drawn(w):
            drawn.append(w)
        elif _sharable(w):
            shared.append(w)
        else:
            alone.append(w)
    if not drawn and shared:
        woken = tuple(sum(w.woken[i] for w in shared + alone) for i in range(3))
        pool = _pool_of(model, table, shared, table.classify(None, None, state, decode(why, func, woken, arch)))
        if pool is None:
            alone += shared
            shared = []
        else:  # shared by its process's drawn waits; those that could not be drawn keep their evidence
            splits = _pooled_splits(pool, shared)
            shared = []
            if not alone:
                return splits
            woken = tuple(sum(w.woken[i] for w in alone) for i in range(3))
            cause = table.classify(None, None, state, decode(why, func, woken, arch))
            return splits + [WaitSplit(w, ((cause if cause is not None else no_stack_cause(w.kstack_id), 1.0),),
                                       True) for w in alone]
    causes = [classify_wait(model, w, table) for w in drawn]
    splits = [WaitSplit(w, ((c, 1.0),), True) for w, c in zip(drawn, causes)]
    if shared:
        fractions = tuple(_share_fractions(drawn, causes).values())
        splits += [WaitSplit(w, fractions, False) for w in shared]
    if alone:
        woken = tuple(sum(w.woken[i] for w in alone) for i in range(3))
        cause = table.classify(None, None, state, decode(why, func, woken, arch))
        splits += [WaitSplit(w, ((cause if cause is not None else no_stack_cause(w.kstack_id), 1.0),), True)
                   for w in alone]
    return splits


def attribute_strata(model: Model, tasks: set[TaskId] | None,
                     table: CauseTable | None = None) -> dict[Stratum, dict[str, Part]]:
    """Each stratum's blocked time by cause (the parts of one task in one stratum), for `tasks`
    (None: every task). Shared: readers never change the parts."""
    every = _strata_all(model, table or default_table())
    return every if tasks is None else {k: v for k, v in every.items() if k[0] in tasks}


@per_model
def _strata_all(model: Model, table: CauseTable) -> dict[Stratum, dict[str, Part]]:
    return {stratum: _stratum_parts(model, table, stratum[0], splits)
            for stratum, splits in split_waits(model, None, table).items()}


# a stratum of one drawn wait and one it stands for made into its part at once (_drawn_and_shared); False: as any
# other stratum (tests compare the two)
PAIR_AT_ONCE = True


def _stratum_parts(model: Model, table: CauseTable, task: TaskId, splits: list[WaitSplit]) -> dict[str, Part]:
    """One stratum's blocked time by cause."""
    if len(splits) == 1 and splits[0].measured:  # most strata (a sleeping thread's one wait): one cause, measured
        w, causes, _measured = splits[0]
        cause = causes[0][0]
        p = Part(cause, task)
        _add_measured(p, w, stack=_drawn(w))
        return {cause.name: p}
    if (len(splits) == 2 and PAIR_AT_ONCE and splits[0].measured and not splits[1].measured
            and _drawn(splits[0].wait)):
        return _drawn_and_shared(task, splits[0].wait, splits[0].causes[0][0], splits[1].wait)
    parts: dict[str, Part] = {}

    def part(cause: Cause, task: TaskId) -> Part:
        p = parts.get(cause.name)
        if p is None:
            p = parts[cause.name] = Part(cause, task)
        return p

    for s in splits:
        if s.measured:
            _add_measured(part(s.causes[0][0], task), s.wait, stack=_drawn(s.wait))
    shared = [s.wait for s in splits if not s.measured]
    if shared:
        drawn = [s.wait for s in splits if s.measured and _drawn(s.wait)]
        if drawn:
            _share(share_terms(drawn, [s.causes[0][0] for s in splits if s.measured and _drawn(s.wait)]),
                   shared, part, task)
        else:  # none of the stratum's own drawn: its process's (_split_stratum)
            pool = _process_pools(model, table)[(shared[0].tgid, shared[0].state, shared[0].why, shared[0].func)]
            _share(pool.terms, shared, part, task, pool.undrawn_ns)
    return parts


def _drawn_and_shared(task: TaskId, drawn: StackWait, cause: Cause, shared: StackWait) -> dict[str, Part]:
    """The part of a stratum of two waits, one drawn for a stack walk and named `cause`, the other not and standing
    for it (a thread that wakes now and then: the wait that ended, walked, and the one it began since; hundreds an
    interval beside threads that wake): what the general path makes of it (share_terms of one drawn wait: the
    undrawn wait wholly its cause's, its variance only the floor of the drawn wait's draws; then _share), in its
    arithmetic, without its lists and its per-cause tables."""
    p = Part(cause, task)
    _add_measured(p, drawn)
    floor = _draws_floor(drawn.count, drawn.count)
    undrawn_ns = shared.charged
    scale = undrawn_ns * max(0, undrawn_ns)
    est = undrawn_ns * 1.0
    p.ns += est
    p.estimated_ns += est
    p.count += shared.count * 1.0
    hist = p.hist
    for slot, c in nonzero_slots(shared.hist):
        hist[slot] = hist.get(slot, 0) + c * 1.0
    p.var_ns2 = max(p.var_ns2 + scale * 0.0, scale * floor)
    return {cause.name: p}


def nonzero_slots(hist: tuple[int, ...]):
    """(slot, count) of a dense log2 histogram's non-empty slots, found in C (a wait's histogram has
    one or two of its 40)."""
    return zip(compress(count(), hist), filter(None, hist))


def _add_measured(p: Part, w: StackWait, stack: bool = True) -> None:
    p.ns += w.charged
    p.count += w.count
    if w.max_ns > p.max_ns:
        p.max_ns = w.max_ns
    if w.hist:
        ph = p.hist
        for slot, c in nonzero_slots(w.hist):
            ph[slot] = ph.get(slot, 0) + c
    if stack and w.kstack is not None:
        e = p.stacks.setdefault(w.kstack.id, [0, w.kstack])
        e[0] += w.charged


def _share_weights(drawn: list[StackWait]) -> tuple[list[float], bool]:
    """What each drawn wait of a stratum stands for beyond itself (d/p - d), or, when none stands for
    others (every p was 1, or a recording made before waits were drawn by length), its time."""
    beyond = [max(w.weighted_ns - w.total_ns, 0) for w in drawn]
    if sum(beyond) > 0:
        return beyond, False
    return [w.weighted_ns or w.total_ns or w.charged or 1 for w in drawn], True


def _share_fractions(drawn: list[StackWait], causes: list[Cause]) -> dict[str, tuple[Cause, float]]:
    """The fraction of a stratum's undrawn waits that goes to each of its drawn waits' causes."""
    if len(drawn) == 1:  # its weight over itself, whatever it is (a thread that woke: hundreds an interval)
        return {causes[0].name: (causes[0], 1.0)}
    weights, _ = _share_weights(drawn)
    total = sum(weights) or 1
    out: dict[str, tuple[Cause, float]] = {}
    for c, wt in zip(causes, weights):
        out[c.name] = (c, out.get(c.name, (c, 0.0))[1] + wt / total)
    return out


class ShareTerm(NamedTuple):
    """One cause's share of a stratum's (or a pool's) undrawn waits and its variance's terms per U^2, U their time."""

    cause: Cause
    share: float
    var: float  # the estimate's variance over U^2
    floor: float  # its least variance over U^2: a share estimated from n draws (Laplace's rule of succession)


def share_terms(drawn: list[StackWait], causes: list[Cause]) -> tuple[ShareTerm, ...]:
    """How the undrawn waits are shared among the causes of `drawn`, the same for every stratum that `drawn`
    shares (a process's pool shares thousands): made once."""
    _weights, by_length = _share_weights(drawn)
    total_beyond = sum(max(w.weighted_ns - w.total_ns, 0) for w in drawn)
    seen: dict[str, int] = {}  # drawn waits of each cause
    for c, w in zip(causes, drawn):
        seen[c.name] = seen.get(c.name, 0) + w.count
    n = sum(seen.values())
    out = []
    for name, (cause, share) in _share_fractions(drawn, causes).items():
        if by_length:
            # every drawn wait had p = 1 (none stands for others): the undrawn ones are shared by the drawn
            # ones' time, with a multinomial error over the draws
            var = share * (1 - share) / max(len(drawn), 1)
        else:
            # Var(U * D_c / D) ~ (U / D)^2 * sum_k V_k (1[k in c] - D_c / D)^2, V_k in ns^2
            var = sum(w.var_us2 * 1e6 * ((1.0 if c.name == name else 0.0) - share) ** 2
                      for w, c in zip(drawn, causes)) / total_beyond ** 2
        # n drawn waits that all (or nearly all) show one cause cannot rule out others among the undrawn:
        # no less than the error of a share estimated from n draws, the share smoothed by Laplace's rule
        # of succession ((k + 1) / (n + 2)), so that 40 draws of one cause do not read as exact
        out.append(ShareTerm(cause, share, var, _draws_floor(seen[name], n)))
    return tuple(out)


def _draws_floor(k: int, n: int) -> float:
    """The least variance over U^2 of a share that k of n drawn waits showed (share_terms)."""
    smooth = (k + 1) / (n + 2)
    return smooth * (1 - smooth) / max(n, 1)


def _share(terms: tuple[ShareTerm, ...], shared: list[StackWait], part, task, pool_ns: int = 0) -> None:
    """The undrawn waits of a stratum, shared among its drawn waits' causes (`terms`: see the module's doc), or
    among its process's (a Pool, whose undrawn time is `pool_ns`). Every thread of a pool is shared by the same
    fractions, so their errors go together: each part's variance is its time times the pool's (not its time
    squared), so that the parts of the pool's threads, summed, have the variance of the pool's whole share (a
    view of some of them only reads a larger one)."""
    undrawn_ns = sum(w.charged for w in shared)
    scale = undrawn_ns * max(pool_ns, undrawn_ns)  # the variances' U^2
    undrawn_count = sum(w.count for w in shared)
    undrawn_hist: dict[int, int] = {}
    for w in shared:
        for slot, c in nonzero_slots(w.hist):
            undrawn_hist[slot] = undrawn_hist.get(slot, 0) + c
    for cause, share, var, floor in terms:
        p = part(cause, task)
        est = undrawn_ns * share
        p.ns += est
        p.estimated_ns += est
        if pool_ns:
            p.pooled_ns += est
        p.count += undrawn_count * share
        for slot, c in undrawn_hist.items():
            p.hist[slot] = p.hist.get(slot, 0) + c * share
        p.var_ns2 = max(p.var_ns2 + scale * var, scale * floor)


def error_ns(var_ns2: float) -> int:
    """One standard error."""
    return int(math.sqrt(var_ns2)) if var_ns2 > 0 else 0
