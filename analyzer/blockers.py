"""Blockers: the time tasks waited, grouped by cause, ranked.

A wait's cause comes from the cause table (analyzer/causes.py, causes.toml): from the stack when the
wait was drawn for a walk, from what the task was doing otherwise (analyzer/attribution.py says how the
two meet, and what is estimated). Causes of class "idle" (a task with nothing to do: an event loop in
epoll, a parked thread pool, a kernel thread's main loop) rank after every blocker, so a quiet
machine's idle waits never lead. Run-queue wait is a cause of its own, "Waiting for CPU".

One denominator for every share: the waiting time of the tasks in view over the window, that is their
blocked time outside idle causes plus their run-queue wait. Idle waits are not waiting (nothing was
there to do): shown, they have a time and no share. Blocked time is charged to the intervals a wait
spans, so a task's rate never exceeds 1 s/s.
stallscope's own tasks are never in view (analyzer/scope.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import chain, compress, zip_longest
from operator import attrgetter

from stallscope.analyzer.attribution import (
    LOST_STACK, NO_STACK_LABELS, Alike, Grouped, Part, attribute, attribute_grouped, attribute_strata, classify_wait,
    error_ns, idle_input_name, input_cause, long_input_cause, no_stack_cause, nonzero_slots, parts_at_hand,
)
from stallscope.analyzer.causes import BLOCKER, CPU, IDLE, Cause, CauseTable
from stallscope.analyzer.memo import memoised, per_model
from stallscope.analyzer.model import LONG_OPEN_NS, Model, WaitsNow
from stallscope.analyzer.sample import (  # noqa: F401 (re-exported: the reasons a wait has no stack)
    NO_LINK, STACK_FAILED, STACK_ID_MIN, STACK_NONE, STACK_NOT_DRAWN, STACK_OWN, STACK_RATE_LIMITED, STACK_SHORT, Stack,
    TaskId,
)
from stallscope.analyzer.scope import in_scope, recorded_tasks
from stallscope.analyzer.units import fmt_ns, log2_bounds
from stallscope.analyzer.wakers import waker_context, waker_label

try:  # the waits in progress grouped in C (analyzer/modelfold.c waits_now_groups; py_waits_now_groups without it)
    from stallscope.analyzer._modelfold import waits_now_groups as _c_waits_now_groups
except ImportError:
    _c_waits_now_groups = None

__all__ = ["IDLE", "Blocker", "LOST_STACK", "NO_STACK_LABELS", "classify_wait", "no_stack_cause", "rank_blockers",
           "rank_live", "grouped_parts", "causes_by_task", "task_causes", "blocked_ns_by_task", "process_causes",
           "held_up_by", "percentiles",
           "recorded_tasks", "Denominator", "denominator", "wait_cause", "wait_parts", "wait_now_cause",
           "waiters_by_name",
           "waits_now_by_cause"]


@dataclass(frozen=True)
class Blocker:
    cause: str
    total_ns: int  # measured plus estimated: the time its tasks waited for it in the window
    count: int  # waits that ended (for an estimated part, its estimated count)
    max_ns: int
    share_pct: float  # of the one denominator (Denominator): the waiting time; 0 for idle causes
    tasks: tuple[TaskId, ...]
    stack: Stack | None  # the heaviest walked stack of this cause
    estimated_ns: int = 0  # of total_ns: undrawn waits' time shared out to it (attribution.py)
    cls: str = BLOCKER  # "blocker", "cpu" (waiting for a CPU: the run queue) or "idle"
    # the frame the cause table matched (or the evidence that named it): of most of its time, where its tasks' waits
    # matched it at different frames (kernel threads idle in their different main loops)
    frame: str = ""
    matched: bool = True  # a rule of the cause table matched
    # latency of single waits: log2-bucket upper bounds (never above max_ns) of the waits whose length
    # was kept (every wait, drawn or not, undrawn ones in the shares they were given); {} when none was
    latency: dict = field(default_factory=dict)
    error_ns: int = 0  # one standard error of the estimated part
    method: str = "stack"  # "stack": named from walked stacks; "evidence": from what the tasks were doing
    # waits of this cause still in progress at the window's end, and the longest of them so far (a task hung
    # for minutes: its wait has not ended, so it is in no count, max or percentile above)
    in_progress: int = 0
    longest_now_ns: int = 0
    task_ns: tuple[int, ...] = ()  # each task's wait for it, in the order of `tasks` (the heaviest first)
    # of estimated_ns: the waits of threads with none drawn, shared by their process's other threads' drawn waits
    pooled_ns: int = 0

    @property
    def p99_ns(self) -> int:
        return self.latency.get("p99_ns", 0)

    @property
    def longest_ns(self) -> int:
        """Its longest wait in the window: one that ended, or one still going (longest_ongoing)."""
        return max(self.max_ns, self.longest_now_ns)

    @property
    def longest_ongoing(self) -> bool:
        return self.longest_now_ns > self.max_ns


def wait_cause(model: Model, w, table: CauseTable | None = None) -> str:
    return classify_wait(model, w, table).name


def wait_parts(model: Model, w, table: CauseTable | None = None) -> list[tuple[str, int]]:
    """A wait record's charged time by the cause it goes to: its cause's, but for a wait for input the part
    in progress a second and more, which is its idle cause's (attribution.py _idle_input)."""
    quiet = long_input_cause(model, w, table)
    if quiet is None:
        return [(wait_cause(model, w, table), w.charged)]
    moved = min(w.long_open_ns, w.charged)
    return [(quiet.name, w.charged - moved), (idle_input_name(quiet.name), moved)]


