/* CPU ns per system call (the thread's CPU time: preemption by other work is not counted): getppid, futex wake (no waiter), futex wait that returns EAGAIN */
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "getppid";
	long n = argc > 2 ? atol(argv[2]) : 10000000;
	static unsigned int word = 1;
	struct timespec a, b;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
	for (long i = 0; i < n; i++) {
		if (!strcmp(what, "getppid"))
			syscall(SYS_getppid);
		else if (!strcmp(what, "wake"))
			syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		else
			syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
	}
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
	printf("%s %.1f ns\n", what, ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
