// SPDX-License-Identifier: GPL-2.0
/* Scheduler probes: off-CPU time with stacks, run-queue wait, wakers, switch
 * counts and migrations, aggregated in the kernel and drained by user space
 * once per interval. All aggregate maps are cumulative: user space takes
 * deltas, so a drain never races with an update and nothing is lost. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sched.h"

#define TASK_RUNNING 0
#define TASK_DEAD 0x80
#define TASK_WAKING 0x200
#define TASK_NEW 0x800
/* the states a task sleeps in: INTERRUPTIBLE, UNINTERRUPTIBLE, __TASK_STOPPED, __TASK_TRACED */
#define TASK_BLOCKED_STATES 0xf
#define EXIT_DEAD 0x10
#define STATE_MASK 0xfff
#include "task_flags.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile struct sched_config cfg = {
	.nr_cpus = 1,
	.user_stacks = 1,
	.kernel_stacks = 1,
	.waker_stacks = 1,
	.thread_size = 16384,
};

struct sched_health health = {};

#include "maps.bpf.h"

#define WRITE_ONCE_U32(x, v) (*(volatile __u32 *)&(x) = (v))
#include "stacks.bpf.h"
#include "why.bpf.h"

/* Per task: cumulative task_stats and the task's scratch state, in the task's
 * own storage. A hash lookup cost several cache misses on every switch under a
 * busy scheduler; task storage is reached from the task_struct the tracepoint
 * already holds. User space reads it through the dump_tasks iterator, once per
 * interval; entries go with their task. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_stats);
} task_stats SEC(".maps");

/* task_key -> the entry of a task at its final switch-out, kept until user
 * space has read it and deletes it (the task and its storage may be gone). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* user space deletes: freed after RCU, never reused under a running program */
	__uint(max_entries, 32768);
	__type(key, struct task_key);
	__type(value, struct task_stats);
} task_final SEC(".maps");

/* Per-CPU buffers a new task_stats entry is built in (too large for the BPF stack), one for each level
 * of nesting on a CPU: a wakeup in an interrupt that makes another task's entry while this CPU is making
 * one (the task dump, which runs preemptible; a task's exit) builds it in the next buffer, not over the
 * one being built. With one buffer, a kworker's entry ended up in the storage of a thread the dump found
 * asleep (2 runs in 8 with 10,000 sleeping threads: its switches went negative; none in 10 since).
 * Tracepoint programs run to their end without being preempted: the levels are given back in order. */
#define INIT_LEVELS 4
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, INIT_LEVELS);
	__type(key, __u32);
	__type(value, struct task_stats);
} stats_init SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stats_init_level SEC(".maps");

/* all zeros, never written: what a new entry starts from (too large for an inlined memset) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct task_stats);
} stats_zero SEC(".maps");

/* offcpu_key -> cumulative off-CPU time by stacks and state */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* user space deletes: freed after RCU, never reused under a running program */
	__uint(max_entries, 65536);
	__type(key, struct offcpu_key);
	__type(value, struct offcpu_val);
} offcpu SEC(".maps");

/* waker_key -> cumulative wakeups and the off-CPU time they ended */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* user space deletes: freed after RCU, never reused under a running program */
	__uint(max_entries, 32768);
	__type(key, struct waker_key);
	__type(value, struct waker_val);
} wakers SEC(".maps");


/* keep the dump's record types in the object's BTF, where the ABI test finds them */
const struct open_wait *unused_open_wait __attribute__((unused));
const struct dump_header *unused_dump_header __attribute__((unused));

/* orig_cpu * nr_cpus + dest_cpu -> migrations; resized to nr_cpus^2 before load */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} migration_matrix SEC(".maps");

/* Non-zero while migrations are not counted: outside the recorded intervals, from before the
 * set-up drain's dump (user space writes it once the maps are made) until that drain has read
 * the matrix, and from just before the final drain. The matrix and the tasks' counts are read
 * at two instants: a migration between them would be in one only, and at the recording's two
 * ends nothing follows to even it out. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} migrations_off SEC(".maps");

/* Children's switch totals a process had folded into its rusage (signal->cnvcsw,
 * cnivcsw) when each of its last REAPER_MARKS do_wait() calls began: tgid -> ring.
 * A parent reaping in a tight loop takes a few microseconds a child while a
 * zombie may wait hundreds in the run queue for its last switch: keep many. */
#define REAPER_MARKS 128

struct reaper_marks {
	__u64 cnvcsw[REAPER_MARKS];
	__u64 cnivcsw[REAPER_MARKS];
	__u64 cmin_flt[REAPER_MARKS]; /* children's minor faults: a per-child signature */
	__u64 ctime[REAPER_MARKS]; /* children's CPU time (cutime + cstime, ns): which matching step is whose */
	__u32 target[REAPER_MARKS]; /* the pid that do_wait() waited for, 0 for any child */
	__u32 next; /* slot of the next mark; marks are next-REAPER_MARKS .. next-1 */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024); /* processes that wait for children: ~4.5 KiB each */
	__type(key, __u32);
	__type(value, struct reaper_marks);
} reaper_marks SEC(".maps");

/* What a process's dead non-leader threads had when they released themselves
 * (folded into signal->nvcsw then): tgid -> counters. Needed once the leader
 * is released too, as __exit_signal() then folds the leader in as well. */
struct thread_totals {
	__u64 nvcsw;
	__u64 nivcsw;
	__u64 min_flt;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct thread_totals);
} dead_threads SEC(".maps");

/* an all-zero reaper_marks to create entries from (too large for the BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct reaper_marks);
} reaper_marks_zero SEC(".maps");



/* [0]: the instant (CLOCK_MONOTONIC) of the task dump being read, set by user space just
 * before it and taken as the interval's end: every wait in progress is charged up to it.
 * Charged to "now" instead, a task the dump reached late was charged the dump's length
 * more than the interval held (40 ms over 1 s with 20,000 threads). [1]: the previous
 * dump's instant, whose waits still in progress may be carried on (dump_tasks); 0: none
 * is, every wait in progress is written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} dump_clock SEC(".maps");

/* per CPU, the run-queue waits that ended there (a waiter's CPU is the one it runs on at the end, as
 * schedstat counts it); user space reads each CPU's */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_runq);
} runq_by_cpu SEC(".maps");

/* per-CPU context switch count */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cs_count SEC(".maps");

static __always_inline bool wanted(struct task_struct *p)
{
	if (p->pid == 0)
		return false;
	return !cfg.targ_tgid || p->tgid == cfg.targ_tgid;
}

static __always_inline __u32 log2_slot(__u64 v)
{
	return log2_of(v, RUNQ_SLOTS);
}




/* schedstat's run-queue wait (sched_info.run_delay), 0 without CONFIG_SCHED_INFO.
 * A direct CO-RE load: tp_btf task pointers need no probe-read helper call. */
static __always_inline __u64 run_delay_of(struct task_struct *p)
{
	if (bpf_core_field_exists(p->sched_info))
		return p->sched_info.run_delay;
	return 0;
}

/* Tasks asleep since before attach whose first wakeup (or the migration before it) could
 * not make their storage: task_key -> what it would have recorded, until the entry is
 * made (at the latest at the task's switch-in). Those events run in the interrupt that
 * woke the task (a timer), where the kernel refuses to create task storage while that
 * CPU is inside a task-storage call (its per-CPU recursion guard: the task dump, a lock
 * or futex probe, another BPF tool), and its allocator may have nothing at hand. The
 * first timer wakeups of 20,000 sleeping threads met this 50 to 650 times in a few
 * seconds here (a third to all of them while the task dump's own call was interrupted).
 * In sched_switch nothing holds it: the entry is made there, its run-queue wait kept. */
