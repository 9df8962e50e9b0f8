// SPDX-License-Identifier: GPL-2.0
/* The entries of a cumulative BPF map that changed since the last read (bpf/mapdiff.py).
 *
 * A drain reads every entry of the scheduler's, the lock and futex groups' cumulative maps once per
 * interval, and most of them (a sleeping thread's, a finished contention's) have not moved: compared
 * in Python, tens of thousands of entries an interval cost more than the few thousand that changed.
 * Here each entry's value is compared with the one kept from the last read, and only the changed ones
 * are handed back, each with its previous value, for Python to decode.
 *
 * An entry keeps its task's identity (pid and start time) at offsets of its key; an entry of a task
 * that died (user space passes the dead tasks) is handed back if it changed, then deleted from the map
 * (the keys are returned for user space to delete) and forgotten. An entry no longer in the map is
 * forgotten at the end of the read.
 *
 * An entry that has not moved for a number of reads (a thread's wait before its stack was walked, a
 * contention met once, a waker and wakee met once) is named stale: user space takes it out of the map
 * (BPF_MAP_LOOKUP_AND_DELETE_ELEM, which returns its value as it was deleted) and hands that value back,
 * and it is forgotten here; a value that moved since the read is handed back as changed. If its key
 * comes again, the map makes it anew from zero, and it is handed back as new: what it holds is all
 * since. So a map read whole each interval holds what moved lately, not all it ever held.
 * Plain C, no Python API: loaded with ctypes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAPDIFF_NEW 1  /* no previous value: `prev` is zero */
#define MAPDIFF_GONE 2 /* a dead task's entry, read a last time: deleted from the map after this read */
#define MAX_IDS 2
#define HDR 16 /* a kept entry's header: hash, generation last seen, generation last changed, pad (u32 each) */

struct mapdiff {
	uint32_t ks, vs, slot_size, rec_size;
	uint32_t n_ids;
	int32_t pid_off[MAX_IDS], start_off[MAX_IDS];
	/* the entries kept: slots of [hash u32][generation seen u32][generation changed u32][pad u32][key][value],
	 * indexed by an open-addressing table of slot numbers + 1 (0: empty) */
	uint8_t *slots;
	uint32_t n_slots, cap_slots, free_head, n_free;
	uint32_t *index;
	uint32_t index_mask;
	uint32_t gen;
	/* the dead tasks of this read: a small open-addressing set of (pid, start) */
	uint64_t *dead;
	uint32_t dead_mask;
	/* output */
	uint8_t *out;
	size_t out_len, out_cap;
	uint8_t *gone;
	size_t gone_len, gone_cap;
	uint8_t *stale;
	size_t stale_len, stale_cap;
	int failed;
};

static uint32_t hash_bytes(const uint8_t *p, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	uint32_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t w;

		memcpy(&w, p + i, 8);
		h ^= w;
		h *= 0x100000001b3ULL;
		h ^= h >> 29;
	}
	for (; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 32;
	return (uint32_t)h | 1; /* never 0 */
}

static uint8_t *slot(struct mapdiff *d, uint32_t i)
{
	return d->slots + (size_t)i * d->slot_size;
}

static uint32_t slot_hash(struct mapdiff *d, uint32_t i)
{
	uint32_t h;

	memcpy(&h, slot(d, i), 4);
	return h;
}

struct mapdiff *mapdiff_new(uint32_t ks, uint32_t vs, const int32_t *pid_offs, const int32_t *start_offs,
			    uint32_t n_ids)
{
	struct mapdiff *d;
	uint32_t i;

	if (!ks || !vs || n_ids > MAX_IDS)
		return NULL;
	for (i = 0; i < n_ids; i++)
		if (pid_offs[i] < 0 || (uint32_t)pid_offs[i] + 4 > ks || start_offs[i] < 0 || (uint32_t)start_offs[i] + 8 > ks)
			return NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->ks = ks;
	d->vs = vs;
	d->slot_size = (HDR + ks + vs + 7) & ~7U;
	d->rec_size = (8 + ks + 2 * vs + 7) & ~7U;
	d->n_ids = n_ids;
	for (i = 0; i < n_ids; i++) {
		d->pid_off[i] = pid_offs[i];
		d->start_off[i] = start_offs[i];
	}
	d->index_mask = 1023;
	d->index = calloc(d->index_mask + 1, sizeof(uint32_t));
	if (!d->index) {
		free(d);
		return NULL;
	}
	return d;
}

