"""ctypes mirrors of the structs in bpf/*.h that cross the BPF/user boundary.

Mirrored once here; tests/test_abi.py checks every size against the compiled
objects' BTF so a change on one side cannot silently misread the other.
"""

import ctypes
import struct

TASK_COMM_LEN = 16
MAX_STACK_DEPTH = 64
RUNQ_SLOTS = 40

WAKER_IN_INTERRUPT = 1
WAKER_EXITING = 2

# the reserved stack ids and the task flags the recording keeps: defined once, with the data model
from stallscope.analyzer.sample import (  # noqa: E402,F401
    STACK_FAILED, STACK_ID_MIN, STACK_NONE, STACK_NOT_DRAWN, STACK_OWN, STACK_RATE_LIMITED, STACK_SHORT, TS_DEAD,
    TS_EXITING, TS_FOUND_BLOCKED,
)

TS_BASE_EXACT = 1
TS_BASE_GUESSED = 2
TS_NEW = 16
TS_NO_SCHED_INFO = 32
TS_REAP_RESOLVED = 64
TS_RENAMED = 128

u32, u64, s32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32

# offcpu_key.why is decoded in analyzer/why.py, which mirrors its bits (a test holds them to bpf/sched.h)
DUMP_TASK, DUMP_OPEN = 1, 2


class TaskKey(ctypes.Structure):
    _fields_ = [("pid", u32), ("pad", u32), ("start_ns", u64)]


class IvalExtremes(ctypes.Structure):
    """bpf/interval.h: the longest and shortest value of each of two intervals, by their number's parity."""
    _fields_ = [("max_ns", u64 * 2), ("min_ns", u64 * 2), ("epoch", u32 * 2)]

    def of(self, e: int) -> tuple[int, int]:
        """(longest, shortest) of interval `e`; (0, 0) when none of that interval is kept."""
        return extremes((*self.max_ns, *self.min_ns, *self.epoch), 0, e)


def extremes(values, at: int, e: int) -> tuple[int, int]:
    """(longest, shortest) of interval `e` from an ival_extremes unpacked at values[at:at + 6] (max0, max1,
    min0, min1, epoch0, epoch1); (0, 0) when none of that interval is kept. The next number's pair, when the
    same read found it, is taken too: it holds the values that landed between the numbering and the read,
    which this interval's counts hold (bpf/interval.h)."""
    i, j = at + (e & 1), at + (~e & 1)
    if values[i + 4] == e:
        if values[j + 4] == e + 1:
            return max(values[i], values[j]), min(values[i + 2], values[j + 2])
        return values[i], values[i + 2]
    if values[j + 4] == e + 1:
        return values[j], values[j + 2]
    return 0, 0


def bounded(longest: int, shortest: int, count: int, total: int) -> tuple[int, int]:
    """An interval's (longest, shortest) held to what its count and total allow: a lone value is the total,
    none is longer than the total, and none of an interval that counted nothing is kept (its pair may
    hold a value the interval before it counted). A total that went back bounds nothing."""
    if total < 0:
        return longest, shortest
    if count == 1:
        return total, total
    longest = min(longest, total)
    return longest, min(shortest, longest)


class OffcpuVal(ctypes.Structure):
    _fields_ = [("count", u64), ("total_ns", u64), ("charged_ns", u64), ("weighted_ns", u64),
                ("var_us2", u64), ("woken", u32 * 3), ("pad", u32), ("hist", u32 * RUNQ_SLOTS),
                ("ival", IvalExtremes)]


class MaxEpoch(ctypes.Structure):
    """bpf/sched.h: the interval numbers the per-interval extremes are kept by (the .data.epoch section)."""
    _fields_ = [("offcpu", u32), ("task", u32)]


TASK_OFFCPU_SLOTS = 4


class OffcpuSlot(ctypes.Structure):
    """A task's own off-CPU aggregate for one key without stacks (bpf/sched.h)."""
    _fields_ = [("kstack", u64), ("ustack", u64), ("state", u32), ("why", u32), ("func", u64), ("used", u32),
                ("pad", u32), ("val", OffcpuVal)]


