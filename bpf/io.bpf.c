// SPDX-License-Identifier: GPL-2.0
/* Block I/O per device and operation, from the request tracepoints, counted as /proc/diskstats
 * counts (block/blk-mq.c blk_account_io_done(), blk_account_io_completion(), block/blk-flush.c
 * blk_account_io_flush()), with each request's time split at its issue into queued and at the
 * device; the device's busy time and depth; who submitted; and which device's completion ended
 * the wait of a task blocked in I/O (tied at the wakeup).
 *
 * Request-based (blk-mq) devices only: a bio-based device (dm, md, zram, brd) makes no requests,
 * so these tracepoints never fire for it; the requests it passes on to the devices beneath are
 * counted there. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "sched_state.bpf.h"
#include "io.h"

char LICENSE[] SEC("license") = "GPL";

const volatile struct io_config cfg = {
	.wake_window_ns = 500000,
	.thread_size = 16384,
};

struct io_health health = {};

#include "maps.bpf.h"

#define REQ_OP_MASK 0xff      /* include/linux/blk_types.h: REQ_OP_BITS 8 */
#define OP_FLUSH 2            /* enum req_op */
#define OP_DISCARD 3

/* io_key -> per-CPU cumulative io_stats */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct io_key);
	__type(value, struct io_stats);
} stats SEC(".maps");

/* dev -> the device's in-flight requests, busy time and depth (shared by the CPUs) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct io_device);
} devices SEC(".maps");

/* struct request * -> its issue time and submitter, from its start to its last completion.
 * Requests come from per-tag pools: an entry whose completion was never seen is overwritten when
 * its request is used again, so the map holds at most the pools' requests. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct io_req);
} reqs SEC(".maps");

/* struct bio * of a bio-based device (dm, md, zram, brd) -> its start, size and submitter, from
 * block_bio_queue to block_bio_complete. LRU: an entry whose completion is never traced (a driver
 * that ends a bio otherwise) is evicted in time rather than filling the map. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct io_req);
} bios SEC(".maps");

/* io_submit_key -> requests and sectors by submitting process */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct io_submit_key);
	__type(value, struct io_submit_val);
} submitters SEC(".maps");

/* io_wake_key -> waits ended by a device's completions */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* user space deletes dead tasks' entries */
	__uint(max_entries, 16384);
	__type(key, struct io_wake_key);
	__type(value, struct io_wake_val);
} wakes SEC(".maps");

/* the completion this CPU runs now */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct io_completing);
} completing SEC(".maps");

/* an all-zero io_stats to create entries from (too large for the BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct io_stats);
} stats_zero SEC(".maps");

/* Where the traced event runs: the current task, and whether on an interrupt stack rather than the
 * task's own (`ctx`, the argument array bpf_trace_run() builds on the traced context's stack, lies
 * outside the task's stack; as the scheduler probe tells a waker in an interrupt). A wakeup in the
 * same context just after a completion is that completion's. */
static __always_inline __u64 context_of(void *ctx)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	__u64 here = (__u64)ctx, base = (__u64)cur->stack;
	__u64 irq = here < base || here >= base + cfg.thread_size;

	return (irq << 32) | (__u32)cur->pid;
}

/* A disk as user space names it: MAJOR << 20 | its first minor (a partition's I/O counts on its disk). */
static __always_inline __u32 disk_dev(struct gendisk *disk)
{
	return ((__u32)disk->major << 20) | (__u32)disk->first_minor;
}

static __always_inline __u32 rq_dev(struct request *rq)
{
	struct gendisk *disk = rq->q->disk;

	return disk ? disk_dev(disk) : 0;
}

/* RQF_* bits: bit indexes in enum rqf_flags on newer kernels (6.18 here), plain defines on older
 * ones (include/linux/blk-mq.h of 6.1: RQF_FLUSH_SEQ 1 << 4, RQF_IO_STAT 1 << 13) */
#define RQF_BIT(name, old) \
	(bpf_core_enum_value_exists(enum rqf_flags, name) ? 1U << bpf_core_enum_value(enum rqf_flags, name) : (old))
