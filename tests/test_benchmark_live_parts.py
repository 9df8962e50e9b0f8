"""benchmarks/live_parts.py wraps the session's parts by name: each name must still be there (a part renamed in
the code would otherwise drop out of its table)."""

import functools
import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # `python -m benchmarks.live_parts` runs from the repository's root

from benchmarks.live_parts import PARTS, Parts  # noqa: E402


def test_every_part_the_benchmark_times_is_found_where_it_names_it():
    for label, module, owner, attr, prop in PARTS:
        target = getattr(importlib.import_module(module), owner)
        if prop:
            assert isinstance(vars(target).get(attr), functools.cached_property), (label, module, owner, attr)
        else:
            assert callable(getattr(target, attr, None)), (label, module, owner, attr)


def test_a_part_times_only_the_sessions_thread_and_only_while_on():
    import threading

    class Owner:
        def work(self, x):
            return x + 1 + 0 * sum(range(200_000))  # some CPU time to be timed

    parts = Parts()
    parts.spent["work"] = 0.0
    timed = parts._timed("work", Owner.work)
    assert timed(Owner(), 1) == 2 and parts.spent["work"] == 0.0  # off
    parts.on = True
    assert timed(Owner(), 1) == 2 and parts.spent["work"] == 0.0  # not the session's thread
    out = []
    t = threading.Thread(target=lambda: out.append(timed(Owner(), 2)), name="stallscope-session")
    t.start()
    t.join()
    assert out == [3] and parts.spent["work"] > 0.0
