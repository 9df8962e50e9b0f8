/* SPDX-License-Identifier: GPL-2.0 */
/* Map helpers shared by the probe objects. */
#ifndef STALLSCOPE_MAPS_BPF_H
#define STALLSCOPE_MAPS_BPF_H

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

#endif
