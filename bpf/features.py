"""What this kernel and these privileges allow, learned by trying, not guessing.

Each mechanism is probed by loading (and where it matters attaching) an empty
program from features.bpf.o on its own; tracepoints and kfuncs are looked up
in the kernel's BTF. Nothing here changes the system.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from dataclasses import dataclass

from stallscope.analyzer.wholefile import read_whole
from stallscope.bpf.libbpf import BpfError, BpfObject, libbpf_available

BTF_PATH = "/sys/kernel/btf/vmlinux"

CAPABILITIES = {
    "CAP_BPF": (39, "load BPF programs and create maps"),
    "CAP_PERFMON": (38, "attach tracing programs and read kernel stacks"),
    "CAP_SYSLOG": (34, "read kernel symbol addresses (/proc/kallsyms)"),
    "CAP_SYS_PTRACE": (19, "read other users' /proc/PID/maps for user symbols"),
    "CAP_SYS_ADMIN": (21, "enable BPF run-time statistics (the tool's own cost)"),
}

# Tracepoints each probe group needs; checked in BTF (tp_btf needs btf_trace_<name>).
TRACEPOINTS = {
    "sched": ["sched_switch", "sched_waking", "sched_wakeup", "sched_wakeup_new", "sched_migrate_task",
              "sched_process_exit", "sched_process_wait"],
    "task": ["task_rename"],  # without it, names are copied at every switch-out instead
    "lock": ["contention_begin", "contention_end"],
    "kmem": ["kmem_cache_alloc", "kmem_cache_free", "kmalloc", "kfree"],
    "syscalls": ["sys_enter", "sys_exit"],
    # block_io_start: 6.5+ (where a request begins, in its submitter's context)
    "block": ["block_rq_issue", "block_rq_complete", "block_rq_requeue", "block_rq_insert", "block_io_start",
              "block_io_done", "block_bio_queue", "block_bio_complete"],
}

KFUNCS = ["bpf_get_kmem_cache"]

MECHANISM_PROGRAMS = {
    "tp_btf": "probe_tp_btf",
    "raw_tp": "probe_raw_tp",
    "fentry": "probe_fentry",
    "kprobe": "probe_kprobe",
    "perf_event": "probe_perf_event",
}
# perf_event programs need a perf event to attach to: loading is the test here.
_LOAD_ONLY = {"perf_event"}


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str = ""


def effective_capabilities() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def capabilities() -> dict[str, Check]:
    eff = effective_capabilities()
    out = {}
    for name, (bit, why) in CAPABILITIES.items():
        out[name] = Check(bool(eff & (1 << bit)), why)
    return out


def missing_for_tracing() -> list[str]:
    """Capabilities without which no probe can run (CAP_SYS_ADMIN covers both on old kernels)."""
    caps = capabilities()
    if caps["CAP_SYS_ADMIN"].ok:
        return []
    return [name for name in ("CAP_BPF", "CAP_PERFMON") if not caps[name].ok]


def _btf_strings() -> bytes:
    try:
        return read_whole(BTF_PATH)
    except OSError:
        return b""


def btf_tracepoints(btf: bytes | None = None) -> frozenset[str]:
    """The tracepoints tp_btf can attach to: each has a btf_trace_<name> type in the kernel's BTF. The
    running kernel's are read once per process (a 5 MB file; the groups starting at once each ask)."""
    return _kernel_btf_tracepoints() if btf is None else _btf_tracepoint_names(btf)


@functools.lru_cache(maxsize=1)
def _kernel_btf_tracepoints() -> frozenset[str]:
    return _btf_tracepoint_names(_btf_strings())


def _btf_tracepoint_names(data: bytes) -> frozenset[str]:
    return frozenset(m.decode(errors="replace") for m in re.findall(rb"\0btf_trace_([A-Za-z0-9_]+)(?=\0)", data))


def tracepoints(btf: bytes | None = None) -> dict[str, Check]:
    found_names = btf_tracepoints(btf)
    out = {}
    for group, names in TRACEPOINTS.items():
        for name in names:
            found = name in found_names
            out[f"{group}:{name}"] = Check(found, "" if found else "not in this kernel's BTF")
    return out


def kfuncs(btf: bytes | None = None) -> dict[str, Check]:
    data = _btf_strings() if btf is None else btf
    return {name: Check(f"\0{name}\0".encode() in data, "" if f"\0{name}\0".encode() in data
                        else "not in this kernel (bpf_get_kmem_cache needs Linux 6.13+)") for name in KFUNCS}


def mechanisms(object_path: str) -> dict[str, Check]:
    """Load each mechanism's empty program alone; attach it where attaching is the real test."""
    out: dict[str, Check] = {}
    for mech, prog_name in MECHANISM_PROGRAMS.items():
        try:
            with BpfObject(object_path) as obj:
                for prog in obj.programs():
                    prog.autoload = prog.name == prog_name
                obj.load()
                if mech not in _LOAD_ONLY:
                    obj.attach(obj.program(prog_name)).destroy()
            out[mech] = Check(True, "")
        except BpfError as exc:
            out[mech] = Check(False, _why(mech, exc))
    return out


def _why(mech: str, exc: BpfError) -> str:
    if mech == "fentry" and exc.errno == 1:
        return "function tracing not permitted here (EPERM at load)"
    if mech == "kprobe" and exc.errno in (2, 95):
        return "kprobes unavailable (CONFIG_KPROBES off?)"
    return exc.message


def kernel_info() -> dict[str, str]:
    u = platform.uname()
    return {"release": u.release, "version": u.version, "machine": u.machine}


def preemption_model() -> str:
    """The preemption model: debugfs tells the live mode of a PREEMPT_DYNAMIC kernel."""
    version = platform.uname().version
    live = ""
    try:
        with open("/sys/kernel/debug/sched/preempt") as f:
            # e.g. "none (voluntary) full lazy": the parenthesised one is in force
            text = f.read().strip()
            live = next((w.strip("()") for w in text.split() if w.startswith("(")), "")
    except OSError:
        pass
    if "PREEMPT_RT" in version:
        return "PREEMPT_RT"
    if "PREEMPT_DYNAMIC" in version:
        return f"dynamic, current mode: {live}" if live else "dynamic (mount debugfs to read the current mode)"
    if "PREEMPT" in version:
        return "full"
    return "none or voluntary"


def btf_available() -> Check:
    if os.path.exists(BTF_PATH):
        return Check(True, f"{BTF_PATH} ({os.path.getsize(BTF_PATH) / 1e6:.1f} MB)")
    return Check(False, "no /sys/kernel/btf/vmlinux: the kernel needs CONFIG_DEBUG_INFO_BTF")


def libbpf_check() -> Check:
    return Check(True, "libbpf.so.1") if libbpf_available() else Check(False, "libbpf.so.1 not found")
