"""On-CPU samples as a profiler shows them: functions by self and inclusive
samples, threads by sampled on-CPU time, and the shares spent in SLUB's slow
path and spinning on locks. Pure functions over the model.

A sample's stack is its user frames (outermost first) under its kernel frames;
its *self* function is the innermost frame of the two: the kernel's when the
sample interrupted kernel code, else the user leaf. Sampled time is each
sample's period summed (cpu-clock periods are nanoseconds), so a lower
`--sample-hz` gives the same times with less precision.
"""

from __future__ import annotations

from dataclasses import dataclass

from stallscope.analyzer.model import Model, OncpuSamples
from stallscope.analyzer.sample import TaskId
from stallscope.analyzer.sample import Frame

STACK_USER_MODE = 4  # bpf/oncpu.h: the sample interrupted user mode

# Frames of the sampling itself. The kernel stack is walked from the interrupted registers, so
# none should appear; should another kernel's walk start in the overflow path, it is not the workload.
_TRACING = ("bpf_prog_", "bpf_overflow_handler", "bpf_get_stack", "__bpf_get_stack", "bpf_trace_run",
            "__perf_event_overflow", "perf_event_overflow", "perf_swevent_hrtimer", "perf_callchain",
            "get_perf_callchain")

# Categories by the functions in which a sample counts for them. Names are matched without the
# compiler's suffixes (`.isra.0`, `.part.0`, `.cold`).
CATEGORIES: dict[str, frozenset[str]] = {
    # SLUB's slow paths (mm/slub.c): refilling the CPU slab or sheaf, partial lists, new slabs,
    # freeing to a slab that is not the CPU's
    "slab_slow_path": frozenset({
        "___slab_alloc", "__slab_alloc", "__slab_alloc_node", "__slab_free", "get_partial_node", "get_partial",
        "get_any_partial", "get_freelist", "add_partial", "remove_partial", "allocate_slab", "new_slab",
        "alloc_slab_page", "shuffle_freelist", "setup_object", "deactivate_slab", "defer_deactivate_slab",
        "put_cpu_partial", "__put_partials", "put_partials", "put_partials_cpu", "unfreeze_partials",
        "__unfreeze_partials", "discard_slab", "free_slab", "__free_slab", "rcu_free_slab", "free_to_partial_list",
        "flush_slab", "flush_cpu_slab", "__pcs_replace_empty_main", "__pcs_replace_full_main", "refill_sheaf",
        "alloc_full_sheaf", "alloc_empty_sheaf", "barn_get_empty_sheaf", "barn_put_empty_sheaf",
        "barn_put_full_sheaf", "barn_replace_empty_sheaf", "barn_replace_full_sheaf", "__sheaf_flush_main_batch",
        "sheaf_flush_unused", "__kmem_cache_alloc_bulk", "__kmem_cache_free_bulk",
    }),
    # spinning for a lock: the spin lock slow paths and their entry points, a mutex's or rwsem's
    # optimistic spin on its owner
    "lock_spin": frozenset({
        "queued_spin_lock_slowpath", "native_queued_spin_lock_slowpath", "__pv_queued_spin_lock_slowpath",
        "pv_queued_spin_lock_slowpath", "resilient_queued_spin_lock_slowpath", "queued_read_lock_slowpath",
        "queued_write_lock_slowpath", "do_raw_spin_lock", "osq_lock", "mutex_spin_on_owner", "rwsem_spin_on_owner",
        "rwsem_optimistic_spin", "raw_spin_rq_lock_nested", "_raw_spin_rq_lock", "pv_wait", "kvm_wait",
        "_raw_spin_lock", "_raw_spin_lock_irq", "_raw_spin_lock_irqsave", "_raw_spin_lock_bh",
        "_raw_spin_lock_nested", "_raw_spin_lock_irqsave_nested", "_raw_read_lock", "_raw_read_lock_irq",
        "_raw_read_lock_irqsave", "_raw_read_lock_bh", "_raw_write_lock", "_raw_write_lock_irq",
        "_raw_write_lock_irqsave", "_raw_write_lock_bh", "_raw_write_lock_nested",
    }),
}


def base_name(symbol: str) -> str:
    """`get_partial_node.cold` -> `get_partial_node`: the compiler's clones are the function."""
    return symbol.split(".", 1)[0]


def function_name(frame: Frame) -> str:
    """A function as a profile names it: its symbol, or where the address lies when unnamed."""
    if frame.symbol:
        return base_name(frame.symbol)
    text = frame.text
    return text.split("+", 1)[0] + "]" if text.startswith("[") and "+" in text else text


def kernel_frames(s: OncpuSamples) -> tuple[Frame, ...]:
    """Kernel frames innermost first, the sampling's own frames dropped."""
    return _kernel_frames(s.kstack)


def _kernel_frames(kstack) -> tuple[Frame, ...]:
    if kstack is None:
        return ()
    frames = kstack.frames
    i = 0
    while i < len(frames) and (frames[i].symbol or "").startswith(_TRACING):
        i += 1
    return frames[i:]