def wait_now_cause(model: Model, now, table: CauseTable | None = None) -> str:
    """The cause of a wait in progress at the window's end (a WaitNow): a wait for input that has gone on a
    second and more is its idle cause."""
    if now.so_far_ns >= LONG_OPEN_NS and (quiet := input_cause(model, now.wait, table)) is not None:
        return idle_input_name(quiet.name)
    return wait_cause(model, now.wait, table)


# measured at the run queue (each wakeup to its switch-in), never from a stack: its method says so
WAITING_FOR_CPU = Cause("Waiting for CPU", CPU, "", True, method="runqueue")


@per_model
def cpu_parts(model: Model, tasks: set[TaskId] | None) -> list[Part]:
    """Run-queue wait as a cause of its own (the CPU side, kept apart from blocked time). Kept per model: the
    ranking, the flame graph and the wait chains ask alike; readers never change it."""
    out = []
    for t in model.tasks.values():
        if t.runq_wait_ns and (tasks is None or t.task in tasks):
            out.append(Part(WAITING_FOR_CPU, t.task, t.runq_wait_ns, 0, 0.0, t.runq_count, t.runq_max_ns, {},
                            dict(nonzero_slots(t.runq_hist))))
    return out


class CpuAlike:
    """cpu_parts' Parts of `model`'s tasks in view, summed as the ranking and its denominator sum them (an Alike's
    reading: each task's time in `tasks`' order, and the waits' count, longest and histogram): a live interval
    ranks hackbench's 470 tasks waiting for a CPU without a Part each. Each reading is one pass in C (map, sum, zip)
    over the tasks that waited: a live interval's model holds 5,000 sleeping threads' totals that did not."""

    __slots__ = ("cause", "tasks", "ns", "count", "max_ns", "hist")
    stacks: dict = {}  # a wait for a CPU has no stack walked (read only)

    def __init__(self, model: Model, tasks: set[TaskId] | None):
        self.cause = WAITING_FOR_CPU
        waited = list(filter(_RUNQ_NS, model.tasks.values()))
        ids = list(map(_TASK_ID, waited))
        if tasks is not None:
            kept = list(map(tasks.__contains__, ids))
            if not all(kept):
                waited = list(compress(waited, kept))
                ids = list(compress(ids, kept))
        self.tasks: list[TaskId] = ids
        self.ns: list[int] = list(map(_RUNQ_NS, waited))
        self.count = sum(map(_RUNQ_COUNT, waited))
        self.max_ns = max(map(_RUNQ_MAX_NS, waited), default=0)
        # each slot's count summed over the tasks (their histograms' slots in columns)
        self.hist: dict[int, int] = {slot: c for slot, c in enumerate(
            map(sum, zip_longest(*map(_RUNQ_HIST, waited), fillvalue=0))) if c}


_RUNQ_NS, _TASK_ID, _RUNQ_COUNT, _RUNQ_MAX_NS, _RUNQ_HIST = (
    attrgetter(name) for name in ("runq_wait_ns", "info.task", "runq_count", "runq_max_ns", "runq_hist"))


def parts(model: Model, tasks: set[TaskId] | None = None, table: CauseTable | None = None,
          include_cpu: bool = True) -> list[Part]:
    """Blocked parts of the tasks in view, then their run-queue wait. Kept per model: the ranking, the shares
    and the views ask alike; readers never change the list."""
    return _parts(model, tasks, table, include_cpu)  # one key however the arguments were given


