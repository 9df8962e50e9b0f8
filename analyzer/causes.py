"""Causes: why a task waited, from the frames of its off-CPU stack (LatencyTOP's idea, today's kernels),
and from what it was doing when it blocked (its system call, the kind of file, a kernel thread's
function: analyzer/why.py), which every wait has, walked or not.

The rules live in a data file, `causes.toml` beside this module; users add their own in
$XDG_CONFIG_HOME/stallscope/causes.toml or a file named with --causes. Every rule that matches a
wait competes: the highest priority wins (LatencyTOP's rule too), ties go to the rule whose frame is
innermost, then to rules with frames over those without. A rule without frames matches on the wait's
evidence alone, so it also names waits that have no stack. A stack no rule matches is named by its
innermost meaningful frame, a wait without a stack by its evidence, marked unmatched, so
`stallscope causes --unknown` can list what the table should learn next.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from stallscope.analyzer.frames import LOCK_INTERNAL, PERCPU_RWSEM_WAITS, SLEEP_MACHINERY, bare, percpu_rwsem_of
from stallscope.analyzer.sample import Stack
from stallscope.analyzer.why import FD_ALSO, FD_KINDS, FUTEX_FLAGS, NO_WHY, RULE_CONTEXTS, WOKEN_BY, Why
from stallscope.errors import StallscopeError

BLOCKER, IDLE = "blocker", "idle"
CPU = "cpu"  # not from stacks: run-queue wait ("Waiting for CPU"), kept apart from blocked time
CLASSES = (BLOCKER, IDLE)

# Who holds a lock, told from the caller that waits for it (the lock probe names locks by address;
# a stack alone has only the callers).
_MMAP_LOCK_USERS = (
    "lock_mm_and_find_vma", "vm_mmap_pgoff", "__vm_munmap", "vm_munmap", "do_mprotect_pkey", "do_madvise",
    "mmap_read_lock", "mmap_write_lock", "do_mlock", "__mm_populate", "exit_mmap", "dup_mmap", "do_vmi_munmap",
    "__do_sys_mremap", "__x64_sys_mremap", "__access_remote_vm", "get_user_pages", "__get_user_pages",
    "proc_pid_cmdline_read", "m_start", "show_map", "do_brk_flags", "__do_sys_brk", "__x64_sys_brk",
    "madvise_lock", "do_madvise", "userfaultfd_", "lock_vma", "mmap_region",
)
_DIR_I_RWSEM_USERS = (
    "open_last_lookups", "lookup_slow", "filename_create", "do_unlinkat", "do_rmdir", "do_renameat2",
    "lock_rename", "__lookup_slow", "iterate_dir", "lookup_one_qstr_excl", "start_dirop",
)
_FILE_I_RWSEM_USERS = (
    "ext4_buffered_write_iter", "ext4_file_write_iter", "generic_file_write_iter", "xfs_ilock",
    "shmem_file_write_iter", "btrfs_do_write_iter", "do_truncate", "ext4_dio_write_iter",
)
# a lock named by the function that takes it, when that function is the waiter's caller of the lock: a file's
# position (read, write and lseek of a file whose descriptor threads or processes share take it); the directory
# an O_CREAT open creates in (open_last_lookups(), inlined into path_openat()); a thread's exit leaving its mm
# (exit_mm(), inlined into do_exit()); 6.18's madvise() and munlock() where they take the mmap_lock; an inode's
# attribute changes and ext4's extent map, which lock the inode (and take no other sleeping lock themselves)
_LOCK_OF_CALLER = {"fdget_pos": "f_pos_lock", "__fdget_pos": "f_pos_lock", "path_openat": "directory i_rwsem",
                   "do_exit": "mmap_lock", "madvise_vma_behavior": "mmap_lock", "__x64_sys_munlock": "mmap_lock",
                   "vfs_utimes": "inode i_rwsem", "chmod_common": "inode i_rwsem", "chown_common": "inode i_rwsem",
                   "vfs_setxattr": "inode i_rwsem", "vfs_removexattr": "inode i_rwsem", "ext4_fiemap": "inode i_rwsem",
                   "vfs_fileattr_set": "inode i_rwsem", "do_mremap": "mmap_lock"}


@dataclass(frozen=True)
class Rule:
    name: str
    cls: str
    priority: int
    frames: tuple[str, ...]
    user_frames: tuple[str, ...] = ()
    state: int = 0
    innermost: bool = False  # only the innermost meaningful frame counts: a call site, not a frame anywhere
    source: str = "built-in"
    # evidence (analyzer/why.py): every one given must hold
    syscalls: tuple[str, ...] = ()  # the system call the task blocked in
    fd: tuple[str, ...] = ()  # the kind of file its descriptor names (FD_KINDS)
    # RULE_CONTEXTS: syscall, fault, kthread, kworker-idle, kworker, exit, io-worker, user-worker, uprobe
    context: tuple[str, ...] = ()
    futex: tuple[str, ...] = ()  # FUTEX_FLAGS the futex wait has: tid, lockword, timeout
    functions: tuple[str, ...] = ()  # a kernel thread's function or work item (globs)
    woken_by: str = ""  # how most of the waits ended: task, interrupt, exiting task
    # idle for the task itself (it chose the wait), but the root of a wait it ended on waking
    # another task: a lock holder that sleeps, a producer pacing itself (analyzer/chains.py)
    delays_wakees: bool = False
    # a wait for input (a read of a pipe or a socket): a consumer held up by its producer, but the part of it
    # charged once it had gone on for a second is idle: nothing came (analyzer/attribution.py _idle_input)
    input: bool = False
    iowait: bool = False  # evidence too: the task slept in I/O wait (io_schedule(): why.IOWAIT)
    # names only waits with no stack walked: a walked stack names its own (a lock at its call site, its frame)
    stackless: bool = False
    # an innermost rule's call site where the function also takes a sleeping lock: a lock the contention
    # tracepoints saw wanted at that same site names the wait instead (attribution.classify_wait)
    unless_lock: bool = False

    @property
    def evidence(self) -> bool:
        return bool(self.syscalls or self.fd or self.context or self.futex or self.functions or self.woken_by
                    or self.iowait)


def _compile(patterns: tuple[str, ...]) -> re.Pattern | None:
    """One regular expression for a rule's globs: a stack is matched against every rule."""
    return re.compile("|".join(fnmatch.translate(p) for p in patterns)) if patterns else None


