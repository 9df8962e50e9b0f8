// SPDX-License-Identifier: GPL-2.0
/* A recording's largest per-wait tables read into records in C (analyzer/rowread.py).
 *
 * A report of 10 minutes of hackbench reads 377,549 off-CPU rows and 225,852 task rows. Through Python's
 * sqlite3 module each row was a tuple of 16 objects, then a lambda made the record from it: a histogram
 * cell matched by a regular expression and parsed as JSON, the unsigned ids fixed, the defaults put in,
 * about 10 us a row, the largest part of a report. Here the rows are stepped in SQLite's C API through
 * the statement the reader gives (its columns in the shape's order, `idx` first), each column's type is
 * checked against its kind (analyzer/recording_checks.py COLUMNS; a row that fails is damaged, counted,
 * left out), and the record is made as analyzer/sample.py record_maker makes it.
 *
 * Only what is certain is done here: a histogram or waker cell in the writer's own form (digits, no
 * space, no leading zero) is parsed here; any other text is handed to the Python parser, whose answer
 * (a value, or DamagedRow) stands. So a damaged or hand-edited file reads as the Python reader reads it.
 *
 * The module's other pieces, each the C side of a Python function that does the same where the module is
 * not built: Maker (analyzer/sample.py record_maker: every record the analyzer makes), lock_waits (a lock
 * fold's records, analyzer/rowfold.py), and for `top`'s drain Slots and Deltas (bpf/task_dump.py
 * slot_deltas and task_delta: a task dump entry's own off-CPU slots and its delta), scan_dump (bpf/collector.py
 * py_scan_dump: the dump's entries, each through those two) and lock_deltas (bpf/lock_collector.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include "slots.h"

/* analyzer/rowread.py SHAPES: which table, and so which columns and which record */
enum { SHAPE_TASK = 1, SHAPE_OFFCPU = 2, SHAPE_WAKER = 3, SHAPE_ONGOING = 4, SHAPE_OPENED = 5, SHAPE_ONCPU = 6 };
#define TASK_COLUMNS 15 /* idx, pid, start_ns, 9 counters, runq_hist, runq_latency_ns, run_ns */
#define OFFCPU_COLUMNS 17 /* idx, pid, start_ns, tgid, state, kstack, ustack, count, total_ns, max_ns, hist,
			   * why, func, charged_ns, weighted_ns, var_us2, woken */
#define WAKER_COLUMNS 21 /* idx, pid, start_ns, waker_pid, waker_start_ns, waker_tgid, waker_comm, waker_kstack,
			  * count, total_ns, in_interrupt, exiting, link_func, link_state, link_why, weighted_ns,
			  * link_blocked_ns, link_runq_ns, wakee_func, wakee_state, wakee_why */
/* ongoing and opened: idx, pid, start_ns, tgid, state, kstack, ustack, why, func, since_ns */
#define WAIT_COLUMNS 10
#define ONCPU_COLUMNS 9 /* idx, pid, start_ns, tgid, comm, kstack, ustack, samples, period_ns */
#define MAX_COLUMNS 21

/* what a column must hold: analyzer/rowfold.py KINDS */
enum { K_ANY, K_INT, K_INT_OR_NULL, K_TEXT, K_TEXT_OR_NULL, N_KINDS };
#define T(type) (1u << (type))
static const unsigned kind_types[N_KINDS] = {
	[K_ANY] = T(SQLITE_INTEGER) | T(SQLITE_NULL), /* a default put in for a column the file lacks */
	[K_INT] = T(SQLITE_INTEGER),
	[K_INT_OR_NULL] = T(SQLITE_INTEGER) | T(SQLITE_NULL),
	[K_TEXT] = T(SQLITE_TEXT),
	[K_TEXT_OR_NULL] = T(SQLITE_TEXT) | T(SQLITE_NULL),
};

#define CELLS_KEPT (1 << 16) /* as analyzer/recording_checks.py _CELLS_KEPT */

static PyObject *ReadError; /* SQLite failed: its message */
static PyObject *hists, *wokens; /* cell bytes -> its value, shared by every reader (a recording repeats them) */
static PyObject *no_hist;   /* () */
static PyObject *no_woken;  /* (0, 0, 0) */

/* whether `make` is a record's (class, field names), as new_record takes it; -1 with TypeError if not */
static int check_make(PyObject *make)
{
	if (PyTuple_Check(make) && PyTuple_GET_SIZE(make) == 2 && PyType_Check(PyTuple_GET_ITEM(make, 0)) &&
	    PyTuple_Check(PyTuple_GET_ITEM(make, 1)))
		return 0;
	PyErr_SetString(PyExc_TypeError, "make: a record's (class, field names)");
	return -1;
}

/* ---- ids made once ------------------------------------------------------------------------------------ */

/* The ids a reader made, by their value (two integers): every row names its task, and a 10-minute hackbench
 * recording's rows named 32,000 tasks a million times, a TaskId each (120 MB); its lock rows, 4,000 locks' addresses
 * and 3,400 stacks' ids 595,000 times each. One object per value now, which also makes the dictionaries and sets
 * keyed by them compare by identity. */
struct id_slot {
	long long a, b; /* a TaskId's (pid, start); an unsigned integer's (value, 0) */
	PyObject *id;
};
struct ids {
	Py_ssize_t cap, n;
	struct id_slot *e;
};

static void ids_free(struct ids *tb)
{
	for (Py_ssize_t i = 0; i < tb->cap; i++)
		Py_XDECREF(tb->e[i].id);
	PyMem_Free(tb->e);
	tb->e = NULL;
	tb->cap = tb->n = 0;
}

/* the current row's cells, each read once when the row is stepped to: its type, its integer (0 for NULL), the first
 * column's real where it is not an integer (a damaged cell, compared as Python compares it), and a text cell's
 * bytes (not NUL-terminated); valid until the next step */
struct cells {
	int t[MAX_COLUMNS];
	int64_t i[MAX_COLUMNS];
	const char *s[MAX_COLUMNS];
	int n[MAX_COLUMNS];
	double idx_real;
};

/* the cells of the row `st` is on, read from it: each with one call into SQLite's API (sqlite3_column_value), where
 * column_type then column_int64 made two, each taking the connection's mutex. The values are SQLite's unprotected
 * ones, read with sqlite3_value_*: safe where, as here, one thread at a time uses the connection (opened
 * SQLITE_OPEN_NOMUTEX, it takes no mutex either way; the thread reading ahead uses it alone until joined) */
static void cells_of(struct cells *row, sqlite3_stmt *st, int columns)
{
	for (int c = 0; c < columns; c++) {
		sqlite3_value *v = sqlite3_column_value(st, c);
		int t = row->t[c] = sqlite3_value_type(v);
		row->i[c] = t == SQLITE_INTEGER ? sqlite3_value_int64(v) : 0;
		row->s[c] = NULL;
		row->n[c] = 0;
		if (t == SQLITE_TEXT) {
			row->s[c] = (const char *)sqlite3_value_text(v);
			row->n[c] = sqlite3_value_bytes(v);
		}
		if (c == 0 && t != SQLITE_INTEGER)
			row->idx_real = sqlite3_value_double(v);
	}
}

/* ---- rows read ahead ------------------------------------------------------------------------------------
 * A thread of the reader's own steps its statement and copies each row's cells into chunks, a few ahead of the
 * reader, which makes the records from them: SQLite's stepping (a third of reading a row) runs on another CPU,
 * without the interpreter's lock, while the interpreter makes records and folds them. The thread alone uses the
 * connection until it is joined. */
#define CHUNK_BYTES (64 * 1024) /* a chunk is handed over once it holds this much (a longer row: one chunk) */
#define CHUNKS 4		/* filled ahead of the reader, at most */

struct chunk {
	char *p;
	size_t len, cap, at; /* filled to len, read to at */
};

struct ahead {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t filled, emptied;
	struct chunk ring[CHUNKS];
	int write, read, count; /* the next to fill, the next to read, those filled not yet given back */
	int reading;		/* ring[read] is being read */
	int stop;		/* the reader leaves */
	int end, rc;		/* the last row stepped past: SQLITE_DONE, or an error (`error`) */
	char error[256];
	sqlite3 *db;
	sqlite3_stmt *st;
	int columns;
};

static int chunk_put(struct chunk *c, const void *v, size_t n)
{
	if (c->len + n > c->cap) {
		size_t cap = c->cap ? c->cap : CHUNK_BYTES + 4096;
		while (cap < c->len + n)
			cap *= 2;
		char *p = realloc(c->p, cap);
		if (!p)
			return -1;
		c->p = p;
		c->cap = cap;
	}
	memcpy(c->p + c->len, v, n);
	c->len += n;
	return 0;
}

/* the row `st` is on, appended to the chunk: per cell its type, then an integer's or a real's 8 bytes, or a text's
 * length and bytes */
static int chunk_row(struct chunk *c, sqlite3_stmt *st, int columns)
{
	struct cells row;
	cells_of(&row, st, columns);
	for (int col = 0; col < columns; col++) {
		unsigned char t = (unsigned char)row.t[col];
		if (chunk_put(c, &t, 1))
			return -1;
		if (col == 0 && t != SQLITE_INTEGER) {
			if (chunk_put(c, &row.idx_real, sizeof(row.idx_real)))
				return -1;
		} else if (t == SQLITE_INTEGER) {
			if (chunk_put(c, &row.i[col], sizeof(row.i[col])))
				return -1;
		} else if (t == SQLITE_TEXT) {
			int32_t n = row.n[col];
			if (chunk_put(c, &n, sizeof(n)) || (n && chunk_put(c, row.s[col], (size_t)n)))
				return -1;
		}
	}
	return 0;
}

/* the next row of the chunk, its cells pointing into it */
static void chunk_cells(struct chunk *c, struct cells *row, int columns)
{
	for (int col = 0; col < columns; col++) {
		int t = row->t[col] = (unsigned char)c->p[c->at++];
		row->i[col] = 0;
		row->s[col] = NULL;
		row->n[col] = 0;
		if (col == 0 && t != SQLITE_INTEGER) {
			memcpy(&row->idx_real, c->p + c->at, sizeof(row->idx_real));
			c->at += sizeof(row->idx_real);
		} else if (t == SQLITE_INTEGER) {
			memcpy(&row->i[col], c->p + c->at, sizeof(row->i[col]));
			c->at += sizeof(row->i[col]);
		} else if (t == SQLITE_TEXT) {
			int32_t n;
			memcpy(&n, c->p + c->at, sizeof(n));
			c->at += sizeof(n);
			row->s[col] = c->p + c->at;
			row->n[col] = n;
			c->at += (size_t)n;
		}
	}
}

static void *ahead_run(void *arg)
{
	struct ahead *a = arg;
	for (;;) {
		pthread_mutex_lock(&a->mu);
		while (a->count == CHUNKS && !a->stop)
			pthread_cond_wait(&a->emptied, &a->mu);
		int stop = a->stop;
		struct chunk *c = &a->ring[a->write];
		pthread_mutex_unlock(&a->mu);
		if (stop)
			return NULL;
		c->len = c->at = 0;
		int rc = SQLITE_ROW;
		while (c->len < CHUNK_BYTES && (rc = sqlite3_step(a->st)) == SQLITE_ROW) {
			size_t row_start = c->len;
			if (chunk_row(c, a->st, a->columns)) {
				c->len = row_start; /* no part of a row handed over */
				rc = SQLITE_NOMEM;
				break;
			}
		}
		pthread_mutex_lock(&a->mu);
		if (rc != SQLITE_ROW) {
			a->end = 1;
			a->rc = rc;
			if (rc != SQLITE_DONE)
				snprintf(a->error, sizeof(a->error), "%s",
					 rc == SQLITE_NOMEM ? "out of memory" : sqlite3_errmsg(a->db));
		}
		a->write = (a->write + 1) % CHUNKS;
		a->count++;
		pthread_cond_signal(&a->filled);
		int end = a->end;
		pthread_mutex_unlock(&a->mu);
		if (end)
			return NULL;
	}
}

/* the thread started on the reader's statement; NULL (read here, row by row) where it cannot be */
static struct ahead *ahead_start(sqlite3 *db, sqlite3_stmt *st, int columns)
{
	struct ahead *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->db = db;
	a->st = st;
	a->columns = columns;
	if (pthread_mutex_init(&a->mu, NULL)) {
		free(a);
		return NULL;
	}
	if (pthread_cond_init(&a->filled, NULL) || pthread_cond_init(&a->emptied, NULL) ||
	    pthread_create(&a->thread, NULL, ahead_run, a)) {
		pthread_mutex_destroy(&a->mu); /* a condition made is left: it holds nothing on Linux */
		free(a);
		return NULL;
	}
	return a;
}

