// SPDX-License-Identifier: GPL-2.0
/* A closed recording's wakeup rows folded per key in C, in a thread beside the rest of the read
 * (analyzer/wakefold.py; analyzer/model.py WakeFold.add folds the same rows the same way in Python).
 *
 * The synthetic 10-minute hackbench recording holds 401,727 waker rows of 21 columns for 10,034 keys: read
 * into records (two task ids and two wait links each) and folded with the rest, they were a third of the
 * report's read. Here SQLite is stepped through the statement the reader gives (idx, the wakers columns in
 * store.py _WAKER_COLUMNS order, then `ok`, whether the row holds what the writer writes) with the
 * interpreter's lock let go, each row checked (each column's type against its kind, as analyzer/rowread.c checks
 * them; or, where values have bounds, the statement's `ok`) and folded into its key's sums; Python then makes one
 * object per key.
 *
 * What Python reads from it: the keys in the order first met, each with its waker's name as first met and its
 * sums, and the rows left out as damaged. A sum that would not fit in 64 bits stops the fold (None): the
 * caller then folds the records in Python, whose integers do not overflow. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the statement's columns */
enum {
	C_IDX, C_PID, C_START, C_WAKER_PID, C_WAKER_START, C_WAKER_TGID, C_WAKER_COMM, C_WAKER_KSTACK, C_COUNT,
	C_TOTAL, C_IN_INTERRUPT, C_EXITING, C_LINK_FUNC, C_LINK_STATE, C_LINK_WHY, C_WEIGHTED, C_LINK_BLOCKED,
	C_LINK_RUNQ, C_WAKEE_FUNC, C_WAKEE_STATE, C_WAKEE_WHY, C_OK, N_COLUMNS
};

/* WakeFold's key: task, waker, waker tgid, waker kstack, in interrupt, exiting, link, wakee (each id and link
 * spelled out) */
enum { K_PID, K_START, K_WAKER_PID, K_WAKER_START, K_WAKER_TGID, K_WAKER_KSTACK, K_IN_INTERRUPT, K_EXITING,
       K_LINK_FUNC, K_LINK_STATE, K_LINK_WHY, K_WAKEE_FUNC, K_WAKEE_STATE, K_WAKEE_WHY, KEY_WORDS };
/* ... and its sums: count, total, weighted, the link's blocked and run-queue parts */
enum { S_COUNT, S_TOTAL, S_WEIGHTED, S_LINK_BLOCKED, S_LINK_RUNQ, SUMS };

struct entry {
	int64_t key[KEY_WORDS];
	int64_t sum[SUMS];
	size_t comm_at, comm_len; /* the waker's name as first met, in `names` */
};

/* what a column may hold (analyzer/rowread.py KINDS: any, int, int or NULL, text, text or NULL) */
#define T(type) (1u << (type))
static const unsigned kind_types[] = {
	T(SQLITE_INTEGER) | T(SQLITE_NULL), T(SQLITE_INTEGER), T(SQLITE_INTEGER) | T(SQLITE_NULL), T(SQLITE_TEXT),
	T(SQLITE_TEXT) | T(SQLITE_NULL),
};
#define N_KINDS (sizeof(kind_types) / sizeof(kind_types[0]))

struct fold {
	struct entry *entries;
	size_t n, cap;
	uint32_t *index; /* open addressing: entry number + 1, 0 empty */
	size_t mask;
	char *names;
	size_t names_len, names_cap;
	long long damaged;
	int overflow;
	int no_memory;
	const unsigned char *kinds; /* one per column before `ok` (NULL: `ok` checks the rows) */
};

static uint64_t hash_key(const int64_t *k)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (int i = 0; i < KEY_WORDS; i++) {
		h ^= (uint64_t)k[i];
		h *= 0x100000001b3ULL;
		h ^= h >> 29;
	}
	return h;
}

