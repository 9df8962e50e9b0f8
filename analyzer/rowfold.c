// SPDX-License-Identifier: GPL-2.0
/* A recording's kernel lock contentions folded per key, read from the file in C (analyzer/rowfold.py).
 *
 * A report of a long recording reads a million lock rows (10 minutes of hackbench: 1.3 million). Handed
 * to Python, each row was a tuple of 24 objects, then folded into its key's totals: more time than the
 * rest of the report together. Here the rows are stepped in SQLite's own C API, through the statement
 * the reader gives (its columns in LOCK_VALUES order after `idx`, then `ok`, whether the row holds what
 * the writer writes), and folded as analyzer/model.py LockFold.add folds them; Python makes one object
 * per key instead of one per row.
 *
 * Kept for Python to read: the keys, in the order first met, with their totals (LockFold's layout, text
 * cells as ids into a table of the distinct strings); per row kept, in order, (key number, count, wait
 * ns) for the report's series, and where each interval's rows begin; the rows left out as damaged, and
 * the invariants' counts. A total that would not fit in 64 bits stops the fold (`overflow`): the caller
 * then folds in Python, whose integers do not overflow. Plain C and SQLite, no Python API: loaded with
 * ctypes, using the libsqlite3 Python's sqlite3 module uses. */
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* text cells: a string's id into the table; and these two for a NULL and an empty cell */
#define ID_NULL (-1)
#define ID_EMPTY (-2)

/* the statement's columns: idx, then LOCK_VALUES (analyzer/sample.py), then ok */
enum {
	C_IDX, C_PID, C_START, C_TGID, C_ADDR, C_FLAGS, C_KIND, C_CACHE, C_KSTACK, C_COUNT, C_TOTAL, C_MAX,
	C_MIN, C_SPIN, C_SLEEP, C_OWNER_PID, C_OWNER_COMM, C_SYMBOL, C_BLOCKED, C_RUNNABLE, C_WEIGHTED,
	C_VAR, C_FIELD, C_OBJECT, C_OK, N_COLUMNS
};

#define KEY_WORDS 8 /* pid, start_ns, tgid, addr, flags, kind, cache (an id), kstack */
/* LockFold's accumulator: count, total, max, min, spin, sleep, owner pid, owner comm, symbol, blocked,
 * runnable, weighted, var, field, object (text cells as ids) */
#define ACC_WORDS 15
enum { A_COUNT, A_TOTAL, A_MAX, A_MIN, A_SPIN, A_SLEEP, A_OWNER_PID, A_OWNER_COMM, A_SYMBOL, A_BLOCKED,
       A_RUNNABLE, A_WEIGHTED, A_VAR, A_FIELD, A_OBJECT };

struct vec {
	uint8_t *p;
	size_t len, cap; /* bytes */
};

struct rowfold {
	sqlite3 *db;
	struct vec keys, acc, parts, segments, text, text_at;
	uint32_t n_keys, n_text;
	uint32_t *index; /* open addressing: key number + 1, 0 empty */
	uint32_t index_mask;
	uint32_t *text_index; /* the same for the strings */
	uint32_t text_mask;
	int64_t damaged, too_long, bad_split;
	int overflow, failed;
	char error[256];
};

static int grow(struct vec *v, size_t more)
{
	if (v->len + more <= v->cap)
		return 0;
	size_t cap = v->cap ? v->cap : 4096;
	while (cap < v->len + more)
		cap *= 2;
	uint8_t *p = realloc(v->p, cap);
	if (!p)
		return -1;
	v->p = p;
	v->cap = cap;
	return 0;
}

static int push(struct vec *v, const void *data, size_t n)
{
	if (grow(v, n))
		return -1;
	memcpy(v->p + v->len, data, n);
	v->len += n;
	return 0;
}

static uint64_t mix(uint64_t h, uint64_t w)
{
	h ^= w;
	h *= 0x100000001b3ULL;
	h ^= h >> 29;
	return h;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* a table of slot numbers + 1 twice as large as what it holds, rebuilt from `n` items when full */
static int rehash(uint32_t **table, uint32_t *mask, uint32_t n, uint64_t (*hash_of)(struct rowfold *, uint32_t),
		  struct rowfold *f)
{
	uint32_t size = 1024;

	while (size < 2 * (n + 1))
		size *= 2;
	uint32_t *t = calloc(size, sizeof(*t));
	if (!t)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t at = (uint32_t)hash_of(f, i) & (size - 1);
		while (t[at])
			at = (at + 1) & (size - 1);
		t[at] = i + 1;
	}
	free(*table);
	*table = t;
	*mask = size - 1;
	return 0;
}

