"""What a recording must hold to be read. A recording is a file anyone can hand over or edit: every cell
is checked on read against what `RecordingWriter` writes, before anything is computed from it.

Two outcomes, by what the damage touches:

* The metadata (format version, the `meta` document: CPUs, probes, options, the machine): nothing can
  be read without it, so a damaged field is an error naming the field (`check_meta`).
* A row of a table (a cell of the wrong type, JSON that does not parse or has the wrong shape, a CPU
  beyond the machine, a histogram slot out of range, NULL where a value is written): the row is skipped
  and counted, and the rest of the recording is read (`row_ok_sql` for the types, checked by SQLite as
  the rows stream; the `*_cell` parsers for the JSON, raising `DamagedRow`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Callable

from stallscope.analyzer.sample import Frame

MAX_CPUS = 8192  # the kernel's NR_CPUS limit (CONFIG_MAXSMP): the migration matrix is CPUs x CPUs
HIST_SLOTS = 64  # log2 ns slots: a u64 has 64
_S64 = (-(1 << 63), (1 << 63) - 1)
_FINITE = 1e300


class DamagedRow(Exception):
    """A cell that is not what the writer writes: the row is skipped."""


# ---- tables ------------------------------------------------------------------------------------

INT, INT_OR_NULL, NUM, TEXT, TEXT_OR_NULL = "int", "int?", "num", "text", "text?"
_KIND_SQL = {
    INT: "typeof({c}) = 'integer'",
    INT_OR_NULL: "typeof({c}) IN ('integer', 'null')",
    NUM: "(typeof({c}) IN ('integer', 'real') AND {c} BETWEEN -1e300 AND 1e300)",
    TEXT: "typeof({c}) = 'text'",
    TEXT_OR_NULL: "typeof({c}) IN ('text', 'null')",
}

# Each table's columns as RecordingWriter writes them: NULL only where it writes None.
COLUMNS: dict[str, dict[str, str]] = {
    "intervals": {"idx": INT, "start_ns": INT, "end_ns": INT, "wall_start": NUM, "switches": INT,
                  "collector_cpu_ns": INT, "health": TEXT_OR_NULL, "kernel_switches": INT_OR_NULL,
                  "ongoing_ns": INT_OR_NULL},
    "ongoing": {"idx": INT, "pid": INT, "start_ns": INT, "tgid": INT, "state": INT, "kstack": INT, "ustack": INT,
                "why": INT, "func": INT, "since_ns": INT_OR_NULL},
    "opened": {"idx": INT, "pid": INT, "start_ns": INT, "tgid": INT, "state": INT, "kstack": INT, "ustack": INT,
               "why": INT, "func": INT, "since_ns": INT},
    "tasks": {"pid": INT, "start_ns": INT, "tgid": INT, "ptgid": INT, "comm": TEXT, "flags": INT,
              "first_idx": INT_OR_NULL, "policy": INT_OR_NULL, "nice": INT_OR_NULL, "rt_priority": INT_OR_NULL},
    "task_deltas": {"idx": INT, "pid": INT, "start_ns": INT, "offcpu_ns": INT, "offcpu_count": INT,
                    "offcpu_max_ns": INT, "runq_wait_ns": INT, "runq_count": INT, "runq_max_ns": INT,
                    "voluntary_switches": INT, "involuntary_switches": INT, "migrations": INT,
                    "runq_hist": TEXT_OR_NULL, "runq_latency_ns": INT_OR_NULL, "run_ns": INT_OR_NULL},
    "offcpu": {"idx": INT, "pid": INT, "start_ns": INT, "tgid": INT, "state": INT, "kstack": INT, "ustack": INT,
               "count": INT, "total_ns": INT, "max_ns": INT, "hist": TEXT_OR_NULL, "why": INT_OR_NULL,
               "func": INT_OR_NULL, "charged_ns": INT_OR_NULL, "weighted_ns": INT_OR_NULL, "var_us2": INT_OR_NULL,
               "woken": TEXT_OR_NULL},
    "wakers": {"idx": INT, "pid": INT, "start_ns": INT, "waker_pid": INT, "waker_start_ns": INT, "waker_tgid": INT,
               "waker_comm": TEXT, "waker_kstack": INT, "count": INT, "total_ns": INT, "in_interrupt": INT,
               "exiting": INT_OR_NULL, "link_func": INT_OR_NULL, "link_state": INT_OR_NULL, "link_why": INT_OR_NULL,
               "weighted_ns": INT_OR_NULL, "link_blocked_ns": INT_OR_NULL, "link_runq_ns": INT_OR_NULL,
               "wakee_func": INT_OR_NULL, "wakee_state": INT_OR_NULL, "wakee_why": INT_OR_NULL},
    "functions": {"addr": INT, "name": TEXT},
    "migrations": {"idx": INT, "src": INT, "dst": INT, "count": INT},
    "stacks": {"id": INT, "kind": TEXT, "truncated": INT, "frames": TEXT},
    "locks": {"idx": INT, "pid": INT, "start_ns": INT, "tgid": INT, "addr": INT, "kstack": INT, "flags": INT,
              "kind": INT, "count": INT, "total_ns": INT, "max_ns": INT, "min_ns": INT, "spin_ns": INT,
              "sleep_ns": INT, "owner_pid": INT, "owner_comm": TEXT, "cache": TEXT, "symbol": TEXT,
              "blocked_ns": INT_OR_NULL, "runnable_ns": INT_OR_NULL, "weighted_ns": INT_OR_NULL,
              "var_us2": INT_OR_NULL, "field": TEXT_OR_NULL, "object": TEXT_OR_NULL},
    "slab": {"idx": INT, "cache": INT, "tgid": INT, "exiting": INT, "kmallocs": INT, "cache_allocs": INT,
             "kfrees": INT, "cache_frees": INT, "bytes_req": INT, "bytes_alloc": INT, "failed": INT,
             "slab_switches": INT, "switch_allocs": INT},
    "slab_caches": {"idx": INT, "addr": INT, "name": TEXT, "object_size": INT, "size": INT, "slab_order": INT,
                    "objs_per_slab": INT, "min_order": INT, "sheaf_capacity": INT, "cpu_partial": INT,
                    "nodes": TEXT, "aliases": TEXT, "sysfs": TEXT},
    "oncpu": {"idx": INT, "pid": INT, "start_ns": INT, "tgid": INT, "comm": TEXT, "kstack": INT, "ustack": INT,
              "samples": INT, "period_ns": INT},
    "oncpu_cpus": {"idx": INT, "cpu": INT, "samples": INT, "period_ns": INT, "idle_samples": INT, "idle_ns": INT,
                   "event_ns": INT},
    "cgroups": {"idx": INT, "tgid": INT, "start_ns": INT, "path": TEXT},
    "throttled": {"idx": INT, "cgroup": TEXT, "periods": INT, "throttled_ns": INT, "quota_us": INT, "period_us": INT},
    "cpu_time": {"idx": INT, "cpu": INT, "busy_ns": INT, "total_ns": INT},
    "cpu_runq": {"idx": INT, "cpu": INT, "runq_ns": INT, "runq_count": INT},
    "futex": {"idx": INT, "pid": INT, "start_ns": INT, "tgid": INT, "uaddr": INT, "op": INT, "ustack": INT,
              "caller_addr": INT, "caller": TEXT, "lock_name": TEXT, "count": INT, "total_ns": INT, "max_ns": INT,
              "min_ns": INT, "flags": INT_OR_NULL, "blocked_ns": INT_OR_NULL, "runnable_ns": INT_OR_NULL,
              "woken_irq": INT_OR_NULL},
    "tuning": {"idx": INT, "level": INT, "walks_per_s": INT, "min_stack_ns": INT, "sample_hz": INT, "reason": TEXT,
               "sample_ns": INT_OR_NULL, "user_walks_per_s": INT_OR_NULL, "lock_calls": INT_OR_NULL},
    "programs": {"idx": INT, "name": TEXT, "run_cnt": INT, "run_time_ns": INT, "recursion_misses": INT},
    "io": {"idx": INT, "dev": INT, "op": INT, "requests": INT, "sectors": INT, "total_ns": INT, "timed": INT,
           "queued_ns": INT, "device_ns": INT, "bytes": INT, "unaccounted": INT, "size_hist": TEXT_OR_NULL,
           "total_hist": TEXT_OR_NULL, "queued_hist": TEXT_OR_NULL, "device_hist": TEXT_OR_NULL},
    "io_queue": {"idx": INT, "dev": INT, "name": TEXT, "issued": INT, "busy_ns": INT, "depth_sum": INT,
                 "depth_hist": TEXT_OR_NULL, "inflight": INT},
    "io_submitters": {"idx": INT, "dev": INT, "op": INT, "tgid": INT, "comm": TEXT, "requests": INT, "sectors": INT},
    "io_wakes": {"idx": INT, "pid": INT, "start_ns": INT, "tgid": INT, "dev": INT, "op": INT, "submit_tgid": INT,
                 "submit_comm": TEXT, "wakee_func": INT, "wakee_state": INT, "wakee_why": INT, "count": INT,
                 "wait_ns": INT, "req_ns": INT, "timed": INT, "queued_ns": INT, "device_ns": INT},
}

# Values that index something: out of range, the row is damaged (a CPU beyond the machine's, a negative count
# of CPUs' rows). `{cpus}` is the recording's CPU count.
RANGES: dict[str, dict[str, str]] = {
    "migrations": {"src": "BETWEEN 0 AND {cpus} - 1", "dst": "BETWEEN 0 AND {cpus} - 1"},
    "oncpu_cpus": {"cpu": "BETWEEN 0 AND {cpus} - 1"},
    "cpu_time": {"cpu": "BETWEEN 0 AND {cpus} - 1", "total_ns": "> 0", "busy_ns": "BETWEEN 0 AND total_ns"},
    "cpu_runq": {"cpu": "BETWEEN 0 AND {cpus} - 1", "runq_ns": ">= 0", "runq_count": "> 0"},
    "throttled": {"periods": "> 0", "throttled_ns": ">= 0", "quota_us": ">= 0", "period_us": ">= 0",
                  "cgroup": "<> ''"},
}


def row_ok_sql(table: str, present: set[str], cpus: int) -> str:
    """An SQL expression, true when a row of `table` holds what the writer writes in each of the columns
    this recording has (a recording made before a column existed reads a default in its place)."""
    parts = [_KIND_SQL[kind].format(c=c) for c, kind in COLUMNS[table].items() if c in present]
    parts += [f"{c} {bounds.format(cpus=cpus)}" for c, bounds in RANGES.get(table, {}).items() if c in present]
    return "(" + " AND ".join(parts or ["1"]) + ")"


# ---- JSON cells --------------------------------------------------------------------------------

def _json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise DamagedRow(f"not JSON ({exc})") from None


def _is_int(v, lo: int = _S64[0], hi: int = _S64[1]) -> bool:
    return type(v) is int and lo <= v <= hi


# [[slot, count], ...]: slots 0..63, counts of at most 18 digits (below 2^63), as the writer
# writes them (older recordings with json.dumps' spaces). Matched in C: a recording holds millions.
_HIST = re.compile(r"\[ *(?:\[(?:[0-9]|[1-5][0-9]|6[0-3]), *[0-9]{1,18}\](?:, *\[(?:[0-9]|[1-5][0-9]|6[0-3]), *[0-9]{1,18}\])*)? *\]")


# The cells read most, parsed once per distinct text: a recording's histograms and wakers repeat (a
# sleeping thread's one wait of one slot, interval after interval). Bounded: the first ones met are kept.
_CELLS_KEPT = 1 << 16
_hists: dict[str, tuple] = {}
_wokens: dict[str, tuple] = {}


def hist_cell(text: str | None) -> tuple[tuple[int, int], ...]:
    """A log2 histogram: [[slot, count], ...], slots 0..63, counts >= 0."""
    if not text:
        return ()
    hist = _hists.get(text)
    if hist is not None:
        return hist
    if not _HIST.fullmatch(text):
        raise DamagedRow("not a histogram")
    hist = tuple(map(tuple, _json(text)))  # the pattern lets a leading zero by, JSON does not: `[[1,07]]`
    if len(_hists) < _CELLS_KEPT:
        _hists[text] = hist
    return hist


def woken_cell(text: str | None) -> tuple[int, int, int]:
    """`tasks,interrupts,exiting`: three counts."""
    if not text:
        return (0, 0, 0)
    woken = _wokens.get(text)
    if woken is not None:
        return woken
    try:
        a, b, c = (int(x) for x in text.split(","))
    except ValueError:
        raise DamagedRow("not three counts") from None
    if not all(0 <= v <= _S64[1] for v in (a, b, c)):
        raise DamagedRow("not three counts")
    woken = (a, b, c)
    if len(_wokens) < _CELLS_KEPT:
        _wokens[text] = woken
    return woken


def health_cell(text: str | None) -> dict[str, int]:
    """An interval's health counters: {name: count}."""
    if not text:
        return {}
    doc = _json(text)
    if not isinstance(doc, dict) or not all(_is_int(v) for v in doc.values()):
        raise DamagedRow("not health counters")
    return doc


