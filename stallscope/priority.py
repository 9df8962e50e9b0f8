"""stallscope's own scheduling priority while it traces.

On a machine with hundreds of runnable tasks an ordinary process gets a sliver of a CPU: the
collector's one-second intervals stretch to tens of seconds and a live view stops being live. So
`top` runs at a raised priority (nice -20, as atop does), with what it spends measured against the
overhead budget. A recording keeps the caller's priority unless asked: its intervals may stretch, its
totals stay exact, and its drains do not take CPU from the work being recorded. Linux keeps a nice
value per thread: it is set on the thread that runs the session before that thread starts any other,
so the collector's threads inherit it; a command stallscope starts is forked at the caller's
priority, not ours.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

DEFAULT_NICE = -20


def own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def set_own_nice(nice: int) -> str:
    """Set the calling thread's nice value; "" when done, else why not (the caller says so)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


@contextmanager
def at_nice(nice: int) -> Iterator[None]:
    """Run the block at `nice` (e.g. to fork a command at the caller's priority), then go back."""
    mine = own_nice()
    if mine == nice:
        yield
        return
    set_own_nice(nice)
    try:
        yield
    finally:
        set_own_nice(mine)
