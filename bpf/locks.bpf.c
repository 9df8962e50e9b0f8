// SPDX-License-Identifier: GPL-2.0
/* Kernel lock contention from lock:contention_begin/end, aggregated per
 * (lock, waiter, waiter's kernel stack). One contention is one wait of one
 * task on one lock: a mutex's begin(MUTEX|SPIN) for optimistic spinning and
 * its later begin(MUTEX) before sleeping are one wait with a spin part and a
 * sleep part. Pure spin waits keep their start per CPU (a spinning task does
 * not leave its CPU, and an interrupt may nest another); the others per task. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "locks.h"

char LICENSE[] SEC("license") = "GPL";

const volatile struct lock_config cfg = {
	.kernel_stacks = 1,
};

struct lock_health health = {};

#include "maps.bpf.h"

/* user space's interval number (interval.h), moved on just before it reads the map; from 1, so that a
 * new entry's zeroed pairs are of no interval */
__u32 ival_epoch SEC(".data.epoch") = 1;
#include "stacks.bpf.h"
#include "sched_state.bpf.h"
#include "task_flags.bpf.h"

extern struct kmem_cache *bpf_get_kmem_cache(__u64 addr) __ksym __weak;

/* A wait in progress. */
struct lock_wait {
	__u64 addr;
	__u64 begin_ns;
	struct sched_mark at_begin; /* the waiter's blocked and run-queue time when it began */
	__u32 flags;
	__u32 kind;
	__u32 owner_pid;
	__u32 active;
	char owner_comm[TASK_COMM_LEN];
	char cache[LOCK_NAME_LEN];
	struct lock_object obj;
};

#define SPIN_NESTING 4

struct spin_waits {
	__u32 depth;
	__u32 pad;
	struct lock_wait w[SPIN_NESTING];
};

/* task -> its sleeping (or mutex-spinning) wait */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct lock_wait);
} task_waits SEC(".maps");

/* CPU -> its nested pure spin waits */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct spin_waits);
} cpu_waits SEC(".maps");

/* lock_key -> cumulative lock_val */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* user space deletes dead threads' entries */
	__uint(max_entries, 65536);
	__type(key, struct lock_key);
	__type(value, struct lock_val);
} locks SEC(".maps");

static __always_inline void name_lock(struct lock_wait *w, struct task_struct *cur, void *lock, __u32 flags)
{
	struct mm_struct *mm = cur->mm;

	w->kind = LOCK_KIND_ADDR;
	w->owner_pid = 0;
	if (mm && (void *)&mm->mmap_lock == lock) {
		w->kind = LOCK_KIND_MMAP;
	} else if (cfg.has_kmem_cache_kfunc && bpf_get_kmem_cache) {
		struct kmem_cache *s = bpf_get_kmem_cache((__u64)lock);

		if (s) {
			w->kind = LOCK_KIND_SLAB;
			bpf_probe_read_kernel_str(w->cache, sizeof(w->cache), BPF_CORE_READ(s, name));
			w->obj.slot_size = BPF_CORE_READ(s, size);
			w->obj.red_left_pad = BPF_CORE_READ(s, red_left_pad);
			w->obj.order = BPF_CORE_READ(s, oo.x) >> 16;
			w->obj.min_order = BPF_CORE_READ(s, min.x) >> 16;
			if (!(flags & LCB_F_SPIN) && (flags & (LCB_F_READ | LCB_F_WRITE))) {
				/* an rwsem in a slab object: were it an inode's i_rwsem, this is the inode */
				struct inode *in = (struct inode *)((__u64)lock - bpf_core_field_offset(struct inode, i_rwsem));

				w->obj.ino = BPF_CORE_READ(in, i_ino);
				w->obj.mode = BPF_CORE_READ(in, i_mode);
				w->obj.dev = BPF_CORE_READ(in, i_sb, s_dev);
			}
		}
	}
	if (flags & LCB_F_MUTEX) {
		/* the owner when we start waiting: the low bits of mutex::owner are flags */
		long owner = BPF_CORE_READ((struct mutex *)lock, owner.counter);
		struct task_struct *t = (struct task_struct *)(owner & ~0x07L);

		if (t) {
			w->owner_pid = BPF_CORE_READ(t, pid);
			bpf_probe_read_kernel_str(w->owner_comm, sizeof(w->owner_comm), t->comm);
		}
	}
}

/* A contention not drawn: its call site from a short walk (SITE_DEPTH frames, BUDGET_SITES[_LONG]), else
 * STACK_NOT_DRAWN. The walk writes the first SITE_DEPTH slots of the shared scratch buffer; the slot after
 * them is zeroed, as a stack's frames end at its first zero (what lies beyond is an earlier walk's). */
