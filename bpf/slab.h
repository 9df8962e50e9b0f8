/* SPDX-License-Identifier: GPL-2.0 */
/* Structs that cross the BPF/user boundary for the SLUB probe.
 * Mirrored in bpf/abi.py; tests check the sizes against the object's BTF. */
#ifndef STALLSCOPE_SLAB_H
#define STALLSCOPE_SLAB_H

#define SLAB_NAME_LEN 32
#define SLAB_MAX_NODES 8 /* kmem_cache_node pointers kept per cache; more nodes are counted in nodes_cut */

/* Pseudo caches: slab_key.cache values that are never a kernel pointer. */
#define SLAB_CACHE_NO_OBJECT 1  /* NULL or ZERO_SIZE_PTR: kfree(NULL), a failed or zero-size kmalloc */
#define SLAB_CACHE_PAGE_ALLOC 2 /* not a slab object: a large kmalloc served by the page allocator */
#define SLAB_CACHE_UNKNOWN 3    /* kmalloc/kfree without bpf_get_kmem_cache() (before 6.13) */

/* One process's allocations and frees in one cache (or pseudo cache). */
struct slab_key {
	__u64 cache; /* struct kmem_cache *, or SLAB_CACHE_* */
	__u32 tgid;  /* of current: interrupts are charged to the task they interrupt, as perf stat does */
	__u32 exiting; /* current has PF_EXITING: the event is part of its exit (mm, files torn down) */
};

/* Per-CPU cumulative counts under a slab_key. */
struct slab_counts {
	__u64 kmallocs;        /* kmem:kmalloc events */
	__u64 cache_allocs;    /* kmem:kmem_cache_alloc events */
	__u64 kfrees;          /* kmem:kfree events */
	__u64 cache_frees;     /* kmem:kmem_cache_free events */
	__u64 bytes_req;       /* what the callers asked for */
	__u64 bytes_alloc;     /* what they got (the slot size) */
	__u64 failed;          /* allocations that returned NULL */
	__u64 slab_switches;   /* estimate: the CPU's allocation moved to another slab of the cache */
	__u64 switch_allocs;   /* allocations the estimator judged (a previous one on the CPU existed) */
};

/* A cache as the probe first saw it. */
struct slab_cache_info {
	char name[SLAB_NAME_LEN];
	__u64 node[SLAB_MAX_NODES]; /* s->node[i]: the kmem_cache_node holding its list_lock */
	__u32 object_size;
	__u32 size;
	__u32 order;          /* s->oo >> 16 */
	__u32 objs_per_slab;  /* s->oo & 0xffff */
	__u32 min_order;      /* s->min >> 16, the fallback order */
	__u32 sheaf_capacity; /* 0: no sheaves (or the field does not exist) */
	__u32 cpu_partial;
	__u32 nodes_cut;      /* nodes beyond SLAB_MAX_NODES */
};

struct slab_health {
	__u64 counts_map_full;
	__u64 cache_map_full;
	__u64 cursor_map_full;
	__u64 pad;
};

struct slab_config {
	__u32 targ_tgid;
	__u32 page_shift;
	__u32 nr_node_ids;
	__u32 has_kmem_cache_kfunc; /* bpf_get_kmem_cache() exists (6.13+) */
};

#endif
