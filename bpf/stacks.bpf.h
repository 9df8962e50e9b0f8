/* SPDX-License-Identifier: GPL-2.0 */
/* Stack walks shared by the probe objects: a content-addressed stack map and a
 * per-CPU walk budget set at run time through `stack_tune`. The including
 * object defines `health` with `stack_errors` and `stack_map_full`; the walks
 * refused are counted per CPU in `walk_budget`. */
#ifndef STALLSCOPE_STACKS_BPF_H
#define STALLSCOPE_STACKS_BPF_H

#ifndef E2BIG
#define E2BIG 7
#endif

/* stack hash -> frames (content-addressed; user space may delete what it has copied) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, __u64);
	__type(value, struct stack);
} stacks SEC(".maps");

/* per-CPU scratch buffer for stack walks (too large for the BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack);
} stack_scratch SEC(".maps");

/* The object's only .data variable: user space writes it before load and,
 * through the mapped section, while attached (bpf/tune.py). */
struct stack_tune stack_tune SEC(".data") = { .min_stack_ns = 0, .walks_per_s = 1000 };

/* per-CPU stack-walk budgets: token buckets refilled at stack_tune.walks_per_s
 * (BUDGET_WALKS) and user_walks_per_s (BUDGET_USER); a token is TOKEN_UNITS units, and a
 * nanosecond adds `rate` units: no part of a refill is lost, however often it is asked */
#define TOKEN_UNITS 1000000000ULL
struct walk_budget {
	__u64 last_ns;
	__u64 units;
	__u64 limited; /* walks refused: read by user space as health.stacks_rate_limited */
};

#define BUDGET_WALKS 0 /* walks chosen with a wait's length known (or a lock's, a waker's) */
#define BUDGET_USER  1 /* user stacks walked when a wait begins, before its length is known */
#define BUDGET_SITES 2 /* short walks naming the call site of a lock contention not drawn (SITE_WALKS_PER_S) */
#define BUDGET_SITES_LONG 3 /* ... of one SITE_LONG_NS or longer, apart: the many short ones never crowd them out */

/* A lock contention not drawn for a walk may still get a short one, SITE_DEPTH frames: enough for the
 * lock's internal frames and its caller (lock_stat's contention point), at most SITE_WALKS_PER_S per CPU
 * for those shorter than SITE_LONG_NS and as many for the longer ones, whatever the budget's level. Such
 * a stack names where the lock was wanted; it stands for no other contention (its weight stays 0). */
#define SITE_DEPTH 12
#define SITE_WALKS_PER_S 25
#define SITE_LONG_NS 1000000ULL

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct walk_budget);
} walk_budget SEC(".maps");

/* May this CPU walk a stack now? Stack walks cost microseconds (ORC
 * unwinding) against ~1 us for the rest of an event; a per-CPU token bucket
 * bounds their rate. Tracing programs run with migration disabled, so the
 * per-CPU bucket needs no atomics. Totals never depend on it. */
static __always_inline bool budget_allows(__u64 now, __u32 which)
{
	__u32 rate = which >= BUDGET_SITES ? SITE_WALKS_PER_S
		   : which == BUDGET_USER ? *(volatile __u32 *)&stack_tune.user_walks_per_s
					  : *(volatile __u32 *)&stack_tune.walks_per_s;
	struct walk_budget *b;
	__u64 cap;

	if (!rate)
		return true;
	b = bpf_map_lookup_elem(&walk_budget, &which);
	if (!b)
		return false;
	/* a burst of a tenth of a second, and at least one walk */
	cap = (__u64)rate * (TOKEN_UNITS / 10);
	if (cap < TOKEN_UNITS)
		cap = TOKEN_UNITS;
	if (!b->last_ns) {
		b->units = cap;
	} else if (now > b->last_ns) {
		/* a second refills any bucket: the product stays below 2^64 for any u32 rate */
		__u64 dt = now - b->last_ns < TOKEN_UNITS ? now - b->last_ns : TOKEN_UNITS;

		b->units += dt * rate;
		if (b->units > cap)
			b->units = cap;
	}
	b->last_ns = now;
	if (b->units < TOKEN_UNITS) {
		/* counted per CPU: a shared counter's cache line would bounce
		 * between CPUs on every refused walk */
		b->limited++;
		return false;
	}
	b->units -= TOKEN_UNITS;
	return true;
}