/* the thread stopped and joined (the interpreter's lock let go meanwhile), and its chunks freed */
static void ahead_stop(struct ahead *a)
{
	pthread_mutex_lock(&a->mu);
	a->stop = 1;
	pthread_cond_signal(&a->emptied);
	pthread_mutex_unlock(&a->mu);
	Py_BEGIN_ALLOW_THREADS
	pthread_join(a->thread, NULL);
	Py_END_ALLOW_THREADS
	for (int i = 0; i < CHUNKS; i++)
		free(a->ring[i].p);
	pthread_cond_destroy(&a->filled);
	pthread_cond_destroy(&a->emptied);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

/* the next row's cells into `row`: 1, or 0 past the last row, or -1 with `a->error` (SQLite's complaint) */
static int ahead_next(struct ahead *a, struct cells *row)
{
	for (;;) {
		if (a->reading) {
			struct chunk *c = &a->ring[a->read];
			if (c->at < c->len) {
				chunk_cells(c, row, a->columns);
				return 1;
			}
			pthread_mutex_lock(&a->mu); /* read through: given back to be filled again */
			a->reading = 0;
			a->read = (a->read + 1) % CHUNKS;
			a->count--;
			pthread_cond_signal(&a->emptied);
			pthread_mutex_unlock(&a->mu);
		}
		int any;
		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&a->mu);
		while (!a->count && !a->end)
			pthread_cond_wait(&a->filled, &a->mu);
		any = a->count > 0;
		pthread_mutex_unlock(&a->mu);
		Py_END_ALLOW_THREADS
		if (!any)
			return a->rc == SQLITE_DONE ? 0 : -1;
		a->reading = 1;
	}
}

typedef struct {
	PyObject_HEAD sqlite3 *db;
	sqlite3_stmt *st;
	struct ahead *ahead; /* the thread stepping the statement, where there is one */
	struct cells row;
	int shape, columns;
	unsigned char kinds[MAX_COLUMNS];
	int pending; /* the statement is on a row not yet handed out */
	int done;
	long long damaged;
	PyObject *make, *task_id, *hist_cell, *woken_cell, *damaged_row, *link, *no_link; /* make: (class, fields) */
	PyObject *wait_type; /* OngoingWait, for the ongoing and opened shapes */
	struct ids tasks;    /* the TaskIds made */
} Reader;

static void reader_close_db(Reader *r)
{
	if (r->ahead) {
		ahead_stop(r->ahead);
		r->ahead = NULL;
	}
	if (r->st) {
		sqlite3_finalize(r->st);
		r->st = NULL;
	}
	if (r->db) {
		sqlite3_close(r->db);
		r->db = NULL;
	}
	r->done = 1;
}

static void Reader_dealloc(Reader *r)
{
	PyObject_GC_UnTrack(r);
	reader_close_db(r);
	Py_CLEAR(r->make);
	Py_CLEAR(r->task_id);
	Py_CLEAR(r->hist_cell);
	Py_CLEAR(r->woken_cell);
	Py_CLEAR(r->damaged_row);
	Py_CLEAR(r->link);
	Py_CLEAR(r->no_link);
	Py_CLEAR(r->wait_type);
	ids_free(&r->tasks);
	Py_TYPE(r)->tp_free((PyObject *)r);
}

static int Reader_traverse(Reader *r, visitproc visit, void *arg)
{
	Py_VISIT(r->make);
	Py_VISIT(r->task_id);
	Py_VISIT(r->hist_cell);
	Py_VISIT(r->woken_cell);
	Py_VISIT(r->damaged_row);
	Py_VISIT(r->link);
	Py_VISIT(r->no_link);
	Py_VISIT(r->wait_type);
	return 0;
}

static int Reader_clear(Reader *r)
{
	Py_CLEAR(r->make);
	Py_CLEAR(r->task_id);
	Py_CLEAR(r->hist_cell);
	Py_CLEAR(r->woken_cell);
	Py_CLEAR(r->damaged_row);
	Py_CLEAR(r->link);
	Py_CLEAR(r->no_link);
	Py_CLEAR(r->wait_type);
	ids_free(&r->tasks);
	return 0;
}

static PyObject *sqlite_error(Reader *r)
{
	PyErr_SetString(ReadError, r->db ? sqlite3_errmsg(r->db) : "out of memory");
	return NULL;
}

/* Reader(uri, sql, first, last, shape, kinds, make, task_id, hist_cell, woken_cell, damaged_row, link, no_link
 *        [, wait_type]):
 * make is the record's (class, field names) */
static int Reader_init(Reader *r, PyObject *args, PyObject *kw)
{
	const char *uri, *sql;
	long long first, last;
	int shape;
	Py_buffer kinds;
	PyObject *make, *task_id, *hist_cell, *woken_cell, *damaged_row, *link, *no_link, *wait_type = Py_None;
	int read_ahead = 0;

	if (!PyArg_ParseTuple(args, "ssLLiy*OOOOOOO|Op:Reader", &uri, &sql, &first, &last, &shape, &kinds, &make,
			      &task_id, &hist_cell, &woken_cell, &damaged_row, &link, &no_link, &wait_type, &read_ahead))
		return -1;
	if (check_make(make) < 0)
		return -1;
	if (!PyType_Check(task_id) || !PyType_IsSubtype((PyTypeObject *)task_id, &PyTuple_Type) || !PyType_Check(link) ||
	    !PyType_IsSubtype((PyTypeObject *)link, &PyTuple_Type)) {
		PyErr_SetString(PyExc_TypeError, "task_id and link: NamedTuple classes");
		return -1;
	}
	int waits = shape == SHAPE_ONGOING || shape == SHAPE_OPENED;
	if (waits && (!PyType_Check(wait_type) || !PyType_IsSubtype((PyTypeObject *)wait_type, &PyTuple_Type) ||
		      !PyType_IsSubtype((PyTypeObject *)PyTuple_GET_ITEM(make, 0), &PyTuple_Type))) {
		PyBuffer_Release(&kinds);
		PyErr_SetString(PyExc_TypeError, "the waits' shapes: wait_type and make's class tuple classes");
		return -1;
	}
	int columns = shape == SHAPE_TASK     ? TASK_COLUMNS
		      : shape == SHAPE_OFFCPU ? OFFCPU_COLUMNS
		      : shape == SHAPE_WAKER  ? WAKER_COLUMNS
		      : shape == SHAPE_ONCPU  ? ONCPU_COLUMNS
		      : waits		      ? WAIT_COLUMNS
					      : 0;
	if (!columns || kinds.len != columns) {
		PyBuffer_Release(&kinds);
		PyErr_SetString(PyExc_ValueError, "a shape this reader does not know, or kinds not one per column");
		return -1;
	}
	r->shape = shape;
	r->columns = columns;
	for (int c = 0; c < columns; c++) {
		unsigned char k = ((unsigned char *)kinds.buf)[c];
		r->kinds[c] = k < N_KINDS ? k : K_ANY;
	}
	PyBuffer_Release(&kinds);
	Py_INCREF(make);
	Py_XSETREF(r->make, make);
	Py_INCREF(task_id);
	Py_XSETREF(r->task_id, task_id);
	Py_INCREF(hist_cell);
	Py_XSETREF(r->hist_cell, hist_cell);
	Py_INCREF(woken_cell);
	Py_XSETREF(r->woken_cell, woken_cell);
	Py_INCREF(damaged_row);
	Py_XSETREF(r->damaged_row, damaged_row);
	Py_INCREF(link);
	Py_XSETREF(r->link, link);
	Py_INCREF(no_link);
	Py_XSETREF(r->no_link, no_link);
	Py_INCREF(wait_type);
	Py_XSETREF(r->wait_type, wait_type);
	reader_close_db(r);
	r->done = 0;
	r->pending = 0;
	r->damaged = 0;

	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = sqlite3_open_v2(uri, &r->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(r->db, sql, -1, &r->st, NULL);
	Py_END_ALLOW_THREADS
	if (rc != SQLITE_OK)
		goto fail;
	if (sqlite3_column_count(r->st) < columns) {
		PyErr_SetString(PyExc_ValueError, "the statement selects fewer columns than the shape reads");
		reader_close_db(r);
		return -1;
	}
	if (sqlite3_bind_int64(r->st, 1, first) != SQLITE_OK || sqlite3_bind_int64(r->st, 2, last) != SQLITE_OK)
		goto fail;
	if (read_ahead)
		r->ahead = ahead_start(r->db, r->st, r->columns);
	return 0;
fail:
	sqlite_error(r);
	reader_close_db(r);
	return -1;
}

/* ---- cells ----------------------------------------------------------------------------------------- */

/* a count as the writer writes it: 1 to 18 digits, no leading zero (JSON's rule; below 2^63) */
static int count_at(const char **p, const char *end, long long *out)
{
	const char *s = *p;
	long long v = 0;
	int n = 0;
	while (s < end && *s >= '0' && *s <= '9' && n < 19) {
		v = v * 10 + (*s - '0');
		s++;
		n++;
	}
	if (n == 0 || n > 18 || (n > 1 && **p == '0'))
		return -1;
	*p = s;
	*out = v;
	return 0;
}

/* a histogram's (slot, count) pairs with a count under PAIR_COUNTS, made once and shared: a recording's hundreds
 * of thousands of histograms are made of few distinct pairs (a tuple is immutable, and equal either way) */
#define PAIR_COUNTS 1024
static PyObject *pairs[64][PAIR_COUNTS];

/* the pair (slot, c), a new reference; 0 <= slot < 64 */
static PyObject *hist_pair(long long slot, long long c)
{
	int kept = c >= 0 && c < PAIR_COUNTS;
	if (kept && pairs[slot][c])
		return Py_NewRef(pairs[slot][c]);
	PyObject *pair = Py_BuildValue("(LL)", slot, c);
	if (pair && kept)
		pairs[slot][c] = Py_NewRef(pair);
	return pair;
}

/* `[[slot,count],...]` in the writer's form, parsed; NULL with no error set when it is not in that form
 * (the Python parser decides then) */
static PyObject *hist_fast(const char *s, int n)
{
	const char *p = s, *end = s + n;
	long long slots[64], counts[64];
	int k = 0;

	if (p >= end || *p++ != '[')
		return NULL;
	if (p < end && *p == ']') {
		if (p + 1 != end)
			return NULL;
		Py_INCREF(no_hist);
		return no_hist;
	}
	for (;;) {
		long long slot, c;
		if (k == 64 || p >= end || *p++ != '[')
			return NULL;
		if (count_at(&p, end, &slot) || slot > 63)
			return NULL;
		if (p >= end || *p++ != ',')
			return NULL;
		if (count_at(&p, end, &c))
			return NULL;
		if (p >= end || *p++ != ']')
			return NULL;
		slots[k] = slot;
		counts[k] = c;
		k++;
		if (p >= end)
			return NULL;
		if (*p == ']') {
			if (p + 1 != end)
				return NULL;
			break;
		}
		if (*p++ != ',')
			return NULL;
	}
	PyObject *out = PyTuple_New(k);
	if (!out)
		return NULL;
	for (int i = 0; i < k; i++) {
		PyObject *pair = hist_pair(slots[i], counts[i]);
		if (!pair) {
			Py_DECREF(out);
			return NULL;
		}
		PyTuple_SET_ITEM(out, i, pair);
	}
	return out;
}

/* the Python parser's answer for a cell not in the writer's form: a value, or NULL with DamagedRow
 * cleared and *damaged set, or NULL with another error */
static PyObject *cell_in_python(Reader *r, PyObject *parse, const char *s, int n, int *damaged)
{
	PyObject *text = PyUnicode_DecodeUTF8(s, n, "replace"); /* as the reader's connection decodes text */
	if (!text)
		return NULL;
	PyObject *out = PyObject_CallOneArg(parse, text);
	Py_DECREF(text);
	if (!out && PyErr_ExceptionMatches(r->damaged_row)) {
		PyErr_Clear();
		*damaged = 1;
	}
	return out;
}

static PyObject *woken_fast(const char *s, int n)
{
	const char *p = s, *end = s + n;
	long long v[3];
	for (int i = 0; i < 3; i++) {
		if (count_at(&p, end, &v[i]) || (i < 2 && (p >= end || *p++ != ',')))
			return NULL;
	}
	if (p != end)
		return NULL;
	return Py_BuildValue("(LLL)", v[0], v[1], v[2]);
}

/* a text cell parsed: `empty` for NULL or "", one met before from `cache`, else `fast`'s parse or, when the
 * cell is not in the writer's form, `parse`'s (Python's); kept in `cache` while it holds fewer than
 * CELLS_KEPT (one object for each distinct cell, as the Python parsers keep them) */
static PyObject *cell_column(Reader *r, int c, PyObject *cache, PyObject *(*fast)(const char *, int), PyObject *parse,
			     PyObject *empty, int *damaged)
{
	if (r->row.t[c] == SQLITE_NULL) {
		Py_INCREF(empty);
		return empty;
	}
	const char *s = r->row.s[c];
	int n = r->row.n[c];
	if (!s && n)
		return PyErr_NoMemory();
	if (n == 0) {
		Py_INCREF(empty);
		return empty;
	}
	PyObject *key = PyBytes_FromStringAndSize(s, n);
	if (!key)
		return NULL;
	PyObject *out = PyDict_GetItemWithError(cache, key);
	if (out) {
		Py_DECREF(key);
		Py_INCREF(out);
		return out;
	}
	if (PyErr_Occurred()) {
		Py_DECREF(key);
		return NULL;
	}
	out = fast(s, n);
	if (!out && !PyErr_Occurred())
		out = cell_in_python(r, parse, s, n, damaged);
	if (out && PyDict_GET_SIZE(cache) < CELLS_KEPT && PyDict_SetItem(cache, key, out) < 0)
		Py_CLEAR(out);
	Py_DECREF(key);
	return out;
}

/* ---- records ------------------------------------------------------------------------------------------ */

static PyObject *no_args; /* () */

/* Where object.__setattr__ stores each field of a record class: a plain slot's offset, -1 where it does not store
 * it there (no slots, a property or another descriptor of that name). Learnt once per (class, field names) met:
 * the few classes a process makes records of, kept strongly (a class replaced is learnt again; the oldest goes). */
#define MAKES_KEPT 32
static struct made_class {
	PyObject *cls, *names; /* strong references, or NULL */
	Py_ssize_t *at; /* each field's slot offset, or -1 */
} makes[MAKES_KEPT];
static int makes_next;

static Py_ssize_t *slots_of(PyObject *cls, PyObject *names)
{
	for (int i = 0; i < MAKES_KEPT; i++)
		if (makes[i].cls == cls && makes[i].names == names)
			return makes[i].at;
	Py_ssize_t n = PyTuple_GET_SIZE(names), *at = PyMem_Malloc((n ? n : 1) * sizeof(*at));
	if (!at)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++)
		at[i] = store_offset((PyTypeObject *)cls, PyTuple_GET_ITEM(names, i));
	struct made_class *e = &makes[makes_next];
	makes_next = (makes_next + 1) % MAKES_KEPT;
	Py_XDECREF(e->cls);
	Py_XDECREF(e->names);
	PyMem_Free(e->at);
	e->cls = Py_NewRef(cls);
	e->names = Py_NewRef(names);
	e->at = at;
	return at;
}