static const int64_t *key_at(struct rowfold *f, uint32_t i)
{
	return (const int64_t *)f->keys.p + (size_t)i * KEY_WORDS;
}

static uint64_t key_hash(struct rowfold *f, uint32_t i)
{
	const int64_t *k = key_at(f, i);
	uint64_t h = 0xcbf29ce484222325ULL;

	for (int j = 0; j < KEY_WORDS; j++)
		h = mix(h, (uint64_t)k[j]);
	return h;
}

static uint64_t text_hash(struct rowfold *f, uint32_t i)
{
	const uint64_t *at = (const uint64_t *)f->text_at.p;

	return hash_bytes(f->text.p + at[i], at[i + 1] - at[i]);
}

/* a row's cells, each read from the statement once (sqlite3_column_value: one call into SQLite's API, where
 * column_type then column_int64 made two, each taking the connection's mutex), and their types; valid until the
 * next step. The values are SQLite's unprotected ones, read with sqlite3_value_*: safe where, as here, one thread
 * alone uses the connection (opened SQLITE_OPEN_NOMUTEX, it takes no mutex either way) */
struct row {
	sqlite3_value *v[N_COLUMNS];
	int t[N_COLUMNS];
};

static void row_read(struct row *r, sqlite3_stmt *st)
{
	for (int c = 0; c < N_COLUMNS; c++) {
		r->v[c] = sqlite3_column_value(st, c);
		r->t[c] = sqlite3_value_type(r->v[c]);
	}
}

/* a text cell's id: interned, NULL and empty apart */
static int64_t text_id(struct rowfold *f, const struct row *r, int col)
{
	if (r->t[col] == SQLITE_NULL)
		return ID_NULL;
	const uint8_t *s = sqlite3_value_text(r->v[col]);
	size_t n = (size_t)sqlite3_value_bytes(r->v[col]);
	if (!s || !n)
		return s ? ID_EMPTY : ID_NULL;
	if (2 * (f->n_text + 1) > f->text_mask + 1 &&
	    rehash(&f->text_index, &f->text_mask, f->n_text, text_hash, f))
		goto nomem;
	uint64_t h = hash_bytes(s, n);
	const uint64_t *at = (const uint64_t *)f->text_at.p;
	uint32_t slot = (uint32_t)h & f->text_mask;
	for (uint32_t id; (id = f->text_index[slot]); slot = (slot + 1) & f->text_mask) {
		if (at[id] - at[id - 1] == n && !memcmp(f->text.p + at[id - 1], s, n))
			return id - 1;
	}
	uint64_t end = f->text.len + n;
	if (push(&f->text, s, n) || push(&f->text_at, &end, sizeof(end)))
		goto nomem;
	f->text_index[slot] = ++f->n_text;
	return f->n_text - 1;
nomem:
	f->failed = 1;
	return ID_NULL;
}

static int64_t col_int(const struct row *r, int col, int *null)
{
	if (r->t[col] == SQLITE_NULL) {
		*null = 1;
		return 0;
	}
	*null = 0;
	return sqlite3_value_int64(r->v[col]);
}

static int add(struct rowfold *f, int64_t *a, int64_t v)
{
	if (__builtin_add_overflow(*a, v, a)) {
		f->overflow = 1;
		return -1;
	}
	return 0;
}

/* the row's key number, made when first met */
static int64_t key_number(struct rowfold *f, const int64_t *key)
{
	if (2 * (f->n_keys + 1) > f->index_mask + 1 && rehash(&f->index, &f->index_mask, f->n_keys, key_hash, f))
		return -1;
	uint64_t h = 0xcbf29ce484222325ULL;
	for (int j = 0; j < KEY_WORDS; j++)
		h = mix(h, (uint64_t)key[j]);
	uint32_t slot = (uint32_t)h & f->index_mask;
	for (uint32_t n; (n = f->index[slot]); slot = (slot + 1) & f->index_mask) {
		if (!memcmp(key_at(f, n - 1), key, KEY_WORDS * sizeof(*key)))
			return n - 1;
	}
	int64_t e[ACC_WORDS] = { 0 };
	e[A_OWNER_COMM] = e[A_SYMBOL] = e[A_FIELD] = e[A_OBJECT] = ID_EMPTY;
	if (push(&f->keys, key, KEY_WORDS * sizeof(*key)) || push(&f->acc, e, sizeof(e)))
		return -1;
	f->index[slot] = ++f->n_keys;
	return f->n_keys - 1;
}

