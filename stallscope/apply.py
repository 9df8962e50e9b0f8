"""`stallscope apply`: carry out a run-time recommendation, and undo it.

A recording is a file anyone can hand over, so nothing in it is trusted as a target. Before touching
anything apply checks the task is still the one the recording saw: the thread id, its start time (a
reused id is another task) and its name; it refuses kernel threads. A value is written only to a file
the running kernel defines, found now from the knob's or the slab cache's name (never a path read from
the recording): a scheduler knob stallscope knows (analyzer/recommend.SCHED_KNOB_PATHS) that exists on
this kernel, or a tunable of a cache listed in /sys/kernel/slab now. CPUs must be online here, a nice
value in range, a written value a number. What it changes it first remembers in an undo file, one
JSON line per change; `apply --undo` restores the last one (again only on the same task, through the
same checks). Boot-time and code changes are printed, never applied.
"""

from __future__ import annotations

import json
import os
import stat
import time

from stallscope import procstat
from stallscope.analyzer.recommend import SCHED_KNOB_PATHS, SLAB_ROOT, SLAB_TUNABLES, is_cache_name
from stallscope.analyzer.untrusted import printable
from stallscope.errors import StallscopeError

PF_KTHREAD = 0x00200000
_RECORD_AGAIN = "record again and apply the new recommendation"
_MAX_VALUE_DIGITS = 19  # the values written are counts and nanoseconds: a u64 has 20 digits


def undo_path() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "stallscope", "undo.jsonl")


def _int(action: dict, key: str, lowest: int = 0) -> int:
    """An integer field of an action (never a bool, a string or a float), at least `lowest`."""
    v = action.get(key)
    if type(v) is not int or v < lowest:
        raise StallscopeError(f"the recommendation's {key} is not a valid number: {v!r}",
                              "the recording is damaged or was edited; record again")
    return v


def thread_name(tid: int) -> str:
    """A thread's name as the collector records it: its bytes, a byte that is not UTF-8 replaced."""
    try:
        with open(f"/proc/{tid}/comm", "rb") as f:
            return f.read().rstrip(b"\n").decode(errors="replace")
    except OSError:
        raise StallscopeError(f"thread {tid} no longer exists", _RECORD_AGAIN) from None


