"""Recommendations: rules with thresholds that turn a recording into fixes, each with the finding,
its evidence (numbers from the recording), the exact command, the risk, and how to verify it.

Rules say nothing without evidence, and say so when a fix cannot help here (PowerTOP's "cannot be
tuned"): pinning on a machine whose CPUs all share one cache, a knob this kernel does not have. A
run-time fix carries an `action` that `stallscope apply` can carry out (and undo) after checking
the target is still the same task; a boot-time fix is only printed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from stallscope.analyzer.advice import (  # noqa: F401 (shell_command, write_command: used by apply and the CLI)
    NOT_HELPFUL, RECOMMENDED, Fact, Recommendation, is_path_component, shell_command, verify as _verify, write_command,
)

from stallscope.analyzer.blockers import percentiles, rank_live
from stallscope.analyzer.frames import RQ_LOCK, UPROBE_HANDLING, bare
from stallscope.analyzer.io_advice import io_recommendations
from stallscope.analyzer.locks import SCHED_YIELD, drawn_share, lock_stats
from stallscope.analyzer.model import Model, TaskTotals
from stallscope.analyzer.oncpu import category_share, probe_ran
from stallscope.analyzer.slab import METHOD_ESTIMATE, slab_rows
from stallscope.analyzer.scope import in_scope, restrict
from stallscope.analyzer.signals import (
    QUOTA_MIN_THROTTLES, QUOTA_THROTTLED_SHARE, quota_limit, quota_throttled, signals, tasks_waiting,
    window_busy_pct, window_cpu_side,
)
from stallscope.analyzer.units import fmt_ns
from stallscope.analyzer.untrusted import printable

KINDS = ("pin", "priority", "cpu", "slub", "lock", "io", "rcu", "sched_knob", "quota", "affinity")
# run-time changes stallscope leaves to the user (`apply` does not carry them out): a cgroup's CPU limit may be
# deliberate, a container's or a service's
BY_HAND = frozenset({"quota"})

# Where the kernel has the scheduler knobs the rules advise on (a sysctl; debugfs since 5.13). A path is
# never taken from a recording: a command or `apply` writes only here (and only where the file exists).
# the kernel knobs `apply` writes, by name: the scheduler's and RCU's (the only ones the rules advise on)
SCHED_KNOB_PATHS = {"sched_migration_cost_ns": "/proc/sys/kernel/sched_migration_cost_ns",
                    "migration_cost_ns": "/sys/kernel/debug/sched/migration_cost_ns",
                    "rcu_expedited": "/sys/kernel/rcu_expedited"}
SLAB_ROOT = "/sys/kernel/slab"
SLAB_TUNABLES = frozenset({"cpu_partial"})


def is_cache_name(name) -> bool:
    """A name that can be a slab cache's directory in SLAB_ROOT."""
    return is_path_component(name)


@dataclass(frozen=True)
class Thresholds:
    migrations_per_s: float = 10.0  # a thread moving between CPUs this often is ping-ponging
    min_migrations: int = 20
    runq_wait_per_s_ns: float = 50e6  # 50 ms of every second waiting for a CPU
    runq_p99_ns: float = 1e6  # a thread whose wakeup-to-run p99 is at least 1 ms ...
    runq_p99_over_burst: float = 10.0  # ... and ten times what it runs each time it gets a CPU ...
    min_wakeups: int = 20  # ... over at least this many wakeups ...
    min_runq_wait_ns: float = 20e6  # ... and at least this long waiting for a CPU in all
    cpu_bound_waiting_per_cpu: float = 1.0  # tasks waiting for a CPU, on average, per CPU: saturated
    lock_wait_per_s_ns: float = 10e6  # a lock whose waits add up to 10 ms per second
    lock_min_contentions: int = 20  # ... over at least this many contentions
    io_wait_per_s_ns: float = 50e6
    rcu_wait_per_s_ns: float = 50e6  # tasks waiting this long a second for normal RCU grace periods
    priority_nice: int = -5  # what a starved thread's nice is raised to (not more: see the risk)
    max_per_rule: int = 5  # the worst few: a list of hundreds helps nobody
    slab_allocs_per_s: float = 10_000.0  # a cache this busy ...
    slab_switch_pct: float = 10.0  # ... whose CPU slab changes this often (the estimate) ...
    slab_lock_wait_per_s_ns: float = 1e6  # ... and whose list_lock is waited on (or:)
    slab_slow_path_pct: float = 5.0  # ... or this share of the on-CPU samples in SLUB's slow path
    quota_throttled_share: float = QUOTA_THROTTLED_SHARE  # a cgroup's run queues throttled this share of the recording
    quota_min_throttles: int = QUOTA_MIN_THROTTLES  # ... over at least this many periods
    queued_waiting: float = 0.5  # a CPU's run queue holding this many tasks waiting on average ...
    idle_cpu_busy_pct: float = 50.0  # ... while another CPU was busy no more than this


def _name(t: TaskTotals) -> str:
    return f"{printable(t.info.comm)}[{t.task.pid}]"


def _is_kernel_thread(t: TaskTotals) -> bool:
    """kthreadd (pid 2) and its children are kernel threads; apply checks PF_KTHREAD again."""
    return t.task.pid == 2 or t.info.tgid == 2 or t.info.ptgid == 2