class OpenWait(ctypes.Structure):
    """bpf/sched.h: a blocked task's wait so far, handed over by the dump."""
    _fields_ = [("pid", u32), ("tgid", u32), ("start_ns", u64), ("charged_ns", u64), ("open_ns", u64),
                ("kstack", u64), ("ustack", u64), ("state", u32), ("why", u32), ("func", u64)]


class DumpHeader(ctypes.Structure):
    _fields_ = [("kind", u32), ("size", u32)]


RECENT_WAITS = 4


class RecentWait(ctypes.Structure):
    _fields_ = [("block_ts", u64), ("woken_ts", u64), ("run_ts", u64), ("func", u64), ("state", u32), ("why", u32)]


class TaskStats(ctypes.Structure):
    _fields_ = [
        # the probes' scratch state between events: not read here
        ("block_ts", u64), ("mark", u64), ("runq_ts", u64), ("pending_ns", u64), ("pending_rest", u64),
        ("ustack", u64), ("kstack_open", u64), ("draw_ns", u64), ("func", u64), ("open_pending", u64),
        ("open_bt", u64), ("open_kstack", u64),
        ("state", u32), ("why", u32), ("woken", u32), ("runq_from_wakeup", u32), ("woke", u32), ("no_walk", u32),
        ("flags", u32), ("nvcsw", u64), ("nivcsw", u64),
        ("last_block_ts", u64), ("last_woken_ts", u64), ("recent", RecentWait * RECENT_WAITS),
        ("recent_next", u32), ("pad2", u32),
        ("fd_file", u64), ("fd", u32), ("fd_kind", u32),
        ("offcpu_ns", u64), ("offcpu_count", u64),
        ("runq_ns", u64), ("runq_count", u64), ("run_delay", u64),
        ("changed", u32), ("tgid", u32),
        ("migrations", u64), ("run_ns", u64), ("run_base", u64), ("comm", ctypes.c_char * TASK_COMM_LEN),
        ("ptgid", u32), ("policy", u32), ("nice", s32), ("rt_priority", u32),
        ("run_delay_base", u64), ("nvcsw_base", u64), ("nivcsw_base", u64),
        ("runq_hist", u32 * RUNQ_SLOTS),
        ("slots", OffcpuSlot * TASK_OFFCPU_SLOTS),
        ("offcpu_ival", IvalExtremes), ("runq_ival", IvalExtremes),
    ]


class OffcpuKey(ctypes.Structure):
    _fields_ = [("pid", u32), ("tgid", u32), ("start_ns", u64), ("kstack", u64), ("ustack", u64),
                ("state", u32), ("why", u32), ("func", u64)]


class WakerKey(ctypes.Structure):
    _fields_ = [("pid", u32), ("waker_pid", u32), ("start_ns", u64), ("waker_start_ns", u64),
                ("waker_kstack", u64), ("waker_tgid", u32), ("waker_flags", u32),
                ("link_func", u64), ("link_state", u32), ("link_why", u32), ("wakee_func", u64),
                ("wakee_state", u32), ("wakee_why", u32)]


class WakerVal(ctypes.Structure):
    _fields_ = [("count", u64), ("total_ns", u64), ("weighted_ns", u64), ("link_blocked_ns", u64),
                ("link_runq_ns", u64), ("waker_comm", ctypes.c_char * TASK_COMM_LEN)]


class Stack(ctypes.Structure):
    _fields_ = [("ips", u64 * MAX_STACK_DEPTH)]


class WalkBudget(ctypes.Structure):
    """bpf/stacks.bpf.h: one CPU's stack-walk token bucket and the walks it refused."""
    _fields_ = [("last_ns", u64), ("units", u64), ("limited", u64)]


class StackTune(ctypes.Structure):
    """bpf/stacks.h: the stack-walk knobs every object that walks stacks reads at run time (.data)."""
    _fields_ = [("min_stack_ns", u64), ("sample_ns", u64), ("walks_per_s", u32), ("user_walks_per_s", u32)]


