// SPDX-License-Identifier: GPL-2.0
/* A model's kernel lock records grouped into their lock_stat rows, in C (analyzer/locks.py: `py_kernel_groups`
 * there is the same in Python, and runs where this is not built or declines a model).
 *
 * A 10-minute hackbench recording's model holds 595,000 lock records (a thread, a lock, a kernel stack each) that
 * come to 4,000 rows: per record a dozen sums, two dictionary reads for its row, one for its address, a set's add.
 * The Python loop took 1.1 s, before the report's export document could fork. The loop here does what the Python
 * does, in its order, on the same objects; the sums in 64-bit integers. Where a record is not exactly a LockWaits
 * or one of its numbers is not an integer that fits (or a sum would not fit), it returns None and the Python does
 * the whole of it: the answer is the same either way (tests/test_lockgroups.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "slots.h"

/* the record's fields read, by their slots' offsets in a LockWaits (a dataclass with slots) */
enum {
	F_TASK, F_ADDR, F_FLAGS, F_STACK, F_STACK_ID, F_COUNT, F_TOTAL, F_MAX, F_MIN, F_SPIN, F_SLEEP, F_OWNER_PID,
	F_OWNER_COMM, F_BLOCKED, F_RUNNABLE, F_WEIGHTED, F_FIELD, F_OBJECT, N_FIELDS
};
static const char *const field_names[N_FIELDS] = {
	"task", "addr", "flags", "stack", "stack_id", "count", "total_ns", "max_ns", "min_ns", "spin_ns", "sleep_ns",
	"owner_pid", "owner_comm", "blocked_ns", "runnable_ns", "weighted_ns", "field", "object",
};
/* the integers summed or compared, in the order read */
enum { N_COUNT, N_TOTAL, N_MAX, N_MIN, N_SPIN, N_SLEEP, N_BLOCKED, N_RUNNABLE, N_INTS };
static const int int_fields[N_INTS] = { F_COUNT, F_TOTAL, F_MAX, F_MIN, F_SPIN, F_SLEEP, F_BLOCKED, F_RUNNABLE };

static PyObject *s_add, *s_undrawn, *s_field, *s_addr, *empty;

/* one lock_stat row's sums (locks.py py_kernel_groups: its list's items) */
struct group {
	PyObject *key;      /* (("field", field) | ("addr", addr), type) */
	PyObject *named_by; /* the record naming it: its heaviest with a stack */
	int named_has_stack;
	long long named_total;
	long long count, total, max, min, spin, sleep, blocked, runnable;
	long long undrawn[5];
	int split;
	PyObject *callers; /* a locks.py _Callers */
	PyObject *tasks;   /* set */
	PyObject *owner;   /* the last record with an owner, or NULL */
	PyObject *addrs;   /* addr -> index among `struct place`s */
};

/* one address of a row: where it is (the first record's that says), its wait */
struct place {
	PyObject *addr, *object;
	long long ns;
};

struct state {
	struct group *g;
	Py_ssize_t ng, gcap;
	struct place *p;
	Py_ssize_t np, pcap;
};

static void state_free(struct state *s)
{
	for (Py_ssize_t i = 0; i < s->ng; i++) {
		struct group *g = &s->g[i];
		Py_XDECREF(g->key);
		Py_XDECREF(g->named_by);
		Py_XDECREF(g->callers);
		Py_XDECREF(g->tasks);
		Py_XDECREF(g->owner);
		Py_XDECREF(g->addrs);
	}
	for (Py_ssize_t i = 0; i < s->np; i++) {
		Py_XDECREF(s->p[i].addr);
		Py_XDECREF(s->p[i].object);
	}
	PyMem_Free(s->g);
	PyMem_Free(s->p);
}

static int grow(void **v, Py_ssize_t *cap, Py_ssize_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	Py_ssize_t n = *cap ? *cap * 2 : 64;
	void *fresh = PyMem_Realloc(*v, (size_t)n * size);
	if (!fresh) {
		PyErr_NoMemory();
		return -1;
	}
	*v = fresh;
	*cap = n;
	return 0;
}

/* an exact integer that fits in 64 bits: 1; else 0 (declined) */
static int int64_of(PyObject *v, long long *out)
{
	if (!PyLong_CheckExact(v))
		return 0;
	int over;
	*out = PyLong_AsLongLongAndOverflow(v, &over);
	return !over && !(*out == -1 && PyErr_Occurred());
}

