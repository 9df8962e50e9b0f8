// SPDX-License-Identifier: GPL-2.0
/* A window's task and off-CPU records and its waits carried on summed into its accumulators, and its model's
 * waits and task totals made from them, in C (analyzer/model.py ModelFold: `py_fold_tasks`, `py_fold_waits`,
 * `py_fold_ongoing`, `py_made_waits`, `py_made_totals` there are the same in Python, and run where this is not
 * built; `carried_made` makes what the last three make of an interval's waits carried on, in one pass).
 *
 * Every window `top` shows folds each interval: 5,000 sleeping threads make 3,000 task records, 6,000
 * off-CPU records and 6,000 waits of the model an interval, each read field by field and added into a
 * list; a report folds 600,000 of them. The loops here do what the Python does, in its order, on the same
 * objects: the records' fields read by name, the sums made by Python's own addition and comparison (any
 * integer, however large), the accumulators left as the Python leaves them. Only the interpreter's loop is
 * saved. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "slots.h"

/* the records' field names, interned at import */
enum {
	A_TASK, A_OFFCPU_NS, A_OFFCPU_COUNT, A_OFFCPU_MAX_NS, A_RUNQ_WAIT_NS, A_RUNQ_COUNT, A_RUNQ_MAX_NS,
	A_VOLUNTARY, A_INVOLUNTARY, A_MIGRATIONS, A_RUNQ_HIST, A_RUNQ_LATENCY_NS, A_RUN_NS,
	A_TGID, A_STATE, A_KSTACK, A_USTACK, A_COUNT, A_TOTAL_NS, A_MAX_NS, A_HIST, A_WHY, A_FUNC, A_CHARGED_NS,
	A_WEIGHTED_NS, A_VAR_US2, A_WOKEN, A_KSTACK_ID, A_USTACK_ID, N_ATTRS
};
static const char *const attr_names[N_ATTRS] = {
	"task", "offcpu_ns", "offcpu_count", "offcpu_max_ns", "runq_wait_ns", "runq_count", "runq_max_ns",
	"voluntary_switches", "involuntary_switches", "migrations", "runq_hist", "runq_latency_ns", "run_ns",
	"tgid", "state", "kstack", "ustack", "count", "total_ns", "max_ns", "hist", "why", "func", "charged_ns",
	"weighted_ns", "var_us2", "woken", "kstack_id", "ustack_id",
};
static PyObject *attrs[N_ATTRS];
static PyObject *zero, *one, *not_woken, *no_hist;

/* the record's fields `which` (A_* in order), new references, read from its slots (slots.h) through the call
 * site's offsets `f`; -1 with every one released on failure */
static int read_fields(struct fields *f, PyObject *rec, const int *which, int n, PyObject **out)
{
	return fields_read(f, rec, attrs, which, n, out);
}

static void release(PyObject **v, int n)
{
	for (int i = 0; i < n; i++)
		Py_XDECREF(v[i]);
}

/* what `expr` makes, unless an error is pending (a call before it failed): items made one after another */
#define IF_OK(expr) (PyErr_Occurred() ? NULL : (expr))

/* a list of these n new references (stolen); NULL, all released, if any is NULL */
static PyObject *list_of(PyObject **items, int n)
{
	PyObject *out = PyErr_Occurred() ? NULL : PyList_New(n);
	if (!out) {
		release(items, n);
		return NULL;
	}
	for (int i = 0; i < n; i++)
		PyList_SET_ITEM(out, i, items[i]);
	return out;
}

/* an accumulator: a list of at least n items */
static int check_acc(PyObject *acc, Py_ssize_t n)
{
	if (!PyList_Check(acc) || PyList_GET_SIZE(acc) < n) {
		PyErr_Format(PyExc_TypeError, "an accumulator is a list of %zd items", n);
		return -1;
	}
	return 0;
}

/* a and b as C integers, where both are Python ints (exactly) that fit: what nearly every count and sum is */
static int both_small(PyObject *a, PyObject *b, long long *x, long long *y)
{
	int oa, ob;
	if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b))
		return 0;
	*x = PyLong_AsLongLongAndOverflow(a, &oa);
	*y = PyLong_AsLongLongAndOverflow(b, &ob);
	return !oa && !ob;
}

/* acc[i] += v (Python's addition; summed in C where it cannot overflow, as Python would sum it) */
static int add_at(PyObject *acc, Py_ssize_t i, PyObject *v)
{
	PyObject *old = PyList_GET_ITEM(acc, i), *sum;
	long long x, y, z;
	if (both_small(old, v, &x, &y) && !__builtin_add_overflow(x, y, &z)) {
		if (y == 0)
			return 0; /* the same value: nothing to replace */
		sum = PyLong_FromLongLong(z);
	} else {
		sum = PyNumber_Add(old, v);
	}
	if (!sum)
		return -1;
	PyList_SET_ITEM(acc, i, sum);
	Py_DECREF(old);
	return 0;
}

/* if v > acc[i]: acc[i] = v */
static int max_at(PyObject *acc, Py_ssize_t i, PyObject *v)
{
	long long x, y;
	int gt = both_small(v, PyList_GET_ITEM(acc, i), &x, &y) ? x > y
		 : PyObject_RichCompareBool(v, PyList_GET_ITEM(acc, i), Py_GT);
	if (gt > 0) {
		PyObject *old = PyList_GET_ITEM(acc, i);
		PyList_SET_ITEM(acc, i, Py_NewRef(v));
		Py_DECREF(old);
	}
	return gt < 0 ? -1 : 0;
}

/* v if v > 0 else 0, a new reference */
static PyObject *positive(PyObject *v)
{
	int gt = PyObject_RichCompareBool(v, zero, Py_GT);
	return gt < 0 ? NULL : Py_NewRef(gt ? v : zero);
}

/* model.py _add_slots: a histogram's (slot, count) pairs added into `acc` (a list of `slots` counts; None:
 * made), slots beyond it dropped; a new reference to the list */
