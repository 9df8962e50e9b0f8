/* SPDX-License-Identifier: GPL-2.0 */
/* Structs that cross the BPF/user boundary for the scheduler probes.
 * Mirrored once in Python (bpf/abi.py); tests check the sizes against this
 * object's BTF. Fixed-width types only. */
#ifndef STALLSCOPE_SCHED_H
#define STALLSCOPE_SCHED_H

#include "stacks.h"

#define TASK_COMM_LEN 16
#define RUNQ_SLOTS 40 /* log2(ns): slot s counts waits in [2^s, 2^(s+1)) ns */

/* task_stats.flags */
#define TS_BASE_EXACT   1 /* switch counters baseline read while the task was not running */
#define TS_BASE_GUESSED 2 /* first seen at its own switch-out: baseline derived from the switch type */
#define TS_EXITING      4 /* sched_process_exit seen */
#define TS_DEAD         8 /* final switch-out seen: this entry will not change again */
#define TS_NEW          16 /* created after the probes were attached (sched_wakeup_new) */
#define TS_NO_SCHED_INFO 32 /* kernel without CONFIG_SCHED_INFO: run_delay unavailable */
#define TS_REAP_RESOLVED 64 /* final switch counted as the reaping parent folded it into rusage */
#define TS_RENAMED      128 /* task_rename seen: an exec, or a new name (its maps may differ from its parent's) */

/* Off-CPU time per (task, kernel stack, user stack, state). Stack 0 = not collected. */
struct offcpu_key {
	__u32 pid;
	__u32 tgid;
	__u64 start_ns;
	__u64 kstack; /* hash into the stacks map */
	__u64 ustack;
	__u32 state;  /* prev_state at switch-out */
	__u32 pad;
};

struct offcpu_val {
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	__u32 hist[RUNQ_SLOTS]; /* log2(ns) of each wait: latency percentiles per stack */
};

/* A task's own off-CPU aggregate for one key without stacks (both stack ids
 * below STACK_ID_MIN): what the offcpu map would hold under that key. */
#define TASK_OFFCPU_SLOTS 3

struct offcpu_slot {
	__u64 kstack;
	__u64 ustack;
	__u32 state;
	__u32 used;   /* set once the key is written: the slot is the key's for the task's life */
	struct offcpu_val val;
};

/* Identity of a task: PID reuse never merges two tasks. */
struct task_key {
	__u32 pid;
	__u32 pad;
	__u64 start_ns; /* task->start_boottime */
};

/* Per task: cumulative totals since attach (user space takes deltas), and the
 * scratch state between one event and the next. One entry per task, in its
 * task storage, so each event makes one lookup that reaches it from the task
 * itself; fields are grouped by the event that writes them. */
struct task_stats {
	/* What the switch, waking and wakeup events touch, together in the first
	 * 128 bytes: the scratch state between one event and the next (user space
	 * ignores it), then the counters they keep. */
	__u64 block_ts;       /* switch-out into a sleeping state */
	__u64 runq_ts;        /* enqueued (wakeup or re-queue at switch-out) */
	__u64 pending_ns;     /* off-CPU time ended at wakeup, stack attributed at switch-in */
	__u64 ustack;         /* user stack at the switch-out that began the wait */
	__u32 state;          /* prev_state at that switch-out */
	__u32 woken;          /* the wait ended by a wakeup: a runq wait from it is wakeup latency */
	__u32 runq_from_wakeup;
	__u32 flags;          /* TS_* */
	__u64 nvcsw;          /* latest task->nvcsw read at its switch-out */
	__u64 nivcsw;
	/* totals */
	__u64 offcpu_ns;      /* blocked: from switch-out in a sleeping state to the wakeup */
	__u64 offcpu_count;
	__u64 offcpu_max_ns;
	__u64 runq_ns;        /* measured: from enqueue (wakeup or re-queue) to switch-in, ktime */
	__u64 runq_count;
	__u64 runq_max_ns;
	__u64 run_delay;      /* latest task->sched_info.run_delay (schedstat's own run-queue wait) */
	__u32 changed;        /* an event changed the totals since the last dump (cleared by dump_tasks) */
	__u32 tgid;
	/* written less often: migrations, a rename, creation */
	__u64 migrations;     /* sched_migrate_task with orig != dest */
	char comm[TASK_COMM_LEN]; /* at creation, then at each rename (task_rename) */
	__u32 ptgid;          /* parent's tgid at creation (0 if unknown) */
	__u32 pad;
	__u64 run_delay_base; /* when first seen */
	__u64 nvcsw_base;     /* counters when first seen */
	__u64 nivcsw_base;
	__u32 runq_hist[RUNQ_SLOTS]; /* waits that started at a wakeup (wakeup-to-run latency) */
	struct offcpu_slot slots[TASK_OFFCPU_SLOTS]; /* off-CPU time without stacks, by key */
};

/* Who ended a wait: the task running at sched_waking (waker 0 = idle CPU, i.e. an interrupt). */
struct waker_key {
	__u32 pid;         /* wakee */
	__u32 waker_pid;
	__u64 start_ns;    /* wakee */
	__u64 waker_start_ns;
	__u64 waker_kstack;
	__u32 waker_tgid;
	__u32 waker_flags; /* WAKER_* */
};

#define WAKER_IN_INTERRUPT 1 /* sched_waking ran on an interrupt stack, not the current task's */

struct waker_val {
	__u64 count;
	__u64 total_ns; /* off-CPU time of the wakee ended by this waker */
	char waker_comm[TASK_COMM_LEN];
};


/* Self-reported losses (.bss): shown to the user, never silent. */
struct sched_health {
	__u64 task_map_full;     /* task_final full: a dead task's last totals lost */
	__u64 offcpu_map_full;
	__u64 waker_map_full;
	__u64 stack_map_full;
	__u64 stack_errors;
	__u64 storage_errors;    /* a task's storage could not be created (no memory, or the storage was busy) */
	__u64 stacks_rate_limited; /* 0 here: counted per CPU in walk_budget.limited, read in its place */
	__u64 reap_unresolved;   /* a zombie leader's final switch raced its reaper, whose read could not be measured (counted) */
	__u64 reap_pending;      /* ... its parent had yet to read its counters (switch counted) */
	__u64 reap_exact;        /* ... its parent's read was measured and included it */
	__u64 reap_after_read;   /* ... its parent's read was measured and came before it */
	__u64 waking_unknown;    /* a wakeup of a task never seen switching out (blocked before attach) */
	__u64 waking_unblocked;  /* a wakeup of a task not recorded as blocked (already runnable) */
};

/* Load-time knobs (.rodata); the stack-walk rate and minimum wait are run-time
 * knobs (struct stack_tune). */
struct sched_config {
	__u32 targ_tgid;      /* 0 = every process */
	__u32 nr_cpus;
	__u32 user_stacks;    /* collect user stacks at switch-out */
	__u32 kernel_stacks;
	__u32 waker_stacks;
	__u32 thread_size;       /* THREAD_SIZE: a task's kernel stack */
	__u32 comm_at_switch;    /* no task_rename tracepoint: copy the name at every switch-out */
	__u32 self_tgid;         /* stallscope's own process: its waits get no stack walk and no waker */
};

#endif