/* an instance of a frozen record class (analyzer/sample.py record_maker's object) made from its fields'
 * values in order: object.__new__, then each field set as object.__setattr__ sets it, past the class's
 * frozen guard: a plain slot's value stored in it, as its descriptor stores it (a StackWait's 18 fields, each
 * looked up in the class at every record, took 0.3 us); `make` is (class, field names) */
static PyObject *new_record(PyObject *make, PyObject *const *values, Py_ssize_t n)
{
	PyObject *cls = PyTuple_GET_ITEM(make, 0), *names = PyTuple_GET_ITEM(make, 1);
	if (PyTuple_GET_SIZE(names) != n) {
		PyErr_Format(PyExc_TypeError, "%S takes %zd fields, given %zd", cls, PyTuple_GET_SIZE(names), n);
		return NULL;
	}
	Py_ssize_t *at = slots_of(cls, names);
	if (!at)
		return PyErr_NoMemory();
	PyObject *obj = PyBaseObject_Type.tp_new((PyTypeObject *)cls, no_args, NULL);
	if (!obj)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		if (at[i] >= 0) {
			PyObject **slot = (PyObject **)((char *)obj + at[i]);
			Py_XSETREF(*slot, Py_NewRef(values[i]));
		} else if (PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(names, i), values[i]) < 0) {
			Py_DECREF(obj);
			return NULL;
		}
	}
	return obj;
}

/* Maker, Slots and Deltas below each hold a record's (class, field names) first: one dealloc and traverse */
typedef struct {
	PyObject_HEAD PyObject *make;
} Holder;

static void holder_dealloc(PyObject *o)
{
	PyObject_GC_UnTrack(o);
	Py_CLEAR(((Holder *)o)->make);
	Py_TYPE(o)->tp_free(o);
}

static int holder_traverse(PyObject *o, visitproc visit, void *arg)
{
	Py_VISIT(((Holder *)o)->make);
	return 0;
}

/* Maker(cls, names): a callable making cls's records from every field's value in order, positional
 * (analyzer/sample.py record_maker, in C) */
typedef struct {
	PyObject_HEAD PyObject *make; /* (cls, names) */
	vectorcallfunc vectorcall;
} Maker;

static PyObject *Maker_call(Maker *m, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
	if (kwnames && PyTuple_GET_SIZE(kwnames)) {
		PyErr_SetString(PyExc_TypeError, "a record maker takes its fields by position");
		return NULL;
	}
	return new_record(m->make, args, PyVectorcall_NARGS(nargsf));
}

static PyObject *Maker_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	PyObject *cls, *names;
	if (!PyArg_ParseTuple(args, "O!O!:Maker", &PyType_Type, &cls, &PyTuple_Type, &names))
		return NULL;
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
		if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i))) {
			PyErr_SetString(PyExc_TypeError, "field names are str");
			return NULL;
		}
	}
	Maker *m = (Maker *)type->tp_alloc(type, 0);
	if (!m)
		return NULL;
	if (!(m->make = PyTuple_Pack(2, cls, names))) {
		Py_DECREF(m);
		return NULL;
	}
	m->vectorcall = (vectorcallfunc)Maker_call;
	return (PyObject *)m;
}

static PyTypeObject MakerType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stallscope.analyzer._rowread.Maker",
	.tp_basicsize = sizeof(Maker),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_doc = "Maker(cls, names): cls's records made from every field's value, in order.",
	.tp_new = Maker_new,
	.tp_dealloc = holder_dealloc,
	.tp_traverse = holder_traverse,
	.tp_call = PyVectorcall_Call,
	.tp_vectorcall_offset = offsetof(Maker, vectorcall),
};

/* ---- rows -------------------------------------------------------------------------------------------- */

/* an integer column; NULL reads as 0 (a column read as `value or 0`) */
static PyObject *int_column(const struct cells *st, int c)
{
	return PyLong_FromLongLong(st->i[c]);
}


/* an address or stack id as the kernel has it: unsigned (analyzer/sample.py u64) */
static PyObject *u64_column(const struct cells *st, int c)
{
	return PyLong_FromUnsignedLongLong((unsigned long long)st->i[c]);
}

/* a column read as is, NULL as None */
static PyObject *int_or_none(const struct cells *st, int c)
{
	if (st->t[c] == SQLITE_NULL)
		Py_RETURN_NONE;
	return int_column(st, c);
}

/* a text cell as the reader's connection decodes it (a byte that is not UTF-8 replaced) */
static PyObject *text_column(const struct cells *st, int c)
{
	const char *s = st->s[c];
	int n = st->n[c];
	if (!s)
		return n ? PyErr_NoMemory() : PyUnicode_FromStringAndSize("", 0);
	return PyUnicode_DecodeUTF8(s, n, "replace");
}

/* a tuple of `type` (a NamedTuple: a tuple of its own type; or a plain tuple) holding these n values, which it
 * takes */
static PyObject *pack(PyObject *type, PyObject **v, int n)
{
	for (int i = 0; i < n; i++) {
		if (!v[i]) {
			for (int j = 0; j < n; j++)
				Py_XDECREF(v[j]);
			return NULL;
		}
	}
	PyObject *out = type == (PyObject *)&PyTuple_Type ? PyTuple_New(n)
							  : ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n);
	if (!out) {
		for (int j = 0; j < n; j++)
			Py_DECREF(v[j]);
		return NULL;
	}
	for (int i = 0; i < n; i++)
		PyTuple_SET_ITEM(out, i, v[i]);
	return out;
}

/* the slot of (a, b) in `tb`: its id's, or the empty one where it goes */
static Py_ssize_t id_at(const struct ids *tb, long long a, long long b)
{
	uint64_t h = ((uint64_t)b * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)a * 0xC2B2AE3D27D4EB4FULL);
	Py_ssize_t i = (Py_ssize_t)((h ^ (h >> 29)) & (uint64_t)(tb->cap - 1));
	while (tb->e[i].id && (tb->e[i].a != a || tb->e[i].b != b))
		i = (i + 1) & (tb->cap - 1);
	return i;
}

/* the slot of (a, b), room made for one more (the table doubled, its entries moved, when half full); -1 with an
 * error set */
static Py_ssize_t id_slot(struct ids *tb, long long a, long long b)
{
	if ((tb->n + 1) * 2 > tb->cap) {
		struct ids bigger = {tb->cap ? tb->cap * 2 : 1024, tb->n, NULL};
		if (!(bigger.e = PyMem_Calloc((size_t)bigger.cap, sizeof(struct id_slot)))) {
			PyErr_NoMemory();
			return -1;
		}
		for (Py_ssize_t i = 0; i < tb->cap; i++)
			if (tb->e[i].id)
				bigger.e[id_at(&bigger, tb->e[i].a, tb->e[i].b)] = tb->e[i];
		PyMem_Free(tb->e);
		*tb = bigger;
	}
	return id_at(tb, a, b);
}

/* `made`, a new reference, kept at slot i as (a, b)'s (NULL: not kept) */
static PyObject *id_kept(struct ids *tb, Py_ssize_t i, long long a, long long b, PyObject *made)
{
	if (made) {
		tb->e[i] = (struct id_slot){a, b, Py_NewRef(made)};
		tb->n++;
	}
	return made;
}

/* the TaskId (pid, start) of `type`, a new reference: the one made before for the same pair */
static PyObject *task_of(struct ids *tb, PyObject *type, long long pid, long long start)
{
	Py_ssize_t i = id_slot(tb, pid, start);
	if (i < 0 || tb->e[i].id)
		return i < 0 ? NULL : Py_NewRef(tb->e[i].id);
	PyObject *v[2] = {PyLong_FromLongLong(pid), PyLong_FromLongLong(start)};
	return id_kept(tb, i, pid, start, pack(type, v, 2));
}

/* the unsigned integer v as the kernel has it (an address, a stack id), a new reference: the one made before for
 * the same value */
static PyObject *u64_of(struct ids *tb, uint64_t v)
{
	Py_ssize_t i = id_slot(tb, (long long)v, 0);
	if (i < 0 || tb->e[i].id)
		return i < 0 ? NULL : Py_NewRef(tb->e[i].id);
	return id_kept(tb, i, (long long)v, 0, PyLong_FromUnsignedLongLong(v));
}

/* a WaitLink of the three columns from c (func, state, why; NULL: 0), the shared one when all are 0 */
static PyObject *wait_link(Reader *r, int c)
{
	long long func = r->row.i[c], state = r->row.i[c + 1], why = r->row.i[c + 2];
	if (!func && !state && !why)
		return Py_NewRef(r->no_link);
	PyObject *v[3] = {PyLong_FromUnsignedLongLong((unsigned long long)func), PyLong_FromLongLong(state),
			  PyLong_FromLongLong(why)};
	return pack(r->link, v, 3);
}

static PyObject *task_id(Reader *r, int c)
{
	return task_of(&r->tasks, r->task_id, r->row.i[c], r->row.i[c + 1]);
}

/* the record of the current row; NULL with *damaged set for a damaged one (no error), NULL with an error */
static PyObject *record(Reader *r, int *damaged)
{
	const struct cells *st = &r->row;
	PyObject *a[16] = {NULL};
	int n = 0;
	PyObject *out = NULL;

	for (int c = 0; c < r->columns; c++) {
		if (!(kind_types[r->kinds[c]] & T(st->t[c]))) {
			*damaged = 1;
			return NULL;
		}
	}
	if (!(a[n++] = task_id(r, 1)))
		goto done;
	if (r->shape == SHAPE_ONGOING || r->shape == SHAPE_OPENED) {
		/* store.py _wait_and_since: (OngoingWait(task, tgid, state, kstack, ustack, why, func), since_ns (None:
		 * NULL)), a pair for `ongoing`, a WaitSince (make's class) for `opened` */
		if (!(a[n++] = int_column(st, 3)) || !(a[n++] = int_column(st, 4)) || !(a[n++] = u64_column(st, 5)) ||
		    !(a[n++] = u64_column(st, 6)) || !(a[n++] = int_column(st, 7)) || !(a[n++] = u64_column(st, 8)))
			goto done;
		n = 0; /* taken by the OngoingWait */
		PyObject *pair[2] = {pack(r->wait_type, a, 7), int_or_none(st, 9)};
		out = pack(PyTuple_GET_ITEM(r->make, 0), pair, 2);
		goto done;
	}
	if (r->shape == SHAPE_ONCPU) {
		/* OncpuDelta(task, tgid, comm, kstack, ustack, samples, period_ns) */
		if (!(a[n++] = int_column(st, 3)) || !(a[n++] = text_column(st, 4)) || !(a[n++] = u64_column(st, 5)) ||
		    !(a[n++] = u64_column(st, 6)) || !(a[n++] = int_column(st, 7)) || !(a[n++] = int_column(st, 8)))
			goto done;
	} else if (r->shape == SHAPE_TASK) {
		/* TaskDelta(task, offcpu_ns .. migrations, runq_hist, runq_latency_ns or 0, run_ns or 0) */
		for (int c = 3; c < 12; c++)
			if (!(a[n++] = int_column(st, c)))
				goto done;
		if (!(a[n++] = cell_column(r, 12, hists, hist_fast, r->hist_cell, no_hist, damaged)))
			goto done;
		if (!(a[n++] = int_column(st, 13)) || !(a[n++] = int_column(st, 14)))
			goto done;
	} else if (r->shape == SHAPE_WAKER) {
		/* WakerDelta(task, waker, waker_tgid, waker_comm, waker_kstack, count, total_ns, in_interrupt,
		 * exiting, link, weighted_ns (None: NULL), link_blocked_ns or 0, link_runq_ns or 0, wakee) */
		if (!(a[n++] = task_id(r, 3)) || !(a[n++] = int_column(st, 5)) || !(a[n++] = text_column(st, 6)) ||
		    !(a[n++] = u64_column(st, 7)) || !(a[n++] = int_column(st, 8)) || !(a[n++] = int_column(st, 9)))
			goto done;
		a[n++] = Py_NewRef(st->i[10] ? Py_True : Py_False);
		a[n++] = Py_NewRef(st->i[11] ? Py_True : Py_False);
		if (!(a[n++] = wait_link(r, 12)) || !(a[n++] = int_or_none(st, 15)) || !(a[n++] = int_column(st, 16)) ||
		    !(a[n++] = int_column(st, 17)) || !(a[n++] = wait_link(r, 18)))
			goto done;
	} else {
		/* OffcpuDelta(task, tgid, state, kstack, ustack, count, total_ns, max_ns, hist, why or 0,
		 * func or 0, charged_ns (None: NULL), weighted_ns or 0, var_us2 or 0, woken) */
		if (!(a[n++] = int_column(st, 3)) || !(a[n++] = int_column(st, 4)) || !(a[n++] = u64_column(st, 5)) ||
		    !(a[n++] = u64_column(st, 6)))
			goto done;
		for (int c = 7; c < 10; c++)
			if (!(a[n++] = int_column(st, c)))
				goto done;
		if (!(a[n++] = cell_column(r, 10, hists, hist_fast, r->hist_cell, no_hist, damaged)))
			goto done;
		if (!(a[n++] = int_column(st, 11)) || !(a[n++] = u64_column(st, 12)))
			goto done;
		if (!(a[n++] = int_or_none(st, 13)) || !(a[n++] = int_column(st, 14)) || !(a[n++] = int_column(st, 15)))
			goto done;
		if (!(a[n++] = cell_column(r, 16, wokens, woken_fast, r->woken_cell, no_woken, damaged)))
			goto done;
	}
	out = new_record(r->make, a, n);
done:
	for (int i = 0; i < n; i++)
		Py_XDECREF(a[i]);
	return out;
}