#define rq_flag(rq, name, old) (!!((rq)->rq_flags & RQF_BIT(name, old)))

/* The diskstats group of a request (op_stat_group()); a flush the flush machinery sends to the
 * device (RQF_FLUSH_SEQ, REQ_OP_FLUSH) is the one counted as a flush (blk_account_io_flush()). */
static __always_inline __u32 op_group(struct request *rq)
{
	__u32 op = rq->cmd_flags & REQ_OP_MASK;

	if (op == OP_FLUSH && rq_flag(rq, __RQF_FLUSH_SEQ, 1U << 4))
		return IO_OP_FLUSH;
	if (op == OP_DISCARD)
		return IO_OP_DISCARD;
	return op & 1;
}

static __always_inline struct io_device *device_of(struct gendisk *disk, __u32 dev)
{
	struct io_device *d = bpf_map_lookup_elem(&devices, &dev), init = {};

	if (d)
		return d;
	if (disk)
		bpf_probe_read_kernel_str(init.name, sizeof(init.name), disk->disk_name);
	return lookup_or_init(&devices, &dev, &init, &health.device_map_full);
}

/* The device's busy time as the kernel keeps io_ticks (block/blk-core.c update_io_ticks()): the
 * span since the last event is busy when a request was at the device throughout it; the exchange
 * of the stamp gives each span to one CPU. */
static __always_inline void tick(struct io_device *d, __u64 now, bool busy)
{
	__u64 stamp = *(volatile __u64 *)&d->stamp;

	if (now > stamp && __sync_val_compare_and_swap(&d->stamp, stamp, now) == stamp && busy && stamp)
		__sync_fetch_and_add(&d->busy_ns, now - stamp);
}

/* One more request (or bio) at the device: its depth just after, and the busy time up to now. */
static __always_inline void device_issued(struct io_device *d, __u64 now)
{
	__s64 before = __sync_fetch_and_add(&d->inflight, 1);
	__u64 depth = before >= 0 ? before + 1 : 1;

	tick(d, now, before > 0);
	__sync_fetch_and_add(&d->issued, 1);
	__sync_fetch_and_add(&d->depth_sum, depth);
	__sync_fetch_and_add(&d->depth_hist[log2_of(depth, IO_DEPTH_SLOTS)], 1);
}

/* One fewer at the device: it completed (`now`), or its completion was never seen (0: no busy time). */
static __always_inline void device_left(__u32 dev, __u64 now)
{
	struct io_device *d = bpf_map_lookup_elem(&devices, &dev);

	if (!d)
		return;
	__sync_fetch_and_add(&d->inflight, -1);
	if (now)
		tick(d, now, true);
}

static __always_inline void note_submitter(struct request *rq)
{
	__u64 key = (__u64)rq;
	struct task_struct *cur = bpf_get_current_task_btf();
	struct io_req *old = bpf_map_lookup_elem(&reqs, &key), r = { .pid = cur->pid, .tgid = cur->tgid };

	if (old && old->issue_ns) {
		/* left from an earlier life of this request, its completion not seen: no longer at the device */
		device_left(rq_dev(rq), 0);
		__sync_fetch_and_add(&health.reissued, 1);
	}
	__builtin_memcpy(r.comm, cur->comm, TASK_COMM_LEN);
	if (bpf_map_update_elem(&reqs, &key, &r, BPF_ANY) == -E2BIG)
		__sync_fetch_and_add(&health.req_map_full, 1);
}

/* blk_account_io_start() (6.5+): the request begins, in the submitter's context (the task that
 * called submit_bio, or the plug's owner when it flushes). */
SEC("tp_btf/block_io_start")
int BPF_PROG(block_io_start, struct request *rq)
{
	note_submitter(rq);
	return 0;
}

/* Before 6.5: the submitter as the request enters the scheduler or the plug list (a request
 * issued directly to the driver has none). */
