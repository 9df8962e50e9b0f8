/* SPDX-License-Identifier: GPL-2.0 */
/* Per-interval extremes: the longest and the shortest value of each interval of user space's numbering,
 * two intervals at a time by the number's parity. User space numbers the next interval (an object's
 * .data.epoch) just before it reads the map that holds them, and takes a pair only when it carries the
 * number just ended; a value that lands between the numbering and the read is counted in that interval
 * and its extremes kept in the next one's. */
#ifndef STALLSCOPE_INTERVAL_H
#define STALLSCOPE_INTERVAL_H

struct ival_extremes {
	__u64 max_ns[2];
	__u64 min_ns[2];
	__u32 epoch[2];
};

#endif
