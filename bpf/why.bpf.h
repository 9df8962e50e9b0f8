/* SPDX-License-Identifier: GPL-2.0 */
/* Why a task blocks, read at its switch-out without a stack walk (offcpu_key.why and
 * .func, bpf/sched.h): the system call it is in (from the registers it saved at entry),
 * the kind of file the call's descriptor names, a futex wait's telling arguments, or a
 * kernel thread's function; and whether it sleeps in I/O wait. Every wait gets this; only some get a stack. A few loads
 * each, where a walk costs microseconds. Needs task_stats (its fd cache) and PF_*. */
#ifndef STALLSCOPE_WHY_BPF_H
#define STALLSCOPE_WHY_BPF_H

#define S_IFMT   0170000
#define S_IFSOCK 0140000
#define AF_UNIX  1
#define S_IFREG  0100000
#define S_IFBLK  0060000
#define S_IFDIR  0040000
#define S_IFCHR  0020000
#define S_IFIFO  0010000
#define ANON_INODE_FS_MAGIC 0x09041934 /* include/uapi/linux/magic.h */
#define TS_COMPAT 0x0002 /* arch/x86/include/asm/processor.h: a 32-bit system call in progress */

#define FUTEX_WAIT_OP 0
#define FUTEX_WAIT_BITSET_OP 9
#define FUTEX_OP_CMD_MASK (~(128 | 256))

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;

/* System call numbers (arch/x86/entry/syscalls/syscall_64.tbl; include/uapi/asm-generic/unistd.h) */
#if defined(__TARGET_ARCH_x86)
#define SYS_futex 202
/* calls whose first argument is the file descriptor they block on */
static __always_inline bool fd_first(__u32 nr)
{
	switch (nr) {
	case 0: case 1: case 16: case 17: case 18: case 19: case 20: /* read write ioctl pread pwrite readv writev */
	case 40: case 42: case 43: case 44: case 45: case 46: case 47: /* sendfile connect accept sendto recvfrom sendmsg recvmsg */
	case 72: case 73: case 74: case 75: case 77: case 78:           /* fcntl flock fsync fdatasync ftruncate getdents */
	case 217: case 232: case 275: case 276: case 277: case 281:     /* getdents64 epoll_wait splice tee sync_file_range epoll_pwait */
	case 285: case 288: case 295: case 296: case 299: case 307:     /* fallocate accept4 preadv pwritev recvmmsg sendmmsg */
	case 326: case 327: case 328: case 426: case 441:               /* copy_file_range preadv2 pwritev2 io_uring_enter epoll_pwait2 */
		return true;
	}
	return false;
}
#elif defined(__TARGET_ARCH_arm64)
#define SYS_futex 98
static __always_inline bool fd_first(__u32 nr)
{
	switch (nr) {
	case 63: case 64: case 65: case 66: case 67: case 68: case 69: case 70: case 71: /* read .. sendfile */
	case 22: case 25: case 29: case 32: case 46: case 47: case 61: case 76: case 77:  /* epoll_pwait fcntl ioctl flock ftruncate fallocate getdents64 splice tee */
	case 82: case 83: case 84: case 202: case 203: case 206: case 207: case 211: case 212: /* fsync fdatasync sync_file_range accept connect sendto recvfrom sendmsg recvmsg */
	case 242: case 243: case 269: case 285: case 286: case 287: case 426: case 441:
		return true;
	}
	return false;
}
#else
#error "system call numbers for this architecture"
#endif

/* The system call `p` is blocked in, or -1: it blocked in an exception from user mode (a
 * page fault, *fault set), or in no call stallscope can name. On x86 the syscall entry keeps the
 * call's number in orig_ax through the call and its way back out; an exception's or interrupt's
 * entry leaves -1 there. */
static __always_inline long syscall_of(struct task_struct *p, struct pt_regs *regs, bool *fault, bool *compat)
{
	*fault = false;
	*compat = false;
#if defined(__TARGET_ARCH_x86)
	long nr = regs->orig_ax;

	/* in a system call, or on its way back out to user mode once it has returned (task work, a signal's
	 * delivery, ptrace's syscall-exit stop): the call is what the task is in */
	if (nr >= 0) {
		/* a 32-bit program's call, or int 0x80 from a 64-bit one: the ia32 table's number */
		*compat = p->thread_info.status & TS_COMPAT;
		return nr;
	}
	/* the entry of an exception or interrupt from user mode sets orig_ax to -1 (after reading a page fault's
	 * error code from that slot): of those, a page fault is what sleeps */
	*fault = true;
	return -1;
#else
	long nr = regs->syscallno;

	*fault = nr < 0;
	return nr;
#endif
}