# A frame's fields' types: addr, symbol (or null), offset, module, build_id (or null), module_offset (or
# null), kind. Checked as one tuple of types per frame (a set lookup), not field by field.
_FRAME_TYPES = frozenset((int, sym, int, str, bid, mo, str) for sym in (str, type(None)) for bid in (str, type(None))
                         for mo in (int, type(None)))


def frames_cell(text: str) -> tuple[Frame, ...]:
    """A stack's frames: [[addr, symbol, offset, module, build_id, module_offset, kind], ...]."""
    doc = _json(text)
    if type(doc) is not list:
        raise DamagedRow("not a list of frames")
    try:
        if all(tuple(map(type, f)) in _FRAME_TYPES for f in doc):
            return tuple(Frame(*f) for f in doc)
    except TypeError:  # a frame that is not a list
        pass
    raise DamagedRow("not a frame")


def nodes_cell(text: str) -> tuple[int, ...]:
    """A slab cache's kmem_cache_node addresses (decimal strings)."""
    doc = _json(text)
    try:
        nodes = tuple(int(n) for n in doc)
    except (TypeError, ValueError):
        raise DamagedRow("not node addresses") from None
    if not all(0 <= n < 1 << 64 for n in nodes):
        raise DamagedRow("not node addresses")
    return nodes


