"""`stallscope apply`: carry out a run-time recommendation, and undo it.

Before touching anything it checks the target is still the task the recording saw: the thread id,
its start time (a reused id is another task) and its name; it refuses kernel threads. What it
changes it first remembers in an undo file, one JSON line per change; `apply --undo` restores the
last one (again only on the same task). Boot-time and code changes are printed, never applied.
"""

from __future__ import annotations

import json
import os
import time

from stallscope.errors import StallscopeError

PF_KTHREAD = 0x00200000


def undo_path() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "stallscope", "undo.jsonl")


def _stat_fields(tid: int) -> list[str]:
    try:
        with open(f"/proc/{tid}/stat") as f:
            text = f.read()
    except OSError:
        raise StallscopeError(f"thread {tid} no longer exists", "record again and apply the new recommendation") from None
    # the name may hold spaces and parentheses: fields start after the last ')'
    return text[text.rfind(")") + 2:].split()


def check_same_task(action: dict) -> None:
    """The thread id is alive, started when the recording saw it start, has the same name, and is no
    kernel thread."""
    tid = int(action["tid"])
    fields = _stat_fields(tid)
    flags, start_ticks = int(fields[6]), int(fields[19])  # stat fields 9 and 22
    hz = os.sysconf("SC_CLK_TCK")
    recorded_ticks = int(action["start_time_ns"]) * hz // 1_000_000_000
    if abs(start_ticks - recorded_ticks) > 1:
        raise StallscopeError(f"thread {tid} is not the task in the recording (it started at another time: "
                              "the id was reused)", "record again and apply the new recommendation")
    try:
        with open(f"/proc/{tid}/comm") as f:
            comm = f.read().rstrip("\n")
    except OSError:
        comm = ""
    if comm != action.get("comm", comm):
        raise StallscopeError(f"thread {tid} is now named {comm!r}, not {action.get('comm')!r}",
                              "record again and apply the new recommendation")
    if flags & PF_KTHREAD:
        raise StallscopeError(f"thread {tid} ({comm}) is a kernel thread: stallscope does not change those",
                              "change it yourself if you are sure")


def current_state(action: dict) -> dict:
    """What the action would change, as it is now (kept for undo)."""
    kind = action["type"]
    if kind == "affinity":
        return {"cpus": sorted(os.sched_getaffinity(int(action["tid"])))}
    if kind == "nice":
        return {"nice": os.getpriority(os.PRIO_PROCESS, int(action["tid"]))}
    if kind == "write":
        try:
            with open(action["path"]) as f:
                return {"value": f.read().strip()}
        except OSError as exc:
            raise StallscopeError(f"cannot read {action['path']}: {exc.strerror}",
                                  "the knob may not exist on this kernel (or debugfs is not mounted)") from None
    raise StallscopeError(f"unknown action {kind!r}", "this recommendation cannot be applied by stallscope")


def carry_out(action: dict, state: dict) -> None:
    """Set what `state` says (the action's new values, or an undo entry's old ones)."""
    kind = action["type"]
    try:
        if kind == "affinity":
            os.sched_setaffinity(int(action["tid"]), state["cpus"])
        elif kind == "nice":
            os.setpriority(os.PRIO_PROCESS, int(action["tid"]), int(state["nice"]))
        elif kind == "write":
            with open(action["path"], "w") as f:
                f.write(str(state["value"]) + "\n")
    except OSError as exc:
        raise StallscopeError(f"cannot apply ({exc.strerror})", "run as root; the target may have exited") from None


def target_state(action: dict) -> dict:
    return {k: action[k] for k in ("cpus", "nice", "value") if k in action}


def apply(action: dict) -> dict:
    """Check, remember, change. Returns the undo entry written."""
    if "tid" in action:
        check_same_task(action)
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
    if not lines:
        raise StallscopeError("nothing to undo", f"no change recorded in {path}")
    try:
        entry = json.loads(lines[-1])
    except ValueError:
        raise StallscopeError(f"the undo file {path} is damaged", "restore the setting by hand") from None
    action = entry["action"]
    if "tid" in action:
        check_same_task(action)
    carry_out(action, entry["before"])
    with open(path + ".tmp", "w") as f:
        f.writelines(lines[:-1])
    os.replace(path + ".tmp", path)
    return entry
