// SPDX-License-Identifier: GPL-2.0
/* One empty program per attach mechanism. stallscope loads (and attaches)
 * each on its own to learn what this kernel allows; none does any work. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(probe_tp_btf) { return 0; }

SEC("raw_tp/sched_switch")
int probe_raw_tp(void *ctx) { return 0; }

SEC("fentry/vfs_read")
int BPF_PROG(probe_fentry) { return 0; }

SEC("kprobe/vfs_read")
int probe_kprobe(void *ctx) { return 0; }

SEC("perf_event")
int probe_perf_event(void *ctx) { return 0; }
