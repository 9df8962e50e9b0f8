"""The stallscope command line: the one place that wires collector, store and views."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys

from stallscope import __version__, exiting, outputs
from stallscope.analyzer.untrusted import escaped
from stallscope.errors import StallscopeError
from stallscope.bpf.tune import DEFAULT_SAMPLE_NS, DEFAULT_USER_WALKS_PER_S, DEFAULT_WALKS_PER_S
from stallscope.priority import DEFAULT_NICE
from stallscope.progress import Progress

EXIT_ERROR = 2

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h)?\s*$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str) -> float:
    """`30`, `30s`, `1.5m`, `250ms` -> seconds."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 2m, 500ms)")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"too long a duration: {text[:40]!r}")
    return seconds


def _duration_or_zero(text: str) -> float:
    """A duration, or 0."""
    if text.strip() in ("0", "0s"):
        return 0.0
    return duration(text)


# The shortest drain interval. Each drain reads every in-kernel map and dumps the tasks: about 4 ms of
# CPU on a quiet 2-CPU VM (-i 1ns ran 514 drains in 2 s, one CPU on them alone), 15 ms at a load
# average of 11, where -i 10ms stretched to 58 ms intervals and took 27.5% of a CPU; shorter, and
# stallscope would mostly measure itself.
MIN_INTERVAL_S = 0.010
# The longest: the in-kernel maps hold one interval's aggregates and fill up over longer ones.
MAX_INTERVAL_S = 3600.0
# The longest wait threshold or drawing scale (--min-stack-wait, --stack-scale): past an hour no wait
# would get a stack, and the budget multiplies the scale by up to 10^4 in a 64-bit nanosecond field.
MAX_WAIT_S = 3600.0
# Stack walks per second per CPU: one costs 2-17 us, so more than this would take a whole CPU (0 is
# "no cap", the way to ask for every walk).
MAX_WALKS_PER_S = 100_000
# On-CPU sampling: a sample a microsecond per CPU. Above the kernel's perf_event_max_sample_rate (100000
# by default) the oncpu group is turned off with the reason, the rest records; this bound only keeps
# absurd values out of the 64-bit frequency field.
MAX_SAMPLE_HZ = 1_000_000
PID_MAX_LIMIT = 1 << 22  # the kernel's PID_MAX_LIMIT: no PID or thread id is larger


def _interval(text: str) -> float:
    v = duration(text)
    if v < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"an interval is at least {MIN_INTERVAL_S * 1e3:g}ms, not {text!r}: each drain reads every in-kernel map "
            "and the tasks, a few ms of CPU, so shorter intervals would measure mostly stallscope itself")
    if v > MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"an interval is at most {MAX_INTERVAL_S / 3600:g}h, not {text!r}: the "
                                         "in-kernel maps hold one interval's aggregates and fill up over longer ones")
    return v


def _wait_length(text: str) -> float:
    """0, or a duration up to MAX_WAIT_S."""
    v = _duration_or_zero(text)
    if v > MAX_WAIT_S:
        raise argparse.ArgumentTypeError(f"at most {MAX_WAIT_S / 3600:g}h, not {text!r}")
    return v