/* step to the next row: 1 on a row, 0 at the end, -1 on error */
static int step(Reader *r)
{
	if (r->ahead) {
		int got = ahead_next(r->ahead, &r->row);
		if (got < 0)
			PyErr_SetString(ReadError, r->ahead->error);
		if (got <= 0)
			reader_close_db(r);
		return got;
	}
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = sqlite3_step(r->st);
	if (rc == SQLITE_ROW)
		cells_of(&r->row, r->st, r->columns);
	Py_END_ALLOW_THREADS
	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE) {
		reader_close_db(r);
		return 0;
	}
	sqlite_error(r);
	reader_close_db(r);
	return -1;
}

/* take(idx): the records of interval idx, a tuple; rows of earlier intervals are skipped (as
 * store._ByInterval.take) */
static PyObject *Reader_take(Reader *r, PyObject *arg)
{
	long long idx = PyLong_AsLongLong(arg);
	if (idx == -1 && PyErr_Occurred())
		return NULL;
	PyObject *out = PyList_New(0);
	if (!out)
		return NULL;
	while (!r->done) {
		if (!r->pending) {
			int rc = step(r);
			if (rc < 0)
				goto fail;
			if (rc == 0)
				break;
			r->pending = 1;
		}
		/* idx as the Python reader compares it: an integer, or a real (a damaged cell) */
		int at; /* -1 before idx, 0 at it, 1 after it */
		if (r->row.t[0] == SQLITE_INTEGER) {
			long long i = r->row.i[0];
			at = i < idx ? -1 : i > idx;
		} else {
			double d = r->row.idx_real;
			at = d < (double)idx ? -1 : d > (double)idx;
		}
		if (at > 0)
			break;
		r->pending = 0;
		if (at < 0)
			continue;
		int damaged = 0;
		PyObject *rec = record(r, &damaged);
		if (!rec) {
			if (!damaged)
				goto fail;
			r->damaged++;
			continue;
		}
		int rc = PyList_Append(out, rec);
		Py_DECREF(rec);
		if (rc < 0)
			goto fail;
	}
	PyObject *t = PyList_AsTuple(out);
	Py_DECREF(out);
	return t;
fail:
	Py_DECREF(out);
	return NULL;
}

static PyObject *Reader_close(Reader *r, PyObject *Py_UNUSED(ignored))
{
	reader_close_db(r);
	Py_RETURN_NONE;
}

static PyObject *Reader_get_damaged(Reader *r, void *Py_UNUSED(closure))
{
	return PyLong_FromLongLong(r->damaged);
}

static PyMethodDef Reader_methods[] = {
	{"take", (PyCFunction)Reader_take, METH_O, "The records of interval idx, a tuple (earlier rows skipped)."},
	{"close", (PyCFunction)Reader_close, METH_NOARGS, "Finish the statement and close the connection."},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef Reader_getset[] = {
	{"damaged", (getter)Reader_get_damaged, NULL, "Rows left out as damaged so far.", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReaderType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stallscope.analyzer._rowread.Reader",
	.tp_basicsize = sizeof(Reader),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "A table's rows in interval order, made into records (analyzer/rowread.py).",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Reader_init,
	.tp_dealloc = (destructor)Reader_dealloc,
	.tp_traverse = (traverseproc)Reader_traverse,
	.tp_clear = (inquiry)Reader_clear,
	.tp_methods = Reader_methods,
	.tp_getset = Reader_getset,
};

/* ---- a lock fold's records --------------------------------------------------------------------------- */

#define LOCK_KEY_WORDS 8  /* analyzer/rowfold.py _KEY_WORDS: pid, start_ns, tgid, addr, flags, kind, cache, kstack */
#define LOCK_ACC_WORDS 15 /* _ACC_WORDS: count .. min, spin, sleep, owner pid, owner comm, symbol, blocked,
			   * runnable, weighted, var, field, object */

/* cells[id]: a text cell's id into the fold's strings, a negative one from the end (ID_EMPTY, ID_NULL) */
static PyObject *cell_of(PyObject *cells, long long id)
{
	Py_ssize_t n = PyList_GET_SIZE(cells), i = id < 0 ? n + id : id;
	if (i < 0 || i >= n) {
		PyErr_SetString(PyExc_IndexError, "a text cell's id beyond the fold's strings");
		return NULL;
	}
	return Py_NewRef(PyList_GET_ITEM(cells, i));
}

/* lock_waits(keys, totals, cells, stacks, make, task_id): LockRows.result's records, made here (make: the
 * record's class and field names): a report of 10 minutes of hackbench makes 643,659 */
static PyObject *lock_waits(PyObject *Py_UNUSED(module), PyObject *args)
{
	Py_buffer keys, totals;
	PyObject *cells, *stacks, *make, *task_type, *out = NULL;
	struct ids tasks = {0, 0, NULL}, ints = {0, 0, NULL}; /* the TaskIds, the addresses and stack ids made */

	if (!PyArg_ParseTuple(args, "y*y*O!O!OO:lock_waits", &keys, &totals, &PyList_Type, &cells, &PyDict_Type,
			      &stacks, &make, &task_type))
		return NULL;
	Py_ssize_t n = keys.len / (8 * LOCK_KEY_WORDS);
	if (check_make(make) < 0)
		goto done;
	if (keys.len != n * 8 * LOCK_KEY_WORDS || totals.len != n * 8 * LOCK_ACC_WORDS || !PyType_Check(task_type) ||
	    !PyType_IsSubtype((PyTypeObject *)task_type, &PyTuple_Type)) {
		PyErr_SetString(PyExc_ValueError, "keys and totals of different counts, or task_id not a NamedTuple class");
		goto done;
	}
	if (!(out = PyTuple_New(n)))
		goto done;
	const int64_t *k = keys.buf, *e = totals.buf;
	for (Py_ssize_t i = 0; i < n; i++, k += LOCK_KEY_WORDS, e += LOCK_ACC_WORDS) {
		PyObject *a[LOCK_KEY_WORDS + LOCK_ACC_WORDS] = {NULL};
		int m = 0, ok = 0;
		PyObject *task = task_of(&tasks, task_type, k[0], k[1]);
		if (!task)
			goto fail_row;
		a[m++] = task;
		/* tgid, addr (unsigned), flags, kind, cache, the stack (None: not among them), its id (unsigned) */
		if (!(a[m++] = PyLong_FromLongLong(k[2])) || !(a[m++] = u64_of(&ints, (uint64_t)k[3])) ||
		    !(a[m++] = PyLong_FromLongLong(k[4])) || !(a[m++] = PyLong_FromLongLong(k[5])) ||
		    !(a[m++] = cell_of(cells, k[6])))
			goto fail_row;
		PyObject *sid = u64_of(&ints, (uint64_t)k[7]);
		if (!sid)
			goto fail_row;
		PyObject *stack = PyDict_GetItemWithError(stacks, sid);
		if (!stack && PyErr_Occurred()) {
			Py_DECREF(sid);
			goto fail_row;
		}
		a[m++] = Py_NewRef(stack ? stack : Py_None);
		a[m++] = sid;
		for (int j = 0; j < LOCK_ACC_WORDS; j++) {
			int text = j == 7 || j == 8 || j == 13 || j == 14; /* owner comm, symbol, field, object */
			if (!(a[m++] = text ? cell_of(cells, e[j]) : PyLong_FromLongLong(e[j])))
				goto fail_row;
		}
		PyObject *rec = new_record(make, a, m);
		if (rec) {
			PyTuple_SET_ITEM(out, i, rec);
			ok = 1;
		}
	fail_row:
		for (int j = 0; j < m; j++)
			Py_XDECREF(a[j]);
		if (!ok) {
			Py_CLEAR(out);
			goto done;
		}
	}
done:
	ids_free(&tasks);
	ids_free(&ints);
	PyBuffer_Release(&keys);
	PyBuffer_Release(&totals);
	return out;
}

/* ---- a task dump entry's own off-CPU slots -------------------------------------------------------------- */

/* Slots(layout, make): bpf/task_dump.py slot_deltas in C. layout: the offsets of bpf/abi.py's mirror, in
 * this order: where the slots begin in an entry, a slot's size, how many, and in a slot: used, kstack,
 * ustack, state, why, func, then its val's count, total_ns, charged_ns, weighted_ns, var_us2, woken[3],
 * hist (and its length), ival's max_ns[2] and epoch[2]. make: OffcpuDelta's (class, field names). */
enum { L_SLOTS_AT, L_SLOT_SIZE, L_NSLOTS, L_USED, L_KSTACK, L_USTACK, L_STATE, L_WHY, L_FUNC, L_COUNT, L_TOTAL,
       L_CHARGED, L_WEIGHTED, L_VAR, L_WOKEN, L_HIST, L_NHIST, L_IVAL_MAX, L_IVAL_EPOCH, N_LAYOUT };

typedef struct {
	PyObject_HEAD PyObject *make; /* first, as Holder */
	Py_ssize_t at[N_LAYOUT];
} Slots;

static const char zero4k[4096]; /* what a slot or histogram not yet used reads as */

static inline uint64_t rd64(const char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline uint32_t rd32(const char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* Interval e's longest value from an ival_extremes' max_ns[2] and epoch[2] (bpf/interval.h): its own
 * number's pair, and the next number's when the same read found it (the values that landed between the
 * numbering and the read, which this interval's counts hold); held to what the interval's count and total
 * (now less before) allow, as abi.extremes and abi.bounded do: a lone value is the total, none is longer; a
 * total that went back bounds nothing. */
static uint64_t ival_longest(const char *max, const char *epoch, long long e, uint64_t count, uint64_t count_b,
			     uint64_t total, uint64_t total_b)
{
	uint64_t longest = 0;
	for (long long n = e; n <= e + 1; n++) {
		int par = (int)(n & 1);
		if ((long long)rd32(epoch + 4 * par) == n && rd64(max + 8 * par) > longest)
			longest = rd64(max + 8 * par);
	}
	if (total < total_b)
		return longest;
	if (count > count_b && count - count_b == 1)
		return total - total_b;
	return longest < total - total_b ? longest : total - total_b;
}

/* a - b as Python subtracts two unsigned values */
static PyObject *udiff(uint64_t a, uint64_t b)
{
	if (a >= b)
		return PyLong_FromUnsignedLongLong(a - b);
	PyObject *d = PyLong_FromUnsignedLongLong(b - a), *out = d ? PyNumber_Negative(d) : NULL;
	Py_XDECREF(d);
	return out;
}

/* a tuple of n offsets or indexes into out; -1 with an error when it holds another count or a negative one */
static int read_offsets(PyObject *t, Py_ssize_t *out, Py_ssize_t n)
{
	if (PyTuple_GET_SIZE(t) != n) {
		PyErr_Format(PyExc_ValueError, "%zd offsets given, %zd taken", PyTuple_GET_SIZE(t), n);
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		out[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, i));
		if (out[i] < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError, "a negative offset");
			return -1;
		}
	}
	return 0;
}

static PyObject *Slots_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	PyObject *layout, *make;
	if (!PyArg_ParseTuple(args, "O!O:Slots", &PyTuple_Type, &layout, &make) || check_make(make) < 0)
		return NULL;
	Slots *sl = (Slots *)type->tp_alloc(type, 0);
	if (!sl)
		return NULL;
	sl->make = Py_NewRef(make);
	if (read_offsets(layout, sl->at, N_LAYOUT) < 0) {
		Py_DECREF(sl);
		return NULL;
	}
	return (PyObject *)sl;
}

/* the (slot, now - before) of a histogram's slots that moved, as task_dump.hist_delta */
static PyObject *u32_hist_delta(const char *now, const char *before, Py_ssize_t n)
{
	PyObject *out = PyList_New(0);
	if (!out)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		uint32_t a = rd32(now + 4 * i), b = before ? rd32(before + 4 * i) : 0;
		if (a == b)
			continue;
		PyObject *pair = i < 64 ? hist_pair(i, (long long)a - (long long)b)
					: Py_BuildValue("(nL)", i, (long long)a - (long long)b);
		if (!pair || PyList_Append(out, pair) < 0) {
			Py_XDECREF(pair);
			Py_DECREF(out);
			return NULL;
		}
		Py_DECREF(pair);
	}
	PyObject *t = PyList_AsTuple(out);
	Py_DECREF(out);
	return t;
}

/* deltas(tid, tgid, raw, prev_raw or None, e): the OffcpuDelta of each slot whose count moved, a list */
static PyObject *Slots_deltas(Slots *sl, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 5 || !PyBytes_Check(args[2]) || (args[3] != Py_None && !PyBytes_Check(args[3]))) {
		PyErr_SetString(PyExc_TypeError, "deltas(tid, tgid, raw, prev_raw or None, e)");
		return NULL;
	}
	PyObject *tid = args[0], *tgid = args[1];
	const char *raw = PyBytes_AS_STRING(args[2]);
	const char *prev = args[3] == Py_None ? NULL : PyBytes_AS_STRING(args[3]);
	long long e = PyLong_AsLongLong(args[4]);
	if (e == -1 && PyErr_Occurred())
		return NULL;
	const Py_ssize_t *at = sl->at;
	Py_ssize_t need = at[L_SLOTS_AT] + at[L_NSLOTS] * at[L_SLOT_SIZE];
	if (PyBytes_GET_SIZE(args[2]) < need || (prev && PyBytes_GET_SIZE(args[3]) < need)) {
		PyErr_SetString(PyExc_ValueError, "an entry shorter than its slots");
		return NULL;
	}
	const char *zero = zero4k;
	if (at[L_SLOT_SIZE] > (Py_ssize_t)sizeof(zero4k)) {
		PyErr_SetString(PyExc_ValueError, "a slot larger than this reader knows");
		return NULL;
	}
	PyObject *out = PyList_New(0);
	if (!out)
		return NULL;
	for (Py_ssize_t i = 0; i < at[L_NSLOTS]; i++) {
		const char *s = raw + at[L_SLOTS_AT] + i * at[L_SLOT_SIZE];
		if (rd32(s + at[L_USED]) == 0)
			break;
		const char *b = prev ? prev + at[L_SLOTS_AT] + i * at[L_SLOT_SIZE] : NULL;
		if (b && memcmp(s, b, at[L_SLOT_SIZE]) == 0)
			continue;
		if (!b || rd32(b + at[L_USED]) == 0)
			b = zero; /* a slot first used: from nothing */
		uint64_t count = rd64(s + at[L_COUNT]), bcount = rd64(b + at[L_COUNT]);
		if (count == bcount)
			continue;
		uint64_t longest = ival_longest(s + at[L_IVAL_MAX], s + at[L_IVAL_EPOCH], e, count, bcount,
						rd64(s + at[L_TOTAL]), rd64(b + at[L_TOTAL]));
		PyObject *v[15] = {Py_NewRef(tid), Py_NewRef(tgid)};
		v[2] = PyLong_FromUnsignedLong(rd32(s + at[L_STATE]));
		v[3] = PyLong_FromUnsignedLongLong(rd64(s + at[L_KSTACK]));
		v[4] = PyLong_FromUnsignedLongLong(rd64(s + at[L_USTACK]));
		v[5] = udiff(count, bcount);
		v[6] = udiff(rd64(s + at[L_TOTAL]), rd64(b + at[L_TOTAL]));
		v[7] = PyLong_FromUnsignedLongLong(longest);
		v[8] = u32_hist_delta(s + at[L_HIST], b + at[L_HIST], at[L_NHIST]);
		v[9] = PyLong_FromUnsignedLong(rd32(s + at[L_WHY]));
		v[10] = PyLong_FromUnsignedLongLong(rd64(s + at[L_FUNC]));
		v[11] = udiff(rd64(s + at[L_CHARGED]), rd64(b + at[L_CHARGED]));
		v[12] = udiff(rd64(s + at[L_WEIGHTED]), rd64(b + at[L_WEIGHTED]));
		v[13] = udiff(rd64(s + at[L_VAR]), rd64(b + at[L_VAR]));
		PyObject *w[3];
		for (int k = 0; k < 3; k++)
			w[k] = udiff(rd32(s + at[L_WOKEN] + 4 * k), rd32(b + at[L_WOKEN] + 4 * k));
		v[14] = w[0] && w[1] && w[2] ? PyTuple_Pack(3, w[0], w[1], w[2]) : NULL;
		for (int k = 0; k < 3; k++)
			Py_XDECREF(w[k]);
		PyObject *rec = NULL;
		int ok = 1;
		for (int k = 0; k < 15; k++)
			ok = ok && v[k];
		if (ok)
			rec = new_record(sl->make, v, 15);
		for (int k = 0; k < 15; k++)
			Py_XDECREF(v[k]);
		if (!rec || PyList_Append(out, rec) < 0) {
			Py_XDECREF(rec);
			Py_DECREF(out);
			return NULL;
		}
		Py_DECREF(rec);
	}
	return out;
}