struct deferred_first {
	__u64 woken_ns;   /* the first wakeup's time, 0 if none came yet */
	__u64 migrations; /* migrations before it (a wakeup may move the task first) */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct task_key);
	__type(value, struct deferred_first);
} deferred_wakeups SEC(".maps");

/* A first event of a task asleep since before attach, kept for its switch-in (above);
 * false when it could not be kept either (counted as lost). */
static __always_inline bool defer_first(struct task_struct *p, __u64 woken_ns, __u64 migrations)
{
	struct task_key key = { .pid = p->pid, .start_ns = p->start_boottime };
	struct deferred_first init = {}, *d;

	d = bpf_map_lookup_elem(&deferred_wakeups, &key);
	if (!d) {
		bpf_map_update_elem(&deferred_wakeups, &key, &init, BPF_NOEXIST);
		d = bpf_map_lookup_elem(&deferred_wakeups, &key);
		if (!d)
			return false;
	}
	if (woken_ns)
		d->woken_ns = woken_ns;
	__sync_fetch_and_add(&d->migrations, migrations);
	return true;
}

/* The entry was made: what was kept for it goes in. Its wakeup's run-queue wait is timed
 * from the wakeup unless the task already ran (then it is over, and counted in run_delay). */
static __always_inline void take_deferred(struct task_struct *p, struct task_stats *s, int running)
{
	struct task_key key = { .pid = p->pid, .start_ns = p->start_boottime };
	struct deferred_first *d = bpf_map_lookup_elem(&deferred_wakeups, &key);

	if (!d)
		return;
	__sync_fetch_and_add(&s->migrations, __sync_lock_test_and_set(&d->migrations, 0));
	if (d->woken_ns && !running) {
		s->runq_ts = d->woken_ns;
		s->runq_from_wakeup = 1;
	}
	bpf_map_delete_elem(&deferred_wakeups, &key);
}

