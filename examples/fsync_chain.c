/* A wait chain with a known root: one "holder" thread takes a pthread mutex, appends 64 KiB to a file
 * and fdatasync()s it while it holds the mutex, COUNT times (-n, default 100), sleeping MS ms (-m,
 * default 2) between rounds without the mutex; W "waiter" threads (-t, default 2) take the same mutex
 * in a loop until the holder is done, each holding it a moment. The waiters wait on the mutex
 * ("Userspace lock contention"), and what they wait for is the holder's fdatasync: the chain's root is
 * the fsync (I/O), not the lock. The file is FILE (-f, default ./fsync_chain.data, removed at exit): it
 * must be on a disk, where fdatasync() waits for the device (tmpfs would not).
 *
 * Truth: each waiter's blocked_ns is its time inside pthread_mutex_lock; the holder's blocked_ns is its
 * time inside fdatasync(), with extra "held_ns" (its time holding the mutex) and "slept_ns" (its time
 * inside fdatasync() less what it waited there for a CPU, schedstat's run_delay: on a busy machine the
 * wakeup after each sync waits in the run queue, which is not the sync's) and "runq_held_ns" (its time
 * waiting for a CPU while it held the mutex, run_delay again). Each waiter's record adds "in_sync_ns" (the part
 * of its waits the holder spent inside fdatasync()) and "in_sync_slept_ns" (that part scaled by each call's
 * slept share: the holder asleep in the sync while the waiter waited, as near as the two threads can tell). */
#include "truth.h"

#define MAX_WAITERS (TRUTH_MAX_RECORDS - 2)

static long count = 100;
static long pause_ms = 2;
static long nwaiters = 2;
static const char *path = "./fsync_chain.data";
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int done;
static int fd = -1;
/* the holder's latest fdatasync() call: written before it unlocks, read by a waiter once it has the mutex */
static long long sync_from, sync_to, sync_slept;

static struct {
	pthread_t thread;
	volatile pid_t tid;
} waiters[MAX_WAITERS], holder_thread;

static const char help[] =
		"usage: %s [-t WAITERS] [-n COUNT] [-m MS] [-f FILE] [-h]\n"
		"  One thread named \"holder\" COUNT times locks a mutex, appends 64 KiB to FILE and fdatasync()s it,\n"
		"  unlocks, and sleeps MS ms; WAITERS threads named \"waiter\" lock and unlock the same mutex until\n"
		"  it is done. They and the main thread print their ground truth as JSON lines on stdout.\n"
		"  -t WAITERS  waiting threads (default 2)\n"
		"  -n COUNT    rounds of the holder (default 100)\n"
		"  -m MS       the holder's pause between rounds, in milliseconds (default 2)\n"
		"  -f FILE     the file written and synced (default ./fsync_chain.data; removed at exit)\n"
		"  -h          this help\n";

static void sleep_ms(long ms)
{
	struct timespec req = { ms / 1000, (ms % 1000) * 1000000L }, rem;

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &req, &rem) == EINTR)
		req = rem;
}

/* The calling thread's time runnable, waiting for a CPU so far (0 when schedstat cannot be read). */
static long long run_delay_ns(void)
{
	long long run = 0, delay = 0, slices = 0;

	truth_schedstat(&run, &delay, &slices);
	return delay;
}