def rule_pin(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    machine = model.meta.machine or {}
    topo = machine.get("topology", {})
    cpus = topo.get("cpus", {})
    busy, span = window_busy_pct(model)
    secs = model.duration_s or 1.0
    if not cpus:  # recorded without the machine's topology: no topology-aware advice
        return []
    movers = [t for t in sorted(model.tasks.values(), key=lambda t: -t.migrations)
              if t.migrations >= th.min_migrations and t.migrations / secs >= th.migrations_per_s
              and not _is_kernel_thread(t)]
    if not movers:
        return []
    llcs = {tuple(c.get("llc", [])) for c in cpus.values()}
    least = min(busy, key=lambda c: busy[c]) if busy else (next(iter(cpus), "0"))
    single_llc = len(llcs) <= 1
    busy_text = (f"CPU busy over the {span}: " + ", ".join(
        f"cpu{c} {p:.0f}%" for c, p in sorted(busy.items(), key=lambda kv: int(kv[0])))) if busy else ""
    if single_llc and len(cpus) <= 4:
        # the machine's finding, not one thread's: said once, with the threads it concerns
        return [_pin_cannot_help(movers, len(cpus), least, secs, busy_text, th)]
    # several caches: the least busy CPU's cache domain; one cache for all: its core (SMT siblings)
    domain = cpus.get(str(least), {}).get("siblings" if single_llc else "llc", [int(least)])
    out = []
    for t in movers[:th.max_per_rule]:
        rate = t.migrations / secs
        out.append(Recommendation(
            "pin", _name(t), f"{_name(t)} ping-pongs between CPUs ({rate:.0f} migrations/s): each move refills its caches",
            tuple(_pin_evidence(t, secs) + ([busy_text] if busy_text else [])
                  + [f"least busy CPU: cpu{least}; "
                     + (f"one core with CPUs {','.join(map(str, domain))} (all CPUs share one cache)"
                        if single_llc else
                        f"it shares its last-level cache with CPUs {','.join(map(str, domain))}")]),
            shell_command("taskset", "-pc", ",".join(map(str, domain)), t.task.pid),
            "bound to those CPUs the thread waits when they are busy instead of moving; isolating CPUs "
            "overloads the rest (PI-Tool's and Tuna's caveat)",
            _verify(_name(t), "migrations should fall to a few per second and run-queue wait must not rise"),
            RECOMMENDED, True, {"type": "affinity", "tid": t.task.pid, "start_time_ns": t.task.start_time_ns,
                                "comm": t.info.comm, "cpus": list(domain)}, _pin_facts(t, secs)))
    return out


def _pin_evidence(t: TaskTotals, secs: float) -> list[str]:
    return [f"{_name(t)}: {t.migrations} CPU migrations in {secs:.1f} s ({t.migrations / secs:.0f}/s), "
            f"{t.voluntary_switches} voluntary and {t.involuntary_switches} involuntary switches"]


def _pin_facts(t: TaskTotals, secs: float) -> tuple[Fact, ...]:
    return (Fact("CPU migrations", t.migrations / secs, "/s"),
            Fact("voluntary switches", t.voluntary_switches / secs, "/s"),
            Fact("involuntary switches", t.involuntary_switches / secs, "/s"))


def _pin_cannot_help(movers: list[TaskTotals], ncpus: int, least, secs: float, busy_text: str,
                     th: Thresholds) -> Recommendation:
    """Threads that migrate often on a machine whose CPUs all share one last-level cache (four or fewer):
    one finding for them all, the busiest mover's numbers as its facts."""
    top = movers[0]
    rates = [t.migrations / secs for t in movers]
    if len(movers) == 1:
        who = f"{_name(top)} migrates {rates[0]:.0f} times a second"
    else:
        low = f"{rates[-1]:.0f}-" if round(rates[-1]) != round(rates[0]) else ""
        who = f"{_name(top)} and {len(movers) - 1:,} more threads migrate {low}{rates[0]:.0f} times a second"
    evidence = [line for t in movers[:th.max_per_rule] for line in _pin_evidence(t, secs)]
    if len(movers) > th.max_per_rule:
        evidence.append(f"{len(movers) - th.max_per_rule:,} more threads migrate {th.migrations_per_s:g} times a "
                        "second or more")
    if busy_text:
        evidence.append(busy_text)
    return Recommendation(
        "pin", _name(top), f"{who}, but pinning cannot help much here: all {ncpus} CPUs share one last-level "
        "cache, so a migration loses only the private L1/L2, and a pinned thread can no longer escape a busy CPU",
        tuple(evidence), shell_command("taskset", "-pc", least, top.task.pid),
        "the thread waits for its one CPU when that CPU is busy; the other CPUs get the rest of the load",
        _verify(_name(top), "migrations should fall and run-queue wait must not rise"), NOT_HELPFUL,
        facts=_pin_facts(top, secs))


def rule_affinity(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """One CPU's run queue holds tasks waiting while another CPU idles, and the threads that waited most there
    never moved: the load balancer would have moved them, unless their affinity (taskset, a cpuset, isolcpus)
    holds them there (three hogs pinned to one of two CPUs: 1.83 waiting there, the other 95% idle, and no
    recommendation before). Each such thread's affinity widened to every CPU, which `apply` can carry out."""
    lopsided = _queue_beside_idle_cpu(model, th)
    if lopsided is None:
        return []
    cpu, waiting, least, least_busy, span = lopsided
    secs = model.duration_s or 1.0
    ncpus = max(len(model.matrix), model.meta.cpus, 1)
    stuck = [t for t in sorted(model.tasks.values(), key=lambda t: -t.runq_wait_ns)
             if not _is_kernel_thread(t) and t.migrations == 0 and t.runq_wait_ns / secs >= th.runq_wait_per_s_ns]
    if not stuck:
        return []  # the waiters moved: the balancer is at work, whatever held the queue
    queues = (f"cpu{cpu}'s run queue held {waiting:.2f} tasks waiting on average (the waits that ended there), while "
              f"cpu{least} was {least_busy:.0f}% busy (over the {span})")
    everywhere = list(range(ncpus))
    out = []
    for t in stuck[:th.max_per_rule]:
        rate = t.runq_wait_ns / secs
        out.append(Recommendation(
            "affinity", _name(t), f"{_name(t)} waits {fmt_ns(rate)} a second for a CPU and never moved, while a CPU "
            f"sat idle: its CPU affinity (taskset, a cpuset, isolcpus) holds it where the others queue", (
                queues, f"{_name(t)}: waiting for a CPU {fmt_ns(rate)} per second, running {fmt_ns(t.run_ns / secs)} "
                        f"per second, 0 CPU migrations, {t.involuntary_switches} involuntary switches"),
            shell_command("taskset", "-pc", ",".join(map(str, everywhere)), t.task.pid)
            + f"  # check first: taskset -p {t.task.pid}",
            "where the affinity is deliberate (a real-time or isolated CPU set-up, a container's cpuset) the thread "
            "then shares the other CPUs' work; a cpuset caps what taskset may widen it to",
            _verify(_name(t), "its run-queue wait should fall, and the idle CPU's busy share rise"),
            RECOMMENDED, True, {"type": "affinity", "tid": t.task.pid, "start_time_ns": t.task.start_time_ns,
                                "comm": t.info.comm, "cpus": everywhere},
            facts=(Fact("waiting for a CPU", rate, "ns/s"), Fact("run-queue waiting", waiting),
                   Fact("idle CPU busy", least_busy, "%")), wait_ns_per_s=rate))
    return out


def _queue_beside_idle_cpu(model: Model, th: Thresholds) -> tuple[int, float, int, float, str] | None:
    """A CPU whose run queue held tasks waiting (th.queued_waiting on average or more) beside another CPU that was
    mostly idle (th.idle_cpu_busy_pct busy or less) with its own queue near empty (a quarter of the first's at
    most): (the queue's CPU, its tasks waiting, the idle CPU, its busy %, what the busy figures span); None where
    there is none or the recording has no per-CPU run queues. A whole recording's busy share counts its quiet
    start and end too: the queues say whether the CPU was idle while the others waited."""
    if not (model.meta.options or {}).get("cpu_runq_per_interval") or not model.cpu_runq:
        return None
    busy, span = window_busy_pct(model)
    secs = model.duration_s or 1.0
    queued = {c: tasks_waiting(ns, secs) for c, (ns, _n) in model.cpu_runq.items()}
    cpu, waiting = max(queued.items(), key=lambda kv: kv[1])
    idle = [(c, p) for c, p in _busy_by_cpu(busy)
            if c != cpu and p <= th.idle_cpu_busy_pct and queued.get(c, 0.0) <= waiting / 4]
    if waiting < th.queued_waiting or not idle:
        return None
    least, least_busy = min(idle, key=lambda cp: cp[1])
    return cpu, waiting, least, least_busy, span


def _busy_by_cpu(busy: dict) -> list[tuple[int, float]]:
    """(cpu, busy %) of window_busy_pct's, the well-formed entries only (a recording's machine figures are read as
    stored)."""
    return [(int(c), float(p)) for c, p in busy.items()
            if isinstance(c, str) and c.isdigit() and isinstance(p, (int, float)) and not isinstance(p, bool)]


POLICY_NAMES = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE",
                6: "SCHED_DEADLINE", 7: "SCHED_EXT"}
_REAL_TIME = (1, 2, 6)


def _burst_ns(t: TaskTotals) -> float:
    """What a thread runs each time it gets a CPU: its run time over its switches."""
    return t.run_ns / max(t.voluntary_switches + t.involuntary_switches, 1)


def _busy(model: Model, secs: float) -> list[TaskTotals]:
    """The threads that could hold the CPUs (busy at least 5% of the window, not kernel threads), busiest
    first: at most 20 per CPU, found once for all the starved threads (each of thousands of starved
    hackbench threads had scanned every task)."""
    return sorted((t for t in model.tasks.values() if t.run_ns >= 0.05 * secs * 1e9 and not _is_kernel_thread(t)),
                  key=lambda t: -t.run_ns)


def _hogs(model: Model, starved: TaskTotals, secs: float, n: int = 3,
          busy: list[TaskTotals] | None = None) -> list[TaskTotals]:
    """Who held the CPUs: threads of other programs busy a good part of the window, each time for far
    longer than the starved thread runs (its burst). Copies of the same program are peers, and threads
    that all run and wait alike (a saturated machine, hackbench) have no hogs: a priority would only
    move the wait around."""
    burst = max(_burst_ns(starved), 1.0)
    others = [t for t in (busy if busy is not None else _busy(model, secs))
              if t.info.tgid != starved.info.tgid and t.info.comm != starved.info.comm and _burst_ns(t) >= 5 * burst]
    return others[:n] if _could_hold_cpus(others, secs) else []


def _could_hold_cpus(threads: list[TaskTotals], secs: float) -> bool:
    """Whether `threads` held a CPU long enough to be hogs: one busy a quarter of the window, or many (eight hogs
    on two CPUs each get a quarter of one) that together held half a CPU. Where all the busy threads together do
    not, no few of them are any starved thread's hogs (_hogs)."""
    return any(t.run_ns >= 0.25 * secs * 1e9 for t in threads) or sum(t.run_ns for t in threads) >= 0.5 * secs * 1e9


def _starved(t: TaskTotals, th: Thresholds) -> tuple[bool, int, int]:
    """A latency-sensitive thread kept waiting: it wakes often, and its wakeup-to-run p99 is both long in
    itself and long against what it runs each time. (starved, p99, wakeups; p99 0 for a thread that wakes too
    seldom or waited too little to be one: its percentile is not worked out, for each of a machine's thousands)."""
    wakeups = sum(t.runq_hist)
    if wakeups < th.min_wakeups or t.voluntary_switches < th.min_wakeups or t.runq_wait_ns < th.min_runq_wait_ns:
        return False, 0, wakeups
    p99 = percentiles(dict(enumerate(t.runq_hist)), t.runq_max_ns, (0.99,)).get("p99_ns", 0)
    relative = p99 >= th.runq_p99_over_burst * _burst_ns(t) if t.run_ns else True
    return p99 >= th.runq_p99_ns and relative, p99, wakeups


def rule_priority(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """A thread starved relative to others: offer what today's scheduler has (nice, an EEVDF slice,
    the cgroup's weight, the hogs pinned away); a real-time or background thread is told why not."""
    secs = model.duration_s or 1.0
    kernel = _kernel_version(model.meta.kernel)
    cpus = max(model.meta.cpus, 1)
    out = []
    busy = _busy(model, secs)
    if not _could_hold_cpus(busy, secs):  # no thread is anyone's hog (a saturated machine of brief threads: hackbench)
        return out
    for t in sorted(model.tasks.values(), key=lambda t: -t.runq_wait_ns):
        if _is_kernel_thread(t):
            continue
        starved, p99, wakeups = _starved(t, th)
        if not starved:
            continue
        hogs = _hogs(model, t, secs, busy=busy)
        if not hogs:
            continue
        hog_text = ", ".join(f"{_name(h)} ({fmt_ns(h.run_ns / secs)} of CPU per second, {fmt_ns(_burst_ns(h))} "
                             f"a time, nice {h.info.nice})" for h in hogs)
        burst = _burst_ns(t)
        policy = POLICY_NAMES.get(t.info.policy, str(t.info.policy))
        evidence = (f"wakeup-to-run latency p99 <= {fmt_ns(p99)} over {wakeups} wakeups (max {fmt_ns(t.runq_max_ns)}), "
                    f"for {fmt_ns(burst)} of work each time it runs",
                    f"waiting for a CPU {fmt_ns(t.runq_wait_ns / secs)} per second ({fmt_ns(t.runq_wait_ns)} in {secs:.1f} s)",
                    f"{policy}, nice {t.info.nice}; running meanwhile: {hog_text}")
        target = _name(t)
        facts = (Fact("wakeup-to-run p99", p99, "ns"), Fact("wakeups", wakeups), Fact("work per run", burst, "ns"),
                 Fact("waiting for a CPU", t.runq_wait_ns / secs, "ns/s"), Fact("policy", policy),
                 Fact("nice", t.info.nice))
        verify = _verify(target, "its wakeup-to-run p99 and run-queue wait per second should fall")
        if t.info.policy in _REAL_TIME:
            out.append(Recommendation(
                "priority", target, f"{target} is a {policy} thread and still waits for a CPU: another real-time "
                "thread of its priority or above holds it, or real-time throttling (kernel.sched_rt_runtime_us) "
                "stopped it; a nice value does not apply", evidence,
                f"chrt -p {t.task.pid}  # and the real-time threads beside it: ps -eLo tid,cls,rtprio,comm | grep -v TS",
                "raising a real-time priority further starves everything below it", verify, NOT_HELPFUL, facts=facts,
                wait_ns_per_s=t.runq_wait_ns / secs))
            continue
        if t.info.policy in (3, 5):
            out.append(Recommendation(
                "priority", target, f"{target} runs as {policy}, which yields to every ordinary thread: its waits "
                "are by design", evidence, f"chrt --other -p 0 {t.task.pid}  # if it should not",
                "it then competes with the hogs as an equal", verify, NOT_HELPFUL, facts=facts,
                wait_ns_per_s=t.runq_wait_ns / secs))
            continue
        alternatives = ["lowering the hogs instead (`renice -n 10 -p HOG`) is the gentler fix"]
        if kernel >= (6, 12):
            alternatives.append(f"on Linux 6.12+ an EEVDF slice close to its {fmt_ns(burst)} burst gives it an earlier "
                                f"deadline without a larger share (util-linux 2.41: `chrt --other --sched-runtime "
                                f"{max(int(burst), 100_000)} -p 0 {t.task.pid}`)")
        cgroup = model.cgroups.get(t.info.tgid)
        if cgroup and all(model.cgroups.get(h.info.tgid) != cgroup for h in hogs):
            alternatives.append(f"or a larger cpu.weight for its cgroup "
                                f"(`{write_command(1000, f'/sys/fs/cgroup{cgroup}/cpu.weight')}`)")
        if cpus > 1:
            others = ",".join(str(c) for c in range(1, cpus))
            alternatives.append(f"or the hogs pinned away from one CPU (`taskset -pc {others} HOG`), leaving it cpu0")
        out.append(Recommendation(
            "priority", target, f"{target} wakes often and runs briefly, yet waits for a CPU behind CPU hogs "
            f"(p99 {fmt_ns(p99)} for {fmt_ns(burst)} of work)", evidence,
            f"renice -n {th.priority_nice} -p {t.task.pid}",
            "a higher priority takes CPU time from the others (" + hog_text + "); go no further than needed, and "
            "not to SCHED_FIFO/RR unless it must never wait: a runaway real-time thread starves the CPU (RT "
            "throttling leaves the rest 5%). " + "; ".join(alternatives),
            verify, RECOMMENDED, True, {"type": "nice", "tid": t.task.pid, "start_time_ns": t.task.start_time_ns,
                                        "comm": t.info.comm, "nice": th.priority_nice}, facts,
            wait_ns_per_s=t.runq_wait_ns / secs))
        if len(out) >= th.max_per_rule:
            break
    return out


def rule_cpu_bound(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """A saturated machine: more runnable threads than CPUs, waiting alike. Said once, with what can help
    (fewer runnable threads, more CPUs, a cgroup weight to choose who gets them), instead of renicing one
    of many."""
    sig = signals(model, waits=False)  # the CPU figures only
    cpus = max(model.meta.cpus, 1)
    if sig.waiting_avg < th.cpu_bound_waiting_per_cpu * cpus:
        return []
    if _queue_beside_idle_cpu(model, th) is not None:
        return []  # tasks wait in one CPU's queue while another idles: not for want of CPUs (rule_affinity)
    secs = model.duration_s or 1.0
    by_prog: dict[str, list] = {}
    for t in model.tasks.values():
        if _is_kernel_thread(t):
            continue
        e = by_prog.setdefault(printable(t.info.comm), [0, 0, set()])
        e[0] += t.runq_wait_ns
        e[1] += t.run_ns
        e[2].add(t.info.tgid)
    top = sorted(by_prog.items(), key=lambda kv: -kv[1][0])[:3]
    waited = sum(w for w, _r, _t in by_prog.values()) or 1
    name, (most, _r, _t) = top[0]
    evidence = (f"{sig.runnable_avg:.1f} tasks running or runnable for {cpus} CPUs on average, "
                f"{sig.waiting_avg:.1f} of them waiting for a CPU ({sig.runq_pressure:.1f} per CPU)",
                "waiting for a CPU most: " + ", ".join(f"{name} ({fmt_ns(w / secs)}/s waiting, {fmt_ns(r / secs)}/s "
                                                       f"running, {len(tgids):,} process{'es' if len(tgids) != 1 else ''})"
                                                       for name, (w, r, tgids) in top))
    return [Recommendation(
        "cpu", "system", f"the machine is CPU-bound: {sig.runq_pressure:.1f} tasks waiting per CPU, {most / waited:.0%} "
        f"of the waiting {name}'s, whose threads wait alike: a priority for one of them would move the wait to the "
        "others", evidence, "",
        "none from measuring; the fixes are fewer runnable threads (a thread pool sized to the CPUs), more CPUs, "
        "or a cgroup weight (cpu.weight) that says which workload gets them first",
        _verify("the machine", "run-queue wait per second and tasks waiting per CPU should fall"),
        facts=(Fact("running or runnable", sig.runnable_avg), Fact("waiting for a CPU", sig.waiting_avg),
               Fact("waiting per CPU", sig.runq_pressure), Fact("CPUs", cpus)),
        wait_ns_per_s=sum(w for w, _r, _t in by_prog.values()) / secs)]


_LOCK_ADVICE = (
    ("mmap_lock", "the process maps and unmaps memory while its threads fault pages in: every mmap/munmap "
                  "takes its mmap_lock for write. Reuse mappings (a pool), free with madvise(MADV_DONTNEED) instead "
                  "of munmap, or let malloc keep memory",
     "env MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=268435456 COMMAND  # if the maps come from glibc malloc"),
    ("&kmem_cache_node->list_lock", "SLUB's per-node partial list lock: allocations and frees of one cache "
                                    "refill and drain partial slabs from many CPUs; see the slab recommendations", ""),
    (RQ_LOCK, "the run-queue lock: wakeups and migrations across CPUs; fewer cross-CPU wakeups "
                   "(pinning producer and consumer together) relieve it", ""),
    ("&task_struct->pi_lock", "a task's pi_lock, taken by every wakeup of it: many CPUs wake the same tasks at once; "
                              "fewer cross-CPU wakeups (producer and consumer on one CPU) relieve it", ""),
    ("&futex_hash_bucket->lock", "a futex hash bucket's lock, taken by every futex wait and wake of the words that "
                                 "hash to it: threads that hammer one futex word (a contended user-space lock) contend "
                                 "here too, and the fix is that lock's; where many distinct words of one process share "
                                 "its buckets, a larger private futex hash spreads them (prctl(PR_FUTEX_HASH, "
                                 "PR_FUTEX_HASH_SET_SLOTS, N) in the program, Linux 6.16 and later)", ""),
)


YIELD_SHARE = 0.2  # of the run-queue lock's drawn waits through sched_yield(): the spinning is the story


def rule_lock(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """A lock whose waiters wait for it itself (its total less the run-queue wait after the wakeup, which
    is a want of CPUs, not of the lock) past the threshold, with a call site to act on."""
    secs = model.duration_s or 1.0
    out = []
    stats = lock_stats(whole.model, sort="lock", tasks=whole.scope)
    # who held a per-CPU rwsem for writing, by its name: its readers wait only then
    writers = {s.name: s.tasks for s in stats if s.type.endswith(":W")}
    for s in stats:
        if s.lock_wait_ns / secs < th.lock_wait_per_s_ns:
            continue
        if not s.is_lock:
            continue  # a poll ended by its timeout, a condition variable, a join: no lock to change
        if s.contentions < th.lock_min_contentions:
            continue  # a few long waits are not contention (a thread waiting once for the run to end)
        traced = _traced_share(s)  # waits the tracing's uprobes added: the program's own are the rest
        if traced and s.lock_wait_ns * (1 - traced) / secs < th.lock_wait_per_s_ns:
            continue
        points = [c for c in s.callers if not c.point.startswith(("(", "[")) and not _at_uprobe(c.point)]
        if not points and (s.name.startswith("0x") or s.name.startswith("(")):
            continue  # neither a name nor a call site: nothing anyone could act on (the table still shows it)
        where = points[0].point if points else s.name
        advice, command = f"contended at {where}: shorten the critical section there, or split the lock", ""
        for prefix, text, cmd in _LOCK_ADVICE:
            if s.name.startswith(prefix):
                advice, command = text, cmd
                break
        if s.field.endswith("i_rwsem") and any(w for _a, w, _ns in s.instances):
            dirs = ", ".join(printable(w) for _a, w, _ns in s.instances if w)
            advice = (f"a directory's i_rwsem ({dirs}): many threads create, remove or look up names in one "
                      "directory; spread the files over several directories")
        elif s.name.startswith(("lookup_slow", "open_last_lookups", "filename_create", "do_unlinkat")):
            advice = ("a directory's i_rwsem: many threads create, remove or look up names in one directory; spread "
                      "the files over several directories")
        elif s.name.startswith("file_rwsem"):
            advice = _file_rwsem_advice(whole.model, s, writers.get(s.name, ()))
        elif s.field == "file_lock_context.flc_lock" or s.name.startswith(("flock_lock_inode", "posix_lock_inode")):
            advice = ("file locks (flock/fcntl) taken and released on the same files by many threads: hold them "
                      "longer, or use one lock file per worker")
        if s.name == RQ_LOCK:
            # how much of it sched_yield() takes: its own taking (do_sched_yield) and the schedule() it calls
            yielding = drawn_share(whole.model, s, SCHED_YIELD)
            if points and points[0].point.startswith("do_sched_yield") or (yielding or 0) >= YIELD_SHARE:
                advice = ("the run-queue lock, taken by sched_yield()"
                          + (f" in {yielding:.0%} of its drawn waits" if yielding is not None else "")
                          + ": threads that spin on sched_yield() take it at every call; wait on the condition "
                          "instead (a futex, a condition variable) or back off")
        if s.type == "futex":
            # its caller, named or a binary's offset (addr2line finds it): the futex's name is the finding's already
            site = next((c.point for c in s.callers if not c.point.startswith("(")), "")
            advice = ("a user-space lock" + (f", taken at {printable(site)}" if site else "")
                      + "; shorten the critical section or shard the lock (one per CPU or per object)")
        evidence = [f"{s.contentions} contentions, {fmt_ns(s.wait_total_ns)} of waiting ({fmt_ns(s.wait_total_ns / secs)} "
                    f"per second), max {fmt_ns(s.wait_max_ns)}, avg {fmt_ns(s.wait_avg_ns)}"]
        if s.split:
            evidence.append(f"type {s.type}; of the waiting, on a CPU (spinning) {fmt_ns(s.spin_ns)}, blocked "
                            f"{fmt_ns(s.blocked_ns)}, woken and waiting for a CPU {fmt_ns(s.runnable_ns)}")
        else:
            evidence.append(f"type {s.type}; spin {fmt_ns(s.spin_ns)}, sleep {fmt_ns(s.sleep_ns)}")
        evidence.append("contention points: " + "; ".join(f"{printable(c.point)} ({c.count})" for c in s.callers[:3]))
        finding = f"{printable(s.name)} is contended: {advice}"
        if traced >= UPROBE_NOTE_SHARE:
            finding += "; " + _traced_note(s, traced)
        if s.split and s.runnable_ns > s.wait_total_ns / 2:
            finding += (f"; most of its waiting ({fmt_ns(s.runnable_ns)}) is for a CPU after the lock was handed "
                        "over: fewer runnable threads would shorten it more than any change to the lock")
        out.append(Recommendation(
            "lock", printable(s.name), finding, tuple(evidence), command,
            "a change of code or configuration of the program; measure the lock again after it",
            _verify(printable(s.name), "its wait per second should fall"),
            facts=(Fact("contentions", s.contentions), Fact("wait", s.wait_total_ns / secs, "ns/s"),
                   Fact("max wait", s.wait_max_ns, "ns"), Fact("spinning", s.spin_ns / secs, "ns/s"))
            + ((Fact("blocked", s.blocked_ns / secs, "ns/s"), Fact("runnable", s.runnable_ns / secs, "ns/s"))
               if s.split else ()),
            wait_ns_per_s=s.lock_wait_ns * (1 - traced) / secs))
        if len(out) >= th.max_per_rule:
            break
    return out


UPROBE_NOTE_SHARE = 0.1  # of a lock's waiting at uprobe hits: said in its finding


def _at_uprobe(point: str) -> bool:
    return bare(point.split("+")[0]).startswith(UPROBE_HANDLING)


def _traced_share(s) -> float:
    """Of a kernel lock's waiting, the share at contention points in a uprobe hit's handling."""
    total = sum(c.total_ns for c in s.callers)
    return sum(c.total_ns for c in s.callers if _at_uprobe(c.point)) / total if total else 0.0


def _traced_note(s, share: float) -> str:
    """A lock waited for at uprobe hits: find_active_uprobe_rcu() takes the process's mmap_lock whenever its
    lock-free lookup of the probe fails, as a mapping change makes it. Those waits are the tracing's cost, which
    an untraced run does not pay (stress-ng --pthread, whose threads' stacks are mapped and unmapped while its
    lock calls are traced: 80% of its mmap_lock waiting); the program's own waiting is the rest."""
    point = next(c.point for c in s.callers if _at_uprobe(c.point))
    return (f"{share:.0%} of its waiting ({fmt_ns(s.wait_total_ns * share)}) is uprobe hits looking up their probe "
            f"({printable(point)}), the tracing's own cost: stallscope's futex group sets uprobes on the C library's "
            "lock calls, and `record --probes -futex` records without them")


def _file_rwsem_advice(model: Model, s, writers) -> str:
    """fs/locks.c's file_rwsem: every flock(), fcntl() lock and lease call reads it, and its only writer is a
    read of /proc/locks (locks_start), which first waits for an RCU grace period, then for the readers."""
    if s.type.endswith(":W"):
        return ("held for writing by each read of /proc/locks, which waits for an RCU grace period, then for every "
                "file lock call in progress: read /proc/locks less often (lslocks, monitoring agents)")
    names = sorted({printable(model.tasks[t].info.comm) for t in writers if t in model.tasks})
    by = f" (here by {', '.join(names[:3])}{', ...' if len(names) > 3 else ''})" if names else ""
    return ("every flock(), fcntl() lock and lease call takes it for reading, and waits only while a read of "
            f"/proc/locks holds it for writing{by}: read /proc/locks less often (lslocks, monitoring agents), "
            "or not while the file locks are busy")


AIO_WAIT = "Waiting for AIO completions (io_getevents)"  # the cause table's: Linux AIO, in practice O_DIRECT files
_IO_CAUSES = {"Waiting for I/O", "fsync() on a file", "msync() on a file", "Writeback throttling (too many dirty pages)",
              AIO_WAIT}


def _blockers(whole: Whole) -> list:
    """The blockers of the tasks in view, idle causes left out: the ranking a view shows (blockers.rank_live, the full
    ranking without idle causes, made from the sleeping threads' parts grouped where the full one was not made: a
    live window's Fixes view ranked every thread's parts one by one, 50-280 ms an interval of 5,500 threads)."""
    return rank_live(whole.model, whole.scope)


def rule_io(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    secs = model.duration_s or 1.0
    out = []
    for b in _blockers(whole):
        if b.cause not in _IO_CAUSES or b.total_ns / secs < th.io_wait_per_s_ns:
            continue
        names = ", ".join(sorted({printable(model.tasks[t].info.comm) for t in b.tasks if t in model.tasks}))[:80]
        if b.cause == "fsync() on a file":
            advice = ("each fsync waits for the journal commit and the device flush: batch writes between fsyncs, "
                      "use fdatasync where metadata need not be durable, put the journal on a separate device")
        elif b.cause == "msync() on a file":
            advice = ("each msync(MS_SYNC) writes the mapping's dirty pages back and waits for them and the journal "
                      "commit: sync less often (MS_ASYNC starts the write-back without waiting), put the journal on "
                      "a separate device")
        elif b.cause == AIO_WAIT:
            advice = ("the program waits in io_getevents() for the asynchronous I/O it submitted, with nothing else "
                      "to do: the device sets the pace; more requests in flight (a deeper iodepth) help only while "
                      "the device has parallelism to spare (its latency rising with the depth says it has not), "
                      "larger requests cut the cost of each")
        else:
            advice = ("reads or writes wait for the device: larger requests, asynchronous I/O or a dedicated I/O "
                      "thread so the work does not stall, striping over devices if the queue is long")
        out.append(Recommendation(
            "io", names, f"{b.cause}: {fmt_ns(b.total_ns / secs)} per second of blocked time ({names})",
            (f"{b.count} waits, {fmt_ns(b.total_ns)} in {secs:.1f} s, max {fmt_ns(b.max_ns)}, "
             f"{b.share_pct:.0f}% of all blocked time", f"heaviest stack starts at {b.frame}"),
            "iostat -x 1 10  # r_await/w_await per device; record with --probes +io for the device behind the "
            "waits and its time queued against its time at the device (aqu-sz and %util mislead on devices "
            "that serve requests in parallel)",
            "none from measuring; the fixes change how the program does I/O: " + advice,
            _verify(names, "the I/O wait per second should fall"),
            facts=(Fact("wait", b.total_ns / secs, "ns/s"), Fact("waits", b.count), Fact("max wait", b.max_ns, "ns"),
                   Fact("share of the waiting", b.share_pct, "%")), wait_ns_per_s=b.total_ns / secs))
    return out


RCU_WAIT = "Waiting for an RCU grace period"  # the cause table's name, "in {caller}" after it
# a grace period the knob does not shorten: already expedited, a wait for callbacks, or the tasks flavour
_RCU_NOT_EXPEDITABLE = ("synchronize_rcu_expedited", "synchronize_srcu_expedited", "exp_funnel_lock",
                        "synchronize_sched_expedited", "rcu_barrier", "srcu_barrier", "synchronize_rcu_tasks",
                        "rcu_tasks_", "rcu_exp_")


def rule_rcu(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """Tasks that wait for normal RCU grace periods (synchronize_rcu(), synchronize_srcu(), an rcu_sync), a few
    milliseconds each, where /sys/kernel/rcu_expedited would make them expedited ones (stress-ng --membarrier on two
    CPUs: 20 ms a wait on average before, 0.14 ms after)."""
    knobs = (model.meta.machine or {}).get("rcu_knobs")
    if not isinstance(knobs, dict):
        return []
    expedited, normal = (knobs[n].get("value") if isinstance(knobs.get(n), dict) else None
                         for n in ("rcu_expedited", "rcu_normal"))
    if expedited != "0" or normal not in (None, "0"):
        return []  # not known (an older recording), already expedited, or rcu_normal forbids it
    secs = model.duration_s or 1.0
    waits = []
    for b in _blockers(whole):
        if not b.cause.startswith(RCU_WAIT):
            continue
        frames = [bare(f.symbol) for f in b.stack.frames] if b.stack is not None else []
        if any(n.startswith(_RCU_NOT_EXPEDITABLE) for n in frames):
            continue
        waits.append(b)
    total = sum(b.total_ns for b in waits)
    if not waits or total / secs < th.rcu_wait_per_s_ns:
        return []
    names = ", ".join(sorted({printable(model.tasks[t].info.comm) for b in waits for t in b.tasks
                              if t in model.tasks}))[:80]
    callers = ", ".join(b.cause[len(RCU_WAIT):].removeprefix(" in ") or "?" for b in waits[:3])
    p99 = max(b.p99_ns for b in waits)
    return [Recommendation(
        "rcu", "system", f"tasks wait {fmt_ns(total / secs)} per second for normal RCU grace periods ({names}; in "
        f"{callers}): each synchronize_rcu() waits a few milliseconds, and this kernel does not expedite them",
        tuple(f"{b.cause}: {b.count} waits, {fmt_ns(b.total_ns)} in {secs:.1f} s, p99 {fmt_ns(b.p99_ns)}, "
              f"{b.share_pct:.0f}% of all waiting" for b in waits[:3]) + ("/sys/kernel/rcu_expedited = 0",),
        write_command(1, SCHED_KNOB_PATHS["rcu_expedited"]),
        "an expedited grace period interrupts every CPU not idle with an IPI: real-time and latency-sensitive tasks "
        "and large machines pay for each one, so a machine that must not be disturbed should keep it off; better, "
        "where the code is yours, the callers can free with call_rcu() or kfree_rcu() instead of waiting, or batch "
        "their updates",
        _verify("the waiting tasks", "the RCU waits' median should fall tenfold or more, from milliseconds to a "
                "fraction of one (a loaded machine's expedited grace periods still take milliseconds now and then)"),
        RECOMMENDED, True, {"type": "write", "knob": "rcu_expedited", "path": SCHED_KNOB_PATHS["rcu_expedited"],
                            "value": "1"},
        facts=(Fact("wait", total / secs, "ns/s"), Fact("waits", sum(b.count for b in waits)),
               Fact("p99 wait", p99, "ns")), wait_ns_per_s=total / secs)]


def rule_sched_knob(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """Only knobs this kernel has, only with evidence: today, migration cost against system-wide ping-pong."""
    knobs = (model.meta.machine or {}).get("sched_knobs", {})
    secs = model.duration_s or 1.0
    total_migrations = sum(map(sum, model.matrix))
    rate = total_migrations / secs
    name = next((n for n in ("migration_cost_ns", "sched_migration_cost_ns") if n in knobs), None)
    if name is None or rate < th.migrations_per_s * max(model.meta.cpus, 1) * 10:
        return []
    value = knobs[name].get("value") if isinstance(knobs[name], dict) else None
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return []  # a value no kernel shows: a damaged or edited recording
    current, path = int(value), SCHED_KNOB_PATHS[name]
    stable = "a sysctl" if path.startswith("/proc/sys/") else ("debugfs: not a stable interface, it may change or "
                                                               "vanish in a later kernel")
    return [Recommendation(
        "sched_knob", "system", f"{rate:.0f} migrations per second across the machine: tasks are moved while "
        "their caches are still warm", (f"{total_migrations} migrations in {secs:.1f} s", f"{path} = {current}"),
        write_command(current * 2, path),
        f"fewer moves can leave a CPU idle while another has a queue; {stable}; the effect is workload-specific "
        "and small in published sweeps (defaults were often best), so keep it only if the diff shows a gain",
        _verify("the machine", "migrations per second should fall and run-queue wait must not rise"),
        RECOMMENDED, True, {"type": "write", "knob": name, "path": path, "value": str(current * 2)})]


V1_CPU_ROOTS = ("/sys/fs/cgroup/cpu/", "/sys/fs/cgroup/cpu,cpuacct/")  # cgroup v1's cpu hierarchy


def rule_quota(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """A cgroup held back by its CFS bandwidth limit (cgroup v2's cpu.max, v1's cpu.cfs_quota_us): its tasks
    are runnable and wait for a CPU, counted as run-queue wait like a want of CPUs, while CPUs may sit idle.
    From cpu.stat's throttling in the window, read at each interval's end with the limit (or over the recording,
    read at its start and end, in one made before: signals.window_cpu_side)."""
    side, secs = window_cpu_side(model)
    busy = window_busy_pct(model)[0]
    avg_busy = sum(busy.values()) / len(busy) if busy else None
    waited = sum(t.runq_wait_ns for t in model.tasks.values())
    out = []
    for t in quota_throttled(side, secs, th.quota_throttled_share, th.quota_min_throttles):
        cg, n, ns = t["cgroup"], t["nr_throttled"], t["throttled_ns"]
        quota, period = t.get("quota_us"), t.get("period_us")
        known = quota_limit(t) is not None
        evidence = [f"{printable(cg)}: throttled in {n:,} periods, its run queues {fmt_ns(ns)} in all in {secs:.1f} s "
                    "(cpu.stat, summed over CPUs)"]
        if known:
            evidence.append(f"its limit: {quota:,} us of CPU every {period:,} us ({quota / period:.2f} CPU)")
        if avg_busy is not None:
            evidence.append(f"the CPUs were {avg_busy:.0f}% busy on average meanwhile")
        evidence.append(f"every task waited {fmt_ns(waited)} for a CPU in all (a throttled task waits as for a busy CPU)")
        v1 = cg.startswith(V1_CPU_ROOTS)
        if known:
            command = (write_command(2 * quota, f"{cg}/cpu.cfs_quota_us") if v1
                       else write_command(f"{2 * quota} {period}", f"{cg}/cpu.max"))
        else:
            command = ""
        idle = f", with the CPUs {100 - avg_busy:.0f}% idle" if avg_busy is not None and avg_busy < 90 else ""
        out.append(Recommendation(
            "quota", printable(cg), f"cgroup {printable(cg)} is held back by its CPU quota"
            + (f" ({quota / period:.2f} CPU)" if known else "") + f": throttled in {n:,} periods, {fmt_ns(ns)} of its "
            f"run queues' time in {secs:.1f} s{idle}; its tasks' wait for a CPU is the quota's, not busy CPUs'",
            tuple(evidence), command,
            "the group may then take CPU from others, and the limit may be deliberate (a container's, a service's "
            "CPUQuota=): raise it as far as the group's work needs, or give it a larger share "
            f"({'cpu.shares' if v1 else 'cpu.weight'}) instead",
            _verify(printable(cg), "nr_throttled in its cpu.stat should stop rising, and its tasks' run-queue wait "
                                   "should fall"),
            RECOMMENDED, False, facts=(Fact("throttled periods", n), Fact("throttled", ns / secs, "ns/s"))
            + ((Fact("quota", quota / period, "CPU"),) if known else ()), wait_ns_per_s=ns / secs))
        if len(out) >= th.max_per_rule:
            break
    return out


def rule_slub(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """slub_min_objects after the 2008 hackbench study (best at 2 x CPUs), only with slab evidence, and
    never at or below what the kernel already uses: since then the default scales with the CPUs,
    4 * (fls(nr_cpus) + 1), already above 2 x CPUs below 16 CPUs. And, at run time, a hot cache's
    cpu_partial (more partial slabs kept per CPU, fewer trips to the node's list_lock)."""
    slab = model.meta.options.get("slab") or {}
    boot = slab.get("boot")
    if not boot:
        return []
    secs = model.duration_s or 1.0
    slow_pct = category_share(model, "slab_slow_path")[1] if probe_ran(model) else 0.0
    hot = []
    for r in slab_rows(model):
        if r.method != METHOD_ESTIMATE or not r.switch_allocs:
            continue
        pct = 100.0 * r.slab_switches / r.switch_allocs
        rate = (r.kmallocs + r.cache_allocs) / secs
        lock_rate = r.lock_wait_ns / secs
        if rate >= th.slab_allocs_per_s and pct >= th.slab_switch_pct and (
                lock_rate >= th.slab_lock_wait_per_s_ns or slow_pct >= th.slab_slow_path_pct):
            hot.append((r, pct, rate, lock_rate))
    if not hot:
        return []
    cpus = int(boot.get("present_cpus") or model.meta.cpus or 1)
    effective = int(boot["min_objects"])
    proposed = 2 * cpus
    evidence = tuple(f"{r.cache}{' (also ' + ', '.join(r.aliases) + ')' if r.aliases else ''}: {rate:,.0f} allocations/s, "
                     f"CPU-slab switches {pct:.1f}% of them (an estimate), {r.objs_per_slab} objects per order-{r.order} "
                     f"slab, list_lock waits {fmt_ns(lock_rate)}/s" for r, pct, rate, lock_rate in hot[:3])
    evidence += (f"on-CPU samples in SLUB's slow path: {slow_pct:.1f}%",) if probe_ran(model) else ()
    evidence += (f"effective slub_min_objects {effective} "
                 f"({'given at boot' if boot.get('cmdline', {}).get('slub_min_objects') else f'the default 4 * (fls({cpus}) + 1)'}), "
                 f"slub_max_order {boot.get('max_order')}",)
    out = []
    if proposed > effective:
        r = hot[0][0]
        size = (r.object_size or 0) or (r.bytes_alloc // max(r.kmallocs + r.cache_allocs, 1))
        need = max(0, (max(size, 1) * proposed - 1).bit_length() - 12)  # order of a slab holding `proposed` objects
        max_order = max(int(boot.get("max_order", 3)), need)
        params = f"slub_min_objects={proposed}" + (f" slub_max_order={max_order}" if max_order > int(boot.get("max_order", 3)) else "")
        out.append(Recommendation(
            "slub", "boot", f"SLUB's slow path is busy on {', '.join(h[0].cache for h in hot[:3])}: larger slabs "
            f"({proposed} objects, 2 x {cpus} CPUs) keep each CPU on its slab longer", evidence,
            f"add `{params}` to the kernel command line (Debian: GRUB_CMDLINE_LINUX in /etc/default/grub, "
            "then update-grub) and reboot",
            "every cache gets larger slabs: more memory held in partial slabs (per CPU and node), and "
            "higher-order page allocations that can fail under fragmentation (SLUB then falls back to s->min); "
            "the 2008 study saw a 10x gain on hackbench, larger values gave no more",
            _verify("the hot caches", "after the reboot, record the workload with --probes +slab: CPU-slab switches, "
                    "list_lock waits and the slow-path share should fall"),
            # the list_lock waits it relieves; none measured where the slow path's CPU time alone made it fire
            wait_ns_per_s=sum(lock_rate for _r, _p, _a, lock_rate in hot) or None))
    for r, pct, rate, lock_rate in hot:
        cpu_partial = (r.config or {}).get("cpu_partial")
        if type(cpu_partial) is not int or cpu_partial <= 0 or r.sheaf_capacity or lock_rate < th.slab_lock_wait_per_s_ns:
            continue
        if not is_cache_name(r.cache):
            continue  # no cache directory can have this name: a damaged or edited recording
        names = (r.cache,) + tuple(a for a in r.aliases if not a.startswith(":"))
        path = f"{SLAB_ROOT}/{r.cache}/cpu_partial"
        merged = (f"the cache is merged: the write changes one cache that also serves {', '.join(names[1:])}; "
                  if len(names) > 1 else "")
        out.append(Recommendation(
            "slub", r.cache, f"{r.cache}'s node list_lock is waited on {fmt_ns(lock_rate)}/s: let each CPU keep more "
            "partial slabs", evidence[:1] + (f"{path} = {cpu_partial}",),
            write_command(cpu_partial * 2, path),
            merged + "more free objects stay on each CPU's partial list (memory); kernels 7.0+ replaced per-CPU "
            "partial slabs with sheaves, where this file reads 0",
            _verify(r.cache, "its list_lock waits per second should fall"),
            RECOMMENDED, True, {"type": "write", "cache": r.cache, "attribute": "cpu_partial", "path": path,
                                "value": str(cpu_partial * 2), "affects": list(names)}, wait_ns_per_s=lock_rate))
    return out


def rule_io_devices(model: Model, th: Thresholds, whole: Whole) -> list[Recommendation]:
    """The io group's rules (analyzer/io_advice.py): request sizes, the queue, synchronous I/O, the journal,
    writeback throttling."""
    return io_recommendations(model, whole=whole)


RULES = (rule_pin, rule_priority, rule_cpu_bound, rule_slub, rule_lock, rule_io, rule_rcu, rule_sched_knob,
         rule_io_devices, rule_quota, rule_affinity)


class Whole(NamedTuple):
    """The model a recommendation is asked of and the tasks in view: a rule that reads a view the export
    and the screens read too (the lock rows, the ranked blockers) reads it here, computed once per model,
    rather than again on the model restricted to the tasks (the same rows: a task's waits are its own)."""

    model: Model
    scope: set | None


def recommend(model: Model, th: Thresholds | None = None, tasks: set | None = None) -> list[Recommendation]:
    """Every rule's findings for `tasks` (None: every task), the ones to apply first, then the ones that
    cannot help here. stallscope itself is never advised on (analyzer/scope.py)."""
    th = th or Thresholds()
    scope = in_scope(model, tasks)
    whole = Whole(model, scope)
    if scope is not None:
        model = restrict(model, scope)
    out = [r for rule in RULES for r in rule(model, th, whole)]
    if any(r.kind == "priority" and r.status == RECOMMENDED for r in out):
        # a latency thread behind the hogs does not wait as they do: its priority is a fix of its own
        out = [replace(r, finding=r.finding + "; a thread that wakes often and runs briefly behind them is another "
                       "matter: see the priority fixes") if r.kind == "cpu" else r for r in out]
    return sorted(out, key=rank_key)


def rank_key(r: Recommendation) -> tuple:
    """The fixes to apply first, each list by the waiting it is aimed at (the most first); those whose gain is
    not a measured wait after them, in the rules' order (KINDS). `recommend` and `apply N` number them so."""
    return (r.status != RECOMMENDED, r.wait_ns_per_s is None, -(r.wait_ns_per_s or 0.0), KINDS.index(r.kind))


def _kernel_version(release: str) -> tuple[int, int]:
    try:
        major, minor = release.split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except ValueError:
        return (0, 0)