def aliases_cell(text: str) -> tuple[str, ...]:
    doc = _json(text)
    if not isinstance(doc, list) or not all(isinstance(a, str) for a in doc):
        raise DamagedRow("not cache names")
    return tuple(doc)


def sysfs_cell(text: str) -> tuple[tuple[str, int], ...]:
    """A slab cache's /sys/kernel/slab numbers: {attribute: value}."""
    doc = _json(text)
    if not isinstance(doc, dict) or not all(_is_int(v) for v in doc.values()):
        raise DamagedRow("not slab attributes")
    return tuple(sorted(doc.items()))


# ---- metadata ----------------------------------------------------------------------------------

Check = Callable[[object, str], "str | None"]


def _leaf(ok: Callable[[object], bool], what: str) -> Check:
    return lambda v, path: None if ok(v) else f"{path}: {what}"


def integer(lo: int = _S64[0], hi: int = _S64[1]) -> Check:
    return _leaf(lambda v: _is_int(v, lo, hi), f"not an integer in {lo}..{hi}")


def number(lo: float = -_FINITE, hi: float = _FINITE, above: float | None = None) -> Check:
    def ok(v) -> bool:
        return (type(v) in (int, float) and math.isfinite(v) and lo <= v <= hi
                and (above is None or v > above))
    return _leaf(ok, "not a number in range" + (f" (above {above})" if above is not None else ""))