/* The entry of `p` made from `init` (this CPU's buffer at its level): NULL when the kernel could not. */
static __always_inline struct task_stats *build_stats(struct task_struct *p, struct task_stats *init,
						      struct task_stats *zeros, int running_switch, bool voluntary)
{
	bpf_probe_read_kernel(init, sizeof(*init), zeros);
	init->tgid = p->tgid;
	init->ptgid = p->real_parent ? p->real_parent->tgid : 0;
	init->nvcsw = init->nvcsw_base = p->nvcsw;
	init->nivcsw = init->nivcsw_base = p->nivcsw;
	init->flags = TS_BASE_EXACT;
	init->run_delay = init->run_delay_base = run_delay_of(p);
	init->run_ns = init->run_base = p->se.sum_exec_runtime;
	init->policy = p->policy;
	init->nice = p->static_prio - 120;
	init->rt_priority = p->rt_priority;
	if (!bpf_core_field_exists(p->sched_info))
		init->flags |= TS_NO_SCHED_INFO;
	if (running_switch) {
		/* The counters include the switch being traced; which one was
		 * incremented is decided by the kernel's own predicate, which the
		 * tracepoint cannot show exactly (6.14+ reports a signal-pending
		 * block as RUNNING): the baseline is marked as derived. */
		if (voluntary)
			init->nvcsw_base--;
		else
			init->nivcsw_base--;
		init->flags = TS_BASE_GUESSED;
	}
	__builtin_memcpy(init->comm, p->comm, TASK_COMM_LEN);
	init->changed = 1;
	return bpf_task_storage_get(&task_stats, p, init, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* Stats entry of a task, created on first sight with its switch-counter baseline.
 * `running_switch` is set when called at the task's own switch-out, where the
 * counters already include this switch. */
static __always_inline struct task_stats *make_stats(struct task_struct *p, int running_switch,
						     bool voluntary, bool count_failure)
{
	struct task_stats *s, *init, *zeros;
	__u32 zero = 0, *level, at;

	s = bpf_task_storage_get(&task_stats, p, 0, 0);
	if (s)
		return s;
	level = bpf_map_lookup_elem(&stats_init_level, &zero);
	zeros = bpf_map_lookup_elem(&stats_zero, &zero);
	if (!level || !zeros)
		return NULL;
	at = __sync_fetch_and_add(level, 1);
	init = at < INIT_LEVELS ? bpf_map_lookup_elem(&stats_init, &at) : NULL;
	if (!init) {
		__sync_fetch_and_sub(level, 1);
		if (count_failure)
			__sync_fetch_and_add(&health.storage_errors, 1);
		return NULL;
	}
	s = build_stats(p, init, zeros, running_switch, voluntary);
	__sync_fetch_and_sub(level, 1);
	if (!s) {
		/* another CPU made it meanwhile: its make_stats took what was kept */
		s = bpf_task_storage_get(&task_stats, p, 0, 0);
		if (s)
			return s;
		if (count_failure)
			__sync_fetch_and_add(&health.storage_errors, 1);
		return NULL;
	}
	take_deferred(p, s, running_switch);
	return s;
}

static __always_inline struct task_stats *stats_of(struct task_struct *p, int running_switch,
						   bool voluntary)
{
	return make_stats(p, running_switch, voluntary, true);
}

/* The task's entry if it has one: events other than a switch-out never create it
 * (a task first seen waking or being switched in has no wait to end). */
static __always_inline struct task_stats *stats_if_seen(struct task_struct *p)
{
	return bpf_task_storage_get(&task_stats, p, 0, 0);
}

/* An event changed the entry's totals: the next dump reads it. Set after the
 * writes, so a dump that clears the mark before copying never misses them. */
static __always_inline void mark_changed(struct task_stats *s)
{
	asm volatile("" ::: "memory");
	WRITE_ONCE_U32(s->changed, 1);
}

/* from 1, so that a new entry's zeroed pairs are of no interval (interval.h) */
struct max_epoch max_epoch SEC(".data.epoch") = { .offcpu = 1, .task = 1 };

static __always_inline void add_dead_thread(__u32 tgid, struct task_stats *s, __u64 min_flt)
{
	struct thread_totals *dt, zero = {};

	dt = bpf_map_lookup_elem(&dead_threads, &tgid);
	if (!dt) {
		bpf_map_update_elem(&dead_threads, &tgid, &zero, BPF_NOEXIST);
		dt = bpf_map_lookup_elem(&dead_threads, &tgid);
		if (!dt)
			return;
	}
	/* the counters as release_task() folded them (see on_switch_out) */
	__sync_fetch_and_add(&dt->nvcsw, s->nvcsw);
	__sync_fetch_and_add(&dt->nivcsw, s->nivcsw);
	__sync_fetch_and_add(&dt->min_flt, min_flt);
}

/* The last switch of a process leader whose parent has already claimed it
 * (EXIT_DEAD): whether the parent's rusage includes this switch depends on
 * whether its read of our counters came before or after their increment,
 * which the kernel does not order. The parent's children totals change only
 * when it reaps, one child per do_wait(), and sched_process_wait marks them
 * as each do_wait() begins. The step between two consecutive marks (or the
 * last mark and now) that equals our contribution, with or without this
 * switch, is the reap of us, and says which the parent read. Unchanged since
 * the last mark, with our sighand not yet released: the parent reads later
 * and sees this switch.
 *
 * Alike children (hackbench's senders) can have the same minor faults and
 * switch counts one apart, so another child's step often matches too (in 4
 * of 5 runs of hackbench -g 10, 2.6 us to 0.3 ms away): of the matching steps,
 * ours is the one whose CPU time (the step in the parent's cutime + cstime,
 * our group's run time when it read) is nearest ours now, which was exactly
 * ours in each of 16 reaps measured. Two matches that say different things,
 * both that near, are counted (reap_ambiguous); the nearer is taken. */
#define REAP_NEAR_NS 1000ULL

/* One step of the scan below, a bpf_loop() callback (verified once, not once per step) */
struct reap_scan {
	struct reaper_marks *m;
	__u64 prev_v, prev_iv, prev_flt, prev_rt; /* the parent's totals at the newer end of the step */
	__u64 want_v, want_iv, own_flt, own_rt;  /* ours with this switch; our minor faults, our run time */
	__u64 near[2]; /* the nearest matching step in CPU time read after, and before, this switch */
	__u32 pid;
	__u32 found;   /* set by a waitpid() of our pid: 1 read after, 2 before, 3 ours but no match */
};

static long reap_step(__u32 index, void *ctx)
{
	struct reap_scan *sc = ctx;
	struct reaper_marks *m = sc->m;
	__u32 slot = (m->next + REAPER_MARKS - 1 - index) % REAPER_MARKS, target, f = 0;
	__u64 step_v, step_iv, step_flt, step_rt, gap;

	slot &= REAPER_MARKS - 1;
	step_v = sc->prev_v - m->cnvcsw[slot];
	step_iv = sc->prev_iv - m->cnivcsw[slot];
	step_flt = sc->prev_flt - m->cmin_flt[slot];
	step_rt = sc->prev_rt - m->ctime[slot];
	target = m->target[slot];
	sc->prev_v = m->cnvcsw[slot];
	sc->prev_iv = m->cnivcsw[slot];
	sc->prev_flt = m->cmin_flt[slot];
	sc->prev_rt = m->ctime[slot];
	if ((target && target != sc->pid) || step_flt != sc->own_flt)
		return 0;
	if (step_iv == sc->want_iv && step_v == sc->want_v)
		f = 1; /* read after this switch */
	else if (step_iv == sc->want_iv && step_v + 1 == sc->want_v)
		f = 2; /* read before it */
	if (target) { /* our reap for certain */
		sc->found = f ? f : 3;
		return 1;
	}
	if (!f)
		return 0;
	gap = step_rt > sc->own_rt ? step_rt - sc->own_rt : sc->own_rt - step_rt;
	if (gap < sc->near[f - 1])
		sc->near[f - 1] = gap;
	return 0;
}

static __always_inline void final_switch_of_reaped_leader(struct task_struct *prev, struct task_stats *s)
{
	struct task_struct *parent = prev->real_parent;
	struct reap_scan sc = { .near = { ~0ULL, ~0ULL } };
	struct reaper_marks *m;
	__u64 own_v, own_iv;
	__u32 ptgid, slot, found;

	s->nvcsw = prev->nvcsw;
	s->nivcsw = prev->nivcsw;
	if (!parent)
		goto unresolved;
	ptgid = parent->tgid;
	m = bpf_map_lookup_elem(&reaper_marks, &ptgid);
	if (!m)
		goto unresolved;
	/* What the parent adds for us besides our own counters: our dead threads
	 * and reaped children. Before our release signal->nvcsw holds exactly the
	 * dead threads; after it, __exit_signal() has added us too. */
	own_v = prev->signal->cnvcsw;
	own_iv = prev->signal->cnivcsw;
	/* minor faults stop at exit_mm(): the parent's step for us holds exactly these */
	sc.own_flt = prev->signal->cmin_flt + prev->min_flt;
	/* run time: our reaped children's, our dead threads' (and ours, once released), ours so far */
	sc.own_rt = prev->signal->cutime + prev->signal->cstime + prev->signal->sum_sched_runtime;
	if (prev->sighand) {
		own_v += prev->signal->nvcsw;
		own_iv += prev->signal->nivcsw;
		sc.own_flt += prev->signal->min_flt;
		sc.own_rt += prev->se.sum_exec_runtime;
	} else {
		__u32 tgid = prev->tgid;
		struct thread_totals *dt = bpf_map_lookup_elem(&dead_threads, &tgid);

		if (dt) {
			own_v += dt->nvcsw;
			own_iv += dt->nivcsw;
			sc.own_flt += dt->min_flt;
		}
	}
	slot = (m->next + REAPER_MARKS - 1) % REAPER_MARKS;
	if (parent->signal->cnvcsw == m->cnvcsw[slot & (REAPER_MARKS - 1)] &&
	    parent->signal->cnivcsw == m->cnivcsw[slot & (REAPER_MARKS - 1)] && prev->sighand) {
		__sync_fetch_and_add(&health.reap_pending, 1);
		return;
	}
	/* Every step, newest first: now - last mark, then between older marks. A
	 * do_wait() that waited for our pid is ours for certain (most reapers call
	 * waitpid(pid)); of waits on any child, the matching step nearest in time. */
	sc.m = m;
	sc.pid = prev->pid;
	sc.want_v = own_v + s->nvcsw;
	sc.want_iv = own_iv + s->nivcsw;
	sc.prev_v = parent->signal->cnvcsw;
	sc.prev_iv = parent->signal->cnivcsw;
	sc.prev_flt = parent->signal->cmin_flt;
	sc.prev_rt = parent->signal->cutime + parent->signal->cstime;
	bpf_loop(REAPER_MARKS, reap_step, &sc, 0);
	found = sc.found;
	if (found == 3)
		goto unresolved; /* our reap, yet no match */
	if (!found && (sc.near[0] != ~0ULL || sc.near[1] != ~0ULL)) {
		found = sc.near[0] <= sc.near[1] ? 1 : 2;
		if (sc.near[0] < REAP_NEAR_NS && sc.near[1] < REAP_NEAR_NS)
			__sync_fetch_and_add(&health.reap_ambiguous, 1);
	}
	if (!found)
		goto unresolved;
	if (found == 2)
		s->nvcsw -= 1;
	s->flags |= TS_REAP_RESOLVED;
	__sync_fetch_and_add(found == 1 ? &health.reap_exact : &health.reap_after_read, 1);
	return;
unresolved:
	/* No step matches (the reap is older than the marks kept, or threads of
	 * the parent reaped at once, or we were preempted after the read): the
	 * switch stays counted, and the count says how often that happened. */
	__sync_fetch_and_add(&health.reap_unresolved, 1);
}

/* The wait that began at block_ts ends now: `m` is how far a dump had charged it. The
 * task's totals take the rest; the wait's key is charged at the switch-in. */
static __always_inline __u64 close_wait(struct task_stats *s, __u64 now, __u64 m, __u32 woke)
{
	__u64 bt = s->block_ts, d, rest = now > m ? now - m : 0;

	if (!bt || bt > m) {
		/* the mark without its wait's start (never expected; counted): only what is known */
		__sync_fetch_and_add(&health.close_without_start, 1);
		bt = m;
	}
	d = now > bt ? now - bt : 0;

	if (rest > d)
		rest = d;
	s->block_ts = 0;
	s->woken = 1;
	s->woke = woke;
	s->pending_ns = d;
	s->pending_rest = rest;
	s->last_block_ts = bt;
	s->last_woken_ts = now;
	__sync_fetch_and_add(&s->offcpu_ns, rest);
	__sync_fetch_and_add(&s->offcpu_count, 1);
	update_ival_extremes(&s->offcpu_ival, *(volatile __u32 *)&max_epoch.task, d);
	mark_changed(s);
	return d;
}

static __always_inline void close_unseen_wait(struct task_stats *s, struct task_struct *prev, __u64 m, __u64 now);
static __always_inline void close_unseen_switch_in(struct task_stats *s, struct task_struct *prev, __u64 now);

static __always_inline void on_switch_out(void *ctx, bool preempt, struct task_struct *prev,
					  unsigned int prev_state, __u64 now)
{
	struct task_stats *s;
	bool voluntary = !preempt && prev_state != TASK_RUNNING;

	s = stats_of(prev, 1, voluntary);
	if (!s)
		return;
	if (s->mark) {
		/* running, so not blocked: a wait whose wakeup and switch-in no program saw
		 * (now and then the kernel runs no program for a tracepoint's event: a few a
		 * minute under hackbench or stress-ng's dir stressor). Counted, and closed
		 * from the kernel's own counters (close_unseen_wait) */
		__u64 m = __sync_lock_test_and_set(&s->mark, 0);

		if (m) {
			__sync_fetch_and_add(&health.switch_out_open, 1);
			close_unseen_wait(s, prev, m, now);
		}
	}
	if (s->pending_ns || s->runq_ts)
		close_unseen_switch_in(s, prev, now);
	{
		/* Both counters were incremented before the tracepoint: read them
		 * rather than re-derive the kernel's voluntary/involuntary rule.
		 * A thread that is not its process's leader sets EXIT_DEAD and
		 * releases itself (release_task() folds its counts into the
		 * process's rusage) before its last switches, so the kernel never
		 * counts those: neither do we. A leader is reaped by its parent:
		 * see final_switch_of_reaped_leader(). */
		if (!(prev->exit_state & EXIT_DEAD)) {
			s->nvcsw = prev->nvcsw;
			s->nivcsw = prev->nivcsw;
			/* schedstat's run_delay, updated at the task's last arrival; its
			 * clock skips the update after a wakeup preemption
			 * (rq_clock_skip_update), so it can be lower than runq_ns.
			 * Like the switch counts, it stops once the task is released. */
			s->run_delay = run_delay_of(prev);
		} else if (prev->pid == prev->tgid && (prev_state & TASK_DEAD)) {
			final_switch_of_reaped_leader(prev, s);
		} else if (prev->pid == prev->tgid) {
			s->nvcsw = prev->nvcsw;
			s->nivcsw = prev->nivcsw;
		}
		if (cfg.comm_at_switch)
			__builtin_memcpy(s->comm, prev->comm, TASK_COMM_LEN);
		if (prev_state & TASK_DEAD) {
			struct task_key key = { .pid = prev->pid, .start_ns = prev->start_boottime };

			if (prev->pid != prev->tgid)
				add_dead_thread(prev->tgid, s, prev->min_flt);
			/* The entry's last state goes where user space reads it a final
			 * time and deletes it; the dump skips it from now on. */
			s->flags |= TS_DEAD;
			s->changed = 0;
			if (bpf_map_update_elem(&task_final, &key, s, BPF_ANY) == -E2BIG)
				__sync_fetch_and_add(&health.task_map_full, 1);
			return;
		}
	}

	/* the previous wait's waking was never seen (a program recursion miss): closed at the
	 * switch-in that followed it, so nothing is left open here */
	s->block_ts = 0;
	s->runq_ts = 0;
	s->pending_ns = 0;
	s->woken = 0;
	s->run_ns = prev->se.sum_exec_runtime;
	s->policy = prev->policy;
	s->nice = prev->static_prio - 120;
	s->rt_priority = prev->rt_priority;
	/* schedstat's run_delay re-queues the task only if task_is_running(prev);
	 * a task preempted with a sleeping state accrues neither wait. */
	if (prev->__state == TASK_RUNNING) {
		s->runq_ts = now;
		s->runq_from_wakeup = 0;
	} else if (prev->__state & TASK_WAKING) {
		/* Dequeued, then woken before this tracepoint: a block of ~0 ns that
		 * the kernel counts as voluntary. sched_waking has passed; the
		 * coming sched_wakeup starts its run-queue wait. */
		s->woken = 1;
		__sync_fetch_and_add(&s->offcpu_count, 1);
	} else if (!preempt) {
		s->block_ts = now;
		s->state = prev_state & STATE_MASK;
		s->kstack_open = 0;
		s->draw_ns = 0;
		wait_evidence(s, prev);
		s->ustack = STACK_NONE;
		if (cfg.user_stacks && prev->mm) {
			struct stack *buf = scratch();

			/* Taken now or never (another task's user stack cannot be walked), before the
			 * wait's length is known: from a budget of its own, so that user stacks of
			 * short waits never spend the walks kept for the long ones. */
			if (own_task(prev))
				s->ustack = STACK_OWN;
			else if (!budget_allows(now, BUDGET_USER))
				s->ustack = STACK_RATE_LIMITED;
			else if (buf)
				s->ustack = intern_stack(buf, bpf_get_stack(ctx, buf, sizeof(*buf), BPF_F_USER_STACK));
		}
		/* last: a dump that sees the mark finds the wait's key complete */
		asm volatile("" ::: "memory");
		*(volatile __u64 *)&s->mark = now;
	}
	mark_changed(s);
}

/* The task's own slot for waits without stacks under this key, claimed on
 * first use; NULL when every slot holds another key (the offcpu map then).
 * Most waits have no stack walked (the walk budget is spent, or the wait was
 * short): kept here, they cost no hash lookup. Only the task's own switch-in
 * writes its slots, and a slot keeps its key for the task's life, so a key is
 * either in a slot or in the map, never both. */
static __always_inline struct offcpu_val *own_slot(struct task_stats *s, const struct offcpu_key *key)
{
	int i;

	for (i = 0; i < TASK_OFFCPU_SLOTS; i++) {
		struct offcpu_slot *sl = &s->slots[i];

		if (!sl->used) {
			sl->kstack = key->kstack;
			sl->ustack = key->ustack;
			sl->state = key->state;
			sl->why = key->why;
			sl->func = key->func;
			asm volatile("" ::: "memory");
			WRITE_ONCE_U32(sl->used, 1);
			return &sl->val;
		}
		if (sl->kstack == key->kstack && sl->ustack == key->ustack && sl->state == key->state &&
		    sl->why == key->why && sl->func == key->func)
			return &sl->val;
	}
	return NULL;
}

/* The wait that ended charged to its key (made by charge_wait), with its stack's weight: the task's own slot for
 * it or the offcpu map's entry, and the task's recent waits. A function of its own (global, not inlined): the
 * verifier checks it once, where inlined it was checked again for each of the many ways a switch reaches a
 * charge (most of sched_switch's verification). */
__noinline int charge_key(struct task_stats *s, struct offcpu_key *key, __u64 weight, __u64 now)
{
	struct offcpu_val *v = NULL, init = {};
	__u64 d, t;
	__u32 slot, epoch;

	if (!s || !key)
		return 0;
	d = s->pending_ns;
	t = s->draw_ns;
	s->pending_ns = 0;
	if (key->kstack < STACK_ID_MIN && key->ustack < STACK_ID_MIN)
		v = own_slot(s, key);
	if (v) {
		epoch = *(volatile __u32 *)&max_epoch.task;  /* a slot: read with the task dump */
	} else {
		epoch = *(volatile __u32 *)&max_epoch.offcpu;
		v = lookup_or_init(&offcpu, key, &init, &health.offcpu_map_full);
	}
	/* the next link of wait chains through this task's wakeups of others */
	{
		struct recent_wait *r = &s->recent[s->recent_next & (RECENT_WAITS - 1)];

		r->block_ts = s->last_block_ts;
		r->woken_ts = s->last_woken_ts;
		r->run_ts = now;
		r->func = key->func;
		r->state = key->state;
		r->why = key->why;
		s->recent_next++;
	}
	if (!v)
		return 0;
	/* plain adds: a key holds one task's waits, and only its own switch-in writes them (a task
	 * runs on one CPU at a time); user space only reads. A locked add cost ~10 ns each here. */
	v->count += 1;
	v->total_ns += d;
	v->charged_ns += s->pending_rest;
	if (weight) {
		v->weighted_ns += weight;
		if (!s->kstack_open)
			v->var_us2 += draw_var_us2(d, t);
	}
	if (s->woke < 3)
		v->woken[s->woke & 3] += 1;
	update_ival_extremes(&v->ival, epoch, d);
	slot = log2_slot(d);
	if (slot < RUNQ_SLOTS)
		v->hist[slot] += 1;
	return 0;
}

/* The wait that ended at the task's wakeup, charged at its switch-in to its
 * kernel stack (walked now if the wait was drawn, unless a dump walked it while
 * it went on), its user stack (taken at the switch-out), its state and why. */
static __always_inline void charge_wait(struct task_stats *s, struct task_struct *next, __u64 now)
{
	struct offcpu_key key = {
		.pid = next->pid, .tgid = next->tgid, .start_ns = next->start_boottime,
		.ustack = s->ustack, .state = s->state, .why = s->why, .func = s->func,
	};
	__u64 d = s->pending_ns, t = s->draw_ns, weight = 0;

	if (cfg.kernel_stacks) {
		struct stack *buf = scratch();

		/* The task is switched out, so its saved stack is stable and
		 * shows where it slept; walking it only for the waits drawn
		 * (by their length) keeps the common short switch cheap. */
		if (s->kstack_open)
			key.kstack = s->kstack_open;
		else if (below_min_stack(d))
			key.kstack = STACK_SHORT;
		else if (own_task(next))
			key.kstack = STACK_OWN;
		else if (s->no_walk)
			key.kstack = s->no_walk;
		else if (buf)
			key.kstack = intern_stack(buf, bpf_get_task_stack(next, buf, sizeof(*buf), 0));
		if (key.kstack >= STACK_ID_MIN)
			weight = s->kstack_open ? d : (d > t ? d : t);
	}
	charge_key(s, &key, weight, now);
}

/* A run-queue wait of d ns ended: the task's totals, its interval's extremes, and (after a wakeup, as
 * schedstat's latency counts them) its histogram */
static __always_inline void add_runq_wait(struct task_stats *s, __u64 d, bool from_wakeup)
{
	__u32 slot, zero = 0;
	struct cpu_runq *c = bpf_map_lookup_elem(&runq_by_cpu, &zero); /* this CPU's: plain adds */

	__sync_fetch_and_add(&s->runq_ns, d);
	__sync_fetch_and_add(&s->runq_count, 1);
	if (c) {
		c->ns += d;
		c->count += 1;
	}
	update_ival_extremes(&s->runq_ival, *(volatile __u32 *)&max_epoch.task, d);
	if (from_wakeup) {
		slot = log2_slot(d);
		if (slot < RUNQ_SLOTS)
			__sync_fetch_and_add(&s->runq_hist[slot], 1);
	}
}

/* A wait still open at the task's next switch-out: its wakeup and switch-in were not traced. What the task
 * did since the switch-out that opened it is in the kernel's own counters: it ran (se.sum_exec_runtime)
 * and waited in a run queue (schedstat's run_delay), and was blocked the rest of the time. The wait ends
 * where that run-queue wait began; the run-queue wait is counted as a wakeup's. The wait's key has no
 * stack (the task runs elsewhere in its code now) and no waker. Without schedstat (no run_delay) the
 * run-queue wait is counted as blocked; counters that went back (an entry made since) close nothing. */
static __always_inline void close_unseen_wait(struct task_stats *s, struct task_struct *prev, __u64 m, __u64 now)
{
	__u64 exec = prev->se.sum_exec_runtime, delay = run_delay_of(prev), ran, queued, end;

	if (!s->block_ts || !s->run_ns || exec < s->run_ns || delay < s->run_delay)
		return;
	ran = exec - s->run_ns;
	queued = delay - s->run_delay;
	if (now < s->block_ts + ran + queued)
		return;
	end = now - ran - queued;
	if (end < m) /* a dump charged the wait past where it ended: what it charged stays */
		end = m;
	close_wait(s, end, m, WOKE_TASK);
	s->no_walk = STACK_NOT_DRAWN;
	charge_wait(s, prev, now);
	s->woken = 0;
	if (queued)
		add_runq_wait(s, queued, true);
	__sync_fetch_and_add(&health.switch_out_closed, 1);
}

/* It ran, yet no switch-in closed what its wakeup began: the kernel did not trace that switch-in (none for
 * some switches out of an idle task). Counted, and closed here: the wait is charged to its key (its cause;
 * its stack only if a dump walked it while it lasted: the task runs elsewhere in its code now), and the
 * run-queue wait from its wakeup (or its preemption) ends where the task came in, which is now less the
 * run time since its last switch-out (all of it after that switch-in). */
static __always_inline void close_unseen_switch_in(struct task_stats *s, struct task_struct *prev, __u64 now)
{
	__u64 exec = prev->se.sum_exec_runtime, in;

	if (s->pending_ns) {
		__sync_fetch_and_add(&health.switch_in_unseen, 1);
		s->no_walk = STACK_NOT_DRAWN;
		charge_wait(s, prev, now);
	}
	if (!s->runq_ts)
		return;
	__sync_fetch_and_add(&health.runq_unseen, 1);
	if (!s->run_ns || exec < s->run_ns || now < exec - s->run_ns)
		return;
	in = now - (exec - s->run_ns);
	if (in <= s->runq_ts)
		return;
	add_runq_wait(s, in - s->runq_ts, s->runq_from_wakeup);
	__sync_fetch_and_add(&health.runq_closed, 1);
}

static __always_inline void on_switch_in(struct task_struct *next, __u64 now)
{
	struct task_stats *s;

	s = stats_if_seen(next);
	if (!s) {
		struct task_key key = { .pid = next->pid, .start_ns = next->start_boottime };

		if (!bpf_map_lookup_elem(&deferred_wakeups, &key))
			return;
		/* made before the kernel adds this run-queue wait to run_delay (after the tracepoint),
		 * its wakeup's time and migrations taken from what was kept */
		s = stats_of(next, 0, false);
		if (!s)
			return;
	}
	if (s->mark) {
		/* runs again, yet its wakeup found no wait: the waker on another CPU ran
		 * sched_waking between this task's dequeue and its own switch-out program
		 * (try_to_wake_up() of a task still on its CPU). The wait ends here, its
		 * run-queue wait counted as blocked (a few microseconds, rare) */
		__u64 m = __sync_lock_test_and_set(&s->mark, 0);

		if (m) {
			__sync_fetch_and_add(&health.waking_raced, 1);
			close_wait(s, now, m, WOKE_TASK);
			s->no_walk = STACK_NOT_DRAWN;
		}
	}
	if (s->runq_ts && now > s->runq_ts)
		add_runq_wait(s, now - s->runq_ts, s->runq_from_wakeup);
	s->runq_ts = 0;
	s->runq_from_wakeup = 0;
	if (s->pending_ns)
		charge_wait(s, next, now);
	mark_changed(s);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0;
	__u64 *cs;

	cs = bpf_map_lookup_elem(&cs_count, &zero);
	if (cs)
		*cs += 1;
	if (wanted(prev))
		on_switch_out(ctx, preempt, prev, prev_state, now);
	if (wanted(next))
		on_switch_in(next, now);
	return 0;
}

/* Did the traced event happen on an interrupt stack? Hard interrupts (and the
 * softirqs run on their way out) use per-CPU IRQ stacks, so an event outside
 * the current task's kernel stack means the task was merely interrupted: it
 * is not the waker. `ctx` is the argument array bpf_trace_run() builds on the
 * traced context's stack; the program's own frame is no guide, as 6.13+ may
 * give it a per-CPU private stack. No stack walk, no per-CPU symbol needed. */
static __always_inline bool on_interrupt_stack(void *ctx, struct task_struct *cur)
{
	__u64 here = (__u64)ctx;
	__u64 base = (__u64)cur->stack;

	return here < base || here >= base + cfg.thread_size;
}

/* An interrupt that arrives from user mode runs on the task's own stack (x86
 * call_on_irqstack_cond() switches only from kernel mode), with its pt_regs
 * at the top of that stack: system-vector entries (the APIC timer, IPIs)
 * store orig_ax = -1 there, where a task in a system call has its syscall
 * number. (Device interrupts from user mode keep their vector there and are
 * told apart only by the waker's stack.) */
static __always_inline bool interrupted_user_mode(struct task_struct *cur)
{
#if defined(__TARGET_ARCH_x86)
	struct pt_regs *regs;

	if (!cur->mm)
		return false;
	regs = (struct pt_regs *)bpf_task_pt_regs(cur);
	return regs && (long)regs->orig_ax < 0;
#else
	return false;
#endif
}

/* An interrupt's waker stack, cut after the interrupt's entry (the first frame in the kernel's
 * irqentry text): below it are the frames of whatever the interrupt landed on, which woke nobody
 * and made each timer wakeup of a sleeping thread a new stack and a new waker entry (18 a thread in
 * five minutes of hackbench, growing without end). Returns the length kept. */
struct irq_text irq_text SEC(".data.irq") = {};

/* cut_at_irq_entry's state as it goes: the frames, the entry code's bounds, where the cut is (-1: not yet) */
struct irq_cut {
	struct stack *buf;
	__u64 lo, hi;
	int n, cut;
};

/* One frame of cut_at_irq_entry, a bpf_loop() callback: verified once, where a loop over the frames made the
 * verifier follow each place the cut could be found with every step after it (most of sched_waking's
 * verification) */
static long irq_cut_step(__u32 i, void *ctx)
{
	struct irq_cut *c = ctx;
	__u64 ip;

	if (i >= MAX_STACK_DEPTH || (int)i >= c->n)
		return 1;
	if (c->cut >= 0) {
		c->buf->ips[i] = 0;
		return 0;
	}
	ip = c->buf->ips[i];
	if (ip >= c->lo && ip < c->hi)
		c->cut = i;
	return 0;
}

static __always_inline long cut_at_irq_entry(struct stack *buf, long len)
{
	struct irq_cut c = {.buf = buf, .lo = irq_text.start, .hi = irq_text.end, .cut = -1};

	if (!c.lo || len <= 0)
		return len;
	c.n = len / sizeof(__u64);
	bpf_loop(MAX_STACK_DEPTH, irq_cut_step, &c, 0);
	return c.cut < 0 ? len : (c.cut + 1) * (long)sizeof(__u64);
}

/* How the waker spent the wakee's wait `[from, now]`, from its last waits: the time it was itself
 * blocked, and then waited for a CPU, weighted as the wakee's wait was drawn; and the stratum of the
 * wait that blocked it longest in the window (the chain's next link). */
static __always_inline void link_overlap(struct task_stats *w, __u64 from, __u64 now, __u64 d, __u64 t,
					 __u64 *blocked, __u64 *runq, struct waker_key *key)
{
	__u64 a, b, most = 0;
	int i;

	*blocked = *runq = 0;
	if (!w)
		return;
	for (i = 0; i < RECENT_WAITS; i++) {
		struct recent_wait *r = &w->recent[i];
		__u64 ov = 0;

		if (!r->run_ts || r->run_ts <= from)
			continue;
		a = r->block_ts > from ? r->block_ts : from;
		b = r->woken_ts < now ? r->woken_ts : now;
		if (b > a)
			ov = b - a;
		*blocked += ov;
		if (ov > most) {
			most = ov;
			key->link_func = r->func;
			key->link_state = r->state;
			key->link_why = r->why;
		}
		a = r->woken_ts > from ? r->woken_ts : from;
		b = r->run_ts < now ? r->run_ts : now;
		if (b > a)
			*runq += b - a;
	}
	if (*blocked + *runq > d) { /* clock skew between CPUs: never more than the wait */
		*runq = d > *blocked ? d - *blocked : 0;
		if (*blocked > d)
			*blocked = d;
	}
	if (t > d && d) { /* weight 1/p = T/d; the overlaps are at most d < T: the products stay in range */
		*blocked = *blocked * t / d;
		*runq = *runq * t / d;
	}
}

/* sched_waking runs in the waker's context (sched_wakeup often runs on the
 * target CPU with another task current), so the waker is recorded here, and
 * the wakee's blocked time ends here. */
SEC("tp_btf/sched_waking")
int BPF_PROG(sched_waking, struct task_struct *p)
{
	struct task_struct *waker = bpf_get_current_task_btf();
	struct task_stats *s;
	__u64 now, d, m, t, weight, from;
	__u32 woke, flags = 0;

	if (!wanted(p))
		return 0;
	s = stats_if_seen(p);
	if (!s) {
		__sync_fetch_and_add(&health.waking_unknown, 1);
		return 0;
	}
	/* claims the wait: a dump charging it at the same time loses the exchange */
	m = s->mark ? __sync_lock_test_and_set(&s->mark, 0) : 0;
	if (!m) {
		__sync_fetch_and_add(&health.waking_unblocked, 1);
		return 0;
	}
	now = bpf_ktime_get_ns();
	if (on_interrupt_stack(ctx, waker) || interrupted_user_mode(waker)) {
		woke = WOKE_IRQ;
		flags = WAKER_IN_INTERRUPT;
	} else if (waker->flags & PF_EXITING) {
		woke = WOKE_EXITING;
		flags = WAKER_EXITING;
	} else {
		woke = WOKE_TASK;
	}
	from = s->block_ts;
	d = close_wait(s, now, m, woke);

	/* Which waits get a stack (and a waker entry): drawn by length, p = min(1, d/T),
	 * within the per-CPU walk budget. A wait a dump already walked keeps that stack.
	 * Never for stallscope's own waits. The totals above stay exact. */
	s->draw_ns = 0;
	s->no_walk = 0;
	if (s->kstack_open) {
		t = 0;
		weight = d;
	} else if (below_min_stack(d)) {
		s->no_walk = STACK_SHORT;
		return 0;
	} else if (own_task(p)) {
		s->no_walk = STACK_OWN;
		return 0;
	} else if (!drawn(d, &weight, &t)) {
		s->no_walk = STACK_NOT_DRAWN;
		return 0;
	} else {
		/* drawn: its waker is recorded whatever the walk cap says (a hash update, no walk),
		 * so the wait chains see every drawn wait; the stacks only within the cap */
		__sync_fetch_and_add(&health.waits_drawn, 1);
		if (walk_allowed(now))
			s->draw_ns = t ? t : 1;
		else
			s->no_walk = STACK_RATE_LIMITED;
	}
	if (!cfg.waker_stacks && !cfg.kernel_stacks)
		return 0;
	{
		/* An interrupt's wakeup is keyed without the task it interrupted (not a waker): keyed by
		 * it, a thread that sleeps for a timer gained an entry for every task its wakeups landed
		 * on, never deleted while it lived, and filled the map on a busy machine. */
		bool irq = woke == WOKE_IRQ;
		struct task_stats *ws = irq ? NULL : stats_if_seen(waker);
		struct waker_key key = {
			.pid = p->pid, .start_ns = p->start_boottime,
			.waker_pid = irq ? 0 : waker->pid, .waker_tgid = irq ? 0 : waker->tgid,
			.waker_start_ns = !irq && waker->pid ? waker->start_boottime : 0,
			.waker_flags = flags,
			.wakee_func = s->func, .wakee_state = s->state, .wakee_why = s->why,
		};
		struct waker_val *v, init = {};
		__u64 blocked, runq;

		link_overlap(ws, from, now, d, t, &blocked, &runq, &key);
		if (s->no_walk) {
			key.waker_kstack = STACK_RATE_LIMITED;
		} else if (cfg.waker_stacks) {
			struct stack *buf = scratch();

			if (buf) {
				long len = bpf_get_stack(ctx, buf, sizeof(*buf), 0);

				key.waker_kstack = intern_stack(buf, irq ? cut_at_irq_entry(buf, len) : len);
			}
		}
		if (!irq)
			__builtin_memcpy(init.waker_comm, waker->comm, TASK_COMM_LEN);
		v = lookup_or_init(&wakers, &key, &init, &health.waker_map_full);
		if (!v)
			return 0;
		__sync_fetch_and_add(&v->count, 1);
		__sync_fetch_and_add(&v->total_ns, d);
		__sync_fetch_and_add(&v->weighted_ns, weight);
		__sync_fetch_and_add(&v->link_blocked_ns, blocked);
		__sync_fetch_and_add(&v->link_runq_ns, runq);
	}
	return 0;
}

/* sched_wakeup fires after the enqueue: the run-queue wait starts here, as
 * schedstat's sched_info_enqueue does. Only a wait that ended by a wakeup (or
 * a task never seen, blocked since before attach) starts one: a task woken
 * while still queued is not re-enqueued by the kernel either. */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	struct task_stats *s;

	if (!wanted(p))
		return 0;
	s = stats_if_seen(p);
	if (!s) {
		if (p->on_cpu)
			return 0;
		s = make_stats(p, 0, false, false);
		if (!s) {
			if (defer_first(p, bpf_ktime_get_ns(), 0))
				__sync_fetch_and_add(&health.wakeups_deferred, 1);
			else
				__sync_fetch_and_add(&health.storage_errors, 1);
			return 0;
		}
		s->woken = 1;
	}
	if (!s->woken)
		return 0;
	s->woken = 0;
	s->runq_ts = bpf_ktime_get_ns();
	s->runq_from_wakeup = 1;
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(sched_wakeup_new, struct task_struct *p)
{
	struct task_stats *s;

	if (!wanted(p))
		return 0;
	s = stats_of(p, 0, false);
	if (!s)
		return 0;
	s->flags |= TS_NEW;
	s->runq_ts = bpf_ktime_get_ns();
	s->runq_from_wakeup = 1;
	mark_changed(s);
	return 0;
}

/* A task's name changes by exec, prctl(PR_SET_NAME) or a write to
 * /proc/PID/comm, each through __set_task_comm(), which fires this before it
 * copies `comm` into the task: the entry keeps the name without a copy at
 * every switch-out (a cold cache line of task_struct under a busy scheduler). */
SEC("tp_btf/task_rename")
int BPF_PROG(task_rename, struct task_struct *task, const char *comm)
{
	char name[TASK_COMM_LEN] = {};
	struct task_stats *s;

	if (!wanted(task))
		return 0;
	s = stats_if_seen(task);
	if (!s)
		return 0;
	bpf_probe_read_kernel_str(name, sizeof(name), comm);
	__builtin_memcpy(s->comm, name, TASK_COMM_LEN);
	s->flags |= TS_RENAMED;
	mark_changed(s);
	return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(sched_migrate_task, struct task_struct *p, int dest_cpu)
{
	__u32 orig = BPF_CORE_READ(p, thread_info.cpu);
	struct task_stats *s;
	__u32 idx, zero = 0, *off;
	__u64 *cell;

	/* set_task_cpu() fires the tracepoint even when the CPU does not change;
	 * only a change counts, as se.nr_migrations does. */
	if (orig == (__u32)dest_cpu || !wanted(p))
		return 0;
	off = bpf_map_lookup_elem(&migrations_off, &zero);
	if (off && *off)
		return 0;
	s = stats_if_seen(p);
	if (!s && !p->on_cpu) {
		/* a task asleep since before attach, moved by the wakeup that follows: in an
		 * interrupt its storage may not be made now (see deferred_wakeups) */
		s = make_stats(p, 0, false, false);
		if (!s && !defer_first(p, 0, 1))
			__sync_fetch_and_add(&health.storage_errors, 1);
	} else if (!s) {
		s = stats_of(p, 0, false);
	}
	if (s) {
		__sync_fetch_and_add(&s->migrations, 1);
		mark_changed(s);
	}
	if (orig < cfg.nr_cpus && (__u32)dest_cpu < cfg.nr_cpus) {
		idx = orig * cfg.nr_cpus + dest_cpu;
		cell = bpf_map_lookup_elem(&migration_matrix, &idx);
		if (cell)
			__sync_fetch_and_add(cell, 1);
	}
	return 0;
}

/* do_wait() begins: remember what this process's rusage holds of its children. */
SEC("tp_btf/sched_process_wait")
int BPF_PROG(sched_process_wait, struct pid *pid)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct reaper_marks *m, *zero;
	__u32 tgid = cur->tgid, slot, key0 = 0;

	m = bpf_map_lookup_elem(&reaper_marks, &tgid);
	if (!m) {
		zero = bpf_map_lookup_elem(&reaper_marks_zero, &key0);
		if (!zero)
			return 0;
		bpf_map_update_elem(&reaper_marks, &tgid, zero, BPF_NOEXIST);
		m = bpf_map_lookup_elem(&reaper_marks, &tgid);
		if (!m)
			return 0;
	}
	/* threads of one process reaping at once may interleave here; the
	 * final-switch check then finds no matching step and says so */
	slot = m->next % REAPER_MARKS;
	m->cnvcsw[slot & (REAPER_MARKS - 1)] = cur->signal->cnvcsw;
	m->cnivcsw[slot & (REAPER_MARKS - 1)] = cur->signal->cnivcsw;
	m->cmin_flt[slot & (REAPER_MARKS - 1)] = cur->signal->cmin_flt;
	m->ctime[slot & (REAPER_MARKS - 1)] = cur->signal->cutime + cur->signal->cstime;
	/* waitpid(pid) names its child; -1, process groups and pidfds do not */
	m->target[slot & (REAPER_MARKS - 1)] = pid ? BPF_CORE_READ(pid, numbers[0].nr) : 0;
	m->next = slot + 1;
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *p)
{
	struct task_stats *s;

	if (!wanted(p))
		return 0;
	s = stats_of(p, 0, false);
	if (!s)
		return 0;
	s->flags |= TS_EXITING;
	/* The wait before this last run was added at its arrival, after the
	 * task's last switch-out; a thread that releases itself is not read
	 * again before it goes (see on_switch_out). */
	s->run_delay = run_delay_of(p);
	mark_changed(s);
	return 0;
}

/* A blocked task's wait so far, charged at each dump: the part since the last one goes to
 * the interval now ending (user space adds it to the task and to the wait's key), so a wait
 * spanning intervals is charged to each. A wait already T long is drawn whatever its end
 * (p = 1), so its stack is walked now, once: a task stuck for minutes shows where. The
 * exchange on `mark` makes each nanosecond charged once, here or at the waking. Returns
 * the time to hand over (0: no record); `*carried`: the wait may be carried on without a
 * record (dump_tasks): the last dump handed it over under the same key and charged it up to
 * its own instant, and its whole charge is the time since. */
static __always_inline __u64 charge_open(struct task_struct *t, struct task_stats *s, struct open_wait *ow,
					 bool *carried, __u64 *blocked_at)
{
	__u64 m = *(volatile __u64 *)&s->mark, now = bpf_ktime_get_ns(), at = now, bt, tsample, open, pending;
	__u64 prev = 0;
	__u32 zero = 0, one = 1;
	__u64 *clock = bpf_map_lookup_elem(&dump_clock, &zero), *last = bpf_map_lookup_elem(&dump_clock, &one);

	*carried = false;
	*blocked_at = 0;
	if (clock && *clock && *clock < now)
		at = *clock;
	if (last)
		prev = *last;
	if (m && at > m && __sync_val_compare_and_swap(&s->mark, m, at) == m) {
		__sync_fetch_and_add(&s->offcpu_ns, at - m);
		__sync_fetch_and_add(&s->open_pending, at - m);
	}
	pending = s->open_pending;
	if (!pending)
		return 0;
	bt = s->block_ts;
	*blocked_at = bt;
	open = bt && now > bt ? now - bt : 0;
	tsample = *(volatile __u64 *)&stack_tune.sample_ns;
	if (!s->kstack_open && bt && cfg.kernel_stacks && !own_task(t) && open >= tsample &&
	    !below_min_stack(open) && walk_allowed(now)) {
		struct stack *buf = scratch();

		if (buf) {
			s->kstack_open = intern_stack(buf, bpf_get_task_stack(t, buf, sizeof(*buf), 0));
			__sync_fetch_and_add(&health.open_walks, 1);
		}
	}
	ow->pid = t->pid;
	ow->tgid = t->tgid;
	ow->start_ns = t->start_boottime;
	ow->charged_ns = pending;
	ow->open_ns = bt && at > bt ? at - bt : 0;  /* its length at the dump's instant (the interval's end) */
	ow->kstack = s->kstack_open ? s->kstack_open : own_task(t) ? STACK_OWN : STACK_NOT_DRAWN;
	ow->ustack = s->ustack;
	ow->state = s->state;
	ow->why = s->why;
	ow->func = s->func;
	*carried = prev && m == prev && pending == at - m && bt && s->open_bt == bt && s->open_kstack == ow->kstack;
	return pending;
}

/* Blocked: asleep, off its run-queue and off every CPU, neither being woken, made nor exiting. */
static __always_inline bool blocked_now(struct task_struct *t)
{
	unsigned int state = *(volatile unsigned int *)&t->__state;

	/* on_cpu exists only on SMP kernels (a task switching out is still on its CPU; on one CPU, the dump's) */
	int on_cpu = bpf_core_field_exists(t->on_cpu) ? *(volatile int *)&t->on_cpu : 0;

	return (state & TASK_BLOCKED_STATES) && !(state & (TASK_WAKING | TASK_NEW | TASK_DEAD)) &&
	       !*(volatile int *)&t->on_rq && !on_cpu && !t->exit_state && !(t->flags & PF_EXITING);
}

/* A task the dump reaches with no entry, blocked: it has not switched out since the probes attached
 * (every switch-out makes the entry), so it has been asleep since before; or its entry could not be
 * made then. Its wait is opened here, from the dump's instant (what came before is not known), as a
 * switch-out would have opened it, and from now on it is charged, carried on and closed as any other:
 * a task hung in D since before the trace is in the first interval, and its stack is walked by a later
 * dump. A wakeup racing this finds no wait (counted as waking_unknown); the wait opened after it is
 * taken back if the task is seen woken, else closed at the task's switch-in (waking_raced). */
static __always_inline struct task_stats *open_found_blocked(struct task_struct *t)
{
	__u64 *clock, at;
	struct task_stats *s;
	__u32 zero = 0;

	if (!wanted(t) || !blocked_now(t))
		return NULL;
	s = make_stats(t, 0, false, true);
	/* an entry an event made meanwhile has its own state: left as it is */
	if (!s || s->mark || s->block_ts || s->woken || s->runq_ts || (s->flags & TS_FOUND_BLOCKED))
		return s;
	clock = bpf_map_lookup_elem(&dump_clock, &zero);
	at = clock && *clock ? *clock : bpf_ktime_get_ns();
	s->block_ts = at;
	s->state = t->__state & STATE_MASK;
	s->kstack_open = 0;
	s->draw_ns = 0;
	s->no_walk = 0;
	wait_evidence(s, t);
	/* another task's user stack cannot be walked: none, as a switch-out without one gives; stallscope's own */
	s->ustack = own_task(t) ? STACK_OWN : STACK_NONE;
	s->flags |= TS_FOUND_BLOCKED;
	asm volatile("" ::: "memory");
	*(volatile __u64 *)&s->mark = at;
	if (!blocked_now(t) && __sync_val_compare_and_swap(&s->mark, at, 0) == at)
		s->block_ts = 0;
	mark_changed(s);
	return s;
}

/* User space's read of the live tasks' entries, once per interval: a wait in progress
 * (charge_open), then the entry if an event changed it since the last dump, as its task_key
 * then its task_stats. The mark is cleared before the copy, so an event racing the copy marks
 * it again. When a task's records do not fit, the kernel drops all of them and runs this
 * again for the task with the next read: nothing is taken as handed over until every write
 * went through. A wait carried on (charge_open) is not written unless the task's entry is:
 * user space, which saw neither record, charges it as it was last handed over. With thousands
 * of sleeping threads that is most of the dump. */
SEC("iter/task")
int dump_tasks(struct bpf_iter__task *ctx)
{
	struct dump_header ohdr = { .kind = DUMP_OPEN, .size = sizeof(struct open_wait) };
	struct dump_header hdr = { .kind = DUMP_TASK, .size = sizeof(struct task_key) + sizeof(struct task_stats) };
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	struct task_key key = {};
	struct open_wait ow = {};
	struct task_stats *s;
	__u64 pending, bt;
	__u32 changed;
	bool carried;

	if (!t)
		return 0;
	s = bpf_task_storage_get(&task_stats, t, 0, 0);
	if (!s)
		s = open_found_blocked(t);
	if (!s || (s->flags & TS_DEAD))
		return 0;
	pending = charge_open(t, s, &ow, &carried, &bt);
	changed = s->changed;
	if (pending && carried && !changed) {
		__sync_fetch_and_sub(&s->open_pending, pending);
		__sync_fetch_and_add(&health.open_carried, 1);
		return 0;
	}
	if (pending && (bpf_seq_write(seq, &ohdr, sizeof(ohdr)) || bpf_seq_write(seq, &ow, sizeof(ow))))
		return 0;
	if (changed) {
		WRITE_ONCE_U32(s->changed, 0);
		asm volatile("" ::: "memory");
		key.pid = t->pid;
		key.start_ns = t->start_boottime;
		if (bpf_seq_write(seq, &hdr, sizeof(hdr)) || bpf_seq_write(seq, &key, sizeof(key)) ||
		    bpf_seq_write(seq, s, sizeof(*s))) {
			WRITE_ONCE_U32(s->changed, 1);
			return 0;
		}
	}
	if (pending) {
		__sync_fetch_and_sub(&s->open_pending, pending);
		s->open_bt = bt;
		s->open_kstack = ow.kstack;
	}
	return 0;
}
