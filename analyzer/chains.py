"""Wait chains: what a waiter's time comes down to, following who woke it.

A thread waiting on a mutex is held up by the holder; if the holder was itself blocked in fsync() while
it held the mutex, the waiter's root cause is the fsync. Each waker record (bpf/sched.h waker_key) says,
for the waits drawn for a stack walk, who ended them and how much of each wait the waker spent blocked in
its own last wait, then waiting for a CPU; the rest it was running (or in earlier waits). So a waiter's
time for one cause splits into:

- the waker's own blocked time in its last wait: that wait's cause, followed in turn (its stratum's
  causes, then their wakers), up to MAX_DEPTH links;
- the waker waiting for a CPU: "Waiting for CPU";
- the waker running: "WAKER on a CPU" (the holder's critical section, the producer's work);
- a wait ended by an interrupt (a timer, a device), or with no waker recorded: its cause is its own root;
- a wait ended by a thread's or a child's exit (a join): the exiting task's whole time in the window, its
  blocked causes and its running;
- a waker idle in its last wait (a kernel worker waiting for work, an I/O completion waiting for the
  device): the wait was for what it waited on, so the cause is its own root; unless the waker's idle
  wait was a delay it chose (`delays_wakees`: a lock holder sleeping, a producer pacing itself), which
  is then the root.

Chains that loop (threads handing a lock to each other) are cut where they come back to a node, and the
time that went round is shared out like the rest: the stationary answer of following them forever.

Where many threads hand a lock to one another, the chains multiply with each link: 16 sysbench threads on
one mutex take 19,000 steps (nodes and waker links) to follow two links deep, 500,000 three deep and 11.5
million four deep (33 s). A table follows its chains MAX_DEPTH links deep when that takes at most
CHAIN_WORK steps below the waiters' own nodes (a 10-minute hackbench recording: 131,000); else as many links
as take no more, tried from the deepest down (`RootTable.depth`): the 16 threads' two links.

Ranked by root, the waiting time each root explains, of the same denominator as the blockers. The times
are the blockers' (measured and estimated), split by the shares of the waker records (a sample: those of
the drawn waits, weighted by 1/p).
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.attribution import Part, attribute, attribute_strata
from stallscope.analyzer.blockers import WAITING_FOR_CPU, cpu_parts, denominator
from stallscope.analyzer.causes import BLOCKER, CPU, IDLE, CauseTable
from stallscope.analyzer.model import Model, Wakeups
from stallscope.analyzer.sample import TaskId
from stallscope.analyzer.scope import in_scope
from stallscope.analyzer.untrusted import printable

MAX_DEPTH = 4
_CPU_ROOT = ("cpu", WAITING_FOR_CPU.name, None)
CHAIN_WORK = 200_000  # the nodes and waker links below the waiters' own a table may work through at one depth
# an explanation that met more nodes than this is not kept for other chains (checking a chain against
# them, and the chains above gathering them, would cost more than working it out again)
_MET_LIMIT = 512
_UNKNOWN = object()  # among the nodes met: too many to name
ON_CPU = "on a CPU"


@dataclass(frozen=True)
class Root:
    """A root cause: a cause (`name`, of class `cls`), "Waiting for CPU", or a task's own running
    (`cls` "running", `name` "comm[pid] on a CPU", or "comm on a CPU" for several threads of one name), with
    the waiting time it explains."""

    name: str
    cls: str
    total_ns: int
    share_pct: float  # of the blockers' denominator: the waiting time of the tasks in view
    chain: tuple[str, ...]  # the heaviest chain to it, waiter first: "Userspace lock contention (app[12])", ...
    tasks: tuple[TaskId, ...]  # the waiters whose time it explains


class _TooDeep(Exception):
    """More than the budget's work below the waiters' own nodes at this depth."""


class _Chains:
    """Explanations of (task, cause) nodes as shares of roots, memoised, `max_depth` links deep; more than
    `budget` nodes and waker links worked through below the waiters' own raise _TooDeep."""

    def __init__(self, model: Model, table: CauseTable | None, max_depth: int = MAX_DEPTH,
                 budget: int | None = None):
        self.model = model
        self.max_depth, self.budget = max_depth, budget
        self.strata = attribute_strata(model, None, table)
        self.by_task: dict[TaskId, list[tuple]] = {}
        for key in self.strata:
            self.by_task.setdefault(key[0], []).append(key)
        self.wakers: dict[tuple, list[Wakeups]] = {}
        for w in model.wakeups:
            key = (w.task, w.wakee.state, w.wakee.why, self._func(w.wakee.func))
            self.wakers.setdefault(key, []).append(w)
        self.memo: dict[tuple, dict] = {}  # (task, cause) -> its explanation
        self.deep: dict[tuple, tuple] = {}  # ((task, cause), depth) -> (explanation, the nodes it met)
        self.links: dict[tuple, tuple] = {}
        self.cpu = {t.task: t.runq_wait_ns for t in model.tasks.values() if t.runq_wait_ns}  # cpu_parts' ns
        self.labels: dict[TaskId, str] = {}  # a task is labelled at every step of every chain through it
        self.cpu_steps: dict[TaskId, str] = {}  # _waiting_for_cpu's
        self.waker_parts: dict[tuple, tuple] = {}  # _parts_of's
        self.run_steps: dict[TaskId, tuple] = {}  # _running's

    def deepen(self, max_depth: int, budget: int | None) -> None:
        """Explanations `max_depth` links deep from here on, within `budget` (those made before forgotten)."""
        self.max_depth, self.budget = max_depth, budget
        self.memo.clear()
        self.deep.clear()

    def _func(self, addr: int) -> str:
        return self.model.functions.get(addr, f"{addr:#x}") if addr else ""

    def _label(self, task: TaskId) -> str:
        label = self.labels.get(task)
        if label is None:
            t = self.model.tasks.get(task)
            label = self.labels[task] = f"{printable(t.info.comm) if t else '?'}[{task.pid}]"
        return label

    def _name(self, task: TaskId) -> str:
        t = self.model.tasks.get(task)
        return printable(t.info.comm) if t else "?"

    def explain(self, task: TaskId, cause: str) -> dict:
        """Root key -> [fraction, heaviest path (tuple of labels), its weight]."""
        key = (task, cause)
        out = self.memo.get(key)
        if out is None:
            out = self.memo[key] = self._explain(task, cause, 0, frozenset(), set())
        return out

    def _explain(self, task: TaskId, cause: str, depth: int, seen: frozenset, met: set) -> dict:
        """`explain` of a node `depth` links down a chain through the nodes `seen`. The nodes this
        explanation met (itself and every node below it, loops cut or not) are added to `met`.

        What a node comes to depends on the chain above it only through the loops it cuts, at nodes of
        `seen`: one that met no node of `seen` is the same below any chain that does not pass through
        the nodes it met, and is worked out once for its depth (chains pass through the same nodes
        many times: a stratum's fan-out of wakers, four links deep)."""
        key = (task, cause)
        kept = self.deep.get((key, depth))
        if kept is not None and seen.isdisjoint(kept[1]):
            met.update(kept[1])
            return kept[0]
        mine = {key}
        out = self._explain_node(key, depth, seen, mine)
        if _UNKNOWN in mine or len(mine) > _MET_LIMIT:  # not kept, nor the chains above it
            met.add(_UNKNOWN)
            return out
        met.update(mine)
        if seen.isdisjoint(mine):
            self.deep[(key, depth)] = (out, frozenset(mine))
        return out

    def _explain_node(self, key: tuple, depth: int, seen: frozenset, met: set) -> dict:
        task, cause = key
        out: dict = {}
        here = f"{cause} ({self._label(task)})"
        if key in seen:
            return out  # a loop: what goes round is shared out by the rest (see the module's doc)
        if depth and self.budget is not None:
            self.budget -= 1
            if self.budget < 0:
                raise _TooDeep
        weights = [(s, parts[cause].ns) for s in self.by_task.get(task, ())
                   if (parts := self.strata[s]).get(cause) is not None and parts[cause].ns > 0]
        total = sum(ns for _, ns in weights)
        if not total or depth >= self.max_depth:
            self._add(out, ("cause", cause, None), 1.0, (here,))
        else:
            for stratum, ns in weights:
                self._explain_stratum(out, stratum, cause, ns / total, depth, seen | {key}, here, met)
            mass = sum(e[0] for e in out.values())
            if mass <= 0:
                self._add(out, ("cause", cause, None), 1.0, (here,))
            elif mass < 1.0:
                for e in out.values():
                    e[0] /= mass
        return out

    def _links(self, stratum: tuple) -> tuple:
        """The waker records of a stratum, each as what `_explain_stratum` reads: its weight and the
        stratum's, and the parts of it the waker spent blocked (with the waker's stratum then),
        waiting for a CPU and running. Worked out once per stratum: chains pass through a stratum many
        times."""
        links = self.links.get(stratum)
        if links is not None:
            return links
        wakers = self.wakers.get(stratum, [])
        weights = [w.weighted for w in wakers]
        total = sum(weights)
        out = []
        for w, weighted in zip(wakers, weights) if total else ():
            share = (weighted, total)
            if w.in_interrupt or not w.waker.pid:
                out.append((share, "self", None, 0.0, 0.0, 0.0))
                continue
            if w.exiting:
                out.append((share, "exit", w.waker, 0.0, 0.0, 0.0))
                continue
            blocked = min(w.link_blocked_ns / weighted, 1.0) if weighted else 0.0
            runq = min(w.link_runq_ns / weighted, 1.0 - blocked) if weighted else 0.0
            link = (w.waker, w.link.state, w.link.why, self._func(w.link.func)) if blocked > 0 else None
            out.append((share, "link", w.waker, blocked, runq, 1.0 - blocked - runq, link))
        links = self.links[stratum] = tuple(out)
        return links

    def _explain_stratum(self, out: dict, stratum: tuple, cause: str, weight: float, depth: int, seen, here: str,
                         met: set):
        links = self._links(stratum)
        cause_root = ("cause", cause, None)
        if not links:
            self._add(out, cause_root, weight, (here,))
            return
        if depth and self.budget is not None:
            self.budget -= len(links)
            if self.budget < 0:
                raise _TooDeep
        add, add_step = self._add, self._add_step
        for (weighted, total), kind, waker, blocked, runq, running, *link in links:
            f = weight * weighted / total
            if kind == "self":
                add(out, cause_root, f, (here,))
                continue
            if kind == "exit":
                self._exited(out, waker, f, depth, seen, here, met)
                continue
            if blocked > 0:
                parts, link_total = self._parts_of(link[0])
                if link_total:
                    for p, for_work in parts:
                        part_share = f * blocked * p.ns / link_total
                        if for_work:  # the waker waited for work: the wait was for what it waited on
                            add(out, cause_root, part_share, (here,))
                        else:
                            self._follow(out, waker, p, part_share, depth, seen, here, met)
                else:
                    running += blocked
            if runq > 0:
                add_step(out, _CPU_ROOT, f * runq, here, self._waiting_for_cpu(waker))
            if running > 0:
                root, step = self._running(waker)
                add_step(out, root, f * running, here, step)

    def _parts_of(self, stratum: tuple) -> tuple[tuple, float]:
        """A waker's stratum's parts, each with whether it is a wait for work (an idle cause that delays no wakee),
        and their total (made once per stratum: chains pass through a stratum many times)."""
        got = self.waker_parts.get(stratum)
        if got is None:
            parts = self.strata.get(stratum, {})
            got = self.waker_parts[stratum] = (
                tuple((p, p.cause.cls == IDLE and not p.cause.delays_wakees) for p in parts.values()),
                sum(p.ns for p in parts.values()))
        return got

    def _waiting_for_cpu(self, task: TaskId) -> str:
        """The step of a chain that ends in a task's wait for a CPU (made once per task: chains pass through a
        task many times)."""
        step = self.cpu_steps.get(task)
        if step is None:
            step = self.cpu_steps[task] = f"{WAITING_FOR_CPU.name} ({self._label(task)})"
        return step

    def _running(self, task: TaskId) -> tuple[tuple, str]:
        """The root and the last step of a chain that ends in a task's time on a CPU (made once per task)."""
        got = self.run_steps.get(task)
        if got is None:
            step = f"{self._label(task)} {ON_CPU}"
            got = self.run_steps[task] = (("running", step, task), step)
        return got

    def _follow(self, out: dict, task: TaskId, p: Part, f: float, depth: int, seen, here: str, met: set):
        """The waker was blocked in a wait of cause p: what that wait comes down to (as _add adds each root, its
        path made only where it is kept)."""
        sub = self._explain(task, p.cause.name, depth + 1, seen, met)
        for root, (frac, path, _w) in sub.items():
            g = f * frac
            e = out.get(root)
            if e is None:
                out[root] = [g, (here,) + path, g]
                continue
            e[0] += g
            if g > e[2]:
                e[1], e[2] = (here,) + path, g

    def _exited(self, out: dict, task: TaskId, f: float, depth: int, seen, here: str, met: set):
        """A join or a parent's wait ended by the task's exit: its whole time in the window."""
        t = self.model.tasks.get(task)
        run = t.run_ns if t else 0
        causes: dict[str, float] = {}
        for s in self.by_task.get(task, ()):
            for name, p in self.strata[s].items():
                if p.cause.cls != IDLE:
                    causes[name] = causes.get(name, 0.0) + p.ns
        cpu = self.cpu.get(task, 0)
        total = run + cpu + sum(causes.values())
        if not total:
            self._add(out, ("running", f"{self._label(task)} {ON_CPU}", task), f, (here,))
            return
        if run:
            self._add(out, ("running", f"{self._label(task)} {ON_CPU}", task), f * run / total,
                      (here, f"{self._label(task)} {ON_CPU}"))
        if cpu:
            self._add(out, ("cpu", WAITING_FOR_CPU.name, None), f * cpu / total,
                      (here, f"{WAITING_FOR_CPU.name} ({self._label(task)})"))
        for name, ns in causes.items():
            sub = self._explain(task, name, depth + 1, seen, met)
            for root, (frac, path, _w) in sub.items():
                self._add(out, root, f * ns / total * frac, (here,) + path)

    @staticmethod
    def _add(out: dict, root: tuple, f: float, path: tuple) -> None:
        e = out.get(root)
        if e is None:
            out[root] = [f, path, f]
            return
        e[0] += f
        if f > e[2]:
            e[1], e[2] = path, f

    @staticmethod
    def _add_step(out: dict, root: tuple, f: float, here: str, step: str) -> None:
        """_add of the path (here, step), made only where it is kept."""
        e = out.get(root)
        if e is None:
            out[root] = [f, (here, step), f]
            return
        e[0] += f
        if f > e[2]:
            e[1], e[2] = (here, step), f