def check_same_task(action: dict) -> None:
    """The thread id is alive, started when the recording saw it start, has the same name, and is no
    kernel thread."""
    tid = _int(action, "tid", lowest=1)
    recorded_ns = _int(action, "start_time_ns")
    recorded_comm = action.get("comm")
    if not isinstance(recorded_comm, str):
        raise StallscopeError(f"the recommendation does not name thread {tid}",
                              "the recording is damaged or was edited; record again")
    got = procstat.numbers(tid, (9, 22))  # its flags and start time
    if got is None:
        raise StallscopeError(f"thread {tid} no longer exists", _RECORD_AGAIN)
    flags, start_ticks = got
    hz = os.sysconf("SC_CLK_TCK")
    if abs(start_ticks - recorded_ns * hz // 1_000_000_000) > 1:
        raise StallscopeError(f"thread {tid} is not the task in the recording (it started at another time: "
                              "the id was reused)", _RECORD_AGAIN)
    comm = thread_name(tid)
    if comm != recorded_comm:
        raise StallscopeError(f"thread {tid} is now named {comm!r}, not {recorded_comm!r}", _RECORD_AGAIN)
    if flags & PF_KTHREAD:
        raise StallscopeError(f"thread {tid} ({printable(comm)}) is a kernel thread: stallscope does not change "
                              "those", "change it yourself if you are sure")


def online_cpus() -> set[int]:
    from stallscope.machine import parse_cpu_list

    try:
        with open("/sys/devices/system/cpu/online") as f:
            return set(parse_cpu_list(f.read()))
    except (OSError, ValueError):
        return set(range(os.cpu_count() or 1))


def _cpus(state: dict) -> list[int]:
    cpus = state.get("cpus")
    online = online_cpus()
    if (not isinstance(cpus, list) or not cpus or any(type(c) is not int for c in cpus)
            or not set(cpus) <= online):
        raise StallscopeError(f"CPUs {cpus!r} are not CPUs online on this machine ({sorted(online)})",
                              "the recording was made on another machine, or it is damaged; record here")
    return cpus


def _nice(state: dict) -> int:
    nice = state.get("nice")
    if type(nice) is not int or not -20 <= nice <= 19:
        raise StallscopeError(f"nice {nice!r} is not a nice value (-20..19)",
                              "the recording is damaged or was edited; record again")
    return nice


def _value(state: dict) -> str:
    value = state.get("value")
    text = str(value) if type(value) is int else value
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or len(text) > _MAX_VALUE_DIGITS:
        raise StallscopeError(f"{value!r} is not a value stallscope writes (a number)",
                              "the recording is damaged or was edited; record again")
    return text


def write_target(action: dict) -> str:
    """The file a write changes, as the running kernel defines it now: a scheduler knob stallscope
    knows, found on this kernel, or a tunable of a slab cache listed in /sys/kernel/slab now. A path in
    the action (read from a recording, or from an undo file of an older stallscope) only names which."""
    knob, cache, attribute = action.get("knob"), action.get("cache"), action.get("attribute")
    if knob is None and cache is None:
        knob, cache, attribute = _identify(action.get("path"))
    if knob is not None:
        path = SCHED_KNOB_PATHS.get(knob) if isinstance(knob, str) else None
        if path is None:
            raise StallscopeError(f"{knob!r} is not a knob stallscope changes", "change it yourself if you are sure")
        if not _is_regular(path):
            raise StallscopeError(f"this kernel has no {path}", "the knob does not exist here (or debugfs is not "
                                  "mounted); the recommendation cannot be applied")
        return path
    if not is_cache_name(cache) or attribute not in SLAB_TUNABLES:
        raise StallscopeError(f"cannot write {attribute!r} of slab cache {cache!r}",
                              "stallscope writes only the slab tunables it knows; the recording may be damaged")
    try:
        listed = cache in os.listdir(SLAB_ROOT)
    except OSError:
        listed = False
    path = os.path.join(SLAB_ROOT, cache, attribute)
    # an alias is a link to the merged cache's directory, inside SLAB_ROOT
    if not listed or not os.path.realpath(path).startswith(SLAB_ROOT + "/") or not _is_regular(path):
        raise StallscopeError(f"this kernel has no slab cache {cache!r} with {attribute}",
                              "the cache does not exist here; record on this machine again")
    return path


def _identify(path) -> tuple[str | None, str | None, str | None]:
    """(knob, cache, attribute) named by a path of a known form; all None for any other path."""
    if not isinstance(path, str):
        return None, None, None
    for name, known in SCHED_KNOB_PATHS.items():
        if path == known:
            return name, None, None
    head, attribute = os.path.split(path)
    parent, cache = os.path.split(head)
    if parent == SLAB_ROOT and attribute in SLAB_TUNABLES:
        return None, cache, attribute
    return None, None, None


def _is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _open(path: str, flags: int) -> int:
    """A file descriptor on `path`, never through a link in its last component, never a device or FIFO."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(0, "not a regular file")
    return fd


def current_state(action: dict) -> dict:
    """What the action would change, as it is now (kept for undo)."""
    kind = action.get("type")
    if kind == "affinity":
        return {"cpus": sorted(os.sched_getaffinity(_int(action, "tid", lowest=1)))}
    if kind == "nice":
        return {"nice": os.getpriority(os.PRIO_PROCESS, _int(action, "tid", lowest=1))}
    if kind == "write":
        path = write_target(action)
        try:
            fd = _open(path, os.O_RDONLY)
            with os.fdopen(fd, "rb") as f:
                return {"value": f.read(4096).decode(errors="replace").strip()}
        except OSError as exc:
            raise StallscopeError(f"cannot read {path}: {exc.strerror}",
                                  "the knob may not exist on this kernel (or debugfs is not mounted)") from None
    raise StallscopeError(f"unknown action {kind!r}", "this recommendation cannot be applied by stallscope")


def check(action: dict, state: dict) -> None:
    """Everything about an action and the values it would set, before anything is written."""
    kind = action.get("type")
    if "tid" in action or kind in ("affinity", "nice"):
        check_same_task(action)
    if kind == "affinity":
        _cpus(state)
    elif kind == "nice":
        _nice(state)
    elif kind == "write":
        write_target(action)
        _value(state)
    else:
        raise StallscopeError(f"unknown action {kind!r}", "this recommendation cannot be applied by stallscope")


def carry_out(action: dict, state: dict) -> None:
    """Set what `state` says (the action's new values, or an undo entry's old ones); `check` first."""
    kind = action["type"]
    try:
        if kind == "affinity":
            os.sched_setaffinity(action["tid"], _cpus(state))
        elif kind == "nice":
            os.setpriority(os.PRIO_PROCESS, action["tid"], _nice(state))
        elif kind == "write":
            fd = _open(write_target(action), os.O_WRONLY)
            with os.fdopen(fd, "w") as f:
                f.write(_value(state) + "\n")
    except OSError as exc:
        raise StallscopeError(f"cannot apply ({exc.strerror})", "run as root; the target may have exited") from None


def target_state(action: dict) -> dict:
    return {k: action[k] for k in ("cpus", "nice", "value") if k in action}


def apply(action: dict) -> dict:
    """Check, remember, change. Returns the undo entry written."""
    check(action, target_state(action))
    before = current_state(action)
    entry = {"time": time.time(), "action": action, "before": before}
    path = undo_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError as exc:
        raise StallscopeError(f"cannot write the undo file {path}: {exc.strerror}",
                              "nothing was changed; free space or fix its permissions") from None
    carry_out(action, target_state(action))
    return entry


def undo() -> dict:
    """Restore the last change still in the undo file, and drop it from the file."""
    path = undo_path()
    try:
        with open(path) as f:
            lines = [line for line in f if line.strip()]
    except FileNotFoundError:
        lines = []
    except (OSError, UnicodeDecodeError) as exc:
        raise StallscopeError(f"cannot read the undo file {path}: {exc}", "restore the setting by hand") from None
    if not lines:
        raise StallscopeError("nothing to undo", f"no change recorded in {path}")
    try:
        entry = json.loads(lines[-1])
        action, before = entry["action"], entry["before"]
        if not isinstance(action, dict) or not isinstance(before, dict):
            raise TypeError("not an object")
    except (ValueError, KeyError, TypeError):
        raise StallscopeError(f"the undo file {path} is damaged", "restore the setting by hand") from None
    check(action, before)
    carry_out(action, before)
    with open(path + ".tmp", "w") as f:
        f.writelines(lines[:-1])
    os.replace(path + ".tmp", path)
    return entry
