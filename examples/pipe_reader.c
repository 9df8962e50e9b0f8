/* Reproduces a thread "pipe-reader" blocked in read(2) on a pipe that "pipe-writer" feeds 1 byte every
 * 10 ms x 100 (-n, -m): a tracer should find ~1 s off-CPU for the reader in pipe_read (~100 voluntary
 * switches, woken by pipe-writer), and ~1 s for the writer in clock_nanosleep ("Application requested delay"). */
#include "truth.h"


static long count = 100;
static long interval_ms = 10;
static int pipefd[2];
static volatile pid_t reader_tid, writer_tid;

static const char help[] =
		"usage: %s [-n COUNT] [-m MS] [-h]\n"
		"  A thread named \"pipe-writer\" sleeps MS ms (clock_nanosleep, CLOCK_MONOTONIC, relative)\n"
		"  then writes 1 byte to a pipe, COUNT times; a thread named \"pipe-reader\" blocks in read(2)\n"
		"  for each byte.  Both, and the main thread, print their ground truth as JSON lines on stdout.\n"
		"  -n COUNT  number of bytes (default 100)\n"
		"  -m MS     interval between writes in milliseconds (default 10)\n"
		"  -h        this help\n";

static void *writer(void *arg)
{
	struct truth_snapshot start, end;
	struct timespec req, rem;
	long long blocked_ns = 0, t0;
	const char byte = 'x';
	ssize_t n;
	long i;
	int rc;

	(void)arg;
	truth_register(&writer_tid);
	pthread_setname_np(pthread_self(), "pipe-writer");
	truth_read(&start);

	/* count + 1 sleeps: the last one lets the reader, woken by the last byte, run (and perhaps
	 * preempt this thread) before the final snapshot rather than after it */
	for (i = 0; i <= count; i++) {
		req.tv_sec = interval_ms / 1000;
		req.tv_nsec = (interval_ms % 1000) * 1000000L;
		t0 = truth_now_ns();
		while ((rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &req, &rem)) == EINTR)
			req = rem;
		blocked_ns += truth_now_ns() - t0;
		if (rc != 0) {
			fprintf(stderr, "pipe-writer: clock_nanosleep: %s\n", strerror(rc));
			exit(1);
		}
		if (i == count)
			break;
		while ((n = write(pipefd[1], &byte, 1)) < 0 && errno == EINTR)
			;
		if (n != 1) {
			fprintf(stderr, "pipe-writer: write: %s\n", n < 0 ? strerror(errno) : "short write");
			exit(1);
		}
	}

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("pipe-writer", count + 1, blocked_ns, &start, &end);
	return NULL;
}

static void *reader(void *arg)
{
	struct truth_snapshot start, end;
	long long blocked_ns = 0, t0;
	char byte;
	ssize_t n;
	long i;

	(void)arg;
	truth_register(&reader_tid);
	pthread_setname_np(pthread_self(), "pipe-reader");
	truth_read(&start);

	for (i = 0; i < count; i++) {
		t0 = truth_now_ns();
		while ((n = read(pipefd[0], &byte, 1)) < 0 && errno == EINTR)
			;
		blocked_ns += truth_now_ns() - t0;
		if (n != 1) {
			fprintf(stderr, "pipe-reader: read: %s\n", n < 0 ? strerror(errno) : "end of file");
			exit(1);
		}
	}

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("pipe-reader", count, blocked_ns, &start, &end);
	return NULL;
}

int main(int argc, char **argv)
{
	struct truth_snapshot start, end;
	pthread_t rthread, wthread;
	long long blocked_ns = 0, t0;
	int rc;

	truth_read(&start);

	truth_options(argc, argv, &count, &interval_ms, help);

	if (pipe2(pipefd, O_CLOEXEC) != 0) {
		fprintf(stderr, "%s: pipe2: %s\n", argv[0], strerror(errno));
		return 1;
	}
	/* The reader first, so it is already waiting when the first byte arrives. */
	rc = pthread_create(&rthread, NULL, reader, NULL);
	if (rc == 0)
		rc = pthread_create(&wthread, NULL, writer, NULL);
	if (rc != 0) {
		fprintf(stderr, "%s: pthread_create: %s\n", argv[0], strerror(rc));
		return 1;
	}

	t0 = truth_now_ns();
	truth_join(wthread, &writer_tid);
	truth_join(rthread, &reader_tid);
	blocked_ns += truth_now_ns() - t0;
	close(pipefd[0]);
	close(pipefd[1]);

	truth_read(&end); /* last thing before the record; see truth.h */
	truth_record("main", 2, blocked_ns, &start, &end);
	truth_flush();
	return 0;
}
