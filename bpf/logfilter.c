/* libbpf's log, its debug lines dropped in C (bpf/libbpf.py).
 *
 * libbpf calls its print function for every line it logs, about 2,500 debug lines a session's start-up.
 * A Python callback takes the interpreter's lock for each: while another thread holds it (the kernel's
 * tables read during start-up, stallscope/warmup.py), every line waited for it, and the probes' loading
 * took twice as long. Only warnings and info lines are passed on to the Python callback. */
#include <stdarg.h>
#include <stddef.h>

#define LIBBPF_DEBUG 2 /* enum libbpf_print_level */

typedef int (*logfilter_fn)(int level, const char *fmt, va_list args);

static logfilter_fn forward;

/* The Python callback the kept lines go to (NULL: none). */
void logfilter_forward(logfilter_fn fn)
{
	forward = fn;
}

/* Given to libbpf_set_print. */
int logfilter_print(int level, const char *fmt, va_list args)
{
	if (level >= LIBBPF_DEBUG || forward == NULL)
		return 0;
	return forward(level, fmt, args);
}
