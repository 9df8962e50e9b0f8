/* Reproduces userspace lock contention (futex): T threads "convoy" (-t, default 4) each COUNT times
 * (-n, default 200) lock one pthread mutex, hold it H ms (-m, default 1; a clock_nanosleep while
 * holding it, so the others really block in the kernel futex), unlock it.  Waits ~ (T-1) x hold
 * each round; a tracer should attribute them to take_lock in mutex_convoy (futex_wait under
 * __lll_lock_wait / pthread_mutex_lock), and the holds to clock_nanosleep.  Naming take_lock needs a
 * user stack walk that sees its frame: frame pointers alone skip it, glibc's lock functions have none.
 * glibc mutexes are not fair: now and then the unlocker takes the mutex straight back (a ~0 wait) and
 * another waiter waits a round longer.  blocked_ns is the time inside pthread_mutex_lock; calls is
 * COUNT. */
#include "truth.h"

#define MAX_THREADS (TRUTH_MAX_RECORDS - 1) /* one record each, and main's */

static long count = 200;
static long hold_ms = 1;
static long nthreads = 4;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
	pthread_t thread;
	volatile pid_t tid;
} convoy_threads[MAX_THREADS];

static const char help[] =
		"usage: %s [-t THREADS] [-n COUNT] [-m MS] [-h]\n"
		"  THREADS threads named \"convoy\" each COUNT times lock one pthread mutex, hold it MS ms\n"
		"  (clock_nanosleep, CLOCK_MONOTONIC, relative) and unlock it: the others wait in the futex.\n"
		"  They and the main thread print their ground truth as JSON lines on stdout.\n"
		"  -t THREADS  number of threads (default 4)\n"
		"  -n COUNT    lock/hold/unlock rounds per thread (default 200)\n"
		"  -m MS       how long each round holds the mutex, in milliseconds (default 1)\n"
		"  -h          this help\n";

/*
 * Locks m and returns the ns spent waiting for it.  Not inlined, and not a tail call (the clock read
 * after the lock), so take_lock stays a symbol and is still on the stack while pthread_mutex_lock waits.
 */
__attribute__((noinline)) long long take_lock(pthread_mutex_t *m)
{
	long long t0 = truth_now_ns();
	int rc = pthread_mutex_lock(m);

	if (rc != 0) {
		fprintf(stderr, "convoy: pthread_mutex_lock: %s\n", strerror(rc));
		exit(1);
	}
	return truth_now_ns() - t0;
}

static void *convoy(void *arg)
{
	volatile pid_t *tid = arg;
	struct truth_snapshot start, end;
	struct timespec req, rem;
	long long blocked_ns = 0;
	long i;
	int rc;

	truth_register(tid);
	pthread_setname_np(pthread_self(), "convoy");
	truth_read(&start);

	for (i = 0; i < count; i++) {
		blocked_ns += take_lock(&lock);
		req.tv_sec = hold_ms / 1000;
		req.tv_nsec = (hold_ms % 1000) * 1000000L;
		while ((rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &req, &rem)) == EINTR)
			req = rem;
		if (rc != 0) {
			fprintf(stderr, "convoy: clock_nanosleep: %s\n", strerror(rc));
			exit(1);
		}
		pthread_mutex_unlock(&lock);
	}

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("convoy", count, blocked_ns, &start, &end);
	return NULL;
}

int main(int argc, char **argv)
{
	struct truth_snapshot start, end;
	long long blocked_ns, t0;
	long i;
	int rc;

	truth_read(&start);

	truth_options_more(argc, argv, &count, &hold_ms,
			   (const struct truth_option[]){ { 't', &nthreads, MAX_THREADS } }, 1, help);

	for (i = 0; i < nthreads; i++) {
		rc = pthread_create(&convoy_threads[i].thread, NULL, convoy, (void *)&convoy_threads[i].tid);
		if (rc != 0) {
			fprintf(stderr, "%s: pthread_create: %s\n", argv[0], strerror(rc));
			return 1;
		}
	}
	t0 = truth_now_ns();
	for (i = 0; i < nthreads; i++)
		truth_join(convoy_threads[i].thread, &convoy_threads[i].tid);
	blocked_ns = truth_now_ns() - t0;

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("main", nthreads, blocked_ns, &start, &end);
	truth_flush();
	return 0;
}
