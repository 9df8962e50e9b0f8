"""Causes: why a task waited, from the frames of its off-CPU stack (LatencyTOP's idea, today's kernels).

The rules live in a data file, `causes.toml` beside this module; users add their own in
$XDG_CONFIG_HOME/stallscope/causes.toml or a file named with --causes. Every rule that matches a
stack competes: the highest priority wins (LatencyTOP's rule too), ties go to the rule whose frame is
innermost. A stack no rule matches is named by its innermost meaningful frame, marked unmatched, so
`stallscope causes --unknown` can list what the table should learn next.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from stallscope.analyzer.sample import Stack
from stallscope.errors import StallscopeError

BLOCKER, IDLE = "blocker", "idle"
CPU = "cpu"  # not from stacks: run-queue wait ("Waiting for CPU"), kept apart from blocked time
CLASSES = (BLOCKER, IDLE)

# Frames that say *how* a task sleeps, not *why*: skipped when a wait is named by its frame.
SLEEP_MACHINERY = (
    "__schedule", "schedule", "preempt_schedule", "io_schedule", "__cond_resched", "schedule_timeout",
    "schedule_hrtimeout", "schedule_preempt_disabled", "do_task_dead", "bit_wait", "out_of_line_wait_on_bit",
    "__wait_on_bit", "wait_woken", "__wait_event", "__wait_for_common", "wait_for_completion",
    "finish_task_switch", "__switch_to", "__traceiter_", "__bpf_trace_", "bpf_trace_run",
)

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
_SUFFIX = re.compile(r"\.(constprop|isra|part|cold|llvm|lto_priv|localalias)\b.*$")


def bare(symbol: str | None) -> str:
    """The function name without the compiler's clone suffixes (`.constprop.0`, `.isra.0`, ...)."""
    return _SUFFIX.sub("", symbol or "")


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


def _compile(patterns: tuple[str, ...]) -> re.Pattern | None:
    """One regular expression for a rule's globs: a stack is matched against every rule."""
    return re.compile("|".join(fnmatch.translate(p) for p in patterns)) if patterns else None


@dataclass(frozen=True)
class Cause:
    name: str  # what the user reads: "Reading from a pipe", "rwsem contention: mmap_lock"
    cls: str  # "blocker" or "idle"
    frame: str  # the frame that matched (or named an unmatched wait), `sym+0xoff`
    matched: bool = True  # False: no rule matched; named by its innermost meaningful frame


class CauseTable:
    def __init__(self, rules: list[Rule]):
        self.rules = sorted(rules, key=lambda r: -r.priority)
        self._compiled = [(r, _compile(r.frames), _compile(r.user_frames)) for r in self.rules]
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
                                  tuple(str(f) for f in entry.get("frames", [])),
                                  tuple(str(f) for f in entry.get("user_frames", [])),
                                  int(entry.get("state", 0)), bool(entry.get("innermost", False)), source))
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

    def classify(self, kstack: Stack | None, ustack: Stack | None = None, state: int = 0) -> Cause | None:
        """The cause of a wait with this stack, or None when there is no kernel stack."""
        if kstack is None or not kstack.frames:
            return None
        key = (kstack, ustack, state)  # the stacks themselves: ids are only unique within one recording
        hit = self._cache.get(key)
        if hit is None:
            hit = self._classify(kstack, ustack, state)
            if len(self._cache) < 65536:
                self._cache[key] = hit
        return hit

    def _classify(self, kstack: Stack, ustack: Stack | None, state: int) -> Cause:
        names = [bare(f.symbol) for f in kstack.frames]
        first = next((i for i, n in enumerate(names) if n and not n.startswith(SLEEP_MACHINERY)), 0)
        unames = [bare(f.symbol) for f in ustack.frames] if ustack else []
        best: tuple[Rule, int] | None = None
        for rule, frames, user_frames in self._compiled:  # highest priority first
            if best is not None and rule.priority < best[0].priority:
                break
            if rule.state and (state & rule.state) != rule.state:
                continue
            if user_frames is not None and not any(u and user_frames.match(u) for u in unames):
                continue
            if frames is None:
                idx = 0
            elif rule.innermost:
                if not (names[first] and frames.match(names[first])):
                    continue
                idx = first
            else:
                idx = next((i for i, n in enumerate(names) if n and frames.match(n)), -1)
                if idx < 0:
                    continue
            if best is None or idx < best[1]:
                best = (rule, idx)
        if best is None:
            frame = innermost_frame(kstack)
            return Cause(bare(frame.split("+")[0]) or frame, BLOCKER, frame, matched=False)
        rule, idx = best
        return Cause(_render(rule.name, kstack), rule.cls, kstack.frames[idx].text)


def _render(name: str, stack: Stack) -> str:
    if "{lock}" in name:
        name = name.replace("{lock}", lock_of(stack))
    if "{frame}" in name:
        name = name.replace("{frame}", bare(innermost_frame(stack).split("+")[0]))
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
    if any(n.startswith(_MMAP_LOCK_USERS) for n in names):
        return "mmap_lock"
    if any(n.startswith(_DIR_I_RWSEM_USERS) for n in names):
        return "directory i_rwsem"
    if any(n.startswith(_FILE_I_RWSEM_USERS) for n in names):
        return "inode i_rwsem"
    from stallscope.analyzer.locks import LOCK_INTERNAL

    for n in names:  # the caller: past the sleeping and the lock's own frames
        if n and not n.startswith(SLEEP_MACHINERY) and not n.startswith(LOCK_INTERNAL):
            return n
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
