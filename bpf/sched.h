/* SPDX-License-Identifier: GPL-2.0 */
/* Structs that cross the BPF/user boundary for the scheduler probes.
 * Mirrored once in Python (bpf/abi.py); tests check the sizes against this
 * object's BTF. Fixed-width types only. */
#ifndef STALLSCOPE_SCHED_H
#define STALLSCOPE_SCHED_H

#include "stacks.h"
#include "interval.h"

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
#define TS_FOUND_BLOCKED 256 /* first seen blocked by the task dump: its first wait began before the probes saw it */

/* Why a task waits, read without a stack walk (offcpu_key.why): what it was doing when
 * it blocked, at its switch-out. The system call comes from the registers it saved at
 * entry, the file kind from the call's file descriptor, a kernel thread's function
 * from its kthread (or workqueue worker) structure. */
#define WHY_SYSCALL_MASK 0x3ff          /* bits 0-9: the system call number (WHY_CTX_SYSCALL) */
#define WHY_CTX_SHIFT    10             /* bits 10-12: where the task blocked */
#define WHY_CTX_MASK     (7U << WHY_CTX_SHIFT)
#define WHY_CTX_NONE     0              /* not known (a user task in no call); with bits 0-9 set, a compat
					 * (32-bit, ia32) system call: its number plus WHY_COMPAT_BIAS */
#define WHY_COMPAT_BIAS  1
#define WHY_CTX_SYSCALL  1              /* in a system call: bits 0-9 */
#define WHY_CTX_FAULT    2              /* in an exception taken from user mode (orig_ax -1 on x86): a page fault */
#define WHY_FAULT_UPROBE 1              /* with WHY_CTX_FAULT, in bits 0-9: in a uprobe's breakpoint trap instead */
#define WHY_CTX_KTHREAD  3              /* a kernel thread: offcpu_key.func is its thread function */
#define WHY_CTX_KWORKER_IDLE 4          /* a workqueue worker between work items */
#define WHY_CTX_KWORKER  5              /* a workqueue worker inside a work item: func is the work function */
#define WHY_CTX_EXIT     6              /* a user task in its exit (PF_EXITING): do_exit() has begun (it may have left
					 * its mm already, and its saved registers name no call) */
#define WHY_CTX_IO_WORKER 7             /* an io_uring worker thread (PF_IO_WORKER, iou-wrk-*): a user thread that
					 * runs only in the kernel, its saved registers copied from its creator's */
#define WHY_USER_WORKER  1              /* with WHY_CTX_IO_WORKER, in bits 0-9: another such user worker
					 * (PF_USER_WORKER: vhost, KVM's kvm-nx-lpage-recovery) */
#define WHY_FD_SHIFT     13             /* bits 13-16: the kind of file the call's descriptor names */
#define WHY_FD_MASK      (15U << WHY_FD_SHIFT)
#define WHY_FD_NONE      0
#define WHY_FD_PIPE      1              /* a pipe or FIFO */
#define WHY_FD_SOCKET    2
#define WHY_FD_FILE      3              /* a regular file */
#define WHY_FD_DIR       4
#define WHY_FD_CHR       5              /* a character device (a terminal, /dev/...) */
#define WHY_FD_BLK       6
#define WHY_FD_EVENTFD   7
#define WHY_FD_TIMERFD   8
#define WHY_FD_SIGNALFD  9
#define WHY_FD_EPOLL     10
#define WHY_FD_INOTIFY   11
#define WHY_FD_IO_URING  12
#define WHY_FD_ANON      13             /* another anonymous inode */
#define WHY_FD_UNIX      14             /* a socket of the unix family (AF_UNIX); WHY_FD_SOCKET: any other */
#define WHY_FUTEX_TID    (1U << 17)     /* a futex wait on a word holding the TID of a live thread of the
					 * waiter's own process (glibc's pthread_join waits on pd->tid) */
#define WHY_FUTEX_LOCKWORD (1U << 18)   /* FUTEX_WAIT for the value 2: glibc's contended-lock word (__lll_lock_wait) */
#define WHY_TIMEOUT      (1U << 19)     /* the call has a timeout (futex) */
#define WHY_FUTEX_ZERO   (1U << 20)     /* a futex wait for the value 0: glibc's condition variables and semaphores */
#define WHY_IOWAIT       (1U << 21)     /* the task slept in I/O wait (io_schedule() set task->in_iowait), whatever
					 * its context: the kernel's own word that it waits for a device */
