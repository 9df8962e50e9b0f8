"""The kernel lock contention collector: loads locks.bpf.o and drains its
cumulative per-(lock, waiter, stack) aggregates into interval deltas.

A kernel without the lock tracepoints (or a load failure) turns the probe
off with the reason; the other probes go on.
"""

from __future__ import annotations

import ctypes
import os

from stallscope.analyzer.sample import LockDelta, ProbeStatus, TaskId, Tuning
from stallscope.analyzer.symbols import Symbolizer
from stallscope.bpf import abi, features, tune
from stallscope.bpf.tune import DEFAULT_WALKS_PER_S, StackTune
from stallscope.bpf.groups import GroupDrain
from stallscope.bpf.collector import HealthDeltas, ProgramDeltas, StackReader, changed_entries, object_path
from stallscope.bpf.libbpf import BpfError, BpfObject
from stallscope.errors import StallscopeError


class LockCollector:
    def __init__(self, symbolizer: Symbolizer, targ_tgid: int = 0, stack_walks_per_s: int = DEFAULT_WALKS_PER_S,
                 kernel_stacks: bool = True, max_stacks: int = 32768):
        self.targ_tgid = targ_tgid
        self.stack_walks_per_s = stack_walks_per_s
        self.kernel_stacks = kernel_stacks
        self.obj: BpfObject | None = None
        self._stacks = StackReader(symbolizer, max_stacks)
        self._health = HealthDeltas(abi.LockHealth, prefix="locks.")
        self._programs = ProgramDeltas()
        # key bytes -> (value bytes, task, previous totals): unchanged entries are skipped by their bytes
        self._prev: dict[bytes, tuple[bytes, TaskId, tuple[int, ...]]] = {}
        self.symbolizer = symbolizer
        self._symbols: dict[int, str] = {}

    def start(self) -> ProbeStatus:
        """Load and attach; never raises for a kernel that cannot: the status says why."""
        missing = [n for n, c in features.tracepoints().items() if n.startswith("lock:") and not c.ok]
        if missing:
            return ProbeStatus(False, "", f"no {', '.join(missing)} tracepoint in this kernel")
        kfunc = features.kfuncs().get("bpf_get_kmem_cache")
        try:
            obj = BpfObject(object_path("locks.bpf.o"))
            cfg = abi.LockConfig(targ_tgid=self.targ_tgid, self_tgid=os.getpid(), kernel_stacks=int(self.kernel_stacks),
                                 has_kmem_cache_kfunc=int(bool(kfunc and kfunc.ok)))
            image = obj.section_map(".rodata").initial_value()
            ctypes.memmove(image, ctypes.addressof(cfg), ctypes.sizeof(cfg))
            tune.write(obj, StackTune(self.stack_walks_per_s))
            obj.load()
            for prog in obj.programs():
                if not prog.section.startswith("iter/"):
                    obj.attach(prog)
        except BpfError as exc:
            try:
                obj.close()
            except UnboundLocalError:
                pass
            return ProbeStatus(False, "", exc.message)
        self.obj = obj
        reason = "" if kfunc and kfunc.ok else "no bpf_get_kmem_cache (6.13+): slab-held locks are not named"
        return ProbeStatus(True, "tp_btf", reason)

    def drain(self, dead: set[TaskId]) -> GroupDrain:
        """Deltas since the last drain; entries of threads that died are read one last time and dropped."""
        assert self.obj is not None
        m = self.obj.map("locks")
        out, ids, gone = [], {}, []
        prevs = self._prev
        for kraw, vraw, prev in changed_entries(m, prevs, dead, gone):
            k = abi.decode(abi.LockKey, kraw)
            v = abi.decode(abi.LockVal, vraw)
            pc, pt, pmax, pmin, ps, psl = prev[2] if prev is not None else (0, 0, 0, 1 << 64, 0, 0)
            tid = TaskId(k.pid, k.start_ns)
            if v.count != pc:
                out.append(LockDelta(
                    task=tid, tgid=k.tgid, addr=k.addr, kstack=k.kstack, flags=k.flags,
                    kind=k.kind, count=v.count - pc, total_ns=v.total_ns - pt,
                    max_ns=v.max_ns if v.max_ns > pmax else 0, min_ns=v.min_ns if v.min_ns < pmin else 0,
                    spin_ns=v.spin_ns - ps, sleep_ns=v.sleep_ns - psl, owner_pid=v.owner_pid,
                    owner_comm=v.owner_comm.decode(errors="replace"), cache=v.cache.decode(errors="replace"),
                    symbol=self._symbol(k.addr) if k.kind == abi.LOCK_KIND_ADDR else ""))
                ids.setdefault(k.kstack, ("kernel", 0))
            if tid in dead:
                gone.append(kraw)
                prevs.pop(kraw, None)
            else:
                prevs[kraw] = (vraw, tid, (v.count, v.total_ns, v.max_ns, v.min_ns, v.spin_ns, v.sleep_ns))
        m.delete_many(gone)
        stacks = self._stacks.read(self.obj.map("stacks"), ids, {})
        return GroupDrain({"locks": tuple(out)}, stacks, self._health.drain(self.obj), self._programs.drain(self.obj))

    def _symbol(self, addr: int) -> str:
        """A static lock's variable, when kallsyms lists data symbols (CONFIG_KALLSYMS_ALL)."""
        if addr not in self._symbols:
            try:
                self._symbols[addr] = (self.symbolizer.kernel_data(addr) or "") if self.symbolizer else ""
            except StallscopeError:
                self._symbols[addr] = ""
        return self._symbols[addr]

    def finish(self) -> str:
        """The recording stops: charge the waits still in progress (the next drain reads them).
        Returns why it could not, or ""."""
        if self.obj is None:
            return ""
        try:
            self.obj.program("charge_open_waits").iterate()
        except BpfError as exc:  # a kernel without task iterators (5.8+): those waits stay uncounted
            return f"lock waits in progress at stop are not charged: {exc.message}"
        return ""

    def retune(self, t: Tuning) -> None:
        """The overhead budget's step: fewer stack walks from the next event on."""
        if self.obj is not None:
            tune.write(self.obj, StackTune(t.walks_per_s))

    def close(self) -> None:
        if self.obj:
            self.obj.close()
            self.obj = None
