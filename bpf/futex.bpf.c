// SPDX-License-Identifier: GPL-2.0
/* User-space lock contention: futex waits, from syscall entry to exit, aggregated
 * per (waiter, futex word, user stack, lock call site).
 *
 * Three ways in, the first this kernel allows (user space picks, see
 * bpf/futex_collector.py):
 * - sched_switch: a wait is a sleep inside a futex call, seen at the
 *   scheduler (see futex_switch): no system call is traced at all.
 * - tracepoint: classic tracepoint programs on syscalls:sys_enter_futex,
 *   sys_exit_futex and the futex_waitv / futex_wait pairs, attached through
 *   perf_event_open of their tracefs ids. perf_syscall_enter() tests a bitmap
 *   of enabled syscalls before it runs any program (kernel/trace/trace_syscalls.c),
 *   so other system calls run no BPF; they still take the syscall-tracepoint
 *   slow path (syscall_trace_enter/exit) while any syscall tracepoint is on.
 * - tp_btf: the generic tp_btf/sys_enter and sys_exit, which fire for every
 *   system call on the machine, filtered by syscall number (per-syscall events
 *   exist only as tracefs tracepoints, not raw tracepoints).
 *
 * Debian's libc is built without frame pointers, so a frame-pointer walk from
 * the futex syscall skips the function that called pthread_mutex_lock. A uprobe
 * in the libc lock functions, on their calls into the slow path, reads the
 * return address into the user's function from the lock function's frame
 * (its size from .eh_frame, passed as the attach cookie) and keeps it per
 * thread; the futex entry uses it only if that call is provably still active
 * (see caller_of). An uncontended lock never traps.
 *
 * A wait still in progress when the recording stops is charged by user
 * space, which detaches these programs and reads each thread's futex_inflight. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "futex.h"

char LICENSE[] SEC("license") = "GPL";

/* Syscall numbers of the architecture (arch/x86/entry/syscalls/syscall_64.tbl,
 * include/uapi/asm-generic/unistd.h for arm64). */
#if defined(__TARGET_ARCH_x86)
#define NR_futex 202
#define SYSCALL_NR(regs) ((regs)->orig_ax)
#elif defined(__TARGET_ARCH_arm64)
#define NR_futex 98
#define SYSCALL_NR(regs) ((regs)->syscallno)
#else
#error "futex syscall numbers for this architecture"
#endif
#define NR_futex_waitv 449
#define NR_futex_wait 455

const volatile struct futex_config cfg = {
	.user_stacks = 1,
	.caller_sp_range = 4096,
};

struct futex_health health = {};

#include "maps.bpf.h"

/* user space's interval number (interval.h), moved on just before it reads the map; from 1, so that a
 * new entry's zeroed pairs are of no interval */
__u32 ival_epoch SEC(".data.epoch") = 1;
#include "stacks.bpf.h"
#include "sched_state.bpf.h"

/* task -> its futex wait and latest lock call */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct futex_inflight);
} task_futex SEC(".maps");

/* futex_wait_key -> cumulative futex_wait_val */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* user space deletes dead threads' entries */
	__uint(max_entries, 65536);
	__type(key, struct futex_wait_key);
	__type(value, struct futex_wait_val);
} futex_waits SEC(".maps");

/* keeps struct futex_new_key in the object's BTF, where the ABI test finds it */
const struct futex_new_key *unused_new_key __attribute__((unused));

/* futex_new_key events: rare (new keys only), read by a thread in user space */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} new_keys SEC(".maps");

/* [0] set by user space when the recording stops: no wait begins or ends from then on, so the
 * waits in progress it reads stay in progress until the last drain, and the programs are detached
 * only after it (a detach waits for an RCU grace period that the recording would show). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} stopped SEC(".maps");

static __always_inline bool is_stopped(void)
{
	__u32 zero = 0, *v = bpf_map_lookup_elem(&stopped, &zero);

	return !v || *(volatile __u32 *)v;
}

static __always_inline bool wanted(struct task_struct *cur)
{
	return !cfg.targ_tgid || cur->tgid == cfg.targ_tgid;
}

/* The lock call remembered at the uprobe, if it is still the one in progress:
 * the futex call runs deeper on the same stack (below the saved SP, within a
 * libc function's reach), and the slot still holds the return address. Once
 * the lock function returned, any later call from its caller's frame overwrites
 * that slot with another return address; a later call from the same call site
 * enters the lock function again and refreshes what is kept. */
static __always_inline __u64 caller_of(struct futex_inflight *w, __u64 sp)
{
	__u64 ret;

	if (!w->call_sp || sp >= w->call_sp || w->call_sp - sp > cfg.caller_sp_range)
		return 0;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)w->call_sp) || ret != w->call_ret)
		return 0;
	return ret;
}

