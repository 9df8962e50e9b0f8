/*
 * truth.h - ground truth a workload thread reports about itself, for tests to compare the tracer with.
 *
 * Header-only (every function is static).  Include it FIRST in the .c file: it defines _GNU_SOURCE.
 *
 * A snapshot is the calling thread's own scheduler counters, read from /proc/thread-self:
 *   status   voluntary_ctxt_switches, nonvoluntary_ctxt_switches
 *   sched    se.nr_migrations
 *   schedstat  <on-CPU run ns> <run-queue wait ns> <timeslices>
 * A field that could not be read is -1 (a test should treat that as "no truth", never as a value).
 * run_ns is the kernel's se.sum_exec_runtime as last accounted (at a tick or a switch), not brought up
 * to date for the running reader: it lags by up to the time run since then (a new thread shows 0), so
 * compare it with a tolerance of about one tick per snapshot.  The switch and migration counts are exact.
 *
 * Usage, in each thread to be reported:
 *     pthread_setname_np(pthread_self(), "name");
 *     struct truth_snapshot start, end;
 *     truth_read(&start);
 *     ... the measured work; time each blocking call with truth_now_ns() and add it up ...
 *     truth_read(&end);                       // the last thing before the record
 *     truth_record("role", calls, blocked_ns, &start, &end);
 *     return;
 * and in main, once the threads are gone (truth_join), its own record and then truth_flush().
 *
 * The window: a worker's end snapshot is followed only by truth_record() (memory, two syscalls that
 * never block) and its exit: no lock, no write, nothing that could wake another thread or wait.  A
 * tracer that counts up to the thread's exit sees what [start, end] shows plus the exit path.
 *
 * truth_flush() prints ONE JSON object per record, one per line, to stdout:
 *   {"role": str, "tid": int, "tgid": int, "comm": str, "calls": int, "blocked_ns": int,
 *    "start": {snapshot}, "end": {snapshot}}
 * with snapshot keys "voluntary_switches", "involuntary_switches", "nr_migrations", "run_ns",
 * "runq_wait_ns", "timeslices".  tid/tgid/comm are those of the CALLING thread, so it must be called
 * from the thread being reported.  blocked_ns is the caller's sum of CLOCK_MONOTONIC time measured
 * around each blocking call.  A record kept with truth_record_extra() ends with one more key,
 *   "extra": {"NAME": int, ...}
 * up to TRUTH_MAX_EXTRA counters the workload names itself (e.g. the parts blocked_ns adds up).
 */
#ifndef STALLSCOPE_TRUTH_H
#define STALLSCOPE_TRUTH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct truth_snapshot {
	long long voluntary_switches;   /* status: voluntary_ctxt_switches */
	long long involuntary_switches; /* status: nonvoluntary_ctxt_switches */
	long long nr_migrations;        /* sched: se.nr_migrations */
	long long run_ns;               /* schedstat field 1: time on CPU */
	long long runq_wait_ns;         /* schedstat field 2: time runnable, waiting on a run queue */
	long long timeslices;           /* schedstat field 3: number of times run on a CPU */
};


