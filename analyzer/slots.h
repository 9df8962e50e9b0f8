// SPDX-License-Identifier: GPL-2.0
/* A record's fields read straight from its slots, for the loops in C over a recording's records
 * (analyzer/modelfold.c, analyzer/seriesfold.c, analyzer/lockgroups.c), and stored in them as records are made
 * (analyzer/rowread.c).
 *
 * The records are dataclasses with slots (analyzer/sample.py record_maker): each field a member descriptor on the
 * class, its value at a fixed offset in the instance. `getattr` finds the descriptor in the class's dictionaries on
 * every read; a fold reads a dozen fields of each of a million records. `fields_read` finds each field's offset
 * once per class met at its call site and reads the value there, as the descriptor does; a field that is not a
 * plain slot (a property, a class of other records, a custom __getattribute__), or a slot left empty, is read by
 * getattr, which answers (or raises) as it would have. */
#ifndef STALLSCOPE_SLOTS_H
#define STALLSCOPE_SLOTS_H

#include <Python.h>
#include <structmember.h>

#define FIELDS_MAX 32

/* one call site's offsets: of the fields it reads, in instances of `type` */
struct fields {
	PyTypeObject *type; /* a strong reference, or NULL: none learnt yet */
	Py_ssize_t at[FIELDS_MAX]; /* each field's offset, or -1: read by getattr */
};

/* the plain slot `name` of instances of `type` (an object member, T_OBJECT_EX), or NULL: not a slot (a property,
 * another descriptor, no such attribute) */
static inline PyMemberDef *plain_slot(PyTypeObject *type, PyObject *name)
{
	PyObject *d = _PyType_Lookup(type, name); /* borrowed; sets no error */
	if (d && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
		PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
		if (m->type == T_OBJECT_EX)
			return m;
	}
	return NULL;
}

/* the offset of the slot `name` in instances of `type`, or -1 where getattr would not read it there (not a plain
 * slot, or a class reading its attributes its own way) */
static inline Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name)
{
	if (type->tp_getattro != PyObject_GenericGetAttr)
		return -1;
	PyMemberDef *m = plain_slot(type, name);
	return m && !(m->flags & READ_RESTRICTED) ? m->offset : -1;
}

/* the offset at which object.__setattr__ stores `name` in instances of `type` (a plain writable slot), or -1 where
 * it stores it otherwise */
static inline Py_ssize_t store_offset(PyTypeObject *type, PyObject *name)
{
	PyMemberDef *m = plain_slot(type, name);
	return m && !(m->flags & READONLY) ? m->offset : -1;
}

static inline void fields_learn(struct fields *f, PyTypeObject *type, PyObject *const *names, const int *which,
				int n)
{
	Py_INCREF(type);
	Py_XSETREF(f->type, type);
	for (int i = 0; i < n; i++)
		f->at[i] = slot_offset(type, names[which[i]]);
}

/* the fields names[which[0..n-1]] of `rec`, new references into `out`; -1 (with every one released and the error
 * getattr raised) where one is missing */
static inline int fields_read(struct fields *f, PyObject *rec, PyObject *const *names, const int *which, int n,
		       PyObject **out)
{
	PyTypeObject *type = Py_TYPE(rec);
	if (n > FIELDS_MAX) {
		PyErr_SetString(PyExc_SystemError, "more fields than a record's reader holds");
		return -1;
	}
	if (type != f->type)
		fields_learn(f, type, names, which, n);
	for (int i = 0; i < n; i++) {
		PyObject *v = f->at[i] >= 0 ? *(PyObject **)((char *)rec + f->at[i]) : NULL;
		if (v)
			Py_INCREF(v);
		else if (!(v = PyObject_GetAttr(rec, names[which[i]]))) {
			while (i--)
				Py_DECREF(out[i]);
			return -1;
		}
		out[i] = v;
	}
	return 0;
}

#endif