static PyObject *add_slots(PyObject *acc, PyObject *hist, Py_ssize_t slots)
{
	if (acc == Py_None) {
		if (!(acc = PyList_New(slots)))
			return NULL;
		for (Py_ssize_t i = 0; i < slots; i++)
			PyList_SET_ITEM(acc, i, Py_NewRef(zero));
	} else if (check_acc(acc, slots) < 0) {
		return NULL;
	} else {
		Py_INCREF(acc);
	}
	PyObject *pairs = PySequence_Fast(hist, "a histogram is a sequence of (slot, count) pairs");
	if (!pairs)
		goto fail;
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(pairs); i++) {
		PyObject *pair = PySequence_Fast_GET_ITEM(pairs, i);
		if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
			PyErr_SetString(PyExc_ValueError, "a histogram's slot is a (slot, count) pair");
			goto fail_pairs;
		}
		PyObject *slot = PyTuple_GET_ITEM(pair, 0);
		if (!PyLong_Check(slot)) {
			PyErr_SetString(PyExc_TypeError, "a histogram's slot is an integer");
			goto fail_pairs;
		}
		int overflow;
		long long at = PyLong_AsLongLongAndOverflow(slot, &overflow);
		if (at == -1 && PyErr_Occurred())
			goto fail_pairs;
		if (overflow || at < 0 || at >= slots)
			continue;
		if (add_at(acc, (Py_ssize_t)at, PyTuple_GET_ITEM(pair, 1)) < 0)
			goto fail_pairs;
	}
	Py_DECREF(pairs);
	return acc;
fail_pairs:
	Py_DECREF(pairs);
fail:
	Py_DECREF(acc);
	return NULL;
}

/* (accumulators: dict, records, slots): the records as a fast sequence (a new reference), `slots` read; NULL with
 * an error naming `usage` otherwise */
static PyObject *fold_args(PyObject *const *args, Py_ssize_t nargs, const char *usage, Py_ssize_t *slots)
{
	if (nargs < 3 || !PyDict_Check(args[0])) {
		PyErr_SetString(PyExc_TypeError, usage);
		return NULL;
	}
	*slots = PyLong_AsSsize_t(args[2]);
	if (*slots == -1 && PyErr_Occurred())
		return NULL;
	if (*slots < 0 || *slots > 4096) {
		PyErr_SetString(PyExc_ValueError, "slots: 0 to 4096");
		return NULL;
	}
	return PySequence_Fast(args[1], "records: a sequence");
}

/* acc[i] = add_slots(acc[i], hist): a histogram added into an accumulator's, made where it had none */
static int merge_hist(PyObject *acc, Py_ssize_t i, PyObject *hist, Py_ssize_t slots)
{
	PyObject *sum = add_slots(PyList_GET_ITEM(acc, i), hist, slots);
	if (!sum)
		return -1;
	if (sum == PyList_GET_ITEM(acc, i)) { /* added in place */
		Py_DECREF(sum);
		return 0;
	}
	return PyList_SetItem(acc, i, sum); /* steals it */
}

/* fold_tasks(tasks, records, slots): model.py py_fold_tasks */
static PyObject *fold_tasks(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	static const int which[] = {A_TASK, A_OFFCPU_NS, A_OFFCPU_COUNT, A_OFFCPU_MAX_NS, A_RUNQ_WAIT_NS, A_RUNQ_COUNT,
				    A_RUNQ_MAX_NS, A_VOLUNTARY, A_INVOLUNTARY, A_MIGRATIONS, A_RUNQ_HIST,
				    A_RUNQ_LATENCY_NS, A_RUN_NS};
	enum { N = sizeof(which) / sizeof(which[0]) };
	static struct fields fields; /* the records' slots' offsets */
	Py_ssize_t slots;
	if (nargs != 3) {
		PyErr_SetString(PyExc_TypeError, "fold_tasks(tasks: dict, records, slots)");
		return NULL;
	}
	PyObject *tasks = args[0], *recs = fold_args(args, nargs, "fold_tasks(tasks: dict, records, slots)", &slots);
	if (!recs)
		return NULL;
	for (Py_ssize_t r = 0; r < PySequence_Fast_GET_SIZE(recs); r++) {
		PyObject *v[N];
		if (read_fields(&fields, PySequence_Fast_GET_ITEM(recs, r), which, N, v) < 0)
			goto fail;
		int ok = 0;
		PyObject *t = PyDict_GetItemWithError(tasks, v[0]);
		int has_hist = PyObject_IsTrue(v[10]);
		if (has_hist < 0 || (!t && PyErr_Occurred()))
			goto next;
		if (!t) { /* first met: its own values, in TaskTotals' order after its info */
			PyObject *items[12] = {Py_NewRef(v[1]), Py_NewRef(v[2]), IF_OK(positive(v[3])), Py_NewRef(v[4]),
					       Py_NewRef(v[5]), IF_OK(positive(v[6])), Py_NewRef(v[7]), Py_NewRef(v[8]),
					       Py_NewRef(v[9]),
					       has_hist ? IF_OK(add_slots(Py_None, v[10], slots)) : Py_NewRef(Py_None),
					       Py_NewRef(v[11]), Py_NewRef(v[12])};
			PyObject *acc = list_of(items, 12);
			ok = acc && PyDict_SetItem(tasks, v[0], acc) == 0;
			Py_XDECREF(acc);
			goto next;
		}
		if (check_acc(t, 12) < 0)
			goto next;
		Py_INCREF(t); /* held while its items are replaced */
		ok = add_at(t, 0, v[1]) == 0 && add_at(t, 1, v[2]) == 0 && max_at(t, 2, v[3]) == 0 &&
		     add_at(t, 3, v[4]) == 0 && add_at(t, 4, v[5]) == 0 && max_at(t, 5, v[6]) == 0 &&
		     add_at(t, 6, v[7]) == 0 && add_at(t, 7, v[8]) == 0 && add_at(t, 8, v[9]) == 0 &&
		     add_at(t, 10, v[11]) == 0 && add_at(t, 11, v[12]) == 0;
		if (ok && has_hist)
			ok = merge_hist(t, 9, v[10], slots) == 0;
		Py_DECREF(t);
	next:
		release(v, N);
		if (!ok)
			goto fail;
	}
	Py_DECREF(recs);
	Py_RETURN_NONE;
fail:
	Py_DECREF(recs);
	return NULL;
}

