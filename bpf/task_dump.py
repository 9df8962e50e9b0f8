"""The task dump (bpf/sched.bpf.c dump_tasks), read once per interval: the entries of the tasks an event
changed since the last dump, and the waits in progress, handed over or carried on.

A task's entry is its cumulative totals; its delta is taken from the entry's bytes as the last dump
left them, read with struct at the mirror's offsets (bpf/abi.py TaskStats): a changed entry of a busy
machine's thousands is a few unpacks, and its run-queue histogram and its own off-CPU slots are
compared as bytes and read only when they moved. A wait in progress that the dump hands over (an
open_wait record) is charged to its key and task; one it carries on without a record is charged the
time between the two dumps under the key it was last handed over with.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter, ne
from typing import NamedTuple

from stallscope.analyzer.sample import (
    OffcpuDelta, OngoingWait, TaskDelta, TaskId, WaitSince, blocked_only, record_maker,
)
from stallscope.analyzer.rowread import fields_of
from stallscope.bpf import abi

_new_offcpu, _new_task_delta = record_maker(OffcpuDelta), record_maker(TaskDelta)
_SLOTS = range(abi.RUNQ_SLOTS)
_UNCHANGED = (0, 0, 0, 0, 0, 0, 0, 0, 0, (), 0, 0)  # a TaskDelta's values (after its task) when nothing moved

# the fields a delta reads, in the entry's order (each unpacked at its offset; the rest skipped)
_FIELDS = ("flags", "nvcsw", "nivcsw", "offcpu_ns", "offcpu_count", "runq_ns", "runq_count", "run_delay", "tgid",
           "migrations", "run_ns", "run_base", "comm", "ptgid", "policy", "nice", "rt_priority", "run_delay_base",
           "nvcsw_base", "nivcsw_base")
(FLAGS, NVCSW, NIVCSW, OFFCPU_NS, OFFCPU_COUNT, RUNQ_NS, RUNQ_COUNT, RUN_DELAY, TGID, MIGRATIONS, RUN_NS, RUN_BASE,
 COMM, PTGID, POLICY, NICE, RT_PRIORITY, RUN_DELAY_BASE, NVCSW_BASE, NIVCSW_BASE) = range(len(_FIELDS))


def _fields_struct(struct_type, names) -> struct.Struct:
    """A struct.Struct reading these scalar (or char[N]) fields of a ctypes mirror, in order, at their offsets."""
    fmt, at = "<", 0
    for name in names:
        field, ftype = getattr(struct_type, name), dict(struct_type._fields_)[name]
        if field.offset < at:
            raise ValueError(f"{struct_type.__name__}.{name} is not after the field before it")
        fmt += f"{field.offset - at}x" if field.offset > at else ""
        length = getattr(ftype, "_length_", None)
        fmt += f"{length}s" if length is not None else {abi.u32: "I", abi.u64: "Q", abi.s32: "i"}[ftype]
        at = field.offset + field.size
    return struct.Struct(fmt)


def _span(struct_type, name: str) -> tuple[int, int]:
    field = getattr(struct_type, name)
    return field.offset, field.offset + field.size


_SCALARS = _fields_struct(abi.TaskStats, _FIELDS)
_HIST = struct.Struct(f"<{abi.RUNQ_SLOTS}I")
_HIST_AT = _span(abi.TaskStats, "runq_hist")
_IVALS = struct.Struct("<" + 2 * "2Q2Q2I")  # offcpu_ival then runq_ival (bpf/interval.h), side by side
_IVALS_AT = getattr(abi.TaskStats, "offcpu_ival").offset
assert getattr(abi.TaskStats, "runq_ival").offset == _IVALS_AT + ctypes.sizeof(abi.IvalExtremes)
_SLOT = abi.unpacker(abi.OffcpuSlot)  # kstack, ustack, state, why, func, used, then the val's fields
_SLOT_SIZE = _SLOT.size
_NO_SLOT = (0,) * len(_SLOT.unpack(bytes(_SLOT.size)))
_SLOTS_AT = getattr(abi.TaskStats, "slots").offset
_SLOT_USED = getattr(abi.OffcpuSlot, "used").offset
_UNUSED = bytes(4)
_VAL = 7  # where a slot's offcpu_val begins among its unpacked values (after its key, used and pad)
_VAL_HIST = _VAL + 9  # its histogram (after count, total, charged, weighted, var, woken[3], pad)
_VAL_IVAL = _VAL_HIST + abi.RUNQ_SLOTS
_ZERO_HIST = bytes(_HIST_AT[1] - _HIST_AT[0])
_OPEN = abi.unpacker(abi.OpenWait)


def hist_delta(now, before) -> tuple[tuple[int, int], ...]:
    """(slot, count) of a log2 histogram's slots that moved, from its counts now and before: the slots
    found in C (a wait's histogram moves in one or two of its 40)."""
    return tuple([(i, now[i] - before[i]) for i in compress(_SLOTS, map(ne, now, before))])


@dataclass
class Prev:
    """What a task's last entry left: its bytes (the histogram and slots are compared with them), and its
    counters, whose off-CPU time grows as its waits in progress are charged between its entries."""

    raw: bytes
    values: list


try:  # the deltas and slots read in C (analyzer/rowread.c): a machine of sleeping threads has thousands an interval
    from stallscope.analyzer._rowread import Deltas as _Deltas, Slots as _Slots
except ImportError:
    _Deltas = _Slots = None


def _ival_offsets(name: str) -> tuple[int, int]:
    at = getattr(abi.TaskStats, name).offset
    return at + abi.IvalExtremes.max_ns.offset, at + abi.IvalExtremes.epoch.offset


_C_DELTAS = _Deltas(
    (FLAGS, NVCSW, NIVCSW, OFFCPU_NS, OFFCPU_COUNT, RUNQ_NS, RUNQ_COUNT, RUN_DELAY, MIGRATIONS, RUN_NS, RUN_BASE,
     RUN_DELAY_BASE, NVCSW_BASE, NIVCSW_BASE),
    (_HIST_AT[0], abi.RUNQ_SLOTS, *_ival_offsets("offcpu_ival"), *_ival_offsets("runq_ival")), abi.TS_NO_SCHED_INFO,
    fields_of(TaskDelta)) if _Deltas else None


def task_delta(tid: TaskId, raw: bytes, values: tuple, prev: Prev | None, e: int) -> TaskDelta | None:
    """The task's change since `prev` (None: since its counters' bases) in interval e; None when nothing
    changed. `values`: the entry's _SCALARS. In C where the extension is built (`py_task_delta` is the same in
    Python, and takes a value beyond 64 bits)."""
    if _C_DELTAS is not None:
        d = _C_DELTAS.delta(tid, raw, values, prev.raw if prev is not None else None,
                            prev.values if prev is not None else None, e)
        if d is not NotImplemented:
            return d
    return py_task_delta(tid, raw, values, prev, e)


def py_task_delta(tid: TaskId, raw: bytes, values: tuple, prev: Prev | None, e: int) -> TaskDelta | None:
    """task_delta in Python."""
    flags = values[FLAGS]
    if prev is None:
        vol, invol = values[NVCSW] - values[NVCSW_BASE], values[NIVCSW] - values[NIVCSW_BASE]
        b_offcpu = b_offcount = b_runq = b_runq_count = b_migr = 0
        run_delay_base, run_base, base_raw = values[RUN_DELAY_BASE], values[RUN_BASE], None
    else:
        p = prev.values
        vol, invol = values[NVCSW] - p[NVCSW], values[NIVCSW] - p[NIVCSW]
        b_offcpu, b_offcount, b_runq, b_runq_count, b_migr = (p[OFFCPU_NS], p[OFFCPU_COUNT], p[RUNQ_NS],
                                                              p[RUNQ_COUNT], p[MIGRATIONS])
        run_delay_base, run_base, base_raw = p[RUN_DELAY], p[RUN_NS], prev.raw
    h0, h1 = _HIST_AT
    now_h = raw[h0:h1]
    before_h = base_raw[h0:h1] if base_raw is not None else _ZERO_HIST
    if now_h == before_h:
        hist = ()
    else:
        hist = hist_delta(_HIST.unpack(now_h), _HIST.unpack(before_h))
    latency = values[RUNQ_NS] - b_runq
    # each ival_extremes: max_ns[2], min_ns[2], epoch[2] (bpf/interval.h): offcpu_ival's, then runq_ival's
    ivals = _IVALS.unpack_from(raw, _IVALS_AT)
    offcpu, offcount = values[OFFCPU_NS] - b_offcpu, values[OFFCPU_COUNT] - b_offcount
    runq_count = values[RUNQ_COUNT] - b_runq_count
    delta = (
        offcpu, offcount, abi.bounded(*abi.extremes(ivals, 0, e), offcount, offcpu)[0],
        latency if flags & abi.TS_NO_SCHED_INFO else values[RUN_DELAY] - run_delay_base,
        runq_count, abi.bounded(*abi.extremes(ivals, 6, e), runq_count, latency)[0],
        vol, invol, values[MIGRATIONS] - b_migr, hist, latency, values[RUN_NS] - run_base,
    )
    if prev is not None and delta == _UNCHANGED:
        return None
    return _new_task_delta(tid, *delta)


def _slots_layout() -> tuple[int, ...]:
    """The offsets analyzer/rowread.c Slots reads an entry's slots at (its order), from abi's mirror."""
    slot, val, ival = abi.OffcpuSlot, abi.OffcpuVal, abi.IvalExtremes
    v = slot.val.offset
    return (_SLOTS_AT, _SLOT_SIZE, abi.TASK_OFFCPU_SLOTS, slot.used.offset, slot.kstack.offset, slot.ustack.offset,
            slot.state.offset, slot.why.offset, slot.func.offset, v + val.count.offset, v + val.total_ns.offset,
            v + val.charged_ns.offset, v + val.weighted_ns.offset, v + val.var_us2.offset, v + val.woken.offset,
            v + val.hist.offset, abi.RUNQ_SLOTS, v + val.ival.offset + ival.max_ns.offset,
            v + val.ival.offset + ival.epoch.offset)


_C_SLOTS = _Slots(_slots_layout(), fields_of(OffcpuDelta)) if _Slots else None


def slot_deltas(tid: TaskId, tgid: int, raw: bytes, prev: Prev | None, e: int):
    """Off-CPU deltas of the waits a task kept in its own slots (keys without stacks; bpf/sched.h
    offcpu_slot), in interval e. A slot keeps its key for the task's life: one whose bytes did not move
    is not read. In C where the extension is built (`py_slot_deltas` is the same in Python)."""
    if _C_SLOTS is not None:
        return _C_SLOTS.deltas(tid, tgid, raw, prev.raw if prev is not None else None, e)
    return py_slot_deltas(tid, tgid, raw, prev, e)


def py_slot_deltas(tid: TaskId, tgid: int, raw: bytes, prev: Prev | None, e: int):
    """slot_deltas in Python."""
    for i in range(abi.TASK_OFFCPU_SLOTS):
        at = _SLOTS_AT + i * _SLOT_SIZE
        if raw[at + _SLOT_USED:at + _SLOT_USED + 4] == _UNUSED:
            break
        end = at + _SLOT_SIZE
        before = prev.raw[at:end] if prev is not None else None
        if before is not None and before == raw[at:end]:
            continue
        s = _SLOT.unpack_from(raw, at)
        b = (_SLOT.unpack_from(before) if before is not None and before[_SLOT_USED:_SLOT_USED + 4] != _UNUSED
             else None)
        if b is None:
            b = _NO_SLOT
        count = s[_VAL]
        if b[_VAL] == count:  # most slots of a changed task
            continue
        h = s[_VAL_HIST:_VAL_IVAL]
        yield _new_offcpu(
            tid, tgid, s[2], s[0], s[1], count - b[_VAL], s[_VAL + 1] - b[_VAL + 1],
            abi.bounded(*abi.extremes(s, _VAL_IVAL, e), count - b[_VAL], s[_VAL + 1] - b[_VAL + 1])[0],
            hist_delta(h, b[_VAL_HIST:_VAL_IVAL]), s[3], s[4],
            s[_VAL + 2] - b[_VAL + 2], s[_VAL + 3] - b[_VAL + 3], s[_VAL + 4] - b[_VAL + 4],
            (s[_VAL + 5] - b[_VAL + 5], s[_VAL + 6] - b[_VAL + 6], s[_VAL + 7] - b[_VAL + 7]))


def values_of(raw: bytes) -> tuple:
    """An entry's _SCALARS."""
    return _SCALARS.unpack_from(raw)


def comm_of(values) -> str:
    return abi.name_text(values[COMM])


_WAIT, _SINCE = itemgetter(0), itemgetter(1)


class InProgress(NamedTuple):
    """The waits in progress at a dump: those it carried on (Interval.ongoing) with their beginnings, and
    those it handed over (Interval.opened)."""

    ongoing: tuple[OngoingWait, ...]
    ongoing_since: tuple[int, ...]
    opened: tuple[WaitSince, ...]


class OpenWaits:
    """The waits in progress the dump handed over, by task, and what is carried on between dumps.

    A wait handed over (an open_wait record) is charged its part to its key and task, and remembered with
    the carried time (`carried_ns`, the sum of the spans between dumps) then. At a later dump that writes
    nothing of its task the dump carried it on: charged the span between the two dumps under that key.
    Its task's totals hold what was carried: when its entry comes, its last counters take it first."""

    def __init__(self) -> None:
        # task -> (its wait in progress with when it began, the carried time when it was handed over)
        self.handed: dict[TaskId, tuple[WaitSince, int]] = {}
        self.carried_ns = 0
        # the tasks the first dump found asleep (never seen switching out), whose first wait began before it and
        # has not ended (the collector drops a task whose entry counts an ended wait)
        self.asleep_at_start: set[TaskId] = set()
        self.first_ns = 0  # the first dump's instant (CLOCK_BOOTTIME)

    def settle(self, tid: TaskId, prev: Prev | None) -> None:
        """The task's entry came: what was carried on since its wait was handed over is in its totals
        (added to its last counters), and the wait leaves the table (handed over again if it goes on)."""
        handed = self.handed.pop(tid, None)
        if handed is not None and prev is not None:
            prev.values[OFFCPU_NS] += self.carried_ns - handed[1]

    def reset(self, prevs: dict[TaskId, Prev]) -> None:
        """Every wait in progress is handed over in this dump: the table is made anew."""
        for tid in list(self.handed):
            self.settle(tid, prevs.get(tid))

    def take(self, opened: list[tuple], span_ns: int, seen: set[TaskId], prevs: dict[TaskId, Prev],
             deltas: list[TaskDelta], end_ns: int) -> tuple[list[OffcpuDelta], "InProgress"]:
        """This dump's open_wait records (OpenWait fields, unpacked) and the span since the last dump (0:
        nothing is carried on): the records' charges (and a task delta for those whose task's entry did not
        come: `seen` holds those that did), and the waits in progress at the dump (`end_ns`, CLOCK_BOOTTIME),
        each with its beginning (a task the first dump found asleep: that dump's instant, the recording's start,
        for all that is known; one a later dump found: that dump's)."""
        handed = self.handed
        before = self.carried_ns
        self.carried_ns = carried = before + span_ns
        out = []
        for pid, tgid, start_ns, charged, open_ns, kstack, ustack, state, why, func in opened:
            tid = TaskId(pid, start_ns)
            was = handed.get(tid)
            prev = prevs.get(tid)
            if was is not None and prev is not None:  # handed over again (a stack walked for it): carried till now
                prev.values[OFFCPU_NS] += before - was[1]
            wait = OngoingWait(tid, tgid, state, kstack, ustack, why, func)
            # the same wait handed over again keeps its beginning (the two clocks' readings differ by nanoseconds)
            if was is not None:
                since = was[0].since_ns
            elif tid in self.asleep_at_start:  # its first wait, the one the first dump found (none ended yet)
                since = self.first_ns
            else:
                since = end_ns - open_ns
            self.asleep_at_start.discard(tid)
            handed[tid] = (WaitSince(wait, since), carried)
            out.append(wait.charged(charged))
            if tid in seen:  # its entry came in this dump: the part is in its totals
                continue
            if prev is not None:
                prev.values[OFFCPU_NS] += charged
            deltas.append(blocked_only(tid, charged))
        if not span_ns:  # every wait in progress was handed over in this dump
            return out, InProgress((), (), tuple([w for w, _at in handed.values()]))
        # thousands of sleeping threads' waits carried on, each interval: passes in C where they can be
        waits = handed.values()
        kept = [w for w, at in waits if at != carried]
        return out, InProgress(tuple(map(_WAIT, kept)), tuple(map(_SINCE, kept)),
                             tuple([w for w, at in waits if at == carried]))


def open_record(raw: bytes, at: int) -> tuple:
    """An open_wait record of the dump at `at`, its fields in order (bpf/sched.h struct open_wait)."""
    return _OPEN.unpack_from(raw, at)


OPEN_SIZE = _OPEN.size