static PyMethodDef Slots_methods[] = {
	{"deltas", (PyCFunction)(void (*)(void))Slots_deltas, METH_FASTCALL,
	 "deltas(tid, tgid, raw, prev_raw or None, e): the OffcpuDelta of each slot whose count moved."},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject SlotsType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stallscope.analyzer._rowread.Slots",
	.tp_basicsize = sizeof(Slots),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "Slots(layout, make): a task dump entry's own off-CPU slots read into records (bpf/task_dump.py).",
	.tp_new = Slots_new,
	.tp_dealloc = holder_dealloc,
	.tp_traverse = holder_traverse,
	.tp_methods = Slots_methods,
};

/* ---- a task dump entry's delta ------------------------------------------------------------------------ */

/* Deltas(fields, layout, no_sched_info, make): bpf/task_dump.py task_delta in C. fields: where these are in
 * an entry's values (task_dump._FIELDS): flags, nvcsw, nivcsw, offcpu_ns, offcpu_count, runq_ns, runq_count,
 * run_delay, migrations, run_ns, run_base, run_delay_base, nvcsw_base, nivcsw_base; layout: the entry's
 * runq_hist offset and length, offcpu_ival's max_ns and epoch offsets, runq_ival's; make: TaskDelta's
 * (class, field names). */
enum { F_FLAGS, F_NVCSW, F_NIVCSW, F_OFFCPU_NS, F_OFFCPU_COUNT, F_RUNQ_NS, F_RUNQ_COUNT, F_RUN_DELAY, F_MIGRATIONS,
       F_RUN_NS, F_RUN_BASE, F_RUN_DELAY_BASE, F_NVCSW_BASE, F_NIVCSW_BASE, N_FIELDS };
enum { D_HIST, D_NHIST, D_OFF_MAX, D_OFF_EPOCH, D_RUNQ_MAX, D_RUNQ_EPOCH, N_DLAYOUT };

typedef struct {
	PyObject_HEAD PyObject *make; /* first, as Holder */
	Py_ssize_t field[N_FIELDS];
	Py_ssize_t at[N_DLAYOUT];
	unsigned long long no_sched_info;
} Deltas;

static PyObject *Deltas_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	PyObject *fields, *layout, *make;
	unsigned long long flag;
	if (!PyArg_ParseTuple(args, "O!O!KO:Deltas", &PyTuple_Type, &fields, &PyTuple_Type, &layout, &flag, &make) ||
	    check_make(make) < 0)
		return NULL;
	Deltas *d = (Deltas *)type->tp_alloc(type, 0);
	if (!d)
		return NULL;
	d->make = Py_NewRef(make);
	d->no_sched_info = flag;
	if (read_offsets(fields, d->field, N_FIELDS) < 0 || read_offsets(layout, d->at, N_DLAYOUT) < 0) {
		Py_DECREF(d);
		return NULL;
	}
	return (PyObject *)d;
}

/* item i of a tuple or list of ints as an unsigned 64-bit value; -1 (no error set) when it is not one */
static int u64_item(PyObject *seq, Py_ssize_t i, uint64_t *out)
{
	if (i >= PySequence_Fast_GET_SIZE(seq))
		return -1;
	PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
	if (!PyLong_CheckExact(v))
		return -1;
	*out = PyLong_AsUnsignedLongLong(v);
	if (*out == (uint64_t)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		return -1;
	}
	return 0;
}

/* delta(tid, raw, values, prev_raw or None, prev_values or None, e): the TaskDelta, None when nothing moved
 * since a last entry, or NotImplemented when a value is beyond 64 bits (Python's task_delta then) */
static PyObject *Deltas_delta(Deltas *d, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 6 || !PyBytes_Check(args[1]) || !PyTuple_Check(args[2]) ||
	    (args[3] != Py_None && !PyBytes_Check(args[3])) || (args[4] != Py_None && !PyList_Check(args[4]))) {
		PyErr_SetString(PyExc_TypeError, "delta(tid, raw, values, prev_raw or None, prev_values or None, e)");
		return NULL;
	}
	PyObject *values = args[2], *prev_values = args[4] == Py_None ? NULL : args[4];
	const char *raw = PyBytes_AS_STRING(args[1]);
	const char *base = args[3] == Py_None ? NULL : PyBytes_AS_STRING(args[3]);
	long long e = PyLong_AsLongLong(args[5]);
	if (e == -1 && PyErr_Occurred())
		return NULL;
	const Py_ssize_t *at = d->at;
	Py_ssize_t end = at[D_HIST] + 4 * at[D_NHIST];
	for (int k = D_OFF_MAX; k <= D_RUNQ_EPOCH; k++) {
		Py_ssize_t size = k == D_OFF_MAX || k == D_RUNQ_MAX ? 16 : 8; /* u64[2], u32[2] */
		end = at[k] + size > end ? at[k] + size : end;
	}
	if (PyBytes_GET_SIZE(args[1]) < end || (base && PyBytes_GET_SIZE(args[3]) < end) || (base && !prev_values)) {
		PyErr_SetString(PyExc_ValueError, "an entry shorter than its fields, or a last entry without its values");
		return NULL;
	}
	uint64_t v[N_FIELDS], p[N_FIELDS] = {0};
	for (int k = 0; k < N_FIELDS; k++)
		if (u64_item(values, d->field[k], &v[k]) < 0 ||
		    (prev_values && u64_item(prev_values, d->field[k], &p[k]) < 0))
			Py_RETURN_NOTIMPLEMENTED;
	uint64_t vol_b, invol_b, run_delay_b, run_b;
	if (!prev_values) {
		vol_b = v[F_NVCSW_BASE], invol_b = v[F_NIVCSW_BASE], run_delay_b = v[F_RUN_DELAY_BASE], run_b = v[F_RUN_BASE];
	} else {
		vol_b = p[F_NVCSW], invol_b = p[F_NIVCSW], run_delay_b = p[F_RUN_DELAY], run_b = p[F_RUN_NS];
	}
	/* the histogram (compared as bytes first, as task_dump does), and interval e's longest of each */
	const char *h = raw + at[D_HIST];
	PyObject *hist;
	if (base ? memcmp(h, base + at[D_HIST], 4 * at[D_NHIST]) == 0 : !memcmp(h, zero4k, 4 * at[D_NHIST]))
		hist = Py_NewRef(no_hist);
	else
		hist = u32_hist_delta(h, base ? base + at[D_HIST] : NULL, at[D_NHIST]);
	if (!hist)
		return NULL;
	uint64_t off_max = ival_longest(raw + at[D_OFF_MAX], raw + at[D_OFF_EPOCH], e, v[F_OFFCPU_COUNT],
					p[F_OFFCPU_COUNT], v[F_OFFCPU_NS], p[F_OFFCPU_NS]);
	uint64_t runq_max = ival_longest(raw + at[D_RUNQ_MAX], raw + at[D_RUNQ_EPOCH], e, v[F_RUNQ_COUNT],
					 p[F_RUNQ_COUNT], v[F_RUNQ_NS], p[F_RUNQ_NS]);
	int no_sched = (v[F_FLAGS] & d->no_sched_info) != 0;
	/* (now, before) of each difference, in TaskDelta's order after its task */
	uint64_t pairs[11][2] = {
		{v[F_OFFCPU_NS], p[F_OFFCPU_NS]},
		{v[F_OFFCPU_COUNT], p[F_OFFCPU_COUNT]},
		{off_max, 0},
		{no_sched ? v[F_RUNQ_NS] : v[F_RUN_DELAY], no_sched ? p[F_RUNQ_NS] : run_delay_b},
		{v[F_RUNQ_COUNT], p[F_RUNQ_COUNT]},
		{runq_max, 0},
		{v[F_NVCSW], vol_b},
		{v[F_NIVCSW], invol_b},
		{v[F_MIGRATIONS], p[F_MIGRATIONS]},
		{v[F_RUNQ_NS], p[F_RUNQ_NS]},
		{v[F_RUN_NS], run_b},
	};
	if (prev_values && PyTuple_GET_SIZE(hist) == 0) {
		int moved = 0;
		for (int k = 0; k < 11; k++)
			moved |= pairs[k][0] != pairs[k][1];
		if (!moved) {
			Py_DECREF(hist);
			Py_RETURN_NONE;
		}
	}
	PyObject *a[13] = {Py_NewRef(args[0])};
	int n = 1, ok = 1;
	for (int k = 0; k < 11; k++) {
		if (k == 9)
			a[n++] = Py_NewRef(hist);
		ok = ok && (a[n++] = udiff(pairs[k][0], pairs[k][1])) != NULL;
	}
	Py_DECREF(hist);
	PyObject *out = ok ? new_record(d->make, a, n) : NULL;
	for (int k = 0; k < n; k++)
		Py_XDECREF(a[k]);
	return out;
}