/* kept.append((number, charged, count, max_ns, hist)): a record as a report's series keeps it, its key numbered
 * as the model's waits are ordered */
static int keep(PyObject *kept, PyObject *number, PyObject *charged, PyObject *count, PyObject *max_ns, PyObject *hist)
{
	PyObject *t = PyTuple_Pack(5, number, charged, count, max_ns, hist);
	int r = t ? PyList_Append(kept, t) : -1;
	Py_XDECREF(t);
	return r;
}

/* fold_waits(waits, records, slots[, kept]): model.py py_fold_waits */
static PyObject *fold_waits(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	static const int which[] = {A_TASK, A_TGID, A_STATE, A_KSTACK, A_USTACK, A_WHY, A_FUNC, A_COUNT, A_TOTAL_NS,
				    A_MAX_NS, A_HIST, A_CHARGED_NS, A_WEIGHTED_NS, A_VAR_US2, A_WOKEN};
	enum { N = sizeof(which) / sizeof(which[0]), KEY = 7 };
	static struct fields fields; /* the records' slots' offsets */
	Py_ssize_t slots;
	static const char usage[] = "fold_waits(waits: dict, records, slots[, kept: list or None])";
	PyObject *kept = nargs > 3 ? args[3] : Py_None;
	if (nargs > 4 || (kept != Py_None && !PyList_Check(kept))) {
		PyErr_SetString(PyExc_TypeError, usage);
		return NULL;
	}
	PyObject *waits = args[0], *recs = fold_args(args, nargs, usage, &slots);
	if (!recs)
		return NULL;
	for (Py_ssize_t r = 0; r < PySequence_Fast_GET_SIZE(recs); r++) {
		PyObject *v[N], *key = NULL;
		enum { COUNT = 7, TOTAL, MAX, HIST, CHARGED, WEIGHTED, VAR, WOKEN };
		if (read_fields(&fields, PySequence_Fast_GET_ITEM(recs, r), which, N, v) < 0)
			goto fail;
		int ok = 0, has_hist = PyObject_IsTrue(v[HIST]);
		PyObject *charged = v[CHARGED] == Py_None ? v[TOTAL] : v[CHARGED];
		if (has_hist < 0 || !(key = PyTuple_New(KEY)))
			goto next;
		for (int i = 0; i < KEY; i++)
			PyTuple_SET_ITEM(key, i, Py_NewRef(v[i]));
		PyObject *w = PyDict_GetItemWithError(waits, key);
		if (!w && PyErr_Occurred())
			goto next;
		if (!w) { /* first met: its own values (ModelFold.add's layout) */
			PyObject *items[10] = {
				Py_NewRef(v[COUNT]), Py_NewRef(v[TOTAL]), IF_OK(positive(v[MAX])),
				has_hist ? IF_OK(add_slots(Py_None, v[HIST], slots)) : Py_NewRef(Py_None),
				Py_NewRef(charged), Py_NewRef(v[WEIGHTED]), Py_NewRef(v[VAR]), IF_OK(PySequence_List(v[WOKEN])),
				IF_OK(PyLong_FromSsize_t(PyDict_GET_SIZE(waits))), Py_NewRef(zero)};
			PyObject *acc = list_of(items, 10);
			ok = acc && PyDict_SetItem(waits, key, acc) == 0 &&
			     (kept == Py_None || keep(kept, PyList_GET_ITEM(acc, 8), charged, v[COUNT], v[MAX], v[HIST]) == 0);
			Py_XDECREF(acc);
			goto next;
		}
		if (check_acc(w, 10) < 0)
			goto next;
		Py_INCREF(w);
		ok = add_at(w, 0, v[COUNT]) == 0 && add_at(w, 1, v[TOTAL]) == 0 && max_at(w, 2, v[MAX]) == 0 &&
		     add_at(w, 4, charged) == 0 && add_at(w, 5, v[WEIGHTED]) == 0 && add_at(w, 6, v[VAR]) == 0;
		if (ok) {
			int moved = PyObject_RichCompareBool(v[WOKEN], not_woken, Py_NE);
			ok = moved >= 0;
			if (ok && moved) { /* for j, woken in enumerate(o.woken): w[7][j] += woken */
				PyObject *to = PyList_GET_ITEM(w, 7), *from = PySequence_Fast(v[WOKEN], "woken: a sequence");
				ok = from && PyList_Check(to);
				if (from && !ok)
					PyErr_SetString(PyExc_TypeError, "a wait's woken counts are a list");
				for (Py_ssize_t j = 0; ok && j < PySequence_Fast_GET_SIZE(from); j++) {
					if (j >= PyList_GET_SIZE(to)) {
						PyErr_SetString(PyExc_IndexError, "list index out of range");
						ok = 0;
					} else {
						ok = add_at(to, j, PySequence_Fast_GET_ITEM(from, j)) == 0;
					}
				}
				Py_XDECREF(from);
			}
		}
		if (ok && has_hist)
			ok = merge_hist(w, 3, v[HIST], slots) == 0;
		if (ok && kept != Py_None)
			ok = keep(kept, PyList_GET_ITEM(w, 8), charged, v[COUNT], v[MAX], v[HIST]) == 0;
		Py_DECREF(w);
	next:
		Py_XDECREF(key);
		release(v, N);
		if (!ok)
			goto fail;
	}
	Py_DECREF(recs);
	Py_RETURN_NONE;
fail:
	Py_DECREF(recs);
	return NULL;
}

/* a new accumulator: these n items, the one at `at` (0 <= at < n) a new reference to `value`, the rest 0 but for a
 * None at `none` and a list of three 0s at `woken` (-1: neither) and the count `place` (-1: none) */
static PyObject *accumulator(int n, int at, PyObject *value, int none, int woken, int place, Py_ssize_t count)
{
	PyObject *items[12];
	for (int i = 0; i < n; i++)
		items[i] = i == at ? Py_NewRef(value) : i == none ? Py_NewRef(Py_None)
			 : i == woken ? IF_OK(PySequence_List(not_woken)) : i == place ? IF_OK(PyLong_FromSsize_t(count))
			 : Py_NewRef(zero);
	return list_of(items, n);
}

