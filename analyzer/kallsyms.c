// SPDX-License-Identifier: GPL-2.0
/* /proc/kallsyms parsed in C (analyzer/symbols.py KernelSymbols.parse, KernelDataSymbols.parse; Python parses it
 * where this is not built, to the same tables).
 *
 * A live view's first data wait for the kernel's symbols: their parse in Python took 0.1 s of CPU, the data
 * symbols' 0.04 s more, each holding the interpreter's lock while the screen drew its first frames and the
 * probes loaded. Here each is one pass over the text.
 *
 * The text is read as Python reads it: bytes decoded as ASCII with each other byte a replacement character,
 * lines split where str.splitlines splits them, fields where str.split does.
 *
 * An ELF file's symbol tables are made into its function index (ElfSymbols) and its data objects' table
 * (bpf/futex_collector.py object_table) here too, as Python makes them, when every name is ASCII. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the line breaks of str.splitlines for an ASCII-decoded text (a byte above 0x7f is a replacement character) */
#define BREAK 1
/* str.split's and str.strip's whitespace, of the same text */
#define BLANK 2
static const unsigned char kind[256] = {
	['\n'] = BREAK | BLANK, ['\r'] = BREAK | BLANK, ['\v'] = BREAK | BLANK, ['\f'] = BREAK | BLANK,
	[0x1c] = BREAK | BLANK, [0x1d] = BREAK | BLANK, [0x1e] = BREAK | BLANK, [0x1f] = BLANK, [' '] = BLANK,
	['\t'] = BLANK,
};

static int line_break(unsigned char c)
{
	return kind[c] & BREAK;
}

static int blank(unsigned char c)
{
	return kind[c] & BLANK;
}

/* the next line of [*at, end): its start and length; *at moves past its break. 0 at the end. */
static int next_line(const char **at, const char *end, const char **line, Py_ssize_t *len)
{
	const char *p = *at;
	if (p >= end)
		return 0;
	const char *q = p;
	while (q < end && !line_break((unsigned char)*q))
		q++;
	*line = p;
	*len = q - p;
	if (q < end)
		q += (*q == '\r' && q + 1 < end && q[1] == '\n') ? 2 : 1;
	*at = q;
	return 1;
}

