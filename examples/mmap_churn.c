/* Reproduces kernel lock contention on one process's mm->mmap_lock (an rwsem): T threads "mmap-churn"
 * (-t, default 2, at most the CPUs) each do COUNT times (-n, default 2000): mmap an anonymous private
 * KiB region (-k, default 256), write one byte every 4 KiB (a page fault per page), munmap it.
 * mmap takes the lock for write in vm_mmap_pgoff, munmap in __vm_munmap; a page fault takes it for
 * read in lock_mm_and_find_vma (with per-VMA locks, 6.4+, only when lock_vma_under_rcu cannot serve
 * the fault, e.g. the first fault of a new region while a sibling holds the lock for write).  A
 * tracer should find the threads off-CPU in rwsem_down_read_slowpath from lock_mm_and_find_vma and
 * rwsem_down_write_slowpath from vm_mmap_pgoff and __vm_munmap, each waiting for a sibling.  The
 * siblings' regions often lie side by side and merge into one VMA, so mmap and munmap also wait in
 * __vma_start_write (a VMA lock, not mmap_lock) for a sibling's faults on that VMA; with -w each
 * thread maps at its own hint address, 1 GiB from its siblings', so that only mmap_lock is
 * contended.  blocked_ns is the time
 * inside mmap + munmap + the touching (the fault path), on- and off-CPU; "extra" splits it into
 * "mmap_ns", "munmap_ns" and "touch_ns", and gives "asleep_ns": the time the thread slept, all of it
 * inside those calls (the loop does nothing else): wall time less its CPU time
 * (CLOCK_THREAD_CPUTIME_ID) less its run-queue wait (schedstat), read once around the loop.  With no
 * more threads than CPUs that is waiting for a lock (a spinning waiter is on the CPU).  calls is COUNT: one mmap, its faults, one munmap each. */
#include "truth.h"

#include <sched.h>
#include <sys/mman.h>

#define MAX_THREADS (TRUTH_MAX_RECORDS - 1) /* one record each, and main's */
#define TOUCH_STRIDE 4096

static long count = 2000;
static long nthreads = 2;
static long kib = 256;
static long holder_mib; /* -w: 0, no holder thread */
static volatile int churning;
static struct {
	pthread_t thread;
	volatile pid_t tid;
} holder;

static struct {
	pthread_t thread;
	volatile pid_t tid;
} churners[MAX_THREADS];

static const char help[] =
		"usage: %s [-t THREADS] [-n COUNT] [-k KIB] [-h]\n"
		"  THREADS threads named \"mmap-churn\" each COUNT times mmap an anonymous private region of\n"
		"  KIB KiB, write one byte every 4 KiB (page faults), munmap it: contention on the process's\n"
		"  mmap_lock.  They and the main thread print their ground truth as JSON lines on stdout.\n"
		"  -t THREADS  number of threads (default 2, at most the CPUs this process may run on)\n"
		"  -n COUNT    mmap/touch/munmap rounds per thread (default 2000)\n"
		"  -k KIB      size of each region in KiB (default 256; under 2048 faults 4 KiB pages)\n"
		"  -w MIB      one more thread, \"mmap-holder\", holds mmap_lock for write (mprotect of a\n"
		"              populated MIB region) again and again while the others churn (default: none);\n"
		"              THREADS is then at most the CPUs less one\n"
		"  -h          this help\n";

/* This thread's run-queue wait so far (schedstat field 2), read through a descriptor kept open. */
static long long runq_wait_ns(int fd)
{
	char buf[128];
	long long run, wait;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return sscanf(buf, "%lld %lld", &run, &wait) == 2 ? wait : 0;
}

