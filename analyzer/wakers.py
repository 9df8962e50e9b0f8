"""Who woke a task: a task, or an interrupt, softirq or timer.

The waker is recorded at sched_waking, in the waker's context. When that
context is an interrupt, the "current" task is whatever the interrupt landed
on (often the idle task, pid 0, "swapper"), which is not who woke anybody: the
waker's kernel stack tells the context apart.
"""

from __future__ import annotations

from stallscope.analyzer.sample import Stack

_TIMER = ("hrtimer_wakeup", "call_timer_fn", "__run_timers", "__hrtimer_run_queues", "hrtimer_interrupt",
          "tick_nohz_handler", "posix_timer_fn", "it_real_fn")
_SOFTIRQ = ("handle_softirqs", "__do_softirq", "do_softirq", "net_rx_action", "rcu_core", "tasklet_action",
            "blk_done_softirq", "run_ksoftirqd")
_HARDIRQ = ("handle_irq_event", "__common_interrupt", "common_interrupt", "sysvec_", "asm_sysvec_",
            "asm_common_interrupt", "handle_edge_irq", "handle_fasteoi_irq", "irq_exit_rcu",
            "__sysvec_call_function", "generic_smp_call_function")


def waker_context(waker_pid: int, stack: Stack | None) -> str:
    """One of "task", "timer", "softirq", "irq"; "irq" also when an idle CPU woke a task with no stack."""
    names = [f.symbol or "" for f in stack.frames] if stack else []
    # The innermost kind of frame wins: a timer callback runs inside the timer interrupt.
    for name in names:
        if name.startswith(_TIMER):
            return "timer"
        if name.startswith(_SOFTIRQ):
            return "softirq"
        if name.startswith(_HARDIRQ):
            return "irq"
    return "irq" if waker_pid == 0 else "task"


def waker_label(waker_pid: int, waker_comm: str, stack: Stack | None) -> str:
    ctx = waker_context(waker_pid, stack)
    if ctx == "task":
        return f"{waker_comm}[{waker_pid}]"
    if waker_pid == 0:
        return ctx
    return f"{ctx} (on {waker_comm}[{waker_pid}])"
