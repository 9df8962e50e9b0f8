/* SPDX-License-Identifier: GPL-2.0 */
/* Structs that cross the BPF/user boundary for the lock contention probe.
 * Mirrored in bpf/abi.py; tests check the sizes against the object's BTF. */
#ifndef STALLSCOPE_LOCKS_H
#define STALLSCOPE_LOCKS_H

#include "stacks.h"
#include "interval.h"

#ifndef TASK_COMM_LEN
#define TASK_COMM_LEN 16
#endif
#define LOCK_NAME_LEN 32

/* lock:contention_begin flags (include/trace/events/lock.h) */
#define LCB_F_SPIN   (1U << 0)
#define LCB_F_READ   (1U << 1)
#define LCB_F_WRITE  (1U << 2)
#define LCB_F_RT     (1U << 3)
#define LCB_F_PERCPU (1U << 4)
#define LCB_F_MUTEX  (1U << 5)

/* lock_key.kind: how the kernel side named the lock */
#define LOCK_KIND_ADDR 0 /* by address only: user space names it by its contending caller */
#define LOCK_KIND_MMAP 1 /* the waiter's own mm->mmap_lock */
#define LOCK_KIND_SLAB 2 /* inside an object of the slab cache in lock_val.cache */

/* A lock inside a slab object: the cache's geometry (slabs are naturally aligned blocks of
 * PAGE_SIZE << order, fallback order min_order, objects of slot_size after red_left_pad), from which
 * user space finds the lock's offset in its object and so its field (BTF); and, for an rwsem, the
 * inode it would be the i_rwsem of (read speculatively: used only where the field is i_rwsem). */
struct lock_object {
	__u32 slot_size;
	__u32 red_left_pad;
	__u16 order;
	__u16 min_order;
	__u32 mode;  /* the inode's i_mode, dev and ino, if an inode's i_rwsem */
	__u64 ino;
	__u32 dev;   /* the kernel's dev_t: MAJOR << 20 | MINOR */
	__u32 pad;
};

/* One thread's waits on one lock, from one kernel stack. */
struct lock_key {
	__u64 addr;
	__u64 kstack;  /* hash into the stacks map, or a STACK_* reason */
	__u64 start_ns; /* waiter's start_boottime: with pid, its identity */
	__u32 pid;     /* waiter */
	__u32 tgid;
	__u32 flags;   /* the first contention_begin's flags: the lock type */
	__u32 kind;    /* LOCK_KIND_* */
};

/* A contention's time, perf's way: from contention_begin to contention_end, which fires once
 * the waiter has run again and taken the lock. Split by the waiter's state while it lasted:
 * on a CPU (spinning, a mutex's optimistic spin), blocked, and runnable (woken, waiting for a
 * CPU), from the scheduler's per-task counters (sched_state.bpf.h). */
struct lock_val {
	__u64 count;
	__u64 total_ns;
	__u64 spin_ns;   /* on a CPU: total - sleep */
	__u64 sleep_ns;  /* off a CPU: blocked + runnable */
	__u64 blocked_ns;
	__u64 runnable_ns;
	__u64 weighted_ns; /* keys with a walked stack: sum of d/p (a contention of d is walked with p = min(1, d/T)) */
	__u64 var_us2;     /* its variance */
	__u32 owner_pid; /* a mutex's owner when the last contention began (0: unknown) */
	__u32 pad;
	char owner_comm[TASK_COMM_LEN];
	char cache[LOCK_NAME_LEN]; /* LOCK_KIND_SLAB: the cache holding the lock */
	struct lock_object obj;    /* LOCK_KIND_SLAB: where in its object the lock is */
	struct ival_extremes ival; /* the longest and shortest contention of each interval (interval.h) */
};

struct lock_health {
	__u64 lock_map_full;
	__u64 stack_errors;
	__u64 stack_map_full;
	__u64 stacks_rate_limited; /* 0 here: counted per CPU in walk_budget.limited, read in its place */
	__u64 storage_errors;
	__u64 spin_nesting_overflow; /* more nested spin waits on one CPU than we keep */
	__u64 unmatched_ends;        /* contention_end with no begin seen (began before attach) */
	__u64 open_waits_charged;    /* waits still in progress at stop, charged up to then */
	__u64 spin_stale;            /* spin waits whose end was lost (a recursion miss): dropped, not charged */
};

struct lock_config {
	__u32 targ_tgid;
	__u32 kernel_stacks;
	__u32 has_kmem_cache_kfunc; /* bpf_get_kmem_cache() exists (6.13+) */
	__u32 self_tgid; /* stallscope's own process: its contentions get no stack walk */
};

#endif
