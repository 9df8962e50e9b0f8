// SPDX-License-Identifier: GPL-2.0
/* An interval's task, off-CPU and kernel lock records summed into a report's series, in C (analyzer/series.py:
 * `py_series_tasks`, `py_series_offcpu`, `py_series_locks` there are the same in Python, and run where this is not
 * built).
 *
 * A report of 10 minutes of hackbench sums 240,000 task records, 450,000 off-CPU records and 1.3 million lock
 * records into its series: per record a handful of `d[i] = d.get(i, 0) + v`, 15 million dictionary reads in all.
 * The loops here do what the Python does, in its order, on the same objects: the sums made by Python's own
 * arithmetic (any integer, however large; a fraction's float), in C only where the answer is the same (integers
 * that fit in 64 bits, two floats), the dictionaries and lists left as the Python leaves them. Only the
 * interpreter's loop is saved. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "slots.h"

/* the names read, interned at import: a task record's fields, the sink's (series.py Sink) attributes */
enum {
	A_TASK, A_RUN_NS, A_RUNQ_WAIT_NS, A_RUNQ_HIST, A_OFFCPU_NS, A_VOLUNTARY, A_INVOLUNTARY, A_MIGRATIONS,
	A_RUNQ_COUNT, A_RUNQ_MAX_NS, A_PID,
	S_TASKS, S_PROCESS_CAUSES, S_LOCKS, S_SLAB, S_SCOPE, S_WAITED, S_TGID_OF, S_CPU_NAME, S_CPU_CLS, S_CAUSES,
	S_CAUSE, N_NAMES
};
static const char *const names[N_NAMES] = {
	"task", "run_ns", "runq_wait_ns", "runq_hist", "offcpu_ns", "voluntary_switches", "involuntary_switches",
	"migrations", "runq_count", "runq_max_ns", "pid",
	"tasks", "process_causes", "locks", "slab", "scope", "waited", "tgid_of", "cpu_name", "cpu_cls", "causes",
	"cause",
};
static PyObject *name[N_NAMES];
static PyObject *zero;

static void release(PyObject **v, int n)
{
	for (int i = 0; i < n; i++)
		Py_XDECREF(v[i]);
}

/* the attributes `which` of `obj`, new references; -1 with every one released on failure */
static int read_attrs(PyObject *obj, const int *which, int n, PyObject **out)
{
	for (int i = 0; i < n; i++) {
		if (!(out[i] = PyObject_GetAttr(obj, name[which[i]]))) {
			release(out, i);
			return -1;
		}
	}
	return 0;
}

/* a + b, a new reference: in C where both are exact integers that fit and their sum does, or both floats */
static PyObject *add(PyObject *a, PyObject *b)
{
	if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
		int oa, ob;
		long long x = PyLong_AsLongLongAndOverflow(a, &oa), y = PyLong_AsLongLongAndOverflow(b, &ob), z;
		if (!oa && !ob && !__builtin_add_overflow(x, y, &z))
			return y ? PyLong_FromLongLong(z) : Py_NewRef(a);
	} else if (PyFloat_CheckExact(a) && PyFloat_CheckExact(b)) {
		return PyFloat_FromDouble(PyFloat_AS_DOUBLE(a) + PyFloat_AS_DOUBLE(b));
	}
	return PyNumber_Add(a, b);
}

/* d[key] = d.get(key, 0) + v */
static int dict_add(PyObject *d, PyObject *key, PyObject *v)
{
	PyObject *old = PyDict_GetItemWithError(d, key);
	if (!old && PyErr_Occurred())
		return -1;
	PyObject *sum = add(old ? old : zero, v);
	if (!sum)
		return -1;
	int r = PyDict_SetItem(d, key, sum);
	Py_DECREF(sum);
	return r;
}