static int hex_value(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static PyObject *ascii_text(const char *s, Py_ssize_t n)
{
	return PyUnicode_DecodeASCII(s, n, "replace");
}

/* ---- text symbols ------------------------------------------------------------------------------------ */

struct sym {
	uint64_t addr;
	const char *name; /* the name, up to a tab */
	Py_ssize_t name_len;
	const char *module; /* after the tab: stripped, its brackets dropped; NULL: none */
	Py_ssize_t module_len;
	int rank; /* the type's rank (text_types' order) */
	Py_ssize_t order; /* its place among the text lines */
};

static int by_address(const void *a, const void *b)
{
	const struct sym *x = a, *y = b;
	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* _kernel_rank's order: the type's rank, the leading underscores, the length */
static int better(const struct sym *a, const struct sym *b)
{
	if (a->rank != b->rank)
		return a->rank < b->rank;
	Py_ssize_t ua = 0, ub = 0;
	while (ua < a->name_len && a->name[ua] == '_')
		ua++;
	while (ub < b->name_len && b->name[ub] == '_')
		ub++;
	if (ua != ub)
		return ua < ub;
	return a->name_len < b->name_len;
}

enum { TEXT_OK, TEXT_NOT_KALLSYMS, TEXT_NONE, TEXT_ALL_ZERO };

/* text_symbols(data, types, tail, end_markers, kernel): the text symbols' (starts, ends, names, modules), as
 * KernelSymbols.parse makes them; or an int where it raises: 1 not in kallsyms format, 2 no text symbols, 3 every
 * address 0. `types`: the text types, best first (the rank of a symbol among others at its address). */
static PyObject *text_symbols(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	Py_buffer data;
	const char *types;
	Py_ssize_t ntypes;
	unsigned long long tail;
	PyObject *markers, *kernel;

	if (nargs != 5) {
		PyErr_SetString(PyExc_TypeError, "text_symbols(data, types, tail, end_markers, kernel)");
		return NULL;
	}
	if (!PyBytes_Check(args[1]) || !PyLong_Check(args[2]) || !PyAnySet_Check(args[3]) || !PyUnicode_Check(args[4])) {
		PyErr_SetString(PyExc_TypeError, "text_symbols: types bytes, tail int, end_markers a set, kernel str");
		return NULL;
	}
	types = PyBytes_AS_STRING(args[1]);
	ntypes = PyBytes_GET_SIZE(args[1]);
	tail = PyLong_AsUnsignedLongLong(args[2]);
	if (PyErr_Occurred())
		return NULL;
	markers = args[3];
	kernel = args[4];
	if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
		return NULL;

	const char *at = data.buf, *end = at + data.len, *line;
	Py_ssize_t len, width = -1, n = 0, cap = 0;
	struct sym *syms = NULL;
	PyObject *out = NULL, *starts = NULL, *ends = NULL, *names = NULL, *modules = NULL, *interned = NULL;
	int status = TEXT_OK, first = 1, any = 0;

	while (next_line(&at, end, &line, &len)) {
		if (first) {
			first = 0;
			const char *sp = memchr(line, ' ', len);
			width = sp ? sp - line : -1;
			if (width != 8 && width != 16) {
				status = TEXT_NOT_KALLSYMS;
				break;
			}
		}
		if (len <= width + 3)
			continue;
		const char *t = memchr(types, line[width + 1], ntypes);
		if (!t)
			continue;
		uint64_t addr = 0;
		for (Py_ssize_t i = 0; i < width; i++) {
			int v = hex_value((unsigned char)line[i]);
			if (v < 0) {
				status = TEXT_NOT_KALLSYMS;
				goto scanned;
			}
			addr = addr << 4 | (uint64_t)v;
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 1 << 14;
			struct sym *grown = realloc(syms, cap * sizeof(*syms));
			if (!grown) {
				PyErr_NoMemory();
				goto done;
			}
			syms = grown;
		}
		struct sym *s = &syms[n];
		s->addr = addr;
		s->rank = (int)(t - types);
		s->order = n;
		s->name = line + width + 3;
		const char *tab = memchr(s->name, '\t', len - width - 3);
		s->name_len = tab ? tab - s->name : len - width - 3;
		s->module = NULL;
		s->module_len = 0;
		if (tab) { /* str.strip()[1:-1] */
			const char *a = tab + 1, *b = line + len;
			while (a < b && blank((unsigned char)*a))
				a++;
			while (b > a && blank((unsigned char)b[-1]))
				b--;
			s->module = a + 1;
			s->module_len = b - a - 2 > 0 ? b - a - 2 : 0;
		}
		any |= addr != 0;
		n++;
	}
scanned:
	if (first) /* no line: no first line to find the width in */
		status = TEXT_NOT_KALLSYMS;
	else if (status == TEXT_OK && !n)
		status = TEXT_NONE;
	else if (status == TEXT_OK && !any)
		status = TEXT_ALL_ZERO;
	if (status != TEXT_OK) {
		out = PyLong_FromLong(status);
		goto done;
	}
	for (Py_ssize_t i = 1; i < n; i++) { /* kallsyms is in address order but for its modules and BPF programs */
		if (syms[i].addr < syms[i - 1].addr) {
			qsort(syms, n, sizeof(*syms), by_address);
			break;
		}
	}
	Py_ssize_t kept = 0; /* the best of each address, in place */
	for (Py_ssize_t i = 0; i < n; i++) {
		if (kept && syms[kept - 1].addr == syms[i].addr) {
			if (better(&syms[i], &syms[kept - 1]))
				syms[kept - 1] = syms[i];
			continue;
		}
		syms[kept++] = syms[i];
	}
	if (!(starts = PyList_New(kept)) || !(ends = PyList_New(kept)) || !(names = PyList_New(kept)) ||
	    !(modules = PyList_New(kept)) || !(interned = PyDict_New()))
		goto done;
	for (Py_ssize_t i = 0; i < kept; i++) {
		struct sym *s = &syms[i];
		PyObject *start = PyLong_FromUnsignedLongLong(s->addr), *name = ascii_text(s->name, s->name_len);
		PyObject *module = kernel;
		if (!start || !name) {
			Py_XDECREF(start);
			Py_XDECREF(name);
			goto done;
		}
		PyList_SET_ITEM(starts, i, start);
		PyList_SET_ITEM(names, i, name);
		if (s->module && s->module_len) { /* one string per module */
			PyObject *raw = PyBytes_FromStringAndSize(s->module, s->module_len), *text;
			if (!raw)
				goto done;
			text = PyDict_GetItemWithError(interned, raw);
			if (!text && !PyErr_Occurred() && (text = ascii_text(s->module, s->module_len))) {
				if (PyDict_SetItem(interned, raw, text) < 0) {
					Py_DECREF(text);
					text = NULL;
				} else {
					Py_DECREF(text);
				}
			}
			Py_DECREF(raw);
			if (!text)
				goto done;
			module = text;
		}
		PyList_SET_ITEM(modules, i, Py_NewRef(module));
	}
	PyObject *marker_list = PySequence_List(markers), *marker_bytes[8];
	Py_ssize_t nmarkers = 0;
	if (!marker_list)
		goto done;
	for (Py_ssize_t j = 0; j < PyList_GET_SIZE(marker_list) && nmarkers < 8; j++) {
		PyObject *b = PyUnicode_AsASCIIString(PyList_GET_ITEM(marker_list, j));
		if (!b) { /* a marker no ASCII name equals */
			PyErr_Clear();
			continue;
		}
		marker_bytes[nmarkers++] = b;
	}
	Py_DECREF(marker_list);
	if (PySet_GET_SIZE(markers) > 8) {
		PyErr_SetString(PyExc_ValueError, "text_symbols: more than 8 end markers");
		goto markers_done;
	}
	/* a symbol extends to the next one, but at the end of a region (the core kernel, a module), at most `tail` */
	for (Py_ssize_t i = 0; i < kept; i++) {
		PyObject *mod = PyList_GET_ITEM(modules, i), *v;
		uint64_t a = syms[i].addr, e, capped;
		/* region_ends: the next symbol is another module's */
		int region_ends = 0, marker = 0, overflow = __builtin_add_overflow(a, (uint64_t)tail, &capped);
		if (i + 1 < kept) {
			e = syms[i + 1].addr;
			if (mod != PyList_GET_ITEM(modules, i + 1)) {
				region_ends = PyUnicode_Compare(mod, PyList_GET_ITEM(modules, i + 1));
				if (region_ends == -1 && PyErr_Occurred())
					goto markers_done;
			}
			if (region_ends && !overflow && capped < e)
				e = capped;
		} else {
			e = capped; /* the last: past 2^64, below */
		}
		int not_core = mod == kernel ? 0 : PyUnicode_Compare(mod, kernel);
		if (not_core == -1 && PyErr_Occurred())
			goto markers_done;
		if (!not_core) { /* _etext, _einittext: the core kernel's text ends there */
			for (Py_ssize_t j = 0; j < nmarkers && !marker; j++)
				marker = PyBytes_GET_SIZE(marker_bytes[j]) == syms[i].name_len &&
					 !memcmp(PyBytes_AS_STRING(marker_bytes[j]), syms[i].name, syms[i].name_len);
		}
		if (marker)
			v = PyLong_FromUnsignedLongLong(a);
		else if (i + 1 == kept && overflow) { /* past 2^64: Python's integers */
			PyObject *x = PyLong_FromUnsignedLongLong(a), *y = PyLong_FromUnsignedLongLong(tail);
			v = x && y ? PyNumber_Add(x, y) : NULL;
			Py_XDECREF(x);
			Py_XDECREF(y);
		} else
			v = PyLong_FromUnsignedLongLong(e);
		if (!v)
			goto markers_done;
		PyList_SET_ITEM(ends, i, v);
	}
	out = PyTuple_Pack(4, starts, ends, names, modules);
markers_done:
	for (Py_ssize_t j = 0; j < nmarkers; j++)
		Py_DECREF(marker_bytes[j]);
done:
	free(syms);
	Py_XDECREF(starts);
	Py_XDECREF(ends);
	Py_XDECREF(names);
	Py_XDECREF(modules);
	Py_XDECREF(interned);
	PyBuffer_Release(&data);
	return out;
}

/* ---- data symbols ------------------------------------------------------------------------------------ */

/* the address field as int(field, 16) reads it: plain hex digits here, anything else (a sign, a prefix, underscores)
 * by int() itself; NULL with no error set where int() raises ValueError */
static PyObject *address_of(const char *s, Py_ssize_t n)
{
	if (n > 0 && n <= 16) {
		uint64_t v = 0;
		Py_ssize_t i = 0;
		for (; i < n; i++) {
			int d = hex_value((unsigned char)s[i]);
			if (d < 0)
				break;
			v = v << 4 | (uint64_t)d;
		}
		if (i == n)
			return PyLong_FromUnsignedLongLong(v);
	}
	PyObject *text = ascii_text(s, n), *v;
	if (!text)
		return NULL;
	v = PyLong_FromUnicodeObject(text, 16);
	Py_DECREF(text);
	if (!v && PyErr_ExceptionMatches(PyExc_ValueError))
		PyErr_Clear();
	return v;
}

/* data_symbols(data, types): the (address, name) of each line of three fields whose type is one of `types` and
 * whose address is not 0, sorted: KernelDataSymbols.parse's pairs */
static PyObject *data_symbols(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	Py_buffer data;
	if (nargs != 2 || !PyBytes_Check(args[1])) {
		PyErr_SetString(PyExc_TypeError, "data_symbols(data, types: bytes)");
		return NULL;
	}
	const char *types = PyBytes_AS_STRING(args[1]);
	Py_ssize_t ntypes = PyBytes_GET_SIZE(args[1]);
	if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
		return NULL;
	PyObject *pairs = PyList_New(0);
	const char *at = data.buf, *end = at + data.len, *line;
	Py_ssize_t len;
	while (pairs && next_line(&at, end, &line, &len)) {
		const char *f[4];
		Py_ssize_t fl[4];
		int nf = 0;
		for (Py_ssize_t i = 0; i < len && nf < 4;) {
			while (i < len && blank((unsigned char)line[i]))
				i++;
			if (i == len)
				break;
			Py_ssize_t j = i;
			while (j < len && !blank((unsigned char)line[j]))
				j++;
			f[nf] = line + i;
			fl[nf++] = j - i;
			i = j;
		}
		if (nf != 3 || fl[1] != 1 || !memchr(types, f[1][0], ntypes))
			continue;
		PyObject *addr = address_of(f[0], fl[0]);
		if (!addr) {
			if (PyErr_Occurred())
				Py_CLEAR(pairs);
			continue;
		}
		int zero = PyObject_Not(addr);
		PyObject *name = zero ? NULL : ascii_text(f[2], fl[2]);
		PyObject *pair = name ? PyTuple_Pack(2, addr, name) : NULL;
		Py_DECREF(addr);
		Py_XDECREF(name);
		if (zero)
			continue;
		if (!pair || PyList_Append(pairs, pair) < 0)
			Py_CLEAR(pairs);
		Py_XDECREF(pair);
	}
	PyBuffer_Release(&data);
	if (pairs && PyList_Sort(pairs) < 0)
		Py_CLEAR(pairs);
	return pairs;
}

/* read_whole(path): the file's bytes, read with the interpreter's lock released throughout. The kernel's tables
 * (/proc/kallsyms, /sys/kernel/btf/vmlinux: 5 MB each) come 4 KB a read(); Python's own read takes the lock back
 * after each of those 1,700 calls, and waits for it each time another thread holds it (a screen drawing its first
 * frame): 0.2-0.3 s to read the BTF at a live view's start. An error is Python's OSError for the path. */
static PyObject *read_whole(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	PyObject *path;
	if (nargs != 1) {
		PyErr_SetString(PyExc_TypeError, "read_whole(path)");
		return NULL;
	}
	if (!PyUnicode_FSConverter(args[0], &path))
		return NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int err = 0, fd;
	Py_BEGIN_ALLOW_THREADS
	fd = open(PyBytes_AS_STRING(path), O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = errno;
	} else {
		struct stat st;
		/* a /proc file says 0: a 64 KB start holds a process's stat or cgroup, and grows for the rest */
		cap = fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size + 1 : 1 << 16;
		buf = malloc(cap);
		for (;;) {
			if (!buf) {
				err = ENOMEM;
				break;
			}
			if (len == cap) {
				char *more = realloc(buf, cap * 2);
				if (!more) {
					err = ENOMEM;
					break;
				}
				buf = more;
				cap *= 2;
			}
			ssize_t n = read(fd, buf + len, cap - len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				err = errno;
				break;
			}
			if (n == 0)
				break;
			len += (size_t)n;
		}
		close(fd);
	}
	Py_END_ALLOW_THREADS
	PyObject *out = NULL;
	if (err) {
		errno = err;
		PyObject *name = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path));
		PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name);
		Py_XDECREF(name);
	} else {
		out = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
	}
	free(buf);
	Py_DECREF(path);
	return out;
}