void mapdiff_free(struct mapdiff *d)
{
	if (!d)
		return;
	free(d->slots);
	free(d->index);
	free(d->dead);
	free(d->out);
	free(d->gone);
	free(d->stale);
	free(d);
}

uint32_t mapdiff_record_size(struct mapdiff *d)
{
	return d->rec_size;
}

uint32_t mapdiff_size(struct mapdiff *d)
{
	return d->n_slots - d->n_free;
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
	size_t c = *cap ? *cap : 4096;
	uint8_t *p;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	p = realloc(*buf, c);
	if (!p)
		return -1;
	*buf = p;
	*cap = c;
	return 0;
}

static int rehash(struct mapdiff *d, uint32_t mask)
{
	uint32_t *index = calloc((size_t)mask + 1, sizeof(uint32_t)), i;

	if (!index)
		return -1;
	for (i = 0; i <= d->index_mask; i++) {
		uint32_t s = d->index[i], j;

		if (!s)
			continue;
		for (j = slot_hash(d, s - 1) & mask; index[j]; j = (j + 1) & mask)
			;
		index[j] = s;
	}
	free(d->index);
	d->index = index;
	d->index_mask = mask;
	return 0;
}

/* the index position holding this key, or of the empty place where it would go */
static uint32_t find(struct mapdiff *d, const uint8_t *key, uint32_t h, int *found)
{
	uint32_t j = h & d->index_mask;

	for (;; j = (j + 1) & d->index_mask) {
		uint32_t s = d->index[j];

		if (!s) {
			*found = 0;
			return j;
		}
		if (slot_hash(d, s - 1) == h && !memcmp(slot(d, s - 1) + HDR, key, d->ks)) {
			*found = 1;
			return j;
		}
	}
}

static void remove_at(struct mapdiff *d, uint32_t j)
{
	uint32_t s = d->index[j], i = j, k;

	/* the slot onto the free list (its generation word holds the next free slot) */
	memcpy(slot(d, s - 1) + 4, &d->free_head, 4);
	memset(slot(d, s - 1), 0, 4);
	d->free_head = s;
	d->n_free++;
	d->index[j] = 0;
	/* backward-shift deletion: later entries of the run move up so that no lookup stops early */
	for (;;) {
		i = (i + 1) & d->index_mask;
		if (!d->index[i])
			return;
		k = slot_hash(d, d->index[i] - 1) & d->index_mask;
		if ((i > j && (k <= j || k > i)) || (i < j && (k <= j && k > i))) {
			d->index[j] = d->index[i];
			d->index[i] = 0;
			j = i;
		}
	}
}

static int insert_at(struct mapdiff *d, uint32_t j, const uint8_t *key, const uint8_t *val, uint32_t h)
{
	uint32_t s;
	uint8_t *p;

	if (d->free_head) {
		s = d->free_head;
		memcpy(&d->free_head, slot(d, s - 1) + 4, 4);
		d->n_free--;
	} else {
		if (d->n_slots == d->cap_slots) {
			uint32_t cap = d->cap_slots ? d->cap_slots * 2 : 1024;
			uint8_t *slots = realloc(d->slots, (size_t)cap * d->slot_size);

			if (!slots)
				return -1;
			d->slots = slots;
			d->cap_slots = cap;
		}
		s = ++d->n_slots;
	}
	p = slot(d, s - 1);
	memcpy(p, &h, 4);
	memcpy(p + 4, &d->gen, 4);
	memcpy(p + 8, &d->gen, 4); /* changed: made now */
	memcpy(p + HDR, key, d->ks);
	memcpy(p + HDR + d->ks, val, d->vs);
	d->index[j] = s;
	if ((uint64_t)(mapdiff_size(d)) * 2 > d->index_mask)
		return rehash(d, d->index_mask * 2 + 1);
	return 0;
}