/* d[key] = max(d.get(key, 0), v): the first unless v is greater, as max() keeps it */
static int dict_max(PyObject *d, PyObject *key, PyObject *v)
{
	PyObject *old = PyDict_GetItemWithError(d, key);
	if (!old && PyErr_Occurred())
		return -1;
	if (!old)
		old = zero;
	int gt = PyObject_RichCompareBool(v, old, Py_GT);
	return gt < 0 ? -1 : PyDict_SetItem(d, key, gt ? v : old);
}

/* d.setdefault(key, {}), borrowed: the new dict made only where the key is absent */
static PyObject *dict_of(PyObject *d, PyObject *key)
{
	PyObject *got = PyDict_GetItemWithError(d, key), *fresh;
	if (got || PyErr_Occurred() || !(fresh = PyDict_New()))
		return got;
	got = PyDict_SetItem(d, key, fresh) == 0 ? fresh : NULL;
	Py_DECREF(fresh); /* the dict holds it */
	return got;
}

/* acc[j] += v (acc a list of at least j + 1 items) */
static int add_at(PyObject *acc, Py_ssize_t j, PyObject *v)
{
	PyObject *old = PyList_GET_ITEM(acc, j), *sum = add(old, v);
	if (!sum)
		return -1;
	PyList_SET_ITEM(acc, j, sum);
	Py_DECREF(old);
	return 0;
}

/* series.py _add_list: d[i] = list(values) when absent, else each added into its place */
static int add_list(PyObject *d, PyObject *i, PyObject **values, Py_ssize_t n)
{
	PyObject *e = PyDict_GetItemWithError(d, i);
	if (!e && PyErr_Occurred())
		return -1;
	if (!e) {
		PyObject *fresh = PyList_New(n);
		if (!fresh)
			return -1;
		for (Py_ssize_t j = 0; j < n; j++)
			PyList_SET_ITEM(fresh, j, Py_NewRef(values[j]));
		int r = PyDict_SetItem(d, i, fresh);
		Py_DECREF(fresh);
		return r;
	}
	if (!PyList_Check(e) || PyList_GET_SIZE(e) < n) {
		PyErr_Format(PyExc_TypeError, "a series' entry is a list of %zd items", n);
		return -1;
	}
	Py_INCREF(e); /* held while its items are replaced */
	int r = 0;
	for (Py_ssize_t j = 0; j < n && r == 0; j++)
		r = add_at(e, j, values[j]);
	Py_DECREF(e);
	return r;
}

/* x in s */
static int contains(PyObject *s, PyObject *x)
{
	return PyAnySet_Check(s) ? PySet_Contains(s, x) : PySequence_Contains(s, x);
}

/* 0 <= slot < slots: 1, 0, or -1 on an error */
static int in_slots(PyObject *slot, PyObject *slots)
{
	if (PyLong_CheckExact(slot) && PyLong_CheckExact(slots)) {
		int o1, o2;
		long long s = PyLong_AsLongLongAndOverflow(slot, &o1), n = PyLong_AsLongLongAndOverflow(slots, &o2);
		if (!o1 && !o2)
			return s >= 0 && s < n;
	}
	int ge = PyObject_RichCompareBool(zero, slot, Py_LE);
	return ge <= 0 ? ge : PyObject_RichCompareBool(slot, slots, Py_LT);
}

/* `seq` as exactly n items (a new reference to a fast sequence), as `a, b, ... = seq` unpacks it */
static PyObject *unpack(PyObject *seq, Py_ssize_t n)
{
	PyObject *fast = PySequence_Fast(seq, "cannot unpack a non-sequence");
	if (fast && PySequence_Fast_GET_SIZE(fast) != n) {
		PyErr_Format(PyExc_ValueError, "expected %zd values to unpack, got %zd", n,
			     PySequence_Fast_GET_SIZE(fast));
		Py_CLEAR(fast);
	}
	return fast;
}

/* for slot, c in pairs: if the slot is in range (`slots` NULL: any), d[slot] = d.get(slot, 0) + c * frac (frac
 * NULL: c) */