def _walk_rate(text: str) -> int:
    """0 (no cap) .. MAX_WALKS_PER_S."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v <= MAX_WALKS_PER_S:
        raise argparse.ArgumentTypeError(f"walks per second per CPU are 0 (no cap) to {MAX_WALKS_PER_S} (a walk costs "
                                         f"2-17 us: more would take a whole CPU), not {text!r}")
    return v


def _sample_hz(text: str) -> int:
    v = _positive_int(text)
    if v > MAX_SAMPLE_HZ:
        raise argparse.ArgumentTypeError(f"at most {MAX_SAMPLE_HZ} (a sample a microsecond per CPU; the kernel's "
                                         f"perf_event_max_sample_rate is lower), not {text!r}")
    return v


def _pid(text: str) -> int:
    v = _positive_int(text)
    if v >= PID_MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"no PID is {PID_MAX_LIMIT} or more (the kernel's PID_MAX_LIMIT): {text!r}")
    return v


def _non_negative_pct(text: str) -> float:
    try:
        v = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return v


def _percent(text: str) -> float:
    try:
        v = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if not 0 < v <= 100:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 100: {text!r}")
    return v


def _nice(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not -20 <= v <= 19:
        raise argparse.ArgumentTypeError(f"a nice value is -20..19, not {v}")
    return v


def _rt_priority(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= v <= 99:
        raise argparse.ArgumentTypeError(f"a SCHED_FIFO priority is 1..99, not {v}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v


def _map_size(text: str) -> int:
    from stallscope.bpf.sizing import FLAG_MAX, FLAG_MIN

    v = _positive_int(text)
    if not FLAG_MIN <= v <= FLAG_MAX:
        raise argparse.ArgumentTypeError(f"must be {FLAG_MIN}..{FLAG_MAX}: {text!r}")
    return v


def _add_trace_options(p: argparse.ArgumentParser, live: bool) -> None:
    """The tracing options of `top` and `record`, one line of help each; docs/recording.md says what each
    does and costs."""
    what = p.add_argument_group("what to trace (docs/recording.md)")
    what.add_argument("-i", "--interval", type=_interval, default=1.0, metavar="INTERVAL",
                      help=f"drain the in-kernel aggregates every INTERVAL (default 1s; "
                           f"{MIN_INTERVAL_S * 1e3:g}ms to {MAX_INTERVAL_S / 3600:g}h)")
    what.add_argument("-p", "--pid", type=_pid, default=0, metavar="PID",
                      help="trace only this process (its threads); default: the whole system")
    what.add_argument("--probes", type=_probe_spec, default=DEFAULT_PROBES, metavar="SPEC",
                      help=f"optional groups: +GROUP, -GROUP, or none/default/all first (groups: "
                           f"{', '.join(OPTIONAL_PROBES)}; default: {', '.join(sorted(DEFAULT_PROBES))})")
    what.add_argument("--sample-hz", type=_sample_hz, default=99, metavar="N",
                      help="on-CPU samples per second per CPU for the oncpu group (default 99)")
    stacks = p.add_argument_group("stacks (totals stay exact whatever these say)")
    stacks.add_argument("--stack-scale", type=_wait_length, default=DEFAULT_SAMPLE_NS / 1e9, metavar="TIME",
                        help=f"T: a wait of d gets a stack with probability min(1, d/T) "
                             f"(default {DEFAULT_SAMPLE_NS / 1e6:g}ms; 0: every wait); a lock contention not drawn "
                             "may still get a short walk of its call site (at most 50/s per CPU)")
    stacks.add_argument("--stack-rate", type=_walk_rate, default=DEFAULT_WALKS_PER_S, metavar="N",
                        help=f"at most N stack walks per second per CPU and probe (default {DEFAULT_WALKS_PER_S}; "
                             "0: no cap)")
    stacks.add_argument("--user-stack-rate", type=_walk_rate, default=DEFAULT_USER_WALKS_PER_S, metavar="N",
                        help=f"user stacks walked per second per CPU as a wait begins (default "
                             f"{DEFAULT_USER_WALKS_PER_S}; 0: no cap)")
    stacks.add_argument("--min-stack-wait", type=_wait_length, default=0.0, metavar="TIME",
                        help="walk stacks and record wakers only for waits at least this long (default 0)")
    stacks.add_argument("--no-user-stacks", action="store_true", help="do not collect user stacks")
    cost = p.add_argument_group("stallscope's own cost")
    cost.add_argument("--overhead-budget", type=_percent, default=1.0, metavar="PCT",
                      help="cost allowed, %% of the machine's CPU (default 1); over it, fewer stacks, in stated steps")
    cost.add_argument("--no-degrade", dest="degrade", action="store_false",
                      help="measure the cost against the budget, but never lower the stacks or sampling")
    cost.add_argument("--max-tasks", type=_map_size, default=None, metavar="N",
                      help="tasks the per-task BPF maps are sized for (default: 4 x the threads alive, >= 32768)")
    cost.add_argument("--stack-map-entries", type=_map_size, default=None, metavar="N",
                      help="stacks each probe object's stack map holds (default 32768, less on a small machine)")
    cost.add_argument("--nice", type=_nice, default=DEFAULT_NICE if live else None, metavar="N",
                      help=f"stallscope's own priority, -20..19 (default {DEFAULT_NICE}, as atop runs; docs/recording.md)" if live else
                           "stallscope's own priority, -20..19 (default: the caller's; a command keeps the caller's)")
    cost.add_argument("--realtime", type=_rt_priority, default=None, metavar="PRIO",
                      help="run stallscope's threads at SCHED_FIFO priority PRIO, 1..99 (as perf record -r), where "
                           "real-time tasks hold the CPUs and leave an ordinary task 5%% of each (docs/recording.md)")


def _add_force(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--force", action="store_true", help=text)


def _add_output(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write here instead of stdout: a new file (mode 0600), a character device, a FIFO or "
                        "/dev/stdout; an existing file only with --force")
    _add_force(p, "replace an existing OUT file")


def _add_command_only(p: argparse.ArgumentParser) -> None:
    p.add_argument("--command-only", action="store_true",
                   help="only the processes of the recorded command (recordings made with `-- CMD`)")


def _add_causes_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--causes", action="append", default=[], metavar="TABLE",
                   help="a cause table (TOML, the format of the built-in causes.toml) whose rules join the "
                        "built-in ones; may be repeated")


def _groups():
    from stallscope.bpf.groups import GROUPS, default_groups

    return tuple(GROUPS), default_groups()


OPTIONAL_PROBES, DEFAULT_PROBES = _groups()


PROBE_SETS = {"none": frozenset(), "default": DEFAULT_PROBES, "all": frozenset(OPTIONAL_PROBES)}


def _probe_spec(text: str) -> frozenset[str]:
    """`-locks`, `+locks`, `+a,-b`: changes to the default set; `none`, `default` or `all` first
    starts from that set instead (`none,+slab`: the scheduler probes and the slab group only)."""
    groups = set(DEFAULT_PROBES)
    for i, part in enumerate(filter(None, (p.strip() for p in text.split(",")))):
        if part in PROBE_SETS and i == 0:
            groups = set(PROBE_SETS[part])
            continue
        sign, name = (part[0], part[1:]) if part[0] in "+-" else ("+", part)
        if name not in OPTIONAL_PROBES:
            raise argparse.ArgumentTypeError(f"no probe group {name!r} (groups: {', '.join(OPTIONAL_PROBES)})")
        (groups.add if sign == "+" else groups.discard)(name)
    return frozenset(groups)


class _Parser(argparse.ArgumentParser):
    """argparse quotes the arguments it rejects: escaped, as every message is (stallscope/errors.py)."""

    def error(self, message: str):
        super().error(escaped(message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="stallscope",
        description="What is making tasks wait, and what to change: off-CPU time, run-queue wait, "
                    "wakers, switches and migrations, traced with BPF.",
        epilog="See `stallscope COMMAND --help`. Exit status 2 means an error stallscope explained, 70 an "
                   "internal error (a bug: its traceback is saved, and the one line says where).")
    parser.add_argument("--version", action="version", version=f"stallscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("top", help="live ranking of what makes tasks wait (Textual screen; --replay FILE)",
                       description="Live ranking of blockers, tasks, locks, slab caches, CPUs, on-CPU functions "
                                   "and fixes, refreshed every interval; Enter drills in, ? lists the keys. "
                                   "With --replay, the same screens over a recording, with a time cursor. "
                                   "Plain text when stdout is not a terminal, or with --plain.",
                       epilog="examples:\n  stallscope top\n  stallscope top --probes +slab -o triage.stall\n"
                              "  stallscope top --replay triage.stall\n  stallscope top --plain -n 5 | less",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_trace_options(p, live=True)
    view = p.add_argument_group("the view")
    view.add_argument("--replay", metavar="FILE", help="show a recording instead of live data")
    view.add_argument("--plain", action="store_true",
                      help="plain text frames instead of the Textual screen (the default when stdout is no terminal)")
    view.add_argument("-o", "--output", metavar="FILE",
                      help="also record what the live view shows to FILE (replay it with --replay)")
    view.add_argument("--force", action="store_true", help="with -o: replace an existing recording")
    view.add_argument("-n", "--iterations", type=_positive_int, default=None, metavar="N",
                      help="stop after N refreshes (default: until q or Ctrl-C)")
    view.add_argument("--rows", type=_positive_int, default=15, help="rows per table in --plain (default 15)")
    _add_causes_option(p)

    p = sub.add_parser("record", help="record to a file, system-wide or one command",
                       description="Record the scheduler probes to FILE. With `-- CMD ARGS`, the command "
                                   "starts once the probes are attached, keeps its stdin/stdout/stderr, and "
                                   "the recording ends when it exits (stallscope then exits with its status). "
                                   "A full disk or the file size limit stops the recording, keeping every interval "
                                   "written, and detaches the probes (exit status 2).",
                       epilog="examples:\n  stallscope record -o run.stall -- stress-ng --dir 4 -t 10\n"
                              "  stallscope record -o box.stall -d 30s --probes +slab\n"
                              "  stallscope record -o app.stall -p 1234 -i 500ms\n"
                              "then: stallscope causes run.stall, stallscope top --replay run.stall",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the recording file to write: a new file (mode 0600; a regular file, never a device, FIFO "
                        "or symbolic link), or an existing one with --force")
    _add_force(p, "replace an existing recording (never one another process has open)")
    p.add_argument("--redact", action="store_true",
                   help="for a recording to hand over: drop the command's arguments, the directories of binaries, "
                        "the paths of directories named by locks, and cgroup paths (docs/recording.md lists them)")
    p.add_argument("-d", "--duration", type=duration, default=None, metavar="SECONDS",
                   help="stop after this long (e.g. 30, 30s, 2m); default: until Ctrl-C or the command exits")
    _add_trace_options(p, live=False)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="run and record this command")

    p = sub.add_parser("export", help="data for scripts and other tools",
                       description="Export a recording as the versioned JSON document (docs/export.md) or as "
                                   "folded stacks for FlameGraph and speedscope: off-CPU time in ns, or "
                                   "on-CPU sample counts with --what oncpu.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=("json", "folded"), default="json")
    p.add_argument("--what", choices=("offcpu", "oncpu"), default="offcpu",
                   help="for --format folded: off-CPU waits (ns, the default) or on-CPU samples (counts)")
    _add_output(p)
    _add_command_only(p)
    _add_causes_option(p)

    p = sub.add_parser("report", help="one self-contained HTML post-mortem of a recording",
                       description="Write one HTML file that tells the story of a recording: the top blockers, the "
                                   "fixes (needs tuning, cannot be tuned automatically, already good), an "
                                   "interactive off-CPU and on-CPU flame graph, the time series (select a window "
                                   "to filter the tables), blockers, processes, threads, locks, slab caches, "
                                   "run-queue latency, migrations and on-CPU functions, the machine, the probes, "
                                   "data loss and stallscope's own cost. It opens offline in any browser and "
                                   "makes no network request (docs/report.md).")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-o", "--output", required=True, metavar="OUT",
                   help="the HTML file to write: a new file (mode 0600); an existing one only with --force")
    _add_force(p, "replace an existing OUT file")
    p.add_argument("--redact", action="store_true",
                   help="leave out the command line and every path (directories, cgroups): a report to share")
    _add_causes_option(p)

    p = sub.add_parser("causes", help="LatencyTOP-like table: why tasks waited, by cause or by process",
                       description="Off-CPU time by cause, from the cause table (a built-in data file; add your "
                                   "own rules with --causes or in ~/.config/stallscope/causes.toml). Idle waits "
                                   "(event loops, parked thread pools, kernel threads' main loops) are left out "
                                   "unless --all.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--by", choices=("cause", "process", "thread", "cgroup", "root"), default="cause",
                   help="one table of causes (default), each process (thread, cgroup) with its causes, or the "
                        "root causes: each wait followed through who woke it to where the chain ends (a "
                        "waiter on a mutex whose holder waited on fsync() has the fsync as its root)")
    p.add_argument("--sort", choices=("total", "max", "count", "p99"), default="total",
                   help="rank causes by total wait (default), worst single wait, number of waits, or the 99th "
                        "percentile of single waits")
    p.add_argument("--all", action="store_true", help="include idle waits")
    p.add_argument("--unknown", action="store_true",
                   help="list the waits no rule matched, with their stacks and the kernel lock wanted at the "
                        "same call site (which names them), so the table can grow")
    p.add_argument("-n", "--rows", type=_positive_int, default=20, help="rows to show (default 20)")
    _add_command_only(p)
    _add_causes_option(p)

    p = sub.add_parser("diff", help="what got worse between two recordings (regression hunting)",
                       description="Causes, kernel locks and threads ranked by the change in wait per second of "
                                   "recording, absolute and relative: regressions first, then improvements, each "
                                   "the largest first. A change leads only past a noise guard "
                                   "(--min-delta per second, --min-relative of the base, --min-events waits); "
                                   "the rest follow, marked. --format folded writes a differential folded file "
                                   "(stack, base, new; ns per second) for a differential flame graph; --format html "
                                   "(or an -o file ending in .html) one self-contained HTML diff report.")
    p.add_argument("base", metavar="BASE")
    p.add_argument("new", metavar="NEW")
    p.add_argument("--format", choices=("text", "json", "folded", "html"), default=None,
                   help="text (default), json, folded, or html (the default when OUT ends in .html)")
    _add_output(p)
    p.add_argument("-n", "--rows", type=_positive_int, default=20, help="changes to show in text (default 20)")
    p.add_argument("--redact", action="store_true", help="html: leave out command lines and paths")
    p.add_argument("--all", action="store_true", help="include idle waits among the causes")
    p.add_argument("--command-only", action="store_true",
                   help="compare only the recorded commands' tasks (recordings made with `-- CMD`)")
    p.add_argument("--min-delta", type=duration, default=0.001, metavar="TIME",
                   help="noise guard: a change of less wait than this per second does not lead (default 1ms)")
    p.add_argument("--min-relative", type=_non_negative_pct, default=10.0, metavar="PCT",
                   help="noise guard: nor one of less than PCT%% of the base (default 10)")
    p.add_argument("--min-events", type=_positive_int, default=3, metavar="N",
                   help="noise guard: nor one with fewer than N waits on the side that grew (default 3)")
    _add_causes_option(p)

    p = sub.add_parser("recommend", help="fixes for what the recording shows, with evidence, command, risk, verify",
                       description="Each finding with its evidence from the recording, the exact command, its risk, "
                                   "and how to verify it. Numbered: `stallscope apply FILE N` carries out a run-time "
                                   "one. The most waiting first (each says what it is aimed at); findings that cannot "
                                   "help on this machine are listed last, saying why.")
    p.add_argument("file", metavar="FILE")
    _add_command_only(p)
    _add_causes_option(p)

    p = sub.add_parser("apply", help="carry out (or undo) a run-time recommendation",
                       description="Shows what recommendation N of FILE would run and asks; applies a run-time one "
                                   "(CPU affinity, nice, a sysctl or sysfs value) only after checking the target is "
                                   "the same task the recording saw (thread id, start time, name), never to a "
                                   "kernel thread, and writes an undo file first. A value is written only to a "
                                   "scheduler knob or slab cache tunable found on the running kernel by its name, "
                                   "never to a path read from FILE (a recording is untrusted input). Boot-time and "
                                   "code changes are printed, never applied. `apply --undo` reverts the last change.")
    p.add_argument("file", metavar="FILE", nargs="?")
    p.add_argument("number", metavar="N", nargs="?", type=_positive_int)
    p.add_argument("--yes", action="store_true", help="do not ask")
    p.add_argument("--undo", action="store_true", help="revert the last change stallscope applied")
    _add_causes_option(p)

    p = sub.add_parser("locks", help="lock_stat-like table of kernel and user-space lock contention in a recording",
                       description="Locks by contention: name, type, contentions, wait min/max/avg/total "
                                   "(perf's, contention_begin to _end) split by the waiter's state while it "
                                   "lasted (on a CPU, blocked, runnable: woken and waiting for a CPU, not for "
                                   "the lock), and the top contention points of each lock. A lock inside a slab "
                                   "object is named by the struct field holding it, lock_stat's class (one row "
                                   "for a field's locks, with the heaviest, a directory's i_rwsem by its path). "
                                   "Kernel locks come from lock:contention_begin/end; user-space locks (type "
                                   "futex) are futex words of one process, named by the variable holding them "
                                   "when its executable or library has a symbol for it, with the functions that "
                                   "called pthread_mutex_lock & co as contention points.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--type", choices=("all", "kernel", "futex"), default="all", dest="lock_type",
                   help="kernel locks, user-space locks (futex), or both (default)")
    p.add_argument("--sort", choices=("total", "max", "count", "avg", "blocked", "lock"), default="total",
                   help="total wait (default), longest, contentions, average, blocked time, or the time waiting for "
                        "the lock itself (total less the run-queue wait after the wakeup)")
    p.add_argument("-n", "--rows", type=_positive_int, default=20,
                   help="locks to show of each type, kernel then futex (default 20)")
    p.add_argument("--callers", type=_positive_int, default=3, help="contention points per lock (default 3)")
    _add_command_only(p)

    p = sub.add_parser("slab", help="slabinfo-like table of SLUB caches in a recording (--probes +slab)",
                       description="SLUB caches by activity, as recorded with `--probes +slab`: cache, aliases, "
                                   "objects in use when first seen, allocations, frees, the slow-path signal "
                                   "with its method, order, objects per slab, and the waits on the cache's "
                                   "kmem_cache_node list_lock when the locks group ran too. The slow-path "
                                   "signal is an estimate (CPU-slab switches: a CPU's allocations moving to "
                                   "another slab) unless the kernel allows exact counts; caches served by "
                                   "sheaves have none.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-n", "--rows", type=_positive_int, default=25, help="caches to show (default 25)")
    _add_command_only(p)

    p = sub.add_parser("profile", help="top on-CPU functions in a recording (the oncpu group's samples)",
                       description="Functions by on-CPU samples, as perf report --no-children (self: where "
                                   "samples landed) or --children (inclusive: on the stack), kernel and user. "
                                   "The header gives the sampling, the threads' sampled on-CPU time, and the "
                                   "shares of samples spinning on locks and in SLUB's slow path.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("-n", "--rows", type=_positive_int, default=25, help="functions to show (default 25)")
    p.add_argument("--by", choices=("self", "inclusive"), default="self", help="sort by (default: self)")
    p.add_argument("--pid", type=_pid, default=None, metavar="PID",
                   help="only this process (tgid) or thread")
    _add_command_only(p)

    p = sub.add_parser("doctor", help="what this kernel and these privileges allow",
                       description="Kernel, BTF, privileges, attach mechanisms and each probe's state. "
                                   "Exit 0 when the scheduler probes can run.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _bind_probe_specs(argv: list[str]) -> list[str]:
    """`--probes -locks` as the user writes it: argparse would take `-locks` for an option."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--":
            return out + argv[i:]
        if argv[i] == "--probes" and i + 1 < len(argv) and argv[i + 1][:1] in "+-" and argv[i + 1] != "--":
            out.append(f"--probes={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def run() -> None:
    """The `stallscope` command (its console script, `python -m stallscope`): main(), and a reading command
    leaves without freeing what it read (stallscope/exiting.py)."""
    code = main(leave_early=True)
    if exiting.leaving_early():
        exiting.leave(code)
    raise SystemExit(code)


def main(argv: list[str] | None = None, leave_early: bool = False) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from stallscope.priority import at_group_nice, at_nice, live_nice_asked

    nice = live_nice_asked(argv)
    if nice is None:
        return _main(argv, leave_early)
    # a live view at its own priority at once, its threads too (they inherit it), and its terminal session's
    # scheduling group raised (where the kernel groups tasks by session, the group's nice is what counts
    # among other sessions' work), both put back when it ends
    with at_nice(nice), at_group_nice(nice):
        return _main(argv, leave_early)


def _main(argv: list[str], leave_early: bool) -> int:
    from stallscope.priority import enter_realtime, realtime_asked

    early = realtime_asked(argv)
    if early is not None:  # at once (docs/recording.md): where real-time tasks hold the CPUs, every step waits
        enter_realtime(early)  # the session says so if it could not
    parser = build_parser()
    args = parser.parse_args(_bind_probe_specs(argv))
    if getattr(args, "realtime", None) != early:
        from stallscope.priority import caller_policy, set_own_policy

        set_own_policy(*caller_policy())
        if getattr(args, "realtime", None) is not None:
            enter_realtime(args.realtime)
    if not args.command:
        parser.print_help()
        return EXIT_ERROR
    try:
        if getattr(args, "causes", None):
            from stallscope.analyzer.causes import CauseTable, use_table

            use_table(CauseTable.load(args.causes))
        if args.command in READERS:
            _batch_gc()
            if leave_early:
                exiting.keep_until_exit()
        return COMMANDS[args.command](args)
    except StallscopeError as exc:
        print(f"stallscope: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("stallscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. `| head`): not an error worth a traceback
        sys.stderr.close()
        return 0
    except Exception as exc:  # noqa: BLE001 - a bug: one line, its traceback kept in a file (crash.py)
        from stallscope import crash

        print(crash.report(exc, argv), file=sys.stderr)
        return crash.EXIT_INTERNAL


# the commands that read a recording once, build its model and print: millions of records live until
# the end, and almost none form cycles
READERS = frozenset({"apply", "causes", "diff", "recommend", "report", "export", "locks", "slab", "profile"})


def _batch_gc() -> None:
    """No cycle collection: with the default thresholds the collector walked the whole heap of a
    10-minute recording's records again and again (40% of `report`'s time), and even at rare
    thresholds its young-generation passes over each new record took 12% (3.5 s of 30); the records
    form no cycles (a whole report of it leaves 364 objects in cycles), and a reading command ends when
    it has printed. Peak memory is the same."""
    import gc

    gc.disable()


def cmd_record(args) -> int:
    from stallscope.analyzer.redact import Redactor
    from stallscope.analyzer.store import RecordingWriter
    from stallscope.session import Session, say
    from stallscope.writer import WriterThread

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    options = _session_options(args, command=command, duration_s=args.duration)
    target = outputs.create_recording(args.output, force=args.force)  # before the probes: a bad path costs nothing
    redactor = Redactor() if args.redact else None
    session = Session(options)
    state: dict = {}

    def stop(exc: StallscopeError) -> None:
        """A write failed (a full disk, the file size limit): say so now, detach the probes, keep what
        is written; a command runs on to its end."""
        state["error"] = exc
        say(f"error: {exc}")
        session.stop("the recording file could not be written")

    def on_start(meta):
        try:
            # written in a thread of its own: a write that waits does not stretch the intervals
            state["writer"] = WriterThread(RecordingWriter(args.output, redactor.meta(meta) if redactor else meta,
                                                           target))
        except StallscopeError as exc:
            stop(exc)
            return
        say(f"recording to {args.output}" + (f" while running {command[0]}" if command else "")
            + ("" if command or args.duration else "; Ctrl-C to stop"))

    def on_interval(iv):
        writer = state.get("writer")
        _count_losses(state, iv)
        if writer is None or state.get("error"):
            return
        try:
            writer.append(redactor.interval(iv) if redactor else iv)
        except StallscopeError as exc:
            stop(exc)

    try:
        result = session.run(on_start, on_interval)
    except BaseException:
        if "writer" in state:
            _close_recording(state["writer"], say)
        elif not state.get("error"):
            target.discard()  # the session failed before the recording began: leave nothing behind
        raise
    writer = state.get("writer")
    if writer is None:
        return EXIT_ERROR
    try:
        writer.update_meta(redactor.meta(result.meta) if redactor else result.meta)
    except StallscopeError as exc:
        if not state.get("error"):
            state["error"] = exc
            say(f"error: {exc}")
    closed = _close_recording(writer, say)
    _say_losses(state, result.meta.options)
    if state.get("error") or not closed:
        return EXIT_ERROR
    say(f"{writer.intervals} intervals ({result.ended_by or 'stopped'}) written to {args.output}")
    if result.exit_status is not None:
        return result.exit_status if result.exit_status >= 0 else 128 - result.exit_status
    return 0


def _close_recording(writer, say) -> bool:
    """Fold and close; False (said) when the file keeps a -wal it must be copied with."""
    try:
        writer.close()
    except StallscopeError as exc:
        say(f"error: {exc}")
        return False
    return True


def _count_losses(state: dict, iv) -> None:
    """What the probes lost so far, summed over the intervals (said when the recording ends)."""
    health, programs = state.setdefault("health", {}), state.setdefault("programs", {})
    for k, v in iv.health.items():
        health[k] = health.get(k, 0) + v
    for p in iv.programs:
        programs[p.name] = (0, 0, programs.get(p.name, (0, 0, 0))[2] + p.recursion_misses)


def _say_losses(state: dict, options: dict) -> None:
    from stallscope.analyzer.data_loss import data_losses
    from stallscope.session import say

    for loss in data_losses(state.get("health", {}), state.get("programs", {}), options):
        say(loss.line())


def _write_data_loss(model, out) -> None:
    """What the probes lost in this recording, after a command's table: never silent."""
    from stallscope.analyzer.data_loss import data_loss_lines

    for line in data_loss_lines(model):
        out.write(line + "\n")


def _warn_data_loss(model, where: str = "") -> None:
    """The same lines on stderr, for a command whose stdout is a document (JSON, folded stacks)."""
    from stallscope.analyzer.data_loss import data_loss_lines

    for line in data_loss_lines(model, where):
        print(f"stallscope: warning: {line}", file=sys.stderr)


def _command_scope(model, path: str):
    cmd = model.meta.options.get("command")
    if not cmd:
        raise StallscopeError(f"{path} was not recorded with a command", "drop --command-only")
    return model.descendants(cmd["pid"])


def cmd_export(args) -> int:
    from stallscope.analyzer.export import to_folded, to_folded_oncpu, to_json
    from stallscope.analyzer.load import load_model

    _check_output(args)
    model = load_model(args.file)
    scope = _command_scope(model, args.file) if args.command_only else None
    _warn_data_loss(model)
    if args.format == "json":
        text = to_json(model, scope)
    elif args.what == "oncpu":
        _require_oncpu(model, args.file)
        text = to_folded_oncpu(model, scope)
    else:
        text = to_folded(model, scope)
    _write_output(text, args.output, args.force)
    return 0


def cmd_locks(args) -> int:
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.locks import lock_stats

    model = load_model(args.file)
    groups = {"all": ("locks", "futex"), "kernel": ("locks",), "futex": ("futex",)}[args.lock_type]
    probes = [(g, model.meta.probes.get(g)) for g in groups]
    if all(p is not None and not p.enabled for _, p in probes):
        g, probe = probes[0]
        raise StallscopeError(f"{args.file} has no {'futex' if g == 'futex' else 'lock'} data: {probe.reason}",
                              f"record with --probes +{g}")
    # kernel locks first, then user-space locks, each up to N: a busy process's futexes do not push
    # the kernel's locks off the table
    kinds = ("kernel", "futex") if args.lock_type == "all" else (args.lock_type,)
    scope = _command_scope(model, args.file) if args.command_only else None
    stats = {kind: lock_stats(model, args.sort, tasks=scope, kind=kind) for kind in kinds}
    # futex waits that are no lock (a poll ended by its timeout, a condition variable's or semaphore's
    # event, a join) are listed apart, after the locks
    rows = [s for kind in kinds for s in [s for s in stats[kind] if s.is_lock][: args.rows]]
    polls = [s for kind in kinds for s in stats[kind] if not s.is_lock][: args.rows]
    from stallscope.tui.tables import write_locks

    write_locks(sys.stdout, model, rows, polls, args.callers, args.lock_type)
    _write_data_loss(model, sys.stdout)
    return 0


def _require_oncpu(model, path: str) -> None:
    probe = model.meta.probes.get("oncpu")
    if probe is None or not probe.enabled:
        reason = probe.reason if probe is not None else "recorded before on-CPU sampling existed"
        raise StallscopeError(f"{path} has no on-CPU samples: {reason}", "record with --probes +oncpu")


def cmd_profile(args) -> int:
    from stallscope.analyzer.load import load_model

    model = load_model(args.file)
    _require_oncpu(model, args.file)
    from stallscope.tui.tables import write_profile

    tasks_in = _command_scope(model, args.file) if args.command_only else None
    write_profile(sys.stdout, model, args.by, tasks_in, args.pid, args.rows)
    _write_data_loss(model, sys.stdout)
    return 0


def cmd_causes(args) -> int:
    from stallscope.tui.causes import causes_text
    from stallscope.analyzer.load import load_model

    model = load_model(args.file)
    scope = _command_scope(model, args.file) if args.command_only else None
    sys.stdout.write(causes_text(model, by=args.by, include_idle=args.all, unknown=args.unknown,
                                 rows=args.rows, sort=args.sort, tasks=scope))
    _write_data_loss(model, sys.stdout)
    return 0


def cmd_diff(args) -> int:
    from stallscope.analyzer.diff import NoiseGuard, diff, differential_folded
    from stallscope.analyzer.load import load_model
    from stallscope.tui.diff import diff_json, diff_text

    fmt = args.format or ("html" if (args.output or "").lower().endswith(".html") else "text")
    _check_output(args)
    if fmt == "html":
        return _diff_html(args)
    base, new = load_model(args.base), load_model(args.new)
    scopes = (_command_scope(base, args.base), _command_scope(new, args.new)) if args.command_only else (None, None)
    if fmt != "text":  # the text has the lines; a document keeps its stdout clean
        _warn_data_loss(base, "base")
        _warn_data_loss(new, "new")
    if fmt == "folded":
        text = differential_folded(base, new, scopes)
    else:
        guard = NoiseGuard(args.min_delta * 1e9, args.min_relative / 100.0, args.min_events)
        changes = diff(base, new, guard, include_idle=args.all, scopes=scopes)
        text = (diff_json(base, new, changes, guard, (args.base, args.new)) if fmt == "json"
                else diff_text(base, new, changes, args.rows, (args.base, args.new)))
    _write_output(text, args.output, args.force)
    return 0


def _diff_html(args) -> int:
    from stallscope.analyzer.diff import NoiseGuard
    from stallscope.analyzer.load import load_model
    from stallscope.reports import build_diff, render

    if not args.output:
        raise StallscopeError("an HTML diff report needs a file to write", "add -o diff.html")
    scopes = (None, None)
    if args.command_only:
        scopes = (_command_scope(load_model(args.base), args.base), _command_scope(load_model(args.new), args.new))
    guard = NoiseGuard(args.min_delta * 1e9, args.min_relative / 100.0, args.min_events)
    with Progress() as progress:  # a status line where stderr is a terminal: a diff of long recordings takes a while
        data = build_diff(args.base, args.new, guard, include_idle=args.all, scopes=scopes, redacted=args.redact,
                          say=progress.say)
        progress.say("writing the page")
        text = render(data)
    _write_output(text, args.output, args.force)
    return 0


def cmd_report(args) -> int:
    from stallscope.reports import build, render

    _check_output(args)
    with Progress() as progress:  # a status line where stderr is a terminal: a long recording takes a while
        data = build(args.file, redacted=args.redact, say=progress.say)
        progress.say("writing the page")
        text = render(data)
    _write_output(text, args.output, args.force)
    return 0


def _check_output(args) -> None:
    """`-o`'s refusals (it exists, no such directory, ...) before the work, not after it."""
    if args.output is not None:
        outputs.check_text(args.output, args.force)


def _write_output(text: str, path: str | None, force: bool) -> None:
    if path is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    outputs.write_text(path, text, force)


def cmd_recommend(args) -> int:
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.recommend import recommend
    from stallscope.tui.recommend import recommendations_text

    model = load_model(args.file)
    scope = _command_scope(model, args.file) if args.command_only else None
    sys.stdout.write(recommendations_text(recommend(model, tasks=scope)))
    _write_data_loss(model, sys.stdout)
    return 0


def cmd_apply(args) -> int:
    from stallscope import apply as applier

    if args.undo:
        entry = applier.undo()
        print(f"stallscope: restored {escaped(entry['action']['type'])} of {_action_target(entry['action'])} "
              f"to {escaped(entry['before'])}")
        return 0
    if not args.file or not args.number:
        raise StallscopeError("apply needs a recording and a recommendation number",
                              "see `stallscope recommend FILE`, then `stallscope apply FILE N`")
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.recommend import BY_HAND, RECOMMENDED, recommend
    from stallscope.tui.recommend import recommendation_text

    recs = recommend(load_model(args.file))
    if args.number > len(recs):
        raise StallscopeError(f"{args.file} has {len(recs)} recommendation(s), not {args.number}",
                              "see `stallscope recommend FILE`")
    r = recs[args.number - 1]
    sys.stdout.write(recommendation_text(args.number, r))
    if not r.runtime or not r.action:
        what = ("a command stallscope does not run for you (a cgroup's limit may be deliberate)"
                if r.kind in BY_HAND and r.command else "a boot-time or code change")
        print(f"stallscope: not applied: this is {what}; run it yourself if you agree")
        return 0
    if r.status != RECOMMENDED:
        print(f"stallscope: not applied: {escaped(r.status)}")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise StallscopeError("not applied: no terminal to ask", "add --yes to apply without asking")
        if input("apply it? [y/N] ").strip().lower() not in ("y", "yes"):
            print("stallscope: not applied")
            return 0
    if r.action.get("affects"):
        print(f"stallscope: this write affects the cache named {escaped(', '.join(r.action['affects']))}")
    entry = applier.apply(r.action)
    print(f"stallscope: applied; was {escaped(entry['before'])}; `stallscope apply --undo` reverts it")
    return 0


def _action_target(action: dict) -> str:
    from stallscope.analyzer.untrusted import printable

    return printable(f"{action.get('comm')}[{action['tid']}]" if "tid" in action else action.get("path", "?"))


def cmd_slab(args) -> int:
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.slab import slab_rows

    model = load_model(args.file)
    probe = model.meta.probes.get("slab")
    if probe is None or not probe.enabled:
        why = probe.reason if probe is not None else "recorded before the slab probe existed"
        raise StallscopeError(f"{args.file} has no slab data: {why}", "record with --probes +slab")
    scope = _command_scope(model, args.file) if args.command_only else None
    rows = slab_rows(model, scope)
    from stallscope.tui.tables import write_slab

    write_slab(sys.stdout, model, probe, rows, args.rows)
    _write_data_loss(model, sys.stdout)
    return 0


def cmd_doctor(args) -> int:
    from stallscope.doctor import run_doctor

    return run_doctor(as_json=args.json)


def cmd_top(args) -> int:
    if args.replay:
        return _top_replay(args)
    from dataclasses import replace

    from stallscope.machine import own_start_monotonic

    plain = args.plain or not sys.stdout.isatty()
    options = _session_options(args, command=[], duration_s=None, max_intervals=args.iterations)
    # a live view's first interval ends an interval after the command started (the interpreter's start and
    # the imports before the session took 0.2-0.3 s), not after the session did
    options = replace(options, started_at=own_start_monotonic())
    # at stallscope's own priority (main() took it at once from the command line; this is the parser's value), the
    # screen's thread as the session's (they inherit it): it shares the interpreter's lock with the session's, and
    # one left at the caller's priority on a busy machine would hold the session up while it waits for a CPU (with
    # --realtime all runs at SCHED_FIFO already: main())
    with _at_nice(options.nice):
        return _top_plain(args, options) if plain else _top_live(args, options)


def _top_live(args, options) -> int:
    from stallscope.sources import LiveSource
    from stallscope.tui.leaving import Leaving

    writer = None
    if args.output:
        from stallscope.analyzer.store import RecordingWriter
        from stallscope.writer import WriterThread

        target = outputs.create_recording(args.output, force=args.force)  # before the probes, as record does
        writer = lambda meta: WriterThread(RecordingWriter(args.output, meta, target))  # noqa: E731
    # the screen's code first (0.15 s of imports), then the session, whose probes load while the screen draws its
    # first frame: the two threads share the interpreter's lock, and the imports had taken up to a second beside the
    # session's own set-up under load. Most of the probes' loading is the kernel's (the verifier), which leaves the
    # lock free. The screen is up 0.3-0.35 s after the imports began, quiet or under hackbench with 5,000 threads,
    # where it came 0.8-0.9 s after them held back until the probes' attach; the first data come as soon
    # (benchmarks/RESULTS-tui.md). The view reads what the session queued meanwhile
    from stallscope import apply as applier
    from stallscope.tui.app import TopApp

    source = LiveSource(options, writer_factory=writer)
    source.start()
    app = None
    # SIGTERM and SIGHUP (a closed terminal) quit as `q` does; the probes are detached even if the screen
    # cannot close (tui/leaving.py)
    leaving = Leaving(source, lambda: app.ask_leave() if app is not None else None)
    leaving.install()
    try:
        app = TopApp(source, applier=applier)
        if leaving.signum is not None:  # it came while the screen was made
            app.ask_leave()
        app.run()
    finally:
        source.stop()
        source.join(timeout=15)
        leaving.uninstall()
    if app is not None and app.crashed is not None:  # the screen's own fault, the terminal restored: said as
        raise app.crashed  # any other (main)
    if source.failure is not None:
        raise source.failure
    if source.error:
        raise StallscopeError(source.error)
    if args.output and source.result is not None:
        from stallscope.session import say

        # where the terminal is gone (SIGHUP from a closed tmux pane: EIO), say() loses the line, not the recording
        say(f"{source.result.intervals} intervals written to {args.output}")
    return 0


def _at_nice(nice: int | None):
    from contextlib import nullcontext

    from stallscope.priority import at_nice

    return nullcontext() if nice is None else at_nice(nice)


def _top_plain(args, options) -> int:
    from dataclasses import replace

    from stallscope.session import Session
    from stallscope.tui.text import LiveText

    view = LiveText(rows=args.rows, out=sys.stdout, hide_tgid=os.getpid())
    # a live view: its first data an interval after starting (as the live source's)
    Session(replace(options, first_interval_end_s=options.interval_s)).run(view.start, view.update)
    return 0


def _top_replay(args) -> int:
    from stallscope import apply as applier
    from stallscope.sources import RecordingSource

    plain = args.plain or not sys.stdout.isatty()
    source = RecordingSource(args.replay, background=not plain)  # the screen does not wait for a long file
    if plain:
        from stallscope.tui.text import snapshot_text

        sys.stdout.write(snapshot_text(source.timeline.whole(), rows=args.rows))
        return 0
    from stallscope.tui.app import TopApp
    from stallscope.tui.leaving import Leaving

    app = TopApp(source, applier=applier)
    leaving = Leaving(source, app.ask_leave)
    leaving.install()
    try:
        app.run()
    finally:
        leaving.uninstall()
    if app.crashed is not None:  # the screen's own fault, the terminal restored: said as any other (main)
        raise app.crashed
    if source.failure is not None:  # the reading's (the view said it, and waited for `q`)
        raise source.failure
    return 0


def _session_options(args, command, duration_s, max_intervals=None):
    from stallscope.session import SessionOptions

    return SessionOptions(interval_s=args.interval, duration_s=duration_s, pid=args.pid, command=command,
                          min_stack_ns=int(args.min_stack_wait * 1e9), user_stacks=not args.no_user_stacks,
                          stack_walks_per_s=max(args.stack_rate, 0), stack_scale_ns=int(args.stack_scale * 1e9),
                          user_walks_per_s=max(args.user_stack_rate, 0), probes=args.probes, sample_hz=args.sample_hz,
                          max_intervals=max_intervals, overhead_budget_pct=args.overhead_budget,
                          degrade=args.degrade, nice=args.nice, max_tasks=args.max_tasks,
                          stack_map_entries=args.stack_map_entries, realtime=args.realtime)


COMMANDS = {"apply": cmd_apply, "causes": cmd_causes, "diff": cmd_diff, "recommend": cmd_recommend, "report": cmd_report,
            "record": cmd_record, "export": cmd_export, "locks": cmd_locks, "slab": cmd_slab, "profile": cmd_profile,
            "doctor": cmd_doctor, "top": cmd_top}

if __name__ == "__main__":
    sys.exit(main())
