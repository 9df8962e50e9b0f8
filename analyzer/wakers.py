"""Who woke a task: a task, or an interrupt, softirq or timer.

The waker is recorded at sched_waking, in the waker's context. When that
context is an interrupt, the "current" task is whatever the interrupt landed
on (often the idle task, pid 0, "swapper"), which is not who woke anybody.
The probe notes when it ran on an interrupt stack; the waker's kernel stack,
when one was walked, tells a timer from a softirq from a device interrupt.
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


def waker_context(waker_pid: int, stack: Stack | None, in_interrupt: bool = False) -> str:
    """One of "task", "timer", "softirq", "irq"."""
    ctx = _stack_context(stack) if stack else None
    if ctx is not None:
        return ctx
    if in_interrupt or waker_pid == 0:
        return "irq"
    return "task"


# a waker's stack's context, by the stack object (a model's wakeups share a few thousand stacks; a
# blocker's held-up-by reads them all): (stack, context), the stack kept so that its id stays its own
_CONTEXTS: dict[int, tuple[Stack, str | None]] = {}


def _stack_context(stack: Stack) -> str | None:
    kept = _CONTEXTS.get(id(stack))
    if kept is not None and kept[0] is stack:
        return kept[1]
    ctx = None
    # The innermost kind of frame wins: a timer callback runs inside the timer interrupt.
    for f in stack.frames:
        name = f.symbol or ""
        if name.startswith(_TIMER):
            ctx = "timer"
        elif name.startswith(_SOFTIRQ):
            ctx = "softirq"
        elif name.startswith(_HARDIRQ):
            ctx = "irq"
        else:
            continue
        break
    if len(_CONTEXTS) >= 1 << 16:
        _CONTEXTS.clear()
    _CONTEXTS[id(stack)] = (stack, ctx)
    return ctx


def waker_label(waker_pid: int, waker_comm: str, stack: Stack | None, in_interrupt: bool = False) -> str:
    ctx = waker_context(waker_pid, stack, in_interrupt)
    if ctx == "task":
        return f"{waker_comm}[{waker_pid}]"
    if waker_pid == 0:
        return ctx
    return f"{ctx} (on {waker_comm}[{waker_pid}])"