@per_model
def _parts(model: Model, tasks: set[TaskId] | None, table: CauseTable | None, include_cpu: bool) -> list[Part]:
    scope = in_scope(model, tasks)
    out = attribute(model, scope, table)
    return out + cpu_parts(model, scope) if include_cpu else out


def grouped_parts(model: Model, tasks: set[TaskId] | None = None, table: CauseTable | None = None,
                  include_cpu: bool = True) -> Grouped:
    """parts(), those of tasks alike grouped (attribution.py Alike), and their run-queue waits as one (CpuAlike): for
    readers that sum them by cause (the ranking, the denominator), which then need no Part per sleeping thread nor
    per task waiting for a CPU. Kept per model."""
    return _grouped_parts(model, tasks, table, include_cpu)


@per_model
def _grouped_parts(model: Model, tasks: set[TaskId] | None, table: CauseTable | None, include_cpu: bool) -> Grouped:
    scope = in_scope(model, tasks)
    out = attribute_grouped(model, scope, table)
    if not include_cpu:
        return out
    cpu = CpuAlike(model, scope)
    return Grouped(out.parts, out.alike + [cpu]) if cpu.tasks else out


@dataclass(frozen=True)
class Denominator:
    """What every share is a share of: `total_ns`, the time the tasks in view waited."""

    blocked_ns: int  # outside idle causes
    runq_ns: int
    idle_ns: int  # idle causes: not waiting, in no share

    @property
    def total_ns(self) -> int:
        return self.blocked_ns + self.runq_ns

    def describe(self) -> str:
        return (f"shares are of the {fmt_ns(self.total_ns)} waited: blocked {fmt_ns(self.blocked_ns)} + "
                f"waiting for a CPU {fmt_ns(self.runq_ns)} (idle waits, {fmt_ns(self.idle_ns)}, have none)")


def denominator(all_parts: list[Part], alike: list[Alike] = ()) -> Denominator:
    """Of parts (and parts grouped: grouped_parts)."""
    blocked = runq = idle = 0.0
    for cls, ns in chain(((p.cause.cls, p.ns) for p in all_parts), ((a.cause.cls, sum(a.ns)) for a in alike)):
        if cls == CPU:
            runq += ns
        elif cls == IDLE:
            idle += ns
        else:
            blocked += ns
    return Denominator(round(blocked), round(runq), round(idle))


SORTS = {"total": lambda b: b.total_ns, "max": lambda b: b.max_ns, "count": lambda b: b.count,
         "p99": lambda b: b.p99_ns}


def percentiles(hist: dict[int, float], longest: int, qs=(0.5, 0.9, 0.99)) -> dict[str, int]:
    """From log2(ns) buckets: each quantile's bucket upper bound, never above the longest wait."""
    total = sum(hist.values())
    if not total:
        return {}
    out = {}
    for q in qs:
        seen = 0
        for slot in sorted(hist):
            seen += hist[slot]
            if seen >= q * total - 1e-9:
                bound = log2_bounds(slot)[1]
                out[f"p{round(q * 100)}_ns"] = min(bound, longest) if longest else bound
                break
    return out


def rank_blockers(model: Model, tasks: set[TaskId] | None = None, table: CauseTable | None = None,
                  include_idle: bool = True, include_cpu: bool = True, sort: str = "total",
                  all_parts: list[Part] | None = None, include_delays: bool = False) -> list[Blocker]:
    """Time tasks waited, by cause: blockers (blocked causes and, unless left out, "Waiting for CPU")
    heaviest first, then (unless left out) idle waits heaviest first. Every share is of the one
    denominator (`denominator`). `include_delays` keeps the delays tasks asked for (idle causes
    with delays_wakees: sleeps) when the other idle ones are left out."""
    if all_parts is None:
        return list(_ranked(model, tasks, table, include_idle, include_cpu, sort, include_delays))
    return _with_waits_now(_rank(all_parts, include_idle, sort, include_delays), waits_now_by_cause(model, tasks, table))


@per_model
def _ranked(model: Model, tasks, table, include_idle: bool, include_cpu: bool, sort: str,
            include_delays: bool) -> tuple[Blocker, ...]:
    if not include_idle and not include_delays:
        # the ranking with idle causes, which a view and a report make first, without them: an idle cause's
        # parts are in no other cause's figures nor in the denominator, and idle causes rank last
        return tuple(b for b in _ranked(model, tasks, table, True, include_cpu, sort, False) if b.cls != IDLE)
    return tuple(_with_waits_now(_rank(parts(model, tasks, table, include_cpu), include_idle, sort, include_delays),
                                 waits_now_by_cause(model, tasks, table)))