static int add_pairs(PyObject *d, PyObject *pairs, PyObject *slots, PyObject *frac)
{
	PyObject *it = PyObject_GetIter(pairs), *pair;
	if (!it)
		return -1;
	int r = 0;
	while (r == 0 && (pair = PyIter_Next(it))) {
		PyObject *p = unpack(pair, 2);
		Py_DECREF(pair);
		if (!p) {
			r = -1;
			break;
		}
		PyObject *slot = PySequence_Fast_GET_ITEM(p, 0), *c = PySequence_Fast_GET_ITEM(p, 1);
		int in = slots ? in_slots(slot, slots) : 1;
		if (in < 0) {
			r = -1;
		} else if (in) {
			PyObject *v = frac ? PyNumber_Multiply(c, frac) : Py_NewRef(c);
			r = v ? dict_add(d, slot, v) : -1;
			Py_XDECREF(v);
		}
		Py_DECREF(p);
	}
	Py_DECREF(it);
	return r == 0 && PyErr_Occurred() ? -1 : r;
}

/* sink.causes.get(name) or sink.cause(name, cls): the (ns, count, max_ns, hist) of a cause's series, as a fast
 * sequence of 4 (a new reference) */
static PyObject *cause_dicts(PyObject *sink, PyObject *causes, PyObject *cause_name, PyObject *cls)
{
	PyObject *got = PyDict_GetItemWithError(causes, cause_name), *made = NULL;
	if (!got && PyErr_Occurred())
		return NULL;
	int truth = got ? PyObject_IsTrue(got) : 0;
	if (truth < 0)
		return NULL;
	if (!truth) {
		PyObject *a[3] = {sink, cause_name, cls};
		if (!(made = PyObject_VectorcallMethod(name[S_CAUSE], a, 3, NULL)))
			return NULL;
		got = made;
	}
	PyObject *four = unpack(got, 4);
	Py_XDECREF(made);
	return four;
}

#define ARGS(n, usage)                                         \
	do {                                                   \
		if (nargs != (n)) {                            \
			PyErr_SetString(PyExc_TypeError, usage); \
			return NULL;                           \
		}                                              \
	} while (0)