/* ---- a process's memory mappings ------------------------------------------------------------------------------ */

/* a field of plain digits of `base` (16 or 10) as its value: 1; empty: 0 (Python's int() refuses it, the line is
 * skipped); anything else, or beyond 64 bits: -1 (int() reads signs, blanks, underscores, a 0x prefix, other
 * scripts' digits and big numbers: Python's parse decides) */
static int plain_number(const char *s, size_t len, int base, uint64_t *out)
{
	if (!len)
		return 0;
	uint64_t v = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		int d = base == 16 ? hex_value(c) : c >= '0' && c <= '9' ? c - '0' : -1;
		if (d < 0)
			return -1;
		if (base == 16 ? v >> 60 != 0 : v > (UINT64_MAX - (unsigned)d) / 10)
			return -1;
		v = v * (unsigned)base + d;
	}
	*out = v;
	return 1;
}

static PyObject *escaped(const char *s, size_t len)
{
	return PyUnicode_DecodeUTF8(s, (Py_ssize_t)len, "surrogateescape");
}

/* the last text made of a field (a maps file's perms and devices are a few values, line after line, each a new
 * reference to one string) */
struct last_text {
	char bytes[16];
	size_t len;
	PyObject *text;
};

static PyObject *field_text(struct last_text *last, const char *s, size_t len)
{
	if (last->text && len == last->len && !memcmp(s, last->bytes, len)) {
		Py_INCREF(last->text);
		return last->text;
	}
	PyObject *text = escaped(s, len);
	if (text && len <= sizeof(last->bytes)) {
		Py_XDECREF(last->text);
		memcpy(last->bytes, s, len);
		last->len = len;
		Py_INCREF(text);
		last->text = text;
	}
	return text;
}

