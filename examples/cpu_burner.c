/* Known on-CPU behaviour for a sampling profiler: T threads named "burner" (-t, default 2) each burn
 * MS ms of their own CPU time (-m, default 1500; CLOCK_THREAD_CPUTIME_ID, so the amount is the same on
 * a loaded machine, only the wall time grows) in a function of their own: thread i in
 * burn_alpha, burn_beta, burn_gamma or burn_delta (i modulo 4). One thread named "idler" sleeps until
 * they are done. A profiler should find each burner's samples x period close to its schedstat run
 * time, its top self function the one it burns in, and ~0 samples for the idler.  Each burner's truth
 * record has the role of its function's name; calls is the number of CPU-time checks (one
 * clock_gettime() syscall per ~0.5 ms of burning: the rest of its time is in user mode). */
#include "truth.h"

#define MAX_THREADS (TRUTH_MAX_RECORDS - 2) /* one record each, the idler's and main's */
#define SPIN 200000                         /* LCG steps between CPU-time checks: ~0.2-0.5 ms */

static long burn_ms = 1500;
static long nthreads = 2;
static volatile int burners_done;

static struct {
	pthread_t thread;
	volatile pid_t tid;
	int index;
} burners[MAX_THREADS];

static struct {
	pthread_t thread;
	volatile pid_t tid;
} idler_thread;

static const char help[] =
		"usage: %s [-t THREADS] [-m MS] [-h]\n"
		"  THREADS threads named \"burner\" each burn MS ms of their own CPU time in a function of\n"
		"  their own (burn_alpha, burn_beta, burn_gamma, burn_delta, in turn); a thread named\n"
		"  \"idler\" sleeps meanwhile. All print their ground truth as JSON lines on stdout.\n"
		"  -t THREADS  number of burning threads (default 2)\n"
		"  -m MS       CPU time each burns, in milliseconds (default 1500)\n"
		"  -h          this help\n";

/*
 * The burning functions. noipa: not inlined, not cloned (no .constprop names) and not folded into one
 * by identical-code folding (-fipa-icf is on at -O2), so each keeps its own symbol. Their LCG
 * increments differ for the same reason. Each returns its number of CPU-time checks.
 */
#define BURN(name, inc)                                                                   \
	__attribute__((noipa)) long name(long long until_ns, unsigned long *sink)        \
	{                                                                                 \
		unsigned long x = *sink;                                                  \
		long checks = 0;                                                          \
		int i;                                                                    \
                                                                                          \
		do {                                                                      \
			for (i = 0; i < SPIN; i++)                                        \
				x = x * 6364136223846793005UL + (inc);                    \
			checks++;                                                         \
		} while (truth_thread_cpu_ns() < until_ns);                                     \
		*sink = x;                                                                \
		return checks;                                                            \
	}

BURN(burn_alpha, 1)
BURN(burn_beta, 3)
BURN(burn_gamma, 5)
BURN(burn_delta, 7)

static long (*const burn_fns[4])(long long, unsigned long *) = { burn_alpha, burn_beta, burn_gamma, burn_delta };
static const char *const burn_names[4] = { "burn_alpha", "burn_beta", "burn_gamma", "burn_delta" };

static void *burner(void *arg)
{
	int index = *(int *)arg;
	struct truth_snapshot start, end;
	unsigned long sink = (unsigned long)index;
	long checks;

	truth_register(&burners[index].tid);
	pthread_setname_np(pthread_self(), "burner");
	truth_read(&start);
	checks = burn_fns[index % 4](truth_thread_cpu_ns() + burn_ms * 1000000LL, &sink);
	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record(burn_names[index % 4], checks, 0, &start, &end);
	return (void *)(sink & 1); /* keeps the result alive */
}

static void *idler(void *arg)
{
	struct timespec nap = { 0, 50 * 1000 * 1000 };
	struct truth_snapshot start, end;
	long long blocked_ns = 0, t0;
	long naps = 0;

	(void)arg;
	truth_register(&idler_thread.tid);
	pthread_setname_np(pthread_self(), "idler");
	truth_read(&start);
	while (!__atomic_load_n(&burners_done, __ATOMIC_ACQUIRE)) {
		t0 = truth_now_ns();
		nanosleep(&nap, NULL);
		blocked_ns += truth_now_ns() - t0;
		naps++;
	}
	truth_read(&end);
	truth_record("idler", naps, blocked_ns, &start, &end);
	return NULL;
}

int main(int argc, char **argv)
{
	struct truth_snapshot start, end;
	long long blocked_ns, t0;
	long count = 1;
	long i;
	int rc;

	truth_read(&start);
	truth_options_more(argc, argv, &count, &burn_ms,
			   (const struct truth_option[]){ { 't', &nthreads, MAX_THREADS } }, 1, help);

	rc = pthread_create(&idler_thread.thread, NULL, idler, NULL);
	for (i = 0; rc == 0 && i < nthreads; i++) {
		burners[i].index = (int)i;
		rc = pthread_create(&burners[i].thread, NULL, burner, &burners[i].index);
	}
	if (rc != 0) {
		fprintf(stderr, "%s: pthread_create: %s\n", argv[0], strerror(rc));
		return 1;
	}
	t0 = truth_now_ns();
	for (i = 0; i < nthreads; i++)
		truth_join(burners[i].thread, &burners[i].tid);
	__atomic_store_n(&burners_done, 1, __ATOMIC_RELEASE);
	truth_join(idler_thread.thread, &idler_thread.tid);
	blocked_ns = truth_now_ns() - t0;

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("main", nthreads, blocked_ns, &start, &end);
	truth_flush();
	return 0;
}
