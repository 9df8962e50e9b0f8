// SPDX-License-Identifier: GPL-2.0
/* SLUB allocations and frees per (cache, process), from the four kmem
 * tracepoints. Every object is charged to the cache that holds it: the
 * tracepoint's own `s` for kmem_cache_alloc/free, bpf_get_kmem_cache(ptr)
 * (6.13+) for kmalloc/kfree, so kmalloc lands in the cache that really
 * served it (kmalloc-cg-N for accounted allocations, a bucket, a merged
 * cache), not in a size class. Counts are per-CPU: these events run at
 * hundreds of thousands a second, and a shared counter would bounce. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "slab.h"

char LICENSE[] SEC("license") = "GPL";

const volatile struct slab_config cfg = {
	.page_shift = 12,
	.nr_node_ids = 1,
};

struct slab_health health = {};

#include "maps.bpf.h"
#include "slab_switch.bpf.h"

extern struct kmem_cache *bpf_get_kmem_cache(__u64 addr) __ksym __weak;

/* slab_key -> per-CPU cumulative slab_counts. Preallocated, unlike the
 * other aggregate maps: a new element of a non-preallocated map comes from
 * bpf_mem_alloc, whose refill kmallocs (kmalloc-cg-96 here) in the traced
 * task's context, nested in this very program: the probe would count its own
 * allocations and lose events to recursion. User space deletes an exited
 * process's entries one interval after its last read, when no program can
 * still hold a pointer into them (the reuse race of a preallocated element). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384); /* sized from user space by CPU count */
	__type(key, struct slab_key);
	__type(value, struct slab_counts);
} counts SEC(".maps");

/* cache pointer -> what it is (name, geometry, its kmem_cache_node pointers) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct slab_cache_info);
} caches SEC(".maps");

/* cache pointer -> this CPU's slab cursor (the CPU-slab switch estimate) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct slab_cursor);
} cursors SEC(".maps");

#define ZERO_OR_NULL(p) ((__u64)(p) <= 16) /* include/linux/slab.h ZERO_OR_NULL_PTR */

static __always_inline __u32 sheaf_capacity(struct kmem_cache *s)
{
	/* sheaves: 6.18 (per-cache opt-in), every cache from 7.0 */
	if (bpf_core_field_exists(s->sheaf_capacity))
		return BPF_CORE_READ(s, sheaf_capacity);
	return 0;
}

static __always_inline void describe(struct kmem_cache *s)
{
	__u64 key = (__u64)s;
	struct slab_cache_info info = {};
	__u32 oo, min, i, n = cfg.nr_node_ids;

	if (bpf_map_lookup_elem(&caches, &key))
		return;
	bpf_probe_read_kernel_str(info.name, sizeof(info.name), BPF_CORE_READ(s, name));
	info.object_size = BPF_CORE_READ(s, object_size);
	info.size = BPF_CORE_READ(s, size);
	oo = BPF_CORE_READ(s, oo.x);
	min = BPF_CORE_READ(s, min.x);
	info.order = oo >> 16; /* mm/slub.c OO_SHIFT */
	info.objs_per_slab = oo & 0xffff;
	info.min_order = min >> 16;
	info.sheaf_capacity = sheaf_capacity(s);
	if (bpf_core_field_exists(s->cpu_partial))
		info.cpu_partial = BPF_CORE_READ(s, cpu_partial);
	for (i = 0; i < SLAB_MAX_NODES; i++) {
		if (i >= n)
			break;
		info.node[i] = (__u64)BPF_CORE_READ(s, node[i]);
	}
	info.nodes_cut = n > SLAB_MAX_NODES ? n - SLAB_MAX_NODES : 0;
	if (bpf_map_update_elem(&caches, &key, &info, BPF_NOEXIST) == -E2BIG)
		__sync_fetch_and_add(&health.cache_map_full, 1);
}

#include "task_flags.bpf.h"

static __always_inline struct slab_counts *counts_of(__u64 cache, __u32 tgid)
{
	/* Exit-time frees (exit_mm(), exit_files()) are kept apart: they are a
	 * large share of a short-lived process's frees, and perf stat stops
	 * counting a task in do_exit() (perf_event_exit_task()) before them. */
	__u32 exiting = !!(bpf_get_current_task_btf()->flags & PF_EXITING);
	struct slab_key key = { .cache = cache, .tgid = tgid, .exiting = exiting };
	struct slab_counts *c = bpf_map_lookup_elem(&counts, &key), zero = {};

	if (c)
		return c;
	if (cache > SLAB_CACHE_UNKNOWN)
		describe((struct kmem_cache *)cache); /* once per (cache, process): off the hot path */
	return lookup_or_init(&counts, &key, &zero, &health.counts_map_full);
}