/* a maps line's path as symbols.py maps_path makes it: the kernel's padding spaces stripped, each "\012" (how it
 * writes a newline in a name) a newline; the bytes decoded as the whole text is (UTF-8, surrogateescape: an ASCII
 * byte is never inside a sequence, so the pieces decode as the whole does) */
static PyObject *maps_path(const char *s, size_t len)
{
	while (len && *s == ' ') {
		s++;
		len--;
	}
	if (!memmem(s, len, "\\012", 4))
		return escaped(s, len);
	char *buf = malloc(len ? len : 1);
	if (!buf)
		return PyErr_NoMemory();
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		if (i + 4 <= len && !memcmp(s + i, "\\012", 4)) {
			buf[n++] = '\n';
			i += 4;
		} else {
			buf[n++] = s[i++];
		}
	}
	PyObject *out = escaped(buf, n);
	free(buf);
	return out;
}

/* maps_lines(data, cls): /proc/PID/maps's lines as symbols.py ProcessMaps._parse_mappings reads them (lines end at
 * "\n" only; a line is split at its first five spaces, and one of fewer than five fields is skipped, as is one whose
 * number is empty), each a `cls` (a tuple type: start, end, perms, offset, dev, inode, path), in the file's order; with
 * whether their starts are in order. None where a number is not plain digits or is beyond 64 bits: Python parses
 * such a text. A machine of 5,000 threads has a process of 10,000 mappings, parsed at a live view's start. */