static void *churn(void *arg)
{
	volatile pid_t *tid = arg;
	struct truth_snapshot start, end;
	long long mmap_ns = 0, munmap_ns = 0, touch_ns = 0, t0, t1, t2, t3;
	long long wall_start, cpu_start, runq_start, asleep_ns;
	int schedstat;
	size_t size = (size_t)kib * 1024, off;
	volatile char *p;
	void *region;
	long i;

	/* a hint, not MAP_FIXED: the kernel takes it when the range is free */
	unsigned long index = ((const char *)tid - (const char *)&churners[0].tid) / sizeof(churners[0]);
	void *arena = holder_mib ? (void *)(0x200000000000UL + (index << 30)) : NULL;

	truth_register(tid);
	pthread_setname_np(pthread_self(), "mmap-churn");
	schedstat = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	truth_read(&start);
	/* the loop does nothing but mmap, touch and munmap: whatever this thread sleeps, it sleeps in
	 * them. Read once around the loop, not per call: each read is a syscall, a preemption point */
	runq_start = runq_wait_ns(schedstat);
	wall_start = truth_now_ns();
	cpu_start = truth_thread_cpu_ns();

	for (i = 0; i < count; i++) {
		t0 = truth_now_ns();
		region = mmap(arena, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		t1 = truth_now_ns();
		if (region == MAP_FAILED) {
			fprintf(stderr, "mmap-churn: mmap: %s\n", strerror(errno));
			exit(1);
		}
		p = region;
		for (off = 0; off < size; off += TOUCH_STRIDE)
			p[off] = 1;
		t2 = truth_now_ns();
		if (munmap(region, size) != 0) {
			fprintf(stderr, "mmap-churn: munmap: %s\n", strerror(errno));
			exit(1);
		}
		t3 = truth_now_ns();
		mmap_ns += t1 - t0;
		touch_ns += t2 - t1;
		munmap_ns += t3 - t2;
	}

	asleep_ns = truth_now_ns() - wall_start - (truth_thread_cpu_ns() - cpu_start) - (runq_wait_ns(schedstat) - runq_start);
	close(schedstat);
	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record_extra("mmap-churn", count, mmap_ns + munmap_ns + touch_ns, &start, &end,
			   (const struct truth_counter[]){ { "mmap_ns", mmap_ns },
							   { "munmap_ns", munmap_ns },
							   { "touch_ns", touch_ns },
							   { "asleep_ns", asleep_ns } },
			   4);
	return NULL;
}

/*
 * -w MIB: holds mmap_lock for write for long stretches while the churners run: mprotect() of a
 * populated MIB region rewrites every PTE with the lock held for write (change_protection), then a
 * pause of 200 us lets the waiters in.  Readers of mmap_lock (a churner's first fault in a new
 * region falls back to lock_mm_and_find_vma while the lock is write-held) sleep behind it.
 */
static void *hold(void *arg)
{
	volatile pid_t *tid = arg;
	struct truth_snapshot start, end;
	struct timespec pause = { 0, 200000 };
	size_t size = (size_t)holder_mib << 20;
	long long held_ns = 0, t0;
	long holds = 0;
	void *region;

	truth_register(tid);
	pthread_setname_np(pthread_self(), "mmap-holder");
	truth_read(&start);
	region = mmap((void *)0x300000000000UL, size, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (region == MAP_FAILED) {
		fprintf(stderr, "mmap-holder: mmap: %s\n", strerror(errno));
		exit(1);
	}
	while (__atomic_load_n(&churning, __ATOMIC_ACQUIRE)) {
		t0 = truth_now_ns();
		if (mprotect(region, size, PROT_READ) != 0 || mprotect(region, size, PROT_READ | PROT_WRITE) != 0) {
			fprintf(stderr, "mmap-holder: mprotect: %s\n", strerror(errno));
			exit(1);
		}
		held_ns += truth_now_ns() - t0;
		holds += 2;
		nanosleep(&pause, NULL);
	}
	munmap(region, size);
	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("mmap-holder", holds, held_ns, &start, &end);
	return NULL;
}

/* The CPUs this process may run on (its affinity mask), at least 1. */
static long usable_cpus(void)
{
	cpu_set_t set;
	long n = 0;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? n : 1;
}

int main(int argc, char **argv)
{
	struct truth_snapshot start, end;
	long long blocked_ns, t0;
	long cpus, max_threads, i;
	int rc;

	truth_read(&start);

	cpus = usable_cpus();
	max_threads = cpus < MAX_THREADS ? cpus : MAX_THREADS;
	if (nthreads > max_threads)
		nthreads = max_threads;
	truth_options_more(argc, argv, &count, NULL,
			   (const struct truth_option[]){ { 't', &nthreads, max_threads },
							  { 'k', &kib, 1024L * 1024 },
							  { 'w', &holder_mib, 64L * 1024 } },
			   3, help);
	if (holder_mib && nthreads >= cpus && nthreads > 1)
		nthreads = cpus - 1; /* the holder is one of the threads: no more than the CPUs */

	churning = 1;
	if (holder_mib) {
		rc = pthread_create(&holder.thread, NULL, hold, (void *)&holder.tid);
		if (rc != 0) {
			fprintf(stderr, "%s: pthread_create: %s\n", argv[0], strerror(rc));
			return 1;
		}
	}

	for (i = 0; i < nthreads; i++) {
		rc = pthread_create(&churners[i].thread, NULL, churn, (void *)&churners[i].tid);
		if (rc != 0) {
			fprintf(stderr, "%s: pthread_create: %s\n", argv[0], strerror(rc));
			return 1;
		}
	}
	t0 = truth_now_ns();
	for (i = 0; i < nthreads; i++)
		truth_join(churners[i].thread, &churners[i].tid);
	__atomic_store_n(&churning, 0, __ATOMIC_RELEASE);
	if (holder_mib)
		truth_join(holder.thread, &holder.tid);
	blocked_ns = truth_now_ns() - t0;

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("main", nthreads, blocked_ns, &start, &end);
	truth_flush();
	return 0;
}