def rank_live(model: Model, tasks: set[TaskId] | None = None, table: CauseTable | None = None) -> list[Blocker]:
    """rank_blockers(model, tasks, table, include_idle=False), made from the parts grouped (grouped_parts)
    unless the full ranking was made: the same blockers (a test checks), without a Part per sleeping thread. For
    a live view, which ranks every interval without idle causes and asks for tasks' parts only when it shows
    them; a report, which reads every part, ranks from them."""
    return list(_ranked_live(model, tasks, table))


@per_model
def _ranked_live(model: Model, tasks, table) -> tuple[Blocker, ...]:
    full = memoised(_ranked, model, tasks, table, True, True, "total", False)
    if full is not None:
        return tuple(b for b in full if b.cls != IDLE)
    grouped = grouped_parts(model, tasks, table)
    return tuple(_with_waits_now(_rank(grouped.parts, False, "total", False, grouped.alike),
                                 waits_now_by_cause(model, tasks, table)))


@per_model
def waits_now_by_cause(model: Model, tasks: set[TaskId] | None = None,
                       table: CauseTable | None = None) -> dict[str, tuple[int, int]]:
    """Cause -> (waits in progress at the window's end, the longest so far) of the tasks in view, each wait
    classified as a wait of its key is (its stack when one was walked for it, else its evidence)."""
    now = model.waits_now
    if not isinstance(now, WaitsNow) or not now.keys:
        return {}
    scope = in_scope(model, tasks)
    # a machine's sleeping threads wait alike but for their tasks: those alike are classified once (what a
    # cause reads: the key without its task, how the key's waits ended, and whether it has gone on a second,
    # after which a wait for input that got nothing is idle: attribution.py _idle_input)
    out: dict[str, tuple[int, int]] = {}
    for n, since, w, long in _waits_now_groups(now, scope):
        quiet = input_cause(model, w, table) if long else None
        name = idle_input_name(quiet.name) if quiet is not None else classify_wait(model, w, table).name
        count, longest = out.get(name, (0, 0))
        so_far = now.end_ns - since if now.end_ns > since else 0
        out[name] = (count + n, longest if longest > so_far else so_far)
    return out


def _waits_now_groups(now: WaitsNow, scope: set[TaskId] | None) -> list[list]:
    """The waits in progress of `scope` (None: all) grouped alike (waits_now_by_cause), [waits, earliest beginning, a
    StackWait of them, gone on a second] each, in the order first met: in C where analyzer/modelfold.c is built."""
    late = now.end_ns - LONG_OPEN_NS
    if _c_waits_now_groups is not None and all(type(x) is tuple for x in (now.keys, now.since, now.places, now.waits)):
        return _c_waits_now_groups(now.keys, now.since, now.places, now.waits, scope, late)
    return py_waits_now_groups(now, scope)


def py_waits_now_groups(now: WaitsNow, scope: set[TaskId] | None) -> list[list]:
    """_waits_now_groups in Python."""
    groups: dict[tuple, list] = {}  # -> [waits, earliest beginning, a StackWait of them, gone on a second]
    waits, late = now.waits, now.end_ns - LONG_OPEN_NS
    for key, since, at in zip(now.keys, now.since, now.places):
        if at < 0 or (scope is not None and key[0] not in scope):
            continue
        w = waits[at]
        long = since <= late
        like = (key[2:], w.woken, long)
        g = groups.get(like)
        if g is None:
            groups[like] = [1, since, w, long]
        else:
            g[0] += 1
            if since < g[1]:
                g[1] = since
    return list(groups.values())


def _with_waits_now(ranked: list[Blocker], now: dict[str, tuple[int, int]]) -> list[Blocker]:
    if not now:
        return ranked
    return [replace(b, in_progress=now[b.cause][0], longest_now_ns=now[b.cause][1]) if b.cause in now else b
            for b in ranked]


def _group(groups: dict[str, list], cause: Cause, ns: float) -> list:
    """The ranking's group of a cause (_rank), `ns` more of it at the frame the cause was matched at."""
    g = groups.get(cause.name)
    if g is None:
        g = groups[cause.name] = [0.0, 0.0, 0.0, 0.0, 0, {}, {}, {}, {}, set(), 0.0]
    e = g[7].get(cause.frame)
    if e is None:
        g[7][cause.frame] = [ns, cause]
    else:
        e[0] += ns
    return g


