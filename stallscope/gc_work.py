"""stallscope's work kept out of Python's cycle collector: the records an interval (or a recording's read)
makes are many and form no cycles, and what outlives the work is frozen where the collector never walks it."""

from __future__ import annotations

import gc
from contextlib import contextmanager


def settle_gc() -> None:
    """Start-up is done: what it built (kernel symbols, ELF tables, the BPF objects) lives as long as
    the process, so it leaves the collector's view, and collections run less often. Each drain makes
    thousands of short-lived, acyclic records; at the default thresholds the full collections that
    walked everything kept took about 1% of a CPU under hackbench. What setup_work put out of view
    unwalked is walked here once with the rest, so that start-up's own cycles are collected. A larger
    threshold set before (a live view's) stays."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(max(50_000, gc.get_threshold()[0]), 20, 20)


@contextmanager
def setup_work():
    """The set-up drain (the machine's every task, read and parsed once) with the collector off, and what it
    and start-up made put out of the collector's view unwalked: a collection among its records had been the
    process's first full one (50-70 ms under hackbench beside 5,000 idle threads, walking all that start-up
    built) on the way to a live view's first data. settle_gc walks them once, later."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


@contextmanager
def interval_work(freeze: bool = True):
    """An interval's drain and what is done with it (written, folded, handed to a view), outside the
    cycle collector's view. That work makes hundreds of thousands of records, parts and rows, none in a
    cycle, and what outlives it (a live view keeps minutes of intervals) is frozen when it is done: the
    collector never walks it. Before it, the young generation is collected, while it holds only what
    was made since the last interval (the view's own cycles among it). Left to the collector's
    threshold, it walked each record in its first collection: 2.6 s of CPU in 85 s of `top` under
    hackbench beside 5,000 idle threads, about an eighth of its cost then. `freeze` False: left to the
    caller (the first interval's, which settle_gc collects with what start-up built)."""
    gc.collect(0)
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()