TEXT_VALUE = _leaf(lambda v: isinstance(v, str), "not text")
BOOLEAN = _leaf(lambda v: isinstance(v, bool), "not true or false")
CPU_NUMBER = integer(0, MAX_CPUS - 1)
CPU_KEY = _leaf(lambda k: isinstance(k, str) and k.isascii() and k.isdigit() and int(k) < MAX_CPUS, "not a CPU number")
ANY: Check = lambda v, path: None


def optional(check: Check) -> Check:
    return lambda v, path: None if v is None else check(v, path)


def list_of(check: Check) -> Check:
    def run(v, path):
        if not isinstance(v, list):
            return f"{path}: not a list"
        return next((e for i, x in enumerate(v) if (e := check(x, f"{path}.{i}"))), None)
    return run


def dict_of(check: Check, key: Check = TEXT_VALUE) -> Check:
    def run(v, path):
        if not isinstance(v, dict):
            return f"{path}: not an object"
        return next((e for k, x in v.items() if (e := key(k, f"{path}.{k}") or check(x, f"{path}.{k}"))), None)
    return run


def fields(spec: dict[str, Check], required: tuple[str, ...] = ()) -> Check:
    """An object whose named fields (those present, and at least `required`) pass their checks; other
    fields are kept unread."""
    def run(v, path):
        if not isinstance(v, dict):
            return f"{path}: not an object"
        missing = next((k for k in required if k not in v), None)
        if missing is not None:
            return f"{path}.{missing}: missing"
        return next((e for k, check in spec.items() if k in v and (e := check(v[k], f"{path}.{k}"))), None)
    return run


