"""The cause table against the function names of two real kernels, and its rules' semantics."""

from __future__ import annotations

import gzip
import platform
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, example, needs_bpf, run_stallscope
from stallscope.analyzer.blockers import rank_blockers
from stallscope.analyzer.causes import BLOCKER, IDLE, CauseTable, _compile, bare, default_table
from stallscope.analyzer.model import Model
from stallscope.analyzer.sample import OffcpuDelta, Stack, TaskDelta, TaskId, TaskInfo
from stallscope.analyzer.sample import Frame
from stallscope.errors import StallscopeError
from synthetic import interval, kstack, meta

FIXTURES = ROOT / "tests" / "fixtures" / "kernel-symbols"
# Text symbols (System.map / kallsyms `T`/`t`), one per line: Debian 12's linux-image-6.1.0-56-amd64
# (from its -dbg package's System.map) and the kernel these tests were written on.
DEBIAN_61 = FIXTURES / "6.1.0-56-amd64.txt.gz"
RUNNING = FIXTURES / "6.18.44-fc-v595.txt.gz"


def _names(path: Path) -> set[str]:
    return {bare(n) for n in gzip.open(path, "rt").read().split()}


@pytest.fixture(scope="module", params=[DEBIAN_61, RUNNING], ids=["debian-6.1", "6.18"])
def kernel_names(request) -> set[str]:
    return _names(request.param)


# rules for kernel features newer than one of the kernels checked: cause -> why it is absent there
NEWER_THAN_6_1 = {"VMA write lock: waiting for page faults to leave the VMA": "per-VMA locks came in 6.4",
                  "Waiting for a process's kernel worker to exit in {caller}": "vhost_task came in 6.4",
                  # its register_rwsem wait reads there as the mmap_lock one: one frame, uprobe_notify_resume
                  "rwsem contention: a uprobe's register_rwsem (the probe added or removed)":
                      "6.1 inlines handler_chain into uprobe_notify_resume"}
# rules for code neither kernel checked builds: cause -> the config option that is off in both
NOT_BUILT = {"I/O latency throttling (cgroup io.latency)": "CONFIG_BLK_CGROUP_IOLATENCY"}


@pytest.mark.parametrize("path, newer", [(DEBIAN_61, NEWER_THAN_6_1), (RUNNING, {})], ids=["debian-6.1", "6.18"])
def test_every_rule_names_a_function_that_exists_in_each_kernel(path, newer):
    kernel_names = _names(path)
    for rule in default_table().rules:
        if not rule.frames or rule.name in newer or rule.name in NOT_BUILT:
            continue
        rx = _compile(rule.frames)
        assert any(rx.match(n) for n in kernel_names), f"no function of {rule.name!r} in this kernel"


def test_every_lock_known_by_its_taker_is_taken_by_a_function_of_the_running_kernel():
    from stallscope.analyzer.locks import LOCKS_BY_TAKER

    names = _names(RUNNING)
    assert [f for f, _type in LOCKS_BY_TAKER if f not in names] == []


def _stack(names: list[str], kernel_names: set[str] | None = None, sid: int = 0) -> Stack:
    if kernel_names is not None:
        missing = [n for n in names if bare(n) not in kernel_names]
        assert not missing, f"not functions of this kernel: {missing}"
    return kstack(sid or hash(tuple(names)) & 0xFFFFFFF, *names)