static int reindex(struct fold *f, size_t size)
{
	uint32_t *t = calloc(size, sizeof(*t));
	if (!t)
		return -1;
	for (size_t i = 0; i < f->n; i++) {
		size_t at = hash_key(f->entries[i].key) & (size - 1);
		while (t[at])
			at = (at + 1) & (size - 1);
		t[at] = (uint32_t)(i + 1);
	}
	free(f->index);
	f->index = t;
	f->mask = size - 1;
	return 0;
}

/* the entry of this key, made (its sums 0, its name this one) when first met; NULL out of memory */
static struct entry *entry_of(struct fold *f, const int64_t *key, const unsigned char *comm, size_t comm_len)
{
	if (!f->index || 2 * (f->n + 1) > f->mask + 1) {
		if (f->n >= UINT32_MAX / 2 || reindex(f, f->index ? 2 * (f->mask + 1) : 1024) < 0)
			return NULL;
	}
	size_t at = hash_key(key) & f->mask;
	for (; f->index[at]; at = (at + 1) & f->mask) {
		struct entry *e = &f->entries[f->index[at] - 1];
		if (!memcmp(e->key, key, sizeof(e->key)))
			return e;
	}
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 1024;
		struct entry *p = realloc(f->entries, cap * sizeof(*p));
		if (!p)
			return NULL;
		f->entries = p;
		f->cap = cap;
	}
	if (f->names_len + comm_len > f->names_cap) {
		size_t cap = f->names_cap ? f->names_cap : 4096;
		while (cap < f->names_len + comm_len)
			cap *= 2;
		char *p = realloc(f->names, cap);
		if (!p)
			return NULL;
		f->names = p;
		f->names_cap = cap;
	}
	struct entry *e = &f->entries[f->n];
	memcpy(e->key, key, sizeof(e->key));
	memset(e->sum, 0, sizeof(e->sum));
	e->comm_at = f->names_len;
	e->comm_len = comm_len;
	if (comm_len)
		memcpy(f->names + f->names_len, comm, comm_len);
	f->names_len += comm_len;
	f->index[at] = (uint32_t)++f->n;
	return e;
}

/* the current row's cells, each read from the statement once (sqlite3_column_value: one call into SQLite's API,
 * where column_type then column_int64 made two, each taking the connection's mutex), and their types; valid until
 * the next step. The values are SQLite's unprotected ones, read with sqlite3_value_*: safe where, as here, one thread
 * alone uses the connection (opened SQLITE_OPEN_NOMUTEX, it takes no mutex either way) */
struct cells {
	sqlite3_value *v[N_COLUMNS];
	int t[N_COLUMNS];
};

static void cells_read(struct cells *r, sqlite3_stmt *st)
{
	for (int c = 0; c < N_COLUMNS; c++) {
		r->v[c] = sqlite3_column_value(st, c);
		r->t[c] = sqlite3_value_type(r->v[c]);
	}
}

