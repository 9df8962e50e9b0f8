/* Many mostly idle threads, for scale tests: N threads (-n, default 10000) with small stacks (-s KiB,
 * default 64), all named "idle", each waking every PERIOD ms (-p, default 3000) from an absolute
 * CLOCK_MONOTONIC deadline.  Thread i's first deadline is offset by i * PERIOD / N, so the wakeups are
 * spread evenly over the period (N / PERIOD per ms) instead of arriving as one burst.  A tracer
 * recording for longer than PERIOD should see every thread, each with about one voluntary switch per
 * period.
 *
 * Ground truth on stdout, one JSON object per line:
 *   {"event": "ready", "tgid": T, "threads": N, "tasks": N + 1, "stack_bytes": S, "period_ms": P}
 * once every thread runs, and at exit (SIGTERM, SIGINT, or -d SECONDS elapsed)
 *   {"event": "done", "tgid": T, "threads": N, "wakeups": W}
 * where W is the number of periodic wakeups all threads completed. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

static long nthreads = 10000;
static long period_ms = 3000;
static long stack_kib = 64;
static long duration_s;
static long *wakeups; /* one slot per thread, written only by its thread */

static const char help[] =
		"usage: %s [-n THREADS] [-p PERIOD_MS] [-s STACK_KIB] [-d SECONDS] [-h]\n"
		"  THREADS threads named \"idle\" (default 10000), each sleeping until its next deadline every\n"
		"  PERIOD_MS ms (default 3000), deadlines spread evenly over the period; STACK_KIB KiB of stack\n"
		"  each (default 64).  Runs until SIGTERM or SIGINT, or for SECONDS (-d).  Prints JSON lines.\n";

static void add_ns(struct timespec *t, long long ns)
{
	ns += t->tv_nsec;
	t->tv_sec += ns / 1000000000LL;
	t->tv_nsec = ns % 1000000000LL;
}

static void *idle_thread(void *arg)
{
	long i = (long)arg;
	long long period_ns = period_ms * 1000000LL;
	struct timespec next;

	prctl(PR_SET_NAME, "idle", 0, 0, 0);
	clock_gettime(CLOCK_MONOTONIC, &next);
	add_ns(&next, period_ns * i / nthreads);
	for (;;) {
		/* Absolute deadlines: a late wakeup does not shift the next one, so the spread holds. */
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
			;
		wakeups[i]++;
		add_ns(&next, period_ns);
	}
	return NULL;
}

static long option(const char *text, long min, const char *what)
{
	char *end;
	long v = strtol(text, &end, 10);

	if (*text == '\0' || *end != '\0' || v < min) {
		fprintf(stderr, "invalid %s: %s\n", what, text);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	pthread_attr_t attr;
	sigset_t stop;
	long i, total = 0;
	int opt, rc, sig;

	while ((opt = getopt(argc, argv, "n:p:s:d:h")) != -1) {
		switch (opt) {
		case 'n': nthreads = option(optarg, 1, "thread count"); break;
		case 'p': period_ms = option(optarg, 1, "period"); break;
		case 's': stack_kib = option(optarg, 16, "stack size"); break;
		case 'd': duration_s = option(optarg, 0, "duration"); break;
		case 'h': printf(help, argv[0]); return 0;
		default: fprintf(stderr, help, argv[0]); return 2;
		}
	}
	/* ten thousand threads must not outlive whoever started them (a benchmark killed by a timeout) */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	wakeups = calloc(nthreads, sizeof(*wakeups));
	if (!wakeups) {
		perror("calloc");
		return 1;
	}
	/* Blocked before the threads exist, so they inherit the mask and only main takes the signal. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);

	pthread_attr_init(&attr);
	rc = pthread_attr_setstacksize(&attr, stack_kib * 1024 < PTHREAD_STACK_MIN ? PTHREAD_STACK_MIN
										 : stack_kib * 1024);
	if (rc != 0) {
		fprintf(stderr, "pthread_attr_setstacksize: %s\n", strerror(rc));
		return 1;
	}
	for (i = 0; i < nthreads; i++) {
		pthread_t t;

		rc = pthread_create(&t, &attr, idle_thread, (void *)i);
		if (rc != 0) {
			fprintf(stderr, "pthread_create of thread %ld: %s\n", i, strerror(rc));
			return 1;
		}
		pthread_detach(t);
	}
	printf("{\"event\": \"ready\", \"tgid\": %d, \"threads\": %ld, \"tasks\": %ld, \"stack_bytes\": %ld, "
	       "\"period_ms\": %ld}\n", getpid(), nthreads, nthreads + 1, stack_kib * 1024, period_ms);
	fflush(stdout);

	if (duration_s > 0)
		alarm(duration_s);
	sigwait(&stop, &sig);
	for (i = 0; i < nthreads; i++)
		total += wakeups[i];
	printf("{\"event\": \"done\", \"tgid\": %d, \"threads\": %ld, \"wakeups\": %ld}\n", getpid(), nthreads,
	       total);
	fflush(stdout);
	return 0; /* exit() ends every thread */
}