/* series_tasks(sink, i, records, hist, slots) -> (run ns, run-queue wait ns): series.py py_series_tasks */
static PyObject *series_tasks(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	ARGS(5, "series_tasks(sink, i, records, hist, slots)");
	static const int sink_which[] = {S_SCOPE, S_WAITED, S_TASKS, S_CAUSES, S_PROCESS_CAUSES, S_TGID_OF, S_CPU_NAME,
					 S_CPU_CLS};
	static const int which[] = {A_TASK, A_RUN_NS, A_RUNQ_WAIT_NS, A_RUNQ_HIST, A_OFFCPU_NS, A_VOLUNTARY,
				    A_INVOLUNTARY, A_MIGRATIONS, A_RUNQ_COUNT, A_RUNQ_MAX_NS};
	enum { NS = sizeof(sink_which) / sizeof(sink_which[0]), N = sizeof(which) / sizeof(which[0]) };
	static struct fields fields; /* the records' slots' offsets */
	PyObject *sink = args[0], *i = args[1], *hist = args[3], *slots = args[4];
	PyObject *s[NS];
	if (!PyDict_Check(hist)) {
		PyErr_SetString(PyExc_TypeError, "hist: a dict");
		return NULL;
	}
	if (read_attrs(sink, sink_which, NS, s) < 0)
		return NULL;
	PyObject *scope = s[0], *waited = s[1], *task_rows = s[2], *causes = s[3], *process_causes = s[4],
		 *tgid_of = s[5], *cpu_name = s[6], *cpu_cls = s[7];
	PyObject *run = Py_NewRef(zero), *runq = Py_NewRef(zero), *out = NULL;
	PyObject *recs = NULL;
	if (!PyDict_Check(task_rows) || !PyDict_Check(causes) || !PyDict_Check(process_causes) ||
	    !PyDict_Check(tgid_of)) {
		PyErr_SetString(PyExc_TypeError, "the sink's tables are dicts");
		goto done;
	}
	if (!(recs = PySequence_Fast(args[2], "records: a sequence")))
		goto done;
	for (Py_ssize_t r = 0; r < PySequence_Fast_GET_SIZE(recs); r++) {
		PyObject *v[N];
		if (fields_read(&fields, PySequence_Fast_GET_ITEM(recs, r), name, which, N, v) < 0)
			goto done;
		PyObject *task = v[0], *run_ns = v[1], *wait_ns = v[2], *runq_hist = v[3];
		int ok = 0, in = scope == Py_None ? 1 : contains(scope, task);
		if (in <= 0) {
			ok = in == 0;
			goto next;
		}
		PyObject *sum;
		if (!(sum = add(run, run_ns)))
			goto next;
		Py_SETREF(run, sum);
		if (!(sum = add(runq, wait_ns)))
			goto next;
		Py_SETREF(runq, sum);
		int has_hist = PyObject_IsTrue(runq_hist);
		if (has_hist < 0 || (has_hist && add_pairs(hist, runq_hist, slots, NULL) < 0))
			goto next;
		PyObject *row = dict_of(task_rows, task);
		if (!row || !PyDict_Check(row))
			goto next_type;
		if (add_list(row, i, (PyObject *[]){v[4], wait_ns, v[5], v[6], v[7]}, 5) < 0)
			goto next;
		int cpu = contains(waited, task);
		if (cpu > 0 && (cpu = PyObject_IsTrue(wait_ns)) == 0)
			cpu = PyObject_IsTrue(v[8]);
		if (cpu < 0)
			goto next;
		if (cpu) {
			PyObject *c = cause_dicts(sink, causes, cpu_name, cpu_cls);
			if (!c)
				goto next;
			PyObject *ns = PySequence_Fast_GET_ITEM(c, 0), *count = PySequence_Fast_GET_ITEM(c, 1),
				 *max_ns = PySequence_Fast_GET_ITEM(c, 2), *chist = PySequence_Fast_GET_ITEM(c, 3), *ch;
			int has_max = PyObject_IsTrue(v[9]);
			ok = PyDict_Check(ns) && PyDict_Check(count) && PyDict_Check(max_ns) && PyDict_Check(chist);
			if (!ok)
				PyErr_SetString(PyExc_TypeError, "a cause's series are dicts");
			ok = ok && dict_add(ns, i, wait_ns) == 0 && dict_add(count, i, v[8]) == 0 && has_max >= 0 &&
			     (!has_max || dict_max(max_ns, i, v[9]) == 0) && (ch = dict_of(chist, i)) &&
			     (PyDict_Check(ch) || (PyErr_SetString(PyExc_TypeError, "a histogram is a dict"), 0)) &&
			     add_pairs(ch, runq_hist, NULL, NULL) == 0;
			Py_DECREF(c);
			if (!ok)
				goto next;
			ok = 0;
			PyObject *tgid = PyDict_GetItemWithError(tgid_of, task), *pid = NULL;
			if (!tgid && (PyErr_Occurred() || !(tgid = pid = PyObject_GetAttr(task, name[A_PID]))))
				goto next;
			PyObject *pc = dict_of(process_causes, tgid), *waits;
			Py_XDECREF(pid);
			if (!pc || !PyDict_Check(pc) || !(waits = dict_of(pc, cpu_name)) || !PyDict_Check(waits))
				goto next_type;
			if (dict_add(waits, i, wait_ns) < 0)
				goto next;
		}
		ok = 1;
		goto next;
	next_type:
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "a series' table is a dict");
	next:
		release(v, N);
		if (!ok)
			goto done;
	}
	out = PyTuple_Pack(2, run, runq);
done:
	Py_XDECREF(recs);
	Py_DECREF(run);
	Py_DECREF(runq);
	release(s, NS);
	return out;
}