static uint64_t dead_hash(uint64_t pid, uint64_t start)
{
	uint64_t h = (pid * 0x9e3779b97f4a7c15ULL) ^ (start * 0xc2b2ae3d27d4eb4fULL);

	return h ^ (h >> 31);
}

/* Begins a read: `dead` holds n_dead (pid, start_ns) pairs, the tasks whose final switch was seen. */
int mapdiff_begin(struct mapdiff *d, const uint64_t *dead, uint32_t n_dead)
{
	uint32_t mask = 15, i;

	d->gen++;
	d->out_len = 0;
	d->gone_len = 0;
	d->stale_len = 0;
	d->failed = 0;
	while (mask + 1 < 2 * n_dead + 2)
		mask = mask * 2 + 1;
	free(d->dead);
	d->dead = calloc(((size_t)mask + 1) * 2, sizeof(uint64_t));
	if (!d->dead)
		return -1;
	d->dead_mask = mask;
	for (i = 0; i < n_dead; i++) {
		uint64_t pid = dead[2 * i], start = dead[2 * i + 1];
		uint32_t j = dead_hash(pid, start) & mask;

		/* slot pairs hold pid + 1 (0: empty) and start */
		while (d->dead[2 * j] && !(d->dead[2 * j] == pid + 1 && d->dead[2 * j + 1] == start))
			j = (j + 1) & mask;
		d->dead[2 * j] = pid + 1;
		d->dead[2 * j + 1] = start;
	}
	return 0;
}

static int is_dead(struct mapdiff *d, const uint8_t *key)
{
	uint32_t i;

	for (i = 0; i < d->n_ids; i++) {
		uint32_t pid;
		uint64_t start;
		uint32_t j;

		memcpy(&pid, key + d->pid_off[i], 4);
		memcpy(&start, key + d->start_off[i], 8);
		if (!pid) /* an interrupt's or the idle task's: never dead */
			continue;
		for (j = dead_hash(pid, start) & d->dead_mask; d->dead[2 * j]; j = (j + 1) & d->dead_mask)
			if (d->dead[2 * j] == (uint64_t)pid + 1 && d->dead[2 * j + 1] == start)
				return 1;
	}
	return 0;
}

static int emit(struct mapdiff *d, const uint8_t *key, const uint8_t *val, const uint8_t *prev, uint32_t flags)
{
	uint8_t *r;

	if (grow(&d->out, &d->out_cap, d->out_len + d->rec_size))
		return -1;
	r = d->out + d->out_len;
	memset(r, 0, d->rec_size);
	memcpy(r, &flags, 4);
	memcpy(r + 8, key, d->ks);
	memcpy(r + 8 + d->ks, val, d->vs);
	if (prev)
		memcpy(r + 8 + d->ks + d->vs, prev, d->vs);
	d->out_len += d->rec_size;
	return 0;
}

static int gone(struct mapdiff *d, const uint8_t *key)
{
	if (grow(&d->gone, &d->gone_cap, d->gone_len + d->ks))
		return -1;
	memcpy(d->gone + d->gone_len, key, d->ks);
	d->gone_len += d->ks;
	return 0;
}

/* One batch of `n` entries: keys and values packed, as BPF_MAP_LOOKUP_BATCH writes them. */
int mapdiff_feed(struct mapdiff *d, const uint8_t *keys, const uint8_t *vals, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n && !d->failed; i++) {
		const uint8_t *key = keys + (size_t)i * d->ks, *val = vals + (size_t)i * d->vs;
		uint32_t h = hash_bytes(key, d->ks), j;
		int found, dead = d->n_ids && is_dead(d, key);

		j = find(d, key, h, &found);
		if (found) {
			uint8_t *p = slot(d, d->index[j] - 1);

			memcpy(p + 4, &d->gen, 4);
			if (memcmp(p + HDR + d->ks, val, d->vs)) {
				if (emit(d, key, val, p + HDR + d->ks, dead ? MAPDIFF_GONE : 0)) {
					d->failed = 1;
					break;
				}
				memcpy(p + HDR + d->ks, val, d->vs);
				memcpy(p + 8, &d->gen, 4);
			}
			if (dead) {
				remove_at(d, j);
				d->failed = gone(d, key);
			}
			continue;
		}
		if (emit(d, key, val, NULL, MAPDIFF_NEW | (dead ? MAPDIFF_GONE : 0))) {
			d->failed = 1;
			break;
		}
		if (dead)
			d->failed = gone(d, key);
		else if (insert_at(d, j, key, val, h))
			d->failed = 1;
	}
	return d->failed ? -1 : 0;
}