#define OP_NONE 0xffffffffU

/* What a futex system call waits as: its command if it may block the caller, FUTEX_OP_WAITV /
 * FUTEX_OP_WAIT2 for the futex2 calls, or OP_NONE (a wake, a requeue, not a futex call). Decided
 * before anything else is read: most futex calls are wakes, and each read costs. */
static __always_inline __u32 wait_op(long id, __u64 op_arg)
{
	__u32 op;

	if (id == NR_futex) {
		op = (__u32)op_arg & FUTEX_CMD_MASK;
		return op <= FUTEX_LOCK_PI2 && ((1U << op) & FUTEX_WAIT_CMDS) ? op : OP_NONE;
	}
	if (id == NR_futex_waitv)
		return FUTEX_OP_WAITV;
	if (id == NR_futex_wait)
		return FUTEX_OP_WAIT2;
	return OP_NONE;
}

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;

/* FUTEX_F_TIMEOUT when the call has a timeout: futex(2)'s 4th argument, futex_waitv(2)'s
 * 4th, futex_wait(2)'s 5th. For futex(2)'s FUTEX_WAIT and FUTEX_WAIT_BITSET, what the expected
 * value `val` (its 3rd argument) tells (bpf/futex.h; the scheduler probe's evidence reads the same,
 * bpf/why.bpf.h). */
static __always_inline __u32 call_flags(long id, __u64 arg3, __u64 arg4, __u32 op, __u64 val)
{
	struct task_struct *t, *cur;
	__u32 flags;

	if (id == NR_futex_wait)
		return arg4 ? FUTEX_F_TIMEOUT : 0;
	flags = arg3 ? FUTEX_F_TIMEOUT : 0;
	if (id != NR_futex || (op != FUTEX_WAIT && op != FUTEX_WAIT_BITSET))
		return flags;
	val = (__u32)val;
	if (val == 2 && op == FUTEX_WAIT)
		return flags | FUTEX_F_LOCKWORD;
	if (val == 0)
		return flags | FUTEX_F_ZERO;
	if (val == 0xffffffffULL)
		return flags | FUTEX_F_PARK;
	cur = bpf_get_current_task_btf();
	if (val > 2 && val < 0x40000000 && val != (__u64)cur->pid && bpf_task_from_pid) {
		t = bpf_task_from_pid(val);
		if (t) {
			if (t->tgid == cur->tgid)
				flags |= FUTEX_F_TID;
			bpf_task_release(t);
		}
	}
	return flags;
}

/* A futex wait begins: `arg0` is the call's first argument (the futex word, or futex_waitv's
 * vector), `sp` the user stack pointer; `w` the task's state where the caller looked it up already
 * (NULL: looked up here, made if the task has none). */
static __always_inline int begin_wait(void *ctx, __u32 op, __u64 arg0, __u64 sp, __u32 flags,
				      struct futex_inflight *w)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct sched_mark mark;
	struct stack *buf;
	__u64 uaddr = arg0, now;

	if (!wanted(cur))
		return 0;
	/* struct futex_waitv { u64 val; u64 uaddr; u32 flags; u32 reserved; } [nr] */
	if (op == FUTEX_OP_WAITV && bpf_probe_read_user(&uaddr, sizeof(uaddr), (void *)(arg0 + 8))) {
		uaddr = 0;
		__sync_fetch_and_add(&health.futex_read_errors, 1);
	}
	if (!w)
		w = bpf_task_storage_get(&task_futex, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!w) {
		__sync_fetch_and_add(&health.storage_errors, 1);
		return 0;
	}
	now = bpf_ktime_get_ns();
	w->uaddr = uaddr;
	w->op = op;
	w->flags = flags;
	w->caller = caller_of(w, sp);
	w->ustack = STACK_NONE;
	if (cfg.user_stacks) {
		/* before the wait's length is known: from the user-stack budget */
		if (own_task(cur)) {
			w->ustack = STACK_OWN;
		} else if (!budget_allows(now, BUDGET_USER)) {
			w->ustack = STACK_RATE_LIMITED;
		} else if (!(buf = scratch())) {
			w->ustack = STACK_FAILED;
		} else {
			w->ustack = intern_stack(buf, bpf_get_stack(ctx, buf, sizeof(*buf), BPF_F_USER_STACK));
		}
	}
	w->start_ns = cur->start_boottime;
	w->leader_start_ns = cur->group_leader->start_boottime;
	w->pid = cur->pid;
	w->tgid = cur->tgid;
	/* the clock read last: the wait excludes our own stack walk */
	w->begin_ns = bpf_ktime_get_ns();
	sched_mark_of(cur, w->begin_ns, &mark);
	w->blocked0 = mark.blocked_ns;
	w->runq0 = mark.runq_ns;
	w->active = 1;
	return 0;
}