def _stack_functions(stack, kind: str) -> tuple[tuple[str, str], ...]:
    """(function, kind) of a stack's frames, innermost first: a kernel stack's without the sampling's own."""
    frames = _kernel_frames(stack) if kind == "kernel" else stack.frames if stack is not None else ()
    return tuple([(function_name(f), kind) for f in frames])


def sample_functions(s: OncpuSamples) -> list[tuple[str, str]]:
    """(function, "kernel"|"user") innermost first: the kernel frames, then the user frames."""
    return list(_stack_functions(s.kstack, "kernel") + _stack_functions(s.ustack, "user"))


def self_function(s: OncpuSamples) -> tuple[str, str]:
    """Where the sample landed; a label in parentheses when no frame says it."""
    funcs = sample_functions(s)
    return funcs[0] if funcs else _no_leaf(s)


def _no_leaf(s: OncpuSamples) -> tuple[str, str]:
    """self_function of a sample no frame names."""
    if s.kstack_id == STACK_USER_MODE:
        return ("(user stack not collected)", "user")
    return ("(stack not collected)", "kernel")


def sample_categories(s: OncpuSamples) -> set[str]:
    """The categories of the innermost kernel frames: every category one of the frames belongs
    to, walking outward from the innermost frame while the frames are in some category. So
    `native_queued_spin_lock_slowpath <- _raw_spin_lock_irqsave <- get_partial_node <- ___slab_alloc`
    is both lock_spin and slab_slow_path; `memset <- allocate_slab` is neither (memset is where the
    time went)."""
    found: set[str] = set()
    for f in kernel_frames(s):
        name = base_name(f.symbol or "")
        cats = {c for c, names in CATEGORIES.items() if name in names}
        if not cats:
            break
        found |= cats
    return found


class FunctionsOf:
    """Each sample's functions, (where it landed: self_function, every function on its stacks and that one), as
    sample_functions names them, each stack's frames named once: samples share their stacks' objects (10 minutes
    of hackbench: 29,248 sampled keys, 15,000 pairs of stacks, 3,098 stacks), and naming frames was most of a
    profile's time. The stacks are kept with what was made of them, so that the ids they are found by stay theirs."""

    def __init__(self) -> None:
        self._by_pair: dict[tuple, tuple] = {}
        self._by_stack: dict[tuple, tuple] = {}

    def _named(self, stack, kind: str) -> tuple[tuple[str, str], ...]:
        got = self._by_stack.get((id(stack), kind))
        if got is None:
            got = self._by_stack[(id(stack), kind)] = (_stack_functions(stack, kind), stack)
        return got[0]

    def __call__(self, s: OncpuSamples) -> tuple[tuple[str, str], frozenset[tuple[str, str]]]:
        pair = (id(s.kstack), id(s.ustack), s.kstack_id)
        got = self._by_pair.get(pair)
        if got is None:
            funcs = self._named(s.kstack, "kernel") + self._named(s.ustack, "user")
            leaf = funcs[0] if funcs else _no_leaf(s)
            got = self._by_pair[pair] = (leaf, frozenset(funcs) | {leaf})
        return got


def _selected(model: Model, scope: set[TaskId] | None = None, pid: int | None = None) -> list[OncpuSamples]:
    """Samples of the tasks in `scope`, of process or thread `pid`; without either, stallscope's own
    process (meta.options.stallscope_pid) is left out: the recorder is not the workload."""
    own = model.meta.options.get("stallscope_pid") if scope is None and pid is None else None
    out = []
    for s in model.oncpu:
        if own and s.tgid == own:
            continue
        if scope is not None and s.task not in scope:
            continue
        if pid is not None and pid not in (s.tgid, s.task.pid):
            continue
        out.append(s)
    return out


def selected_samples(model: Model, scope: set[TaskId] | None = None, pid: int | None = None) -> list[OncpuSamples]:
    """The samples the profile is made of (see `_selected`)."""
    return _selected(model, scope, pid)


@dataclass(frozen=True)
class FunctionSamples:
    function: str
    kind: str  # "kernel" | "user"
    self_samples: int
    inclusive_samples: int
    self_pct: float  # of the selected samples
    inclusive_pct: float


def top_functions(model: Model, by: str = "self", scope: set[TaskId] | None = None, pid: int | None = None,
                  limit: int | None = None) -> list[FunctionSamples]:
    """Functions by the samples that landed in them (self) or had them on the stack (inclusive),
    as `perf report --no-children` / `--children`; a recursive function counts once per sample."""
    if by not in ("self", "inclusive"):
        raise ValueError(f"by must be self or inclusive, not {by!r}")
    self_n: dict[tuple[str, str], int] = {}
    incl_n: dict[tuple[str, str], int] = {}
    total = 0
    functions_of = FunctionsOf()
    for s in _selected(model, scope, pid):
        total += s.samples
        leaf, inclusive = functions_of(s)
        self_n[leaf] = self_n.get(leaf, 0) + s.samples
        for key in inclusive:
            incl_n[key] = incl_n.get(key, 0) + s.samples
    rows = [FunctionSamples(fn, kind, self_n.get((fn, kind), 0), n, 100 * self_n.get((fn, kind), 0) / total,
                            100 * n / total) for (fn, kind), n in incl_n.items()]
    key = (lambda r: (-r.self_samples, -r.inclusive_samples, r.function)) if by == "self" else \
        (lambda r: (-r.inclusive_samples, -r.self_samples, r.function))
    rows.sort(key=key)
    return rows[:limit] if limit is not None else rows