/* one row folded as LockFold.add and checked as LockFold.check does (`span`: its interval's limit) */
static int fold_row(struct rowfold *f, const struct row *st, int64_t span)
{
	int64_t key[KEY_WORDS];
	int null, blocked_null, runnable_null;

	for (int j = 0; j < KEY_WORDS; j++)
		key[j] = j == 6 ? text_id(f, st, C_CACHE) : col_int(st, C_PID + j, &null);
	int64_t n = key_number(f, key);
	if (n < 0 || f->failed)
		return -1;
	int64_t *e = (int64_t *)f->acc.p + (size_t)n * ACC_WORDS;
	int64_t count = col_int(st, C_COUNT, &null), total = col_int(st, C_TOTAL, &null);
	int64_t max = col_int(st, C_MAX, &null), min = col_int(st, C_MIN, &null);
	int64_t blocked = col_int(st, C_BLOCKED, &blocked_null), runnable = col_int(st, C_RUNNABLE, &runnable_null);

	if (e[A_FIELD] < 0) { /* `e[13] or fld or ""` */
		int64_t id = text_id(f, st, C_FIELD);
		e[A_FIELD] = id >= 0 ? id : ID_EMPTY;
	}
	if (e[A_OBJECT] < 0) {
		int64_t id = text_id(f, st, C_OBJECT);
		e[A_OBJECT] = id >= 0 ? id : ID_EMPTY;
	}
	if (blocked_null || e[A_BLOCKED] < 0) {
		e[A_BLOCKED] = e[A_RUNNABLE] = -1;
	} else if (add(f, &e[A_BLOCKED], blocked) || add(f, &e[A_RUNNABLE], runnable)) {
		return -1;
	}
	if (add(f, &e[A_WEIGHTED], col_int(st, C_WEIGHTED, &null)) || add(f, &e[A_VAR], col_int(st, C_VAR, &null)))
		return -1;
	if (e[A_SYMBOL] < 0) /* Python's `e[8] or symbol`: an empty or NULL one gives way, even to NULL */
		e[A_SYMBOL] = text_id(f, st, C_SYMBOL);
	if (add(f, &e[A_COUNT], count) || add(f, &e[A_TOTAL], total))
		return -1;
	if (max > e[A_MAX])
		e[A_MAX] = max;
	e[A_MIN] = e[A_MIN] && min ? (min < e[A_MIN] ? min : e[A_MIN]) : (e[A_MIN] ? e[A_MIN] : min);
	if (add(f, &e[A_SPIN], col_int(st, C_SPIN, &null)) || add(f, &e[A_SLEEP], col_int(st, C_SLEEP, &null)))
		return -1;
	int64_t owner = col_int(st, C_OWNER_PID, &null);
	if (owner) {
		e[A_OWNER_PID] = owner;
		e[A_OWNER_COMM] = text_id(f, st, C_OWNER_COMM);
	}
	if (max > span)
		f->too_long++;
	if (!blocked_null) {
		int64_t split;
		if (__builtin_add_overflow(blocked, runnable_null ? 0 : runnable, &split) || split > total)
			f->bad_split++;
	}
	int64_t part[3] = { n, count, total };
	return f->failed || push(&f->parts, part, sizeof(part)) ? -1 : 0;
}

struct rowfold *rowfold_open(const char *uri)
{
	struct rowfold *f = calloc(1, sizeof(*f));
	uint64_t zero = 0;