static __always_inline __u64 site_stack(void *ctx, struct task_struct *t, __u64 now, __u64 d)
{
	struct stack *buf;
	long len;

	if (!budget_allows(now, d >= SITE_LONG_NS ? BUDGET_SITES_LONG : BUDGET_SITES))
		return STACK_NOT_DRAWN;
	buf = scratch();
	if (!buf)
		return STACK_NOT_DRAWN;
	len = ctx ? bpf_get_stack(ctx, buf, SITE_DEPTH * sizeof(__u64), 0)
		  : bpf_get_task_stack(t, buf, SITE_DEPTH * sizeof(__u64), 0);
	buf->ips[SITE_DEPTH] = 0;
	if (len <= 0)
		return STACK_NOT_DRAWN;
	return intern_stack(buf, len);
}

/* The waiter's stack, walked when the contention ends (the waiter is still inside the lock's
 * slow path, on the same call chain as at its begin) for the contentions drawn by length:
 * p = min(1, d/T), each standing for max(d, T). `ctx` NULL: a task not running (stop). */
static __always_inline __u64 waiter_stack(void *ctx, struct task_struct *t, __u64 now, __u64 d, __u64 *weight,
					  __u64 *var)
{
	struct stack *buf;
	__u64 tscale;

	*weight = *var = 0;
	if (!cfg.kernel_stacks)
		return STACK_NONE;
	if (own_task(t))
		return STACK_OWN;
	if (below_min_stack(d))
		return STACK_SHORT;
	if (!drawn(d, weight, &tscale)) {
		*weight = 0;
		return site_stack(ctx, t, now, d);
	}
	if (!walk_allowed(now)) {
		*weight = 0;
		return STACK_RATE_LIMITED;
	}
	buf = scratch();
	if (!buf) {
		*weight = 0;
		return STACK_FAILED;
	}
	*var = draw_var_us2(d, tscale);
	if (!ctx)
		return intern_stack(buf, bpf_get_task_stack(t, buf, sizeof(*buf), 0));
	return intern_stack(buf, bpf_get_stack(ctx, buf, sizeof(*buf), 0));
}

/* `spin`: a pure spin wait (per CPU): on a CPU throughout, no scheduler marks needed. */
static __always_inline void account(void *ctx, struct lock_wait *w, struct task_struct *cur, __u64 now, bool spin)
{
	struct lock_key key = {
		.addr = w->addr, .start_ns = cur->start_boottime, .pid = cur->pid, .tgid = cur->tgid,
		.flags = w->flags, .kind = w->kind,
	};
	struct lock_val *v, init = {};
	__u64 total = now > w->begin_ns ? now - w->begin_ns : 0;
	__u64 blocked = 0, runnable = 0, weight, var;

	if (!spin) {
		struct sched_mark at_end;

		sched_mark_of(cur, now, &at_end);
		sched_split(&w->at_begin, &at_end, total, &blocked, &runnable);
	}
	key.kstack = waiter_stack(ctx, cur, now, total, &weight, &var);
	__builtin_memcpy(init.cache, w->cache, sizeof(init.cache));
	init.obj = w->obj;
	v = lookup_or_init(&locks, &key, &init, &health.lock_map_full);
	if (!v)
		return;
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->total_ns, total);
	__sync_fetch_and_add(&v->sleep_ns, blocked + runnable);
	__sync_fetch_and_add(&v->spin_ns, total - blocked - runnable);
	__sync_fetch_and_add(&v->blocked_ns, blocked);
	__sync_fetch_and_add(&v->runnable_ns, runnable);
	if (weight) {
		__sync_fetch_and_add(&v->weighted_ns, weight);
		__sync_fetch_and_add(&v->var_us2, var);
	}
	/* the extremes race only between CPUs waiting on one lock from one stack at once; the lost
	 * update is the less extreme value */
	update_ival_extremes(&v->ival, *(volatile __u32 *)&ival_epoch, total);
	if (w->owner_pid) {
		v->owner_pid = w->owner_pid;
		__builtin_memcpy(v->owner_comm, w->owner_comm, TASK_COMM_LEN);
	}
}

static __always_inline bool wanted(struct task_struct *cur)
{
	return !cfg.targ_tgid || cur->tgid == cfg.targ_tgid;
}

/* The depth a new spin wait on `lock` goes to: one of this CPU's that is already waiting on the
 * same lock lost its end (a contention_end that ran while one of our programs ran on this CPU is
 * skipped, a recursion miss): it and all above it are dropped, counted, never charged. */
static __always_inline __u32 stale_above(struct spin_waits *sw, __u64 lock)
{
	__u32 d = sw->depth;
	int i;

	if (d > SPIN_NESTING)
		d = SPIN_NESTING;
	for (i = 0; i < SPIN_NESTING; i++) {
		if (i >= (int)d)
			break;
		if (sw->w[i & (SPIN_NESTING - 1)].addr == lock) {
			__sync_fetch_and_add(&health.spin_stale, d - i);
			sw->depth = i;
			return i;
		}
	}
	return d;
}