class SchedHealth(ctypes.Structure):
    _fields_ = [("task_map_full", u64), ("offcpu_map_full", u64), ("waker_map_full", u64),
                ("stack_map_full", u64), ("stack_errors", u64), ("storage_errors", u64), ("stacks_rate_limited", u64),
                ("reap_unresolved", u64), ("reap_pending", u64), ("reap_exact", u64), ("reap_after_read", u64),
                ("waking_unknown", u64), ("waking_unblocked", u64), ("waits_drawn", u64), ("waking_raced", u64),
                ("open_walks", u64), ("switch_out_open", u64), ("close_without_start", u64),
                ("wakeups_deferred", u64), ("switch_in_unseen", u64), ("runq_unseen", u64), ("open_carried", u64),
                ("reap_ambiguous", u64), ("switch_out_closed", u64),
                ("runq_closed", u64)]


class SchedConfig(ctypes.Structure):
    _fields_ = [("targ_tgid", u32), ("nr_cpus", u32), ("user_stacks", u32),
                ("kernel_stacks", u32), ("waker_stacks", u32), ("thread_size", u32), ("comm_at_switch", u32),
                ("self_tgid", u32)]


class IrqText(ctypes.Structure):
    _fields_ = [("start", u64), ("end", u64)]


# C struct name -> mirror, for the BTF size check.
MIRRORS = {
    "task_key": TaskKey, "task_stats": TaskStats, "offcpu_key": OffcpuKey, "offcpu_val": OffcpuVal, "offcpu_slot": OffcpuSlot,
    "waker_key": WakerKey, "waker_val": WakerVal, "stack": Stack, "sched_health": SchedHealth,
    "sched_config": SchedConfig, "irq_text": IrqText, "stack_tune": StackTune, "walk_budget": WalkBudget, "open_wait": OpenWait,
    "dump_header": DumpHeader, "recent_wait": RecentWait, "max_epoch": MaxEpoch, "ival_extremes": IvalExtremes,
}


def decode(struct_type, raw: bytes):
    return struct_type.from_buffer_copy(raw[: ctypes.sizeof(struct_type)])


_STRUCT_CODES = {ctypes.c_uint32: "I", ctypes.c_uint64: "Q", ctypes.c_char: "s", ctypes.c_uint16: "H", ctypes.c_int32: "i",
                 ctypes.c_int64: "q"}


def layout(struct_type) -> str:
    """struct's format characters of a ctypes mirror, nested structs inlined, padding skipped, without a byte
    order: unpacker()'s, and a larger record's part (bpf/mapdiff.py Changed.rows)."""
    fmt, at = "", 0
    for name, ftype in struct_type._fields_:
        field = getattr(struct_type, name)
        if field.offset > at:
            fmt += f"{field.offset - at}x"
        length, elem = getattr(ftype, "_length_", None), getattr(ftype, "_type_", None)
        if length is not None and elem in _STRUCT_CODES:
            code = _STRUCT_CODES[elem]
            fmt += f"{length}s" if code == "s" else f"{length}{code}"
        elif ftype in _STRUCT_CODES:
            fmt += _STRUCT_CODES[ftype]
        elif isinstance(ftype, type) and issubclass(ftype, ctypes.Structure):
            fmt += layout(ftype)
        else:
            raise TypeError(f"{struct_type.__name__}.{name}: no flat layout for {ftype.__name__}")
        at = field.offset + field.size
    if ctypes.sizeof(struct_type) > at:
        fmt += f"{ctypes.sizeof(struct_type) - at}x"
    return fmt


def unpacker(struct_type) -> struct.Struct:
    """A struct.Struct reading the same bytes as a ctypes mirror, one value per field in order (padding
    skipped, a nested struct's fields in its place): a `char[N]` field is its N bytes, NULs included; an
    array of integers is its elements in turn. Drains read thousands of entries a second, and a ctypes
    decode with its attribute reads costs several times one unpack."""
    return struct.Struct("<" + layout(struct_type))


def c_string(raw: bytes) -> str:
    """A `char[N]` field's text, as the ctypes mirror reads it (up to the first NUL)."""
    end = raw.find(b"\0")
    return (raw if end < 0 else raw[:end]).decode(errors="replace")


_NAMES: dict[bytes, str] = {}  # a few hundred distinct names recur in thousands of entries an interval


def name_text(raw: bytes) -> str:
    """c_string of a name field (a task's, a waker's, a lock owner's, a slab cache's), read once per distinct
    name: the drains' one cache of them, emptied when it reaches 16,384."""
    name = _NAMES.get(raw)
    if name is None:
        if len(_NAMES) >= 1 << 14:
            _NAMES.clear()
        name = _NAMES[raw] = c_string(raw)
    return name