/* fold_ongoing(tasks, waits, keys, ns, since, late): model.py py_fold_ongoing */
static PyObject *fold_ongoing(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 6 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
		PyErr_SetString(PyExc_TypeError, "fold_ongoing(tasks: dict, waits: dict, keys, ns, since, late)");
		return NULL;
	}
	PyObject *tasks = args[0], *waits = args[1], *ns = args[3], *late = args[5], *since = NULL;
	PyObject *keys = PySequence_Fast(args[2], "keys: a sequence");
	if (!keys)
		return NULL;
	if (args[4] != Py_None && !(since = PySequence_Fast(args[4], "since: a sequence")))
		goto fail;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
	if (since && PySequence_Fast_GET_SIZE(since) < n)
		n = PySequence_Fast_GET_SIZE(since); /* zip()'s length, for the long parts; every key is folded */
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(keys); i++) {
		PyObject *key = PySequence_Fast_GET_ITEM(keys, i), *task, *w, *t;
		if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) < 1) {
			PyErr_SetString(PyExc_TypeError, "a key is a tuple, its task first");
			goto fail;
		}
		/* each key hashed once for its lookup and its insertion: a tuple's hash is not kept, and hashing
		 * the key (its task a tuple too) is most of what a wait carried on costs here */
		Py_hash_t kh = PyObject_Hash(key);
		if (kh == -1)
			goto fail;
		if (!(w = _PyDict_GetItem_KnownHash(waits, key, kh))) {
			if (PyErr_Occurred())
				goto fail;
			PyObject *acc = accumulator(10, 4, ns, 3, 7, 8, PyDict_GET_SIZE(waits));
			if (!acc || _PyDict_SetItem_KnownHash(waits, key, acc, kh) < 0) {
				Py_XDECREF(acc);
				goto fail;
			}
			w = acc; /* our reference, held while its items are replaced below */
		} else if (check_acc(w, 10) < 0) {
			goto fail;
		} else {
			Py_INCREF(w); /* held while its items are replaced (an addition may run Python code) */
			if (add_at(w, 4, ns) < 0) {
				Py_DECREF(w);
				goto fail;
			}
		}
		if (since && i < n) { /* the interval's part of a wait that had gone on LONG_OPEN_NS by its end */
			int le = PyObject_RichCompareBool(PySequence_Fast_GET_ITEM(since, i), late, Py_LE);
			if (le < 0 || (le && add_at(w, 9, ns) < 0)) {
				Py_DECREF(w);
				goto fail;
			}
		}
		Py_DECREF(w);
		task = PyTuple_GET_ITEM(key, 0);
		Py_hash_t th = PyObject_Hash(task);
		if (th == -1)
			goto fail;
		if (!(t = _PyDict_GetItem_KnownHash(tasks, task, th))) {
			if (PyErr_Occurred())
				goto fail;
			PyObject *acc = accumulator(12, 0, ns, 9, -1, -1, 0);
			int bad = !acc || _PyDict_SetItem_KnownHash(tasks, task, acc, th) < 0;
			Py_XDECREF(acc);
			if (bad)
				goto fail;
		} else {
			Py_INCREF(t);
			int bad = check_acc(t, 12) < 0 || add_at(t, 0, ns) < 0;
			Py_DECREF(t);
			if (bad)
				goto fail;
		}
	}
	Py_DECREF(keys);
	Py_XDECREF(since);
	Py_RETURN_NONE;
fail:
	Py_DECREF(keys);
	Py_XDECREF(since);
	return NULL;
}

/* tuple(seq) if seq else (), a new reference */
static PyObject *tuple_or_empty(PyObject *seq)
{
	int truth = PyObject_IsTrue(seq);
	return truth < 0 ? NULL : truth ? PySequence_Tuple(seq) : Py_NewRef(no_hist);
}

/* made_waits(waits, stacks, funcs, unnamed, make): model.py py_made_waits */
static PyObject *made_waits(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 5 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) || !PyDict_Check(args[2])) {
		PyErr_SetString(PyExc_TypeError, "made_waits(waits: dict, stacks: dict, funcs: dict, unnamed, make)");
		return NULL;
	}
	PyObject *waits = args[0], *stacks = args[1], *funcs = args[2], *unnamed = args[3], *make = args[4];
	PyObject *out = PyTuple_New(PyDict_GET_SIZE(waits)), *key, *v;
	if (!out)
		return NULL;
	Py_ssize_t pos = 0, n = 0;
	while (PyDict_Next(waits, &pos, &key, &v)) {
		if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 7 || check_acc(v, 10) < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_TypeError, "a wait's key is (task, tgid, state, kstack, ustack, why, func)");
			goto fail;
		}
		PyObject *k = PyTuple_GET_ITEM(key, 3), *u = PyTuple_GET_ITEM(key, 4), *func = PyTuple_GET_ITEM(key, 6);
		PyObject *a[18] = {NULL};
		int ok = 1, named = PyObject_IsTrue(func);
		PyObject *ks = IF_OK(PyDict_GetItemWithError(stacks, k)), *us = IF_OK(PyDict_GetItemWithError(stacks, u));
		if (named < 0 || PyErr_Occurred())
			goto fail;
		a[0] = Py_NewRef(PyTuple_GET_ITEM(key, 0));
		a[1] = Py_NewRef(PyTuple_GET_ITEM(key, 1));
		a[2] = Py_NewRef(PyTuple_GET_ITEM(key, 2));
		a[3] = Py_NewRef(ks ? ks : Py_None);
		a[4] = Py_NewRef(us ? us : Py_None);
		for (int i = 0; i < 3; i++)
			a[5 + i] = Py_NewRef(PyList_GET_ITEM(v, i));
		a[8] = Py_NewRef(k);
		a[9] = Py_NewRef(u);
		a[10] = IF_OK(tuple_or_empty(PyList_GET_ITEM(v, 3)));
		a[11] = Py_NewRef(PyTuple_GET_ITEM(key, 5));
		if (!named) {
			a[12] = IF_OK(PyUnicode_FromStringAndSize("", 0));
		} else {
			PyObject *name = IF_OK(PyDict_GetItemWithError(funcs, func));
			a[12] = name ? Py_NewRef(name) : IF_OK(PyObject_CallOneArg(unnamed, func));
		}
		for (int i = 0; i < 3; i++)
			a[13 + i] = Py_NewRef(PyList_GET_ITEM(v, 4 + i));
		a[16] = IF_OK(PySequence_Tuple(PyList_GET_ITEM(v, 7)));
		a[17] = Py_NewRef(PyList_GET_ITEM(v, 9));
		for (int i = 0; i < 18; i++)
			ok = ok && a[i];
		PyObject *w = ok ? PyObject_Vectorcall(make, a, 18, NULL) : NULL;
		release(a, 18);
		if (!w)
			goto fail;
		PyTuple_SET_ITEM(out, n++, w);
	}
	if (n != PyTuple_GET_SIZE(out)) {
		PyErr_SetString(PyExc_RuntimeError, "the waits changed while they were read");
		goto fail;
	}
	return out;