static PyMethodDef Deltas_methods[] = {
	{"delta", (PyCFunction)(void (*)(void))Deltas_delta, METH_FASTCALL,
	 "delta(tid, raw, values, prev_raw or None, prev_values or None, e): the entry's TaskDelta."},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject DeltasType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stallscope.analyzer._rowread.Deltas",
	.tp_basicsize = sizeof(Deltas),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "Deltas(fields, layout, no_sched_info, make): a task dump entry's delta (bpf/task_dump.py).",
	.tp_new = Deltas_new,
	.tp_dealloc = holder_dealloc,
	.tp_traverse = holder_traverse,
	.tp_methods = Deltas_methods,
};

/* ---- the lock drain's changed entries made into LockDelta records (bpf/lock_collector.py py_lock_deltas) ---- */

/* a lock_val's fields after its count, from its place in a changed entry's row (lock_collector.py _VAL): the sums,
 * the owner, the slab object's geometry, and (at LV_EXT) the per-interval extremes */
enum {
	LV_TOTAL = 1, LV_SPIN, LV_SLEEP, LV_BLOCKED, LV_RUNNABLE, LV_WEIGHTED, LV_VAR, LV_OWNER_PID, LV_OWNER_PAD, LV_OWNER_COMM,
	LV_CACHE, LV_SLOT_SIZE, LV_RED_LEFT_PAD, LV_ORDER, LV_MIN_ORDER, LV_MODE, LV_INO, LV_DEV, LV_PAD, LV_EXT,
};
/* of a changed entry's key, after the row's flags: addr, kstack, start_ns, pid, tgid, flags, kind */
enum { LK_ADDR = 1, LK_KSTACK, LK_START, LK_PID, LK_TGID, LK_FLAGS, LK_KIND, LK_END };

/* value `key` of `cache`, else fn(key) (which keeps it there, or not); a new reference, NULL with an error */
static PyObject *cached_or_call(PyObject *cache, PyObject *key, PyObject *fn)
{
	PyObject *v = PyDict_GetItemWithError(cache, key);
	if (v)
		return Py_NewRef(v);
	if (PyErr_Occurred())
		return NULL;
	return PyObject_CallOneArg(fn, key);
}

/* (a - b) as a Python int, a and b 64-bit signed or not as Python sees them: here both unsigned */
static PyObject *signed_int(__int128 v)
{
	if (v >= 0 && v <= (__int128)UINT64_MAX)
		return PyLong_FromUnsignedLongLong((unsigned long long)v);
	if (v < 0 && v >= -(__int128)UINT64_MAX)
		return udiff(0, (uint64_t)(-v));
	PyErr_SetString(PyExc_OverflowError, "a lock delta beyond 64 bits");
	return NULL;
}

/* A changed entry's fields, read from its bytes in the map diff's blob where each field's place and type are given
 * (bpf/mapdiff.py Changed.raw: (offset, code, length) in the order Changed.rows unpacks them, the codes struct's:
 * 'Q', 'I', 'H', or 's' for bytes of that length), a Python object made only of a field a record holds or a lookup
 * takes (a loaded machine changes 2,000 entries an interval, 42 fields each) */
#define LOCK_ROW_FIELDS 64

struct lock_row {
	const unsigned char *rec; /* the entry's bytes */
	const Py_ssize_t *off;    /* each field's offset */
	const char *code;         /* each field's struct code */
	const Py_ssize_t *len;    /* each field's length */
	PyObject *made[LOCK_ROW_FIELDS]; /* the objects made for this entry, released after it */
};

static int lock_row_u64(struct lock_row *r, Py_ssize_t i, uint64_t *out)
{
	const unsigned char *p = r->rec + r->off[i];
	switch (r->code[i]) {
	case 'Q': { uint64_t v; memcpy(&v, p, 8); *out = v; return 0; }
	case 'I': { uint32_t v; memcpy(&v, p, 4); *out = v; return 0; }
	case 'H': { uint16_t v; memcpy(&v, p, 2); *out = v; return 0; }
	default:
		PyErr_Format(PyExc_TypeError, "field %zd of a lock entry is not an int", i);
		return -1;
	}
}

/* field i as a borrowed object, made for this entry once; NULL with an error */
static PyObject *lock_row_get(struct lock_row *r, Py_ssize_t i)
{
	if (r->made[i])
		return r->made[i];
	if (r->code[i] == 's') {
		r->made[i] = PyBytes_FromStringAndSize((const char *)r->rec + r->off[i], r->len[i]);
	} else {
		uint64_t v;
		if (lock_row_u64(r, i, &v) < 0)
			return NULL;
		r->made[i] = PyLong_FromUnsignedLongLong(v);
	}
	return r->made[i];
}

static void lock_row_done(struct lock_row *r)
{
	for (int i = 0; i < LOCK_ROW_FIELDS; i++)
		Py_CLEAR(r->made[i]);
}

/* lock_deltas(raw, at, e, rq_locks, names, name_text, symbols, symbol, described, describe, kinds, lock_kind,
 * make, task_id, rq_lock, cpus, kernel_id): as bpf/lock_collector.py py_lock_deltas, the same records, of the
 * changed entries read in place (`raw`: Changed.raw's (blob, count, record size, fields), struct lock_row) */
static PyObject *lock_deltas(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 17 || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != 2 || !PyDict_Check(args[3]) ||
	    !PyDict_Check(args[4]) || !PyDict_Check(args[6]) || (args[8] != Py_None && !PyDict_Check(args[8])) ||
	    !PyDict_Check(args[10]) || check_make(args[12]) < 0 || !PyType_Check(args[13]) ||
	    !PyType_IsSubtype((PyTypeObject *)args[13], &PyTuple_Type) || !PyDict_Check(args[15])) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "lock_deltas(raw, (val, prev), e, rq_locks, names, name_text, "
							 "symbols, symbol, described or None, describe, kinds, lock_kind, "
							 "make, task_id, rq_lock, cpus, kernel_id)");
		return NULL;
	}
	Py_ssize_t val = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[1], 0)), prev = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[1], 1));
	long long e = PyLong_AsLongLong(args[2]);
	if ((val == -1 || prev == -1 || e == -1) && PyErr_Occurred())
		return NULL;
	if (val < LK_END || prev < val + LV_EXT + 6) {
		PyErr_SetString(PyExc_ValueError, "lock_deltas: the value's and the previous value's places");
		return NULL;
	}
	PyObject *rq_locks = args[3], *names = args[4], *name_text = args[5], *symbols = args[6], *symbol = args[7];
	PyObject *described = args[8], *describe = args[9], *kinds = args[10], *lock_kind = args[11], *make = args[12];
	PyObject *task_id = args[13], *rq_lock = args[14], *cpus = args[15], *kernel_id = args[16];
	PyObject *out = PyList_New(0), *ids = PyDict_New(), *named = PyList_New(0), *between = PyList_New(0);
	PyObject *empty = PyUnicode_New(0, 0);
	struct lock_row r = {0};
	Py_buffer blob = {0};
	Py_ssize_t n_raw = 0, rec_size = 0, raw_off[LOCK_ROW_FIELDS], raw_len[LOCK_ROW_FIELDS];
	char raw_code[LOCK_ROW_FIELDS];
	if (!out || !ids || !named || !between || !empty)
		goto fail;
	{
		PyObject *src = args[0], *fields = PyTuple_CheckExact(src) && PyTuple_GET_SIZE(src) == 4 ?
						   PyTuple_GET_ITEM(src, 3) : NULL;
		Py_ssize_t nf = fields && PyTuple_Check(fields) ? PyTuple_GET_SIZE(fields) : -1;
		if (nf < prev + 8 || nf > LOCK_ROW_FIELDS) {
			PyErr_SetString(PyExc_ValueError, "lock_deltas: raw is (blob, count, record size, fields), the fields "
							  "each (offset, code, length) and as many as Changed.rows unpacks");
			goto fail;
		}
		n_raw = PyLong_AsSsize_t(PyTuple_GET_ITEM(src, 1));
		rec_size = n_raw < 0 ? -1 : PyLong_AsSsize_t(PyTuple_GET_ITEM(src, 2));
		if (rec_size < 0 || PyObject_GetBuffer(PyTuple_GET_ITEM(src, 0), &blob, PyBUF_SIMPLE) < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError, "lock_deltas: a negative count or record size");
			goto fail;
		}
		for (Py_ssize_t i = 0; i < nf; i++) {
			PyObject *f = PyTuple_GET_ITEM(fields, i);
			const char *code = PyTuple_Check(f) && PyTuple_GET_SIZE(f) == 3 &&
					   PyUnicode_Check(PyTuple_GET_ITEM(f, 1)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(f, 1)) : NULL;
			raw_off[i] = code ? PyLong_AsSsize_t(PyTuple_GET_ITEM(f, 0)) : -1;
			raw_len[i] = code ? PyLong_AsSsize_t(PyTuple_GET_ITEM(f, 2)) : -1;
			Py_ssize_t width = !code ? -1 : code[0] == 'Q' ? 8 : code[0] == 'I' ? 4 : code[0] == 'H' ? 2 :
					   code[0] == 's' ? raw_len[i] : -1;
			if (!code || raw_off[i] < 0 || width < 0 || raw_off[i] + width > rec_size) {
				if (!PyErr_Occurred())
					PyErr_Format(PyExc_ValueError, "lock_deltas: field %zd is not (offset, code, length) "
								       "within a record", i);
				goto fail;
			}
			raw_code[i] = code[0];
		}
		if (n_raw && (!rec_size || n_raw > blob.len / rec_size)) {
			PyErr_SetString(PyExc_ValueError, "lock_deltas: a blob shorter than its records");
			goto fail;
		}
		r.off = raw_off;
		r.len = raw_len;
		r.code = raw_code;
	}
	for (Py_ssize_t entry = 0; entry < n_raw; entry++) {
		r.rec = (const unsigned char *)blob.buf + entry * rec_size;
		uint64_t s[8], p[8], kind, ext[6];
		for (int k = 0; k < 8; k++)
			if (lock_row_u64(&r, val + k, &s[k]) < 0 || lock_row_u64(&r, prev + k, &p[k]) < 0)
				goto fail;
		if (s[0] == p[0]) /* no contention of this entry since the last read */
			continue;
		/* the objects this entry's record holds or looks up with */
		for (int k = LK_ADDR; k < LK_END; k++)
			if (!lock_row_get(&r, k))
				goto fail;
		for (int k = LV_OWNER_PID; k <= LV_CACHE; k++)
			if (!lock_row_get(&r, val + k))
				goto fail;
		if (lock_row_u64(&r, LK_KIND, &kind) < 0)
			goto fail;
		for (int k = 0; k < 6; k++)
			if (lock_row_u64(&r, val + LV_EXT + k, &ext[k]) < 0)
				goto fail;
		PyObject *addr = lock_row_get(&r, LK_ADDR), *kstack = lock_row_get(&r, LK_KSTACK);
		PyObject *flags = lock_row_get(&r, LK_FLAGS), *tgid = lock_row_get(&r, LK_TGID);
		PyObject *cache = lock_row_get(&r, val + LV_CACHE), *comm = lock_row_get(&r, val + LV_OWNER_COMM);
		PyObject *field = Py_NewRef(empty), *where = Py_NewRef(empty), *cpu = NULL;
		if (kind == 0) { /* abi.LOCK_KIND_ADDR: a run queue's lock is named by its CPU */
			cpu = PyDict_GetItemWithError(rq_locks, addr);
			if (!cpu && PyErr_Occurred())
				goto fail_entry;
			if (cpu) {
				Py_SETREF(where, PyDict_GetItemWithError(cpus, cpu));
				if (where)
					Py_INCREF(where);
				else if (PyErr_Occurred() || !(where = PyUnicode_FromFormat("cpu%S", cpu)) ||
					 PyDict_SetItem(cpus, cpu, where) < 0)
					goto fail_entry;
			}
		} else if (kind == 2 && described != Py_None) { /* abi.LOCK_KIND_SLAB, named where a namer reads them */
			for (int k = LV_SLOT_SIZE; k <= LV_DEV; k++)
				if (!lock_row_get(&r, val + k))
					goto fail_entry;
			PyObject *lk = PyDict_GetItemWithError(kinds, flags); /* lock_kind's, kept by flags */
			if (lk)
				Py_INCREF(lk);
			else if (PyErr_Occurred() || !(lk = PyObject_CallOneArg(lock_kind, flags)) ||
				 PyDict_SetItem(kinds, flags, lk) < 0) {
				Py_XDECREF(lk);
				goto fail_entry;
			}
			PyObject *key = PyTuple_Pack(7, cache, addr, lock_row_get(&r, val + LV_SLOT_SIZE),
						     lock_row_get(&r, val + LV_RED_LEFT_PAD), lock_row_get(&r, val + LV_ORDER),
						     lock_row_get(&r, val + LV_MIN_ORDER), lk);
			PyObject *hit = key ? PyDict_GetItemWithError(described, key) : NULL;
			Py_XDECREF(key);
			if (hit)
				Py_INCREF(hit);
			else if (!PyErr_Occurred())
				hit = PyObject_CallFunctionObjArgs(describe, cache, addr, lock_row_get(&r, val + LV_SLOT_SIZE),
								  lock_row_get(&r, val + LV_RED_LEFT_PAD),
								  lock_row_get(&r, val + LV_ORDER),
								  lock_row_get(&r, val + LV_MIN_ORDER),
								  lock_row_get(&r, val + LV_DEV), lock_row_get(&r, val + LV_INO),
								  lock_row_get(&r, val + LV_MODE), tgid, lk, NULL);
			if (!hit || !PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 3) {
				if (hit && !PyErr_Occurred())
					PyErr_SetString(PyExc_TypeError, "describe: (field, where, fields)");
				Py_XDECREF(hit);
				Py_DECREF(lk);
				goto fail_entry;
			}
			Py_SETREF(field, Py_NewRef(PyTuple_GET_ITEM(hit, 0)));
			Py_SETREF(where, Py_NewRef(PyTuple_GET_ITEM(hit, 1)));
			PyObject *fields = PyTuple_GET_ITEM(hit, 2), *note = NULL;
			int truth = PyObject_IsTrue(field);
			Py_ssize_t nf = truth == 0 ? PyObject_Length(fields) : 0;
			if (truth > 0)
				note = PyTuple_Pack(4, cache, lk, kstack, field);
			else if (truth == 0 && nf > 1) {
				PyObject *at = PyLong_FromSsize_t(PyList_GET_SIZE(out));
				note = at ? PyTuple_Pack(5, at, cache, lk, kstack, fields) : NULL;
				Py_XDECREF(at);
			}
			int bad = truth < 0 || nf < 0 || ((truth > 0 || nf > 1) &&
							  (!note || PyList_Append(truth > 0 ? named : between, note) < 0));
			Py_XDECREF(note);
			Py_DECREF(hit);
			Py_DECREF(lk);
			if (bad)
				goto fail_entry;
		}
		/* the interval's longest and shortest (abi.extremes), held to its count and total (abi.bounded) */
		uint64_t longest = 0, shortest = 0;
		int i = (int)(e & 1), j = 1 - i;
		int at_e = e >= 0 && ext[i + 4] == (uint64_t)e, at_next = e >= -1 && ext[j + 4] == (uint64_t)(e + 1);
		if (at_e && at_next) {
			longest = ext[i] > ext[j] ? ext[i] : ext[j];
			shortest = ext[i + 2] < ext[j + 2] ? ext[i + 2] : ext[j + 2];
		} else if (at_e) {
			longest = ext[i], shortest = ext[i + 2];
		} else if (at_next) {
			longest = ext[j], shortest = ext[j + 2];
		}
		__int128 count = (__int128)s[0] - p[0], total = (__int128)s[1] - p[1], lo = longest, sh = shortest;
		if (total >= 0) {
			if (count == 1) {
				lo = sh = total;
			} else {
				lo = lo < total ? lo : total;
				sh = sh < lo ? sh : lo;
			}
		}
		PyObject *sym;
		if (kind != 0)
			sym = Py_NewRef(empty);
		else if (cpu)
			sym = Py_NewRef(rq_lock);
		else
			sym = cached_or_call(symbols, addr, symbol);
		PyObject *tv[2] = {Py_NewRef(lock_row_get(&r, LK_PID)), Py_NewRef(lock_row_get(&r, LK_START))};
		PyObject *a[22] = {
			pack(task_id, tv, 2), Py_NewRef(tgid), Py_NewRef(addr), Py_NewRef(kstack), Py_NewRef(flags),
			Py_NewRef(lock_row_get(&r, LK_KIND)), signed_int(count), signed_int(total), signed_int(lo),
			signed_int(sh), udiff(s[2], p[2]), udiff(s[3], p[3]), Py_NewRef(lock_row_get(&r, val + LV_OWNER_PID)),
			cached_or_call(names, comm, name_text), cached_or_call(names, cache, name_text), sym,
			udiff(s[4], p[4]), udiff(s[5], p[5]), udiff(s[6], p[6]), udiff(s[7], p[7]), field, where,
		};
		field = where = NULL; /* taken by a[] */
		PyObject *rec = NULL;
		int ok = 1;
		for (int k = 0; k < 22; k++)
			ok = ok && a[k] != NULL;
		if (ok)
			rec = new_record(make, a, 22);
		for (int k = 0; k < 22; k++)
			Py_XDECREF(a[k]);
		if (!rec || PyList_Append(out, rec) < 0) {
			Py_XDECREF(rec);
			goto fail;
		}
		Py_DECREF(rec);
		PyObject *had = PyDict_SetDefault(ids, kstack, kernel_id);
		if (!had)
			goto fail;
		lock_row_done(&r);
		continue;
	fail_entry:
		Py_XDECREF(field);
		Py_XDECREF(where);
		goto fail;
	}
	Py_DECREF(empty);
	PyBuffer_Release(&blob);
	return Py_BuildValue("(NNNN)", out, ids, named, between);