/* series_offcpu(sink, i, records, wait_of, long_open, slots, idle_cls): series.py py_series_offcpu */
static PyObject *series_offcpu(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	ARGS(7, "series_offcpu(sink, i, records, wait_of, long_open, slots, idle_cls)");
	PyObject *sink = args[0], *i = args[1], *wait_of = args[3], *long_open = args[4], *slots = args[5],
		 *idle_cls = args[6];
	PyObject *causes = PyObject_GetAttr(sink, name[S_CAUSES]), *pcs = NULL, *recs = NULL, *out = NULL;
	if (!causes || !(pcs = PyObject_GetAttr(sink, name[S_PROCESS_CAUSES])))
		goto done;
	if (!PyDict_Check(causes) || !PyDict_Check(pcs) || !PyDict_Check(long_open)) {
		PyErr_SetString(PyExc_TypeError, "the sink's tables and long_open are dicts");
		goto done;
	}
	if (!(recs = PySequence_Fast(args[2], "records: a sequence")))
		goto done;
	for (Py_ssize_t r = 0; r < PySequence_Fast_GET_SIZE(recs); r++) {
		PyObject *rec = unpack(PySequence_Fast_GET_ITEM(recs, r), 5), *w = NULL, *parts = NULL;
		if (!rec)
			goto done;
		PyObject *n = PySequence_Fast_GET_ITEM(rec, 0), *charged = PySequence_Fast_GET_ITEM(rec, 1),
			 *count = PySequence_Fast_GET_ITEM(rec, 2), *max_ns = PySequence_Fast_GET_ITEM(rec, 3),
			 *hist = PySequence_Fast_GET_ITEM(rec, 4);
		int ok = 0;
		PyObject *got;
		Py_ssize_t at = PyList_CheckExact(wait_of) && PyLong_CheckExact(n) ? PyLong_AsSsize_t(n) : -1;
		if (at == -1 && PyErr_Occurred())
			PyErr_Clear(); /* beyond a Py_ssize_t: the list's own indexing says so */
		if (at >= 0 && at < PyList_GET_SIZE(wait_of))
			got = Py_NewRef(PyList_GET_ITEM(wait_of, at));
		else if (!(got = PyObject_GetItem(wait_of, n)))
			goto next;
		if (got == Py_None) {
			Py_DECREF(got);
			ok = 1;
			goto next;
		}
		w = unpack(got, 5);
		Py_DECREF(got);
		if (!w)
			goto next;
		PyObject *tgid = PySequence_Fast_GET_ITEM(w, 1), *quiet = PySequence_Fast_GET_ITEM(w, 2),
			 *idle_name = PySequence_Fast_GET_ITEM(w, 3);
		int measured = PyObject_IsTrue(PySequence_Fast_GET_ITEM(w, 4)), has_count, has_max, has_hist;
		PyObject *pc = dict_of(pcs, tgid);
		if (measured < 0 || !pc)
			goto next;
		if (!PyDict_Check(pc)) {
			PyErr_SetString(PyExc_TypeError, "a process' causes are a dict");
			goto next;
		}
		if ((has_count = PyObject_IsTrue(count)) < 0 || (has_max = PyObject_IsTrue(max_ns)) < 0 ||
		    (has_hist = PyObject_IsTrue(hist)) < 0)
			goto next;
		if (!(parts = PySequence_Fast(PySequence_Fast_GET_ITEM(w, 0), "a wait's causes: a sequence")))
			goto next;
		for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(parts); k++) {
			PyObject *part = unpack(PySequence_Fast_GET_ITEM(parts, k), 3), *c = NULL, *ns = NULL;
			if (!part)
				goto next;
			PyObject *cname = PySequence_Fast_GET_ITEM(part, 0), *frac = PySequence_Fast_GET_ITEM(part, 2);
			int step = 0; /* 1: done well */
			if (!(c = cause_dicts(sink, causes, cname, PySequence_Fast_GET_ITEM(part, 1))))
				goto part_done;
			for (int j = 0; j < 4; j++)
				if (!PyDict_Check(PySequence_Fast_GET_ITEM(c, j))) {
					PyErr_SetString(PyExc_TypeError, "a cause's series are dicts");
					goto part_done;
				}
			if (!(ns = PyNumber_Multiply(charged, frac)))
				goto part_done;
			int moving = 0;
			if (quiet != Py_None && (moving = PyObject_RichCompareBool(cname, quiet, Py_EQ)) > 0) {
				PyObject *open = PyDict_GetItemWithError(long_open, n);
				if (!open && PyErr_Occurred())
					goto part_done;
				moving = open ? PyObject_IsTrue(open) : 0;
			}
			if (moving < 0)
				goto part_done;
			if (moving) { /* moved = min(float(long_open[n]), ns) */
				PyObject *open = PyDict_GetItemWithError(long_open, n), *lo, *moved, *left, *idle;
				if (!open || !(lo = PyNumber_Float(open)))
					goto part_done;
				int less = PyObject_RichCompareBool(ns, lo, Py_LT);
				moved = less < 0 ? NULL : Py_NewRef(less ? ns : lo);
				Py_DECREF(lo);
				if (!moved)
					goto part_done;
				int fine = (left = PyNumber_Subtract(open, moved)) && PyDict_SetItem(long_open, n, left) == 0;
				Py_XDECREF(left);
				if (fine) {
					Py_SETREF(ns, PyNumber_Subtract(ns, moved));
					fine = ns && (idle = cause_dicts(sink, causes, idle_name, idle_cls));
					if (fine) {
						PyObject *pd;
						fine = PyDict_Check(PySequence_Fast_GET_ITEM(idle, 0)) &&
						       dict_add(PySequence_Fast_GET_ITEM(idle, 0), i, moved) == 0 &&
						       (pd = dict_of(pc, idle_name)) && PyDict_Check(pd) &&
						       dict_add(pd, i, moved) == 0;
						Py_DECREF(idle);
						if (!fine && !PyErr_Occurred())
							PyErr_SetString(PyExc_TypeError, "a series' table is a dict");
					}
				}
				Py_DECREF(moved);
				if (!fine)
					goto part_done;
			}
			int has_ns = PyObject_IsTrue(ns);
			if (has_ns < 0)
				goto part_done;
			if (has_ns) {
				PyObject *pd;
				if (dict_add(PySequence_Fast_GET_ITEM(c, 0), i, ns) < 0 || !(pd = dict_of(pc, cname)))
					goto part_done;
				if (!PyDict_Check(pd)) {
					PyErr_SetString(PyExc_TypeError, "a process' cause is a dict");
					goto part_done;
				}
				if (dict_add(pd, i, ns) < 0)
					goto part_done;
			}
			if (has_count) {
				PyObject *share = PyNumber_Multiply(count, frac);
				int fine = share && dict_add(PySequence_Fast_GET_ITEM(c, 1), i, share) == 0;
				Py_XDECREF(share);
				if (!fine)
					goto part_done;
			}
			if (measured && has_max && dict_max(PySequence_Fast_GET_ITEM(c, 2), i, max_ns) < 0)
				goto part_done;
			if (has_hist) {
				PyObject *h = dict_of(PySequence_Fast_GET_ITEM(c, 3), i);
				if (!h)
					goto part_done;
				if (!PyDict_Check(h)) {
					PyErr_SetString(PyExc_TypeError, "a histogram is a dict");
					goto part_done;
				}
				if (add_pairs(h, hist, slots, frac) < 0)
					goto part_done;
			}
			step = 1;
		part_done:
			Py_XDECREF(ns);
			Py_XDECREF(c);
			Py_DECREF(part);
			if (!step)
				goto next;
		}
		ok = 1;
	next:
		Py_XDECREF(parts);
		Py_XDECREF(w);
		Py_DECREF(rec);
		if (!ok)
			goto done;
	}
	out = Py_NewRef(Py_None);