fail:
	Py_DECREF(out);
	return NULL;
}

/* the TaskInfo of `tid` in `infos` (hashed `hash`; -1: not yet), or unknown(tid) where it has none: a new reference */
static PyObject *info_of(PyObject *infos, PyObject *tid, Py_hash_t hash, PyObject *unknown)
{
	PyObject *info = hash == -1 ? PyDict_GetItemWithError(infos, tid) : _PyDict_GetItem_KnownHash(infos, tid, hash);
	int truth = info ? PyObject_IsTrue(info) : 0;
	if (truth < 0 || (!info && PyErr_Occurred()))
		return NULL;
	return truth ? Py_NewRef(info) : PyObject_CallOneArg(unknown, tid);
}

/* made_totals(tasks, task_info, unknown, no_hist, make): model.py py_made_totals */
static PyObject *made_totals(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 5 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
		PyErr_SetString(PyExc_TypeError, "made_totals(tasks: dict, task_info: dict, unknown, no_hist, make)");
		return NULL;
	}
	PyObject *tasks = args[0], *infos = args[1], *unknown = args[2], *empty = args[3], *make = args[4];
	PyObject *out = PyDict_New(), *tid, *t;
	if (!out)
		return NULL;
	Py_ssize_t pos = 0;
	while (PyDict_Next(tasks, &pos, &tid, &t)) {
		if (check_acc(t, 12) < 0)
			goto fail;
		PyObject *info = info_of(infos, tid, -1, unknown);
		if (!info)
			goto fail;
		PyObject *hist = PyList_GET_ITEM(t, 9);
		hist = hist == Py_None ? Py_NewRef(empty) : PySequence_Tuple(hist);
		if (!hist || PyList_SetItem(t, 9, hist) < 0) { /* t[9] = tuple(t[9]), as the Python leaves it */
			Py_DECREF(info);
			goto fail;
		}
		PyObject *a[13] = {info};
		for (int i = 0; i < 12; i++)
			a[1 + i] = PyList_GET_ITEM(t, i);
		PyObject *made = PyObject_Vectorcall(make, a, 13, NULL);
		Py_DECREF(info);
		if (!made)
			goto fail;
		int set = PyDict_SetItem(out, tid, made);
		Py_DECREF(made);
		if (set < 0)
			goto fail;
	}
	return out;
fail:
	Py_DECREF(out);
	return NULL;
}

/* whether a[i] == b[i] for each of the n (identical, or equal as a dict compares its keys' items); -1 on error */
static int all_equal(PyObject *const *a, PyObject *const *b, int n)
{
	for (int i = 0; i < n; i++) {
		if (a[i] == b[i])
			continue;
		int eq = PyObject_RichCompareBool(a[i], b[i], Py_EQ);
		if (eq <= 0)
			return eq;
	}
	return 1;
}

/* `table[key]` (NULL: none) for a run of keys: an equal key met just before (`*prev`) keeps its value (`*value`);
 * else the key and its value are remembered, strong references both (released by forget), as the calls between
 * may run Python code. The waits carried on come in runs of one process's threads, which share stacks and a
 * function. A borrowed reference, or NULL with or without an error. */
static PyObject *looked_up(PyObject *key, PyObject **prev, PyObject **value, PyObject *table)
{
	if (*prev) {
		int same = all_equal(&key, prev, 1);
		if (same < 0)
			return NULL;
		if (same)
			return *value;
	}
	PyObject *found = PyDict_GetItemWithError(table, key);
	if (!found && PyErr_Occurred())
		return NULL;
	Py_XSETREF(*prev, Py_NewRef(key));
	Py_XSETREF(*value, Py_XNewRef(found));
	return found;
}

static void forget(PyObject **prev, PyObject **value)
{
	Py_CLEAR(*prev);
	Py_CLEAR(*value);
}

/* carried_made(keys, ns, since, late, tasks, waits, task_info, stacks, funcs, unnamed, unknown, no_hist,
 * make_wait, make_totals): model.py ModelFold.model's waits carried on in the last interval, made into their
 * StackWaits and TaskTotals at once, without their accumulators (model.py _carried_made): (the StackWaits in the
 * keys' order, the TaskTotals by task, in it), as py_fold_ongoing then py_made_waits and py_made_totals make them
 * of keys and tasks the fold has not met (`waits`, `tasks`: its accumulators). None when one of them was met, or a
 * task comes twice: the caller folds them as before (the tests compare the two ways). */
