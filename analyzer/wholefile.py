"""A file read whole with the interpreter's lock released: the kernel's tables (/proc/kallsyms and its BTF, 5 MB
each) come 4 KB a read(), and Python's own read takes the lock back after each of those 1,700 calls, waiting for it
whenever another thread holds it (a live view's screen drawing its first frames while the probes load: 0.2-0.3 s to
read the BTF). In C where analyzer/kallsyms.c is built (read_whole), else Python's read. Standard library only."""

from __future__ import annotations

try:
    from stallscope.analyzer._kallsyms import read_whole as _c_read_whole
except ImportError:
    _c_read_whole = None


def read_whole(path: str) -> bytes:
    """The file's bytes; raises OSError (its subclasses, as open() and read() raise them)."""
    if _c_read_whole is not None:
        return _c_read_whole(path)
    with open(path, "rb") as f:
        return f.read()