_PROBE = fields({"enabled": BOOLEAN, "mechanism": TEXT_VALUE, "reason": TEXT_VALUE}, ("enabled",))
_PSI = dict_of(dict_of(number()))
_OPTIONS = fields({
    "stallscope_pid": optional(integer(0)),
    "pid": optional(integer(0)),
    "command": optional(fields({"pid": integer(1), "argv": list_of(TEXT_VALUE), "exit_status": optional(integer()),
                                "rusage": dict_of(number())}, ("pid",))),
    "futex": optional(fields({"lock_call_uprobes": optional(integer(0)), "uprobe_trap_ns": optional(integer(0))})),
    "overhead_budget_pct": number(above=0),
    "sample_hz": optional(integer(0)),
    "throttled_per_interval": optional(BOOLEAN),
    "cpu_time_per_interval": optional(BOOLEAN),
    "cpu_runq_per_interval": optional(BOOLEAN),
    "slab": optional(fields({
        "list_lock_offset": integer(0, 1 << 20),
        "boot": optional(fields({"min_objects": integer(0), "max_order": integer(0, 64), "min_order": integer(0, 64),
                                 "present_cpus": integer(0, MAX_CPUS), "min_objects_default": integer(0),
                                 "cmdline": dict_of(ANY)},
                                ("min_objects", "max_order", "min_order", "present_cpus"))),
    })),
})
_MACHINE = fields({
    "arch": optional(TEXT_VALUE),
    "kernel_release": optional(TEXT_VALUE),
    "cpu_busy_pct": dict_of(number(), key=CPU_KEY),
    "cpu_side": fields({
        "psi": _PSI, "steal_ns": integer(), "steal_pct": number(),
        "throttled": list_of(fields({"cgroup": TEXT_VALUE, "nr_throttled": integer(), "throttled_ns": integer()},
                                    ("cgroup", "nr_throttled", "throttled_ns"))),
        "cgroup_psi": list_of(fields({"cgroup": TEXT_VALUE})),
    }),
    "topology": fields({
        "online": list_of(CPU_NUMBER),
        "cpus": dict_of(fields({"core": integer(), "package": integer(), "node": integer(),
                                "llc": list_of(CPU_NUMBER), "llc_level": integer(), "siblings": list_of(CPU_NUMBER)}),
                        key=CPU_KEY),
    }),
    "sched_knobs": dict_of(fields({"path": TEXT_VALUE, "value": TEXT_VALUE, "stable": BOOLEAN})),
    "rcu_knobs": dict_of(fields({"path": TEXT_VALUE, "value": TEXT_VALUE, "stable": BOOLEAN})),
})
META = fields({
    "format_version": integer(), "stallscope_version": TEXT_VALUE, "host": TEXT_VALUE, "kernel": TEXT_VALUE,
    "cpus": integer(1, MAX_CPUS), "start_wall": number(), "start_ns": integer(), "interval_s": number(above=0),
    "probes": dict_of(_PROBE), "options": _OPTIONS, "end_ns": integer(), "machine": _MACHINE,
}, ("format_version", "stallscope_version", "host", "kernel", "cpus", "start_wall", "start_ns", "interval_s",
    "probes"))


def check_meta(doc) -> str | None:
    """The first field of a recording's `meta` document that is not what the writer writes, as
    `options.command.pid: not an integer in 0..`, or None."""
    return META(doc, "meta")