static PyObject *maps_lines(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 2 || !PyBytes_Check(args[0]) || !PyType_Check(args[1]) ||
	    !PyType_IsSubtype((PyTypeObject *)args[1], &PyTuple_Type)) {
		PyErr_SetString(PyExc_TypeError, "maps_lines(data: bytes, cls: a tuple type)");
		return NULL;
	}
	PyTypeObject *cls = (PyTypeObject *)args[1];
	const char *p = PyBytes_AS_STRING(args[0]), *end = p + PyBytes_GET_SIZE(args[0]);
	PyObject *rows = PyList_New(0);
	if (!rows)
		return NULL;
	uint64_t last = 0;
	int in_order = 1;
	struct last_text perms = {0}, dev = {0};
	for (const char *line = p; line;) {
		const char *nl = memchr(line, '\n', (size_t)(end - line));
		const char *le = nl ? nl : end;
		const char *f[6];
		size_t fl[6];
		int k = 0;
		const char *s = line;
		while (k < 5) {
			const char *sp = memchr(s, ' ', (size_t)(le - s));
			if (!sp)
				break;
			f[k] = s;
			fl[k++] = (size_t)(sp - s);
			s = sp + 1;
		}
		f[k] = s;
		fl[k++] = (size_t)(le - s);
		line = nl ? nl + 1 : NULL;
		if (k < 5)
			continue;
		const char *dash = memchr(f[0], '-', fl[0]);
		const char *start = f[0], *stop = dash ? dash + 1 : f[0] + fl[0];
		size_t start_len = dash ? (size_t)(dash - f[0]) : fl[0], stop_len = dash ? fl[0] - start_len - 1 : 0;
		uint64_t v[4];
		int got[4] = {
			plain_number(start, start_len, 16, &v[0]), plain_number(stop, stop_len, 16, &v[1]),
			plain_number(f[2], fl[2], 16, &v[2]), plain_number(f[4], fl[4], 10, &v[3]),
		};
		int skip = 0;
		for (int i = 0; i < 4; i++) {
			if (got[i] < 0) {
				Py_CLEAR(rows);
				goto fail;
			}
			skip |= !got[i];
		}
		if (skip)
			continue;
		PyObject *items[7] = {
			PyLong_FromUnsignedLongLong(v[0]), PyLong_FromUnsignedLongLong(v[1]),
			field_text(&perms, f[1], fl[1]), PyLong_FromUnsignedLongLong(v[2]), field_text(&dev, f[3], fl[3]),
			PyLong_FromUnsignedLongLong(v[3]), k > 5 ? maps_path(f[5], fl[5]) : PyUnicode_New(0, 0),
		};
		/* the row made once its fields are: nothing between its allocation and its filling runs the collector */
		PyObject *row = NULL;
		int made = 1;
		for (int i = 0; i < 7; i++)
			made &= items[i] != NULL;
		if (made)
			row = cls->tp_alloc(cls, 7);
		if (!row) {
			for (int i = 0; i < 7; i++)
				Py_XDECREF(items[i]);
			goto fail;
		}
		for (int i = 0; i < 7; i++)
			PyTuple_SET_ITEM(row, i, items[i]);
		if (PyList_Append(rows, row) < 0) {
			Py_DECREF(row);
			goto fail;
		}
		Py_DECREF(row);
		if (v[0] < last)
			in_order = 0;
		last = v[0];
	}
	Py_XDECREF(perms.text);
	Py_XDECREF(dev.text);
	return Py_BuildValue("(NO)", rows, in_order ? Py_True : Py_False);
fail: /* an error set, or rows NULL: Python's parse decides */
	Py_XDECREF(perms.text);
	Py_XDECREF(dev.text);
	if (!rows)
		Py_RETURN_NONE;
	Py_DECREF(rows);
	return NULL;
}

/* ---- an ELF file's symbol tables: its functions' index, its data objects' table ------------------------------ */

#define STT_OBJECT_ 1
#define STT_FUNC_ 2
#define STT_GNU_IFUNC_ 10

