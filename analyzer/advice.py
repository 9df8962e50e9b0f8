"""A recommendation as data: the finding, its evidence (sentences and numbers), the command, the risk and
how to verify it. The rules that make them live in analyzer/recommend.py and analyzer/io_advice.py."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

RECOMMENDED, NOT_HELPFUL = "recommended", "cannot help here"


@dataclass(frozen=True)
class Fact:
    """One number behind a recommendation, as data: what it is, its value, its unit ("ns", "/s", "%",
    "" for a count or a name). Views format it; `evidence` holds the same as sentences."""

    label: str
    value: float | int | str
    unit: str = ""


@dataclass(frozen=True)
class Recommendation:
    kind: str  # one of KINDS
    target: str  # "comm[tid]", a lock's or a cache's name, "system"
    finding: str  # what is wrong, in one line
    evidence: tuple[str, ...]  # the numbers behind it, from this recording
    command: str  # what to run; "" when the fix is a change of code
    risk: str
    verify: str
    status: str = RECOMMENDED  # or NOT_HELPFUL, with the finding saying why
    runtime: bool = False  # `stallscope apply` can carry it out now; else boot time or code
    action: dict = field(default_factory=dict)  # for `apply`: {"type": "affinity"|"nice", "tid", "start_time_ns", "comm", ...}
    facts: tuple[Fact, ...] = ()  # the evidence's numbers as data
    # the waiting the fix is aimed at, per second of the recording (ns/s): the lock's, the I/O waits', the
    # starved thread's wait for a CPU; None where what it would win is not a wait the recording measured (a
    # migration's cache refills, a device's request sizes). Recommendations are ranked by it (recommend.py).
    wait_ns_per_s: float | None = None


def verify(target: str, what: str) -> str:
    return (f"record the same workload again (`stallscope record -o after.stall ...`) and compare: "
            f"`stallscope diff before.stall after.stall`; {what} for {target}")


def is_path_component(name) -> bool:
    """A name that can be one directory's name under a sysfs root (a slab cache's, a block device's):
    one path component, printable."""
    return (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and name.isprintable()
            and len(name) < 256)


def shell_command(*words) -> str:
    """A command line to paste into a shell: each word quoted, so that a name read from a recording (a
    process's cgroup, a cache's or a device's name) stays one word and runs nothing."""
    return shlex.join(str(w) for w in words)


def write_command(value, path: str) -> str:
    return f"echo {shlex.quote(str(value))} > {shlex.quote(path)}"
