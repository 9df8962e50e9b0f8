"""The kernel's tables a session's first drains need, read in a thread while its probes load.

A session's first data wait on one-time work that is Python's: the kernel's symbols (kallsyms, about
0.1 s here, and its data symbols, 0.06 s, when the lock probes name static locks) and, with the lock probes,
the kernel's types (BTF, 0.05 s: bpf/btf.py decodes a type when it is read) by which slab locks are named. Read when first used, in the set-up drain,
they came after the probes were attached and before the first interval could end. The probes' loading is
mostly the kernel's work (the verifier), with the interpreter's lock free: these tables are read meanwhile.

The cause table is made there too (causes.toml parsed and its rules' frame patterns compiled: 0.02 s quiet,
0.06 s profiled under load), which the first interval's ranking had made on the way to the first data; with
`--causes`, the table the command line set is the one in use, and nothing is read.

The session's set-up drain waits for them (`wait`), and then reads them from where they were kept. The
futex group's timing of a uprobe trap does not: its calls keep the interpreter's lock through each round
(bpf/futex_collector.py measure_uprobe_trap). Not a cache of its own: the symbolizer and `btf.running_kernel` keep them.
"""

from __future__ import annotations

import threading

from stallscope.analyzer.causes import default_table
from stallscope.analyzer.symbols import Symbolizer
from stallscope.bpf.btf import BtfError, running_kernel
from stallscope.errors import StallscopeError


class KernelTables:
    def __init__(self, symbolizer: Symbolizer, locks: bool):
        """`locks`: the lock probes were asked for (their static locks' data symbols and the BTF)."""
        self.symbolizer = symbolizer
        self.locks = locks
        self._thread = threading.Thread(target=self._read, name="stallscope-tables", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _read(self) -> None:
        # a failure is not this thread's to report (it would print a traceback over the screen): the first
        # use in the session's thread meets it again, and says it there as it always did
        try:
            self.symbolizer.preload_kernel(data=self.locks)
            if self.locks:
                running_kernel()
        except (BtfError, StallscopeError):
            pass
        try:
            default_table()
        except StallscopeError:  # a user's table that cannot be read or parsed: said at its first use, as before
            pass

    def wait(self) -> None:
        """Until the tables are read (at once if they are, or if reading them never started)."""
        if self._thread.ident is not None:
            self._thread.join()