#define WHY_FUTEX_PARK   (1U << 22)     /* a futex wait for the value 0xffffffff (-1): a parked thread (Rust std's
					 * thread parker, PARKED: thread::park, its channels' and lazy inits' waits) */

/* How a wait ended (counted in offcpu_val by kind of waker). */
#define WOKE_TASK    0
#define WOKE_IRQ     1 /* sched_waking ran in an interrupt (a timer, a device, a softirq on the IRQ stack) */
#define WOKE_EXITING 2 /* by a task in its exit: a thread join's end, a parent woken by its child */

/* Off-CPU time per (task, kernel stack, user stack, state, why). Stack ids below
 * STACK_ID_MIN say why there is none. (task, state, why, func) is a wait's stratum:
 * its waits' exact time, shared out by the stacks drawn among them. */
struct offcpu_key {
	__u32 pid;
	__u32 tgid;
	__u64 start_ns;
	__u64 kstack; /* hash into the stacks map */
	__u64 ustack;
	__u32 state;  /* prev_state at switch-out */
	__u32 why;    /* WHY_*: what the task was doing, read without a walk */
	__u64 func;   /* a kernel thread's function or work function (WHY_CTX_KTHREAD, WHY_CTX_KWORKER) */
};

/* Waits that ended, each whole; and the time charged, which also holds the parts of
 * waits in progress that user space charged at each dump (open_wait), less those. A
 * stack is walked for a wait with probability p = min(1, d/T) (T: stack_tune.sample_ns):
 * keys with a stack also sum d/p (the Horvitz-Thompson estimate of their waits' time)
 * and its variance term, so what is estimated from them says its own error. */
struct offcpu_val {
	__u64 count;
	__u64 total_ns;     /* the waits' lengths */
	__u64 charged_ns;   /* the waits' time not yet charged as open (see open_wait) */
	__u64 weighted_ns;  /* sum of d/p (keys with a walked stack) */
	__u64 var_us2;      /* sum of (1 - p) / p^2 * d^2, in us^2 */
	__u32 woken[3];     /* waits ended by WOKE_TASK, WOKE_IRQ, WOKE_EXITING */
	__u32 pad;
	__u32 hist[RUNQ_SLOTS]; /* log2(ns) of each wait: latency percentiles per stack */
	struct ival_extremes ival; /* the longest and shortest wait of each interval (max_epoch.offcpu, or
				    * .task in a task's own slot) */
};

/* User space's interval numbers (interval.h), each moved on just before the data it numbers is read:
 * `offcpu` before the offcpu map, `task` before the task dump (the tasks' slots and totals). */
struct max_epoch {
	__u32 offcpu;
	__u32 task;
};

/* A task's own off-CPU aggregate for one key without stacks (both stack ids
 * below STACK_ID_MIN): what the offcpu map would hold under that key. */
#define TASK_OFFCPU_SLOTS 4

struct offcpu_slot {
	__u64 kstack;
	__u64 ustack;
	__u32 state;
	__u32 why;
	__u64 func;
	__u32 used;   /* set once the key is written: the slot is the key's for the task's life */
	__u32 pad;
	struct offcpu_val val;
};

/* What the dump hands over for a task blocked when it runs: the part of its wait since
 * the last dump, charged to the interval now ending, under the key the wait has so far
 * (kstack STACK_NOT_DRAWN until a stack is walked for it). At the wait's end, only the
 * rest is charged (offcpu_val.charged_ns): a wait spanning intervals is charged to each. */
struct open_wait {
	__u32 pid;
	__u32 tgid;
	__u64 start_ns;
	__u64 charged_ns; /* this dump's part */
	__u64 open_ns;    /* the wait so far, at the dump's instant (dump_clock) */
	__u64 kstack;
	__u64 ustack;
	__u32 state;
	__u32 why;
	__u64 func;
};

/* dump_tasks writes records of two kinds, each after this header. A wait in progress is written
 * (DUMP_OPEN) when it is new since the last dump, its key changed (a stack walked for it), its task's
 * entry is written too, or its charge is not exactly the time between the two dumps; otherwise it is
 * carried on: charged the time between the dumps with no record, and counted (open_carried), user
 * space charging the same to the key it was last handed over under. */
