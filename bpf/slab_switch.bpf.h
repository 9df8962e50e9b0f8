/* SPDX-License-Identifier: GPL-2.0 */
/* The CPU-slab switch estimator, shared by slab.bpf.c and the test object
 * that runs it on synthetic event streams (tests/bpf/slab_switch_test.bpf.c).
 *
 * Without fentry on ___slab_alloc or CONFIG_SLUB_STATS the allocation slow
 * path is invisible. What the kmem tracepoints do show is the object: a slab
 * is a buddy block of PAGE_SIZE << order bytes, naturally aligned
 * (alloc_slab_page() -> alloc_pages(order)), so the object's address masked
 * to that size is its slab. When one CPU's successive allocations from one
 * cache move to another slab, the CPU slab changed: ___slab_alloc() ran.
 * It is an estimate, with blind spots: a refill from the same slab (after
 * remote frees emptied and refilled it) is no switch; a fallback-order slab
 * (s->min) is judged with the preferred order's mask; an allocation that
 * migrates between the allocation and its tracepoint is charged to the new
 * CPU; bulk allocations are not traced; caches served by sheaves are
 * skipped by the caller. */
#ifndef STALLSCOPE_SLAB_SWITCH_BPF_H
#define STALLSCOPE_SLAB_SWITCH_BPF_H

struct slab_cursor {
	__u64 base; /* the slab of this CPU's previous allocation from the cache; 0: none yet */
};

/* The slab holding `obj` for a cache of this order. */
static __always_inline __u64 slab_base(__u64 obj, __u32 order, __u32 page_shift)
{
	return obj & ~((1ULL << ((page_shift + order) & 63)) - 1);
}

/* Advance this CPU's cursor for one cache by one allocation. Returns 1 when
 * the allocation came from another slab than the previous one, 0 when from
 * the same, -1 for the first allocation seen (nothing to compare with). */
static __always_inline int slab_switch_step(struct slab_cursor *c, __u64 obj, __u32 order, __u32 page_shift)
{
	__u64 base = slab_base(obj, order, page_shift);
	__u64 prev = c->base;

	c->base = base;
	if (!prev)
		return -1;
	return prev != base;
}

/* The step for `cache` on this CPU, its cursor kept in the per-CPU hash
 * `cursors` (cache pointer -> struct slab_cursor). -2 when the cursor map is full. */
static __always_inline int slab_switch_on_cpu(void *cursors, __u64 cache, __u64 obj, __u32 order, __u32 page_shift)
{
	struct slab_cursor *c = bpf_map_lookup_elem(cursors, &cache);

	if (!c) {
		struct slab_cursor init = { .base = slab_base(obj, order, page_shift) };

		/* a per-CPU hash inserts the key for every CPU, zeroed except this one */
		if (bpf_map_update_elem(cursors, &cache, &init, BPF_NOEXIST) == -7 /* E2BIG */)
			return -2;
		return -1;
	}
	return slab_switch_step(c, obj, order, page_shift);
}

#endif