/* the row the statement is on folded in; -1 out of memory */
static int fold_row(struct fold *f, const struct cells *st)
{
	if (!sqlite3_value_int64(st->v[C_OK])) {
		f->damaged++;
		return 0;
	}
	for (int c = 0; f->kinds && c < C_OK; c++) {
		if (!(kind_types[f->kinds[c] < N_KINDS ? f->kinds[c] : 0] & T(st->t[c]))) {
			f->damaged++;
			return 0;
		}
	}
	int64_t key[KEY_WORDS];
	key[K_PID] = sqlite3_value_int64(st->v[C_PID]);
	key[K_START] = sqlite3_value_int64(st->v[C_START]);
	key[K_WAKER_PID] = sqlite3_value_int64(st->v[C_WAKER_PID]);
	key[K_WAKER_START] = sqlite3_value_int64(st->v[C_WAKER_START]);
	key[K_WAKER_TGID] = sqlite3_value_int64(st->v[C_WAKER_TGID]);
	key[K_WAKER_KSTACK] = sqlite3_value_int64(st->v[C_WAKER_KSTACK]);
	key[K_IN_INTERRUPT] = sqlite3_value_int64(st->v[C_IN_INTERRUPT]) != 0; /* bool(); NULL reads as 0 */
	key[K_EXITING] = sqlite3_value_int64(st->v[C_EXITING]) != 0;
	key[K_LINK_FUNC] = sqlite3_value_int64(st->v[C_LINK_FUNC]); /* `or 0` */
	key[K_LINK_STATE] = sqlite3_value_int64(st->v[C_LINK_STATE]);
	key[K_LINK_WHY] = sqlite3_value_int64(st->v[C_LINK_WHY]);
	key[K_WAKEE_FUNC] = sqlite3_value_int64(st->v[C_WAKEE_FUNC]);
	key[K_WAKEE_STATE] = sqlite3_value_int64(st->v[C_WAKEE_STATE]);
	key[K_WAKEE_WHY] = sqlite3_value_int64(st->v[C_WAKEE_WHY]);
	const unsigned char *comm = sqlite3_value_text(st->v[C_WAKER_COMM]);
	size_t comm_len = comm ? (size_t)sqlite3_value_bytes(st->v[C_WAKER_COMM]) : 0;
	struct entry *e = entry_of(f, key, comm, comm_len);
	if (!e)
		return -1;
	int64_t total = sqlite3_value_int64(st->v[C_TOTAL]);
	int64_t add[SUMS] = {
		[S_COUNT] = sqlite3_value_int64(st->v[C_COUNT]),
		[S_TOTAL] = total,
		/* WakerDelta.weighted: the weighted time, or (NULL: an older recording) the total */
		[S_WEIGHTED] = st->t[C_WEIGHTED] == SQLITE_NULL ? total
										: sqlite3_value_int64(st->v[C_WEIGHTED]),
		[S_LINK_BLOCKED] = sqlite3_value_int64(st->v[C_LINK_BLOCKED]),
		[S_LINK_RUNQ] = sqlite3_value_int64(st->v[C_LINK_RUNQ]),
	};
	for (int i = 0; i < SUMS; i++)
		if (__builtin_add_overflow(e->sum[i], add[i], &e->sum[i]))
			f->overflow = 1;
	return 0;
}

/* whether the row is of an interval read: its idx an integer, or a real equal to one (a damaged cell, which
 * the row's `ok` then leaves out); a real between two integers matches no interval, and is skipped */
static int of_an_interval(const struct cells *st)
{
	if (st->t[C_IDX] == SQLITE_INTEGER)
		return 1;
	double d = sqlite3_value_double(st->v[C_IDX]);
	return d > -9e18 && d < 9e18 && d == (double)(long long)d;
}

static void fold_free(struct fold *f)
{
	free(f->entries);
	free(f->index);
	free(f->names);
}

static PyObject *u64(int64_t v)
{
	return PyLong_FromUnsignedLongLong((unsigned long long)v);
}

/* one key, its name and its sums as Python reads them: (pid, start, waker pid, waker start, waker tgid, waker
 * kstack (unsigned), in interrupt, exiting, link func (unsigned), state, why, wakee func (unsigned), state,
 * why, name, count, total, weighted, link blocked, link runq) */
static PyObject *entry_tuple(const struct fold *f, const struct entry *e)
{
	PyObject *t = PyTuple_New(KEY_WORDS + 1 + SUMS);
	if (!t)
		return NULL;
	for (int i = 0; i < KEY_WORDS; i++) {
		PyObject *v;
		if (i == K_WAKER_KSTACK || i == K_LINK_FUNC || i == K_WAKEE_FUNC)
			v = u64(e->key[i]);
		else if (i == K_IN_INTERRUPT || i == K_EXITING)
			v = Py_NewRef(e->key[i] ? Py_True : Py_False);
		else
			v = PyLong_FromLongLong(e->key[i]);
		if (!v)
			goto fail;
		PyTuple_SET_ITEM(t, i, v);
	}
	PyObject *name = PyUnicode_DecodeUTF8(f->names + e->comm_at, (Py_ssize_t)e->comm_len, "replace");
	if (!name)
		goto fail;
	PyTuple_SET_ITEM(t, KEY_WORDS, name);
	for (int i = 0; i < SUMS; i++) {
		PyObject *v = PyLong_FromLongLong(e->sum[i]);
		if (!v)
			goto fail;
		PyTuple_SET_ITEM(t, KEY_WORDS + 1 + i, v);
	}
	return t;
fail:
	Py_DECREF(t);
	return NULL;
}

