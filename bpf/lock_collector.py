"""The kernel lock contention collector: loads locks.bpf.o and drains its
cumulative per-(lock, waiter, stack) aggregates into interval deltas.

A kernel without the lock tracepoints (or a load failure) turns the probe
off with the reason; the other probes go on.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import fields, replace

from stallscope.analyzer.frames import RQ_LOCK
from stallscope.analyzer.locks import contention_point
from stallscope.analyzer.sample import LockDelta, ProbeStatus, TaskId, Tuning, record_maker
from stallscope.analyzer.symbols import Symbolizer
from stallscope.bpf import abi, features, tune
from stallscope.bpf.intervals import IntervalNumbers
from stallscope.bpf.lock_names import LockNamer, SiteFields, lock_kind
from stallscope.bpf.tune import DEFAULT_TUNE, StackTune
from stallscope.bpf.groups import GroupDrain
from stallscope.bpf.collector import HealthDeltas, ProgramDeltas, StackReader, object_path
from stallscope.bpf.mapdiff import Changed, MapDiff, identity
from stallscope.bpf.libbpf import BpfError, BpfObject
from stallscope.bpf.sizing import DEFAULT_SIZES, MapSizes
from stallscope.errors import StallscopeError


_KEY_LAYOUT, _VAL_LAYOUT = abi.layout(abi.LockKey), abi.layout(abi.LockVal)
# in a changed entry's row (bpf/mapdiff.py Changed.rows: flags, key, value, previous value), where the value and the
# previous value begin, and where an unpacked lock_val's extremes begin within it
_VAL = 1 + len(abi.unpacker(abi.LockKey).unpack(bytes(ctypes.sizeof(abi.LockKey))))
_VAL_FIELDS = len(abi.unpacker(abi.LockVal).unpack(bytes(ctypes.sizeof(abi.LockVal))))
_PREV = _VAL + _VAL_FIELDS
_EXTREMES = _VAL_FIELDS - 6
# of the previous value, the sums compared (its first fields, u64 each); the rest skipped, not unpacked
_SUMS = ("count", "total_ns", "spin_ns", "sleep_ns", "blocked_ns", "runnable_ns", "weighted_ns", "var_us2")
if tuple(name for name, _ in abi.LockVal._fields_[:len(_SUMS)]) != _SUMS or abi.LockVal.owner_pid.offset != 8 * len(_SUMS):
    raise ImportError("bpf/abi.py LockVal no longer begins with the sums the lock drain compares")
_PREV_LAYOUT = f"{len(_SUMS)}Q{ctypes.sizeof(abi.LockVal) - 8 * len(_SUMS)}x"
_new_lock = record_maker(LockDelta)  # every field given: built without the frozen dataclass's __init__
# a lock_val's fields in a row, in the order py_lock_deltas unpacks them (and analyzer/rowread.c lock_deltas reads
# them by place): its sums, the owner, the slab object's geometry, then the extremes
_ROW_FIELDS = ("count", "total_ns", "spin_ns", "sleep_ns", "blocked_ns", "runnable_ns", "weighted_ns", "var_us2",
               "owner_pid", "pad", "owner_comm", "cache", "slot_size", "red_left_pad", "order", "min_order", "mode",
               "ino", "dev", "pad", "max_ns", "max_ns", "min_ns", "min_ns", "epoch", "epoch")


def _row_fields(struct_type) -> tuple[str, ...]:
    """A ctypes mirror's field names as a row unpacks them: a nested struct's in its place, an array's once per
    element."""
    out: list[str] = []
    for name, ftype in struct_type._fields_:
        if isinstance(ftype, type) and issubclass(ftype, ctypes.Structure):
            out += _row_fields(ftype)
        elif getattr(ftype, "_type_", None) is not ctypes.c_char and getattr(ftype, "_length_", None):
            out += [name] * ftype._length_
        else:
            out.append(name)
    return tuple(out)


if _row_fields(abi.LockVal) != _ROW_FIELDS or _VAL_FIELDS != len(_ROW_FIELDS):
    raise ImportError("bpf/abi.py LockVal no longer holds the fields the lock drain reads, in their order")
try:  # the drain's records made in C (analyzer/rowread.c): a loaded machine changes thousands of entries an interval
    from stallscope.analyzer._rowread import lock_deltas as _c_lock_deltas
except ImportError:
    _c_lock_deltas = None
_LOCK_MAKE = (LockDelta, tuple(f.name for f in fields(LockDelta)))
_KERNEL_STACK = ("kernel", 0)


class LockCollector:
    def __init__(self, symbolizer: Symbolizer, targ_tgid: int = 0, stack_tune: StackTune = DEFAULT_TUNE,
                 kernel_stacks: bool = True, max_stacks: int = DEFAULT_SIZES.stack_entries, sched_state_fd: int = -1,
                 max_tasks: int = DEFAULT_SIZES.tasks):
        self.targ_tgid = targ_tgid
        self.sched_state_fd = sched_state_fd
        self.stack_tune = stack_tune
        self.kernel_stacks = kernel_stacks
        self.sizes = MapSizes(max_tasks, max_stacks)
        self.obj: BpfObject | None = None
        self.rq_locks: dict[int, int] = {}  # a run-queue lock's address -> its CPU
        self._stacks = StackReader(symbolizer, max_stacks)
        self._health = HealthDeltas(abi.LockHealth, prefix="locks.")
        self._programs = ProgramDeltas()
        self._diff = MapDiff.of(abi.LockKey, abi.LockVal, (identity(abi.LockKey),))  # bpf/mapdiff.py
        self._numbers = IntervalNumbers()  # the intervals the extremes are kept by (bpf/interval.h)
        self.symbolizer = symbolizer
        self._symbols: dict[int, str] = {}
        self.namer: LockNamer | None = LockNamer()
        # a slab-held lock's (field, where) by its cache and place: thousands of records an interval name the
        # same few hundred locks (a directory's i_rwsem is named anew each time: its path may change)
        self._described: dict[tuple, tuple[str, str]] = {}
        self._kinds: dict[int, str] = {}  # lock_kind of a contention's flags, by the flags (a few values)
        self._cpu_names: dict[int, str] = {}  # "cpuN", a run queue's lock's object, by the CPU
        # a slab-held lock left between two fields is named by the one its call site takes elsewhere (SiteFields):
        # each kernel stack's contention point, kept from the drain that read it (stacks are sent once)
        self._sites = SiteFields()
        self._points: dict[int, str] = {}

    def start(self) -> ProbeStatus:
        """Load and attach; never raises for a kernel that cannot: the status says why."""
        missing = [n for n, c in features.tracepoints().items() if n.startswith("lock:") and not c.ok]
        if missing:
            return ProbeStatus(False, "", f"no {', '.join(missing)} tracepoint in this kernel")
        kfunc = features.kfuncs().get("bpf_get_kmem_cache")
        try:
            obj = BpfObject(object_path("locks.bpf.o"))
            cfg = abi.LockConfig(targ_tgid=self.targ_tgid, self_tgid=os.getpid(), kernel_stacks=int(self.kernel_stacks),
                                 has_kmem_cache_kfunc=int(bool(kfunc and kfunc.ok)))
            image = obj.section_map(".rodata").initial_value()
            ctypes.memmove(image, ctypes.addressof(cfg), ctypes.sizeof(cfg))
            tune.write(obj, self.stack_tune)
            if self.sched_state_fd >= 0:
                obj.map("task_stats").reuse_fd(self.sched_state_fd)
            obj.map("locks").set_max_entries(self.sizes.locks)
            obj.map("stacks").set_max_entries(self.sizes.stack_entries)
            obj.load()
            # the ends before the begins: a contention that began while only contention_begin was attached
            # and ended before contention_end was attached stayed open in its task's entry, and the final walk of waits
            # in progress (charge_open_waits) charged it from then to the recording's end (seen: stallscope's
            # own thread waiting 5.1 s in a 5 s recording, on a mutex another of its threads held attaching)
            for prog in sorted(obj.programs(), key=lambda p: p.name != "contention_end"):
                if not prog.section.startswith("iter/"):
                    obj.attach(prog)
        except BpfError as exc:
            try:
                obj.close()
            except UnboundLocalError:
                pass
            return ProbeStatus(False, "", exc.message)
        self.obj = obj
        self.rq_locks = self._find_rq_locks(obj)
        reasons = [] if kfunc and kfunc.ok else ["no bpf_get_kmem_cache (6.13+): slab-held locks are not named"]
        if self.sched_state_fd < 0:
            reasons.append("without the scheduler's task state: waits are not split into blocked and runnable")
        reason = "; ".join(reasons)
        return ProbeStatus(True, "tp_btf", reason)

    @staticmethod
    def _find_rq_locks(obj: BpfObject) -> dict[int, int]:
        """Each CPU's run-queue lock address -> the CPU, from its per-CPU kernel threads' run queues (the
        rq_locks iterator: (CPU, address) pairs); {} where the kernel cannot say (no fair group scheduling, no
        task iterator): those locks are named by their callers' stacks, when one was walked."""
        try:
            raw = obj.program("rq_locks").iterate()
        except BpfError:
            return {}
        return {addr: cpu for cpu, addr in struct.iter_unpack("<QQ", raw[:len(raw) - len(raw) % 16]) if addr}

    def drain(self, dead: set[TaskId]) -> GroupDrain:
        """Deltas since the last drain; entries of threads that died are read one last time and dropped."""
        assert self.obj is not None
        e = self._numbers.advance(self.obj)
        out, ids, named, between = self.lock_deltas(self._diff.read(self.obj.map("locks"), dead), e)
        stacks = self._stacks.read(self.obj.map("stacks"), ids, {})
        if named or between:
            self._by_site(out, stacks, named, between)
        return GroupDrain({"locks": tuple(out)}, stacks, self._health.drain(self.obj), self._programs.drain(self.obj))

    def lock_deltas(self, changed: Changed, e: int, in_c: bool = True) -> tuple[list[LockDelta], dict, list, list]:
        """The records of the changed entries (`changed`: bpf/mapdiff.py's Changed of the lock map, interval `e`),
        their kernel stacks' ids, and the slab-held locks named, (cache, kind, stack, field), and left between fields,
        (index among the records, cache, kind, stack, fields): in C where it is built (analyzer/rowread.c
        lock_deltas: hackbench changes 2,500 entries an interval, read in place, without a row of 42 integers made
        for each), else py_lock_deltas over its rows; the same either way."""
        if in_c and _c_lock_deltas is not None:
            return _c_lock_deltas(changed.raw(_KEY_LAYOUT, _VAL_LAYOUT, _PREV_LAYOUT), (_VAL, _PREV), e,
                                  self.rq_locks, abi._NAMES, abi.name_text, self._symbols, self._symbol,
                                  self._described if self.namer is not None else None, self._describe, self._kinds,
                                  lock_kind, _LOCK_MAKE, TaskId, RQ_LOCK, self._cpu_names, _KERNEL_STACK)
        return self.py_lock_deltas(changed.rows(_KEY_LAYOUT, _VAL_LAYOUT, _PREV_LAYOUT), e)

    def py_lock_deltas(self, rows, e: int) -> tuple[list[LockDelta], dict, list, list]:
        """lock_deltas in Python."""
        out, ids = [], {}
        named, between = [], []
        text, rq_locks, extremes, bounded = abi.name_text, self.rq_locks, abi.extremes, abi.bounded
        for r in rows:
            count, pc = r[_VAL], r[_PREV]
            if count == pc:
                continue
            _, addr, kstack, start_ns, pid, tgid, flags, kind = r[:_VAL]
            (total, spin, sleep, blocked, runnable, weighted, var, owner_pid, _, owner_comm, cache, slot_size,
             red_left_pad, order, min_order, mode, ino, dev, _) = r[_VAL + 1:_VAL + _EXTREMES]
            pt, ps, psl, pb, pr, pw, pv = r[_PREV + 1:_PREV + len(_SUMS)]
            field = where = ""
            cpu = rq_locks.get(addr) if kind == abi.LOCK_KIND_ADDR else None
            if cpu is not None:
                where = f"cpu{cpu}"
            elif kind == abi.LOCK_KIND_SLAB and self.namer is not None:
                lk = lock_kind(flags)
                field, where, fields = self._describe(cache, addr, slot_size, red_left_pad, order, min_order, dev,
                                                      ino, mode, tgid, lk)
                if field:
                    named.append((cache, lk, kstack, field))
                elif len(fields) > 1:
                    between.append((len(out), cache, lk, kstack, fields))
            longest, shortest = bounded(*extremes(r, _VAL + _EXTREMES, e), count - pc, total - pt)
            out.append(_new_lock(
                TaskId(pid, start_ns), tgid, addr, kstack, flags, kind, count - pc, total - pt, longest, shortest,
                spin - ps, sleep - psl, owner_pid, text(owner_comm), text(cache),
                (RQ_LOCK if cpu is not None else self._symbol(addr)) if kind == abi.LOCK_KIND_ADDR else "",
                blocked - pb, runnable - pr,
                weighted - pw, var - pv, field, where))
            ids.setdefault(kstack, _KERNEL_STACK)
        return out, ids, named, between

    def _by_site(self, out: list[LockDelta], stacks, named: list[tuple], between: list[tuple]) -> None:
        """The slab-held locks left between two fields named by their call site, where it took its lock at one of
        the two elsewhere (SiteFields; what the geometry named in this drain is learnt first)."""
        points = self._points
        if len(points) > 1 << 16:
            points.clear()  # a stack forgotten here names no site until it is walked and sent again
        for st in stacks:
            if st.frames:
                points[st.id] = contention_point(st)
        sites, text = self._sites, abi.name_text
        for cache, kind, kstack, field in named:
            sites.learn(text(cache), kind, points.get(kstack, ""), field)
        for i, cache, kind, kstack, fields in between:
            field = sites.field(text(cache), kind, points.get(kstack, ""), fields)
            if field:
                out[i] = replace(out[i], field=field, object="")

    def _describe(self, cache: bytes, addr: int, slot_size: int, red_left_pad: int, order: int, min_order: int,
                  dev: int, ino: int, mode: int, tgid: int, kind: str) -> tuple[str, str, tuple[str, ...]]:
        """LockNamer.describe of a slab-held lock (`kind`: lock_kind's), with the fields it may be in when none names
        it (LockNamer.fields: two or more, for SiteFields), kept by its cache, place and kind but for a directory's
        i_rwsem."""
        key = (cache, addr, slot_size, red_left_pad, order, min_order, kind)
        hit = self._described.get(key)
        if hit is not None:
            return hit
        text = abi.name_text(cache)
        field, where = self.namer.describe(text, addr, slot_size, red_left_pad, order, min_order, dev, ino, mode,
                                           (tgid,), kind)
        named = (field, where, () if field else self.namer.fields(text, addr, slot_size, red_left_pad, order,
                                                                   min_order, kind))
        if not field.endswith(".i_rwsem"):
            if len(self._described) >= 1 << 16:
                self._described.clear()
            self._described[key] = named
        return named

    def _symbol(self, addr: int) -> str:
        """A static lock's variable, when kallsyms lists data symbols (CONFIG_KALLSYMS_ALL)."""
        if addr not in self._symbols:
            if len(self._symbols) >= 1 << 16:  # a lock per socket, inode, ...: addresses come and go
                self._symbols.clear()
            try:
                self._symbols[addr] = (self.symbolizer.kernel_data(addr) or "") if self.symbolizer else ""
            except StallscopeError:
                self._symbols[addr] = ""
        return self._symbols[addr]

    def finish(self) -> str:
        """The recording stops: charge the waits still in progress (the next drain reads them).
        Returns why it could not, or ""."""
        if self.obj is None:
            return ""
        try:
            self.obj.program("charge_open_waits").iterate()
        except BpfError as exc:  # a kernel without task iterators (5.8+): those waits stay uncounted
            return f"lock waits in progress at stop are not charged: {exc.message}"
        return ""

    def retune(self, t: Tuning) -> None:
        """The overhead budget's step: fewer stack walks from the next event on."""
        if self.obj is not None:
            tune.write(self.obj, tune.of_tuning(t))

    def close(self) -> None:
        if self.obj:
            self.obj.close()
            self.obj = None