static void *holder(void *arg)
{
	struct truth_snapshot start, end;
	long long synced_ns = 0, slept_ns = 0, held_ns = 0, runq_held_ns = 0, t0, t1, t2, d0, d1, c1;
	char block[4096];
	long i;

	truth_register(arg);
	pthread_setname_np(pthread_self(), "holder");
	memset(block, 'x', sizeof(block));
	truth_read(&start);
	for (i = 0; i < count; i++) {
		pthread_mutex_lock(&lock);
		t0 = truth_now_ns();
		d0 = run_delay_ns();
		/* appended: the file grows, so each fdatasync() commits the journal too */
		for (int k = 0; k < 16; k++) {
			if (write(fd, block, sizeof(block)) != sizeof(block)) {
				perror("holder: write");
				exit(1);
			}
		}
		d1 = run_delay_ns();
		c1 = truth_thread_cpu_ns();
		t1 = truth_now_ns();
		if (fdatasync(fd) != 0) {
			perror("holder: fdatasync");
			exit(1);
		}
		t2 = truth_now_ns(); /* first: the reads below are not the call's */
		synced_ns += t2 - t1;
		sync_slept = t2 - t1 - (truth_thread_cpu_ns() - c1) - (run_delay_ns() - d1);
		slept_ns += sync_slept;
		sync_from = t1;
		sync_to = t2;
		held_ns += truth_now_ns() - t0;
		runq_held_ns += run_delay_ns() - d0;
		pthread_mutex_unlock(&lock);
		sleep_ms(pause_ms);
	}
	done = 1;
	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record_extra("holder", count, synced_ns, &start, &end,
			   (const struct truth_counter[]){ { "held_ns", held_ns }, { "slept_ns", slept_ns },
							   { "runq_held_ns", runq_held_ns } }, 3);
	return NULL;
}

static void *waiter(void *arg)
{
	struct truth_snapshot start, end;
	long long blocked_ns = 0, in_sync_ns = 0, in_sync_slept_ns = 0, t0, t, a, b;
	long calls = 0;

	truth_register(arg);
	pthread_setname_np(pthread_self(), "waiter");
	truth_read(&start);
	while (!done) {
		t0 = truth_now_ns();
		pthread_mutex_lock(&lock);
		t = truth_now_ns();
		blocked_ns += t - t0;
		/* this wait's overlap with the holder's latest sync (none when it waited only behind a waiter) */
		a = t0 > sync_from ? t0 : sync_from;
		b = t < sync_to ? t : sync_to;
		if (b > a) {
			in_sync_ns += b - a;
			/* in floating point: the product of two long syncs' lengths would overflow */
			in_sync_slept_ns += (long long)((double)(b - a) * sync_slept / (sync_to - sync_from));
		}
		calls++;
		pthread_mutex_unlock(&lock);
		sleep_ms(1);
	}
	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record_extra("waiter", calls, blocked_ns, &start, &end,
			   (const struct truth_counter[]){ { "in_sync_ns", in_sync_ns },
							   { "in_sync_slept_ns", in_sync_slept_ns } }, 2);
	return NULL;
}

int main(int argc, char **argv)
{
	struct truth_snapshot start, end;
	long long t0;
	long i;
	int rc;

	truth_read(&start);
	for (i = 1; i < argc - 1; i++) { /* -f FILE: ours; the rest are truth_options' */
		if (strcmp(argv[i], "-f") == 0) {
			path = argv[i + 1];
			memmove(&argv[i], &argv[i + 2], (argc - i - 1) * sizeof(*argv));
			argc -= 2;
			break;
		}
	}
	truth_options_more(argc, argv, &count, &pause_ms,
			   (const struct truth_option[]){ { 't', &nwaiters, MAX_WAITERS } }, 1, help);
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	if (fd < 0) {
		fprintf(stderr, "%s: %s: %s\n", argv[0], path, strerror(errno));
		return 1;
	}
	rc = pthread_create(&holder_thread.thread, NULL, holder, (void *)&holder_thread.tid);
	for (i = 0; rc == 0 && i < nwaiters; i++)
		rc = pthread_create(&waiters[i].thread, NULL, waiter, (void *)&waiters[i].tid);
	if (rc != 0) {
		fprintf(stderr, "%s: pthread_create: %s\n", argv[0], strerror(rc));
		return 1;
	}
	t0 = truth_now_ns();
	truth_join(holder_thread.thread, &holder_thread.tid);
	for (i = 0; i < nwaiters; i++)
		truth_join(waiters[i].thread, &waiters[i].tid);
	close(fd);
	unlink(path);
	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("main", nwaiters + 1, truth_now_ns() - t0, &start, &end);
	truth_flush();
	return 0;
}
