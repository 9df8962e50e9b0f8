/* SPDX-License-Identifier: GPL-2.0 */
/* Stacks as they cross the BPF/user boundary: frames, and the reserved ids
 * that say why a wait has no stack. Mirrored in bpf/abi.py. */
#ifndef STALLSCOPE_STACKS_H
#define STALLSCOPE_STACKS_H

#define MAX_STACK_DEPTH 64

/* Reserved stack ids (a real stack's hash is never below STACK_ID_MIN). */
#define STACK_NONE        0 /* stacks off */
#define STACK_SHORT       1 /* the wait was shorter than min_stack_ns */
#define STACK_RATE_LIMITED 2 /* the per-CPU stack-walk budget was spent */
#define STACK_FAILED      3 /* the walk returned nothing */
#define STACK_OWN         4 /* a wait of stallscope's own process: not walked, the budget is for the others */
#define STACK_NOT_DRAWN   5 /* not drawn for a walk: a wait of d ns is drawn with probability min(1, d/T) */
#define STACK_ID_MIN      16

struct stack {
	__u64 ips[MAX_STACK_DEPTH];
};

/* Stack-walk knobs that user space may change while the programs run (.data,
 * memory-mapped): the overhead budget lowers them and says so. */
struct stack_tune {
	__u64 min_stack_ns;  /* walk stacks only for waits at least this long (where the object has waits) */
	__u64 sample_ns;     /* T: a wait of d ns is drawn for a walk with probability min(1, d/T); 0 = every wait */
	__u32 walks_per_s;   /* per CPU, all kinds together; 0 = no limit: a cap on top of the drawing */
	__u32 user_walks_per_s; /* user stacks walked before a wait's length is known, per CPU; 0 = no limit */
};

#endif