fail:
	lock_row_done(&r);
	if (blob.obj)
		PyBuffer_Release(&blob);
	Py_XDECREF(empty);
	Py_XDECREF(out);
	Py_XDECREF(ids);
	Py_XDECREF(named);
	Py_XDECREF(between);
	return NULL;
}

/* ---- the task dump's entries (bpf/collector.py py_scan_dump) ----------------------------------------- */

/* scan_dump's integers (bpf/task_dump.py SCAN_INTS): the dump's framing, the flags it reads, where the entry's
 * values are */
enum { SC_HEADER, SC_KEY, SC_RECORD, SC_OPEN_SIZE, SC_KIND_TASK, SC_KIND_OPEN, SC_DEAD, SC_FOUND_BLOCKED, SC_TGID,
       SC_FLAGS, SC_COMM, SC_POLICY, SC_NICE, SC_RT, SC_PTGID, SC_OFFCPU_NS, SC_OFFCPU_COUNT, N_SC };

typedef struct {
	Py_ssize_t n[N_SC];
	Py_ssize_t nvalues; /* the fewest values an entry's unpack must give */
	/* the set-up: how an entry's values are read, its records made */
	PyObject *unpack, *open_unpack, *py_delta, *name_text, *task_id, *task_info, *prev_type;
	Deltas *deltas;
	Slots *slots;
	/* the collector's state, changed in place */
	PyObject *prevs, *handed, *carried, *info, *leader_start, *remembered, *asleep, *slot_deltas, *e;
	int first;
	/* what the scan hands back */
	PyObject *out, *infos, *dead, *gone, *seen, *found, *renamed;
} Scan;

static PyObject *str_raw, *str_values;

/* pop key from d: a new reference to its value, NULL with no error where it was not there */
static PyObject *dict_pop(PyObject *d, PyObject *key)
{
	PyObject *v = PyDict_GetItemWithError(d, key);
	if (!v)
		return NULL;
	Py_INCREF(v);
	if (PyDict_DelItem(d, key) < 0) {
		Py_DECREF(v);
		return NULL;
	}
	return v;
}

/* OpenWaits.settle: the task's wait handed over leaves the table, what was carried on since in its last counters */
static int settle(Scan *s, PyObject *tid, PyObject *prev_values)
{
	PyObject *h = dict_pop(s->handed, tid);
	if (!h)
		return PyErr_Occurred() ? -1 : 0;
	int rc = -1;
	if (prev_values) {
		PyObject *at = PyTuple_Check(h) && PyTuple_GET_SIZE(h) == 2 ? PyTuple_GET_ITEM(h, 1) : NULL;
		PyObject *cur = at ? PySequence_GetItem(prev_values, s->n[SC_OFFCPU_NS]) : NULL;
		PyObject *span = cur ? PyNumber_Subtract(s->carried, at) : NULL;
		PyObject *sum = span ? PyNumber_Add(cur, span) : NULL;
		if (!at && !PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "a wait handed over is not (wait, carried)");
		if (sum && PySequence_SetItem(prev_values, s->n[SC_OFFCPU_NS], sum) == 0)
			rc = 0;
		Py_XDECREF(cur);
		Py_XDECREF(span);
		Py_XDECREF(sum);
	} else {
		rc = 0;
	}
	Py_DECREF(h);
	return rc;
}

/* the entry's name, flags, policy, nice and priority as the collector keeps them (_info): the name `before` holds
 * where the name's bytes are the last entry's, else read from them (abi.name_text) */
static PyObject *info_of(Scan *s, PyObject *values, PyObject *before, PyObject *prev_values)
{
	PyObject *comm = NULL, *raw = PyTuple_GET_ITEM(values, s->n[SC_COMM]);
	if (before && prev_values && PyTuple_Check(before) && PyTuple_GET_SIZE(before) == 5 && PyList_Check(prev_values) &&
	    s->n[SC_COMM] < PyList_GET_SIZE(prev_values)) {
		/* the name _info holds was read from the last entry's bytes: the same bytes, the same name */
		int same = PyObject_RichCompareBool(PyList_GET_ITEM(prev_values, s->n[SC_COMM]), raw, Py_EQ);
		if (same < 0)
			return NULL;
		if (same)
			comm = Py_NewRef(PyTuple_GET_ITEM(before, 0));
	}
	if (!comm && !(comm = PyObject_CallOneArg(s->name_text, raw)))
		return NULL;
	return Py_BuildValue("(NOOOO)", comm, PyTuple_GET_ITEM(values, s->n[SC_FLAGS]),
			     PyTuple_GET_ITEM(values, s->n[SC_POLICY]), PyTuple_GET_ITEM(values, s->n[SC_NICE]),
			     PyTuple_GET_ITEM(values, s->n[SC_RT]));
}

/* a changed name, policy or priority: kept, and a TaskInfo made; a leader renamed (an exec) told */
static int new_info(Scan *s, PyObject *tid, PyObject *values, PyObject *before, PyObject *now)
{
	if (PyDict_SetItem(s->info, tid, now) < 0)
		return -1;
	PyObject *a[8] = {tid, PyTuple_GET_ITEM(values, s->n[SC_TGID]), PyTuple_GET_ITEM(values, s->n[SC_PTGID])};
	for (int i = 0; i < 5; i++)
		a[3 + i] = PyTuple_GET_ITEM(now, i);
	PyObject *ti = PyObject_Vectorcall(s->task_info, a, 8, NULL);
	if (!ti)
		return -1;
	int rc = PyList_Append(s->infos, ti);
	Py_DECREF(ti);
	if (rc < 0 || !before || !PyTuple_Check(before) || PyTuple_GET_SIZE(before) < 1)
		return rc;
	int renamed = PyObject_RichCompareBool(PyTuple_GET_ITEM(before, 0), PyTuple_GET_ITEM(now, 0), Py_NE);
	if (renamed <= 0)
		return renamed;
	int leader = PyObject_RichCompareBool(PyTuple_GET_ITEM(tid, 0), a[1], Py_EQ);
	if (leader <= 0)
		return leader;
	PyObject *pair = PyTuple_Pack(2, a[1], PyTuple_GET_ITEM(tid, 1));
	rc = pair ? PyList_Append(s->renamed, pair) : -1;
	Py_XDECREF(pair);
	return rc;
}