static PyObject *carried_made(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 14 || !PyDict_Check(args[4]) || !PyDict_Check(args[5]) || !PyDict_Check(args[6]) ||
	    !PyDict_Check(args[7]) || !PyDict_Check(args[8])) {
		PyErr_SetString(PyExc_TypeError, "carried_made(keys, ns, since, late, tasks: dict, waits: dict, "
				"task_info: dict, stacks: dict, funcs: dict, unnamed, unknown, no_hist, make_wait, make_totals)");
		return NULL;
	}
	PyObject *ns = args[1], *late = args[3], *tasks = args[4], *waits = args[5], *infos = args[6];
	PyObject *stacks = args[7], *funcs = args[8], *unnamed = args[9], *unknown = args[10], *empty = args[11];
	PyObject *make_wait = args[12], *make_totals = args[13], *since = NULL, *made = NULL, *totals = NULL;
	PyObject *out = NULL, *blank = NULL;
	PyObject *prev_k = NULL, *ks = NULL, *prev_u = NULL, *us = NULL, *prev_f = NULL, *fname = NULL;
	PyObject *keys = PySequence_Fast(args[0], "keys: a sequence");
	if (!keys)
		return NULL;
	if (args[2] != Py_None && !(since = PySequence_Fast(args[2], "since: a sequence")))
		goto done;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(keys), n_since = since ? PySequence_Fast_GET_SIZE(since) : 0;
	made = PyTuple_New(n);
	totals = PyDict_New();
	blank = PyUnicode_FromStringAndSize("", 0);
	if (!made || !totals || !blank)
		goto done;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *key = PySequence_Fast_GET_ITEM(keys, i);
		if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 7) {
			PyErr_SetString(PyExc_TypeError, "a wait carried on is (task, tgid, state, kstack, ustack, why, func)");
			goto done;
		}
		PyObject *task = PyTuple_GET_ITEM(key, 0), *k = PyTuple_GET_ITEM(key, 3), *u = PyTuple_GET_ITEM(key, 4);
		PyObject *func = PyTuple_GET_ITEM(key, 6);
		Py_hash_t kh = PyObject_Hash(key), th = kh == -1 ? -1 : PyObject_Hash(task);
		if (th == -1)
			goto done;
		PyObject *met = _PyDict_GetItem_KnownHash(waits, key, kh);
		if (!met && !PyErr_Occurred())
			met = _PyDict_GetItem_KnownHash(tasks, task, th);
		if (PyErr_Occurred())
			goto done;
		if (met) {
			Py_CLEAR(made); /* met by the fold: folded as before */
			goto done;
		}
		/* its TaskTotals: the task's accumulator [ns, 0 x 8, no histogram, 0, 0] */
		PyObject *info = info_of(infos, task, th, unknown);
		if (!info)
			goto done;
		PyObject *t[13] = {info, ns, zero, zero, zero, zero, zero, zero, zero, zero, empty, zero, zero};
		PyObject *tt = PyObject_Vectorcall(make_totals, t, 13, NULL);
		Py_DECREF(info);
		if (!tt)
			goto done;
		int set = _PyDict_SetItem_KnownHash(totals, task, tt, th);
		Py_DECREF(tt);
		if (set < 0)
			goto done;
		/* its StackWait: the wait's accumulator [0, 0, 0, None, ns, 0, 0, [0, 0, 0], place, long part] */
		PyObject *kso = looked_up(k, &prev_k, &ks, stacks), *uso = kso || !PyErr_Occurred() ?
			looked_up(u, &prev_u, &us, stacks) : NULL;
		if (PyErr_Occurred())
			goto done;
		int named = PyObject_IsTrue(func);
		PyObject *name = NULL;
		if (named < 0)
			goto done;
		if (!named) {
			name = Py_NewRef(blank);
		} else {
			PyObject *found = looked_up(func, &prev_f, &fname, funcs);
			if (PyErr_Occurred())
				goto done;
			name = found ? Py_NewRef(found) : PyObject_CallOneArg(unnamed, func); /* asked each time, as in Python */
			if (!name)
				goto done;
		}
		PyObject *longpart = zero;
		if (i < n_since) { /* zip(keys, since)'s pairs: begun by `late`, its charge is all long */
			int le = PyObject_RichCompareBool(PySequence_Fast_GET_ITEM(since, i), late, Py_LE);
			if (le < 0) {
				Py_DECREF(name);
				goto done;
			}
			if (le)
				longpart = ns;
		}
		PyObject *a[18] = {task, PyTuple_GET_ITEM(key, 1), PyTuple_GET_ITEM(key, 2), kso ? kso : Py_None,
				   uso ? uso : Py_None, zero, zero, zero, k, u, no_hist, PyTuple_GET_ITEM(key, 5), name,
				   ns, zero, zero, not_woken, longpart};
		PyObject *w = PyObject_Vectorcall(make_wait, a, 18, NULL);
		Py_DECREF(name);
		if (!w)
			goto done;
		PyTuple_SET_ITEM(made, i, w);
	}
	if (PyDict_GET_SIZE(totals) != n) {
		Py_CLEAR(made); /* a task twice: its waits are one task's, folded as before */
		goto done;
	}
	out = PyTuple_Pack(2, made, totals);
done:
	forget(&prev_k, &ks);
	forget(&prev_u, &us);
	forget(&prev_f, &fname);
	Py_DECREF(keys);
	Py_XDECREF(since);
	Py_XDECREF(blank);
	Py_XDECREF(totals);
	if (!made && !PyErr_Occurred())
		out = Py_NewRef(Py_None);
	Py_XDECREF(made);
	return out;
}

/* ---- a model's waits grouped, for its ranking (analyzer/attribution.py, analyzer/blockers.py) -------- */

/* list.append(item) of a new reference, which is released; -1 on failure */
static int append_new(PyObject *list, PyObject *item)
{
	if (!item)
		return -1;
	int rc = PyList_Append(list, item);
	Py_DECREF(item);
	return rc;
}

/* [item], a new list */
static PyObject *list_one(PyObject *item)
{
	PyObject *out = PyList_New(1);
	if (out)
		PyList_SET_ITEM(out, 0, Py_NewRef(item));
	return out;
}

/* asleep_scan(waits): attribution.py _asleep's pass over a model's waits. The waits alone in their task, their kernel
 * stacks walked or not, grouped by what makes them alike, (tgid, state, why, func, woken, kstack_id, ustack_id), in
 * the order each group is first met: {like: [its first wait, tasks, ns (charged), [[wait], ...], places]}; and the
 * places of the others, in order. Each group is then asked once, in Python, whether it stays one. */
