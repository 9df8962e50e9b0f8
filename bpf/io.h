/* SPDX-License-Identifier: GPL-2.0 */
/* Structs that cross the BPF/user boundary for the block I/O probe.
 * Mirrored in bpf/abi.py; tests check the sizes against the object's BTF. */
#ifndef STALLSCOPE_IO_H
#define STALLSCOPE_IO_H

#ifndef TASK_COMM_LEN
#define TASK_COMM_LEN 16
#endif
#define IO_DISK_NAME_LEN 32
#define IO_TIME_SLOTS 40  /* log2(ns): slot s counts requests in [2^s, 2^(s+1)) ns */
#define IO_SIZE_SLOTS 32  /* log2(bytes) of a request's size */
#define IO_DEPTH_SLOTS 16 /* log2 of the requests at the device when one more is issued */

/* The operation groups of /proc/diskstats (enum stat_group, block/blk.h op_stat_group()) */
#define IO_OP_READ    0
#define IO_OP_WRITE   1
#define IO_OP_DISCARD 2
#define IO_OP_FLUSH   3
#define IO_OPS        4

/* One device's requests of one operation group. `dev` is the whole disk's dev_t as the kernel
 * encodes it (MAJOR << 20 | MINOR): /proc/diskstats' line for the disk counts its partitions too. */
struct io_key {
	__u32 dev;
	__u32 op; /* IO_OP_* */
};

/* Per CPU, cumulative (user space sums the CPUs and takes deltas). `requests`, `sectors` and
 * `total_ns` are what /proc/diskstats counts for the group, as the kernel counts them: requests
 * with RQF_IO_STAT and not RQF_FLUSH_SEQ at their last completion, the sectors of each (partial)
 * completion, and the time from the request's start to its completion; a flush sent to the device
 * by the flush machinery counts as one flush. The split into queued and device time (and the
 * histograms) covers the requests issued while the probe was attached (`timed`). */
struct io_stats {
	__u64 requests;
	__u64 sectors;
	__u64 total_ns;    /* rq->start_time_ns -> completion: diskstats' time (await = total_ns / requests) */
	__u64 timed;       /* of the requests, those seen at their issue */
	__u64 queued_ns;   /* ... start -> issue to the driver: plug, I/O scheduler, waiting for a tag */
	__u64 device_ns;   /* ... issue -> completion: at the driver and the device */
	__u64 bytes;       /* the timed requests' sizes at issue */
	__u64 unaccounted; /* completions the kernel does not account (passthrough, iostats off) */
	__u32 size_hist[IO_SIZE_SLOTS];   /* log2(bytes) of the timed requests */
	__u32 total_hist[IO_TIME_SLOTS];  /* log2(total_ns) of every counted request */
	__u32 queued_hist[IO_TIME_SLOTS];
	__u32 device_hist[IO_TIME_SLOTS];
};

/* One device (request-based: blk-mq) as a whole: what is at the device, shared by the CPUs. */
struct io_device {
	__s64 inflight;    /* issued, not yet completed (of the requests seen at their issue) */
	__u64 stamp;       /* the last issue or completion, ktime */
	__u64 busy_ns;     /* time with at least one request at the device: %util */
	__u64 issued;
	__u64 depth_sum;   /* the requests at the device after each issue, summed */
	__u32 depth_hist[IO_DEPTH_SLOTS]; /* log2 of that depth */
	char name[IO_DISK_NAME_LEN];
};

/* A request while it is in flight, by its address. */
struct io_req {
	__u64 issue_ns;    /* 0: not issued (yet, or requeued, or completed) */
	__u32 bytes;       /* its size when issued */
	__u32 pid;         /* submitter: current at block_io_start (block_rq_insert before 6.5) */
	__u32 tgid;
	__u32 ended;       /* completed, to be counted at block_io_done with these two times */
	__u64 queued_ns;
	__u64 device_ns;
	char comm[TASK_COMM_LEN];
};

/* Who submitted a device's requests: the task current when each began. */
struct io_submit_key {
	__u32 dev;
	__u32 op;
	__u32 tgid; /* 0: not seen (began before the probe was attached) */
	__u32 pad;
};

struct io_submit_val {
	__u64 requests;
	__u64 sectors;
	char comm[TASK_COMM_LEN];
};

/* What completes on this CPU (per CPU: the block_rq_complete just seen), read by a wakeup that
 * follows in the same context: a task blocked in I/O woken by that completion. */
struct io_completing {
	__u64 ts;
	__u64 context;     /* where it ran: current's pid, bit 32 set on an interrupt stack */
	__u64 total_ns;    /* the request's own latency, and its parts (0: not seen at its issue) */
	__u64 queued_ns;
	__u64 device_ns;
	__u32 dev;
	__u32 op;
	__u32 submit_tgid;
	__u32 pad;
	char submit_comm[TASK_COMM_LEN];
};

/* Waits of one task ended by one device's completions: a task in I/O wait (task->in_iowait) woken
 * in the context of a block_rq_complete just before, with the wait's stratum (its state, why and
 * function, as the scheduler probe keys its off-CPU time) so the time joins its cause. */
struct io_wake_key {
	__u32 pid;
	__u32 tgid;
	__u64 start_ns;   /* the wakee's start_boottime */
	__u32 dev;
	__u32 op;
	__u32 submit_tgid;
	__u32 state;      /* the wakee's wait: prev_state, why and func (0 without the scheduler's state) */
	__u64 func;
	__u32 why;
	__u32 pad;
};

struct io_wake_val {
	__u64 count;
	__u64 wait_ns;    /* the wakee's blocked time these wakeups ended (0 without the scheduler's state) */
	__u64 req_ns;     /* the waking requests' own latency (start -> completion), summed */
	__u64 timed;      /* of the wakeups, those whose request was seen at its issue: */
	__u64 queued_ns;  /* ... their queued and device time */
	__u64 device_ns;
	char submit_comm[TASK_COMM_LEN];
};

struct io_health {
	__u64 stats_map_full;
	__u64 device_map_full;
	__u64 req_map_full;
	__u64 submit_map_full;
	__u64 wake_map_full;
	__u64 untimed;        /* counted requests not seen at their issue (in flight at attach, or never issued) */
	__u64 wakes_unmatched; /* a task in I/O wait woken on a completion's stack with no wait of its own open */
	__u64 reissued;       /* a request issued again with no completion or requeue seen in between */
};

struct io_config {
	__u32 targ_tgid;         /* wake ties only for this process (devices are always whole) */
	__u32 self_tgid;
	__u32 wake_window_ns;    /* a wakeup this soon after a completion on the same stack is its */
	__u32 has_sched_state;   /* the scheduler's task storage is shared: waits have lengths and strata */
	__u32 thread_size;       /* THREAD_SIZE: a task's kernel stack */
	__u32 has_io_done;       /* block_io_done attached (6.5+): requests are counted there */
};

#endif