#define DUMP_TASK 1 /* struct task_key then struct task_stats */
#define DUMP_OPEN 2 /* struct open_wait */

struct dump_header {
	__u32 kind;
	__u32 size; /* bytes that follow */
};

/* One of a task's last waits, for the wait chains through its wakeups of others. */
#define RECENT_WAITS 4

struct recent_wait {
	__u64 block_ts; /* it began */
	__u64 woken_ts; /* it was woken */
	__u64 run_ts;   /* the task ran again */
	__u64 func;     /* its stratum: offcpu_key.func, state, why */
	__u32 state;
	__u32 why;
};

/* The run-queue waits that ended on one CPU (runq_by_cpu): schedstat's per-CPU run_delay, as
 * sched_info_arrive() counts it there, without CONFIG_SCHEDSTATS */
struct cpu_runq {
	__u64 ns;
	__u64 count;
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
	__u64 mark;           /* blocked: the wait is charged up to here (block_ts, or the last dump); 0 otherwise */
	__u64 runq_ts;        /* enqueued (wakeup or re-queue at switch-out) */
	__u64 pending_ns;     /* the wait ended at wakeup, stack attributed at switch-in */
	__u64 pending_rest;   /* the part of it not charged by a dump */
	__u64 ustack;         /* user stack at the switch-out that began the wait */
	__u64 kstack_open;    /* kernel stack walked by a dump while the wait went on (0: none) */
	__u64 draw_ns;        /* T when the wait was drawn for a walk (0: not drawn) */
	__u64 func;           /* offcpu_key.func of the wait */
	__u64 open_pending;   /* charged by dumps, not yet handed over (a record that did not fit) */
	__u64 open_bt;        /* the block_ts of the wait a dump last handed over as an open_wait record */
	__u64 open_kstack;    /* ... and the kstack of its key then: a wait carried on (see dump_tasks) keeps both */
	__u32 state;          /* prev_state at that switch-out */
	__u32 why;            /* WHY_* of the wait */
	__u32 woken;          /* the wait ended by a wakeup: a runq wait from it is wakeup latency */
	__u32 runq_from_wakeup;
	__u32 woke;           /* WOKE_* of the wait that ended */
	__u32 no_walk;        /* why the wait that ended gets no walk (STACK_*), 0: drawn, walked at switch-in */
	__u32 flags;          /* TS_* */
	__u64 nvcsw;          /* latest task->nvcsw read at its switch-out */
	__u64 nivcsw;
	/* the wait that ended at the last wakeup, until the switch-in records it in `recent` */
	__u64 last_block_ts;  /* it began */
	__u64 last_woken_ts;  /* it was woken */
	struct recent_wait recent[RECENT_WAITS]; /* the task's last waits, a ring */
	__u32 recent_next;
	__u32 pad2;
	__u64 fd_file;        /* the file of the last descriptor looked up, and its WHY_FD_ kind */
	__u32 fd;
	__u32 fd_kind;
	/* totals */
	__u64 offcpu_ns;      /* blocked: from switch-out in a sleeping state to the wakeup, charged as it goes */
	__u64 offcpu_count;
	__u64 runq_ns;        /* measured: from enqueue (wakeup or re-queue) to switch-in, ktime */
	__u64 runq_count;
	__u64 run_delay;      /* latest task->sched_info.run_delay (schedstat's own run-queue wait) */
	__u32 changed;        /* an event changed the totals since the last dump (cleared by dump_tasks) */
	__u32 tgid;
	/* written less often: migrations, a rename, creation */
	__u64 migrations;     /* sched_migrate_task with orig != dest */
	__u64 run_ns;         /* latest se.sum_exec_runtime read at its switch-out: time on a CPU */
	__u64 run_base;       /* ... when first seen */
	char comm[TASK_COMM_LEN]; /* at creation, then at each rename (task_rename) */
	__u32 ptgid;          /* parent's tgid at creation (0 if unknown) */
	__u32 policy;         /* scheduling policy (SCHED_*), nice and real-time priority at the latest switch-out */
	__s32 nice;
	__u32 rt_priority;
	__u64 run_delay_base; /* when first seen */
	__u64 nvcsw_base;     /* counters when first seen */
	__u64 nivcsw_base;
	__u32 runq_hist[RUNQ_SLOTS]; /* waits that started at a wakeup (wakeup-to-run latency) */
	struct offcpu_slot slots[TASK_OFFCPU_SLOTS]; /* off-CPU time without stacks, by key */
	struct ival_extremes offcpu_ival; /* its blocked waits' extremes per interval (max_epoch.task) */
	struct ival_extremes runq_ival;   /* its run-queue waits' */
};