# (cause, class, 6.1 stack, 6.18 stack): the same wait as each kernel's frames show it
STACKS = [
    ("Userspace lock contention", BLOCKER,
     ["__schedule", "schedule", "futex_wait_queue", "futex_wait", "do_futex", "__x64_sys_futex", "do_syscall_64"],
     ["__schedule", "schedule", "futex_do_wait", "__futex_wait", "futex_wait", "do_futex", "__x64_sys_futex"]),
    ("Reading from a pipe", BLOCKER,
     ["__schedule", "schedule", "pipe_read", "vfs_read", "ksys_read", "do_syscall_64"],
     ["__schedule", "schedule", "anon_pipe_read", "vfs_read", "ksys_read", "do_syscall_64"]),
    ("Waiting for events (epoll)", IDLE,
     ["__schedule", "schedule", "schedule_hrtimeout_range_clock", "do_epoll_wait", "__x64_sys_epoll_wait"],
     ["__schedule", "schedule", "schedule_hrtimeout_range", "do_epoll_wait", "__x64_sys_epoll_wait"]),
    ("Application requested delay", IDLE,
     ["__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep", "__x64_sys_clock_nanosleep"],
     ["__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep", "__x64_sys_clock_nanosleep"]),
    ("rwsem contention: mmap_lock", BLOCKER,
     ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write_killable", "vm_mmap_pgoff"],
     ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write_killable", "vm_mmap_pgoff"]),
    ("Waiting for I/O", BLOCKER,
     ["__schedule", "schedule", "io_schedule", "folio_wait_bit_common", "filemap_fault", "__do_fault",
      "handle_mm_fault", "exc_page_fault"],
     ["__schedule", "schedule", "io_schedule", "folio_wait_bit_common", "filemap_fault", "__do_fault",
      "handle_mm_fault", "exc_page_fault"]),
    # a stack that ends in the rule's frames names no caller
    ("Waiting for an RCU grace period", BLOCKER,
     ["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "__wait_rcu_gp", "synchronize_rcu"],
     ["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "__wait_rcu_gp", "synchronize_rcu_normal"]),
    ("Kernel thread idle", IDLE,
     ["__schedule", "schedule", "worker_thread", "kthread", "ret_from_fork"],
     ["__schedule", "schedule", "worker_thread", "kthread", "ret_from_fork", "ret_from_fork_asm"]),
    # a write to a file system being frozen (fsfreeze -f): sb_start_write(), inlined into vfs_write(); 6.1
    # reaches the wait through __percpu_down_read() (the 6.18 stack is one walked here under fsfreeze)
    ("rwsem contention: sb_writers (fs frozen)", BLOCKER,
     ["__schedule", "schedule", "percpu_rwsem_wait", "__percpu_down_read", "vfs_write", "ksys_write"],
     ["percpu_rwsem_wait", "vfs_write", "ksys_write", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"]),
    ("rwsem contention: sb_writers (fs frozen)", BLOCKER,
     ["__schedule", "schedule", "percpu_rwsem_wait", "__percpu_down_read", "mnt_want_write", "do_unlinkat"],
     ["percpu_rwsem_wait", "mnt_want_write", "do_unlinkat", "__x64_sys_unlinkat"]),
    # flock(), fcntl() locks and leases read fs/locks.c's file_rwsem; a read of /proc/locks (locks_start) writes
    # it, waiting where percpu_down_write() was inlined, after a grace period in rcu_sync_enter() (6.18 stacks
    # of stress-ng --flock, whose workers read /proc/locks)
    ("rwsem contention: file_rwsem (file locks)", BLOCKER,
     ["__schedule", "schedule", "percpu_rwsem_wait", "__percpu_down_read", "flock_lock_inode",
      "locks_lock_inode_wait", "__do_sys_flock"],
     ["percpu_rwsem_wait", "flock_lock_inode", "locks_lock_inode_wait", "__do_sys_flock", "do_syscall_64"]),
    ("rwsem contention: file_rwsem (file locks)", BLOCKER,
     ["__schedule", "schedule", "percpu_rwsem_wait", "locks_start", "seq_read_iter", "proc_reg_read_iter"],
     ["locks_start", "seq_read_iter", "proc_reg_read_iter", "vfs_read", "ksys_read", "do_syscall_64"]),
    ("Waiting for an RCU grace period in locks_start", BLOCKER,
     ["__schedule", "schedule", "rcu_sync_enter", "locks_start", "seq_read_iter", "proc_reg_read_iter"],
     ["rcu_sync_enter", "locks_start", "seq_read_iter", "proc_reg_read_iter", "vfs_read", "ksys_read"]),
    # a uprobe hit's lookup of its probe falls back to the mmap_lock (stress-ng --pthread traced, 6.18)
    ("rwsem contention: mmap_lock at a uprobe hit (the tracing's cost)", BLOCKER,
     ["__schedule", "schedule", "rwsem_down_read_slowpath", "down_read", "uprobe_notify_resume",
      "exit_to_user_mode_prepare", "irqentry_exit_to_user_mode", "asm_exc_int3"],
     ["find_active_uprobe_rcu", "uprobe_notify_resume", "irqentry_exit_to_user_mode", "asm_exc_int3"]),
    # utimensat() of a file others touch too waits for its inode lock where vfs_utimes() takes it (stress-ng --open)
    ("rwsem contention: inode i_rwsem", BLOCKER,
     ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write", "vfs_utimes", "do_utimes",
      "__x64_sys_utimensat"],
     ["vfs_utimes", "do_utimes", "__x64_sys_utimensat", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"]),
    # an O_CREAT open waiting for its directory's lock: both kernels inline open_last_lookups() into path_openat()
    ("rwsem contention: directory i_rwsem", BLOCKER,
     ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write", "path_openat", "do_filp_open"],
     ["path_openat", "do_filp_open", "do_sys_openat2", "__x64_sys_openat", "do_syscall_64"]),
    # sched_setaffinity() of a running task waits for the stopper to move it (stress-ng --affinity, 6.18)
    ("Waiting for a task to be moved off a CPU (affinity change)", BLOCKER,
     ["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "affine_move_task",
      "__set_cpus_allowed_ptr_locked", "__sched_setaffinity"],
     ["affine_move_task", "__set_cpus_allowed_ptr", "__sched_setaffinity", "sched_setaffinity",
      "__x64_sys_sched_setaffinity"]),
    # 6.18's madvise() and munlock() waiting for the process's mmap_lock where they start (stress-ng --madvise)
    ("rwsem contention: mmap_lock", BLOCKER,
     ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write_killable", "do_madvise",
      "__x64_sys_madvise"],
     ["madvise_vma_behavior", "madvise_do_behavior", "do_madvise", "__x64_sys_madvise"]),
    # FS_IOC_SETFLAGS of a file another task changes too (stress-ng --inode-flags)
    ("rwsem contention: inode i_rwsem", BLOCKER,
     ["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write", "vfs_fileattr_set", "do_vfs_ioctl"],
     ["vfs_fileattr_set", "ioctl_setflags", "do_vfs_ioctl", "__x64_sys_ioctl", "do_syscall_64"]),
    # dup2() past the end of the file table while another thread grows it (stress-ng --close, 6.18)
    ("Waiting for another thread to grow the file descriptor table", BLOCKER,
     ["__schedule", "schedule", "expand_files", "ksys_dup3", "__x64_sys_dup2"],
     ["expand_files", "ksys_dup3", "__x64_sys_dup2", "do_syscall_64"]),
    # swapoff() waiting for the swap area's users to drain (stress-ng --swap, 6.18: __do_sys_swapoff+0xbf0)
    ("swapoff(): waiting for the swap area's last users (an RCU callback)", BLOCKER,
     ["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "__do_sys_swapoff", "do_syscall_64"],
     ["__do_sys_swapoff", "do_syscall_64", "entry_SYSCALL_64_after_hwframe"]),
    # a fault in a userfaultfd range waiting for the handler thread (stress-ng --userfaultfd, 6.18)
    ("Waiting for a userfaultfd handler to resolve a page fault", BLOCKER,
     ["__schedule", "schedule", "handle_userfault", "__handle_mm_fault", "handle_mm_fault", "do_user_addr_fault"],
     ["handle_userfault", "__handle_mm_fault", "handle_mm_fault", "exc_page_fault", "asm_exc_page_fault"]),
    # an open() of a name another task is looking up in the same directory (tar beside xz, 6.18)
    ("Waiting for another task's lookup of the same name (d_alloc_parallel)", BLOCKER,
     ["__schedule", "schedule", "d_alloc_parallel", "path_openat", "do_filp_open", "do_sys_openat2"],
     ["d_alloc_parallel", "path_openat", "do_filp_open", "do_sys_openat2", "__x64_sys_openat"]),
    # io_getevents() waiting for the AIO it submitted (stress-ng --aiol, 6.18)
    ("Waiting for AIO completions (io_getevents)", BLOCKER,
     ["__schedule", "schedule", "schedule_hrtimeout_range", "read_events", "do_io_getevents"],
     ["read_events", "do_io_getevents", "__x64_sys_io_getevents", "do_syscall_64"]),
    # an MTRR change stops every CPU (stress-ng --physpage, 6.18)
    ("Waiting for stop_machine() in mtrr_add_page", BLOCKER,
     ["__schedule", "schedule", "__wait_for_common", "stop_machine_cpuslocked", "mtrr_add_page", "mtrr_file_add"],
     ["__stop_cpus.constprop.0", "stop_machine_cpuslocked", "mtrr_add_page.part.0", "mtrr_file_add.constprop.0",
      "mtrr_ioctl"]),
    ("Waiting for devtmpfs to create a device node", BLOCKER,
     ["__schedule", "schedule", "__wait_for_common", "devtmpfs_create_node", "device_add", "device_add_disk"],
     ["devtmpfs_create_node", "device_add", "__add_disk", "add_disk_fwnode", "loop_add"]),
    # a flush is named by who flushed: closing an inotify descriptor waits for fsnotify's mark reaper
    # (stress-ng --inotify, 6.18), a driver cancelling its work item
    ("Waiting for a workqueue flush in fsnotify_destroy_group", BLOCKER,
     ["__schedule", "schedule", "schedule_timeout", "__wait_for_common", "__flush_work", "fsnotify_destroy_group",
      "inotify_release", "__fput"],
     ["__flush_work", "fsnotify_destroy_group", "inotify_release", "__fput", "__x64_sys_close", "do_syscall_64"]),
    ("Waiting for a workqueue flush in tty_buffer_cancel_work", BLOCKER,
     ["__schedule", "schedule", "__wait_for_common", "__flush_work.isra.0", "cancel_work_sync",
      "tty_buffer_cancel_work", "tty_port_close_start"],
     ["__flush_work", "cancel_work_sync", "tty_buffer_cancel_work", "tty_port_close_start"]),
    ("rwsem contention: cgroup_threadgroup_rwsem", BLOCKER,
     ["__schedule", "schedule", "percpu_rwsem_wait", "__percpu_down_read", "copy_process", "kernel_clone"],
     ["percpu_rwsem_wait", "copy_process", "kernel_clone", "__do_sys_clone"]),
    ("rwsem contention: cpu_hotplug_lock", BLOCKER,
     ["__schedule", "schedule", "percpu_rwsem_wait", "__percpu_down_read", "cpus_read_lock", "static_key_enable"],
     ["percpu_rwsem_wait", "cpus_read_lock", "static_key_enable"]),
    ("Waiting for a child process", IDLE,
     ["__schedule", "schedule", "do_wait", "kernel_wait4", "__do_sys_wait4"],
     ["__schedule", "schedule", "do_wait", "kernel_wait4", "__do_sys_wait4"]),
]


@pytest.mark.parametrize("cause,cls,old,new", STACKS, ids=[s[0] for s in STACKS])
def test_a_wait_gets_the_same_cause_on_debian_61_and_on_the_running_kernel(cause, cls, old, new):
    table = default_table()
    for names, path in ((old, DEBIAN_61), (new, RUNNING)):
        got = table.classify(_stack(names, _names_cached(path)))
        assert (got.name, got.cls, got.matched) == (cause, cls, True), (path.name, names)


_CACHE: dict[Path, set[str]] = {}


def _names_cached(path: Path) -> set[str]:
    if path not in _CACHE:
        _CACHE[path] = _names(path)
    return _CACHE[path]


def test_the_highest_priority_frame_wins_not_the_innermost():
    table = default_table()
    # an fsync that waits for the journal commit: fsync outranks the I/O wait inside it
    fsync = _stack(["__schedule", "schedule", "io_schedule", "bit_wait_io", "__wait_on_bit", "jbd2_log_wait_commit",
                    "ext4_sync_file", "vfs_fsync_range", "do_fsync"])
    assert table.classify(fsync).name == "fsync() on a file"
    # a page fault that waits for the page's I/O is an I/O wait
    fault = _stack(["__schedule", "io_schedule", "folio_wait_bit_common", "filemap_fault", "handle_mm_fault"])
    assert table.classify(fault).name == "Waiting for I/O"
    from stallscope.analyzer.why import Why  # and so by its evidence where no stack was walked
    assert table.classify(None, None, 2, Why("fault", iowait=True)).name == "Waiting for I/O"
    assert table.classify(None, None, 2, Why("fault")).name == "Page fault"
    # a kernel worker blocked on a mutex is lock contention, not an idle kernel thread
    kworker = _stack(["__schedule", "schedule", "schedule_preempt_disabled", "__mutex_lock.constprop.0",
                      "flush_to_ldisc", "process_one_work", "worker_thread", "kthread"])
    got = table.classify(kworker)
    assert (got.name, got.cls) == ("mutex contention: flush_to_ldisc", BLOCKER)


def test_a_futex_wait_under_pthread_cond_wait_is_idle_and_under_a_mutex_is_contention():
    table = default_table()
    k = _stack(["__schedule", "schedule", "futex_wait_queue", "futex_wait", "do_futex"], sid=77)
    cond = Stack(1, "user", (Frame(0x7f00, "__pthread_cond_wait_common", 0x10, "/lib/libc.so.6", None, None, "user"),))
    mutex = Stack(2, "user", (Frame(0x7f10, "__lll_lock_wait", 0x10, "/lib/libc.so.6", None, None, "user"),))
    assert table.classify(k, cond).cls == IDLE
    assert table.classify(k, mutex).name == "Userspace lock contention"
    assert table.classify(k).name == "Userspace lock contention"


def test_task_idle_state_is_idle_whatever_the_stack():
    table = default_table()
    s = _stack(["__schedule", "schedule", "schedule_timeout", "rcu_gp_fqs_loop", "rcu_gp_kthread", "kthread"])
    assert table.classify(s, None, 0x402).name == "Idle (TASK_IDLE)"
    assert table.classify(s, None, 0x2).name == "Kernel thread idle"


def test_a_stopped_or_traced_task_is_stopped_whatever_its_stack_or_call():
    """A traced child's signal-delivery stop after a fault has the fault's frames below ptrace_stop(); its
    syscall stops have no stack drawn, only their call (stress-ng --vm-segv): the state says it was stopped."""
    from stallscope.analyzer.why import Why

    table = default_table()
    fault = _stack(["__schedule", "schedule", "ptrace_stop", "ptrace_signal", "get_signal", "arch_do_signal_or_restart",
                    "irqentry_exit_to_user_mode", "asm_exc_page_fault"])
    assert table.classify(fault, None, 0x8).name == "Stopped (job control or ptrace)"
    assert table.classify(None, None, 0x8, Why("syscall", "munmap", "")).name == "Stopped (job control or ptrace)"
    assert table.classify(None, None, 0x104, Why("syscall", "read", "pipe")).name == "Stopped (job control or ptrace)"
    assert table.classify(None, None, 0x1, Why("syscall", "read", "pipe")).name == "Reading from a pipe"


def test_an_unmatched_wait_is_named_by_its_innermost_meaningful_frame():
    got = default_table().classify(_stack(["__schedule", "schedule", "mystery_wait", "vfs_read"]))
    assert (got.name, got.matched, got.cls) == ("mystery_wait", False, BLOCKER)


def test_a_users_table_adds_rules_and_wins_with_a_higher_priority(tmp_path):
    mine = tmp_path / "causes.toml"
    mine.write_text('[[cause]]\nname = "Waiting for the frobnicator"\npriority = 99\nframes = ["mystery_wait"]\n'
                    '[[cause]]\nname = "Reading my pipe"\npriority = 61\nframes = ["*pipe_read"]\n')
    table = CauseTable.load([str(mine)])
    assert table.classify(_stack(["__schedule", "mystery_wait"])).name == "Waiting for the frobnicator"
    assert table.classify(_stack(["__schedule", "anon_pipe_read"])).name == "Reading my pipe"


@pytest.mark.parametrize("text,why", [("[[cause]\nname=", "not valid TOML"),
                                      ('[[cause]]\nframes = ["x"]\n', "invalid"),
                                      ('[[cause]]\nname = "x"\nclass = "sleepy"\n', "invalid")])
def test_a_broken_user_table_is_a_clear_error(tmp_path, text, why):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(StallscopeError, match=why):
        CauseTable.load([str(bad)])


def test_on_a_quiet_machine_no_idle_wait_ranks_first():
    """A daemon idles for seconds in epoll and a kworker sleeps in its loop; one task waits 10 ms for
    fsync(), another sleeps by its own choice for a second (nothing held it up: idle too)."""
    daemon, kworker, app = TaskId(1, 1), TaskId(2, 2), TaskId(3, 3)
    epoll = kstack(0x10, "__schedule", "schedule", "schedule_hrtimeout_range", "do_epoll_wait")
    loop = kstack(0x20, "__schedule", "schedule", "worker_thread", "kthread", "ret_from_fork")
    sleeper = TaskId(4, 4)
    sync = kstack(0x30, "__schedule", "schedule", "jbd2_log_wait_commit", "ext4_sync_file", "__x64_sys_fsync")
    sleep = kstack(0x40, "__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep")
    iv = interval(0, task_info=(TaskInfo(daemon, 1, 0, "daemon"), TaskInfo(kworker, 2, 0, "kworker/0:1"),
                                TaskInfo(app, 3, 0, "app"), TaskInfo(sleeper, 4, 0, "sleeper")),
                  stacks=(epoll, loop, sync, sleep),
                  tasks=tuple(TaskDelta(t, offcpu_ns=1) for t in (daemon, kworker, app, sleeper)),
                  offcpu=(OffcpuDelta(daemon, 1, 1, 0x10, 0, 1, 900_000_000), OffcpuDelta(kworker, 2, 0x402, 0x20, 0, 5, 800_000_000),
                          OffcpuDelta(app, 3, 2, 0x30, 0, 1, 10_000_000),
                          OffcpuDelta(sleeper, 4, 1, 0x40, 0, 1, 1_000_000_000)))
    model = Model.from_intervals(meta(), [iv], {i.task: i for i in iv.task_info}, {s.id: s for s in iv.stacks})
    ranked = rank_blockers(model)
    assert ranked[0].cause == "fsync() on a file" and ranked[0].share_pct == 100.0
    assert {b.cls for b in ranked[1:]} == {IDLE}
    assert "Application requested delay" in {b.cause for b in ranked[1:]}
    assert [b.cause for b in rank_blockers(model, include_idle=False)] == ["fsync() on a file"]


def test_the_ranking_without_idle_causes_is_the_full_ranking_without_them(report_recording):
    """Made from the full ranking (kept per model, which a view and a report rank first), the ranking
    without idle causes equals one ranked from the parts with them left out."""
    from stallscope.analyzer.blockers import parts
    from stallscope.analyzer.load import load_model

    model = load_model(str(report_recording["stall"]))
    full = rank_blockers(model)
    assert any(b.cls == IDLE for b in full) and any(b.cls != IDLE for b in full)
    derived = rank_blockers(model, include_idle=False)
    direct = rank_blockers(model, include_idle=False, all_parts=parts(model))
    assert derived == direct
    assert derived == [b for b in full if b.cls != IDLE]


def test_a_cause_met_at_several_frames_shows_the_frame_of_most_of_its_time_in_any_order():
    """Kernel threads idle in their different main loops are one cause; the frame a blocker shows is the one
    that most of its time matched, not the first task's, so that it does not change with the order its tasks
    come in (an interval's sleeping threads and kernel threads in a live view)."""
    from stallscope.analyzer.attribution import Part
    from stallscope.analyzer.causes import Cause

    a, b, c = TaskId(1, 1), TaskId(2, 2), TaskId(3, 3)
    iv = interval(0, task_info=tuple(TaskInfo(t, t.pid, 0, f"k{t.pid}") for t in (a, b, c)),
                  tasks=tuple(TaskDelta(t, offcpu_ns=1) for t in (a, b, c)))
    model = Model.from_intervals(meta(), [iv], {i.task: i for i in iv.task_info}, {})

    def part(task, frame, ns):
        return Part(Cause("Kernel thread idle", IDLE, frame), task, ns=float(ns), count=1, max_ns=ns)

    parts = [part(a, "kcompactd+0x10", 300), part(b, "smpboot_thread_fn+0x18c", 200),
             part(c, "smpboot_thread_fn+0x18c", 200)]
    for order in (parts, parts[::-1], parts[1:] + parts[:1]):
        (idle,) = rank_blockers(model, all_parts=order)
        assert (idle.cause, idle.frame, idle.total_ns) == ("Kernel thread idle", "smpboot_thread_fn+0x18c", 700)
    # the same time at two frames: the one that sorts last, whatever the order
    even = [part(a, "kcompactd+0x10", 200), part(b, "smpboot_thread_fn+0x18c", 200)]
    assert {rank_blockers(model, all_parts=o)[0].frame for o in (even, even[::-1])} == {"smpboot_thread_fn+0x18c"}


def test_a_stack_walked_after_the_wait_names_the_lock_by_its_call_site():
    """bpf_get_task_stack() leaves out the .sched.text functions (the rwsem slow path, down_write...):
    the stack starts at the caller, which is enough to know mmap_lock from a directory's i_rwsem."""
    table = default_table()
    for path in (DEBIAN_61, RUNNING):
        names = _names_cached(path)
        mmap = table.classify(_stack(["vm_mmap_pgoff", "ksys_mmap_pgoff", "do_syscall_64"], names))
        assert mmap.name == "rwsem contention: mmap_lock"
        unlink = table.classify(_stack(["do_unlinkat", "__x64_sys_unlink", "do_syscall_64"], names))
        assert unlink.name == "rwsem contention: directory i_rwsem"
    # deeper in, vm_mmap_pgoff is only on the way: a wait for I/O under it is an I/O wait
    deeper = table.classify(_stack(["folio_wait_bit_common", "__mm_populate", "vm_mmap_pgoff", "do_syscall_64"]))
    assert deeper.name == "Waiting for I/O"
    # a frame the innermost rule names, but not innermost and nothing else matching: unmatched
    other = table.classify(_stack(["mystery_wait", "vm_mmap_pgoff"]))
    assert other.matched is False


@needs_bpf
def test_the_ranking_of_sleeping_threads_grouped_is_the_ranking_of_their_parts(tmp_path):
    """The ranking and its denominator read the parts of tasks alike grouped (attribution.py Alike: a stratum of
    waits none drawn for a stack walk, named by its evidence), not a Part each: on a real recording of sleeping
    threads waking now and then, a reader waiting seconds on a pipe (its time moves to "..., nothing came") and
    hackbench, every window ranks as its parts do, idle causes in or out, and a view's ranking without idle
    causes is the full ranking without them. Most sleeping threads are grouped in one pass (attribution.py
    _asleep: a wait alone in its task, not pooled, not for input), those whose waits were drawn for a stack walk
    among them (named by their stacks, which the ranking's top stacks read)."""
    import dataclasses

    from stallscope.analyzer import attribution, blockers
    from stallscope.analyzer.memo import memoised
    from stallscope.analyzer.store import Recording
    from stallscope.analyzer.timeline import Timeline

    stall = tmp_path / "idle.stall"
    idle = subprocess.Popen([example("idle_threads"), "-n", "400", "-p", "700", "-d", "8"], stdout=subprocess.DEVNULL)
    try:
        run_stallscope("record", "-o", str(stall), "-i", "0.5s", "--", "sh", "-c",
                       f"{example('pipe_reader')} -n 2 -m 1600 >/dev/null & perf bench sched messaging -g 1 -l 100 "
                       ">/dev/null; sleep 2.5; wait", timeout=300)
    finally:
        idle.kill()
        idle.wait()
    rec = Recording(str(stall))
    try:
        tl = Timeline(rec.meta, live=True, cache_size=2)
        tl.task_info.update(rec.tasks())
        tl.stacks.update(rec.stacks())
        tl.functions.update(rec.functions())
        ivs = list(rec.intervals())
    finally:
        rec.close()
    for iv in ivs:
        tl.add(iv)
    grouped_tasks = moved = asleep = drawn = pairs = 0
    for first, last in [(iv.index, iv.index) for iv in ivs] + [(ivs[0].index, ivs[-1].index)]:
        snap = tl.window(first, last)
        model, scope = snap.model, snap.scope
        groups, rest = attribution._asleep(model, default_table(), attribution._arch(model))
        asleep += sum(len(a.tasks) for a in groups)
        drawn += sum(attribution._drawn(w) for a in groups for waits in a.waits for w in waits)
        # the passes in C (analyzer/modelfold.c) group as the Python does, in its order
        py_groups, py_rest = attribution.py_asleep(model, default_table(), attribution._arch(model))
        assert [(a.cause, a.tasks, a.ns, a.waits) for a in groups] == [(a.cause, a.tasks, a.ns, a.waits)
                                                                       for a in py_groups]
        assert rest == py_rest
        if model.waits_now is not None:
            for tasks in (None, scope):
                assert (blockers._waits_now_groups(model.waits_now, tasks)
                        == blockers.py_waits_now_groups(model.waits_now, tasks))
        # a stratum of a drawn wait and one it stands for made at once (attribution.py _drawn_and_shared) as any other
        table = default_table()

        def made(table=table, model=model):
            g = attribution._grouped.__wrapped__(model, table)
            return (attribution._strata_all.__wrapped__(model, table), g.parts,
                    [(a.cause, a.tasks, a.ns, a.waits) for a in g.alike])

        at_once = made()
        attribution.PAIR_AT_ONCE = False
        try:
            general = made()
        finally:
            attribution.PAIR_AT_ONCE = True
        assert at_once == general, (first, last)
        pairs += sum(len(s) == 2 and s[0].measured and not s[1].measured and attribution._drawn(s[0].wait)
                     for s in attribution.split_waits(model, None, table).values())
        # each task's causes (the Tasks view's), from the grouped parts while no part was made one by one
        assert memoised(attribution._attribute, model, None) is None
        by_task = {t: [(c.name, ns) for c, ns in cs] for t, cs in blockers.causes_by_task(model, scope).items()}
        assert memoised(attribution._grouped, model, None) is not None
        for tasks in (None, scope):
            every = blockers.parts(model, tasks)
            grouped = blockers.grouped_parts(model, tasks)
            grouped_tasks += sum(len(a.tasks) for a in grouped.alike)
            moved += sum(len(a.tasks) for a in grouped.alike if a.cause.name.endswith(", nothing came"))
            for include_idle in (True, False):
                want = blockers._rank(every, include_idle, "total", False)
                got = blockers._rank(grouped.parts, include_idle, "total", False, grouped.alike)
                assert [dataclasses.astuple(b) for b in got] == [dataclasses.astuple(b) for b in want], (first, last)
            assert blockers.denominator(*grouped) == blockers.denominator(every)
        # ... those of every part, summed
        summed: dict = {}
        for p in blockers.parts(model, scope):
            e = summed.setdefault(p.task, {})
            e[p.cause.name] = e.get(p.cause.name, 0.0) + p.ns
        assert by_task == {t: sorted(((c, round(ns)) for c, ns in d.items()), key=lambda kv: (-kv[1], kv[0]))
                           for t, d in summed.items()}, (first, last)
        full = blockers._with_waits_now(blockers._rank(blockers.parts(model, scope), True, "total", False),
                                        blockers.waits_now_by_cause(model, scope))
        assert snap.ranked == [b for b in full if b.cls != IDLE]
        assert abs(snap.idle_ns - sum(b.total_ns for b in full if b.cls == IDLE)) <= len(full)
    assert grouped_tasks > 1000 and moved and asleep > 1000 and drawn and pairs > 100, (grouped_tasks, moved, asleep,
                                                                                         drawn, pairs)
    # each window's model the same with its last interval's waits carried on made at once (model.py _carried_made:
    # as `top` makes its interval's) as folded; most intervals' were made at once
    from stallscope.analyzer import model as M

    at_once = 0
    for first, last in [(iv.index, iv.index) for iv in ivs] + [(ivs[0].index, ivs[-1].index)]:
        window = ivs[first - ivs[0].index:last - ivs[0].index + 1]
        fold = M.ModelFold(rec.meta, tl.slab_caches, tl.functions, lazy=True).add(window)
        at_once += fold._carried is not None and M._carried_made(fold._carried, fold.tasks, fold.waits,
                                                                tl.task_info, tl.stacks, tl.functions) is not None
        made = fold.model(tl.task_info, tl.stacks)
        M.CARRIED_AT_ONCE = False
        try:
            folded = M.ModelFold(rec.meta, tl.slab_caches, tl.functions, lazy=True).add(window).model(tl.task_info,
                                                                                                    tl.stacks)
        finally:
            M.CARRIED_AT_ONCE = True
        assert list(made.tasks.items()) == list(folded.tasks.items())
        assert made.waits == folded.waits
        assert made.waits_now == folded.waits_now
        assert (made.waits_now.keys, made.waits_now.places) == (folded.waits_now.keys, folded.waits_now.places)
    assert at_once >= len(ivs) // 2, (at_once, len(ivs))


def test_a_task_twice_in_a_group_of_tasks_alike_has_both_its_parts():
    """A pipe reader with two reads in different strata is in one group twice: its wait is the sum (the
    group's total always was; the task's own share kept the last part only, half of it in a recording)."""
    from stallscope.analyzer import blockers
    from stallscope.analyzer.attribution import Alike
    from stallscope.analyzer.causes import Cause
    from stallscope.analyzer.sample import TaskId

    reader, other = TaskId(10, 1), TaskId(11, 1)
    cause = Cause("Reading from a pipe, nothing came", IDLE, "", True)
    group = Alike(cause, [other, reader, reader], [4_000, 500, 500], [[], [], []])
    b = blockers._rank([], True, "total", False, [group])[0]
    assert dict(zip(b.tasks, b.task_ns)) == {other: 4_000, reader: 1_000} and b.total_ns == 5_000


@pytest.mark.parametrize("syscall, cause", [
    ("mq_timedreceive", "POSIX message queue"), ("mq_timedsend", "POSIX message queue"),
    ("msgrcv", "System V IPC (message queue, semaphore)"), ("semtimedop", "System V IPC (message queue, semaphore)"),
])
def test_posix_message_queues_are_not_called_system_v_ipc(syscall, cause):
    """stress-ng --mq blocks in mq_timedsend/mq_timedreceive (ipc/mqueue.c), which is no System V IPC."""
    from stallscope.analyzer.why import Why

    got = default_table().classify(_stack(["__schedule", "schedule", "schedule_hrtimeout_range_clock", "wq_sleep"]),
                                   why=Why("syscall", syscall))
    assert got is not None and got.name == cause


def test_a_wait_in_io_wait_is_waiting_for_io_where_no_frame_or_call_says_more():
    """io_schedule() marks the task (why.IOWAIT): ext4 reading a block bitmap reaches it through
    wait_on_buffer()'s tail call, so its stack walked at the switch-in starts at ext4_wait_block_bitmap;
    an undrawn work item's wait has no stack at all. The call's own evidence (reading a file) and any frame
    rule stay first."""
    from stallscope.analyzer.why import IOWAIT, Why, decode

    assert decode(IOWAIT | 1 | 1 << 10).iowait and not decode(1 | 1 << 10).iowait
    bitmap = _stack(["ext4_wait_block_bitmap", "ext4_mb_init_cache", "ext4_mb_load_buddy_gfp", "ext4_mb_new_blocks",
                     "ext4_ext_map_blocks", "ext4_do_writepages", "ext4_writepages", "do_writepages"])
    table = default_table()
    # stress-ng --hdd: the delayed allocation flushed at close()
    assert table.classify(bitmap, why=Why("syscall", "close", iowait=True)).name == "Waiting for I/O"
    assert table.classify(bitmap, why=Why("syscall", "close")).name == "ext4_wait_block_bitmap"
    work = Why("kworker", function="wb_workfn", iowait=True)
    assert table.classify(None, why=work).name == "Waiting for I/O"
    assert table.classify(None, why=Why("kworker", function="wb_workfn")).name == "Kernel work item: wb_workfn"
    assert table.classify(None, why=Why("syscall", "read", "file", iowait=True)).name == "Reading from a file"
    assert table.classify(_stack(["jbd2_log_wait_commit", "ext4_sync_file", "do_fsync"]), state=2,
                          why=Why("syscall", "fsync", "file", iowait=True)).name == "fsync() on a file"


def test_a_files_position_lock_is_named_whether_the_mutex_frames_are_there_or_not():
    """read(), write() and lseek() of a file whose descriptor threads share take its f_pos_lock in fdget_pos():
    a stack walked in the switch's context shows the mutex's slow path, one walked at the switch-in starts at
    fdget_pos (stress-ng --iomix read 'fdget_pos', unmatched, and 'Writing to a file' for the same waits)."""
    from stallscope.analyzer.why import Why

    table = default_table()
    bare_stack = _stack(["fdget_pos", "ksys_write", "do_syscall_64"])
    assert table.classify(bare_stack, why=Why("syscall", "write", "file")).name == "mutex contention: f_pos_lock"
    assert table.classify(_stack(["fdget_pos", "ksys_lseek", "do_syscall_64"]),
                          why=Why("syscall", "lseek", "file")).name == "mutex contention: f_pos_lock"
    slow = _stack(["__schedule", "schedule", "schedule_preempt_disabled", "__mutex_lock.constprop.0", "fdget_pos",
                   "ksys_read", "do_syscall_64"])
    assert table.classify(slow, state=2).name == "mutex contention: f_pos_lock"


def test_msync_is_said_as_the_call_the_program_made_not_as_fsync():
    """msync(MS_SYNC) writes a shared mapping back through vfs_fsync_range() and the journal, as fsync() does
    (stress-ng --madvise's msync() read "fsync() on a file"): the same frames under msync are msync's."""
    from stallscope.analyzer.why import Why

    table = default_table()
    frames = ["__schedule", "schedule", "jbd2_log_wait_commit", "ext4_sync_file", "vfs_fsync_range",
              "__do_sys_msync"]
    assert table.classify(_stack(frames), state=2, why=Why("syscall", "msync", "")).name == "msync() on a file"
    assert table.classify(None, state=2, why=Why("syscall", "msync", "")).name == "msync() on a file"
    fsync = _stack(frames[:-1] + ["do_fsync", "__x64_sys_fsync"])
    assert table.classify(fsync, state=2, why=Why("syscall", "fsync", "file")).name == "fsync() on a file"
    assert table.classify(None, state=2, why=Why("syscall", "fdatasync", "file")).name == "fsync() on a file"


def test_a_long_cause_name_is_never_cut_in_the_text_tables():
    """The end of a cause's name names the lock, the caller or the work ('Waiting for a workqueue flush in
    fsnotify_destroy_group' was cut at 50 characters): the column widens to the longest name up to 72, and a
    longer name has a line of its own, the row's numbers on the next, under the column."""
    from stallscope.tui.causes import LABEL_MAX, LABEL_MIN, label_cell, label_width

    assert label_width(["Waiting for CPU"]) == LABEL_MIN
    flush = "Waiting for a workqueue flush in fsnotify_destroy_group"
    assert label_width(["Waiting for CPU", flush]) == len(flush) and label_cell(flush, len(flush)) == flush
    long = "rwsem contention: mmap_lock at a uprobe hit (the tracing's cost) [idle] " + "x" * 10
    assert label_width([long]) == LABEL_MAX
    first, second = label_cell(long, LABEL_MAX).split("\n")
    assert first == long and second == " " * LABEL_MAX


def test_a_vfork_not_drawn_is_named_by_its_call_as_a_drawn_one_is_by_its_frames():
    """gcc starts cc1 and as with vfork(): the waits drawn for a walk read "Waiting for a vfork() child to exec
    or exit" (wait_for_vfork_done), those not drawn read "In vfork()", unmatched, for the same wait."""
    from stallscope.analyzer.why import Why

    table = default_table()
    drawn = table.classify(_stack(["__schedule", "schedule", "schedule_timeout", "__wait_for_common",
                                   "wait_for_vfork_done", "kernel_clone", "__x64_sys_vfork"]), state=0x2102,
                           why=Why("syscall", "vfork", ""))
    undrawn = table.classify(None, state=0x2102, why=Why("syscall", "vfork", ""))
    assert drawn.name == undrawn.name == "Waiting for a vfork() child to exec or exit" and undrawn.matched


def test_an_eventfd_read_is_a_consumer_held_up_like_a_pipe_read_and_timers_stay_idle():
    from stallscope.analyzer.causes import BLOCKER, IDLE
    from stallscope.analyzer.why import Why

    table = default_table()
    for cause in (table.classify(_stack(["__schedule", "schedule", "eventfd_read", "vfs_read", "ksys_read"]), state=1),
                  table.classify(None, state=1, why=Why("syscall", "read", "eventfd"))):
        assert (cause.name, cause.cls, cause.input) == ("Reading from an eventfd", BLOCKER, True)
    timer = table.classify(None, state=1, why=Why("syscall", "read", "timerfd"))
    assert (timer.name, timer.cls) == ("Waiting for events (signalfd, timerfd, inotify)", IDLE)


def test_ext4s_extent_map_waits_for_the_inodes_lock():
    """FIEMAP of an ext4 file another task fallocate()s (stress-ng --fiemap) read unmatched 'ext4_fiemap': stacks
    walked at the switch-in start there, where it takes the inode's i_rwsem (the lock table names ext4_fiemap+0x27).
    ext4 is a module in Debian's 6.1: not in its table."""
    table = default_table()
    fiemap = _stack(["ext4_fiemap", "do_vfs_ioctl", "__x64_sys_ioctl", "do_syscall_64"])
    slow = _stack(["__schedule", "schedule", "rwsem_down_read_slowpath", "down_read", "ext4_fiemap", "do_vfs_ioctl"])
    for stack in (fiemap, slow):
        assert table.classify(stack, state=2).name == "rwsem contention: inode i_rwsem"
    # ext4_fallocate() takes the inode's lock and the mapping's invalidate_lock: its caller names the wait
    fallocate = _stack(["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write", "ext4_fallocate",
                        "vfs_fallocate", "__x64_sys_fallocate"])
    assert table.classify(fallocate, state=2).name == "rwsem contention: ext4_fallocate"


def test_6_18s_mremap_waits_for_the_mmap_lock_where_do_mremap_starts():
    """stress-ng --pagemove read an unmatched 'do_mremap' (6.18's mremap(), mmap_write_lock_killable() at
    do_mremap+0x185 in the lock table); Debian's 6.1 has no do_mremap."""
    table = default_table()
    for stack in (_stack(["do_mremap", "__do_sys_mremap", "do_syscall_64"]),
                  _stack(["__schedule", "schedule", "rwsem_down_write_slowpath", "down_write_killable", "do_mremap",
                          "__do_sys_mremap"])):
        assert table.classify(stack, state=2).name == "rwsem contention: mmap_lock"


def test_a_threads_exit_waiting_for_its_mm_is_named_by_the_locks_frames_not_by_do_exit_alone():
    """A thread's exit reads the mmap_lock in do_exit() (exit_mm() inlined: do_exit+0x1f1, stress-ng --pthread).
    With the lock's frames the wait is the mmap_lock's; a stack that starts at do_exit stays unmatched, as a thread
    waiting there for a sibling's core dump starts there too (causes --unknown points at the lock table)."""
    table = default_table()
    locked = _stack(["__schedule", "schedule", "rwsem_down_read_slowpath", "down_read", "do_exit", "__x64_sys_exit"])
    assert table.classify(locked, state=2).name == "rwsem contention: mmap_lock"
    bare_exit = table.classify(_stack(["do_exit", "__x64_sys_exit", "do_syscall_64"]), state=2)
    assert (bare_exit.name, bare_exit.matched) == ("do_exit", False)


def test_the_uprobe_rule_and_the_lock_advice_know_the_same_uprobe_frames():
    """A wait at a uprobe hit is named by the cause table and weighed by the lock advice (recommend.py): both
    from one list of the kernel's uprobe-hit functions."""
    from stallscope.analyzer.frames import UPROBE_FRAMES

    rule = next(r for r in default_table().rules if "at a uprobe hit" in r.name)
    assert {f.rstrip("*") for f in rule.frames} == set(UPROBE_FRAMES)


def test_a_task_in_its_exit_is_named_by_that_only_where_no_stack_names_its_wait():
    """The exit context (PF_EXITING) names a wait with no stack walked; a walked stack in do_exit() keeps its
    own name (its frame, or a lock wanted at its call site), never hidden under the exit."""
    from stallscope.analyzer.why import CTX_SHIFT, decode
    from synthetic import kstack

    exiting = decode(6 << CTX_SHIFT)
    assert exiting.context == "exit" and exiting.describe() == "the task's exit"
    table = default_table()
    assert table.classify(None, None, 2, exiting).name == "Exiting (do_exit)"
    walked = kstack(1, "do_exit", "do_group_exit", "__x64_sys_exit_group", "do_syscall_64")
    cause = table.classify(walked, None, 2, exiting)
    assert (cause.name, cause.matched) == ("do_exit", False), cause


def test_an_io_uring_worker_is_not_read_as_a_page_fault():
    """An io_uring worker (iou-wrk-*, PF_IO_WORKER) never made a call of its own: its saved registers are its
    creator's. Its own context names its idle waits without a stack; a walked stack names its own."""
    from stallscope.analyzer.why import CTX_SHIFT, decode
    from synthetic import kstack

    worker = decode(7 << CTX_SHIFT)
    assert worker.context == "io-worker" and worker.describe() == "an io_uring worker"
    table = default_table()
    idle = table.classify(None, None, 1, worker)
    assert (idle.name, idle.cls) == ("io_uring worker idle", IDLE)
    assert table.classify(None, None, 2, worker).name == "In an io_uring worker"
    walked = kstack(1, "io_wq_worker", "ret_from_fork", "ret_from_fork_asm")
    assert table.classify(walked, None, 1, worker).name == "Kernel thread idle"


def test_a_processs_other_kernel_workers_are_not_read_as_page_faults_either():
    """vhost and KVM's kvm-nx-lpage-recovery (PF_USER_WORKER) have their creator's registers too: their idle waits
    are a kernel thread's, with a stack walked (vhost_task_fn) or not."""
    from stallscope.analyzer.why import CTX_SHIFT, decode
    from synthetic import kstack

    worker = decode(7 << CTX_SHIFT | 1)
    assert worker.context == "user-worker" and worker.describe() == "a process's kernel worker"
    assert decode(7 << CTX_SHIFT).context == "io-worker"
    table = default_table()
    walked = kstack(1, "vhost_task_fn", "ret_from_fork", "ret_from_fork_asm")
    for stack in (None, walked):
        cause = table.classify(stack, None, 1, worker)
        assert (cause.name, cause.cls) == ("Kernel thread idle", IDLE)
    assert table.classify(None, None, 2, worker).name == "In a process's kernel worker"
    # a KVM VM's release waiting for its worker to exit (stress-ng --kvm, 6.18; vhost_task came in 6.4)
    stop = _stack(["vhost_task_stop", "kvm_arch_pre_destroy_vm", "kvm_destroy_vm", "kvm_vm_release", "__fput"],
                  _names_cached(RUNNING))
    assert table.classify(stop).name == "Waiting for a process's kernel worker to exit in kvm_arch_pre_destroy_vm"


def test_a_wait_in_a_uprobes_breakpoint_trap_is_not_read_as_a_page_fault():
    """An exception from user mode whose instruction pointer is at a breakpoint (bpf/why.bpf.h at_uprobe) is a uprobe
    hit: with no stack walked, named by that; walked on 6.18, a hit waiting for a probe being removed sleeps on the
    probe's register_rwsem in handler_chain (sysbench threads under the futex group's uprobes being removed, read as
    "Page fault" before), apart from its lookup's mmap_lock."""
    from stallscope.analyzer.why import CTX_SHIFT, decode

    trap, fault = decode(2 << CTX_SHIFT | 1), decode(2 << CTX_SHIFT)
    assert (trap.context, trap.describe()) == ("uprobe", "a uprobe's breakpoint trap")
    assert (fault.context, fault.describe()) == ("fault", "a page fault")
    table = default_table()
    assert table.classify(None, None, 2, trap).name == "In a uprobe's breakpoint trap (the tracing's cost)"
    assert table.classify(None, None, 2, fault).name == "Page fault"
    names = _names_cached(RUNNING)
    handlers = _stack(["handler_chain", "uprobe_notify_resume", "irqentry_exit_to_user_mode", "asm_exc_int3"], names)
    lookup = _stack(["find_active_uprobe_rcu", "uprobe_notify_resume", "irqentry_exit_to_user_mode", "asm_exc_int3"],
                    names)
    assert table.classify(handlers, None, 2, trap).name == (
        "rwsem contention: a uprobe's register_rwsem (the probe added or removed)")
    assert table.classify(lookup, None, 2, trap).name == "rwsem contention: mmap_lock at a uprobe hit (the tracing's cost)"


def test_a_unix_sockets_wait_without_a_stack_is_named_as_a_walked_one_is():
    """The evidence tells a unix socket from the others (bpf/why.bpf.h fd_kind reads the socket's family): a
    reader or writer of one whose wait drew no stack is named as one whose stack was walked (hackbench's senders
    read as "Sending on a socket (buffer full)" beside "Sending on a unix socket (peer's queue full)", one thing
    in two rows); any other socket keeps the general names, and a rule for "socket" matches a unix one too."""
    from stallscope.analyzer.why import CTX_SHIFT, FD_SHIFT, decode

    call = 1 << CTX_SHIFT
    read_unix, send_unix = decode(call | 0 | 14 << FD_SHIFT), decode(call | 46 | 14 << FD_SHIFT)
    read_inet, accept_unix = decode(call | 0 | 2 << FD_SHIFT), decode(call | 43 | 14 << FD_SHIFT)
    assert (read_unix.fd, read_unix.describe()) == ("unix socket", "read() on a unix socket")
    table = default_table()
    assert table.classify(None, None, 1, read_unix).name == "Reading from a unix socket"
    assert table.classify(None, None, 1, read_unix).input
    assert table.classify(None, None, 1, send_unix).name == "Sending on a unix socket (peer's queue full)"
    assert table.classify(None, None, 1, read_inet).name == "Reading from a socket"
    assert table.classify(None, None, 1, accept_unix).name == "Waiting for a connection (accept)"
    mine = CauseTable(CauseTable.parse('[[cause]]\nname = "Talking to the bus"\npriority = 99\nfd = ["socket"]\n', "mine"))
    assert mine.classify(None, None, 1, read_unix).name == "Talking to the bus"


def test_a_32_bit_call_is_named_from_the_compat_table_and_its_rules_are_the_64_bit_calls_of_that_name():
    """A compat call's number is the ia32 table's (29 is pause there, shmget on x86-64): context "" with the
    number plus one in the call bits."""
    from stallscope.analyzer.why import COMPAT_BIAS, decode

    pause = decode(29 + COMPAT_BIAS)
    assert (pause.context, pause.syscall, pause.compat, pause.fd) == ("syscall", "pause", True, "")
    assert pause.describe() == "pause() (32-bit)"
    assert decode(0).context == "" and decode(29 | 1 << 10).syscall == "shmget"
    assert default_table().classify(None, None, 1, pause).name == "Waiting for a signal (pause, sigsuspend, sigtimedwait)"


COMPAT_PAUSE = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
static void on_usr1(int sig) { (void)sig; }
int main(int argc, char **argv)
{
	int n = atoi(argv[1]);
	signal(SIGUSR1, on_usr1);
	printf("ready\n");
	fflush(stdout);
	for (int i = 0; i < n; i++) { /* pause() through int 0x80: the ia32 table's call 29 */
		long r;
		__asm__ volatile("int $0x80" : "=a"(r) : "a"(29L) : "r8", "r9", "r10", "r11", "memory", "cc");
	}
	return 0;
}
"""


@needs_bpf
@pytest.mark.skipif(platform.machine() != "x86_64", reason="int 0x80 is x86's compat entry")
def test_a_compat_calls_waits_have_their_evidence_drawn_or_not(tmp_path):
    """stress-ng --enosys's 32-bit calls had waits with no evidence: a wait not drawn for a stack walk was
    "(not drawn for a stack walk)". Here a program sleeps in pause() through int 0x80, woken by a signal 30 times;
    every one of its waits reads pause() (32-bit) from its registers, and names its cause without a stack."""
    from stallscope.analyzer.attribution import wait_evidence
    from stallscope.analyzer.load import load_model

    src, binary = tmp_path / "compat_pause.c", tmp_path / "compat_pause"
    src.write_text(COMPAT_PAUSE)
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(src)], check=True)
    driver = tmp_path / "drive.sh"
    driver.write_text(f"{binary} 30 >/dev/null & p=$!\nsleep 0.3\n"
                      "for i in $(seq 30); do kill -USR1 $p; sleep 0.05; done\nwait $p\n")
    stall = tmp_path / "compat.stall"
    run_stallscope("record", "-o", str(stall), "--no-degrade", "--", "sh", str(driver))
    model = load_model(str(stall))
    table = default_table()
    seen, named = 0, set()
    for w in model.waits:
        t = model.tasks.get(w.task)
        if t is None or t.info.comm != "compat_pause" or w.state != 1:
            continue
        e = wait_evidence(model, w)
        assert (e.context, e.syscall, e.compat) == ("syscall", "pause", True), e
        seen += w.count
        named.add(table.classify(None, None, w.state, e).name)
    assert seen >= 30 and named == {"Waiting for a signal (pause, sigsuspend, sigtimedwait)"}, (seen, named)


def test_a_frozen_block_queue_is_named_by_who_froze_it():
    """A loop device's block size set, an I/O scheduler switched: the queue frozen until every request in flight
    is done (stress-ng --loop, 6.18 stacks; the loop driver is a module, in no vmlinux symbol list)."""
    table = default_table()
    for caller in ("loop_set_block_size", "elevator_change"):
        stack = _stack(["blk_mq_freeze_queue_wait", caller, "blkdev_ioctl", "__x64_sys_ioctl", "do_syscall_64"])
        assert table.classify(stack).name == f"Waiting for a block queue to drain (frozen in {caller})"


PARKER = r"""
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
/* Rust std's thread parker on Linux: the word is PARKED (-1) while the thread waits, FUTEX_WAIT_BITSET | private,
 * no timeout, every bit; unpark sets it to NOTIFIED (1) and wakes it. */
static _Atomic uint32_t word;
/* slept: the waits woken (returned 0) that slept, a voluntary switch during the call; not one that found the word
 * changed (EAGAIN), nor one woken after it queued itself but before it switched out, which returns 0 unslept */
static int n, slept;
static long switches(void)
{
	struct rusage ru;
	return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nvcsw : -1;
}
static void *parker(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "parked", 0, 0, 0);
	for (int i = 0; i < n; i++) {
		word = UINT32_MAX;
		while (word == UINT32_MAX) {
			long before = switches();
			if (syscall(SYS_futex, &word, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, UINT32_MAX, NULL, NULL,
				    ~0u) == 0 && switches() > before)
				slept++;
		}
	}
	return NULL;
}
int main(int argc, char **argv)
{
	pthread_t t;
	struct timespec gap = {0, 40 * 1000 * 1000};
	n = atoi(argv[1]);
	pthread_create(&t, NULL, parker, NULL);
	for (int i = 0; i < n; i++) {
		nanosleep(&gap, NULL);
		while (word != UINT32_MAX)
			sched_yield();
		word = 1;
		syscall(SYS_futex, &word, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1, NULL, NULL, 0);
	}
	pthread_join(t, NULL);
	FILE *out = fopen(argv[2], "w");
	fprintf(out, "%d\n", slept);
	return fclose(out) != 0;
}
"""


def test_a_futex_wait_for_minus_one_is_a_parked_thread_not_a_lock():
    """Rust std parks a thread on a futex word holding -1 (PARKED); such a wait had no futex flag, so it read as
    "Userspace lock contention", a blocker: a parked worker ranked first on a quiet machine. The evidence's park
    flag names it an idle cause, above the futex frames' rule; a lock word's wait is still contention."""
    from stallscope.analyzer.why import CTX_SHIFT, FUTEX_LOCKWORD, FUTEX_PARK, decode

    futex = 1 << CTX_SHIFT | 202
    table = default_table()
    park, lock, bare = decode(futex | FUTEX_PARK), decode(futex | FUTEX_LOCKWORD), decode(futex)
    assert park.describe() == "futex() of a parked thread"
    assert (table.classify(None, None, 1, park).name, table.classify(None, None, 1, park).cls) == (
        "Parked until another thread wakes it", IDLE)
    assert table.classify(None, None, 1, lock).name == table.classify(None, None, 1, bare).name == (
        "Userspace lock contention")
    walked = _stack(["__schedule", "schedule", "futex_do_wait", "__futex_wait", "futex_wait", "do_futex"], sid=91)
    assert table.classify(walked, None, 1, park).name == "Parked until another thread wakes it"
    assert table.classify(walked, None, 1, lock).name == "Userspace lock contention"


@needs_bpf
def test_a_parked_threads_waits_are_idle_in_the_ranking_and_not_a_lock_in_the_locks_table(tmp_path):
    """A thread parked as Rust std parks one, woken 25 times by its main thread: every wait (walked or not) reads
    the park flag, its time is the idle cause's, and the futex group lists its word as a park, not a lock. A wait
    that finds the word changed (its thread came late to it), or is woken before it switches out, returns without
    sleeping and is no wait: the program counts those that slept (a voluntary switch during the call)."""
    from stallscope.analyzer.blockers import causes_by_task
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.locks import lock_stats

    src, binary = tmp_path / "parker.c", tmp_path / "parker"
    src.write_text(PARKER)
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(binary), str(src)], check=True)
    stall = tmp_path / "park.stall"
    slept_file = tmp_path / "slept"
    run_stallscope("record", "-o", str(stall), "--no-degrade", "--", str(binary), "25", str(slept_file))
    slept = int(slept_file.read_text())
    assert slept >= 20, slept
    model = load_model(str(stall))
    parked = [t for t, tt in model.tasks.items() if tt.info.comm == "parked"]
    assert len(parked) == 1, parked
    causes = {c.name: ns for c, ns in causes_by_task(model, set(parked))[parked[0]]}
    assert "Userspace lock contention" not in causes, causes
    assert causes["Parked until another thread wakes it"] >= slept * 30_000_000, (slept, causes)
    words = [s for s in lock_stats(model) if s.is_futex and parked[0] in s.tasks]  # not main's join of it
    assert words and all(s.futex_kind == "park" and not s.is_lock for s in words), [
        (s.name, s.futex_kind, s.contentions) for s in words]
    assert sum(s.contentions for s in words) >= slept, (slept, [(s.name, s.contentions) for s in words])


def test_who_waited_shows_whole_names_then_how_many_more():
    from stallscope.tui.causes import names_within

    names = ["sched-messaging", "idle", "kdamond.0", "kworker/0:0", "rcu_preempt", "ksoftirqd/0", "kcompactd0"]
    assert names_within(names, 61) == "sched-messaging, idle, kdamond.0, kworker/0:0, rcu_preempt +2"
    assert names_within(names, 60) == "sched-messaging, idle, kdamond.0, kworker/0:0 +3"
    assert names_within(names[:2], 60) == "sched-messaging, idle"
    assert names_within(["x" * 70, "y"], 20) == "x" * 16 + "\u2026 +1"  # the first is there, cut and said to be
    assert names_within([], 60) == ""


def test_function_globs_compiled_match_as_fnmatch_does():
    """A rule's kernel-thread function globs, compiled with the table, hold of a function exactly where one of
    them matches it as fnmatch.fnmatchcase does (the names each glob spells out, near misses, case)."""
    import fnmatch

    from stallscope.analyzer.causes import _evidence_holds
    from stallscope.analyzer.why import Why

    table = default_table()
    rules = [r for r in table.rules if r.functions]
    assert rules
    for rule in rules:
        names = {g.replace("*", "x").replace("?", "y") for g in rule.functions}
        names |= {n + "_" for n in names} | {n.upper() for n in names} | {"", "kthread", "worker_thread"}
        for name in names:
            # the other evidence as the rule asks, so that only the functions decide
            why = Why(rule.context[0] if rule.context else "kthread", syscall=rule.syscalls[0] if rule.syscalls else "",
                      fd=rule.fd[0] if rule.fd else "", flags=frozenset(rule.futex), function=name,
                      woken_by=rule.woken_by, iowait=rule.iowait)
            want = any(fnmatch.fnmatchcase(name, g) for g in rule.functions)
            assert _evidence_holds(rule, why, table._functions[id(rule)]) == want, (rule.name, name)