/* The calling thread's CPU time in nanoseconds, exact (the kernel brings it up to date for the reader). */
static inline long long truth_thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CLOCK_MONOTONIC in nanoseconds. */
static inline long long truth_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Reads a whole (small) /proc file into buf, NUL-terminated.  Returns the length, or -1. */
static int truth_slurp(const char *path, char *buf, size_t size)
{
	size_t len = 0;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	while (len < size - 1) {
		n = read(fd, buf + len, size - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	return (int)len;
}

/*
 * The number after "key" (which must start a line) and its ':' separator, or -1.
 * "voluntary_ctxt_switches" must not match inside "nonvoluntary_ctxt_switches", hence the line start.
 */
static long long truth_field(const char *text, const char *key)
{
	size_t keylen = strlen(key);
	const char *p = text;
	const char *colon;

	while (p && *p) {
		if (strncmp(p, key, keylen) == 0) {
			colon = p + keylen;
			while (*colon == ' ' || *colon == '\t')
				colon++;
			if (*colon == ':')
				return strtoll(colon + 1, NULL, 10);
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

/* The calling thread's schedstat: on-CPU run ns, run-queue wait ns, timeslices.  Returns 0, or -1
 * (the three left as they were) when it cannot be read.  The run-queue wait is exact once the thread has
 * a CPU again (the kernel adds each wait as the thread gets one); run ns lags, see above. */
static int truth_schedstat(long long *run_ns, long long *runq_wait_ns, long long *timeslices)
{
	char buf[256];
	long long a, b, c;

	if (truth_slurp("/proc/thread-self/schedstat", buf, sizeof(buf)) <= 0 ||
	    sscanf(buf, "%lld %lld %lld", &a, &b, &c) != 3)
		return -1;
	*run_ns = a;
	*runq_wait_ns = b;
	*timeslices = c;
	return 0;
}

/* Fills *s with the calling thread's counters.  Returns 0, or -1 if any field is missing (then -1). */
static int truth_read(struct truth_snapshot *s)
{
	char buf[8192];
	int ok = 0;

	s->voluntary_switches = s->involuntary_switches = s->nr_migrations = -1;
	s->run_ns = s->runq_wait_ns = s->timeslices = -1;

	if (truth_slurp("/proc/thread-self/status", buf, sizeof(buf)) > 0) {
		s->voluntary_switches = truth_field(buf, "voluntary_ctxt_switches");
		s->involuntary_switches = truth_field(buf, "nonvoluntary_ctxt_switches");
	}
	if (truth_slurp("/proc/thread-self/sched", buf, sizeof(buf)) > 0)
		s->nr_migrations = truth_field(buf, "se.nr_migrations");
	truth_schedstat(&s->run_ns, &s->runq_wait_ns, &s->timeslices);
	if (s->voluntary_switches < 0 || s->involuntary_switches < 0 || s->nr_migrations < 0 ||
	    s->run_ns < 0 || s->runq_wait_ns < 0 || s->timeslices < 0)
		ok = -1;
	return ok;
}

/* Writes s as a JSON string (quotes included), escaping what JSON requires. */
static void truth_json_string(FILE *f, const char *s)
{
	const unsigned char *p;

	fputc('"', f);
	for (p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

static void truth_json_snapshot(FILE *f, const struct truth_snapshot *s)
{
	fprintf(f,
		"{\"voluntary_switches\": %lld, \"involuntary_switches\": %lld, \"nr_migrations\": %lld, "
		"\"run_ns\": %lld, \"runq_wait_ns\": %lld, \"timeslices\": %lld}",
		s->voluntary_switches, s->involuntary_switches, s->nr_migrations, s->run_ns,
		s->runq_wait_ns, s->timeslices);
}

/* A named counter for truth_record_extra(). name is kept by reference: use a string literal. */
struct truth_counter {
	const char *name;
	long long value;
};

#define TRUTH_MAX_EXTRA 4

/* One thread's report, kept in memory until truth_flush(). */
struct truth_record {
	const char *role;
	long tid, tgid;
	char comm[17];
	long long calls, blocked_ns;
	struct truth_snapshot start, end;
	int nextra;
	struct truth_counter extra[TRUTH_MAX_EXTRA];
};

#define TRUTH_MAX_RECORDS 64
static struct truth_record truth_records[TRUTH_MAX_RECORDS];
static int truth_nrecords;

/*
 * truth_record() (below) plus nextra named counters (at most TRUTH_MAX_EXTRA; more are dropped),
 * printed as the record's "extra" object in the order given.  Same rule: the end snapshot right
 * before it.
 */
static void truth_record_extra(const char *role, long long calls, long long blocked_ns,
			       const struct truth_snapshot *start, const struct truth_snapshot *end,
			       const struct truth_counter *extra, int nextra)
{
	int i = __atomic_fetch_add(&truth_nrecords, 1, __ATOMIC_ACQ_REL);
	struct truth_record *r;
	int k;

	if (i >= TRUTH_MAX_RECORDS)
		return;
	r = &truth_records[i];
	r->role = role;
	r->tid = syscall(SYS_gettid);
	r->tgid = (long)getpid();
	if (prctl(PR_GET_NAME, r->comm, 0, 0, 0) != 0)
		r->comm[0] = '\0';
	r->comm[16] = '\0';
	r->calls = calls;
	r->blocked_ns = blocked_ns;
	r->start = *start;
	r->end = *end;
	r->nextra = nextra < TRUTH_MAX_EXTRA ? nextra : TRUTH_MAX_EXTRA;
	for (k = 0; k < r->nextra; k++)
		r->extra[k] = extra[k];
}

/*
 * Keeps the calling thread's truth (see the top of this file) for truth_flush() to print. Take the
 * end snapshot right before: what follows in a worker is only its return, so nothing (no lock, no
 * write that might block or wake another thread) lies between its last snapshot and its exit.
 */
static inline void truth_record(const char *role, long long calls, long long blocked_ns,
				const struct truth_snapshot *start, const struct truth_snapshot *end)
{
	truth_record_extra(role, calls, blocked_ns, start, end, NULL, 0);
}

/* Prints every kept record, one JSON line each, from the main thread once the workers are gone. */
static void truth_flush(void)
{
	int i, n = __atomic_load_n(&truth_nrecords, __ATOMIC_ACQUIRE);

	for (i = 0; i < n && i < TRUTH_MAX_RECORDS; i++) {
		const struct truth_record *r = &truth_records[i];

		fputs("{\"role\": ", stdout);
		truth_json_string(stdout, r->role);
		fprintf(stdout, ", \"tid\": %ld, \"tgid\": %ld, \"comm\": ", r->tid, r->tgid);
		truth_json_string(stdout, r->comm);
		fprintf(stdout, ", \"calls\": %lld, \"blocked_ns\": %lld, \"start\": ", r->calls, r->blocked_ns);
		truth_json_snapshot(stdout, &r->start);
		fputs(", \"end\": ", stdout);
		truth_json_snapshot(stdout, &r->end);
		if (r->nextra > 0) {
			int k;

			fputs(", \"extra\": {", stdout);
			for (k = 0; k < r->nextra; k++) {
				if (k > 0)
					fputs(", ", stdout);
				truth_json_string(stdout, r->extra[k].name);
				fprintf(stdout, ": %lld", r->extra[k].value);
			}
			fputc('}', stdout);
		}
		fputs("}\n", stdout);
	}
	fflush(stdout);
}

/*
 * Parses a positive integer option argument no larger than max; exits with status 2 on anything else.
 */
static long truth_parse_positive(const char *prog, char opt, const char *arg, long max)
{
	char *endp;
	long v;

	errno = 0;
	v = strtol(arg, &endp, 10);
	if (errno || endp == arg || *endp != '\0' || v <= 0 || v > max) {
		fprintf(stderr, "%s: -%c wants an integer from 1 to %ld, got '%s'\n", prog, opt, max, arg);
		exit(2);
	}
	return v;
}


/*
 * Waits for a thread to be gone without sleeping on it. pthread_join() sleeps on the thread's
 * CLEARTID futex, so the exiting thread wakes the joiner, which may preempt it after its truth
 * was read: run-queue wait and an involuntary switch that no truth line can show. Polling for
 * /proc/self/task/TID to vanish keeps the exiting thread's last moments quiet; the join after
 * it returns at once. `tid` is what the thread stored with truth_register().
 */
static void truth_join(pthread_t thread, volatile pid_t *tid)
{
	/* 37 ms: rare wake-ups, out of step with the workloads' 10 and 20 ms periods */
	struct timespec nap = { 0, 37 * 1000 * 1000 };
	char path[64];

	while (__atomic_load_n(tid, __ATOMIC_ACQUIRE) == 0)
		nanosleep(&nap, NULL);
	snprintf(path, sizeof(path), "/proc/self/task/%d", (int)*tid);
	while (access(path, F_OK) == 0)
		nanosleep(&nap, NULL);
	pthread_join(thread, NULL);
}

/* Called first thing by a thread that main will truth_join(). */
static void truth_register(volatile pid_t *tid)
{
	__atomic_store_n(tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
}

/* An example's own option for truth_options_more(): -LETTER N, an integer from 1 to max. */
struct truth_option {
	char letter;
	long *value;
	long max;
};

#define TRUTH_MAX_OPTIONS 8

/*
 * truth_options() plus up to TRUTH_MAX_OPTIONS options of the example's own (letters other than
 * n, m and h).  A NULL ms leaves -m out, for an example without an MS.
 */
static void truth_options_more(int argc, char **argv, long *count, long *ms,
			       const struct truth_option *more, int nmore, const char *help)
{
	char optstring[8 + 2 * TRUTH_MAX_OPTIONS] = "n:";
	size_t len = 2;
	int opt, k;

	if (nmore > TRUTH_MAX_OPTIONS)
		nmore = TRUTH_MAX_OPTIONS;
	if (ms) {
		optstring[len++] = 'm';
		optstring[len++] = ':';
	}
	for (k = 0; k < nmore; k++) {
		optstring[len++] = more[k].letter;
		optstring[len++] = ':';
	}
	optstring[len++] = 'h';
	optstring[len] = '\0';

	while ((opt = getopt(argc, argv, optstring)) != -1) {
		switch (opt) {
		case 'n':
			*count = truth_parse_positive(argv[0], 'n', optarg, 100000000L);
			continue;
		case 'm':
			*ms = truth_parse_positive(argv[0], 'm', optarg, 86400000L);
			continue;
		case 'h':
			printf(help, argv[0]);
			exit(0);
		}
		for (k = 0; k < nmore; k++) {
			if (opt == more[k].letter) {
				*more[k].value = truth_parse_positive(argv[0], (char)opt, optarg, more[k].max);
				break;
			}
		}
		if (k == nmore) {
			fprintf(stderr, help, argv[0]);
			exit(2);
		}
	}
	if (optind != argc) {
		fprintf(stderr, help, argv[0]);
		exit(2);
	}
}

/*
 * The options every example takes: -n COUNT and -m MS (both positive), -h for the help text.
 * Exits 0 after -h, 2 on anything else it does not understand.
 */
static inline void truth_options(int argc, char **argv, long *count, long *ms, const char *help)
{
	truth_options_more(argc, argv, count, ms, NULL, 0, help);
}

#endif /* STALLSCOPE_TRUTH_H */
