"""The structs that cross the BPF/user boundary are mirrored once in Python; these
tests hold the mirrors to the compiled objects' BTF and to the kernel's uapi."""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from stallscope.bpf import abi
from stallscope.bpf.libbpf import BpfProgInfo


def _btf_structs(obj: str) -> dict:
    bpftool = shutil.which("bpftool") or "/usr/sbin/bpftool"
    out = subprocess.run([bpftool, "-j", "btf", "dump", "file", obj], capture_output=True, text=True, check=True)
    return {t["name"]: t for t in json.loads(out.stdout)["types"] if t.get("kind") == "STRUCT" and t.get("name")}


@pytest.mark.parametrize("obj,name", sorted((o, n) for o, m in abi.OBJECT_MIRRORS.items() for n in m))
def test_python_mirror_matches_the_objects_btf(obj, name):
    structs = _btf_structs(str(ROOT / "bpf" / obj))
    assert name in structs, f"struct {name} is not in {obj}'s BTF"
    btf = structs[name]
    mirror = abi.OBJECT_MIRRORS[obj][name]
    assert ctypes.sizeof(mirror) == btf["size"]
    ours = [(f[0], getattr(mirror, f[0]).offset) for f in mirror._fields_]
    theirs = [(m["name"], m["bits_offset"] // 8) for m in btf["members"]]
    assert ours == theirs


def test_prog_info_matches_the_uapi_header(tmp_path, c_compiler):
    src = tmp_path / "info.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include <linux/bpf.h>\n'
                   'int main(void){printf("%zu %zu %zu %zu\\n", offsetof(struct bpf_prog_info, run_time_ns),'
                   'offsetof(struct bpf_prog_info, run_cnt), offsetof(struct bpf_prog_info, recursion_misses),'
                   'sizeof(struct bpf_prog_info));return 0;}\n')
    subprocess.run([c_compiler, "-o", str(tmp_path / "info"), str(src)], check=True)
    run_time, run_cnt, misses, size = map(int, subprocess.run([str(tmp_path / "info")], capture_output=True,
                                                               text=True, check=True).stdout.split())
    assert BpfProgInfo.run_time_ns.offset == run_time
    assert BpfProgInfo.run_cnt.offset == run_cnt
    assert BpfProgInfo.recursion_misses.offset == misses
    assert ctypes.sizeof(BpfProgInfo) >= size


@pytest.mark.parametrize("mirror", [abi.LockKey, abi.LockVal, abi.OffcpuKey, abi.OffcpuVal, abi.WakerKey,
                                    abi.WakerVal], ids=lambda m: m.__name__)
def test_unpacker_reads_what_the_ctypes_mirror_reads(mirror):
    raw = bytes((i * 37 + 11) % 251 for i in range(ctypes.sizeof(mirror)))  # no NUL: names run full length
    raw = raw[:-3] + b"\0ab"  # ... but a NUL in the last field cuts it where ctypes does
    values = list(abi.unpacker(mirror).unpack(raw))

    def check(c, fields):
        for name, ftype in fields:
            want = getattr(c, name)
            if isinstance(ftype, type) and issubclass(ftype, ctypes.Structure):
                check(want, ftype._fields_)  # a nested struct's fields come in its place
            elif getattr(ftype, "_length_", None) and ftype._type_ is ctypes.c_char:
                assert abi.c_string(values.pop(0)) == want.decode(errors="replace"), name
            elif getattr(ftype, "_length_", None):
                assert [values.pop(0) for _ in range(ftype._length_)] == list(want), name
            else:
                assert values.pop(0) == want, name

    check(abi.decode(mirror, raw), mirror._fields_)
    assert values == []


def _header_defines(path) -> dict[str, int]:
    """The integer #defines of a BPF header (plain numbers and shifts of them, as bpf/sched.h writes its bits)."""
    out: dict[str, int] = {}
    for name, expr in re.findall(r"^#define\s+(\w+)\s+([^/\n]+?)\s*(?:/\*.*)?$", path.read_text(), re.M):
        expr = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)U\b", r"\1", expr)
        expr = re.sub(r"\b([A-Z_][A-Z0-9_]*)\b", lambda m: str(out[m.group(1)]) if m.group(1) in out else m.group(0),
                      expr)
        if re.fullmatch(r"[\d\sx a-fA-F()<|]+", expr):
            out[name] = eval(expr, {"__builtins__": {}})  # digits, shifts and parentheses only (checked above)
    return out


