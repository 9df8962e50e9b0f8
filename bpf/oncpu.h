/* SPDX-License-Identifier: GPL-2.0 */
/* Structs that cross the BPF/user boundary for the on-CPU sampling probe.
 * Mirrored in bpf/abi.py; tests check the sizes against the object's BTF. */
#ifndef STALLSCOPE_ONCPU_H
#define STALLSCOPE_ONCPU_H

#include "stacks.h"

#define TASK_COMM_LEN 16

/* A reserved stack id beside stacks.h's: the sample interrupted user mode, so
 * there are no kernel frames (not a failed walk). */
#define STACK_USER_MODE 4

/* The samples of one thread in one (kernel stack, user stack). */
struct oncpu_key {
	__u64 kstack;   /* hash into the stacks map, or a STACK_* reason */
	__u64 ustack;
	__u64 start_ns; /* task->start_boottime: with pid, the thread's identity */
	__u32 pid;
	__u32 tgid;
};

struct oncpu_val {
	__u64 samples;
	__u64 period_ns; /* the sum of each sample's period: cpu-clock periods are nanoseconds */
	char comm[TASK_COMM_LEN]; /* when first sampled: a hog may never switch, so the
	                           * scheduler probe may never have named it */
};

/* Per CPU: every sample the program saw, and the idle task's apart. */
struct oncpu_cpu {
	__u64 samples;
	__u64 period_ns;
	__u64 idle_samples;
	__u64 idle_ns;
};

struct oncpu_health {
	__u64 oncpu_map_full;
	__u64 stack_errors;
	__u64 stack_map_full;
	__u64 stacks_rate_limited; /* never counted: the sampling rate is the walk budget */
	__u64 user_stack_errors;
};

struct oncpu_config {
	__u32 targ_tgid;
	__u32 user_stacks;
	__u32 kernel_stacks; /* walks are bounded by the sampling rate, not by stack_tune */
	__u32 pad;
};

#endif