	if (!f)
		return NULL;
	if (push(&f->text_at, &zero, sizeof(zero)))
		goto fail;
	if (sqlite3_open_v2(uri, &f->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		snprintf(f->error, sizeof(f->error), "%s", f->db ? sqlite3_errmsg(f->db) : "out of memory");
		f->failed = 1;
	}
	return f;
fail:
	free(f);
	return NULL;
}

/* what a column must hold (analyzer/recording_checks.py COLUMNS), checked here rather than by an SQL
 * expression per row: SQLite evaluating `typeof(c) = 'integer' AND ...` took as long as the rest */
enum { K_ANY, K_INT, K_INT_OR_NULL, K_TEXT, K_TEXT_OR_NULL, N_KINDS };
#define T(type) (1u << (type))
static const unsigned kind_types[N_KINDS] = {
	[K_ANY] = ~0u,
	[K_INT] = T(SQLITE_INTEGER),
	[K_INT_OR_NULL] = T(SQLITE_INTEGER) | T(SQLITE_NULL),
	[K_TEXT] = T(SQLITE_TEXT),
	[K_TEXT_OR_NULL] = T(SQLITE_TEXT) | T(SQLITE_NULL),
};

static int row_ok(const struct row *r, const int8_t *kinds)
{
	if (!sqlite3_value_int(r->v[C_OK]))
		return 0;
	for (int c = 0; kinds && c < C_OK; c++) {
		unsigned k = (unsigned)kinds[c] < N_KINDS ? (unsigned)kinds[c] : K_ANY;
		if (!(kind_types[k] & T(r->t[c])))
			return 0;
	}
	return 1;
}

/* The rows `sql` selects (two parameters: the first and last interval), those of the `n` intervals
 * `idx` names (ascending; `span`: each one's limit for the longest wait), folded; a row is damaged when
 * its `ok` column is false or a column is not of its kind (`kinds`, one per column before `ok`; NULL:
 * `ok` alone). 0, or -1 with `error` set (SQLite's message), or -2 when a total overflowed. */
int rowfold_locks(struct rowfold *f, const char *sql, const int8_t *kinds, const int64_t *idx, const int64_t *span,
		  uint32_t n)
{
	sqlite3_stmt *st = NULL;
	struct row row;
	int rc;
	uint32_t at = 0;
	int64_t current = INT64_MIN;

	if (f->failed)
		return -1;
	if (!n)
		return 0;
	if (sqlite3_prepare_v2(f->db, sql, -1, &st, NULL) != SQLITE_OK)
		goto error;
	if (sqlite3_column_count(st) != N_COLUMNS) {
		snprintf(f->error, sizeof(f->error), "the lock statement has %d columns, not %d",
			 sqlite3_column_count(st), N_COLUMNS);
		sqlite3_finalize(st);
		return -1;
	}
	sqlite3_bind_int64(st, 1, idx[0]);
	sqlite3_bind_int64(st, 2, idx[n - 1]);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int null;
		row_read(&row, st);
		int64_t i = col_int(&row, C_IDX, &null);
		if (null)
			continue;
		while (at < n && idx[at] < i)
			at++;
		if (at == n || idx[at] != i) /* an interval not read (a damaged file's) */
			continue;
		if (!row_ok(&row, kinds)) {
			f->damaged++;
			continue;
		}
		if (i != current) { /* where this interval's parts begin */
			int64_t seg[2] = { i, (int64_t)(f->parts.len / (3 * sizeof(int64_t))) };
			if (push(&f->segments, seg, sizeof(seg)))
				goto nomem;
			current = i;
		}
		if (fold_row(f, &row, span[at])) {
			if (f->overflow) {
				sqlite3_finalize(st);
				return -2;
			}
			goto nomem;
		}
	}
	if (rc != SQLITE_DONE)
		goto error;
	sqlite3_finalize(st);
	return 0;
error:
	snprintf(f->error, sizeof(f->error), "%s", sqlite3_errmsg(f->db));
	sqlite3_finalize(st);
	return -1;
nomem:
	snprintf(f->error, sizeof(f->error), "out of memory");
	sqlite3_finalize(st);
	return -1;
}

const char *rowfold_error(struct rowfold *f) { return f->error; }
uint32_t rowfold_keys(struct rowfold *f, const int64_t **keys, const int64_t **acc)
{
	*keys = (const int64_t *)f->keys.p;
	*acc = (const int64_t *)f->acc.p;
	return f->n_keys;
}

/* (key number, count, wait ns) per row kept, and (interval, first part) where each interval begins */
uint64_t rowfold_parts(struct rowfold *f, const int64_t **parts, const int64_t **segments, uint64_t *n_segments)
{
	*parts = (const int64_t *)f->parts.p;
	*segments = (const int64_t *)f->segments.p;
	*n_segments = f->segments.len / (2 * sizeof(int64_t));
	return f->parts.len / (3 * sizeof(int64_t));
}

/* the distinct strings, one after another, and where each ends */
uint32_t rowfold_text(struct rowfold *f, const uint8_t **text, const uint64_t **ends)
{
	*text = f->text.p;
	*ends = (const uint64_t *)f->text_at.p + 1;
	return f->n_text;
}

void rowfold_counts(struct rowfold *f, int64_t *out)
{
	out[0] = f->damaged;
	out[1] = f->too_long;
	out[2] = f->bad_split;
}

void rowfold_free(struct rowfold *f)
{
	if (!f)
		return;
	sqlite3_close(f->db);
	free(f->keys.p);
	free(f->acc.p);
	free(f->parts.p);
	free(f->segments.p);
	free(f->text.p);
	free(f->text_at.p);
	free(f->index);
	free(f->text_index);
	free(f);
}