static __always_inline bool walk_allowed(__u64 now)
{
	return budget_allows(now, BUDGET_WALKS);
}

/* Is a wait of `d` ns drawn for a stack walk? With probability min(1, d/T): long waits
 * always, short ones in proportion to their length, so the walks spent follow where the
 * time goes and a drawn wait stands for d/p = max(d, T) ns (its weight, *weight_ns).
 * T = 0 draws every wait. */
static __always_inline bool drawn(__u64 d, __u64 *weight_ns, __u64 *t_ns)
{
	__u64 t = *(volatile __u64 *)&stack_tune.sample_ns;

	*t_ns = t;
	*weight_ns = d;
	if (!t || d >= t)
		return true;
	/* u < d/T with u uniform in [0, 2^32): d < T < 2^64 / 2^32 keeps the product exact */
	if (t > 0xffffffffULL) {
		if ((__u64)bpf_get_prandom_u32() * (t >> 32) >= d)
			return false;
	} else if ((__u64)bpf_get_prandom_u32() * t >= d << 32) {
		return false;
	}
	*weight_ns = t;
	return true;
}

/* The variance term of a drawn wait of d ns (weight max(d, T)): (1 - p) / p^2 * d^2 = T (T - d)
 * for d < T, in us^2. */
static __always_inline __u64 draw_var_us2(__u64 d, __u64 t)
{
	if (!t || d >= t)
		return 0;
	return ((t - d) / 1000) * (t / 1000);
}

/* intern_stack's hash (FNV-1a over the frames) as it goes */
struct stack_hash {
	struct stack *buf;
	__u64 h;
	int n;
};

/* One frame into the hash, a bpf_loop() callback: verified once for each state that reaches a walk, where a loop
 * was verified frame by frame for each */
static long stack_hash_step(__u32 i, void *ctx)
{
	struct stack_hash *c = ctx;

	if (i >= MAX_STACK_DEPTH || (int)i >= c->n)
		return 1;
	c->h = (c->h ^ c->buf->ips[i]) * 0x100000001b3ULL;
	return 0;
}

/* Hash the frames in the scratch buffer and store them once. Returns
 * STACK_FAILED when no stack could be taken. `len` is what bpf_get_stack returned. */
static __always_inline __u64 intern_stack(struct stack *buf, long len)
{
	struct stack_hash c = {.buf = buf, .h = 0xcbf29ce484222325ULL};
	__u64 h;

	if (len <= 0) {
		__sync_fetch_and_add(&health.stack_errors, 1);
		return STACK_FAILED;
	}
	c.n = len / sizeof(__u64);
	bpf_loop(MAX_STACK_DEPTH, stack_hash_step, &c, 0);
	h = c.h ^ c.n;
	if (h < STACK_ID_MIN)
		h += STACK_ID_MIN;
	if (bpf_map_update_elem(&stacks, &h, buf, BPF_NOEXIST) == -E2BIG)
		__sync_fetch_and_add(&health.stack_map_full, 1);
	return h;
}

/* A task of stallscope's own process: counted like any other, but not walked
 * (nor, in the scheduler object, given a waker entry): the budget is for the
 * tasks being traced, and the recorder's start-up alone would spend a quiet
 * machine's walks. A macro, as only the objects that use it have
 * `cfg.self_tgid`. */
#define own_task(p) (cfg.self_tgid && (p)->tgid == cfg.self_tgid)

/* Is a wait of `d` ns too short to be worth a stack walk? */
static __always_inline bool below_min_stack(__u64 d)
{
	return d < *(volatile __u64 *)&stack_tune.min_stack_ns;
}

static __always_inline struct stack *scratch(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&stack_scratch, &zero);
}

#endif