/* one named symbol: its address, size, section's end, where it ends in the table made, and for a function what ranks
 * its name among the address's aliases (symbols.py: the binding's rank, the leading underscores, the length, the
 * name) */
struct elf_fn {
	uint64_t value, size, section_end, end;
	const char *name;
	Py_ssize_t len;
	Py_ssize_t order; /* in the tables' order: an address's section end is its first alias's that has one */
	int binding_rank, underscores;
};

static uint64_t elf_uint(const unsigned char *p, int bytes, int little)
{
	uint64_t v = 0;
	for (int i = 0; i < bytes; i++)
		v |= (uint64_t)p[little ? i : bytes - 1 - i] << (8 * i);
	return v;
}

static int by_name_rank(const struct elf_fn *a, const struct elf_fn *b)
{
	if (a->binding_rank != b->binding_rank)
		return a->binding_rank < b->binding_rank ? -1 : 1;
	if (a->underscores != b->underscores)
		return a->underscores < b->underscores ? -1 : 1;
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	return memcmp(a->name, b->name, (size_t)a->len); /* ASCII: byte order is the characters' order */
}

static int fn_by_address(const void *pa, const void *pb)
{
	const struct elf_fn *a = pa, *b = pb;
	if (a->value != b->value)
		return a->value < b->value ? -1 : 1;
	return a->order < b->order ? -1 : a->order > b->order;
}

/* the end of the PT_LOAD segment holding `vaddr` (segments: (vaddr, memory size) pairs), else vaddr + 1; 1 where an
 * end is beyond 64 bits, -1 on error */
static int segment_end(PyObject *segments, uint64_t vaddr, uint64_t *end)
{
	Py_ssize_t n = PyTuple_GET_SIZE(segments);
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *seg = PyTuple_GET_ITEM(segments, i);
		if (!PyTuple_Check(seg) || PyTuple_GET_SIZE(seg) != 2) {
			PyErr_SetString(PyExc_TypeError, "a segment is (vaddr, memory size)");
			return -1;
		}
		uint64_t start = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(seg, 0));
		uint64_t size = PyErr_Occurred() ? 0 : PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(seg, 1));
		if (PyErr_Occurred())
			return -1;
		if (start + size < start)
			return 1; /* beyond 64 bits: Python's integers hold it, these do not */
		if (start <= vaddr && vaddr < start + size) {
			*end = start + size;
			return 0;
		}
	}
	if (vaddr + 1 == 0)
		return 1;
	*end = vaddr + 1;
	return 0;
}

/* a table's named symbols appended to *fns: its defined functions, or (`objects`) its data objects (any with an
 * address); 1 when a name is not ASCII (the caller then leaves the file to Python, whose ranks and order count
 * characters), -1 on error */
static int table_symbols(PyObject *table, int objects, struct elf_fn **fns, Py_ssize_t *n, Py_ssize_t *cap)
{
	Py_buffer sym, str;
	PyObject *ends;
	int is_64, little;
	if (!PyTuple_Check(table) || PyTuple_GET_SIZE(table) != 5) {
		PyErr_SetString(PyExc_TypeError, "a table is (symbols, strings, section ends, is_64, little_endian)");
		return -1;
	}
	ends = PyTuple_GET_ITEM(table, 2);
	is_64 = PyObject_IsTrue(PyTuple_GET_ITEM(table, 3));
	little = PyObject_IsTrue(PyTuple_GET_ITEM(table, 4));
	if (is_64 < 0 || little < 0)
		return -1;
	if (!PyTuple_Check(ends)) {
		PyErr_SetString(PyExc_TypeError, "section ends: a tuple");
		return -1;
	}
	if (PyObject_GetBuffer(PyTuple_GET_ITEM(table, 0), &sym, PyBUF_SIMPLE) < 0)
		return -1;
	if (PyObject_GetBuffer(PyTuple_GET_ITEM(table, 1), &str, PyBUF_SIMPLE) < 0) {
		PyBuffer_Release(&sym);
		return -1;
	}
	int rc = 0;
	const unsigned char *s = sym.buf, *strings = str.buf;
	Py_ssize_t entry = is_64 ? 24 : 16, count = sym.len / entry, n_ends = PyTuple_GET_SIZE(ends);
	for (Py_ssize_t i = 0; i < count && rc == 0; i++) {
		const unsigned char *e = s + i * entry;
		uint64_t name_at = elf_uint(e, 4, little), value, size;
		unsigned info, shndx;
		if (is_64) { /* Elf64_Sym: name, info, other, shndx, value, size */
			info = e[4];
			shndx = (unsigned)elf_uint(e + 6, 2, little);
			value = elf_uint(e + 8, 8, little);
			size = elf_uint(e + 16, 8, little);
		} else { /* Elf32_Sym: name, value, size, info, other, shndx */
			value = elf_uint(e + 4, 4, little);
			size = elf_uint(e + 8, 4, little);
			info = e[12];
			shndx = (unsigned)elf_uint(e + 14, 2, little);
		}
		if (objects ? (info & 0xF) != STT_OBJECT_ || value == 0 :
			      ((info & 0xF) != STT_FUNC_ && (info & 0xF) != STT_GNU_IFUNC_) || shndx == 0 || value == 0)
			continue;
		if (name_at >= (uint64_t)str.len)
			continue; /* bytes.find past the end: an empty name */
		const char *name = (const char *)strings + name_at;
		const char *nul = memchr(name, 0, (size_t)(str.len - (Py_ssize_t)name_at));
		Py_ssize_t len = nul ? nul - name : str.len - (Py_ssize_t)name_at;
		if (!len)
			continue;
		int under = 0;
		for (Py_ssize_t j = 0; j < len; j++) {
			if ((unsigned char)name[j] >= 0x80) {
				rc = 1;
				break;
			}
			if (under == j && name[j] == '_')
				under++;
		}
		if (rc)
			break;
		uint64_t section_end = 0;
		if ((Py_ssize_t)shndx < n_ends) {
			section_end = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(ends, shndx));
			if (PyErr_Occurred()) {
				rc = -1;
				break;
			}
		}
		if (*n == *cap) {
			Py_ssize_t more = *cap ? *cap * 2 : 4096;
			struct elf_fn *grown = PyMem_Realloc(*fns, (size_t)more * sizeof(**fns));
			if (!grown) {
				PyErr_NoMemory();
				rc = -1;
				break;
			}
			*fns = grown;
			*cap = more;
		}
		unsigned binding = info >> 4; /* GLOBAL 1 -> 0, WEAK 2 -> 1, LOCAL 0 -> 2, any other -> 3 */
		(*fns)[*n] = (struct elf_fn){value, size, section_end, 0, name, len, *n,
					     binding == 1 ? 0 : binding == 2 ? 1 : binding == 0 ? 2 : 3, under};
		(*n)++;
	}
	PyBuffer_Release(&str);
	PyBuffer_Release(&sym);
	return rc;
}