/* the row's group: made when first met, in the order met */
static struct group *group_of(struct state *s, PyObject *index, PyObject *keyobj, int by_field, PyObject *typ,
			      PyObject *callers_cls)
{
	PyObject *inner = PyDict_GetItemWithError(index, keyobj);
	if (!inner) {
		if (PyErr_Occurred() || !(inner = PyDict_New()))
			return NULL;
		int r = PyDict_SetItem(index, keyobj, inner);
		Py_DECREF(inner); /* the index holds it */
		if (r < 0)
			return NULL;
	}
	PyObject *at = PyDict_GetItemWithError(inner, typ);
	if (at)
		return &s->g[PyLong_AsSsize_t(at)];
	if (PyErr_Occurred() || grow((void **)&s->g, &s->gcap, s->ng + 1, sizeof(struct group)) < 0)
		return NULL;
	struct group *g = &s->g[s->ng];
	memset(g, 0, sizeof(*g));
	g->split = 1;
	s->ng++; /* freed with the state from here on, whatever is made */
	if (!(g->key = Py_BuildValue("((OO)O)", by_field ? s_field : s_addr, keyobj, typ)) ||
	    !(g->callers = PyObject_CallNoArgs(callers_cls)) || !(g->tasks = PySet_New(NULL)) ||
	    !(g->addrs = PyDict_New()))
		return NULL;
	PyObject *n = PyLong_FromSsize_t(s->ng - 1);
	int r = n ? PyDict_SetItem(inner, typ, n) : -1;
	Py_XDECREF(n);
	return r < 0 ? NULL : g;
}

/* the place of an address among its row's: made when first met */
static struct place *place_of(struct state *s, struct group *g, PyObject *addr)
{
	PyObject *at = PyDict_GetItemWithError(g->addrs, addr);
	if (at)
		return &s->p[PyLong_AsSsize_t(at)];
	if (PyErr_Occurred() || grow((void **)&s->p, &s->pcap, s->np + 1, sizeof(struct place)) < 0)
		return NULL;
	struct place *p = &s->p[s->np];
	p->addr = Py_NewRef(addr);
	p->object = Py_NewRef(empty);
	p->ns = 0;
	s->np++;
	PyObject *n = PyLong_FromSsize_t(s->np - 1);
	int r = n ? PyDict_SetItem(g->addrs, addr, n) : -1;
	Py_XDECREF(n);
	return r < 0 ? NULL : p;
}

/* d[key], borrowed, made as fn(arg) and kept in d when absent (NULL with an error on failure) */
static PyObject *kept(PyObject *d, PyObject *key, PyObject *fn, PyObject *arg)
{
	PyObject *v = PyDict_GetItemWithError(d, key);
	if (v || PyErr_Occurred() || !(v = PyObject_CallOneArg(fn, arg)))
		return v;
	int r = PyDict_SetItem(d, key, v);
	Py_DECREF(v); /* the dict holds it */
	return r < 0 ? NULL : v;
}

/* a row's list as py_kernel_groups leaves it */
static PyObject *group_list(struct state *s, struct group *g)
{
	PyObject *undrawn = Py_BuildValue("[LLLLL]", g->undrawn[0], g->undrawn[1], g->undrawn[2], g->undrawn[3],
					  g->undrawn[4]);
	int r = undrawn ? PyObject_SetAttr(g->callers, s_undrawn, undrawn) : -1;
	Py_XDECREF(undrawn);
	if (r < 0)
		return NULL;
	PyObject *owner = NULL, *addrs = PyDict_New();
	if (!addrs)
		return NULL;
	if (g->owner) { /* f"{owner_comm}[{owner_pid}]" */
		PyObject *comm = PyObject_GetAttrString(g->owner, "owner_comm");
		PyObject *pid = PyObject_GetAttrString(g->owner, "owner_pid");
		PyObject *c = comm ? PyObject_Format(comm, empty) : NULL, *p = pid ? PyObject_Format(pid, empty) : NULL;
		owner = c && p ? PyUnicode_FromFormat("%U[%U]", c, p) : NULL;
		Py_XDECREF(comm);
		Py_XDECREF(pid);
		Py_XDECREF(c);
		Py_XDECREF(p);
	} else {
		owner = Py_NewRef(empty);
	}
	Py_ssize_t pos = 0;
	PyObject *addr, *at;
	while (owner && PyDict_Next(g->addrs, &pos, &addr, &at)) {
		struct place *p = &s->p[PyLong_AsSsize_t(at)];
		PyObject *e = Py_BuildValue("[OL]", p->object, p->ns);
		r = e ? PyDict_SetItem(addrs, addr, e) : -1;
		Py_XDECREF(e);
		if (r < 0) {
			Py_CLEAR(owner);
			break;
		}
	}
	if (!owner) {
		Py_DECREF(addrs);
		return NULL;
	}
	return Py_BuildValue("[OLLLLLLOONLLON]", g->named_by, g->count, g->total, g->max, g->min, g->spin, g->sleep,
			     g->callers, g->tasks, owner, g->blocked, g->runnable, g->split ? Py_True : Py_False,
			     addrs);
}

