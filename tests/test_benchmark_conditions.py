"""The overhead benchmark's conditions: the command lines it runs (pure; the benchmark itself runs on demand)."""

from __future__ import annotations

import importlib.util
import shlex
import sys

from conftest import ROOT

# benchmarks/ is not part of the installed package: load the module from its file
_spec = importlib.util.spec_from_file_location("overhead", ROOT / "benchmarks" / "overhead.py")
overhead = importlib.util.module_from_spec(_spec)
sys.modules["overhead"] = overhead  # dataclasses look their module up
_spec.loader.exec_module(overhead)
BPFTRACE_PEERS, TMPFILE, Workload = overhead.BPFTRACE_PEERS, overhead.TMPFILE, overhead.Workload
conditions, stallscope_groups = overhead.conditions, overhead.stallscope_groups

WORKLOAD = Workload("pipe", ("perf", "bench", "sched", "pipe", "-l", "10"))


def test_a_group_alone_runs_the_scheduler_probes_and_that_group_only():
    c = stallscope_groups(("stallscope",), "none,+locks")
    assert c.name == "stallscope+locks" and c.exports_overhead
    assert c.command(WORKLOAD, "/tmp/x") == ["stallscope", "record", "--probes=none,+locks", "-o", "/tmp/x", "--",
                                             *WORKLOAD.argv]
    assert stallscope_groups(("stallscope",), "none").name == "stallscope-sched"


def test_bpftrace_peers_get_the_workload_as_one_command_with_a_unique_path():
    known = conditions(("stallscope",))
    for name in BPFTRACE_PEERS:
        argv = known[name].command(WORKLOAD)
        assert argv[:2] == ["bpftrace", "-q"] and argv[-2] == "-c"
        inner = shlex.split(argv[-1])
        assert inner[0].startswith("/") and inner[0].endswith("/perf") and inner[1:] == list(WORKLOAD.argv[1:])
        assert TMPFILE not in argv


def test_perf_lock_records_both_contention_tracepoints_system_wide():
    argv = conditions(("stallscope",))["perf-lock"].command(WORKLOAD, "/tmp/p")
    assert argv[:4] == ["perf", "record", "-a", "-g"]
    assert "lock:contention_begin" in argv and "lock:contention_end" in argv and "/tmp/p" in argv


def test_a_bpftrace_peer_gives_its_script_for_the_separate_cost_runs():
    known = conditions(("stallscope",))
    for name, script in BPFTRACE_PEERS.items():
        assert known[name].bpftrace_script == script
    assert known["perf-sched"].bpftrace_script == "" and known["stallscope"].bpftrace_script == ""


def test_the_report_shows_a_peers_own_cost_per_event_apart_from_stallscopes():
    exp = overhead.Experiment([Workload("messaging", ("perf",))], [conditions(("stallscope",))["bpftrace-offcpu"]], 0)
    exp.peer_costs[("messaging", "bpftrace-offcpu")] = [
        {"duration_s": 2.0, "bpf_programs": {"sched_switch": {"run_cnt": 1000, "run_time_ns": 5_000_000}}},
        {"duration_s": 2.0, "bpf_programs": {"sched_switch": {"run_cnt": 1000, "run_time_ns": 7_000_000}}},
    ]
    text = "\n".join(overhead._bpf_section(exp))
    assert "## BPF cost per event: messaging / bpftrace-offcpu (2 separate runs" in text
    assert "| sched_switch | 2 | 1,000 | 6,000 | 500 | 6.0 | 0 |" in text