@dataclass(frozen=True)
class Cause:
    name: str  # what the user reads: "Reading from a pipe", "rwsem contention: mmap_lock"
    cls: str  # "blocker" or "idle"
    frame: str  # the frame that matched (or named an unmatched wait), `sym+0xoff`; or the evidence
    matched: bool = True  # False: no rule matched; named by its innermost meaningful frame, or its evidence
    method: str = "stack"  # "stack": from a walked stack; "evidence": from what the task was doing
    delays_wakees: bool = False  # Rule.delays_wakees
    input: bool = False  # Rule.input
    unless_lock: bool = False  # Rule.unless_lock: a sleeping lock seen wanted at `frame` names the wait instead


class CauseTable:
    def __init__(self, rules: list[Rule]):
        self.rules = sorted(rules, key=lambda r: -r.priority)
        self._compiled = [(r, _compile(r.frames), _compile(r.user_frames)) for r in self.rules]
        # the kernel-thread function globs compiled with the table (in the tables' thread at a live view's start),
        # not at the first wait they judge, on the way to its first data
        self._functions = {id(r): _compile(r.functions) for r in self.rules if r.functions}
        self._cache: dict[tuple, Cause] = {}

    @classmethod
    def parse(cls, text: str, source: str) -> list[Rule]:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise StallscopeError(f"cause table {source} is not valid TOML: {exc}",
                                  "fix the file (see the format at the top of the built-in causes.toml)") from None
        rules = []
        for i, entry in enumerate(doc.get("cause", [])):
            try:
                cls_ = entry.get("class", BLOCKER)
                if cls_ not in CLASSES:
                    raise ValueError(f"class must be one of {', '.join(CLASSES)}")
                rules.append(Rule(str(entry["name"]), cls_, int(entry.get("priority", 50)),
                                  _strings(entry, "frames"), _strings(entry, "user_frames"),
                                  int(entry.get("state", 0)), bool(entry.get("innermost", False)), source,
                                  _strings(entry, "syscalls"), _strings(entry, "fd", FD_KINDS),
                                  _strings(entry, "context", RULE_CONTEXTS),
                                  _strings(entry, "futex", tuple(FUTEX_FLAGS)),
                                  _strings(entry, "functions"), _one_of(entry, "woken_by", WOKEN_BY),
                                  bool(entry.get("delays_wakees", False)), bool(entry.get("input", False)),
                                  bool(entry.get("iowait", False)), bool(entry.get("stackless", False)),
                                  bool(entry.get("unless_lock", False))))
            except (KeyError, TypeError, ValueError) as exc:
                raise StallscopeError(f"cause table {source}: entry {i + 1} is invalid ({exc})",
                                      "each [[cause]] needs a name, and frames as a list of strings") from None
        return rules

    @classmethod
    def load(cls, extra: list[str] | None = None) -> CauseTable:
        """The built-in table, then the user's ($XDG_CONFIG_HOME/stallscope/causes.toml), then `extra` files."""
        rules = cls.parse(resources.files("stallscope.analyzer").joinpath("causes.toml").read_text(), "built-in")
        for path in [user_table_path(), *(extra or [])]:
            if path is None:
                continue
            try:
                with open(path) as f:
                    text = f.read()
            except FileNotFoundError:
                if path in (extra or []):
                    raise StallscopeError(f"no cause table {path}", "check the path given to --causes") from None
                continue
            except OSError as exc:
                raise StallscopeError(f"cannot read cause table {path}: {exc.strerror}", "check its permissions") from None
            rules += cls.parse(text, path)
        return cls(rules)

    def classify(self, kstack: Stack | None, ustack: Stack | None = None, state: int = 0,
                 why: Why = NO_WHY) -> Cause | None:
        """The cause of a wait with this stack (None for none: `kstack` None or without frames) and
        evidence; None when neither names it."""
        stack = kstack if kstack is not None and kstack.frames else None
        key = (stack, ustack, state, why)  # the stacks themselves: ids are only unique within one recording
        hit = self._cache.get(key)
        if hit is None:
            hit = self._classify(stack, ustack, state, why)
            if len(self._cache) < 65536:
                self._cache[key] = hit
        return hit

    def _classify(self, kstack: Stack | None, ustack: Stack | None, state: int, why: Why) -> Cause | None:
        names = [bare(f.symbol) for f in kstack.frames] if kstack is not None else []
        first = next((i for i, n in enumerate(names) if n and not n.startswith(SLEEP_MACHINERY)), 0)
        unames = [bare(f.symbol) for f in ustack.frames] if ustack else []
        best: tuple[Rule, int, object] | None = None
        for rule, frames, user_frames in self._compiled:  # highest priority first
            if best is not None and rule.priority < best[0].priority:
                break
            if rule.state and (state & rule.state) != rule.state:
                continue
            if user_frames is not None and not any(u and user_frames.match(u) for u in unames):
                continue
            if rule.evidence and not _evidence_holds(rule, why, self._functions.get(id(rule))):
                continue
            if rule.stackless and names:
                continue
            if frames is None:
                idx = len(names) + 1  # frames, where a rule names them, are the stronger evidence
            elif not names:
                continue
            elif rule.innermost:
                if not (names[first] and frames.match(names[first])):
                    continue
                idx = first
            else:
                idx = next((i for i, n in enumerate(names) if n and frames.match(n)), -1)
                if idx < 0:
                    continue
            if best is None or idx < best[1]:
                best = (rule, idx, frames)
        if best is None:
            if kstack is None:
                text = why.describe()
                return Cause(f"In {text}", BLOCKER, text, matched=False, method="evidence") if text else None
            frame = innermost_frame(kstack)
            return Cause(bare(frame.split("+")[0]) or frame, BLOCKER, frame, matched=False)
        rule, idx, matched = best
        if idx < len(names):
            name = rule.name
            if "{caller}" in name:
                caller = _caller(names, idx, matched)
                # a stack that ends in the rule's frames (cut short) says only what was waited for
                if caller == "?":
                    name = name.replace(" in {caller}", "")
                name = name.replace("{caller}", caller)
            return Cause(_render(name, kstack, why), rule.cls, kstack.frames[idx].text,
                         delays_wakees=rule.delays_wakees, input=rule.input, unless_lock=rule.unless_lock)
        return Cause(_render(rule.name, kstack, why), rule.cls, why.describe() or rule.name,
                     method="stack" if kstack is not None else "evidence", delays_wakees=rule.delays_wakees,
                     input=rule.input)


