"""The interpreter's speed on this machine, measured in the same run as a benchmark: what stallscope's figures
are made of (small tuples, dict entries, records) without stallscope. Its time is printed beside a benchmark's
results, so that runs on different days, or VMs of the same name on different hosts, can be read against each
other: the same code measured 11% of a CPU one day and 18-20% on another whose reference took 1.6 times as long.

    python -m benchmarks.reference
"""

from __future__ import annotations

import gc
import time


def _work(n: int) -> int:
    """A fold in miniature: n records keyed into a dict of accumulators, then made into records again."""
    acc: dict[tuple, list] = {}
    for i in range(n):
        key = (i % 5000, i & 7, "x")
        a = acc.get(key)
        if a is None:
            acc[key] = [i, 1, i]
        else:
            a[0] += i
            a[1] += 1
            if i > a[2]:
                a[2] = i
    return len(tuple((k, v[0], v[1], v[2]) for k, v in acc.items()))


def reference_s(n: int = 1_000_000, runs: int = 5) -> float:
    """The best of `runs` timings of the miniature fold over `n` records (0.2-0.3 s on this project's 2-CPU VM),
    the cycle collector off as stallscope's readers have it."""
    was = gc.isenabled()
    gc.disable()
    try:
        best = float("inf")
        for _ in range(runs):
            began = time.perf_counter()
            _work(n)
            best = min(best, time.perf_counter() - began)
        return best
    finally:
        if was:
            gc.enable()


if __name__ == "__main__":
    print(f"{reference_s():.3f} s")