SEC("tp_btf/block_rq_insert")
int BPF_PROG(block_rq_insert, struct request *rq)
{
	__u64 key = (__u64)rq;

	if (!bpf_map_lookup_elem(&reqs, &key))
		note_submitter(rq);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(block_rq_issue, struct request *rq)
{
	__u64 key = (__u64)rq, now = bpf_ktime_get_ns(), was;
	__u32 dev = rq_dev(rq);
	struct io_req *r, init = {};
	struct io_device *d;

	if (!dev)
		return 0;
	r = lookup_or_init(&reqs, &key, &init, &health.req_map_full);
	if (!r)
		return 0;
	was = r->issue_ns;
	r->issue_ns = now;
	r->bytes = rq->__data_len;
	d = device_of(rq->q->disk, dev);
	if (!d)
		return 0;
	if (was) {
		/* an entry left from an earlier life of this request (requests are reused from a
		 * per-tag pool) whose completion was not seen: it already counts as at the device */
		__sync_fetch_and_add(&health.reissued, 1);
		return 0;
	}
	device_issued(d, now);
	return 0;
}

/* Back to the queue after its issue (the driver was busy): no longer at the device. */
SEC("tp_btf/block_rq_requeue")
int BPF_PROG(block_rq_requeue, struct request *rq)
{
	__u64 key = (__u64)rq;
	struct io_req *r = bpf_map_lookup_elem(&reqs, &key);

	if (!r || !r->issue_ns)
		return 0;
	r->issue_ns = 0;
	device_left(rq_dev(rq), bpf_ktime_get_ns());
	return 0;
}

static __always_inline struct io_stats *stats_of(__u32 dev, __u32 op)
{
	struct io_key key = { .dev = dev, .op = op };
	struct io_stats *s = bpf_map_lookup_elem(&stats, &key), *zero;
	__u32 k0 = 0;

	if (s)
		return s;
	zero = bpf_map_lookup_elem(&stats_zero, &k0);
	if (!zero)
		return NULL;
	return lookup_or_init(&stats, &key, zero, &health.stats_map_full);
}

static __always_inline void count_submitter(__u32 dev, __u32 op, struct io_req *r, __u64 sectors, bool done)
{
	struct io_submit_key key = { .dev = dev, .op = op, .tgid = r ? r->tgid : 0 };
	struct io_submit_val *v, init = {};

	if (r)
		__builtin_memcpy(init.comm, r->comm, TASK_COMM_LEN);
	v = lookup_or_init(&submitters, &key, &init, &health.submit_map_full);
	if (!v)
		return;
	if (done)
		__sync_fetch_and_add(&v->requests, 1);
	__sync_fetch_and_add(&v->sectors, sectors);
}

/* A request's end as diskstats counts it: one request in its group, its time from its start, and,
 * when it was seen at its issue, that time split into queued and at the device. */
static __always_inline void count_request(struct io_stats *s, __u64 total, __u64 queued, __u64 device, __u32 bytes)
{
	s->requests += 1;
	s->total_ns += total;
	s->total_hist[log2_of(total, IO_TIME_SLOTS)] += 1;
	if (device) {
		s->timed += 1;
		s->queued_ns += queued;
		s->device_ns += device;
		s->bytes += bytes;
		s->queued_hist[log2_of(queued, IO_TIME_SLOTS)] += 1;
		s->device_hist[log2_of(device, IO_TIME_SLOTS)] += 1;
		if (bytes)
			s->size_hist[log2_of(bytes, IO_SIZE_SLOTS)] += 1;
	} else {
		__sync_fetch_and_add(&health.untimed, 1);
	}
}

/* What this CPU completes now, for the wakeups the completion makes (io_waking reads it). */
static __always_inline void note_completing(void *ctx, __u64 now, __u32 dev, __u32 op, __u64 total, __u64 queued,
					    __u64 device, struct io_req *r)
{
	__u32 k0 = 0;
	struct io_completing *c = bpf_map_lookup_elem(&completing, &k0);

	if (!c)
		return;
	c->ts = now;
	c->context = context_of(ctx);
	c->dev = dev;
	c->op = op;
	c->total_ns = total;
	c->queued_ns = queued;
	c->device_ns = device;
	c->submit_tgid = r ? r->tgid : 0;
	if (r)
		__builtin_memcpy(c->submit_comm, r->comm, TASK_COMM_LEN);
	else
		__builtin_memset(c->submit_comm, 0, TASK_COMM_LEN);
}

/* blk_update_request() and blk_complete_request(): `nr_bytes` of the request completed; it is
 * done when they cover what remains (partial completions fire this again). Sectors are counted
 * here, as blk_account_io_completion() counts them; the request itself where the kernel counts
 * it: at block_io_done (6.5+), after its bios' completions ran, with the time the kernel adds to
 * diskstats (from rq->start_time_ns to just before blk_account_io_done()), else here. A device
 * flush is counted here (blk_account_io_flush(), which that tracepoint does not see). */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq, now = bpf_ktime_get_ns(), start = rq->start_time_ns, sectors = 0;
	__u64 total = 0, queued = 0, device = 0;
	__u32 dev = rq_dev(rq), op;
	bool io_stat, flush_seq, done, counted, later;
	struct io_stats *s;
	struct io_req *r;

	if (!dev)
		return 0;
	op = op_group(rq);
	io_stat = rq_flag(rq, __RQF_IO_STAT, 1U << 13);
	flush_seq = rq_flag(rq, __RQF_FLUSH_SEQ, 1U << 4);
	done = !rq->bio || nr_bytes >= rq->__data_len;
	/* blk_account_io_done() for a request's end, blk_account_io_flush() for a device flush */
	counted = done && (op == IO_OP_FLUSH || (io_stat && !flush_seq));
	later = counted && op != IO_OP_FLUSH && cfg.has_io_done;
	if (io_stat && rq->bio && rq->part)
		sectors = nr_bytes >> 9; /* blk_account_io_completion() */
	r = bpf_map_lookup_elem(&reqs, &key);
	if (start && now > start)
		total = now - start;
	if (r && r->issue_ns && now > r->issue_ns) {
		device = now - r->issue_ns;
		if (start && r->issue_ns > start)
			queued = r->issue_ns - start;
	}
	/* plain adds: the counts are per CPU, and each field has one writer program (block_io_done
	 * counts requests of the groups it sees, this one the sectors and the flushes), which never
	 * runs nested in itself on one CPU (a nested run is refused and counted as a recursion miss) */
	s = stats_of(dev, op);
	if (s) {
		if (counted && !later)
			count_request(s, total, queued, device, r ? r->bytes : 0);
		else if (done && !io_stat && !flush_seq)
			s->unaccounted += 1;
		if (sectors)
			s->sectors += sectors;
	}
	if ((counted && !later) || sectors)
		count_submitter(dev, op, r, sectors, counted && !later);
	note_completing(ctx, now, dev, op, total, queued, device, r);
	if (done && r) {
		if (r->issue_ns)
			device_left(dev, now);
		if (later) {
			/* no longer at the device; counted at block_io_done with these times */
			r->ended = 1;
			r->queued_ns = queued;
			r->device_ns = device;
			r->issue_ns = 0;
		} else {
			bpf_map_delete_elem(&reqs, &key);
		}
	}
	return 0;
}

