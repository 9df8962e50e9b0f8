/* SPDX-License-Identifier: GPL-2.0 */
/* task_struct::flags bits the probes read (include/linux/sched.h): macros, which BTF does not carry. */
#ifndef STALLSCOPE_TASK_FLAGS_BPF_H
#define STALLSCOPE_TASK_FLAGS_BPF_H

#define PF_EXITING 0x00000004
#define PF_IO_WORKER 0x00000010
#define PF_WQ_WORKER 0x00000020
#define PF_USER_WORKER 0x00004000
#define PF_KTHREAD 0x00200000

#endif
