/* SPDX-License-Identifier: GPL-2.0 */
/* Per-interval extremes: the longest and the shortest value of each interval of user space's numbering,
 * two intervals at a time by the number's parity. User space numbers the next interval (an object's
 * .data.epoch) just before it reads the map that holds them, and takes the pair that carries the number
 * just ended. A value that lands between the numbering and the read is counted in that interval and kept
 * in the next number's pair: user space takes that pair too when the same read finds it, so that an
 * interval's extremes cover every value it counted, and holds a longest to its interval's total (the next
 * interval's pair still holds that value; bpf/abi.py extremes, bounded). */
#ifndef STALLSCOPE_INTERVAL_H
#define STALLSCOPE_INTERVAL_H

struct ival_extremes {
	__u64 max_ns[2];
	__u64 min_ns[2];
	__u32 epoch[2];
};

#endif