/* blk_account_io_done() (6.5+), just after the kernel took the time it adds to diskstats: the
 * request's end counted, its time from its start to now (the completions of its bios, and the
 * wakeups they made, included, as in diskstats and in what the waiting program sees). */
SEC("tp_btf/block_io_done")
int BPF_PROG(block_io_done, struct request *rq)
{
	__u64 key = (__u64)rq, now = bpf_ktime_get_ns(), start = rq->start_time_ns, total = 0;
	__u32 dev = rq_dev(rq), op;
	struct io_req *r, *t;
	struct io_stats *s;

	if (!dev)
		return 0;
	op = op_group(rq);
	r = bpf_map_lookup_elem(&reqs, &key);
	if (op == IO_OP_FLUSH || !rq_flag(rq, __RQF_IO_STAT, 1U << 13) || rq_flag(rq, __RQF_FLUSH_SEQ, 1U << 4)) {
		if (r && r->ended)
			bpf_map_delete_elem(&reqs, &key);
		return 0;
	}
	if (start && now > start)
		total = now - start;
	t = r && r->ended ? r : NULL; /* its completion seen: its times */
	if (r && !r->ended && r->issue_ns)
		device_left(dev, 0); /* its completion was not seen (the kernel did not run that program) */
	s = stats_of(dev, op);
	if (s)
		count_request(s, total, t ? t->queued_ns : 0, t ? t->device_ns : 0, t ? t->bytes : 0);
	count_submitter(dev, op, r, 0, true);
	if (r)
		bpf_map_delete_elem(&reqs, &key);
	return 0;
}

