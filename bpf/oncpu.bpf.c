// SPDX-License-Identifier: GPL-2.0
/* On-CPU sampling: a perf_event program on one software cpu-clock event per
 * CPU counts samples per (thread, kernel stack, user stack) in the kernel, so
 * user space does nothing per sample. The idle task's samples are counted per
 * CPU only: with the busy ones they give each CPU's utilisation. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "oncpu.h"

char LICENSE[] SEC("license") = "GPL";

const volatile struct oncpu_config cfg = {
	.user_stacks = 1,
	.kernel_stacks = 1,
};

struct oncpu_health health = {};

#include "maps.bpf.h"
#include "stacks.bpf.h"

/* oncpu_key -> cumulative oncpu_val */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* user space deletes dead threads' entries */
	__uint(max_entries, 65536);
	__type(key, struct oncpu_key);
	__type(value, struct oncpu_val);
} oncpu SEC(".maps");

/* CPU -> its sample totals */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct oncpu_cpu);
} cpu_samples SEC(".maps");

static __always_inline bool interrupted_user_mode(struct bpf_perf_event_data *ctx)
{
	/* The interrupted instruction's address: user space is the lower half of
	 * the address space on 64-bit x86 and arm64. (pt_regs->cs is a u16 since
	 * 6.6's FRED layout, and the context allows only 8-byte loads of regs.) */
	return (long)PT_REGS_IP(&ctx->regs) >= 0;
}

/* No walk budget: at most one kernel and one user walk per sample, so the
 * sampling frequency (--sample-hz) bounds the walks per CPU. */
static __always_inline __u64 kernel_stack(struct bpf_perf_event_data *ctx)
{
	struct stack *buf;

	if (!cfg.kernel_stacks)
		return STACK_NONE;
	if (interrupted_user_mode(ctx))
		return STACK_USER_MODE;
	buf = scratch();
	if (!buf)
		return STACK_FAILED;
	/* from the interrupted registers: the perf and BPF frames are not in it */
	return intern_stack(buf, bpf_get_stack(ctx, buf, sizeof(*buf), 0));
}

static __always_inline __u64 user_stack(struct bpf_perf_event_data *ctx, struct task_struct *cur)
{
	struct stack *buf;
	long len;

	if (!cfg.user_stacks || !cur->mm)
		return STACK_NONE; /* kernel threads have no user stack */
	buf = scratch();
	if (!buf)
		return STACK_FAILED;
	/* frame pointers from the task's saved user registers, also when the
	 * sample interrupted the kernel */
	len = bpf_get_stack(ctx, buf, sizeof(*buf), BPF_F_USER_STACK);
	if (len <= 0) {
		__sync_fetch_and_add(&health.user_stack_errors, 1);
		return STACK_FAILED;
	}
	return intern_stack(buf, len);
}

SEC("perf_event")
int oncpu_sample(struct bpf_perf_event_data *ctx)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	/* cpu-clock converts a frequency to a fixed period in ns at event creation
	 * (perf_swevent_init_hrtimer()), and each sample carries it */
	__u64 period = ctx->sample_period;
	struct oncpu_val *v, init = {};
	struct oncpu_key key = {};
	struct oncpu_cpu *c;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&cpu_samples, &zero);
	if (c) {
		/* per-CPU value, and perf_event programs do not nest on a CPU */
		c->samples++;
		c->period_ns += period;
	}
	if (cur->pid == 0) {
		if (c) {
			c->idle_samples++;
			c->idle_ns += period;
		}
		return 0;
	}
	/* other processes' samples stay in the CPU totals only */
	if (cfg.targ_tgid && cur->tgid != cfg.targ_tgid)
		return 0;
	key.pid = cur->pid;
	key.tgid = cur->tgid;
	key.start_ns = cur->start_boottime;
	key.kstack = kernel_stack(ctx);
	key.ustack = user_stack(ctx, cur);
	bpf_probe_read_kernel_str(init.comm, sizeof(init.comm), cur->comm);
	v = lookup_or_init(&oncpu, &key, &init, &health.oncpu_map_full);
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->samples, 1);
	__sync_fetch_and_add(&v->period_ns, period);
	return 0;
}