#define ADD(a, b) (__builtin_add_overflow(a, b, &(a)))

/* lock_groups(waits, tasks, cls, types, lock_type, points, point_of, sharable, labels, lost, callers_cls) */
static PyObject *lock_groups(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 11) {
		PyErr_SetString(PyExc_TypeError,
				"lock_groups(waits, tasks, cls, types, lock_type, points, point_of, sharable, labels, "
				"lost, callers_cls) takes 11 arguments");
		return NULL;
	}
	PyObject *tasks = args[1], *cls = args[2], *types = args[3], *lock_type = args[4], *points = args[5],
		 *point_of = args[6], *sharable = args[7], *labels = args[8], *lost = args[9], *callers_cls = args[10];
	if (!PyType_Check(cls) || !PyDict_Check(types) || !PyDict_Check(points) || !PyDict_Check(labels)) {
		PyErr_SetString(PyExc_TypeError, "lock_groups: cls is a type; types, points and labels dicts");
		return NULL;
	}
	Py_ssize_t off[N_FIELDS];
	for (int i = 0; i < N_FIELDS; i++) {
		PyObject *name = PyUnicode_InternFromString(field_names[i]);
		if (!name)
			return NULL;
		off[i] = slot_offset((PyTypeObject *)cls, name);
		Py_DECREF(name);
		if (off[i] < 0)
			Py_RETURN_NONE; /* not a record with slots: the Python's */
	}
	PyObject *seq = PySequence_Fast(args[0], "lock_groups: the waits are a sequence");
	if (!seq)
		return NULL;
	PyObject *index = PyDict_New(), *out = NULL;
	struct state s = { 0 };
	int declined = 0;
	if (!index)
		goto done;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	PyObject **items = PySequence_Fast_ITEMS(seq);
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *w = items[i], *f[N_FIELDS];
		if (Py_TYPE(w) != (PyTypeObject *)cls) {
			declined = 1;
			goto done;
		}
		for (int j = 0; j < N_FIELDS; j++) {
			if (!(f[j] = *(PyObject **)((char *)w + off[j]))) {
				PyErr_Format(PyExc_AttributeError, "a lock record without its %s", field_names[j]);
				goto done;
			}
		}
		if (tasks != Py_None) {
			int in = PyAnySet_Check(tasks) ? PySet_Contains(tasks, f[F_TASK])
						       : PySequence_Contains(tasks, f[F_TASK]);
			if (in < 0)
				goto done;
			if (!in)
				continue;
		}
		long long v[N_INTS];
		for (int j = 0; j < N_INTS; j++) {
			if (!int64_of(f[int_fields[j]], &v[j])) {
				if (PyErr_Occurred())
					goto done;
				declined = 1;
				goto done;
			}
		}
		PyObject *typ = kept(types, f[F_FLAGS], lock_type, f[F_FLAGS]);
		if (!typ)
			goto done;
		int by_field = PyObject_IsTrue(f[F_FIELD]);
		if (by_field < 0)
			goto done;
		struct group *g = group_of(&s, index, by_field ? f[F_FIELD] : f[F_ADDR], by_field, typ, callers_cls);
		if (!g)
			goto done;
		int has_stack = f[F_STACK] != Py_None;
		if (!g->named_by || (has_stack && (!g->named_has_stack || v[N_TOTAL] > g->named_total))) {
			Py_XSETREF(g->named_by, Py_NewRef(w));
			g->named_has_stack = has_stack;
			g->named_total = v[N_TOTAL];
		}
		if (v[N_BLOCKED] < 0) {
			g->split = 0;
			v[N_BLOCKED] = 0;
		}
		if (v[N_RUNNABLE] < 0)
			v[N_RUNNABLE] = 0;
		if (ADD(g->count, v[N_COUNT]) || ADD(g->total, v[N_TOTAL]) || ADD(g->spin, v[N_SPIN]) ||
		    ADD(g->sleep, v[N_SLEEP]) || ADD(g->blocked, v[N_BLOCKED]) || ADD(g->runnable, v[N_RUNNABLE])) {
			declined = 1;
			goto done;
		}
		if (v[N_MAX] > g->max)
			g->max = v[N_MAX];
		if (v[N_MIN] && (!g->min || v[N_MIN] < g->min))
			g->min = v[N_MIN];
		if (PySet_Add(g->tasks, f[F_TASK]) < 0)
			goto done;
		struct place *p = place_of(&s, g, f[F_ADDR]);
		if (!p)
			goto done;
		int named = PyObject_IsTrue(p->object);
		if (named < 0)
			goto done;
		if (!named)
			Py_SETREF(p->object, Py_NewRef(f[F_OBJECT]));
		if (ADD(p->ns, v[N_TOTAL])) {
			declined = 1;
			goto done;
		}
		/* its contention point: the stack's, found once per stack id */
		PyObject *point = has_stack ? kept(points, f[F_STACK_ID], point_of, f[F_STACK]) : Py_None;
		if (!point)
			goto done;
		int drawn = PyObject_IsTrue(point);
		if (drawn < 0)
			goto done;
		int shared = has_stack;
		if (!shared && (shared = PySequence_Contains(sharable, f[F_STACK_ID])) < 0)
			goto done;
		if (!drawn && shared) {
			long long u[5] = { v[N_COUNT], v[N_TOTAL], v[N_SPIN], v[N_BLOCKED], v[N_RUNNABLE] };
			for (int j = 0; j < 5; j++) {
				if (ADD(g->undrawn[j], u[j])) {
					declined = 1;
					goto done;
				}
			}
		} else {
			PyObject *label = PyDict_GetItemWithError(labels, f[F_STACK_ID]);
			if (!label && PyErr_Occurred())
				goto done;
			PyObject *blocked = PyLong_FromLongLong(v[N_BLOCKED]);
			PyObject *runnable = PyLong_FromLongLong(v[N_RUNNABLE]);
			PyObject *r = blocked && runnable ? PyObject_CallMethodObjArgs(
				g->callers, s_add, point, label ? label : lost, f[F_COUNT], f[F_TOTAL], f[F_SPIN],
				blocked, runnable, f[F_WEIGHTED], shared ? Py_True : Py_False, NULL) : NULL;
			Py_XDECREF(blocked);
			Py_XDECREF(runnable);
			if (!r)
				goto done;
			Py_DECREF(r);
		}
		int owned = PyObject_IsTrue(f[F_OWNER_PID]);
		if (owned < 0)
			goto done;
		if (owned)
			Py_XSETREF(g->owner, Py_NewRef(w));
	}
	if (!(out = PyDict_New()))
		goto done;
	for (Py_ssize_t i = 0; i < s.ng; i++) {
		PyObject *e = group_list(&s, &s.g[i]);
		int r = e ? PyDict_SetItem(out, s.g[i].key, e) : -1;
		Py_XDECREF(e);
		if (r < 0) {
			Py_CLEAR(out);
			break;
		}
	}
done:
	state_free(&s);
	Py_XDECREF(index);
	Py_DECREF(seq);
	if (declined && !PyErr_Occurred())
		Py_RETURN_NONE;
	return out;
}

static PyMethodDef module_methods[] = {
	{"lock_groups", (PyCFunction)(void (*)(void))lock_groups, METH_FASTCALL,
	 "lock_groups(waits, tasks, cls, types, lock_type, points, point_of, sharable, labels, lost, callers_cls): "
	 "a model's kernel lock records by lock_stat row, as locks.py py_kernel_groups makes them; None where it "
	 "declines them (not exactly `cls` with slots, or a number beyond 64 bits)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "_lockgroups", "A model's kernel lock records grouped into lock_stat rows in C.", -1,
	module_methods,
};

PyMODINIT_FUNC PyInit__lockgroups(void)
{
	if (!(s_add = PyUnicode_InternFromString("add")) || !(s_undrawn = PyUnicode_InternFromString("undrawn")) ||
	    !(s_field = PyUnicode_InternFromString("field")) || !(s_addr = PyUnicode_InternFromString("addr")) ||
	    !(empty = PyUnicode_InternFromString("")))
		return NULL;
	return PyModule_Create(&module);
}