static int by_object(const void *pa, const void *pb)
{
	const struct elf_fn *a = pa, *b = pb;
	uint64_t sa = a->size ? a->size : 1, sb = b->size ? b->size : 1;
	if (a->value != b->value)
		return a->value < b->value ? -1 : 1;
	if (sa != sb)
		return sa < sb ? -1 : 1;
	int c = memcmp(a->name, b->name, (size_t)(a->len < b->len ? a->len : b->len));
	return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* every named symbol of the tables (a list of (symbols, strings, section ends, is_64, little_endian)) into *fns,
 * functions or (`objects`) data objects, sorted (functions by address then in the tables' order, objects by address,
 * size and name): 0, 1 when a name is not ASCII, -1 on error */
static int tables_symbols(PyObject *tables, int objects, struct elf_fn **fns, Py_ssize_t *n)
{
	Py_ssize_t cap = 0;
	for (Py_ssize_t t = 0; t < PyList_GET_SIZE(tables); t++) {
		int rc = table_symbols(PyList_GET_ITEM(tables, t), objects, fns, n, &cap);
		if (rc)
			return rc;
	}
	if (*n)
		qsort(*fns, (size_t)*n, sizeof(**fns), objects ? by_object : fn_by_address);
	return 0;
}

/* (starts, ends, names) of the first n symbols, each ending at its `end` */
static PyObject *three_lists(const struct elf_fn *fns, Py_ssize_t n)
{
	PyObject *starts = PyList_New(n), *ends = PyList_New(n), *names = PyList_New(n), *out = NULL;
	if (!starts || !ends || !names)
		goto done;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *st = PyLong_FromUnsignedLongLong(fns[i].value), *en = PyLong_FromUnsignedLongLong(fns[i].end);
		PyObject *nm = PyUnicode_DecodeASCII(fns[i].name, fns[i].len, NULL);
		if (!st || !en || !nm) {
			Py_XDECREF(st);
			Py_XDECREF(en);
			Py_XDECREF(nm);
			goto done;
		}
		PyList_SET_ITEM(starts, i, st);
		PyList_SET_ITEM(ends, i, en);
		PyList_SET_ITEM(names, i, nm);
	}
	out = PyTuple_Pack(3, starts, ends, names);
done:
	Py_XDECREF(starts);
	Py_XDECREF(ends);
	Py_XDECREF(names);
	return out;
}

/* what the tables made: (starts, ends, names) of fns[:n] where rc is 0, None where 1 (left to Python), NULL with the
 * error where -1; fns freed */
static PyObject *outcome(struct elf_fn *fns, Py_ssize_t n, int rc)
{
	PyObject *out = rc < 0 ? NULL : rc > 0 ? Py_NewRef(Py_None) : three_lists(fns, n);
	PyMem_Free(fns);
	return out;
}