def _add_stacks(into: dict[int, list], stacks: dict[int, list]) -> None:
    """A part's walked stacks (stack id -> [charged ns, Stack]) summed into its cause's."""
    for sid, (ns, stack) in stacks.items():
        e = into.get(sid)
        if e is None:
            into[sid] = [ns, stack]
        else:
            e[0] += ns


def _rank(all_parts: list[Part], include_idle: bool, sort: str, include_delays: bool,
          alike: list[Alike] = ()) -> list[Blocker]:
    denom = denominator(all_parts, alike).total_ns or 1
    # per cause: [ns, estimated ns, variance, count, max, tasks, stacks, {frame: [ns, cause]}, hist, methods, pooled ns]
    groups: dict[str, list] = {}
    for a in alike:  # parts of tasks alike, grouped (attribution.py Alike): measured
        cause = a.cause
        if cause.cls == IDLE and not include_idle and not (include_delays and cause.delays_wakees):
            continue
        ns = sum(a.ns)
        g = _group(groups, cause, ns)
        g[0] += ns
        g[3] += a.count
        if a.max_ns > g[4]:
            g[4] = a.max_ns
        tasks = g[5]
        # summed: one task may be in the group more than once (a stratum each: a pipe reader's two reads)
        for t, n in zip(a.tasks, a.ns):
            tasks[t] = tasks.get(t, 0.0) + n
        g[9].add(cause.method)
        hist = g[8]
        for slot, c in a.hist.items():
            hist[slot] = hist.get(slot, 0) + c
        if a.stacks:  # sleeping threads' waits walked by a task dump
            _add_stacks(g[6], a.stacks)
    for p in all_parts:
        cause = p.cause
        if cause.cls == IDLE and not include_idle and not (include_delays and cause.delays_wakees):
            continue
        g = _group(groups, cause, p.ns)
        g[0] += p.ns
        g[1] += p.estimated_ns
        g[10] += p.pooled_ns
        g[2] += p.var_ns2
        g[3] += p.count
        if p.max_ns > g[4]:
            g[4] = p.max_ns
        tasks = g[5]
        tasks[p.task] = tasks.get(p.task, 0.0) + p.ns
        g[9].add(cause.method)
        if p.hist:
            hist = g[8]
            for slot, c in p.hist.items():
                hist[slot] = hist.get(slot, 0) + c
        if p.stacks:
            _add_stacks(g[6], p.stacks)
    out = []
    for name, (ns, est, var, count, longest, tasks, stacks, frames, hist, methods, pooled) in groups.items():
        # the cause as most of its time matched it, not as the first part did: the same in every order
        c = next(iter(frames.values()))[1] if len(frames) == 1 else max(frames.values(),
                                                                         key=lambda e: (e[0], e[1].frame))[1]
        top = max(stacks.values(), key=lambda v: v[0])[1] if stacks else None
        method = "stack" if "stack" in methods else "evidence" if "evidence" in methods else min(methods, default="")
        share = 0.0 if c.cls == IDLE else 100.0 * ns / denom
        order = sorted(tasks, key=lambda t: (-tasks[t], t))
        out.append(Blocker(name, round(ns), round(count), longest, share, tuple(order), top, round(est), c.cls,
                           c.frame, c.matched, percentiles(hist, longest), error_ns(var), method,
                           task_ns=tuple(round(tasks[t]) for t in order), pooled_ns=round(pooled)))
    out.sort(key=lambda b: (b.cls == IDLE, -SORTS[sort](b), b.cause))
    return out


def causes_by_task(model: Model, tasks: set[TaskId] | None = None,
                   table: CauseTable | None = None) -> dict[TaskId, list[tuple[Cause, int]]]:
    """Each task's waiting time by cause, heaviest first: blocked causes (idle ones included, in their
    place by time) and "Waiting for CPU". stallscope's own tasks are left out unless asked for."""
    by: dict[TaskId, dict[str, list]] = {}
    grouped = parts_at_hand(model, tasks, table)  # sleeping threads' alike grouped where not made one by one
    for p in grouped.parts + cpu_parts(model, tasks):
        e = by.setdefault(p.task, {}).setdefault(p.cause.name, [p.cause, 0.0])
        e[1] += p.ns
    for a in grouped.alike:
        cause, name = a.cause, a.cause.name
        for task, ns in zip(a.tasks, a.ns):
            causes = by.get(task)
            if causes is None:  # a sleeping thread's first (and mostly only) part
                by[task] = {name: [cause, 0.0 + ns]}
                continue
            e = causes.setdefault(name, [cause, 0.0])
            e[1] += ns
    out: dict[TaskId, list[tuple[Cause, int]]] = {}
    for task, causes in by.items():
        if len(causes) == 1:
            (c, ns), = causes.values()
            out[task] = [(c, round(ns))]
        else:
            out[task] = sorted(((c, round(ns)) for c, ns in causes.values()), key=lambda kv: (-kv[1], kv[0].name))
    return out


