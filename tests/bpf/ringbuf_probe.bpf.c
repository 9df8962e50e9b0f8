// SPDX-License-Identifier: GPL-2.0
/* Test object for the libbpf binding: a ring buffer record per getpid() of
 * one process, and a hash map filled from user space. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 targ_tgid = 0;

/* u64 -> u64, filled and read back by the test */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u64);
	__type(value, __u64);
} numbers SEC(".maps");

/* records: the syscall id and a sequence number */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} events SEC(".maps");

__u64 seq = 0;

SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	__u64 *rec;

	if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid || id != 39 /* getpid on x86-64 */)
		return 0;
	rec = bpf_ringbuf_reserve(&events, 16, 0);
	if (!rec)
		return 0;
	rec[0] = id;
	rec[1] = __sync_fetch_and_add(&seq, 1);
	bpf_ringbuf_submit(rec, 0);
	return 0;
}
