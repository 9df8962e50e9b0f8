/* SPDX-License-Identifier: GPL-2.0 */
/* A histogram's log2 slot, shared by the probe objects; plain C (tests/test_log2_buckets.py builds it natively). */
#ifndef STALLSCOPE_LOG2_H
#define STALLSCOPE_LOG2_H

/* floor(log2(v)) (0 for v of 0 or 1), at most slots - 1: a histogram's slot. Shifts and adds only: the verifier
 * follows one path through it. A branch per step (if (v >> 32) { v >>= 32; r += 32; } ...) gave each caller 64 paths,
 * each with its own constant slot, which it then verified one by one with all that follows: most of sched_switch's
 * and block_rq_complete's verification. Each step of width w: x = v >> w is below 2^w, so (x + 2^w - 1) >> w is 1
 * if x is not 0, else 0. */
static __always_inline __u32 log2_of(__u64 v, __u32 slots)
{
	__u64 r, s;

	r = ((v >> 32) + 0xffffffffULL) >> 32 << 5;
	v >>= r;
	s = ((v >> 16) + 0xffffULL) >> 16 << 4;
	v >>= s;
	r |= s;
	s = ((v >> 8) + 0xffULL) >> 8 << 3;
	v >>= s;
	r |= s;
	s = ((v >> 4) + 0xfULL) >> 4 << 2;
	v >>= s;
	r |= s;
	s = ((v >> 2) + 0x3ULL) >> 2 << 1;
	v >>= s;
	r |= s;
	r |= v >> 1;
	return r < slots ? (__u32)r : slots - 1;
}

#endif