def task_causes(model: Model, task: TaskId, table: CauseTable | None = None) -> list[tuple[Cause, int]]:
    return causes_by_task(model, {task}, table).get(task, [])


def blocked_ns_by_task(model: Model, tasks: set[TaskId] | None = None,
                       table: CauseTable | None = None) -> dict[TaskId, tuple[int, int]]:
    """Each task's blocked time and waits outside idle causes: what held it up."""
    out: dict[TaskId, list[float]] = {}
    for p in attribute(model, in_scope(model, tasks), table):
        if p.cause.cls != IDLE:
            e = out.setdefault(p.task, [0.0, 0.0])
            e[0] += p.ns
            e[1] += p.count
    return {t: (round(ns), round(n)) for t, (ns, n) in out.items()}


@dataclass(frozen=True)
class ProcessCauses:
    tgid: int
    comm: str
    total_ns: int  # off-CPU time of the causes kept (blockers, and idle waits when asked)
    max_ns: int
    causes: tuple[tuple[str, int, int], ...]  # (cause, total_ns, max_ns), heaviest first


def process_causes(model: Model, include_idle: bool = False, table: CauseTable | None = None,
                   by_cgroup: bool = False, by_thread: bool = False,
                   tasks: set[TaskId] | None = None) -> list[ProcessCauses]:
    """LatencyTOP's second pane: each process with its own causes, heaviest process first; with
    `by_cgroup`, each cgroup (`comm` is then the cgroup's path, `tgid` 0)."""
    by: dict = {}
    for p in attribute(model, in_scope(model, tasks), table):
        if p.cause.cls == IDLE and not include_idle:
            continue
        t = model.tasks.get(p.task)
        tgid = t.info.tgid if t else p.task.pid
        key = model.cgroups.get(tgid, "(unknown)") if by_cgroup else p.task.pid if by_thread else tgid
        e = by.setdefault(key, {}).setdefault(p.cause.name, [0.0, 0])
        e[0] += p.ns
        e[1] = max(e[1], p.max_ns)

    def comm(tgid: int) -> str:
        if by_thread:
            return next((t.info.comm for tid, t in model.tasks.items() if tid.pid == tgid), "?")
        for t in model.tasks.values():
            if t.info.tgid == tgid and (t.info.task.pid == tgid or t.info.comm):
                return t.info.comm
        return "?"

    out = [ProcessCauses(0 if by_cgroup else key, key if by_cgroup else comm(key),
                         round(sum(v[0] for v in causes.values())), max(v[1] for v in causes.values()),
                         tuple(sorted(((c, round(v[0]), v[1]) for c, v in causes.items()), key=lambda x: (-x[1], x[0]))))
           for key, causes in by.items()]
    out.sort(key=lambda p: (-p.total_ns, p.tgid, p.comm))
    return out


@dataclass(frozen=True)
class HeldUpBy:
    """Who held a blocker's tasks up: the wakers that ended their waits (for blocked causes), the
    owners of the mutexes they waited on, the CPU hogs they waited behind (for Waiting for CPU)."""

    wakers: tuple[tuple[str, int, int, Stack | None], ...] = ()  # (label, count, total_ns, waker stack)
    owners: tuple[str, ...] = ()  # "comm[pid]"
    hogs: tuple[tuple[str, int], ...] = ()  # ("comm[pid]", involuntary switches): the threads preempted most
    # the same by name, the threads of one name summed: (label, involuntary switches, threads), the label
    # "comm[pid]" for a name of one thread, "comm" for more (hackbench's 32,000 short-lived threads preempted
    # 2 million times in all, where one long-lived kernel thread was preempted most of any one thread)
    hog_names: tuple[tuple[str, int, int, str], ...] = ()  # (label, involuntary switches, threads, name)
    # the wakers by name likewise, the threads of one name summed: (label, count, total_ns, threads, a waker
    # stack); a timer, softirq or interrupt as in `wakers`
    waker_names: tuple[tuple[str, int, int, int, Stack | None], ...] = ()


