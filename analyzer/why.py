"""What a task was doing when it blocked, read without a stack walk (offcpu_key.why and .func in
bpf/sched.h): the system call, the kind of file its descriptor names, a futex wait's telling
arguments, or a kernel thread's function. Every wait has this; only the waits drawn for a walk have
a stack, so this is what names the others (and what the cause table's evidence rules match)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from stallscope.analyzer import syscalls

# bpf/sched.h
SYSCALL_MASK = 0x3FF
COMPAT_BIAS = 1  # context "" with call bits set: a compat (32-bit) call, its number plus this
CTX_SHIFT, CTX_MASK = 10, 7 << 10
FD_SHIFT, FD_MASK = 13, 15 << 13
FUTEX_TID, FUTEX_LOCKWORD, TIMEOUT, FUTEX_ZERO = 1 << 17, 1 << 18, 1 << 19, 1 << 20
IOWAIT = 1 << 21  # the task slept in I/O wait (task->in_iowait, set by io_schedule())
FUTEX_PARK = 1 << 22  # a futex wait for -1: a parked thread (Rust std's thread parker)

CONTEXTS = ("", "syscall", "fault", "kthread", "kworker-idle", "kworker", "exit", "io-worker")  # WHY_CTX_*'s order
# io-worker's call bits: WHY_USER_WORKER for a user worker that is not io_uring's (PF_USER_WORKER: vhost,
# kvm-nx-lpage-recovery)
USER_WORKER, USER_WORKER_CALL = "user-worker", 1
# fault's call bits: WHY_FAULT_UPROBE for an exception that is a uprobe's breakpoint trap, not a page fault
# (bpf/why.bpf.h at_uprobe)
UPROBE_TRAP, UPROBE_TRAP_CALL = "uprobe", 1
RULE_CONTEXTS = CONTEXTS + (USER_WORKER, UPROBE_TRAP)
FD_KINDS = ("", "pipe", "socket", "file", "directory", "character device", "block device", "eventfd", "timerfd",
            "signalfd", "epoll", "inotify", "io_uring", "anonymous inode", "unix socket")
# a kind that is also a more general one: a cause table's rule for the general kind matches it too (a rule for
# "socket" names a unix socket's waits where no rule for "unix socket" does)
FD_ALSO = {"unix socket": "socket"}
FUTEX_FLAGS = {"tid": FUTEX_TID, "lockword": FUTEX_LOCKWORD, "timeout": TIMEOUT, "zero": FUTEX_ZERO,
               "park": FUTEX_PARK}
WOKEN_BY = ("task", "interrupt", "exiting task")  # StackWait.woken's order (bpf/sched.h WOKE_*)


@dataclass(frozen=True)
class Why:
    """One wait's evidence, decoded. `function`: a kernel thread's function or work item, named."""

    context: str  # one of CONTEXTS ("" when not known)
    syscall: str = ""  # the call's name (context "syscall")
    fd: str = ""  # one of FD_KINDS
    flags: frozenset[str] = frozenset()  # of FUTEX_FLAGS
    function: str = ""
    woken_by: str = ""  # how most of these waits ended (WOKEN_BY), "" when not known
    iowait: bool = False  # in I/O wait (the kernel's io_schedule()): a wait for a device, whatever the frames say
    compat: bool = False  # a 32-bit (compat) system call: named from its table, with no file kind or futex flags

    def describe(self) -> str:
        """`read() on a pipe`, `futex() wait, with a timeout`, `a page fault`, `kernel thread kswapd`."""
        if self.context == "syscall":
            text = f"{self.syscall}()" + (" (32-bit)" if self.compat else "")
            if self.fd:
                text += f" on {'an' if self.fd[0] in 'aeio' else 'a'} {self.fd}"
            if "tid" in self.flags:
                text += " for a thread's exit"
            elif "lockword" in self.flags:
                text += " on a contended lock word"
            elif "zero" in self.flags:
                text += " for a condition or semaphore"
            elif "park" in self.flags:
                text += " of a parked thread"
            if "timeout" in self.flags:
                text += ", with a timeout"
            return text
        if self.context == "fault":
            return "a page fault"
        if self.context == UPROBE_TRAP:
            return "a uprobe's breakpoint trap"
        if self.context == "kthread":
            return f"kernel thread {self.function}" if self.function else "a kernel thread"
        if self.context == "kworker":
            return f"work item {self.function}" if self.function else "a work item"
        if self.context == "kworker-idle":
            return "an idle kernel worker"
        if self.context == "exit":
            return "the task's exit"
        if self.context == "io-worker":
            return "an io_uring worker"
        if self.context == USER_WORKER:
            return "a process's kernel worker"
        return ""


NO_WHY = Why("")


@lru_cache(maxsize=65536)  # pure, and asked once per wait record: a live interval of sleeping threads asks thousands
def decode(why: int, function: str = "", woken: tuple[int, int, int] = (0, 0, 0), arch: str | None = None) -> Why:
    if not why and not function:
        return Why("", woken_by=woken_by(woken))
    iowait = bool(why & IOWAIT)
    ctx = (why & CTX_MASK) >> CTX_SHIFT
    context = CONTEXTS[ctx] if ctx < len(CONTEXTS) else ""
    if context == "io-worker" and why & SYSCALL_MASK == USER_WORKER_CALL:
        context = USER_WORKER
    elif context == "fault" and why & SYSCALL_MASK == UPROBE_TRAP_CALL:
        context = UPROBE_TRAP
    if not ctx and why & SYSCALL_MASK:
        return Why("syscall", syscalls.compat_name_of((why & SYSCALL_MASK) - COMPAT_BIAS, arch), function=function,
                   woken_by=woken_by(woken), iowait=iowait, compat=True)
    fd = (why & FD_MASK) >> FD_SHIFT
    flags = frozenset(name for name, bit in FUTEX_FLAGS.items() if why & bit)
    return Why(context, syscalls.name_of(why & SYSCALL_MASK, arch) if context == "syscall" else "",
               FD_KINDS[fd] if fd < len(FD_KINDS) else "", flags, function, woken_by(woken), iowait)


def woken_by(woken: tuple[int, int, int]) -> str:
    """The kind of waker that ended most of these waits (ties: the first): all decode reads of `woken`."""
    if not any(woken):
        return ""
    return WOKEN_BY[max(range(3), key=lambda i: woken[i])]
