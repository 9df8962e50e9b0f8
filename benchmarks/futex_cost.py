"""What the futex group's syscall hooks cost a system call, per mechanism (run as root).

Each round runs a C loop of N system calls (getppid; FUTEX_WAKE with no waiter; FUTEX_WAIT that
returns EAGAIN at once) with no tracing, then with the futex group started in this process with each
mechanism (order alternating between rounds); ns per call is the loop's thread CPU time, so
preemption by other work on a shared machine is not counted.

    cc -O2 -o /tmp/syscall_loop benchmarks/syscall_loop.c
    .venv/bin/python -m benchmarks.futex_cost /tmp/syscall_loop 5   # rounds The BPF run time
per event comes from BPF_ENABLE_STATS. A sample taken while another tracer had programs on
sys_enter/sys_exit is marked: they slow every system call, baseline included.
"""
import json
import os
import statistics
import subprocess
import sys

from stallscope.analyzer.symbols import Symbolizer
from stallscope.bpf.futex_collector import MECHANISMS, PROGRAMS, FutexCollector
from stallscope.bpf.libbpf import RunTimeStats

N = {"getppid": 3_000_000, "wake": 2_000_000, "wait": 2_000_000}


def foreign_hooks() -> int:
    out = subprocess.run(["bpftool", "link", "show", "-j"], capture_output=True, text=True).stdout
    return sum(1 for l in json.loads(out or "[]") if l.get("tp_name") in ("sys_enter", "sys_exit"))


def loop(what):
    LOOP = sys.argv[1]
    out = subprocess.run([LOOP, what, str(N[what])], capture_output=True, text=True, check=True).stdout
    return float(out.split()[1])


def main():
    ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    stats = RunTimeStats()
    rows = []
    for r in range(ROUNDS):
        conds = ["none", *MECHANISMS]
        if r % 2:
            conds.reverse()
        for cond in conds:
            c = None
            if cond != "none":
                c = FutexCollector(Symbolizer(), mechanisms=(cond,))
                st = c.start()
                assert st.enabled, st.reason
                before = {p: c.obj.program(p).stats() for p in PROGRAMS[cond]}
            for what in N:
                fh = foreign_hooks() - (2 if cond == "tp_btf" else 0)
                ns = loop(what)
                row = {"round": r, "cond": cond, "what": what, "ns": ns, "foreign": fh, "load": os.getloadavg()[0]}
                if c is not None:
                    for p in PROGRAMS[cond]:
                        s = c.obj.program(p).stats()
                        b = before[p]
                        row[p] = (s.run_cnt - b.run_cnt, s.run_time_ns - b.run_time_ns)
                        before[p] = s
                rows.append(row)
                print(json.dumps(row), flush=True)
            if c is not None:
                c.close()
    stats.close()
    print("summary (median ns per call; clean = no foreign syscall hooks)")
    for what in N:
        for cond in ["none", *MECHANISMS]:
            xs = [x["ns"] for x in rows if x["what"] == what and x["cond"] == cond]
            clean = [x["ns"] for x in rows if x["what"] == what and x["cond"] == cond and not x["foreign"]]
            progs = {}
            for p in PROGRAMS.get(cond, ()):
                cnt = sum(x[p][0] for x in rows if x["what"] == what and x["cond"] == cond)
                t = sum(x[p][1] for x in rows if x["what"] == what and x["cond"] == cond)
                progs[p] = f"{t / cnt:.0f} ns x {cnt / len(xs):.0f}/run" if cnt else "0 runs"
            print(f"{what:8} {cond:10} all {statistics.median(xs):7.1f} (n={len(xs)})  clean "
                  f"{statistics.median(clean) if clean else float('nan'):7.1f} (n={len(clean)})  {progs}")


if __name__ == "__main__":
    main()
