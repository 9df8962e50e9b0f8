// SPDX-License-Identifier: GPL-2.0
/* Test object: runs the CPU-slab switch estimator of slab.bpf.c
 * (bpf/slab_switch.bpf.h, the same code) on synthetic allocations fed
 * through BPF_PROG_TEST_RUN on a chosen CPU. One run is one allocation:
 * ctx = (cache, object address, order). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "slab_switch.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 page_shift = 12;

/* the same per-CPU cursor map as slab.bpf.c's */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, struct slab_cursor);
} cursors SEC(".maps");

struct verdicts {
	__u64 switches; /* step returned 1 */
	__u64 same;     /* step returned 0 */
	__u64 first;    /* step returned -1 */
};

/* cache -> verdicts over all CPUs */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, struct verdicts);
} verdicts SEC(".maps");

SEC("raw_tp")
int one_allocation(__u64 *ctx)
{
	__u64 cache = ctx[0], obj = ctx[1];
	__u32 order = ctx[2];
	struct verdicts *v, zero = {};
	int r;

	v = bpf_map_lookup_elem(&verdicts, &cache);
	if (!v) {
		bpf_map_update_elem(&verdicts, &cache, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&verdicts, &cache);
		if (!v)
			return 0;
	}
	r = slab_switch_on_cpu(&cursors, cache, obj, order, page_shift);
	if (r == 1)
		v->switches++;
	else if (r == 0)
		v->same++;
	else if (r == -1)
		v->first++;
	return r + 10;
}
