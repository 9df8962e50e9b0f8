/* SPDX-License-Identifier: GPL-2.0 */
/* Map helpers shared by the probe objects. */
#ifndef STALLSCOPE_MAPS_BPF_H
#define STALLSCOPE_MAPS_BPF_H

#include "interval.h"
#include "log2.h"

#ifndef E2BIG
#define E2BIG 7
#endif

/* The value under `key`, inserted from `init` when absent. NULL when the map is
 * full (then *full is counted: lost data is never silent) or the entry could
 * not be made. Two CPUs inserting at once both end with the same entry. */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *init, __u64 *full)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	if (bpf_map_update_elem(map, key, init, BPF_NOEXIST) == -E2BIG) {
		__sync_fetch_and_add(full, 1);
		return NULL;
	}
	return bpf_map_lookup_elem(map, key);
}

/* One value into its interval's extremes (interval.h): the pair of the interval numbered `e` started
 * again by its first value; racy as plain maxima are (the lost update is the less extreme value). */
static __always_inline void update_ival_extremes(struct ival_extremes *x, __u32 e, __u64 v)
{
	__u32 i = e & 1;

	if (x->epoch[i] != e) {
		x->epoch[i] = e;
		x->max_ns[i] = v;
		x->min_ns[i] = v;
		return;
	}
	if (v > x->max_ns[i])
		x->max_ns[i] = v;
	if (v < x->min_ns[i])
		x->min_ns[i] = v;
}

#endif
