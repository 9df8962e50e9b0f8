"""`record --redact`: a recording to hand over, without command lines and paths.

What is dropped (docs/recording.md keeps the same list):
- the recorded command's arguments: `meta.options.command.argv` keeps only its program's file name;
- the directories of the binaries in user stacks: a frame's module keeps its file name
  (`/home/alice/app/bin/server` -> `server`), as every view already shows it;
- the path of a directory whose i_rwsem a lock row names (`locks.object`): "(path redacted)";
- cgroup paths (the cgroups of processes, the cgroups each interval says a CPU quota throttled, and the
  throttled cgroups and cgroup pressure of `meta.machine.cpu_side`): `/cgroup-N`, numbered in order of first appearance, the same
  number for the same cgroup throughout the recording; the root cgroup stays `/`.
Kept: thread and process names (comm), symbols, build-ids, the host name and the kernel release.
"""

from __future__ import annotations

import os
from dataclasses import replace

from stallscope.analyzer.sample import Interval, RecordingMeta, Stack

REDACTED = ("command lines", "paths")
PATH_REDACTED = "(path redacted)"
# where cgroup file systems are mounted: meta.machine.cpu_side names a cgroup by its directory
_CGROUP_MOUNTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup")


def file_name(path: str) -> str:
    """A binary's file name without its directories; `[heap]`, `[anon]` and other names as they are."""
    if not path.startswith("/"):
        return path
    return os.path.basename(path) or path


class Redactor:
    """One recording's redaction: the same cgroup gets the same number in every interval."""

    def __init__(self):
        self._cgroups: dict[str, str] = {"/": "/"}

    def cgroup(self, path: str) -> str:
        """A cgroup's path (`/system.slice/x.service`) or directory (`/sys/fs/cgroup/...`) -> `/cgroup-N`."""
        for mount in _CGROUP_MOUNTS:
            if path == mount or path.startswith(mount + "/"):
                path = path[len(mount):] or "/"
                break
        if path not in self._cgroups:
            self._cgroups[path] = f"/cgroup-{len(self._cgroups)}"
        return self._cgroups[path]

    def meta(self, meta: RecordingMeta) -> RecordingMeta:
        options = {**meta.options, "redacted": list(REDACTED)}
        command = options.get("command")
        if command and command.get("argv"):
            options["command"] = {**command, "argv": [file_name(command["argv"][0])]}
        machine = dict(meta.machine)
        side = machine.get("cpu_side")
        if side:
            machine["cpu_side"] = {**side, **{key: [{**entry, "cgroup": self.cgroup(entry["cgroup"])}
                                                    for entry in side[key]]
                                              for key in ("throttled", "cgroup_psi") if key in side}}
        return replace(meta, options=options, machine=machine)

    def interval(self, iv: Interval) -> Interval:
        return replace(
            iv,
            stacks=tuple(self._stack(s) for s in iv.stacks),
            locks=tuple(replace(lk, object=PATH_REDACTED) if lk.object.startswith("/") else lk for lk in iv.locks),
            cgroups=tuple((tgid, start, self.cgroup(path)) for tgid, start, path in iv.cgroups),
            throttled=tuple(t._replace(cgroup=self.cgroup(t.cgroup)) for t in iv.throttled))

    @staticmethod
    def _stack(stack: Stack) -> Stack:
        if stack.kind != "user":
            return stack
        return replace(stack, frames=tuple(replace(f, module=file_name(f.module)) for f in stack.frames))