/* ---- bio-based devices: no requests, so the request tracepoints never fire for them; their bios
 * are seen from block_bio_queue (submit_bio, which marks the bio for block_bio_complete) to
 * block_bio_complete (bio_endio, before the bio's end_io wakes its waiter). A bio is what their
 * drivers account in /proc/diskstats (bio_start_io_acct() / bio_end_io_acct()), each as they choose
 * (zram accounts reads and writes). All of a bio's time is the driver's: none is queued. */

static __always_inline struct gendisk *bio_based_disk(struct bio *bio)
{
	struct block_device *bdev = bio->bi_bdev;
	struct gendisk *disk;

	if (!bdev)
		return NULL;
	disk = bdev->bd_disk;
	if (!disk || !disk->queue || disk->queue->mq_ops)
		return NULL; /* a blk-mq device: its requests are counted */
	return disk;
}

static __always_inline __u32 bio_op_group(struct bio *bio)
{
	__u32 op = bio->bi_opf & REQ_OP_MASK;

	if (op == OP_DISCARD)
		return IO_OP_DISCARD;
	return op & 1;
}

SEC("tp_btf/block_bio_queue")
int BPF_PROG(block_bio_queue, struct bio *bio)
{
	__u64 key = (__u64)bio, now = bpf_ktime_get_ns();
	struct task_struct *cur = bpf_get_current_task_btf();
	struct gendisk *disk = bio_based_disk(bio);
	struct io_req r = {};
	struct io_device *d;
	__u32 dev;

	if (!disk)
		return 0;
	dev = disk_dev(disk);
	r.issue_ns = now;
	r.bytes = bio->bi_iter.bi_size;
	r.pid = cur->pid;
	r.tgid = cur->tgid;
	__builtin_memcpy(r.comm, cur->comm, TASK_COMM_LEN);
	if (bpf_map_update_elem(&bios, &key, &r, BPF_ANY) == -E2BIG) {
		__sync_fetch_and_add(&health.req_map_full, 1);
		return 0;
	}
	d = device_of(disk, dev);
	if (d)
		device_issued(d, now);
	return 0;
}

SEC("tp_btf/block_bio_complete")
int BPF_PROG(block_bio_complete, struct request_queue *q, struct bio *bio)
{
	__u64 key = (__u64)bio, now = bpf_ktime_get_ns(), start, total;
	struct gendisk *disk = bio_based_disk(bio);
	struct io_stats *s;
	struct io_req *r;
	__u32 dev, op, bytes;

	if (!disk)
		return 0;
	dev = disk_dev(disk);
	op = bio_op_group(bio);
	r = bpf_map_lookup_elem(&bios, &key);
	if (!r) {
		/* submitted before the probe was attached, or its entry evicted: not counted (a loss,
		 * as io.completions_lost reports it) */
		__sync_fetch_and_add(&health.untimed, 1);
		return 0;
	}
	start = r->issue_ns;
	bytes = r->bytes;
	total = now > start ? now - start : 0;
	/* plain adds: a bio-based device's entries have this one writer */
	s = stats_of(dev, op);
	if (s) {
		count_request(s, total, 0, total, bytes);
		s->sectors += bytes >> 9;
	}
	count_submitter(dev, op, r, bytes >> 9, true);
	note_completing(ctx, now, dev, op, total, 0, total, r);
	device_left(dev, now);
	bpf_map_delete_elem(&bios, &key);
	return 0;
}