done:
	Py_XDECREF(recs);
	Py_XDECREF(pcs);
	Py_XDECREF(causes);
	return out;
}

/* series_locks(sink, i, flat, lock_of) -> the wait of the records whose row is a lock: series.py py_series_locks,
 * `flat` a buffer of int64 (array("q")) */
static PyObject *series_locks(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	ARGS(4, "series_locks(sink, i, flat, lock_of)");
	PyObject *sink = args[0], *i = args[1], *lock_of = args[3];
	if (!PyList_Check(lock_of)) {
		PyErr_SetString(PyExc_TypeError, "lock_of: a list");
		return NULL;
	}
	Py_buffer view;
	if (PyObject_GetBuffer(args[2], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
		return NULL;
	PyObject *locks = NULL, *slab = NULL, *total = Py_NewRef(zero), *out = NULL;
	if (view.itemsize != 8 || !view.format || strcmp(view.format, "q") != 0) {
		PyErr_SetString(PyExc_TypeError, "flat: int64 values (array('q'))");
		goto done;
	}
	if (!(locks = PyObject_GetAttr(sink, name[S_LOCKS])) || !(slab = PyObject_GetAttr(sink, name[S_SLAB])))
		goto done;
	if (!PyDict_Check(locks) || !PyDict_Check(slab)) {
		PyErr_SetString(PyExc_TypeError, "the sink's tables are dicts");
		goto done;
	}
	const long long *v = view.buf;
	Py_ssize_t triples = view.len / 8 / 3;
	for (Py_ssize_t r = 0; r < triples; r++) {
		long long n = v[3 * r];
		Py_ssize_t len = PyList_GET_SIZE(lock_of);
		if (n < 0)
			n += len;
		if (n < 0 || n >= len) {
			PyErr_SetString(PyExc_IndexError, "list index out of range");
			goto done;
		}
		PyObject *lk = PyList_GET_ITEM(lock_of, n);
		if (lk == Py_None)
			continue;
		Py_INCREF(lk);
		PyObject *three = unpack(lk, 3), *count = NULL, *wait_ns = NULL;
		Py_DECREF(lk);
		int ok = 0;
		if (!three || !(count = PyLong_FromLongLong(v[3 * r + 1])) ||
		    !(wait_ns = PyLong_FromLongLong(v[3 * r + 2])))
			goto next;
		PyObject *row = PySequence_Fast_GET_ITEM(three, 0), *cache = PySequence_Fast_GET_ITEM(three, 2);
		if (row != Py_None) {
			PyObject *d = dict_of(locks, row);
			if (!d)
				goto next;
			if (!PyDict_Check(d)) {
				PyErr_SetString(PyExc_TypeError, "a lock's series is a dict");
				goto next;
			}
			if (add_list(d, i, (PyObject *[]){count, wait_ns}, 2) < 0)
				goto next;
			int a_lock = PyObject_IsTrue(PySequence_Fast_GET_ITEM(three, 1));
			if (a_lock < 0)
				goto next;
			if (a_lock) {
				PyObject *sum = add(total, wait_ns);
				if (!sum)
					goto next;
				Py_SETREF(total, sum);
			}
		}
		if (cache != Py_None) {
			PyObject *d = dict_of(slab, cache);
			if (!d)
				goto next;
			if (!PyDict_Check(d)) {
				PyErr_SetString(PyExc_TypeError, "a cache's series is a dict");
				goto next;
			}
			if (add_list(d, i, (PyObject *[]){zero, zero, zero, count, wait_ns}, 5) < 0)
				goto next;
		}
		ok = 1;
	next:
		Py_XDECREF(count);
		Py_XDECREF(wait_ns);
		Py_XDECREF(three);
		if (!ok)
			goto done;
	}
	out = Py_NewRef(total);
done:
	Py_XDECREF(locks);
	Py_XDECREF(slab);
	Py_DECREF(total);
	PyBuffer_Release(&view);
	return out;
}

/* spans(parts, k, longest) -> a dict: reports/window.py py_spans for k > 1, each interval's values (a list) added
 * into its span's (i // k), or with `longest` the greater kept (the span's first of equals, as max() keeps it) */
static PyObject *spans(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	ARGS(3, "spans(parts, k, longest)");
	PyObject *parts = args[0], *k = args[1], *out = NULL, *key, *values;
	int longest = PyObject_IsTrue(args[2]);
	if (longest < 0)
		return NULL;
	if (!PyDict_Check(parts)) {
		PyErr_SetString(PyExc_TypeError, "parts: a dict");
		return NULL;
	}
	if (!(out = PyDict_New()))
		return NULL;
	Py_ssize_t pos = 0;
	Py_INCREF(parts); /* held while it is walked */
	while (PyDict_Next(parts, &pos, &key, &values)) {
		Py_INCREF(key);
		Py_INCREF(values);
		PyObject *span = PyNumber_FloorDivide(key, k), *e = NULL, *fast = NULL;
		int ok = 0;
		if (!span)
			goto next;
		e = PyDict_GetItemWithError(out, span);
		if (!e) {
			if (PyErr_Occurred())
				goto next;
			PyObject *fresh = PySequence_List(values);
			ok = fresh && PyDict_SetItem(out, span, fresh) == 0;
			Py_XDECREF(fresh);
			goto next;
		}
		if (!PyList_Check(e) || !(fast = PySequence_Fast(values, "a part's values: a sequence")))
			goto next_type;
		Py_INCREF(e);
		ok = 1;
		for (Py_ssize_t j = 0; ok && j < PySequence_Fast_GET_SIZE(fast); j++) {
			if (j >= PyList_GET_SIZE(e)) {
				PyErr_SetString(PyExc_IndexError, "list index out of range");
				ok = 0;
				break;
			}
			PyObject *old = PyList_GET_ITEM(e, j), *v = PySequence_Fast_GET_ITEM(fast, j), *now;
			if (longest) {
				int gt = PyObject_RichCompareBool(v, old, Py_GT);
				now = gt < 0 ? NULL : Py_NewRef(gt ? v : old);
			} else {
				now = add(old, v);
			}
			if (!now) {
				ok = 0;
				break;
			}
			PyList_SetItem(e, j, now); /* takes it, lets go of the old */
		}
		Py_DECREF(e);
		goto next;
	next_type:
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "a span's values are a list");
	next:
		Py_XDECREF(fast);
		Py_XDECREF(span);
		Py_DECREF(key);
		Py_DECREF(values);
		if (!ok) {
			Py_CLEAR(out);
			break;
		}
	}
	Py_DECREF(parts);
	return out;
}

static PyMethodDef module_methods[] = {
	{"spans", (PyCFunction)(void (*)(void))spans, METH_FASTCALL,
	 "spans(parts, k, longest): per-interval parts summed (or the greatest kept) over spans of k intervals."},
	{"series_tasks", (PyCFunction)(void (*)(void))series_tasks, METH_FASTCALL,
	 "series_tasks(sink, i, records, hist, slots): an interval's task records into the series."},
	{"series_offcpu", (PyCFunction)(void (*)(void))series_offcpu, METH_FASTCALL,
	 "series_offcpu(sink, i, records, wait_of, long_open, slots, idle_cls): its off-CPU records by cause."},
	{"series_locks", (PyCFunction)(void (*)(void))series_locks, METH_FASTCALL,
	 "series_locks(sink, i, flat, lock_of): its kernel lock records into their rows and caches."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_seriesfold", "An interval's records summed into a report's series in C.", -1,
	module_methods,
};

PyMODINIT_FUNC PyInit__seriesfold(void)
{
	for (int i = 0; i < N_NAMES; i++)
		if (!(name[i] = PyUnicode_InternFromString(names[i])))
			return NULL;
	if (!(zero = PyLong_FromLong(0)))
		return NULL;
	return PyModule_Create(&module);
}