/* WHY_FAULT_UPROBE when `p`, in an exception from user mode, is in a uprobe's breakpoint trap: handle_swbp()
 * sets the saved instruction pointer back to the breakpoint before it runs the probe's handlers (and looks the probe
 * up, under the mmap_lock when it must), so the instruction there is the breakpoint itself. A page fault's is the
 * instruction that faulted, never a breakpoint (a debugger's int3 leaves the pointer after it). Read only for the
 * current task (a switch-out), whose memory a tracing program can read: 0 otherwise, or where the page is absent. */
static __always_inline __u32 at_uprobe(struct task_struct *p, struct pt_regs *regs)
{
#if defined(__TARGET_ARCH_x86)
	__u8 insn = 0;

	if (p != bpf_get_current_task_btf() || bpf_probe_read_user(&insn, sizeof(insn), (void *)regs->ip))
		return 0;
	return insn == 0xcc ? WHY_FAULT_UPROBE : 0; /* int3 */
#elif defined(__TARGET_ARCH_arm64)
	__u32 insn = 0;

	if (p != bpf_get_current_task_btf() || bpf_probe_read_user(&insn, sizeof(insn), (void *)regs->pc))
		return 0;
	return insn == 0xd42000a0 ? WHY_FAULT_UPROBE : 0; /* BRK64_OPCODE_UPROBES */
#else
	return 0;
#endif
}

/* The kind of file `fd` of `p` is (WHY_FD_*). The last descriptor's file and kind are kept
 * per task: a thread reading one socket in a loop pays three loads, not six. */
static __always_inline __u32 fd_kind(struct task_stats *s, struct task_struct *p, __u64 fd)
{
	struct files_struct *files = p->files;
	struct file **arr;
	struct fdtable *fdt;
	struct file *f = NULL;
	struct inode *inode;
	struct socket *sock;
	char name[8] = {};
	__u32 kind;
	__u16 mode;

	/* direct loads through the task's BTF pointers (a faulting one reads 0), cheaper than a
	 * helper call each; only the array slot at a variable index needs the helper */
	if (!files || fd > 0xffffff)
		return WHY_FD_NONE;
	fdt = files->fdt;
	if (!fdt || fd >= fdt->max_fds)
		return WHY_FD_NONE;
	arr = fdt->fd;
	if (bpf_probe_read_kernel(&f, sizeof(f), &arr[fd]) || !f)
		return WHY_FD_NONE;
	if ((__u64)f == s->fd_file && (__u32)fd == s->fd)
		return s->fd_kind;
	inode = BPF_CORE_READ(f, f_inode);
	mode = BPF_CORE_READ(inode, i_mode) & S_IFMT;
	switch (mode) {
	case S_IFIFO: kind = WHY_FD_PIPE; break;
	case S_IFSOCK:
		/* a socket file's private data is its struct socket (sock_from_file); an O_PATH descriptor's
		 * is none, and it cannot block */
		sock = (struct socket *)BPF_CORE_READ(f, private_data);
		kind = sock && BPF_CORE_READ(sock, sk, __sk_common.skc_family) == AF_UNIX ? WHY_FD_UNIX : WHY_FD_SOCKET;
		break;
	case S_IFDIR: kind = WHY_FD_DIR; break;
	case S_IFCHR: kind = WHY_FD_CHR; break;
	case S_IFBLK: kind = WHY_FD_BLK; break;
	default:
		/* anonymous inodes are S_IFREG since 6.15, no type before: told by their file system,
		 * then by their name ("[eventfd]", "[timerfd]", "[eventpoll]", "inotify", ...) */
		kind = WHY_FD_FILE;
		if (mode != S_IFREG || BPF_CORE_READ(inode, i_sb, s_magic) == ANON_INODE_FS_MAGIC) {
			kind = WHY_FD_ANON;
			bpf_probe_read_kernel(name, sizeof(name), BPF_CORE_READ(f, f_path.dentry, d_name.name));
			if (name[0] == '[' && name[1] == 'e' && name[2] == 'v' && name[6] == 'f')
				kind = WHY_FD_EVENTFD;
			else if (name[0] == '[' && name[1] == 'e' && name[2] == 'v' && name[6] == 'p')
				kind = WHY_FD_EPOLL;
			else if (name[0] == '[' && name[1] == 't' && name[2] == 'i')
				kind = WHY_FD_TIMERFD;
			else if (name[0] == '[' && name[1] == 's' && name[2] == 'i')
				kind = WHY_FD_SIGNALFD;
			else if (name[0] == '[' && name[1] == 'i' && name[2] == 'o')
				kind = WHY_FD_IO_URING;
			else if (name[0] == 'i' && name[1] == 'n' && name[2] == 'o')
				kind = WHY_FD_INOTIFY;
		}
	}
	s->fd_file = (__u64)f;
	s->fd = fd;
	s->fd_kind = kind;
	return kind;
}

