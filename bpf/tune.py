"""The stack-walk knobs an object reads at run time (struct stack_tune in bpf/stacks.h, the object's
only .data variable): written into the section's image before load, and into the loaded map (one
element) while the programs run; they read it at each event. The overhead budget lowers them
(analyzer/overhead.py, stallscope/session.py)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING

from stallscope.analyzer.sample import Tuning
from stallscope.bpf import abi
from stallscope.errors import StallscopeError

if TYPE_CHECKING:  # the CLI reads the default below without loading the libbpf bindings
    from stallscope.bpf.libbpf import BpfObject


_KEY0 = b"\0\0\0\0"

# Stack walks per second per CPU, each object's own budget (--stack-rate). A walk cost 12-17 us under
# `perf bench sched messaging` on a 2-CPU VM (cold unwinder data, a new stack stored): 1000/s took 1.2%
# of each CPU, more than the default overhead budget by itself; 250/s is a quarter of that.
DEFAULT_WALKS_PER_S = 250


# T, the length scale of the drawing: a wait of d ns gets a stack walk with probability min(1, d/T).
# Every wait of 1 ms or more is walked; shorter ones in proportion to their length, so the walks follow
# the time waited and the shares estimated from them have a standard error of about sqrt(T / X) for a
# cause of X ns: 3% for a cause that held its tasks 1 s.
DEFAULT_SAMPLE_NS = 1_000_000
# User stacks are walked at a wait's start, before its length is known (another task's user stack
# cannot be read later); from their own budget, so they never spend the walks kept for long waits.
DEFAULT_USER_WALKS_PER_S = 100


@dataclass(frozen=True)
class StackTune:
    walks_per_s: int  # per CPU; 0 = no limit
    min_stack_ns: int = 0  # walk only for waits at least this long (objects that time waits)
    sample_ns: int = 0  # T: draw a wait of d ns for a walk with probability min(1, d/T); 0: every wait
    user_walks_per_s: int = 0  # user stacks walked when a wait begins, per CPU; 0 = no limit


DEFAULT_TUNE = StackTune(DEFAULT_WALKS_PER_S, 0, DEFAULT_SAMPLE_NS, DEFAULT_USER_WALKS_PER_S)


def of_tuning(t: Tuning) -> StackTune:
    """What the probes read for one of the overhead budget's settings."""
    return StackTune(t.walks_per_s, t.min_stack_ns, t.sample_ns, t.user_walks_per_s)


def _image(obj: BpfObject) -> ctypes.Array:
    image = obj.section_map(".data").initial_value()
    if len(image) != ctypes.sizeof(abi.StackTune):
        raise StallscopeError("a BPF object does not match this stallscope (its .data is not struct stack_tune)",
                              "run `make install` again")
    return image


def write(obj: BpfObject, tune: StackTune) -> None:
    """Before load: the initial value. After: the running programs read it from their next event on
    (libbpf 1.1 maps the section into this process only for skeletons, so the map is updated)."""
    raw = abi.StackTune(min_stack_ns=max(int(tune.min_stack_ns), 0), walks_per_s=max(int(tune.walks_per_s), 0),
                        sample_ns=max(int(tune.sample_ns), 0), user_walks_per_s=max(int(tune.user_walks_per_s), 0))
    ctypes.memmove(_image(obj), ctypes.addressof(raw), ctypes.sizeof(raw))
    data = obj.section_map(".data")
    if data.fd >= 0:
        data.update(_KEY0, bytes(raw))


def read(obj: BpfObject) -> StackTune:
    """What the programs read: the loaded map's value, or the initial value before load."""
    data = obj.section_map(".data")
    raw = data.lookup(_KEY0) if data.fd >= 0 else bytes(_image(obj))
    v = abi.decode(abi.StackTune, raw)
    return StackTune(v.walks_per_s, v.min_stack_ns, v.sample_ns, v.user_walks_per_s)