static PyObject *ReadError; /* SQLite failed: its message */

/* fold(uri, sql, first, last, kinds): ([entry tuples, in the order first met], damaged rows), or None where a
 * sum would not fit in 64 bits; kinds: bytes, each column's kind before `ok`, or None (`ok` checks the rows) */
static PyObject *fold(PyObject *Py_UNUSED(m), PyObject *args)
{
	const char *uri, *sql;
	long long first, last;
	PyObject *kinds;
	if (!PyArg_ParseTuple(args, "ssLLO:fold", &uri, &sql, &first, &last, &kinds))
		return NULL;
	if (kinds != Py_None && (!PyBytes_Check(kinds) || PyBytes_GET_SIZE(kinds) != C_OK)) {
		PyErr_Format(PyExc_ValueError, "kinds: None, or bytes of %d kinds", C_OK);
		return NULL;
	}
	struct fold f = {0};
	Py_INCREF(kinds); /* held while the lock is let go */
	f.kinds = kinds == Py_None ? NULL : (const unsigned char *)PyBytes_AS_STRING(kinds);
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	struct cells row;
	char error[256] = "";
	int rc;

	Py_BEGIN_ALLOW_THREADS
	rc = sqlite3_open_v2(uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_column_count(st) != N_COLUMNS) {
		snprintf(error, sizeof(error), "the statement selects %d columns, not %d", sqlite3_column_count(st),
			 N_COLUMNS);
		rc = SQLITE_MISUSE;
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(st, 1, first);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(st, 2, last);
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		cells_read(&row, st);
		if (!of_an_interval(&row)) {
			rc = SQLITE_OK;
			continue;
		}
		if (fold_row(&f, &row) < 0) {
			f.no_memory = 1;
			break;
		}
		rc = f.overflow ? SQLITE_DONE : SQLITE_OK;
	}
	if (rc != SQLITE_DONE && !f.no_memory && !error[0])
		snprintf(error, sizeof(error), "%s", db ? sqlite3_errmsg(db) : "out of memory");
	sqlite3_finalize(st);
	sqlite3_close(db);
	Py_END_ALLOW_THREADS

	PyObject *out = NULL, *list = NULL;
	if (f.no_memory) {
		PyErr_NoMemory();
	} else if (error[0]) {
		PyErr_SetString(ReadError, error);
	} else if (f.overflow) {
		out = Py_NewRef(Py_None);
	} else if ((list = PyList_New((Py_ssize_t)f.n))) {
		for (size_t i = 0; i < f.n; i++) {
			PyObject *t = entry_tuple(&f, &f.entries[i]);
			if (!t) {
				Py_CLEAR(list);
				break;
			}
			PyList_SET_ITEM(list, (Py_ssize_t)i, t);
		}
		if (list)
			out = Py_BuildValue("(NL)", list, f.damaged);
	}
	fold_free(&f);
	Py_DECREF(kinds);
	return out;
}

static PyMethodDef module_methods[] = {
	{"fold", fold, METH_VARARGS,
	 "fold(uri, sql, first, last, kinds): a recording's wakeup rows folded per key, the interpreter's lock let go."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_wakefold", "A recording's wakeup rows folded per key in C.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__wakefold(void)
{
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	ReadError = PyErr_NewException("stallscope.analyzer._wakefold.ReadError", NULL, NULL);
	if (!ReadError || PyModule_AddObjectRef(m, "ReadError", ReadError) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