/* A futex wait's telling arguments (glibc 2.36, nptl): a timeout (a poll, a park); FUTEX_WAIT for
 * the value 2 (a contended mutex's lock word, __lll_lock_wait); the value 0 (a condition variable's
 * __g_signals, a semaphore: __futex_abstimed_wait_common with FUTEX_WAIT_BITSET); the value -1 (a
 * parked thread: Rust std's thread parker waits while its word is PARKED, u32::MAX); or the TID of a
 * live thread of the waiter's own process (pthread_join waits on the joined thread's pd->tid
 * until the kernel clears it at the thread's exit). */
static __always_inline __u32 futex_flags(struct task_struct *p, struct pt_regs *regs)
{
	__u32 op = (__u32)PT_REGS_PARM2_CORE_SYSCALL(regs) & FUTEX_OP_CMD_MASK, flags = 0;
	__u64 val = (__u32)PT_REGS_PARM3_CORE_SYSCALL(regs);
	struct task_struct *t;

	if (op != FUTEX_WAIT_OP && op != FUTEX_WAIT_BITSET_OP)
		return 0;
	if (PT_REGS_PARM4_CORE_SYSCALL(regs))
		flags |= WHY_TIMEOUT;
	if (val == 2 && op == FUTEX_WAIT_OP)
		return flags | WHY_FUTEX_LOCKWORD;
	if (val == 0)
		return flags | WHY_FUTEX_ZERO;
	if (val == 0xffffffffULL)
		return flags | WHY_FUTEX_PARK;
	if (val > 2 && val < 0x40000000 && val != (__u64)p->pid && bpf_task_from_pid) {
		t = bpf_task_from_pid(val);
		if (t) {
			if (t->tgid == p->tgid)
				flags |= WHY_FUTEX_TID;
			bpf_task_release(t);
		}
	}
	return flags;
}

/* Fill s->why and s->func for the wait `prev` begins now. */
static __always_inline void wait_evidence(struct task_stats *s, struct task_struct *prev)
{
	__u32 why = WHY_CTX_NONE << WHY_CTX_SHIFT;
	__u64 func = 0;

	if (prev->flags & PF_IO_WORKER) {
		/* it never entered a system call of its own: the registers it has are its creator's */
		why = WHY_CTX_IO_WORKER << WHY_CTX_SHIFT;
	} else if (prev->flags & PF_USER_WORKER) {
		/* the same for the other workers a process has the kernel run for it (vhost_task_create()) */
		why = (WHY_CTX_IO_WORKER << WHY_CTX_SHIFT) | WHY_USER_WORKER;
	} else if ((prev->flags & (PF_EXITING | PF_KTHREAD)) == PF_EXITING) {
		/* do_exit(): from exit_group(), exit(), or a fatal signal (whose call's registers then name the call
		 * it left, or a page fault); past exit_mm() it has no mm */
		why = WHY_CTX_EXIT << WHY_CTX_SHIFT;
	} else if (!prev->mm) {
		if (prev->flags & PF_KTHREAD) {
			struct kthread *kt = (struct kthread *)prev->worker_private;

			if (prev->flags & PF_WQ_WORKER) {
				struct worker *w = kt ? (struct worker *)BPF_CORE_READ(kt, data) : NULL;

				func = w ? (__u64)BPF_CORE_READ(w, current_func) : 0;
				why = (func ? WHY_CTX_KWORKER : WHY_CTX_KWORKER_IDLE) << WHY_CTX_SHIFT;
			} else {
				func = kt ? (__u64)BPF_CORE_READ(kt, threadfn) : 0;
				why = WHY_CTX_KTHREAD << WHY_CTX_SHIFT;
			}
		}
	} else {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
		bool fault, compat;
		long nr;

		if (regs) {
			nr = syscall_of(prev, regs, &fault, &compat);
			if (compat) {
				/* its arguments are in other registers (ebx, ecx, ...) and its numbers are
				 * another table's: named, without the file kind or the futex flags */
				if (nr + WHY_COMPAT_BIAS <= WHY_SYSCALL_MASK)
					why = (WHY_CTX_NONE << WHY_CTX_SHIFT) | (__u32)(nr + WHY_COMPAT_BIAS);
			} else if (nr >= 0 && nr <= WHY_SYSCALL_MASK) {
				why = (WHY_CTX_SYSCALL << WHY_CTX_SHIFT) | (__u32)nr;
				if (fd_first(nr))
					why |= fd_kind(s, prev, PT_REGS_PARM1_CORE_SYSCALL(regs)) << WHY_FD_SHIFT;
				else if (nr == SYS_futex)
					why |= futex_flags(prev, regs);
			} else if (fault) {
				why = (WHY_CTX_FAULT << WHY_CTX_SHIFT) | at_uprobe(prev, regs);
			}
		}
	}
	/* io_schedule() sets it before the switch: a wait for a device even where the frames that say so are
	 * gone from a walked stack (in .sched.text, or tail calls: __wait_on_buffer) or none was walked */
	if (BPF_CORE_READ_BITFIELD(prev, in_iowait))
		why |= WHY_IOWAIT;
	s->why = why;
	s->func = func;
}

#endif
