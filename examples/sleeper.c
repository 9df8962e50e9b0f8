/* Reproduces a thread "sleeper" doing clock_nanosleep(CLOCK_MONOTONIC, relative) 20 ms x 100 (-n, -m):
 * a tracer should find ~2 s off-CPU for it in clock_nanosleep ("Application requested delay", ~100
 * voluntary switches), and the main thread off-CPU for as long in short sleeps while it waits for the thread to exit.
 * With -w US it also burns US microseconds of its own CPU time after each sleep: a latency-sensitive
 * thread (wake, work briefly, sleep), which CPU hogs beside it keep waiting in the run queue. */
#include "truth.h"


static long count = 100;
static long sleep_ms = 20;
static long work_us = 0;
static volatile pid_t sleeper_tid;

static const char help[] =
		"usage: %s [-n COUNT] [-m MS] [-w US] [-h]\n"
		"  A thread named \"sleeper\" sleeps MS ms (clock_nanosleep, CLOCK_MONOTONIC, relative)\n"
		"  COUNT times; it and the main thread print their ground truth as JSON lines on stdout.\n"
		"  -n COUNT  number of sleeps (default 100)\n"
		"  -m MS     length of each sleep in milliseconds (default 20)\n"
		"  -w US     after each sleep, burn US microseconds of the thread's own CPU time (default 0)\n"
		"  -h        this help\n";

/* US microseconds of this thread's CPU time (not wall time: the same work on a busy machine) */
static void burn_us(long us)
{
	long long until = truth_thread_cpu_ns() + us * 1000LL;
	volatile unsigned long x = 1;

	while (truth_thread_cpu_ns() < until)
		for (int i = 0; i < 2000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
}

static void *sleeper(void *arg)
{
	struct truth_snapshot start, end;
	struct timespec req, rem;
	long long blocked_ns = 0, t0;
	long i;
	int rc;

	(void)arg;
	truth_register(&sleeper_tid);
	pthread_setname_np(pthread_self(), "sleeper");
	truth_read(&start);

	for (i = 0; i < count; i++) {
		req.tv_sec = sleep_ms / 1000;
		req.tv_nsec = (sleep_ms % 1000) * 1000000L;
		t0 = truth_now_ns();
		/* A signal interrupting the sleep resumes it with the remainder: still one call. */
		while ((rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &req, &rem)) == EINTR)
			req = rem;
		blocked_ns += truth_now_ns() - t0;
		if (rc != 0) {
			fprintf(stderr, "sleeper: clock_nanosleep: %s\n", strerror(rc));
			exit(1);
		}
		if (work_us)
			burn_us(work_us);
	}

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("sleeper", count, blocked_ns, &start, &end);
	return NULL;
}

int main(int argc, char **argv)
{
	struct truth_snapshot start, end;
	long long blocked_ns, t0;
	pthread_t thread;
	int rc;

	truth_read(&start);

	truth_options_more(argc, argv, &count, &sleep_ms,
			   (const struct truth_option[]){ { 'w', &work_us, 1000000 } }, 1, help);

	rc = pthread_create(&thread, NULL, sleeper, NULL);
	if (rc != 0) {
		fprintf(stderr, "%s: pthread_create: %s\n", argv[0], strerror(rc));
		return 1;
	}
	t0 = truth_now_ns();
	truth_join(thread, &sleeper_tid);
	blocked_ns = truth_now_ns() - t0;

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("main", 1, blocked_ns, &start, &end);
	truth_flush();
	return 0;
}
