/* SPDX-License-Identifier: GPL-2.0 */
/* The scheduler object's per-task state, read by the lock and futex objects: user space
 * hands them the scheduler's task storage (bpf_map__reuse_fd before load), so they can tell,
 * for a wait of their own, how long the waiter was blocked and how long it waited for a CPU,
 * with no program of theirs on the scheduler's events. Without it (the map is then their
 * own, and empty), both read 0 and the whole wait counts as on a CPU. */
#ifndef STALLSCOPE_SCHED_STATE_BPF_H
#define STALLSCOPE_SCHED_STATE_BPF_H

#include "sched.h"

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_stats);
} task_stats SEC(".maps");

/* A task's cumulative blocked and run-queue time, now: what a wait of it spans is the
 * difference of two marks. A wait in progress counts up to `now` (a stop-time charge). */
struct sched_mark {
	__u64 blocked_ns;
	__u64 runq_ns;
};

static __always_inline void sched_mark_of(struct task_struct *t, __u64 now, struct sched_mark *m)
{
	struct task_stats *s = bpf_task_storage_get(&task_stats, t, 0, 0);
	__u64 open;

	if (!s) {
		m->blocked_ns = m->runq_ns = 0;
		return;
	}
	m->blocked_ns = s->offcpu_ns;
	m->runq_ns = s->runq_ns;
	open = *(volatile __u64 *)&s->mark;
	if (open && now > open)
		m->blocked_ns += now - open;
}

/* How a wait of `total` ns splits: blocked and runnable from the scheduler's marks at its
 * begin and end, the rest on a CPU (spinning, or running between a wakeup and the lock). */
static __always_inline void sched_split(struct sched_mark *begin, struct sched_mark *end, __u64 total,
					__u64 *blocked, __u64 *runnable)
{
	__u64 b = end->blocked_ns > begin->blocked_ns ? end->blocked_ns - begin->blocked_ns : 0;
	__u64 r = end->runq_ns > begin->runq_ns ? end->runq_ns - begin->runq_ns : 0;

	if (b > total)
		b = total;
	if (r > total - b)
		r = total - b;
	*blocked = b;
	*runnable = r;
}

#endif