@dataclass(frozen=True)
class TaskOncpu:
    task: TaskId
    tgid: int
    comm: str
    samples: int
    oncpu_ns: int  # the samples' periods summed


def task_oncpu(model: Model, scope: set[TaskId] | None = None, pid: int | None = None) -> list[TaskOncpu]:
    """Threads by sampled on-CPU time, most first."""
    acc: dict[TaskId, list] = {}
    for s in _selected(model, scope, pid):
        t = model.tasks.get(s.task)
        e = acc.setdefault(s.task, [s.tgid, t.info.comm if t and t.info.comm != "?" else s.comm, 0, 0])
        e[2] += s.samples
        e[3] += s.period_ns
    rows = [TaskOncpu(tid, *e) for tid, e in acc.items()]
    rows.sort(key=lambda r: (-r.oncpu_ns, r.task))
    return rows


def category_share(model: Model, category: str, scope: set[TaskId] | None = None,
                   pid: int | None = None) -> tuple[int, float]:
    """(samples, percent of the selected non-idle samples) whose innermost kernel frames are in
    `category` (see sample_categories); (0, 0.0) without samples."""
    if category not in CATEGORIES:
        raise ValueError(f"no category {category!r} (categories: {', '.join(CATEGORIES)})")
    total = hits = 0
    for s in _selected(model, scope, pid):
        total += s.samples
        if category in sample_categories(s):
            hits += s.samples
    return hits, (100 * hits / total if total else 0.0)


@dataclass(frozen=True)
class SamplingSummary:
    sample_hz: int
    samples: int  # all samples, idle included
    idle_samples: int
    period_ns: int  # one sample's period (the average over the CPUs' samples)
    missed_samples: int  # what the events counted beyond the samples taken, in periods

    @property
    def effective_hz(self) -> int:
        """The rate the samples were taken at, per CPU, from their periods: below `sample_hz` where the overhead
        budget lowered it for some or all of the window (its level's sample_hz)."""
        return round(1e9 / self.period_ns) if self.period_ns else self.sample_hz

    def rate_text(self) -> str:
        """"N Hz per CPU", and the rate asked for where the budget lowered it."""
        hz = self.effective_hz
        if self.sample_hz and hz < 0.95 * self.sample_hz:
            return f"{hz} Hz per CPU on average ({self.sample_hz} Hz asked for, lowered by the overhead budget)"
        return f"{self.sample_hz or hz} Hz per CPU"


def sampling_summary(model: Model) -> SamplingSummary:
    """Totals over all CPUs. `missed_samples` compares each CPU's event time with the periods its
    samples add up to: a sample the program did not see (the kernel skips BPF perf_event programs
    while another BPF program or a BPF map syscall runs on that CPU, `bpf_prog_active`), or timer
    expiries skipped because the CPU took the interrupt late (hrtimer_forward() drops overruns). Each CPU may be one period short at the end of a
    recording: a difference under one period is not a miss."""
    samples = idle = period_sum = missed = 0
    for c in model.oncpu_cpus.values():
        samples += c.samples
        idle += c.idle_samples
        period_sum += c.period_ns
    period = period_sum // samples if samples else 0
    if period:
        for c in model.oncpu_cpus.values():
            missed += max(0, (c.event_ns - c.period_ns) // period)
    return SamplingSummary(int(model.meta.options.get("sample_hz") or 0), samples, idle, period, missed)


def probe_ran(model: Model) -> bool:
    p = model.meta.probes.get("oncpu")
    return bool(p and p.enabled)


def share_line(model: Model, category: str, label: str, scope: set[TaskId] | None = None) -> str:
    """`on-CPU in LABEL: X% of samples (N samples)`; empty when the oncpu group did not run."""
    if not probe_ran(model):
        return ""
    n, pct = category_share(model, category, scope)
    return f"on-CPU in {label}: {pct:.1f}% of samples ({n} samples)"


def lock_share_line(model: Model, scope: set[TaskId] | None = None) -> str:
    """The line the locks view prints under its table."""
    return share_line(model, "lock_spin", "lock functions", scope)


def slab_share_line(model: Model, scope: set[TaskId] | None = None) -> str:
    """The line for a slab view: samples in SLUB's slow path."""
    return share_line(model, "slab_slow_path", "the SLUB slow path", scope)