def _by_name(values, n: int | None = None) -> tuple[tuple[str, int, int, str], ...]:
    """(name, pid, value) of tasks summed per name: (label, sum, tasks, name), the largest first (ties by label),
    the label "comm[pid]" for a name of one task, else the name; the first n (None: all)."""
    by: dict[str, list] = {}
    for comm, pid, v in values:
        e = by.get(comm)
        if e is None:
            by[comm] = [v, 1, pid]
        else:
            e[0] += v
            e[1] += 1
    out = sorted(((f"{comm}[{pid}]" if k == 1 else comm, v, k, comm) for comm, (v, k, pid) in by.items()),
                 key=lambda e: (-e[1], e[0]))
    return tuple(out if n is None else out[:n])


def waiters_by_name(model: Model, b: Blocker, n: int | None = None) -> tuple[tuple[str, int, int, str], ...]:
    """Who waited for a blocker, by process name: (label, wait ns, tasks, name), the heaviest first, the label
    "comm[pid]" for a name of one task, else the name. Per name, not per task: a blocker's heaviest single task
    can be one long-lived thread among thousands of short-lived ones of another name that waited far longer in
    all."""
    tasks = model.tasks
    return _by_name(((tasks[t].info.comm if t in tasks else "?", t.pid, ns) for t, ns in zip(b.tasks, b.task_ns)), n)


@dataclass(frozen=True)
class _TaskIndex:
    wakeups: dict  # task -> [(its position in model.wakeups, the wakeup)]
    owners: dict  # task -> {"comm[pid]" of the owners of the locks it waited for}


@per_model
def _by_task(model: Model) -> _TaskIndex:
    wakeups: dict = {}
    for i, w in enumerate(model.wakeups):
        wakeups.setdefault(w.task, []).append((i, w))
    owners: dict = {}
    for lw in model.lock_waits:
        if lw.owner_pid:
            owners.setdefault(lw.task, set()).add(f"{lw.owner_comm}[{lw.owner_pid}]")
    return _TaskIndex(wakeups, owners)


def held_up_by(model: Model, b: Blocker, n: int = 3) -> HeldUpBy:
    tasks = set(b.tasks)
    if b.cls == CPU:  # the threads preempted most were running when the scheduler switched
        mine = recorded_tasks(model)
        others = [t for t in model.tasks.values() if t.involuntary_switches and (mine is None or t.task in mine)
                  and not (len(tasks) == 1 and t.task in tasks)]
        others.sort(key=lambda t: -t.involuntary_switches)
        return HeldUpBy(hogs=tuple((f"{t.info.comm}[{t.task.pid}]", t.involuntary_switches) for t in others[:n]),
                        hog_names=_by_name(((t.info.comm, t.task.pid, t.involuntary_switches) for t in others), n))
    by: dict[tuple, list] = {}
    names: dict[tuple, list] = {}  # the same per waker name: [label, count, total, stack, threads]
    index = _by_task(model)
    mine = sorted((e for t in tasks for e in index.wakeups.get(t, ())), key=lambda e: e[0])
    share, ended_ns = _cause_share(model, b.cause, tasks, mine)
    for _i, w in mine:  # in the model's order, as ties rank
        f = share(w)
        if not f:
            continue
        ctx = waker_context(w.waker.pid, w.waker_stack, w.in_interrupt)
        key = (ctx, w.waker.pid if ctx == "task" else 0)
        e = by.get(key)
        if e is None:
            e = by[key] = [waker_label(w.waker.pid, w.waker_comm, w.waker_stack, w.in_interrupt), 0, 0, None]
        e[1] += w.count * f
        e[2] += w.weighted * f
        e[3] = e[3] or w.waker_stack
        named = (ctx, w.waker_comm if ctx == "task" else "")
        g = names.get(named)
        if g is None:
            g = names[named] = [e[0], 0, 0, None, set()]
        g[1] += w.count * f
        g[2] += w.weighted * f
        g[3] = g[3] or w.waker_stack
        g[4].add(w.waker.pid)
    # the drawn waits' d/p summed per waker estimates the time each ended, noisily where few were drawn (at
    # T = 10 s, a handful of waits of T each): shared out instead, in those proportions, is the time the
    # cause's waits that ended measured in all, exactly (a ratio estimate, as the undrawn waits' time is shared)
    drawn = sum(e[2] for e in by.values())
    scale = ended_ns / drawn if ended_ns is not None and drawn > 0 else 1.0
    wakers = sorted(((label, _whole(count), round(ns * scale), stack) for label, count, ns, stack in by.values()),
                    key=lambda e: -e[2])[:n]
    by_name = sorted(((label if ctx != "task" or len(pids) == 1 else comm, _whole(count), round(ns * scale),
                       len(pids), stack)
                      for (ctx, comm), (label, count, ns, stack, pids) in names.items()), key=lambda e: -e[2])[:n]
    owners = sorted({o for t in tasks for o in index.owners.get(t, ())})
    return HeldUpBy(wakers=tuple(wakers), owners=tuple(owners[:n]), waker_names=tuple(by_name))