static __always_inline bool wanted(__u32 *tgid)
{
	*tgid = bpf_get_current_pid_tgid() >> 32;
	return !cfg.targ_tgid || *tgid == cfg.targ_tgid;
}

/* The cache holding `ptr`, or a pseudo cache saying why there is none. */
static __always_inline __u64 cache_of(const void *ptr)
{
	struct kmem_cache *s;

	if (ZERO_OR_NULL(ptr))
		return SLAB_CACHE_NO_OBJECT;
	if (!cfg.has_kmem_cache_kfunc || !bpf_get_kmem_cache)
		return SLAB_CACHE_UNKNOWN;
	s = bpf_get_kmem_cache((__u64)ptr);
	return s ? (__u64)s : SLAB_CACHE_PAGE_ALLOC;
}

static __always_inline void estimate_switch(struct slab_counts *c, struct kmem_cache *s, const void *ptr)
{
	int r;

	if (ZERO_OR_NULL(ptr) || sheaf_capacity(s))
		return;
	r = slab_switch_on_cpu(&cursors, (__u64)s, (__u64)ptr, BPF_CORE_READ(s, oo.x) >> 16, cfg.page_shift);
	if (r == -2)
		__sync_fetch_and_add(&health.cursor_map_full, 1);
	if (r >= 0) {
		__sync_fetch_and_add(&c->switch_allocs, 1);
		__sync_fetch_and_add(&c->slab_switches, r);
	}
}

/* The counters are per-CPU and a tracing program does not migrate while it
 * runs; an interrupt's nested event on the same CPU and entry is the one
 * race, hence the atomic adds. */
SEC("tp_btf/kmalloc")
int BPF_PROG(kmalloc, unsigned long call_site, const void *ptr, size_t bytes_req, size_t bytes_alloc,
	     gfp_t gfp_flags, int node)
{
	struct slab_counts *c;
	__u64 cache;
	__u32 tgid;

	if (!wanted(&tgid))
		return 0;
	cache = cache_of(ptr);
	c = counts_of(cache, tgid);
	if (!c)
		return 0;
	__sync_fetch_and_add(&c->kmallocs, 1);
	__sync_fetch_and_add(&c->bytes_req, bytes_req);
	__sync_fetch_and_add(&c->bytes_alloc, bytes_alloc);
	if (!ptr)
		__sync_fetch_and_add(&c->failed, 1);
	if (cache > SLAB_CACHE_UNKNOWN)
		estimate_switch(c, (struct kmem_cache *)cache, ptr);
	return 0;
}

SEC("tp_btf/kmem_cache_alloc")
int BPF_PROG(kmem_cache_alloc, unsigned long call_site, const void *ptr, struct kmem_cache *s, gfp_t gfp_flags,
	     int node)
{
	struct slab_counts *c;
	__u32 tgid;

	if (!wanted(&tgid))
		return 0;
	/* `s` is the cache itself: for an object of a merged cache, the one
	 * kmem_cache that every alias shares (__kmem_cache_alias()) */
	c = counts_of((__u64)s, tgid);
	if (!c)
		return 0;
	__sync_fetch_and_add(&c->cache_allocs, 1);
	__sync_fetch_and_add(&c->bytes_req, BPF_CORE_READ(s, object_size));
	__sync_fetch_and_add(&c->bytes_alloc, BPF_CORE_READ(s, size));
	if (!ptr)
		__sync_fetch_and_add(&c->failed, 1);
	estimate_switch(c, s, ptr);
	return 0;
}

SEC("tp_btf/kfree")
int BPF_PROG(kfree, unsigned long call_site, const void *ptr)
{
	struct slab_counts *c;
	__u32 tgid;

	if (!wanted(&tgid))
		return 0;
	/* kfree() traces before its ZERO_OR_NULL_PTR check and before the
	 * free, so the object is still in its slab here */
	c = counts_of(cache_of(ptr), tgid);
	if (c)
		__sync_fetch_and_add(&c->kfrees, 1);
	return 0;
}

SEC("tp_btf/kmem_cache_free")
int BPF_PROG(kmem_cache_free, unsigned long call_site, const void *ptr, const struct kmem_cache *s)
{
	struct slab_counts *c;
	__u32 tgid;

	if (!wanted(&tgid))
		return 0;
	c = counts_of((__u64)s, tgid);
	if (c)
		__sync_fetch_and_add(&c->cache_frees, 1);
	return 0;
}

/* Run once from user space (BPF_PROG_TEST_RUN): offsetof(struct
 * kmem_cache_node, list_lock) on the running kernel, relocated by CO-RE, so
 * a contended lock's address names its node, and the node its cache. */
SEC("syscall")
int list_lock_offset(void *ctx)
{
	return bpf_core_field_offset(struct kmem_cache_node, list_lock);
}