/* Linux AIO's io_getevents() and io_pgetevents() (x86_64's numbers; asm-generic's): a task waiting there for
 * the completions of its asynchronous I/O sleeps without in_iowait, woken by the completion itself. */
static __always_inline bool waits_for_aio(__u32 why)
{
	if (((why & WHY_CTX_MASK) >> WHY_CTX_SHIFT) != WHY_CTX_SYSCALL)
		return false;
	switch (why & WHY_SYSCALL_MASK) {
#if defined(__TARGET_ARCH_x86)
	case 208: case 333:
#elif defined(__TARGET_ARCH_arm64)
	case 4: case 292:
#endif
		return true;
	}
	return false;
}

/* A wakeup on the stack of a completion this CPU ran just before, of a task blocked in I/O
 * (io_schedule() sets in_iowait), or in io_getevents() for its AIO: that device's completion ended the wait. The scheduler's own
 * sched_waking program (attached first, so it runs first) has closed the wait by now: its length
 * and stratum are read from the shared task storage. */
SEC("tp_btf/sched_waking")
int BPF_PROG(io_waking, struct task_struct *p)
{
	struct task_struct *wakee = p; /* BPF_CORE_READ_BITFIELD() has a `p` of its own */
	struct io_completing *c;
	struct io_wake_val *v, init = {};
	struct task_stats *s;
	__u64 now, wait = 0;
	__u32 k0 = 0;

	c = bpf_map_lookup_elem(&completing, &k0);
	if (!c || !c->ts || c->context != context_of(ctx))
		return 0;
	now = bpf_ktime_get_ns();
	if (now - c->ts > cfg.wake_window_ns)
		return 0;
	if (cfg.targ_tgid && p->tgid != cfg.targ_tgid)
		return 0;
	/* the cheap tests first: the task storage is looked up only for a wakeup within the window */
	s = cfg.has_sched_state ? bpf_task_storage_get(&task_stats, p, 0, 0) : NULL;
	if (!BPF_CORE_READ_BITFIELD(wakee, in_iowait) && !(s && waits_for_aio(s->why)))
		return 0;
	{
		struct io_wake_key key = {
			.pid = p->pid, .tgid = p->tgid, .start_ns = p->start_boottime,
			.dev = c->dev, .op = c->op, .submit_tgid = c->submit_tgid,
		};

		if (s) {
			__u64 mark = *(volatile __u64 *)&s->mark;

			if (mark && s->block_ts && now > s->block_ts)
				wait = now - s->block_ts; /* not closed yet: the scheduler's program ran second */
			else if (s->woken && s->last_woken_ts && now >= s->last_woken_ts &&
				 now - s->last_woken_ts < cfg.wake_window_ns && s->last_woken_ts > s->last_block_ts)
				wait = s->last_woken_ts - s->last_block_ts; /* closed by this very wakeup */
			if (!wait) {
				__sync_fetch_and_add(&health.wakes_unmatched, 1);
				return 0;
			}
			key.state = s->state;
			key.why = s->why;
			key.func = s->func;
		}
		__builtin_memcpy(init.submit_comm, c->submit_comm, TASK_COMM_LEN);
		v = lookup_or_init(&wakes, &key, &init, &health.wake_map_full);
		if (!v)
			return 0;
		__sync_fetch_and_add(&v->count, 1);
		__sync_fetch_and_add(&v->wait_ns, wait);
		__sync_fetch_and_add(&v->req_ns, c->total_ns);
		if (c->device_ns) {
			__sync_fetch_and_add(&v->timed, 1);
			__sync_fetch_and_add(&v->queued_ns, c->queued_ns);
			__sync_fetch_and_add(&v->device_ns, c->device_ns);
		}
	}
	return 0;
}