/* A wait ends (its futex system call returns, or its task runs again): it is added to the
 * aggregates. `w` is the task's own state, with a wait in progress. */
/* `switched`: the wait is a sleep, from the switch-out to the switch-in, off a CPU throughout:
 * what was not blocked was runnable (the scheduler's run-queue counter may be read here before
 * its own program on this switch adds the last part). `unseen`: a sleep whose switch-in was not
 * traced (the kernel emits no sched_switch for some switches out of an idle task:
 * docs/reliability.md), closed at the task's next switch-out, after it ran: it lasted what the
 * scheduler's counters say the task was blocked and then waited for a CPU since it began. */
static __always_inline int end_wait_of(struct futex_inflight *w, struct task_struct *t, bool switched, bool unseen)
{
	struct futex_wait_key key = {};
	struct futex_wait_val *v, init = {};
	struct sched_mark begin, end;
	struct task_stats *s;
	__u64 now, total, blocked, runnable;

	now = bpf_ktime_get_ns();
	w->active = 0;
	total = now > w->begin_ns ? now - w->begin_ns : 0;
	begin.blocked_ns = w->blocked0;
	begin.runq_ns = w->runq0;
	sched_mark_of(t, now, &end);
	if (unseen) {
		__u64 off = (end.blocked_ns > begin.blocked_ns ? end.blocked_ns - begin.blocked_ns : 0) +
			    (end.runq_ns > begin.runq_ns ? end.runq_ns - begin.runq_ns : 0);

		if (off && off < total) /* without the scheduler's state (both 0): up to now */
			total = off;
		__sync_fetch_and_add(&health.switch_in_unseen, 1);
	}
	sched_split(&begin, &end, total, &blocked, &runnable);
	if (switched)
		runnable = total - blocked;
	s = bpf_task_storage_get(&task_stats, t, 0, 0);
	key.uaddr = w->uaddr;
	key.ustack = w->ustack;
	key.caller = w->caller;
	key.start_ns = w->start_ns;
	key.leader_start_ns = w->leader_start_ns;
	key.pid = w->pid;
	key.tgid = w->tgid;
	key.op = w->op;
	key.flags = w->flags;
	v = bpf_map_lookup_elem(&futex_waits, &key);
	if (!v) {
		struct futex_new_key *e;

		if (bpf_map_update_elem(&futex_waits, &key, &init, BPF_NOEXIST) == -E2BIG) {
			__sync_fetch_and_add(&health.futex_map_full, 1);
			return 0;
		}
		e = bpf_ringbuf_reserve(&new_keys, sizeof(*e), 0);
		if (e) {
			e->leader_start_ns = key.leader_start_ns;
			e->tgid = key.tgid;
			e->pad = 0;
			bpf_ringbuf_submit(e, 0);
		} else {
			__sync_fetch_and_add(&health.new_key_events_lost, 1);
		}
		v = bpf_map_lookup_elem(&futex_waits, &key);
		if (!v)
			return 0;
	}
	/* one key is one thread: only that thread's own events update it (it runs on one CPU at a
	 * time), so plain adds, and no race on the extremes */
	v->count += 1;
	v->total_ns += total;
	v->blocked_ns += blocked;
	v->runnable_ns += runnable;
	if (s && s->woke == WOKE_IRQ && blocked)
		v->woken_irq += 1;
	update_ival_extremes(&v->ival, *(volatile __u32 *)&ival_epoch, total);
	return 0;
}

/* A futex system call returns: its wait, if one began, is added to the aggregates. */
static __always_inline int end_wait(void)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct futex_inflight *w = bpf_task_storage_get(&task_futex, cur, 0, 0);

	if (!w || !w->active)
		return 0; /* a wake, or a wait that began before we attached */
	return end_wait_of(w, cur, false, false);
}

static __always_inline bool is_futex(long id)
{
	return id == NR_futex || id == NR_futex_waitv || id == NR_futex_wait;
}

#define TASK_RUNNING 0

/* sched_switch: a futex wait is a task's sleep inside a futex call, from its switch-out to its
 * switch-in. The call's number and arguments are the user registers the task saved at syscall
 * entry (its pt_regs, at the top of its kernel stack), so no system call is traced: while any
 * syscall tracepoint is on, every system call of the machine takes the slow path
 * (syscall_trace_enter/exit), ~86 ns each here, which under hackbench (2.4 million calls a run)
 * cost more than every scheduler probe together. Only waits that slept are seen: a wait call that
 * returns at once (the word had changed) is not a wait here. At the switch-out the task is still
 * current, so its user stack and user memory are its own. */