@dataclass(frozen=True)
class RootTable:
    """Roots of all the waiting time in view (`all`), and of each cause's (`by_cause`)."""

    all: tuple[Root, ...]
    by_cause: dict[str, tuple[Root, ...]]
    depth: int = MAX_DEPTH  # the links followed (fewer than MAX_DEPTH where the chains fan out: CHAIN_WORK)


def depth_note(depth: int) -> str:
    """What a table followed less than MAX_DEPTH links deep says of its chains ("" at the full depth)."""
    if depth >= MAX_DEPTH:
        return ""
    return (f"chains followed {depth} link{'s' if depth != 1 else ''} deep, not {MAX_DEPTH}: further, they fan out "
            "too widely to follow")


def root_table(model: Model, tasks: set[TaskId] | None = None, table: CauseTable | None = None) -> RootTable:
    """The waiting time of the tasks in view by root cause, heaviest first, overall and per cause, its
    chains followed MAX_DEPTH links deep, or as deep as CHAIN_WORK allows."""
    scope = in_scope(model, tasks)
    # each task's parts as the blockers rank them: a wait for input that had gone on a second and more
    # has that part under its idle cause ("Reading from a pipe, nothing came", docs/causes.md), which is
    # no one's root; the strata keep the whole wait (a waker's, followed down a chain, is what it was)
    parts = attribute(model, scope, table)
    runq = cpu_parts(model, scope)
    denom = denominator(parts + runq).total_ns or 1
    # each waiter's explanation MAX_DEPTH links deep; where that takes more than CHAIN_WORK, as deep as takes no
    # more
    waiting = [(p.task, p.cause.name) for p in parts if p.cause.cls not in (IDLE, CPU)]
    chains = _Chains(model, table, MAX_DEPTH, CHAIN_WORK)
    try:
        explained = {key: chains.explain(*key) for key in waiting}
    except _TooDeep:
        # the deepest that takes no more, tried from the deepest down: a link deeper takes more work, never less
        # (every node of a shallower chain is met again, and explanations that met more nodes are kept less), and
        # the deepest that fits takes the most of those tried (a 10-minute hackbench run's three links: 0.55 s,
        # one and two 0.3 s together); one link always, whatever it takes
        for depth in range(MAX_DEPTH - 1, 0, -1):
            chains.deepen(depth, CHAIN_WORK if depth > 1 else None)
            try:
                explained = {key: chains.explain(*key) for key in waiting}
                break
            except _TooDeep:
                continue
    classes = {name: part.cause.cls for by_cause in chains.strata.values() for name, part in by_cause.items()}
    overall: dict[tuple, list] = {}
    per_cause: dict[str, dict[tuple, list]] = {}
    for p in parts + runq:
        if p.cause.cls == IDLE:
            continue
        if p.cause.cls == CPU:  # the path by the waiters' name, not their pid: one name's thousands of
            # short-lived tasks weigh as one path, against one long-lived thread's
            expl = {("cpu", WAITING_FOR_CPU.name, None): [1.0, (f"{WAITING_FOR_CPU.name} ({chains._name(p.task)})",), 1.0]}
        else:
            expl = explained[(p.task, p.cause.name)]
        for (kind, name, who), (frac, path, _w) in expl.items():
            # the wakers that ran, by name: one name's thousands of short-lived threads weigh together
            key = ("running", chains._name(who)) if kind == "running" else (kind, name)
            for acc in (overall, per_cause.setdefault(p.cause.name, {})):
                e = acc.get(key)
                if e is None:
                    e = acc[key] = [0.0, set(), {}, {}]
                e[0] += p.ns * frac
                e[1].add(p.task)
                e[2][path] = e[2].get(path, 0.0) + p.ns * frac
                if kind == "running":
                    e[3][who] = name

    def rows(acc: dict) -> tuple[Root, ...]:
        out = []
        for (kind, name), (ns, waiters, paths, runners) in acc.items():
            if kind == "running":  # "comm[pid] on a CPU" for one thread of the name, else "comm on a CPU"
                name = next(iter(runners.values())) if len(runners) == 1 else f"{name} {ON_CPU}"
            cls = {"cpu": CPU, "running": "running"}.get(kind, classes.get(name, BLOCKER))
            path = max(paths.items(), key=lambda kv: kv[1])[0] if paths else ()
            out.append(Root(name, cls, round(ns), 100.0 * ns / denom, path, tuple(sorted(waiters))))
        out.sort(key=lambda r: (-r.total_ns, r.name))
        return tuple(out)

    return RootTable(rows(overall), {c: rows(acc) for c, acc in per_cause.items()}, chains.max_depth)


def root_causes(model: Model, tasks: set[TaskId] | None = None, table: CauseTable | None = None,
                cause: str | None = None) -> list[Root]:
    """The waiting time of the tasks in view (of one cause, if given) by root cause, heaviest first."""
    t = root_table(model, tasks, table)
    return list(t.all if cause is None else t.by_cause.get(cause, ()))