# ---- bpf/locks.h ---------------------------------------------------------
LOCK_NAME_LEN = 32
LCB_F_SPIN, LCB_F_READ, LCB_F_WRITE, LCB_F_RT, LCB_F_PERCPU, LCB_F_MUTEX = 1, 2, 4, 8, 16, 32
LOCK_KIND_ADDR, LOCK_KIND_MMAP, LOCK_KIND_SLAB = 0, 1, 2


class LockKey(ctypes.Structure):
    _fields_ = [("addr", u64), ("kstack", u64), ("start_ns", u64), ("pid", u32), ("tgid", u32), ("flags", u32),
                ("kind", u32)]


class LockObject(ctypes.Structure):
    _fields_ = [("slot_size", u32), ("red_left_pad", u32), ("order", ctypes.c_uint16), ("min_order", ctypes.c_uint16),
                ("mode", u32), ("ino", u64), ("dev", u32), ("pad", u32)]


class LockVal(ctypes.Structure):
    _fields_ = [("count", u64), ("total_ns", u64), ("spin_ns", u64),
                ("sleep_ns", u64), ("blocked_ns", u64), ("runnable_ns", u64), ("weighted_ns", u64), ("var_us2", u64),
                ("owner_pid", u32), ("pad", u32), ("owner_comm", ctypes.c_char * TASK_COMM_LEN),
                ("cache", ctypes.c_char * LOCK_NAME_LEN), ("obj", LockObject), ("ival", IvalExtremes)]


class LockHealth(ctypes.Structure):
    _fields_ = [("lock_map_full", u64), ("stack_errors", u64), ("stack_map_full", u64),
                ("stacks_rate_limited", u64), ("storage_errors", u64), ("spin_nesting_overflow", u64),
                ("unmatched_ends", u64), ("open_waits_charged", u64), ("spin_stale", u64)]


class LockConfig(ctypes.Structure):
    _fields_ = [("targ_tgid", u32), ("kernel_stacks", u32), ("has_kmem_cache_kfunc", u32), ("self_tgid", u32)]


# ---- bpf/oncpu.h ---------------------------------------------------------
from stallscope.analyzer.oncpu import STACK_USER_MODE  # noqa: E402,F401


class OncpuKey(ctypes.Structure):
    _fields_ = [("kstack", u64), ("ustack", u64), ("start_ns", u64), ("pid", u32), ("tgid", u32)]


class OncpuVal(ctypes.Structure):
    _fields_ = [("samples", u64), ("period_ns", u64), ("comm", ctypes.c_char * TASK_COMM_LEN)]


class OncpuCpu(ctypes.Structure):
    _fields_ = [("samples", u64), ("period_ns", u64), ("idle_samples", u64), ("idle_ns", u64)]


class OncpuHealth(ctypes.Structure):
    _fields_ = [("oncpu_map_full", u64), ("stack_errors", u64), ("stack_map_full", u64),
                ("stacks_rate_limited", u64), ("user_stack_errors", u64)]


class OncpuConfig(ctypes.Structure):
    _fields_ = [("targ_tgid", u32), ("user_stacks", u32), ("kernel_stacks", u32), ("pad", u32)]


# object -> {C struct name -> mirror}
OBJECT_MIRRORS = {
    "sched.bpf.o": MIRRORS,
    "locks.bpf.o": {"lock_key": LockKey, "lock_val": LockVal, "lock_health": LockHealth, "lock_object": LockObject,
                    "ival_extremes": IvalExtremes,
                    "lock_config": LockConfig, "stack": Stack, "stack_tune": StackTune},
    "oncpu.bpf.o": {"oncpu_key": OncpuKey, "oncpu_val": OncpuVal, "oncpu_cpu": OncpuCpu,
                    "oncpu_health": OncpuHealth, "oncpu_config": OncpuConfig, "stack": Stack},
}


# ---- bpf/slab.h ----------------------------------------------------------
SLAB_NAME_LEN = 32
SLAB_MAX_NODES = 8
SLAB_CACHE_NO_OBJECT, SLAB_CACHE_PAGE_ALLOC, SLAB_CACHE_UNKNOWN = 1, 2, 3


