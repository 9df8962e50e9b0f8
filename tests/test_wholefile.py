"""analyzer/wholefile.py: a file read whole, in C with the interpreter's lock released (the kernel's tables at a live
view's start, while the screen draws)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stallscope.analyzer import wholefile
from stallscope.analyzer.wholefile import read_whole


def test_it_is_built():
    assert wholefile._c_read_whole is not None, "analyzer/kallsyms.c is not built: run `make install`"


def test_it_reads_what_python_reads(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(bytes(range(256)) * 40_000 + b"tail")  # larger than the first buffer (1 MB where size is unknown)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    paths = [big, empty, "/proc/version"]
    if os.path.exists("/sys/kernel/btf/vmlinux"):  # 4 KB a read(), its size known
        paths.append("/sys/kernel/btf/vmlinux")
    for p in paths:
        with open(p, "rb") as f:
            assert read_whole(str(p)) == f.read(), p


def test_its_errors_are_python_s(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_whole(str(tmp_path / "missing"))
    with pytest.raises(IsADirectoryError):
        read_whole(str(tmp_path))


def test_other_threads_run_while_it_reads(tmp_path):
    """A FIFO whose writer is a Python thread of the same process: the read ends only if that thread runs meanwhile,
    which it cannot while the reader holds the interpreter's lock (a subprocess, so that a hold hangs it alone)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = f"""
import os, threading, time
from stallscope.analyzer.wholefile import read_whole
def write():
    fd = os.open({str(fifo)!r}, os.O_WRONLY)
    for i in range(3):
        time.sleep(0.05)
        os.write(fd, b"chunk%d;" % i)
    os.close(fd)
threading.Thread(target=write, daemon=True).start()
print(read_whole({str(fifo)!r}).decode())
"""
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("read_whole held the interpreter's lock while it read: the writer thread never ran")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "chunk0;chunk1;chunk2;"
