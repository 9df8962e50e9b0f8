"""`report --redact`: a report to share leaves out command lines and paths.

The recorded command's arguments are dropped (its program is kept by name, without its directory);
every path the recording holds (a directory whose i_rwsem was contended, a cgroup, an argument that
names a file) is replaced wherever it appears in the page: in lock names, findings, evidence, flame
graph frames. Process and thread names, kernel and user function names stay: they are what the report
is about, and a user frame names its library by file name only.
"""

from __future__ import annotations

import os

REDACTED = "(redacted)"


def _paths(doc: dict) -> set[str]:
    """The paths a recording holds, as they appear in its export."""
    out: set[str] = set()
    command = doc["meta"]["options"].get("command") or {}
    out.update(a for a in command.get("argv") or [] if "/" in a)
    for lock in doc["locks"]:
        out.update(where for _addr, where in ((i["addr"], i["where"]) for i in lock["instances"]) if where)
    out.update(c["cgroup"] for c in doc.get("cgroups") or [])
    side = (doc["meta"]["machine"] or {}).get("cpu_side") or {}
    out.update(c.get("cgroup", "") for c in side.get("cgroup_psi") or [])
    out.update(t.get("cgroup", "") for t in side.get("throttled") or [] if isinstance(t, dict))
    return {p for p in out if len(p) > 1}


def command_name(argv: list[str]) -> list[str]:
    """A command line reduced to its program's name: `run.sh (redacted)`."""
    if not argv:
        return []
    return [os.path.basename(argv[0])] + ([REDACTED] if len(argv) > 1 else [])


def _scrub(value, secrets: list[str]):
    if isinstance(value, str):
        for s in secrets:
            if s in value:
                value = value.replace(s, REDACTED)
        return value
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    if isinstance(value, dict):
        return {_scrub(k, secrets): _scrub(v, secrets) for k, v in value.items()}
    return value


def redact(data: dict, doc: dict) -> dict:
    """The page data without the command's arguments and with every path of `doc` replaced."""
    secrets = sorted(_paths(doc), key=lambda p: (-len(p), p))  # the longest first: a path inside another
    rec = data["page"].get("recording")
    if rec and rec["command"]:
        data = {**data, "page": {**data["page"], "recording": {**rec, "command": command_name(rec["command"])}}}
    out = _scrub(data, secrets)
    if out["page"].get("file"):
        out["page"]["file"] = REDACTED
    out["redacted"] = True
    return out