class SlabKey(ctypes.Structure):
    _fields_ = [("cache", u64), ("tgid", u32), ("exiting", u32)]


class SlabCounts(ctypes.Structure):
    _fields_ = [("kmallocs", u64), ("cache_allocs", u64), ("kfrees", u64), ("cache_frees", u64),
                ("bytes_req", u64), ("bytes_alloc", u64), ("failed", u64), ("slab_switches", u64),
                ("switch_allocs", u64)]


class SlabCacheInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * SLAB_NAME_LEN), ("node", u64 * SLAB_MAX_NODES), ("object_size", u32),
                ("size", u32), ("order", u32), ("objs_per_slab", u32), ("min_order", u32), ("sheaf_capacity", u32),
                ("cpu_partial", u32), ("nodes_cut", u32)]


class SlabHealth(ctypes.Structure):
    _fields_ = [("counts_map_full", u64), ("cache_map_full", u64), ("cursor_map_full", u64), ("pad", u64)]


class SlabConfig(ctypes.Structure):
    _fields_ = [("targ_tgid", u32), ("page_shift", u32), ("nr_node_ids", u32), ("has_kmem_cache_kfunc", u32)]


OBJECT_MIRRORS["slab.bpf.o"] = {
    "slab_key": SlabKey, "slab_counts": SlabCounts, "slab_cache_info": SlabCacheInfo, "slab_health": SlabHealth,
    "slab_config": SlabConfig,
}


# ---- bpf/futex.h ---------------------------------------------------------
FUTEX_WAIT, FUTEX_WAKE, FUTEX_FD, FUTEX_REQUEUE, FUTEX_CMP_REQUEUE, FUTEX_WAKE_OP = 0, 1, 2, 3, 4, 5
FUTEX_LOCK_PI, FUTEX_UNLOCK_PI, FUTEX_TRYLOCK_PI, FUTEX_WAIT_BITSET, FUTEX_WAKE_BITSET = 6, 7, 8, 9, 10
FUTEX_WAIT_REQUEUE_PI, FUTEX_CMP_REQUEUE_PI, FUTEX_LOCK_PI2 = 11, 12, 13
FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME = 128, 256
FUTEX_CMD_MASK = ~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)
FUTEX_WAIT_CMDS = frozenset({FUTEX_WAIT, FUTEX_WAIT_BITSET, FUTEX_LOCK_PI, FUTEX_LOCK_PI2, FUTEX_WAIT_REQUEUE_PI})
FUTEX_OP_WAITV, FUTEX_OP_WAIT2 = 0x100, 0x101


class FutexWaitKey(ctypes.Structure):
    _fields_ = [("uaddr", u64), ("ustack", u64), ("caller", u64), ("start_ns", u64), ("leader_start_ns", u64),
                ("pid", u32), ("tgid", u32), ("op", u32), ("flags", u32)]


FUTEX_F_TIMEOUT = 1


class FutexInflight(ctypes.Structure):
    _fields_ = [("uaddr", u64), ("begin_ns", u64), ("ustack", u64), ("caller", u64), ("call_sp", u64),
                ("call_ret", u64), ("start_ns", u64), ("leader_start_ns", u64), ("pid", u32), ("tgid", u32),
                ("op", u32), ("active", u32), ("flags", u32), ("pad", u32), ("blocked0", u64), ("runq0", u64)]


class FutexWaitVal(ctypes.Structure):
    _fields_ = [("count", u64), ("total_ns", u64), ("blocked_ns", u64),
                ("runnable_ns", u64), ("woken_irq", u64), ("ival", IvalExtremes)]


class FutexHealth(ctypes.Structure):
    _fields_ = [("futex_map_full", u64), ("stack_errors", u64), ("stack_map_full", u64),
                ("stacks_rate_limited", u64), ("storage_errors", u64), ("futex_read_errors", u64),
                ("new_key_events_lost", u64), ("switch_in_unseen", u64)]


class FutexNewKey(ctypes.Structure):
    _fields_ = [("leader_start_ns", u64), ("tgid", u32), ("pad", u32)]


class FutexConfig(ctypes.Structure):
    _fields_ = [("targ_tgid", u32), ("self_tgid", u32), ("user_stacks", u32), ("caller_sp_range", u32)]