/* Who ended a wait: the task running at sched_waking (waker 0 = idle CPU, i.e. an interrupt),
 * recorded for the waits drawn for a stack walk. With the waker's own last wait before it ran:
 * the next link of a wait chain (a lock holder that was itself blocked on I/O). */
struct waker_key {
	__u32 pid;         /* wakee */
	__u32 waker_pid;
	__u64 start_ns;    /* wakee */
	__u64 waker_start_ns;
	__u64 waker_kstack;
	__u32 waker_tgid;
	__u32 waker_flags; /* WAKER_* */
	__u64 link_func;   /* the waker's last wait's stratum: its offcpu_key.func, state and why (its */
	__u32 link_state;  /* stack would multiply the keys: the evidence names the cause); all 0 when */
	__u32 link_why;    /* the waker's last wait is unknown */
	__u64 wakee_func;  /* the wakee's wait's stratum (offcpu_key.state, why, func): which of its */
	__u32 wakee_state; /* waits, and so which causes, this waker ended */
	__u32 wakee_why;
};

#define WAKER_IN_INTERRUPT 1 /* sched_waking ran on an interrupt stack, not the current task's */
#define WAKER_EXITING      2 /* the waker was in its exit (PF_EXITING) */

/* Every time below is weighted by 1/p, as the wakee's wait was drawn with p. */
struct waker_val {
	__u64 count;
	__u64 total_ns;    /* off-CPU time of the wakee ended by this waker (unweighted) */
	__u64 weighted_ns; /* ... weighted: sum of d/p */
	__u64 link_blocked_ns; /* of it, the time the waker was itself blocked in its last wait */
	__u64 link_runq_ns;    /* ... and waited for a CPU after that wait */
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
	__u64 waits_drawn;       /* waits drawn for a stack walk (p = min(1, d/T)) */
	__u64 waking_raced;      /* a wait whose wakeup ran on another CPU while the task was still switching out
				  * (sched_waking found no wait yet): closed at its switch-in, its run-queue wait
				  * counted as blocked; lost entirely before this was kept */
	__u64 open_walks;        /* stacks walked by the dump for waits still in progress */
	__u64 switch_out_open;   /* a task switched out with a wait still open: its wakeup and switch-in not traced */
	__u64 close_without_start; /* a wait closed whose start was not set (never expected) */
	__u64 wakeups_deferred;  /* a first wakeup (a task asleep since before attach) whose storage could not be
				  * made in the interrupt that woke it: made at its switch-in, its run-queue wait kept */
	__u64 switch_in_unseen;  /* a task switched out with a wait closed at its wakeup and never charged: its
				  * switch-in was not traced (the kernel emits none for some switches out of an idle
				  * task); charged to its key there, without its stack (close_unseen_switch_in) */
	__u64 runq_unseen;       /* ... with a run-queue wait never closed, for the same reason (runq_closed) */
	__u64 open_carried;      /* waits in progress a dump carried on without a record (see DUMP_OPEN) */
	__u64 reap_ambiguous;    /* a zombie leader's final switch matched two of its parent's reaps that differ on
				  * whether the parent read it, both as near in CPU time: the nearer one taken */
	__u64 switch_out_closed; /* ... of them, closed from the task's run time and run_delay (close_unseen_wait) */
	__u64 runq_closed;       /* run-queue waits whose switch-in was not traced, closed from the task's run time */
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

/* Where the kernel's interrupt entry code lies (__irqentry_text_start, _end in kallsyms; 0 when
 * hidden): an interrupt's waker stack ends there. A section of its own (.data.irq), written by user
 * space after load and before attach, so that kallsyms is read while the verifier runs. */
struct irq_text {
	__u64 start;
	__u64 end;
};

#endif
