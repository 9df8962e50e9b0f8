"""Run against run: what got worse between two recordings (regression hunting).

Every figure is compared as wait per second of its own recording, so runs of different lengths
compare. A change must clear a noise guard to lead: an absolute floor, a relative floor against the
base, and enough waits on the worse side that one long wait alone does not rank first. Changes that
do not clear it are kept, marked, and ranked after the ones that do.
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.blockers import blocked_ns_by_task, rank_blockers
from stallscope.analyzer.export import to_folded
from stallscope.analyzer.io import io_table
from stallscope.analyzer.locks import LockStat, lock_stats
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import TaskId
from stallscope.analyzer.scope import in_scope
from stallscope.analyzer.slab import slab_rows


@dataclass(frozen=True)
class NoiseGuard:
    min_delta_ns_per_s: float = 1_000_000.0  # 1 ms of wait per second of recording
    min_relative: float = 0.10  # of the base's rate
    min_events: int = 3  # waits on the side that grew (a one-off wait does not lead)


@dataclass(frozen=True)
class Change:
    kind: str  # "cause", "lock", "cache" (its list_lock waits), "task", "device" (its await: compare_devices)
    name: str
    base_ns_per_s: float
    new_ns_per_s: float
    base_count: int
    new_count: int
    significant: bool

    @property
    def delta_ns_per_s(self) -> float:
        return self.new_ns_per_s - self.base_ns_per_s

    @property
    def delta_pct(self) -> float | None:
        """Relative change; None when the base had none (a new cause)."""
        return 100.0 * self.delta_ns_per_s / self.base_ns_per_s if self.base_ns_per_s else None


def _rates(items: dict[str, tuple[int, int]], seconds: float) -> dict[str, tuple[float, int]]:
    s = seconds or 1.0
    return {k: (ns / s, n) for k, (ns, n) in items.items()}


def _compare(kind: str, base: dict[str, tuple[float, int]], new: dict[str, tuple[float, int]],
             guard: NoiseGuard) -> list[Change]:
    out = []
    for name in sorted(set(base) | set(new)):
        b, bn = base.get(name, (0.0, 0))
        n, nn = new.get(name, (0.0, 0))
        delta = n - b
        grew_count = nn if delta >= 0 else bn
        significant = (abs(delta) >= guard.min_delta_ns_per_s and abs(delta) >= guard.min_relative * b
                       and grew_count >= guard.min_events)
        out.append(Change(kind, name, b, n, bn, nn, significant))
    return out


def cause_waits(model: Model, scope: set[TaskId] | None = None, include_idle: bool = False) -> dict[str, tuple[int, int]]:
    # a program that sleeps more than it did is slower: its delays are compared, idle or not
    return {b.cause: (b.total_ns, b.count)
            for b in rank_blockers(model, scope, include_idle=include_idle, include_delays=True)}


def lock_waits(model: Model, scope: set[TaskId] | None = None) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for s in lock_stats(model, tasks=scope):
        # a process's mmap_lock is named with its pid, which differs run to run: compare by name and type
        name = f"{s.name.split(' (')[0]} [{s.type}]" if not s.is_futex else _futex_name(s)
        ns, n = out.get(name, (0, 0))
        out[name] = (ns + s.wait_total_ns, n + s.contentions)
    return out


def _futex_name(s: LockStat) -> str:
    """A futex as two runs of a program both have it. Its word's address differs run to run (a heap's, a
    thread stack's, under ASLR) where no lock name was found for it: such futexes are compared by their
    process's name and their heaviest call site (a function, or a binary's offset, alike run to run),
    the futexes one site takes summed (a program's four mutexes taken in one place are one row)."""
    if not s.name.startswith("futex 0x"):
        return f"{s.name.split(' (')[0]} [{s.type_text}]"
    site = next((c.point for c in s.callers if not c.point.startswith("(")), "")
    return f"futex of {s.comm}" + (f" at {site}" if site else " (no call site)") + f" [{s.type_text}]"


def cache_waits(model: Model, scope: set[TaskId] | None = None) -> dict[str, tuple[int, int]]:
    """Waits on each slab cache's node list_lock (recordings with the slab and locks groups)."""
    return {r.cache: (r.lock_wait_ns, r.lock_contentions) for r in slab_rows(model, scope) if r.lock_contentions}


def task_waits(model: Model, scope: set[TaskId] | None = None, include_idle: bool = False) -> dict[str, tuple[int, int]]:
    """Blocked (idle causes left out unless asked) plus run-queue time by thread name: pids differ
    between runs, names do not."""
    blocked = None if include_idle else blocked_ns_by_task(model, scope)
    out: dict[str, tuple[int, int]] = {}
    for t in model.tasks.values():
        if scope is not None and t.task not in scope:
            continue
        off_ns, off_n = (t.offcpu_ns, t.offcpu_count) if blocked is None else blocked.get(t.task, (0, 0))
        ns, n = out.get(t.info.comm, (0, 0))
        out[t.info.comm] = (ns + off_ns + t.runq_wait_ns, n + off_n + t.runq_count)
    return {k: v for k, v in out.items() if v[0]}


def device_latencies(model: Model) -> dict[str, tuple[int, float]]:
    """Each device and operation's requests and await (ns per request), with the io group."""
    return {f"{r.name} {o.op} await": (o.requests, o.await_.avg_ns) for r in io_table(model) for o in r.ops
            if o.requests}


def compare_devices(base: Model, new: Model, guard: NoiseGuard) -> list[Change]:
    """A device whose requests got slower, costed at the new run's request rate: `base_ns_per_s` is the
    new run's requests per second times the base run's await, `new_ns_per_s` times its own, so the change
    is the request time per second the latency alone added (or saved); a device in one run only is not
    compared (its load, not its latency, changed). The guard's event floor applies to both runs' requests."""
    b, n = device_latencies(base), device_latencies(new)
    secs = new.duration_s or 1.0
    out = []
    for name in sorted(set(b) & set(n)):
        (bn, b_await), (nn, n_await) = b[name], n[name]
        rate = nn / secs
        base_rate, new_rate = rate * b_await, rate * n_await
        delta = new_rate - base_rate
        significant = (abs(delta) >= guard.min_delta_ns_per_s and abs(delta) >= guard.min_relative * base_rate
                       and min(bn, nn) >= guard.min_events)
        out.append(Change("device", name, base_rate, new_rate, bn, nn, significant))
    return out


def diff(base: Model, new: Model, guard: NoiseGuard | None = None, include_idle: bool = False,
         scopes: tuple[set[TaskId] | None, set[TaskId] | None] = (None, None)) -> list[Change]:
    """Every cause, lock and thread name, worst regression first: the significant regressions by how much their
    wait per second grew, then the significant improvements by how much it shrank (the largest first: a reader cut at
    N rows keeps the largest of both), then the rest in the same order. `scopes`: the tasks of each model to compare (None: all); stallscope's
    own are left out of either, as every view leaves them out (analyzer/scope.py)."""
    g = guard or NoiseGuard()
    scopes = (in_scope(base, scopes[0]), in_scope(new, scopes[1]))
    changes = []
    for kind, fn in (("cause", lambda m, sc: cause_waits(m, sc, include_idle)), ("lock", lock_waits),
                     ("cache", cache_waits), ("task", lambda m, sc: task_waits(m, sc, include_idle))):
        changes += _compare(kind, _rates(fn(base, scopes[0]), base.duration_s),
                            _rates(fn(new, scopes[1]), new.duration_s), g)
    changes += compare_devices(base, new, g)
    changes.sort(key=lambda c: (not c.significant, c.delta_ns_per_s < 0, -abs(c.delta_ns_per_s), c.kind, c.name))
    return changes


def differential_folded(base: Model, new: Model,
                        scopes: tuple[set[TaskId] | None, set[TaskId] | None] = (None, None)) -> str:
    """`stack base new` per line, each value in ns of off-CPU time per second of its recording, for a
    differential flame graph (flamegraph.pl reads the two columns; the colour shows the change)."""
    def per_s(model: Model, scope: set[TaskId] | None) -> dict[str, int]:
        s = model.duration_s or 1.0
        out = {}
        for line in to_folded(model, scope).splitlines():
            key, _, value = line.rpartition(" ")
            out[key] = round(int(value) / s)
        return out

    b, n = per_s(base, in_scope(base, scopes[0])), per_s(new, in_scope(new, scopes[1]))
    return "".join(f"{k} {b.get(k, 0)} {n.get(k, 0)}\n" for k in sorted(set(b) | set(n)))