SEC("tp_btf/contention_begin")
int BPF_PROG(contention_begin, void *lock, unsigned int flags)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	__u64 now = bpf_ktime_get_ns();
	struct lock_wait *w;

	if (!wanted(cur))
		return 0;
	if ((flags & (LCB_F_SPIN | LCB_F_MUTEX)) == LCB_F_SPIN) {
		__u32 zero = 0, d;
		struct spin_waits *sw = bpf_map_lookup_elem(&cpu_waits, &zero);

		if (!sw)
			return 0;
		d = stale_above(sw, (__u64)lock);
		if (d >= SPIN_NESTING) {
			__sync_fetch_and_add(&health.spin_nesting_overflow, 1);
			return 0;
		}
		w = &sw->w[d & (SPIN_NESTING - 1)];
		sw->depth = d + 1;
	} else {
		w = bpf_task_storage_get(&task_waits, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!w) {
			__sync_fetch_and_add(&health.storage_errors, 1);
			return 0;
		}
		if (w->active && w->addr == (__u64)lock)
			return 0; /* the mutex stops spinning and goes to sleep: same wait */
		sched_mark_of(cur, now, &w->at_begin);
	}
	w->addr = (__u64)lock;
	w->begin_ns = now;
	w->flags = flags;
	w->active = 1;
	w->cache[0] = 0;
	w->owner_comm[0] = 0;
	__builtin_memset(&w->obj, 0, sizeof(w->obj));
	name_lock(w, cur, lock, flags);
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(contention_end, void *lock, int ret)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	__u64 now = bpf_ktime_get_ns();
	struct spin_waits *sw;
	struct lock_wait *w;
	__u32 zero = 0, d;
	int i;

	if (!wanted(cur))
		return 0;
	sw = bpf_map_lookup_elem(&cpu_waits, &zero);
	if (sw) {
		d = sw->depth;
		if (d > SPIN_NESTING)
			d = SPIN_NESTING;
		/* its begin is the innermost wait on this lock; any above it lost their end */
		for (i = SPIN_NESTING - 1; i >= 0; i--) {
			if (i >= (int)d)
				continue;
			w = &sw->w[i & (SPIN_NESTING - 1)];
			if (w->addr != (__u64)lock)
				continue;
			if (i + 1 < (int)d)
				__sync_fetch_and_add(&health.spin_stale, d - i - 1);
			sw->depth = i;
			account(ctx, w, cur, now, true);
			return 0;
		}
	}
	w = bpf_task_storage_get(&task_waits, cur, 0, 0);
	if (w && w->active && w->addr == (__u64)lock) {
		w->active = 0;
		account(ctx, w, cur, now, false);
		return 0;
	}
	__sync_fetch_and_add(&health.unmatched_ends, 1);
	return 0;
}

/* Run once when the recording stops: a wait still in progress is charged up to
 * now, as perf lock contention does, so a thread stuck on a lock for the whole
 * recording is not missing from it. Pure spin waits are bounded (no sleeping
 * while spinning) and are not walked. */
SEC("iter/task")
int charge_open_waits(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct lock_wait *w;

	if (!t)
		return 0;
	w = bpf_task_storage_get(&task_waits, t, 0, 0);
	if (!w || !w->active)
		return 0;
	w->active = 0;
	account(NULL, w, t, bpf_ktime_get_ns(), false);
	__sync_fetch_and_add(&health.open_waits_charged, 1);
	return 0;
}

/* The run queues' locks: a contended rq->__lock is named without a stack walk (per-CPU data, no
 * symbol; its contention point, __schedule or try_to_wake_up, names it only when a stack was walked),
 * and by its CPU. Run once at start, it writes (CPU, lock address) for each per-CPU kernel thread
 * (ksoftirqd/N, migration/N: every CPU has some), its run queue found through its fair-class entity's
 * queue (kernels with fair group scheduling; elsewhere nothing is written and the stacks name it). */
SEC("iter/task")
int rq_locks(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct cfs_rq *cfs;
	struct rq *rq;
	__u64 rec[2];

	if (!t || !(t->flags & PF_KTHREAD) || t->nr_cpus_allowed != 1)
		return 0;
	if (!bpf_core_field_exists(t->se.cfs_rq) || !bpf_core_field_exists(struct cfs_rq, rq))
		return 0;
	cfs = BPF_CORE_READ(t, se.cfs_rq);
	rq = cfs ? BPF_CORE_READ(cfs, rq) : NULL;
	if (!rq)
		return 0;
	rec[0] = BPF_CORE_READ(rq, cpu);
	rec[1] = (__u64)rq + bpf_core_field_offset(struct rq, __lock);
	bpf_seq_write(ctx->meta->seq, rec, sizeof(rec));
	return 0;
}