SEC("tp_btf/sched_switch")
int BPF_PROG(futex_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct futex_inflight *w;

	if (is_stopped())
		return 0;
	/* a wait of the task switching out still open: its switch-in was not traced, and it ran since
	 * (its state, looked up once, is the new wait's too) */
	w = bpf_task_storage_get(&task_futex, prev, 0, 0);
	if (w && w->active)
		end_wait_of(w, prev, true, true);
	if (!preempt && prev_state != TASK_RUNNING && prev->mm && wanted(prev)) {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
		long id = SYSCALL_NR(regs);
		__u32 op;

		if (is_futex(id)) {
			op = wait_op(id, id == NR_futex ? PT_REGS_PARM2_CORE_SYSCALL(regs) : 0);
			if (op != OP_NONE)
				begin_wait(ctx, op, PT_REGS_PARM1_CORE_SYSCALL(regs), PT_REGS_SP_CORE(regs),
					   call_flags(id, PT_REGS_PARM4_CORE_SYSCALL(regs), PT_REGS_PARM5_CORE_SYSCALL(regs),
						      op, PT_REGS_PARM3_CORE_SYSCALL(regs)), w);
		}
	}
	w = bpf_task_storage_get(&task_futex, next, 0, 0);
	if (w && w->active)
		end_wait_of(w, next, true, false);
	return 0;
}

/* tracepoint: attached to sys_enter_futex, sys_enter_futex_waitv and sys_enter_futex_wait. The
 * context is the perf record of kernel/trace/trace_syscalls.c (its tracefs format): the user's
 * registers are not in it, the task's saved ones give the stack pointer. */
SEC("tracepoint/syscalls/sys_enter_futex")
int futex_enter(struct syscall_trace_enter *ctx)
{
	__u32 op = wait_op(ctx->nr, ctx->args[1]);
	struct pt_regs *regs;
	__u64 a2, a3, a4;

	if (op == OP_NONE || is_stopped())
		return 0;
	/* each argument loaded on its own: the verifier refuses a context access at a computed offset */
	a3 = ctx->args[3];
	asm volatile("" : "+r"(a3));
	a4 = ctx->args[4];
	asm volatile("" : "+r"(a4));
	a2 = ctx->args[2];
	asm volatile("" : "+r"(a2));
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	return begin_wait(ctx, op, ctx->args[0], PT_REGS_SP_CORE(regs), call_flags(ctx->nr, a3, a4, op, a2), NULL);
}

SEC("tracepoint/syscalls/sys_exit_futex")
int futex_exit(struct syscall_trace_exit *ctx)
{
	if (is_stopped())
		return 0;
	return end_wait();
}

/* tp_btf: run for every system call of the machine; the number is the first test */
SEC("tp_btf/sys_enter")
int BPF_PROG(futex_sys_enter, struct pt_regs *regs, long id)
{
	__u32 op;

	if (!is_futex(id))
		return 0;
	op = wait_op(id, id == NR_futex ? PT_REGS_PARM2_CORE_SYSCALL(regs) : 0);
	if (op == OP_NONE || is_stopped())
		return 0;
	return begin_wait(ctx, op, PT_REGS_PARM1_CORE_SYSCALL(regs), PT_REGS_SP_CORE(regs),
			  call_flags(id, PT_REGS_PARM4_CORE_SYSCALL(regs), PT_REGS_PARM5_CORE_SYSCALL(regs), op,
				     PT_REGS_PARM3_CORE_SYSCALL(regs)), NULL);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(futex_sys_exit, struct pt_regs *regs, long ret)
{
	if (!is_futex(SYSCALL_NR(regs)) || is_stopped())
		return 0;
	return end_wait();
}

/* A libc lock function on its way to wait: attached at the calls from
 * pthread_mutex_lock & co into their slow paths (__lll_lock_wait, the futex
 * wait), so that uncontended locks never trap; or at the function's entry
 * where the slow-path calls could not be found. The attach cookie is the
 * canonical frame address's offset from SP there, from the function's
 * .eh_frame (8 at entry): the return address into the user's function is at
 * CFA - 8. Attached by offset in libc for every process (pid -1). */
SEC("uprobe")
int BPF_KPROBE(lock_call)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct futex_inflight *w;
	__u64 slot = PT_REGS_SP(ctx) + bpf_get_attach_cookie(ctx) - 8, ret;

	if (!wanted(cur))
		return 0;
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)slot))
		return 0;
	w = bpf_task_storage_get(&task_futex, cur, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!w) {
		__sync_fetch_and_add(&health.storage_errors, 1);
		return 0;
	}
	/* a lock function called from inside another one: the outer call names
	 * the user's function */
	if (caller_of(w, slot))
		return 0;
	w->call_sp = slot;
	w->call_ret = ret;
	return 0;
}
