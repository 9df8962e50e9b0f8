/* SPDX-License-Identifier: GPL-2.0 */
/* Structs that cross the BPF/user boundary for the futex (user-space lock) probe.
 * Mirrored in bpf/abi.py; tests check the sizes against the object's BTF. */
#ifndef STALLSCOPE_FUTEX_H
#define STALLSCOPE_FUTEX_H

#include "stacks.h"
#include "interval.h"

/* futex(2) commands (include/uapi/linux/futex.h), op & FUTEX_CMD_MASK */
#define FUTEX_WAIT            0
#define FUTEX_WAKE            1
#define FUTEX_FD              2
#define FUTEX_REQUEUE         3
#define FUTEX_CMP_REQUEUE     4
#define FUTEX_WAKE_OP         5
#define FUTEX_LOCK_PI         6
#define FUTEX_UNLOCK_PI       7
#define FUTEX_TRYLOCK_PI      8
#define FUTEX_WAIT_BITSET     9
#define FUTEX_WAKE_BITSET     10
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_CMP_REQUEUE_PI  12
#define FUTEX_LOCK_PI2        13
#define FUTEX_PRIVATE_FLAG    128
#define FUTEX_CLOCK_REALTIME  256
#define FUTEX_CMD_MASK        (~(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME))

/* The commands that may block the caller: one bit per command. FUTEX_TRYLOCK_PI
 * never sleeps; the wake and requeue commands wake others. */
#define FUTEX_WAIT_CMDS ((1U << FUTEX_WAIT) | (1U << FUTEX_WAIT_BITSET) | (1U << FUTEX_LOCK_PI) | \
			 (1U << FUTEX_LOCK_PI2) | (1U << FUTEX_WAIT_REQUEUE_PI))

/* futex_wait_key.op for the futex2 syscalls, which have no command */
#define FUTEX_OP_WAITV 0x100 /* futex_waitv(2) (5.16+): uaddr is the first futex of the vector */
#define FUTEX_OP_WAIT2 0x101 /* futex_wait(2) (6.7+) */

/* One thread's waits on one futex word from one user stack and one lock call site. */
struct futex_wait_key {
	__u64 uaddr;
	__u64 ustack;          /* hash into the stacks map, or a STACK_* reason */
	__u64 caller;          /* return address into the caller of the libc lock function (0: none proven) */
	__u64 start_ns;        /* waiter's start_boottime: with pid, its identity */
	__u64 leader_start_ns; /* its process leader's: names the process for the symbolizer */
	__u32 pid;             /* waiter */
	__u32 tgid;
	__u32 op;              /* futex command (op & FUTEX_CMD_MASK), or FUTEX_OP_WAITV / FUTEX_OP_WAIT2 */
	__u32 flags;           /* FUTEX_F_*: what the call's arguments tell */
};

#define FUTEX_F_TIMEOUT 1  /* the call has a timeout: a timed wait (a poll, a park) */
/* the value the word was expected to hold (FUTEX_WAIT, FUTEX_WAIT_BITSET; glibc 2.36's nptl): */
#define FUTEX_F_LOCKWORD 2 /* 2 with FUTEX_WAIT: a contended mutex's lock word (__lll_lock_wait) */
#define FUTEX_F_ZERO 4     /* 0: a condition variable's __g_signals, a semaphore: an event, not a lock */
#define FUTEX_F_TID 8      /* the TID of a live thread of the waiter's process: pthread_join */
#define FUTEX_F_PARK 16    /* 0xffffffff (-1): a parked thread (Rust std's thread parker): a park, not a lock */

/* A thread's futex wait in progress and its latest libc lock call (task storage). User space
 * reads it when the recording stops, through a pidfd, to charge waits still in progress. */
struct futex_inflight {
	__u64 uaddr;
	__u64 begin_ns;
	__u64 ustack;
	__u64 caller;
	__u64 call_sp;  /* user SP + CFA offset - 8 at the lock call: where its return address is */
	__u64 call_ret; /* that return address */
	__u64 start_ns;        /* the waiter's identity, for a wait charged from user space */
	__u64 leader_start_ns;
	__u32 pid;
	__u32 tgid;
	__u32 op;
	__u32 active;
	__u32 flags;
	__u32 pad;
	__u64 blocked0;        /* the scheduler's marks when the wait began (sched_state.bpf.h) */
	__u64 runq0;
};

struct futex_wait_val {
	__u64 count;
	__u64 total_ns;
	__u64 blocked_ns;   /* of total: the waiter blocked */
	__u64 runnable_ns;  /* ... woken, waiting for a CPU (the rest: on a CPU, in the call) */
	__u64 woken_irq;    /* waits ended from an interrupt (with FUTEX_F_TIMEOUT: timed out) */
	struct ival_extremes ival; /* the longest and shortest wait of each interval (interval.h) */
};

/* A process's first wait on a futex word, stack or call site not seen before: user space reads
 * its maps at once, so that a process that exits before the next interval is still named. */
struct futex_new_key {
	__u64 leader_start_ns;
	__u32 tgid;
	__u32 pad;
};

struct futex_health {
	__u64 futex_map_full;
	__u64 stack_errors;
	__u64 stack_map_full;
	__u64 stacks_rate_limited; /* 0 here: counted per CPU in walk_budget.limited, read in its place */
	__u64 storage_errors;
	__u64 futex_read_errors; /* futex_waitv's vector unreadable: the wait is kept without an address */
	__u64 new_key_events_lost; /* the ring buffer was full: that process is named only if it lives on */
	__u64 switch_in_unseen; /* a wait whose switch-in was not traced, closed at the task's next switch-out */
};

struct futex_config {
	__u32 targ_tgid;
	__u32 self_tgid; /* stallscope's own process: no stack walks (the rate is a run-time knob, struct stack_tune) */
	__u32 user_stacks;
	__u32 caller_sp_range; /* bytes of user stack a libc lock function may use below its return address */
};

#endif