static PyObject *asleep_scan(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	static struct fields task_f, wait_f;
	static const int task_which[] = {A_TASK};
	static const int wait_which[] = {A_TASK, A_TGID, A_STATE, A_WHY, A_FUNC, A_WOKEN, A_KSTACK_ID, A_USTACK_ID,
					 A_CHARGED_NS, A_TOTAL_NS};
	enum { W_TASK, W_TGID, W_STATE, W_WHY, W_FUNC, W_WOKEN, W_KSTACK_ID, W_USTACK_ID, W_CHARGED, W_TOTAL, W_N };
	if (nargs != 1 || !PyTuple_Check(args[0])) {
		PyErr_SetString(PyExc_TypeError, "asleep_scan(waits: tuple)");
		return NULL;
	}
	PyObject *waits = args[0], *seen = PyDict_New(), *groups = PyDict_New(), *rest = PyList_New(0), *out = NULL;
	PyObject *last_g = NULL, *last_like[7] = {NULL}; /* the group of the wait grouped last, and its key's items */
	Py_ssize_t n = PyTuple_GET_SIZE(waits);
	if (!seen || !groups || !rest)
		goto done;
	for (Py_ssize_t i = 0; i < n; i++) { /* each task: Py_True met once, Py_False more often */
		PyObject *task;
		if (read_fields(&task_f, PyTuple_GET_ITEM(waits, i), task_which, 1, &task) < 0)
			goto done;
		PyObject *was = PyDict_GetItemWithError(seen, task);
		int rc = was || PyErr_Occurred() ? (was ? PyDict_SetItem(seen, task, Py_False) : -1)
						 : PyDict_SetItem(seen, task, Py_True);
		Py_DECREF(task);
		if (rc < 0)
			goto done;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *w = PyTuple_GET_ITEM(waits, i), *f[W_N];
		if (read_fields(&wait_f, w, wait_which, W_N, f) < 0)
			goto done;
		PyObject *once = PyDict_GetItemWithError(seen, f[W_TASK]);
		int alone = once == Py_True, ok = once != NULL;
		if (ok && !alone) {
			ok = append_new(rest, PyLong_FromSsize_t(i)) == 0;
		} else if (ok) {
			/* a run of waits alike (one process's threads asleep, in the order the dump met them) goes to the
			 * group of the one before without its key made and looked up */
			PyObject *like_f[7] = {f[W_TGID], f[W_STATE], f[W_WHY], f[W_FUNC], f[W_WOKEN], f[W_KSTACK_ID],
					       f[W_USTACK_ID]}, *g = NULL;
			int same = last_g ? all_equal(like_f, last_like, 7) : 0;
			if (same < 0)
				goto fail_fields;
			if (same) {
				g = last_g;
			} else {
				PyObject *like = PyTuple_Pack(7, like_f[0], like_f[1], like_f[2], like_f[3], like_f[4],
							      like_f[5], like_f[6]);
				g = like ? PyDict_GetItemWithError(groups, like) : NULL;
				if (like && !g && !PyErr_Occurred()) {
					PyObject *items[5] = {Py_NewRef(w), PyList_New(0), PyList_New(0), PyList_New(0),
							      PyList_New(0)};
					g = list_of(items, 5);
					if (g && PyDict_SetItem(groups, like, g) < 0)
						Py_CLEAR(g);
					Py_XDECREF(g); /* the dict's reference, borrowed below */
				}
				Py_XDECREF(like);
				if (g) { /* the group stays in the dict; its key's items held while they are compared */
					last_g = g;
					for (int j = 0; j < 7; j++)
						Py_XSETREF(last_like[j], Py_NewRef(like_f[j]));
				}
			}
			if (g) {
				int below = PyObject_RichCompareBool(f[W_CHARGED], zero, Py_LT);
				ok = below >= 0 && PyList_Append(PyList_GET_ITEM(g, 1), f[W_TASK]) == 0 &&
				     PyList_Append(PyList_GET_ITEM(g, 2), below ? f[W_TOTAL] : f[W_CHARGED]) == 0 &&
				     append_new(PyList_GET_ITEM(g, 3), list_one(w)) == 0 &&
				     append_new(PyList_GET_ITEM(g, 4), PyLong_FromSsize_t(i)) == 0;
			} else {
				ok = 0;
			}
		}
		if (!ok && !PyErr_Occurred())
			PyErr_SetString(PyExc_RuntimeError, "a wait's task was not met in the first pass");
		release(f, W_N);
		if (!ok)
			goto done;
		continue;
fail_fields:
		release(f, W_N);
		goto done;
	}
	out = PyTuple_Pack(2, groups, rest);
done:
	release(last_like, 7);
	Py_XDECREF(seen);
	Py_XDECREF(groups);
	Py_XDECREF(rest);
	return out;
}

/* waits_now_groups(keys, since, places, waits, scope, late): blockers.py waits_now_by_cause's pass over a model's
 * waits in progress: those in `scope` (None: all) with a wait (a place not below 0), grouped by (their key without
 * its task and tgid, how the key's waits ended, whether they began at `late` or before), in the order first met:
 * [waits, the earliest beginning, the first's wait, began by late] each */