OBJECT_MIRRORS["futex.bpf.o"] = {
    "futex_wait_key": FutexWaitKey, "futex_wait_val": FutexWaitVal, "futex_health": FutexHealth,
    "ival_extremes": IvalExtremes,
    "futex_config": FutexConfig, "futex_new_key": FutexNewKey, "futex_inflight": FutexInflight, "stack": Stack,
}


# ---- bpf/io.h ------------------------------------------------------------
IO_DISK_NAME_LEN = 32
IO_TIME_SLOTS, IO_SIZE_SLOTS, IO_DEPTH_SLOTS = 40, 32, 16
IO_OP_READ, IO_OP_WRITE, IO_OP_DISCARD, IO_OP_FLUSH = 0, 1, 2, 3
s64 = ctypes.c_int64


class IoKey(ctypes.Structure):
    _fields_ = [("dev", u32), ("op", u32)]


class IoStats(ctypes.Structure):
    _fields_ = [("requests", u64), ("sectors", u64), ("total_ns", u64), ("timed", u64), ("queued_ns", u64),
                ("device_ns", u64), ("bytes", u64), ("unaccounted", u64), ("size_hist", u32 * IO_SIZE_SLOTS),
                ("total_hist", u32 * IO_TIME_SLOTS), ("queued_hist", u32 * IO_TIME_SLOTS),
                ("device_hist", u32 * IO_TIME_SLOTS)]


class IoDevice(ctypes.Structure):
    _fields_ = [("inflight", s64), ("stamp", u64), ("busy_ns", u64), ("issued", u64), ("depth_sum", u64),
                ("depth_hist", u32 * IO_DEPTH_SLOTS), ("name", ctypes.c_char * IO_DISK_NAME_LEN)]


class IoReq(ctypes.Structure):
    _fields_ = [("issue_ns", u64), ("bytes", u32), ("pid", u32), ("tgid", u32), ("ended", u32),
                ("queued_ns", u64), ("device_ns", u64), ("comm", ctypes.c_char * TASK_COMM_LEN)]


class IoSubmitKey(ctypes.Structure):
    _fields_ = [("dev", u32), ("op", u32), ("tgid", u32), ("pad", u32)]


class IoSubmitVal(ctypes.Structure):
    _fields_ = [("requests", u64), ("sectors", u64), ("comm", ctypes.c_char * TASK_COMM_LEN)]


class IoCompleting(ctypes.Structure):
    _fields_ = [("ts", u64), ("context", u64), ("total_ns", u64), ("queued_ns", u64), ("device_ns", u64), ("dev", u32),
                ("op", u32), ("submit_tgid", u32), ("pad", u32), ("submit_comm", ctypes.c_char * TASK_COMM_LEN)]


class IoWakeKey(ctypes.Structure):
    _fields_ = [("pid", u32), ("tgid", u32), ("start_ns", u64), ("dev", u32), ("op", u32), ("submit_tgid", u32),
                ("state", u32), ("func", u64), ("why", u32), ("pad", u32)]


class IoWakeVal(ctypes.Structure):
    _fields_ = [("count", u64), ("wait_ns", u64), ("req_ns", u64), ("timed", u64), ("queued_ns", u64),
                ("device_ns", u64), ("submit_comm", ctypes.c_char * TASK_COMM_LEN)]


class IoHealth(ctypes.Structure):
    _fields_ = [("stats_map_full", u64), ("device_map_full", u64), ("req_map_full", u64), ("submit_map_full", u64),
                ("wake_map_full", u64), ("untimed", u64), ("wakes_unmatched", u64), ("reissued", u64)]


class IoConfig(ctypes.Structure):
    _fields_ = [("targ_tgid", u32), ("self_tgid", u32), ("wake_window_ns", u32), ("has_sched_state", u32),
                ("thread_size", u32), ("has_io_done", u32)]


OBJECT_MIRRORS["io.bpf.o"] = {
    "io_key": IoKey, "io_stats": IoStats, "io_device": IoDevice, "io_req": IoReq, "io_submit_key": IoSubmitKey,
    "io_submit_val": IoSubmitVal, "io_completing": IoCompleting, "io_wake_key": IoWakeKey, "io_wake_val": IoWakeVal,
    "io_health": IoHealth, "io_config": IoConfig,
}