/* Ends a read: the entries not seen in it (gone from the map) are forgotten. Returns the number of
 * changed records (each mapdiff_record_size bytes: flags u32, pad u32, key, value, previous value),
 * with `*out` pointing to them and `*gone_keys` to the `*n_gone` keys to delete from the map; both
 * stay valid until the next mapdiff_begin. -1: out of memory (nothing handed back is complete). */
long mapdiff_end(struct mapdiff *d, const uint8_t **out, const uint8_t **gone_keys, uint32_t *n_gone)
{
	uint32_t j;

	if (d->failed)
		return -1;
	for (j = 0; j <= d->index_mask; j++) {
		uint32_t s, g;

		while ((s = d->index[j])) {
			memcpy(&g, slot(d, s - 1) + 4, 4);
			if (g == d->gen)
				break;
			remove_at(d, j); /* shifts a later entry here: look at this place again */
		}
	}
	*out = d->out;
	*gone_keys = d->gone;
	*n_gone = (uint32_t)(d->gone_len / d->ks);
	return (long)(d->out_len / d->rec_size);
}

/* After mapdiff_end: the keys of at most `max` entries seen in this read that have not moved for `idle` reads
 * or more, for user space to take out of the map (`*keys`, valid until the next mapdiff_begin). Their count. */
long mapdiff_stale(struct mapdiff *d, uint32_t idle, uint32_t max, const uint8_t **keys)
{
	uint32_t j, n = 0;

	d->stale_len = 0;
	for (j = 0; j <= d->index_mask && n < max; j++) {
		uint32_t s = d->index[j], seen, changed;
		uint8_t *p;

		if (!s)
			continue;
		p = slot(d, s - 1);
		memcpy(&seen, p + 4, 4);
		memcpy(&changed, p + 8, 4);
		if (seen != d->gen || d->gen - changed < idle)
			continue;
		if (grow(&d->stale, &d->stale_cap, d->stale_len + d->ks))
			return -1;
		memcpy(d->stale + d->stale_len, p + HDR, d->ks);
		d->stale_len += d->ks;
		n++;
	}
	*keys = d->stale;
	return n;
}

/* The `n` stale keys taken out of the map: `vals` holds the value each had as it was deleted (packed, one per
 * key), `present` whether it was still there (0: gone meanwhile, nothing read). Each is forgotten; one whose
 * value moved since this read is added to the read's changed records. 0, or -1: out of memory. */
int mapdiff_evicted(struct mapdiff *d, const uint8_t *keys, const uint8_t *vals, const uint8_t *present, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		const uint8_t *key = keys + (size_t)i * d->ks, *val = vals + (size_t)i * d->vs;
		uint32_t h = hash_bytes(key, d->ks), j;
		int found;

		j = find(d, key, h, &found);
		if (!found)
			continue;
		if (present[i]) {
			uint8_t *p = slot(d, d->index[j] - 1);

			if (memcmp(p + HDR + d->ks, val, d->vs) && emit(d, key, val, p + HDR + d->ks, 0))
				return -1;
		}
		remove_at(d, j);
	}
	return 0;
}

/* The read's changed records, after mapdiff_evicted added to them: their count, `*out` pointing to them. */
long mapdiff_output(struct mapdiff *d, const uint8_t **out)
{
	*out = d->out;
	return (long)(d->out_len / d->rec_size);
}
