"""Shared fixtures. Tests that need BPF run for real on this kernel; they skip
only where the kernel truly lacks what they need, and say which."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
STALLSCOPE = str(BIN / "stallscope")
EXAMPLES = ROOT / "examples" / "bin"


def _bpf_unavailable() -> str:
    if os.geteuid() != 0:
        return "needs root (CAP_BPF, CAP_PERFMON) to load BPF programs"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "this kernel has no BTF (/sys/kernel/btf/vmlinux), which CO-RE needs"
    return ""


BPF_SKIP = _bpf_unavailable()
needs_bpf = pytest.mark.skipif(bool(BPF_SKIP), reason=BPF_SKIP or "ok")


# Every wait gets its stacks, and the overhead budget never takes them away (a loaded machine would step it
# up): for tests of how waits are classified, not of how they are drawn for a
# stack walk (tests/test_attribution.py and test_budget.py are about that).
ALL_STACKS = ("--stack-scale", "0", "--stack-rate", "0", "--user-stack-rate", "0", "--no-degrade")


def run_stallscope(*args, check=True, timeout=120, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([STALLSCOPE, *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"stallscope {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def example(name: str) -> str:
    path = EXAMPLES / name
    if not path.exists():
        raise AssertionError(f"{path} is missing: `make install` builds the examples")
    return str(path)


def edited_copy(src: Path, dst: Path, *statements: str) -> Path:
    """A copy of a recording with SQL statements run on it (a damaged file, a crafted one)."""
    shutil.copy(src, dst)
    db = sqlite3.connect(dst)
    for sql in statements:
        db.execute(sql)
    db.commit()
    db.close()
    return dst


def record_command(tmp_path: Path, argv: list[str], *extra: str, defaults: bool = False) -> tuple[dict, list[dict], Path]:
    """Record `argv` with stallscope; return the JSON export, the workload's truth lines, the file.
    The probes keep the settings asked for (--no-degrade): these tests compare what they measure with
    ground truth; the overhead budget's steps have tests of their own. `defaults`: as a user records,
    the overhead budget on (conclusions must hold at default settings)."""
    out = tmp_path / "run.stall"
    truth_file = tmp_path / "truth.jsonl"
    settings = [] if defaults else ["--no-degrade"]
    with open(truth_file, "w") as stdout:
        proc = subprocess.run([STALLSCOPE, "record", "-o", str(out), *settings, *extra, "--", *argv],
                              stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(run_stallscope("export", str(out)).stdout)
    truth = [json.loads(line) for line in truth_file.read_text().splitlines() if line.startswith("{")]
    return doc, truth, out


@pytest.fixture(scope="session")
def perf_available() -> str:
    perf = shutil.which("perf")
    if not perf:
        pytest.fail("perf is missing: `make install` installs linux-perf")
    return perf


@pytest.fixture(scope="session")
def c_compiler() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.fail("no C compiler: `make install` installs gcc")
    return cc


@pytest.fixture(scope="session")
def report_recording(tmp_path_factory) -> dict:
    """A short real recording with every probe group (scheduler, locks, futex, slab, on-CPU samples)
    while hackbench and a mutex convoy run, its HTML report and its JSON export."""
    if BPF_SKIP:
        pytest.skip(BPF_SKIP)
    d = tmp_path_factory.mktemp("report")
    stall = d / "run.stall"
    # pauses between the steps: on a saturated machine the drains wait for a CPU, and the intervals stretch; the
    # last a second, so that a quick machine's recording too has more than six intervals (windows slide over them)
    workload = (f"perf bench sched messaging -g 2 -l 300 >/dev/null; sleep 0.5; {example('mutex_convoy')} -n 60 "
                ">/dev/null; sleep 0.5; perf bench sched messaging -g 1 -l 200 >/dev/null; sleep 1")
    run_stallscope("record", "-o", str(stall), "--probes", "all", "-i", "0.3s", "--nice", "-5", "--",
                   "sh", "-c", workload, timeout=300)
    html = d / "report.html"
    run_stallscope("report", str(stall), "-o", str(html), timeout=300)
    doc = json.loads(run_stallscope("export", str(stall), timeout=300).stdout)
    return {"stall": stall, "html": html, "text": html.read_text(), "doc": doc, "dir": d}


def autogroup_in_use() -> bool:
    """Whether the kernel groups this process's tasks by session (stallscope/priority.py)."""
    from stallscope.priority import group_state

    return group_state()["autogroup"]


def group_nice(pid: int) -> int:
    """The nice value of a process's autogroup."""
    with open(f"/proc/{pid}/autogroup") as f:
        return int(f.read().split()[2])