# a lock's own frames, not the tracing's (`bpf_`: a BPF program's frames in a contention's stack; here, a kernel
# function such as bpf_link_free that waited)
_LOCK_FRAMES = tuple(p for p in LOCK_INTERNAL if not p.startswith(("bpf_", "__bpf_")))


def _caller(names: list[str], idx: int, frames) -> str:
    """Who called into a rule's frames: the first frame outward of the matched one that is none of the rule's,
    of the sleeping machinery's or of a lock's own (`{caller}`: which subsystem flushed a workqueue)."""
    for n in names[idx + 1:]:
        if n and not (frames is not None and frames.match(n)) and not n.startswith(SLEEP_MACHINERY) \
                and not n.startswith(_LOCK_FRAMES):
            return n
    return "?"


def _strings(entry: dict, key: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    value = entry.get(key, [])
    if isinstance(value, str):
        value = [value]
    out = tuple(str(v) for v in value)
    bad = [v for v in out if allowed is not None and v not in allowed]
    if bad:
        raise ValueError(f"{key} {bad[0]!r} is not one of {', '.join(a for a in allowed if a)}")
    return out


def _one_of(entry: dict, key: str, allowed: tuple[str, ...]) -> str:
    value = str(entry.get(key, ""))
    if value and value not in allowed:
        raise ValueError(f"{key} {value!r} is not one of {', '.join(allowed)}")
    return value


def _evidence_holds(rule: Rule, why: Why, functions: re.Pattern | None) -> bool:
    """Whether every piece of evidence the rule names holds of the wait; `functions`: its function globs compiled
    (_compile), None when it names none."""
    if rule.syscalls and why.syscall not in rule.syscalls:
        return False
    if rule.fd and why.fd not in rule.fd and FD_ALSO.get(why.fd) not in rule.fd:
        return False
    if rule.context and why.context not in rule.context:
        return False
    if rule.futex and not set(rule.futex) <= why.flags:
        return False
    if functions is not None and not functions.match(why.function):
        return False
    if rule.woken_by and why.woken_by != rule.woken_by:
        return False
    if rule.iowait and not why.iowait:
        return False
    return True


def _render(name: str, stack: Stack | None, why: Why = NO_WHY) -> str:
    if "{lock}" in name:
        name = name.replace("{lock}", lock_of(stack) if stack is not None else "?")
    if "{frame}" in name:
        name = name.replace("{frame}", bare(innermost_frame(stack).split("+")[0]) if stack is not None
                            else why.function or why.syscall or "?")
    if "{function}" in name:
        name = name.replace("{function}", why.function or "?")
    if "{syscall}" in name:
        name = name.replace("{syscall}", why.syscall or "?")
    return name


def innermost_frame(stack: Stack) -> str:
    """The first frame that says why (not how) the task sleeps, as `sym+0xoff`."""
    for f in stack.frames:
        if f.symbol and not f.symbol.startswith(SLEEP_MACHINERY):
            return f.text
    return stack.frames[0].text


def lock_of(stack: Stack) -> str:
    """A sleeping lock's name from its waiter's stack: mmap_lock, an inode's i_rwsem, or the caller."""
    names = [bare(f.symbol) for f in stack.frames]
    percpu = next((i for i, n in enumerate(names) if n.startswith(PERCPU_RWSEM_WAITS)), None)
    if percpu is not None:
        caller = next((n for n in names[percpu + 1:] if n and not n.startswith(PERCPU_RWSEM_WAITS)), "")
        lock = percpu_rwsem_of(caller)
        if lock is not None:
            return lock
    if any(n.startswith(_MMAP_LOCK_USERS) for n in names):
        return "mmap_lock"
    if any(n.startswith(_DIR_I_RWSEM_USERS) for n in names):
        return "directory i_rwsem"
    if any(n.startswith(_FILE_I_RWSEM_USERS) for n in names):
        return "inode i_rwsem"
    for n in names:  # the caller: past the sleeping and the lock's own frames
        if n and not n.startswith(SLEEP_MACHINERY) and not n.startswith(LOCK_INTERNAL):
            return _LOCK_OF_CALLER.get(n, n)
    return "?"


def user_table_path() -> str | None:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "stallscope", "causes.toml")


_active: CauseTable | None = None


def default_table() -> CauseTable:
    """The table in use: the built-in one and the user's, or what `use_table` set (--causes)."""
    global _active
    if _active is None:
        _active = CauseTable.load()
    return _active


def use_table(table: CauseTable) -> None:
    global _active
    _active = table