/* elf_functions(tables, segments): symbols.py ElfSymbols._build_index's tables made of the raw symbol tables (each
 * (symbols, strings, section ends, is_64, little_endian), in order) and the PT_LOAD segments ((vaddr, memory size)
 * pairs): (starts, ends, names), each address once with the best of its aliases' names, the largest of their sizes
 * and its first section end. None when a name is not ASCII or an end is beyond 64 bits: Python builds that file's
 * (its ranks count characters, a name not UTF-8 is decoded with replacement characters, its integers have no
 * bound). A libc's or a libpython's took 20-30 ms in Python, on the way to a live view's first data (the set-up's
 * user stacks named). */
static PyObject *elf_functions(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 2 || !PyList_Check(args[0]) || !PyTuple_Check(args[1])) {
		PyErr_SetString(PyExc_TypeError, "elf_functions(tables: list, segments: tuple)");
		return NULL;
	}
	struct elf_fn *fns = NULL;
	Py_ssize_t n = 0, kept = 0;
	int rc = tables_symbols(args[0], 0, &fns, &n);
	if (rc)
		goto done;
	/* each address's aliases merged into its first: the best name, the largest size, the first section end */
	for (Py_ssize_t i = 0; i < n;) {
		struct elf_fn best = fns[i];
		Py_ssize_t first_end = best.section_end ? best.order : PY_SSIZE_T_MAX, j = i + 1;
		for (; j < n && fns[j].value == best.value; j++) {
			if (by_name_rank(&fns[j], &best) < 0) {
				best.name = fns[j].name;
				best.len = fns[j].len;
				best.binding_rank = fns[j].binding_rank;
				best.underscores = fns[j].underscores;
			}
			if (fns[j].size > best.size)
				best.size = fns[j].size;
			if (fns[j].section_end && fns[j].order < first_end) {
				first_end = fns[j].order;
				best.section_end = fns[j].section_end;
			}
		}
		fns[kept++] = best;
		i = j;
	}
	for (Py_ssize_t i = 0; i < kept; i++) {
		if (fns[i].size) {
			fns[i].end = fns[i].value + fns[i].size;
			if (fns[i].end < fns[i].value) {
				rc = 1;
				goto done;
			}
			continue;
		}
		/* size 0 (hand-written assembly): to the next symbol, not past its section's (or segment's) end */
		uint64_t limit = fns[i].section_end;
		if (!limit && (rc = segment_end(args[1], fns[i].value, &limit)) != 0)
			goto done;
		fns[i].end = i + 1 < kept && fns[i + 1].value < limit ? fns[i + 1].value : limit;
	}
done:
	return outcome(fns, kept, rc);
}

/* elf_objects(tables): bpf/futex_collector.py DataSymbols' table of an ELF file's data objects, made of its raw
 * symbol tables (as elf_functions takes them): (starts, ends, names) of every named object with an address, in the
 * order of (address, size at least 1, name), duplicates kept. None when a name is not ASCII or an end is beyond 64
 * bits (Python makes it). */
static PyObject *elf_objects(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 1 || !PyList_Check(args[0])) {
		PyErr_SetString(PyExc_TypeError, "elf_objects(tables: list)");
		return NULL;
	}
	struct elf_fn *fns = NULL;
	Py_ssize_t n = 0;
	int rc = tables_symbols(args[0], 1, &fns, &n);
	if (rc)
		goto done;
	for (Py_ssize_t i = 0; i < n; i++) {
		fns[i].end = fns[i].value + (fns[i].size ? fns[i].size : 1);
		if (fns[i].end < fns[i].value) {
			rc = 1;
			goto done;
		}
	}
done:
	return outcome(fns, n, rc);
}

static PyMethodDef module_methods[] = {
	{"read_whole", (PyCFunction)(void (*)(void))read_whole, METH_FASTCALL,
	 "read_whole(path): the file's bytes, read without the interpreter's lock"},
	{"maps_lines", (PyCFunction)(void (*)(void))maps_lines, METH_FASTCALL,
	 "maps_lines(data, cls): /proc/PID/maps's lines as cls tuples, with whether their starts are in order; or None"},
	{"text_symbols", (PyCFunction)(void (*)(void))text_symbols, METH_FASTCALL,
	 "text_symbols(data, types, tail, end_markers, kernel): (starts, ends, names, modules), or the parse's error"},
	{"data_symbols", (PyCFunction)(void (*)(void))data_symbols, METH_FASTCALL,
	 "data_symbols(data, types): the data symbols' (address, name) pairs, sorted"},
	{"elf_functions", (PyCFunction)(void (*)(void))elf_functions, METH_FASTCALL,
	 "elf_functions(tables, segments): an ELF file's (starts, ends, names) of its functions, or None"},
	{"elf_objects", (PyCFunction)(void (*)(void))elf_objects, METH_FASTCALL,
	 "elf_objects(tables): an ELF file's (starts, ends, names) of its data objects, or None"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT, "_kallsyms", "kallsyms parsed in C (analyzer/symbols.py)", -1, module_methods,
};

PyMODINIT_FUNC PyInit__kallsyms(void)
{
	return PyModule_Create(&module_def);
}