static PyObject *waits_now_groups(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	static struct fields woken_f;
	static const int woken_which[] = {A_WOKEN};
	if (nargs != 6 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2]) ||
	    !PyTuple_Check(args[3])) {
		PyErr_SetString(PyExc_TypeError, "waits_now_groups(keys, since, places, waits: tuples, scope, late)");
		return NULL;
	}
	PyObject *keys = args[0], *since = args[1], *places = args[2], *waits = args[3], *scope = args[4];
	PyObject *late = args[5], *groups = PyDict_New(), *out = NULL;
	PyObject *last_key = NULL, *last_woken = NULL, *last_g = NULL; /* the key counted last, its wait's woken, its group */
	int last_long = 0;
	Py_ssize_t n = PyTuple_GET_SIZE(keys), nw = PyTuple_GET_SIZE(waits);
	if (PyTuple_GET_SIZE(since) < n || PyTuple_GET_SIZE(places) < n) /* zip's: the shortest */
		n = PyTuple_GET_SIZE(since) < PyTuple_GET_SIZE(places) ? PyTuple_GET_SIZE(since) : PyTuple_GET_SIZE(places);
	if (!groups)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *key = PyTuple_GET_ITEM(keys, i), *began = PyTuple_GET_ITEM(since, i);
		Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(places, i));
		if (at == -1 && PyErr_Occurred())
			goto done;
		if (at < 0)
			continue;
		if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) < 2) {
			PyErr_SetString(PyExc_TypeError, "a wait in progress's key is (task, tgid, ...)");
			goto done;
		}
		if (scope != Py_None) {
			int in = PySequence_Contains(scope, PyTuple_GET_ITEM(key, 0));
			if (in < 0)
				goto done;
			if (!in)
				continue;
		}
		if (at >= nw) {
			PyErr_SetString(PyExc_IndexError, "a wait in progress's place beyond the model's waits");
			goto done;
		}
		PyObject *w = PyTuple_GET_ITEM(waits, at), *woken;
		int long_open = PyObject_RichCompareBool(began, late, Py_LE);
		if (long_open < 0 || read_fields(&woken_f, w, woken_which, 1, &woken) < 0)
			goto done;
		/* a run of waits alike (one process's threads asleep) counted into the group of the one before, without
		 * its key made and looked up */
		Py_ssize_t size = PyTuple_GET_SIZE(key);
		int same = last_key && long_open == last_long && size == PyTuple_GET_SIZE(last_key) ?
			all_equal(&woken, &last_woken, 1) : 0;
		if (same > 0)
			same = all_equal(((PyTupleObject *)key)->ob_item + 2, ((PyTupleObject *)last_key)->ob_item + 2,
					 (int)(size - 2));
		if (same < 0) {
			Py_DECREF(woken);
			goto done;
		}
		PyObject *like = NULL, *g = NULL;
		if (same) {
			g = last_g;
		} else {
			PyObject *rest = PyTuple_GetSlice(key, 2, size);
			like = rest ? PyTuple_Pack(3, rest, woken, long_open ? Py_True : Py_False) : NULL;
			Py_XDECREF(rest);
			g = like ? PyDict_GetItemWithError(groups, like) : NULL;
		}
		Py_XSETREF(last_woken, woken); /* held while the next keys are compared with it */
		Py_XSETREF(last_key, Py_NewRef(key));
		last_long = long_open;
		int ok = g != NULL;
		if (like && !g && !PyErr_Occurred()) {
			PyObject *items[4] = {PyLong_FromLong(1), Py_NewRef(began), Py_NewRef(w),
					      Py_NewRef(long_open ? Py_True : Py_False)};
			PyObject *made = list_of(items, 4);
			ok = made && PyDict_SetItem(groups, like, made) == 0;
			last_g = ok ? made : NULL; /* the dict's, which keeps it */
			Py_XDECREF(made);
		} else if (g) {
			last_g = g;
			PyObject *count = PyNumber_Add(PyList_GET_ITEM(g, 0), one);
			ok = count && PyList_SetItem(g, 0, count) == 0;
			int earlier = ok ? PyObject_RichCompareBool(began, PyList_GET_ITEM(g, 1), Py_LT) : -1;
			ok = earlier >= 0 && (!earlier || PyList_SetItem(g, 1, Py_NewRef(began)) == 0);
		}
		Py_XDECREF(like);
		if (!ok)
			goto done;
	}
	out = PyDict_Values(groups);
done:
	Py_XDECREF(last_key);
	Py_XDECREF(last_woken);
	Py_DECREF(groups);
	return out;
}

static PyMethodDef module_methods[] = {
	{"fold_tasks", (PyCFunction)(void (*)(void))fold_tasks, METH_FASTCALL,
	 "fold_tasks(tasks, records, slots): TaskDelta records summed into a window's task accumulators."},
	{"fold_waits", (PyCFunction)(void (*)(void))fold_waits, METH_FASTCALL,
	 "fold_waits(waits, records, slots[, kept]): OffcpuDelta records summed into a window's wait accumulators."},
	{"fold_ongoing", (PyCFunction)(void (*)(void))fold_ongoing, METH_FASTCALL,
	 "fold_ongoing(tasks, waits, keys, ns, since, late): waits carried on into a window's accumulators."},
	{"made_waits", (PyCFunction)(void (*)(void))made_waits, METH_FASTCALL,
	 "made_waits(waits, stacks, funcs, unnamed, make): the model's StackWaits, in the accumulators' order."},
	{"made_totals", (PyCFunction)(void (*)(void))made_totals, METH_FASTCALL,
	 "made_totals(tasks, task_info, unknown, no_hist, make): the model's TaskTotals by task."},
	{"carried_made", (PyCFunction)(void (*)(void))carried_made, METH_FASTCALL,
	 "carried_made(keys, ns, since, late, tasks, waits, task_info, stacks, funcs, unnamed, unknown, no_hist, "
	 "make_wait, make_totals): the last interval's waits carried on made into StackWaits and TaskTotals."},
	{"asleep_scan", (PyCFunction)(void (*)(void))asleep_scan, METH_FASTCALL,
	 "asleep_scan(waits): the waits alone in their task grouped alike, and the others."},
	{"waits_now_groups", (PyCFunction)(void (*)(void))waits_now_groups, METH_FASTCALL,
	 "waits_now_groups(keys, since, places, waits, scope, late): the waits in progress grouped alike."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_modelfold", "A window's records folded into its model's accumulators in C.", -1,
	module_methods,
};

PyMODINIT_FUNC PyInit__modelfold(void)
{
	for (int i = 0; i < N_ATTRS; i++)
		if (!(attrs[i] = PyUnicode_InternFromString(attr_names[i])))
			return NULL;
	zero = PyLong_FromLong(0);
	one = PyLong_FromLong(1);
	no_hist = PyTuple_New(0);
	not_woken = Py_BuildValue("(iii)", 0, 0, 0);
	if (!zero || !one || !no_hist || !not_woken)
		return NULL;
	return PyModule_Create(&module);
}