def _whole(count: float) -> int:
    """A count of wakeups some of which were shared with other causes: at least one where any was."""
    return max(1, round(count)) if count > 0 else 0


def _cause_share(model: Model, cause: str, tasks: set[TaskId], wakeups: list[tuple[int, object]]):
    """For each of a blocker's tasks' wakeups, the part that ended waits of `cause`: its wakee's wait's stratum
    (the task, and what it was doing) sends its time to causes in the attribution's fractions (one cause, most
    strata: all or nothing). The tasks' waits of other causes (a worker's idle waits beside its lock waits)
    are not this blocker's. With it, the whole length of the cause's waits that ended, measured (None in
    recordings whose wakeups do not name their wakee's wait: they count whole, as before)."""
    if all(w.wakee == NO_LINK for _i, w in wakeups):
        return (lambda w: 1.0), None
    strata, totals = attribute_strata(model, None), _stratum_totals(model)
    funcs, fractions = model.functions, {}

    def of_stratum(key: tuple) -> float:
        parts = strata.get(key)
        mine = parts.get(cause) if parts else None
        return mine.ns / totals[key] if mine is not None and totals[key] > 0 else 0.0

    def share(w) -> float:
        k = w.wakee
        # a wakee's wait not known (its switch-out untraced): the cause's part of all the task's waits
        key = (w.task, k.state, k.why, funcs.get(k.func, f"{k.func:#x}") if k.func else "") if k != NO_LINK else w.task
        f = fractions.get(key)
        if f is None:
            if k == NO_LINK:
                keys = _strata_of(model).get(w.task, ())
                total = sum(totals[s] for s in keys)
                mine = sum(p.ns for s in keys if (p := strata[s].get(cause)) is not None)
                f = mine / total if total > 0 else 0.0
            else:
                f = of_stratum(key)
            fractions[key] = f
        return f

    ended, by_task = 0.0, _ended_fractions(model)
    for task in tasks:
        for ns, fractions_of in by_task.get(task, ()):
            f = fractions_of.get(cause)  # none: the stratum has no part of the cause, which adds nothing
            if f is not None:
                ended += f * ns
    return share, ended


@per_model
def _ended_fractions(model: Model) -> dict[TaskId, list[tuple[int, dict[str, float]]]]:
    """Per task, the whole length of each of its strata's waits that ended, with each cause's fraction of the
    stratum's time (`_cause_share`'s of_stratum): worked out once for every blocker (27 of them in a 10-minute
    hackbench recording, each with thousands of tasks)."""
    strata, totals = attribute_strata(model, None), _stratum_totals(model)
    out: dict[TaskId, list[tuple[int, dict[str, float]]]] = {}
    for task, ended in _ended_by_stratum(model).items():
        rows = []
        for key, ns in ended:
            parts = strata.get(key)
            if parts is None:
                continue
            total = totals[key]
            rows.append((ns, {name: p.ns / total for name, p in parts.items()} if total > 0 else {}))
        out[task] = rows
    return out


@per_model
def _stratum_totals(model: Model) -> dict[tuple, float]:
    """Each stratum's time, all its causes' parts summed."""
    return {key: sum(p.ns for p in parts.values()) for key, parts in attribute_strata(model, None).items()}


@per_model
def _strata_of(model: Model) -> dict[TaskId, list[tuple]]:
    out: dict[TaskId, list[tuple]] = {}
    for key in attribute_strata(model, None):
        out.setdefault(key[0], []).append(key)
    return out


@per_model
def _ended_by_stratum(model: Model) -> dict[TaskId, list[tuple[tuple, int]]]:
    """Per task, its strata with the whole length of their waits that ended."""
    out: dict[tuple, int] = {}
    for w in model.waits:
        if w.total_ns:
            key = (w.task, w.state, w.why, w.func)
            out[key] = out.get(key, 0) + w.total_ns
    by_task: dict[TaskId, list[tuple[tuple, int]]] = {}
    for key, ns in out.items():
        by_task.setdefault(key[0], []).append((key, ns))
    return by_task