def test_the_evidence_bits_decoded_are_the_ones_the_probe_writes():
    """analyzer/why.py decodes offcpu_key.why by its own copy of bpf/sched.h's bits: each held to the header the
    programs are compiled with (a file kind or a context added on one side only would name waits wrongly)."""
    from functools import reduce
    from operator import or_

    from stallscope.analyzer import why

    h = _header_defines(ROOT / "bpf" / "sched.h")
    assert (why.SYSCALL_MASK, why.COMPAT_BIAS, why.CTX_SHIFT, why.CTX_MASK, why.FD_SHIFT, why.FD_MASK) == (
        h["WHY_SYSCALL_MASK"], h["WHY_COMPAT_BIAS"], h["WHY_CTX_SHIFT"], h["WHY_CTX_MASK"], h["WHY_FD_SHIFT"],
        h["WHY_FD_MASK"])
    assert (why.FUTEX_TID, why.FUTEX_LOCKWORD, why.TIMEOUT, why.FUTEX_ZERO, why.IOWAIT, why.FUTEX_PARK) == (
        h["WHY_FUTEX_TID"], h["WHY_FUTEX_LOCKWORD"], h["WHY_TIMEOUT"], h["WHY_FUTEX_ZERO"], h["WHY_IOWAIT"],
        h["WHY_FUTEX_PARK"])
    # no two of the bits overlap (a flag added where another field lies would read as both)
    fields = [h["WHY_SYSCALL_MASK"], h["WHY_CTX_MASK"], h["WHY_FD_MASK"], *why.FUTEX_FLAGS.values(), why.IOWAIT]
    assert sum(fields) == reduce(or_, fields)
    contexts = {"NONE": "", "SYSCALL": "syscall", "FAULT": "fault", "KTHREAD": "kthread",
                "KWORKER_IDLE": "kworker-idle", "KWORKER": "kworker", "EXIT": "exit", "IO_WORKER": "io-worker"}
    assert {why.CONTEXTS[h[f"WHY_CTX_{k}"]]: v for k, v in contexts.items()} == {v: v for v in contexts.values()}
    assert len(why.CONTEXTS) == len(contexts)
    kinds = {"NONE": "", "PIPE": "pipe", "SOCKET": "socket", "FILE": "file", "DIR": "directory",
             "CHR": "character device", "BLK": "block device", "EVENTFD": "eventfd", "TIMERFD": "timerfd",
             "SIGNALFD": "signalfd", "EPOLL": "epoll", "INOTIFY": "inotify", "IO_URING": "io_uring",
             "ANON": "anonymous inode", "UNIX": "unix socket"}
    assert sorted(k[len("WHY_FD_"):] for k in h if k.startswith("WHY_FD_") and k not in (
        "WHY_FD_SHIFT", "WHY_FD_MASK")) == sorted(kinds)
    assert [why.FD_KINDS[h[f"WHY_FD_{k}"]] for k in kinds] == list(kinds.values())
    assert (why.USER_WORKER_CALL, why.UPROBE_TRAP_CALL) == (h["WHY_USER_WORKER"], h["WHY_FAULT_UPROBE"])
    assert [h[f"WOKE_{k}"] for k in ("TASK", "IRQ", "EXITING")] == [0, 1, 2] and len(why.WOKEN_BY) == 3
    fault = h["WHY_CTX_FAULT"] << h["WHY_CTX_SHIFT"]
    assert why.decode(fault | h["WHY_FAULT_UPROBE"]).context == "uprobe" and why.decode(fault).context == "fault"


def test_the_futex_kinds_read_are_the_bits_the_futex_group_writes():
    """analyzer/locks.py reads a futex wait's FUTEX_F_* flags by its own copy of bpf/futex.h's values."""
    from stallscope.analyzer import locks

    h = _header_defines(ROOT / "bpf" / "futex.h")
    assert locks.FUTEX_F_TIMEOUT == h["FUTEX_F_TIMEOUT"]
    assert locks.FUTEX_KINDS == {"mutex": h["FUTEX_F_LOCKWORD"], "event": h["FUTEX_F_ZERO"], "join": h["FUTEX_F_TID"],
                                 "park": h["FUTEX_F_PARK"]}