/* one entry (key: its TaskKey bytes; vraw: its TaskStats), as py_scan_dump's loop reads it */
static int scan_entry(Scan *s, const char *key, Py_ssize_t key_len, PyObject *kraw, PyObject *vraw)
{
	int rc = -1;
	PyObject *values = NULL, *tid = NULL, *prev = NULL, *prev_raw = NULL, *prev_values = NULL, *before = NULL,
		 *now = NULL, *d = NULL, *slots = NULL, *made_key = NULL;
	if (key_len < 16 || !PyBytes_Check(vraw)) {
		PyErr_SetString(PyExc_ValueError, "a task entry's key shorter than its pid and start, or its value not bytes");
		return -1;
	}
	if (!(values = PyObject_CallOneArg(s->unpack, vraw)))
		goto done;
	if (!PyTuple_Check(values) || PyTuple_GET_SIZE(values) < s->nvalues) {
		PyErr_SetString(PyExc_ValueError, "an entry's values fewer than the scan reads");
		goto done;
	}
	PyObject *v[2] = {PyLong_FromUnsignedLong(rd32(key)), PyLong_FromUnsignedLongLong(rd64(key + 8))};
	if (!(tid = pack(s->task_id, v, 2)) || PySet_Add(s->seen, tid) < 0)
		goto done;
	if ((prev = PyDict_GetItemWithError(s->prevs, tid))) {
		Py_INCREF(prev);
		if (!(prev_raw = PyObject_GetAttr(prev, str_raw)) || !(prev_values = PyObject_GetAttr(prev, str_values)))
			goto done;
	} else if (PyErr_Occurred()) {
		goto done;
	}
	if (settle(s, tid, prev_values) < 0)
		goto done;
	PyObject *tgid = PyTuple_GET_ITEM(values, s->n[SC_TGID]), *flags_o = PyTuple_GET_ITEM(values, s->n[SC_FLAGS]);
	unsigned long long flags = PyLong_AsUnsignedLongLongMask(flags_o);
	if (flags == (unsigned long long)-1 && PyErr_Occurred())
		goto done;
	if ((before = PyDict_GetItemWithError(s->info, tid)))
		Py_INCREF(before);
	else if (PyErr_Occurred())
		goto done;
	if (!(now = info_of(s, values, before, prev_values)))
		goto done;
	int same = before ? PyObject_RichCompareBool(before, now, Py_EQ) : 0;
	if (same < 0 || (!same && new_info(s, tid, values, before, now) < 0))
		goto done;
	int leader = PyObject_RichCompareBool(PyTuple_GET_ITEM(tid, 0), tgid, Py_EQ);
	if (leader < 0 || (leader && PyDict_SetItem(s->leader_start, tgid, PyTuple_GET_ITEM(tid, 1)) < 0))
		goto done;
	if (flags & (unsigned long long)s->n[SC_FOUND_BLOCKED] && s->first) {
		if (PySet_Add(s->asleep, tid) < 0)
			goto done;
	} else if (PySet_GET_SIZE(s->asleep)) {
		int ended = PyObject_IsTrue(PyTuple_GET_ITEM(values, s->n[SC_OFFCPU_COUNT]));
		if (ended < 0 || (ended && PySet_Discard(s->asleep, tid) < 0))
			goto done;
	}
	int known = PySet_Contains(s->remembered, tgid);
	if (known < 0)
		goto done;
	if (!known) {
		int there = PyDict_Contains(s->found, tgid);
		if (there < 0)
			goto done;
		if (!there) {
			PyObject *f = PyTuple_Pack(3, tid, PyTuple_GET_ITEM(values, s->n[SC_PTGID]), flags_o);
			int bad = !f || PyDict_SetItem(s->found, tgid, f) < 0;
			Py_XDECREF(f);
			if (bad)
				goto done;
		}
	}
	PyObject *da[6] = {tid, vraw, values, prev_raw ? prev_raw : Py_None, prev_values ? prev_values : Py_None, s->e};
	if (!(d = Deltas_delta(s->deltas, da, 6)))
		goto done;
	if (d == Py_NotImplemented) { /* a value beyond 64 bits: task_dump.py_task_delta */
		Py_DECREF(d);
		PyObject *pa[5] = {tid, vraw, values, prev ? prev : Py_None, s->e};
		if (!(d = PyObject_Vectorcall(s->py_delta, pa, 5, NULL)))
			goto done;
	}
	if (d != Py_None && PyList_Append(s->out, d) < 0)
		goto done;
	PyObject *sa[5] = {tid, tgid, vraw, prev_raw ? prev_raw : Py_None, s->e};
	if (!(slots = Slots_deltas(s->slots, sa, 5)))
		goto done;
	if (PyList_GET_SIZE(slots)) {
		Py_ssize_t n = PyList_GET_SIZE(s->slot_deltas);
		if (PyList_SetSlice(s->slot_deltas, n, n, slots) < 0)
			goto done;
	}
	if (flags & (unsigned long long)s->n[SC_DEAD]) {
		if (!kraw && !(kraw = made_key = PyBytes_FromStringAndSize(key, key_len)))
			goto done;
		if (PySet_Add(s->dead, tid) < 0 || PyList_Append(s->gone, kraw) < 0)
			goto done;
		PyObject *gone = dict_pop(s->prevs, tid);
		if (!gone && PyErr_Occurred())
			goto done;
		Py_XDECREF(gone);
		if (!(gone = dict_pop(s->info, tid)) && PyErr_Occurred())
			goto done;
		Py_XDECREF(gone);
	} else {
		PyObject *kept = PySequence_List(values);
		if (!kept)
			goto done;
		if (prev && Py_IS_TYPE(prev, (PyTypeObject *)s->prev_type)) { /* the last entry's Prev, made this one's */
			int bad = PyObject_SetAttr(prev, str_raw, vraw) < 0 || PyObject_SetAttr(prev, str_values, kept) < 0;
			Py_DECREF(kept);
			if (bad)
				goto done;
		} else {
			PyObject *p = PyObject_CallFunctionObjArgs(s->prev_type, vraw, kept, NULL);
			Py_DECREF(kept);
			int bad = !p || PyDict_SetItem(s->prevs, tid, p) < 0;
			Py_XDECREF(p);
			if (bad)
				goto done;
		}
	}
	rc = 0;
done:
	Py_XDECREF(values);
	Py_XDECREF(tid);
	Py_XDECREF(prev);
	Py_XDECREF(prev_raw);
	Py_XDECREF(prev_values);
	Py_XDECREF(before);
	Py_XDECREF(now);
	Py_XDECREF(d);
	Py_XDECREF(slots);
	Py_XDECREF(made_key);
	return rc;
}

/* the dump's records: each task entry scanned, each open_wait unpacked into `opened` */
static int scan_raw(Scan *s, PyObject *raw, PyObject *opened)
{
	const char *buf = PyBytes_AS_STRING(raw);
	Py_ssize_t end = PyBytes_GET_SIZE(raw), at = 0, hs = s->n[SC_HEADER], ks = s->n[SC_KEY];
	while (at + hs <= end) {
		uint32_t kind = rd32(buf + at), size = rd32(buf + at + 4);
		at += hs;
		if (at + (Py_ssize_t)size > end)
			break;
		if (kind == (uint32_t)s->n[SC_KIND_TASK] && size == (uint32_t)s->n[SC_RECORD]) {
			PyObject *vraw = PyBytes_FromStringAndSize(buf + at + ks, size - ks);
			int rc = vraw ? scan_entry(s, buf + at, ks, NULL, vraw) : -1;
			Py_XDECREF(vraw);
			if (rc < 0)
				return -1;
		} else if (kind == (uint32_t)s->n[SC_KIND_OPEN] && size == (uint32_t)s->n[SC_OPEN_SIZE]) {
			PyObject *o = PyObject_CallFunction(s->open_unpack, "On", raw, at);
			int rc = o ? PyList_Append(opened, o) : -1;
			Py_XDECREF(o);
			if (rc < 0)
				return -1;
		}
		at += size;
	}
	return 0;
}

/* scan_dump(raw, extra, cfg, state): bpf/collector.py py_scan_dump in C, the same answer: (task deltas, task infos,
 * dead tasks, their keys, tasks seen, processes first seen, leaders renamed, open_wait records) */
static PyObject *scan_dump(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
	Scan s = {0};
	PyObject *ints, *opened = NULL, *answer = NULL;
	if (nargs != 4 || !PyBytes_Check(args[0]) || !PyList_Check(args[1]) || !PyTuple_Check(args[2]) ||
	    !PyTuple_Check(args[3]) || PyTuple_GET_SIZE(args[2]) != 10 || PyTuple_GET_SIZE(args[3]) != 10) {
		PyErr_SetString(PyExc_TypeError, "scan_dump(raw, extra, cfg, state)");
		return NULL;
	}
	PyObject *const *c = &PyTuple_GET_ITEM(args[2], 0), *const *st = &PyTuple_GET_ITEM(args[3], 0);
	ints = c[0];
	if (!PyTuple_Check(ints) || read_offsets(ints, s.n, N_SC) < 0)
		return NULL;
	s.unpack = c[1], s.open_unpack = c[2], s.py_delta = c[5], s.name_text = c[6], s.task_id = c[7];
	s.task_info = c[8], s.prev_type = c[9];
	if (!PyObject_TypeCheck(c[3], &DeltasType) || !PyObject_TypeCheck(c[4], &SlotsType) || !PyType_Check(s.task_id) ||
	    !PyType_IsSubtype((PyTypeObject *)s.task_id, &PyTuple_Type) || !PyType_Check(s.prev_type)) {
		PyErr_SetString(PyExc_TypeError, "scan_dump's set-up: (ints, unpack, open unpack, Deltas, Slots, py delta, "
						 "name_text, TaskId, TaskInfo, Prev)");
		return NULL;
	}
	s.deltas = (Deltas *)c[3], s.slots = (Slots *)c[4];
	s.prevs = st[0], s.handed = st[1], s.carried = st[2], s.info = st[3], s.leader_start = st[4];
	s.remembered = st[5], s.asleep = st[6], s.e = st[8], s.slot_deltas = st[9];
	if (!PyDict_Check(s.prevs) || !PyDict_Check(s.handed) || !PyDict_Check(s.info) || !PyDict_Check(s.leader_start) ||
	    !PyAnySet_Check(s.remembered) || !PySet_Check(s.asleep) || !PyList_Check(s.slot_deltas)) {
		PyErr_SetString(PyExc_TypeError, "scan_dump's state: (prevs, handed, carried, info, leader starts, "
						 "remembered, asleep at start, first, e, slot deltas)");
		return NULL;
	}
	if ((s.first = PyObject_IsTrue(st[7])) < 0)
		return NULL;
	Py_ssize_t most = 0;
	for (int k = SC_TGID; k < N_SC; k++)
		most = s.n[k] > most ? s.n[k] : most;
	s.nvalues = most + 1;
	if (!(s.out = PyList_New(0)) || !(s.infos = PyList_New(0)) || !(s.dead = PySet_New(NULL)) ||
	    !(s.gone = PyList_New(0)) || !(s.seen = PySet_New(NULL)) || !(s.found = PyDict_New()) ||
	    !(s.renamed = PyList_New(0)) || !(opened = PyList_New(0)))
		goto done;
	if (scan_raw(&s, args[0], opened) < 0)
		goto done;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(args[1]); i++) {
		PyObject *kv = PyList_GET_ITEM(args[1], i);
		if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(kv, 0))) {
			PyErr_SetString(PyExc_TypeError, "an entry of task_final not (key bytes, value bytes)");
			goto done;
		}
		PyObject *k = PyTuple_GET_ITEM(kv, 0);
		if (scan_entry(&s, PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k), k, PyTuple_GET_ITEM(kv, 1)) < 0)
			goto done;
	}
	answer = PyTuple_Pack(8, s.out, s.infos, s.dead, s.gone, s.seen, s.found, s.renamed, opened);
done:
	Py_XDECREF(s.out);
	Py_XDECREF(s.infos);
	Py_XDECREF(s.dead);
	Py_XDECREF(s.gone);
	Py_XDECREF(s.seen);
	Py_XDECREF(s.found);
	Py_XDECREF(s.renamed);
	Py_XDECREF(opened);
	return answer;
}

static PyMethodDef module_methods[] = {
	{"lock_waits", lock_waits, METH_VARARGS, "A lock fold's records (analyzer/rowfold.py LockRows.result)."},
	{"lock_deltas", (PyCFunction)(void (*)(void))lock_deltas, METH_FASTCALL,
	 "The lock drain's records of its changed entries (bpf/lock_collector.py py_lock_deltas)."},
	{"scan_dump", (PyCFunction)(void (*)(void))scan_dump, METH_FASTCALL,
	 "A task dump's entries scanned into deltas (bpf/collector.py py_scan_dump)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_rowread", "A recording's per-wait tables read into records in C.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__rowread(void)
{
	if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&MakerType) < 0 || PyType_Ready(&SlotsType) < 0 ||
	    PyType_Ready(&DeltasType) < 0)
		return NULL;
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	ReadError = PyErr_NewException("stallscope.analyzer._rowread.ReadError", NULL, NULL);
	hists = PyDict_New();
	wokens = PyDict_New();
	no_hist = PyTuple_New(0);
	no_args = PyTuple_New(0);
	no_woken = Py_BuildValue("(iii)", 0, 0, 0);
	str_raw = PyUnicode_InternFromString("raw");
	str_values = PyUnicode_InternFromString("values");
	if (!ReadError || !hists || !wokens || !no_args || !no_hist || !no_woken || !str_raw || !str_values ||
	    PyModule_AddObjectRef(m, "ReadError", ReadError) < 0 ||
	    PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0 ||
	    PyModule_AddObjectRef(m, "Maker", (PyObject *)&MakerType) < 0 ||
	    PyModule_AddObjectRef(m, "Slots", (PyObject *)&SlotsType) < 0 ||
	    PyModule_AddObjectRef(m, "Deltas", (PyObject *)&DeltasType) < 0 ||
	    PyModule_AddIntConstant(m, "SHAPE_TASK", SHAPE_TASK) < 0 ||
	    PyModule_AddIntConstant(m, "SHAPE_OFFCPU", SHAPE_OFFCPU) < 0 ||
	    PyModule_AddIntConstant(m, "SHAPE_WAKER", SHAPE_WAKER) < 0 ||
	    PyModule_AddIntConstant(m, "SHAPE_ONGOING", SHAPE_ONGOING) < 0 ||
	    PyModule_AddIntConstant(m, "SHAPE_OPENED", SHAPE_OPENED) < 0 ||
	    PyModule_AddIntConstant(m, "SHAPE_ONCPU", SHAPE_ONCPU) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
