"""Kernel frames by what they say about a wait: how a task sleeps (not why), a lock's own internals
(not who wanted the lock), and function names without the compiler's clone suffixes. The cause table
(causes.py) and the lock table (locks.py) both read stacks past these frames."""

from __future__ import annotations

import re

# Frames that say *how* a task sleeps, not *why*: skipped when a wait is named by its frame.
SLEEP_MACHINERY = (
    "__schedule", "schedule", "preempt_schedule", "io_schedule", "__cond_resched", "schedule_timeout",
    "schedule_hrtimeout", "schedule_preempt_disabled", "do_task_dead", "bit_wait", "out_of_line_wait_on_bit",
    "__wait_on_bit", "wait_woken", "__wait_event", "__wait_for_common", "wait_for_completion",
    "finish_task_switch", "__switch_to", "__traceiter_", "__bpf_trace_", "bpf_trace_run",
)

# Frames that take or wait for the lock rather than want it; the tracing frames on top.
RQ_LOCK = "rq->__lock"  # a run queue's lock, as lock_stat names its class (analyzer/locks.py, bpf/lock_collector.py)
LOCK_INTERNAL = (
    "bpf_", "__bpf_", "__traceiter_", "trace_contention", "perf_trace_", "queued_spin_lock", "native_queued",
    "__pv_queued", "pv_queued", "_raw_spin_lock", "_raw_read_lock", "_raw_write_lock", "queued_read_lock",
    "queued_write_lock", "do_raw_spin_lock", "__mutex_lock", "mutex_lock", "__ww_mutex_lock", "ww_mutex_lock",
    "mutex_spin_on_owner", "osq_lock", "rwsem_down_", "down_read", "down_write", "__down", "down",
    "rwsem_optimistic_spin", "percpu_down_", "__percpu_down", "percpu_rwsem_", "rt_mutex", "__rt_mutex", "rtlock_",
    "mmap_read_lock", "mmap_write_lock", "raw_spin_rq_lock", "_raw_spin_rq_lock", "lock_mm_and_find_vma_internal", "contention_begin",
)

_SUFFIX = re.compile(r"\.(constprop|isra|part|cold|llvm|lto_priv|localalias)\b.*$")


def bare(symbol: str | None) -> str:
    """The function name without the compiler's clone suffixes (`.constprop.0`, `.isra.0`, ...)."""
    return _SUFFIX.sub("", symbol or "")


# Kernel frames of a uprobe hit (the breakpoint's trap back to the kernel): a lock waited for there is waited
# for because a uprobe is set (stallscope's futex group sets them on the C library's lock calls). The cause
# table's "mmap_lock at a uprobe hit" rule names the same functions.
UPROBE_FRAMES = ("find_active_uprobe", "handle_swbp", "uprobe_notify_resume", "uprobe_handle_trampoline")
# ... and where it runs the probe's handlers, under the probe's register_rwsem (a lock of the tracing, not of the
# program: no advice to change it)
UPROBE_HANDLING = UPROBE_FRAMES + ("handler_chain",)


# The kernel's global per-CPU rwsems, each named by the functions that take it (its reader or writer's caller:
# the frame past PERCPU_RWSEM_WAITS). Without data symbols in kallsyms (CONFIG_KALLSYMS_ALL off) a static
# lock's address names nothing, and these are known by their users alone.
PERCPU_RWSEMS = (
    ("sb_writers (fs frozen)", (
        "vfs_write", "vfs_writev", "vfs_iter_write", "do_iter_write", "do_iter_readv_writev", "mnt_want_write",
        "mnt_want_write_file", "__mnt_want_write", "file_start_write", "__sb_start_write", "sb_start_write",
        "sb_start_pagefault", "sb_start_intwrite", "vfs_fallocate", "do_sys_ftruncate", "vfs_copy_file_range",
        "kernel_write", "__kernel_write", "iter_file_splice_write", "do_splice", "filemap_page_mkwrite",
        "ext4_page_mkwrite", "iomap_page_mkwrite", "ext4_evict_inode", "ext4_dirty_inode", "file_update_time",
        "touch_atime", "file_modified", "kiocb_modified", "sb_wait_write", "freeze_super")),
    ("cgroup_threadgroup_rwsem", ("copy_process", "exit_signals", "de_thread", "cgroup_threadgroup_change_begin",
                                  "cgroup_attach_lock", "cgroup_procs_write_start")),
    ("cpu_hotplug_lock", ("cpus_read_lock", "cpus_write_lock")),
    # fs/locks.c: every flock, POSIX lock and lease change reads it; /proc/locks (locks_start) writes it
    ("file_rwsem (file locks)", ("flock_lock_inode", "posix_lock_inode", "__break_lease", "generic_add_lease",
                                 "generic_delete_lease", "fcntl_getlease", "locks_start")),
    # ext4's, in its superblock info: writeback reads it; changing a file's extent or journalling mode writes it
    # (stress-ng --chattr: the lock table names ext4_ext_migrate+0x9c and ext4_ind_migrate+0x6d, ext4_writepages)
    ("s_writepages_rwsem (ext4)", ("ext4_writepages", "ext4_do_writepages", "ext4_dax_writepages",
                                   "ext4_ext_migrate", "ext4_ind_migrate", "ext4_change_inode_journal_flag")),
)
# a per-CPU rwsem's own frames, reader's and writer's
PERCPU_RWSEM_WAITS = ("percpu_rwsem_wait", "__percpu_down_read", "percpu_down_read", "percpu_down_write")


def percpu_rwsem_of(caller: str) -> str | None:
    """The global per-CPU rwsem that `caller` (a bare function name) takes, when it is one of PERCPU_RWSEMS'."""
    for lock, users in PERCPU_RWSEMS:
        if caller.startswith(users):
            return lock
    return None
