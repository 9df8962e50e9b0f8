"""The stallscope command line: the one place that wires collector, store and views."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from stallscope import __version__
from stallscope.errors import StallscopeError
from stallscope.bpf.tune import DEFAULT_SAMPLE_NS, DEFAULT_USER_WALKS_PER_S, DEFAULT_WALKS_PER_S
from stallscope.priority import DEFAULT_NICE

EXIT_ERROR = 2

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h)?\s*$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str) -> float:
    """`30`, `30s`, `1.5m`, `250ms` -> seconds."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 2m, 500ms)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _duration_or_zero(text: str) -> float:
    """A duration, or 0."""
    if text.strip() in ("0", "0s"):
        return 0.0
    return duration(text)


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
    p.add_argument("-i", "--interval", type=duration, default=1.0, metavar="INTERVAL",
                   help="drain the in-kernel aggregates every INTERVAL (default 1s)")
    p.add_argument("-p", "--pid", type=_positive_int, default=0, metavar="PID",
                   help="trace only this process (its threads); default: the whole system")
    p.add_argument("--min-stack-wait", type=duration, default=0.0, metavar="TIME",
                   help="walk stacks and record wakers only for waits at least this long (default 0: any "
                        "wait may be drawn); totals stay exact, shorter waits are named by what the task was "
                        "doing (its system call, file, kernel function) only")
    p.add_argument("--stack-scale", type=_duration_or_zero, default=DEFAULT_SAMPLE_NS / 1e9, metavar="TIME",
                   help=f"T: a wait of d gets a kernel stack (and its waker) with probability min(1, d/T), so "
                        f"the walks follow where the time goes, and each wait drawn stands for max(d, T) in the "
                        f"estimates, with their error stated (default {DEFAULT_SAMPLE_NS / 1e6:g}ms; 0: every "
                        "wait). The overhead budget raises it tenfold per step")
    p.add_argument("--user-stack-rate", type=int, default=DEFAULT_USER_WALKS_PER_S, metavar="N",
                   help=f"user stacks walked per second per CPU when a wait begins, before its length is known "
                        f"(default {DEFAULT_USER_WALKS_PER_S}; 0: no limit): their own budget, apart from the "
                        "kernel stacks drawn by length")
    p.add_argument("--no-user-stacks", action="store_true", help="do not collect user stacks")
    p.add_argument("--probes", type=_probe_spec, default=DEFAULT_PROBES, metavar="SPEC",
                   help="optional probe groups on top of the scheduler probes: +GROUP adds, -GROUP removes; "
                        "a first word none, default or all starts from that set (e.g. none,+slab) "
                        f"(groups: {', '.join(OPTIONAL_PROBES)}; default: {', '.join(sorted(DEFAULT_PROBES))})")
    p.add_argument("--sample-hz", type=_positive_int, default=99, metavar="N",
                   help="on-CPU sampling frequency per CPU for the oncpu group (default 99; at most the "
                        "kernel's perf_event_max_sample_rate). Each sample walks a kernel and a user stack")
    p.add_argument("--overhead-budget", type=_percent, default=1.0, metavar="PCT",
                   help="stallscope's own cost allowed, in %% of the machine's CPU (default 1): BPF run time, "
                        "an estimate of calling the programs, and the collector, measured every interval and "
                        "shown in top's status line and the recording (meta.overhead). Over it, stallscope "
                        "walks fewer stacks, only for longer waits, and samples less often, in steps sized to the "
                        "overshoot (one level per factor of 4 over), each step stated; per-task totals stay exact. "
                        "The first two intervals judge only the probes' cost, not the collector's start-up")
    p.add_argument("--no-degrade", dest="degrade", action="store_false",
                   help="measure and report the cost against the budget, but never lower the stack walks "
                        "or the sampling rate")
    if live:
        nice_help = (f"stallscope's own scheduling priority, -20..19 (default {DEFAULT_NICE}, as atop runs): "
                     "among hundreds of runnable tasks an ordinary process gets a sliver of a CPU and each "
                     "refresh would stretch to tens of seconds. What stallscope spends is measured and held to "
                     "--overhead-budget as far as its steps go")
    else:
        nice_help = ("stallscope's own scheduling priority, -20..19 (default: the caller's). At the caller's, "
                     "on a saturated machine the intervals stretch (the totals stay exact) rather than the "
                     f"drains taking CPU from the work being recorded; --nice {DEFAULT_NICE} keeps them at "
                     "INTERVAL. A command run with -- CMD keeps the caller's priority")
    p.add_argument("--nice", type=_nice, default=DEFAULT_NICE if live else None, metavar="N", help=nice_help)
    p.add_argument("--max-tasks", type=_map_size, default=None, metavar="N",
                   help="T, the tasks the per-task BPF maps are sized for (the final entries of exited tasks T, "
                        "off-CPU waits 2T, wakers 4T, lock, futex and on-CPU entries 2T each, slab counts 8T); "
                        "default: 4 x the threads alive at start, at least 32768, at most the kernel's task limit "
                        "(pid_max, threads-max). A full map loses data, counted and shown as `data loss:`")
    p.add_argument("--stack-map-entries", type=_map_size, default=None, metavar="N",
                   help="stacks each probe object's stack map holds (preallocated, ~570 bytes each); default "
                        "32768, less on a machine where four such maps would take over 1/64 of the RAM")
    p.add_argument("--stack-rate", type=int, default=DEFAULT_WALKS_PER_S, metavar="N",
                   help=f"a cap on the waits drawn for a stack walk: at most N per second per CPU in each of the "
                        f"scheduler, lock and futex probes (default {DEFAULT_WALKS_PER_S}; 0: no cap). A walk "
                        "costs microseconds (2 us on a quiet 2-CPU VM, 12-17 us under a busy scheduler); a wait "
                        "drawn past the cap keeps its exact time and what the task was doing, and the overhead "
                        "budget raises --stack-scale so that the cap rarely binds")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stallscope",
        description="What is making tasks wait, and what to change: off-CPU time, run-queue wait, "
                    "wakers, switches and migrations, traced with BPF.",
        epilog="See `stallscope COMMAND --help`. Exit status 2 means an error stallscope explained.")
    parser.add_argument("--version", action="version", version=f"stallscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("top", help="live ranking of what makes tasks wait",
                       description="Live ranking of blockers and waiting tasks, refreshed every interval.")
    _add_trace_options(p, live=True)
    p.add_argument("-n", "--iterations", type=_positive_int, default=None, metavar="N",
                   help="stop after N refreshes (default: until Ctrl-C)")
    p.add_argument("--rows", type=_positive_int, default=15, help="rows per table (default 15)")
    _add_causes_option(p)

    p = sub.add_parser("record", help="record to a file, system-wide or one command",
                       description="Record the scheduler probes to FILE. With `-- CMD ARGS`, the command "
                                   "starts once the probes are attached, keeps its stdin/stdout/stderr, and "
                                   "the recording ends when it exits (stallscope then exits with its status).")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the recording file to write")
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
    p.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    _add_command_only(p)
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
                   help="list the waits no rule matched, with their stacks, so the table can grow")
    p.add_argument("-n", "--rows", type=_positive_int, default=20, help="rows to show (default 20)")
    _add_command_only(p)
    _add_causes_option(p)

    p = sub.add_parser("diff", help="what got worse between two recordings (regression hunting)",
                       description="Causes, kernel locks and threads ranked by the change in wait per second of "
                                   "recording, absolute and relative. A change leads only past a noise guard "
                                   "(--min-delta per second, --min-relative of the base, --min-events waits); "
                                   "the rest follow, marked. --format folded writes a differential folded file "
                                   "(stack, base, new; ns per second) for a differential flame graph.")
    p.add_argument("base", metavar="BASE")
    p.add_argument("new", metavar="NEW")
    p.add_argument("--format", choices=("text", "json", "folded"), default="text")
    p.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    p.add_argument("-n", "--rows", type=_positive_int, default=20, help="changes to show in text (default 20)")
    p.add_argument("--all", action="store_true", help="include idle waits among the causes")
    p.add_argument("--command-only", action="store_true",
                   help="compare only the recorded commands' tasks (recordings made with `-- CMD`)")
    p.add_argument("--min-delta", type=duration, default=0.001, metavar="TIME",
                   help="noise guard: a change of less wait than this per second does not lead (default 1ms)")
    p.add_argument("--min-relative", type=float, default=10.0, metavar="PCT",
                   help="noise guard: nor one of less than PCT%% of the base (default 10)")
    p.add_argument("--min-events", type=_positive_int, default=3, metavar="N",
                   help="noise guard: nor one with fewer than N waits on the side that grew (default 3)")
    _add_causes_option(p)

    p = sub.add_parser("recommend", help="fixes for what the recording shows, with evidence, command, risk, verify",
                       description="Each finding with its evidence from the recording, the exact command, its risk, "
                                   "and how to verify it. Numbered: `stallscope apply FILE N` carries out a run-time "
                                   "one. Findings that cannot help on this machine are listed last, saying why.")
    p.add_argument("file", metavar="FILE")
    _add_command_only(p)
    _add_causes_option(p)

    p = sub.add_parser("apply", help="carry out (or undo) a run-time recommendation",
                       description="Shows what recommendation N of FILE would run and asks; applies a run-time one "
                                   "(CPU affinity, nice, a sysctl or sysfs value) only after checking the target is "
                                   "the same task the recording saw (thread id, start time, name), never to a "
                                   "kernel thread, and writes an undo file first. Boot-time and code changes are "
                                   "printed, never applied. `apply --undo` reverts the last change.")
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
    p.add_argument("--pid", type=_positive_int, default=None, metavar="PID",
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_bind_probe_specs(sys.argv[1:] if argv is None else argv))
    if not args.command:
        parser.print_help()
        return EXIT_ERROR
    try:
        if getattr(args, "causes", None):
            from stallscope.analyzer.causes import CauseTable, use_table

            use_table(CauseTable.load(args.causes))
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


def cmd_record(args) -> int:
    from stallscope.analyzer.store import RecordingWriter
    from stallscope.session import Session, say

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    options = _session_options(args, command=command, duration_s=args.duration)
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise StallscopeError(f"cannot write {args.output}: no directory {out_dir}", "create it first")
    state: dict = {}

    def on_start(meta):
        state["writer"] = RecordingWriter(args.output, meta)
        say(f"recording to {args.output}" + (f" while running {command[0]}" if command else "")
            + ("" if command or args.duration else "; Ctrl-C to stop"))

    def on_interval(iv):
        writer = state["writer"]
        _count_losses(state, iv)
        if state.get("error"):
            return
        try:
            writer.append(iv)
        except StallscopeError as exc:  # e.g. disk full: keep what is written, say so, keep the command
            state["error"] = exc
            say(f"error: {exc}")

    session = Session(options)
    try:
        result = session.run(on_start, on_interval)
    finally:
        writer = state.get("writer")
    if writer is None:
        return EXIT_ERROR
    if not state.get("error"):
        try:
            writer.update_meta(result.meta)
        except StallscopeError as exc:
            state["error"] = exc
    writer.close()
    say(f"{result.intervals} intervals ({result.ended_by or 'stopped'}) written to {args.output}")
    _say_losses(state, result.meta.options)
    if state.get("error"):
        return EXIT_ERROR
    if result.exit_status is not None:
        return result.exit_status if result.exit_status >= 0 else 128 - result.exit_status
    return 0


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
    if args.output:
        tmp = args.output + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, args.output)
        except OSError as exc:
            raise StallscopeError(f"cannot write {args.output}: {exc.strerror}", "check the path and free space") from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def _lock_row(out, s, callers: int) -> None:
    """One row of `locks`, with its heaviest call sites and instances."""
    from stallscope.analyzer.units import fmt_ns
    from stallscope.analyzer.untrusted import printable

    blocked, runnable = (fmt_ns(s.blocked_ns), fmt_ns(s.runnable_ns)) if s.split else (fmt_ns(s.sleep_ns), "-")
    out.write(f"{printable(s.name)[:52]:<52} {s.type_text:<13} {s.contentions:>11} {fmt_ns(s.wait_total_ns):>10} "
              f"{fmt_ns(s.wait_max_ns):>9} {fmt_ns(s.wait_avg_ns):>9} {fmt_ns(s.wait_min_ns):>9} "
              f"{fmt_ns(s.spin_ns):>9} {blocked:>9} {runnable:>9}\n")
    for c in s.callers[:callers]:
        out.write(f"    {printable(c.point)[:60]:<60} {c.count:>8} {fmt_ns(c.total_ns):>10}\n")
    if len(s.instances) > 1 or (s.instances and s.field and s.instances[0][1] not in s.name):
        out.write("    heaviest: " + ", ".join(f"{printable(where) or hex(addr)} {fmt_ns(ns)}"
                                          for addr, where, ns in s.instances) + "\n")
    if s.owner:
        out.write(f"    owner when contended: {printable(s.owner)}\n")


def cmd_locks(args) -> int:
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.locks import lock_stats
    from stallscope.analyzer.oncpu import lock_share_line
    from stallscope.analyzer.units import fmt_ns
    from stallscope.analyzer.untrusted import printable

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
    out = sys.stdout
    out.write(f"{'LOCK':<52} {'TYPE':<13} {'CONTENTIONS':>11} {'TOTAL':>10} {'MAX':>9} {'AVG':>9} {'MIN':>9} "
              f"{'ON-CPU':>9} {'BLOCKED':>9} {'RUNNABLE':>9}\n")
    for s in rows:
        _lock_row(out, s, args.callers)
    if not rows:
        out.write({"all": "no lock contention recorded\n", "kernel": "no kernel lock contention recorded\n",
                   "futex": "no futex waits recorded\n"}[args.lock_type])
    if polls:
        out.write("futex waits that are not for a lock (poll: ended by their own timeout; event: a condition "
                  "variable or a semaphore; join: a thread's exit):\n")
    for s in polls:
        _lock_row(out, s, args.callers)
    line = lock_share_line(model)
    if line:
        out.write(line + "\n")
    if rows:
        out.write("TOTAL is perf's (contention_begin to _end, which fires once the waiter has run again): ON-CPU spinning, "
                  "BLOCKED asleep, RUNNABLE woken and waiting for a CPU (not for the lock)\n")
    _write_data_loss(model, out)
    return 0


def _require_oncpu(model, path: str) -> None:
    probe = model.meta.probes.get("oncpu")
    if probe is None or not probe.enabled:
        reason = probe.reason if probe is not None else "recorded before on-CPU sampling existed"
        raise StallscopeError(f"{path} has no on-CPU samples: {reason}", "record with --probes +oncpu")


def cmd_profile(args) -> int:
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.oncpu import category_share, sampling_summary, task_oncpu, top_functions
    from stallscope.analyzer.units import fmt_ns
    from stallscope.analyzer.untrusted import printable

    model = load_model(args.file)
    _require_oncpu(model, args.file)
    out = sys.stdout
    summary = sampling_summary(model)
    busy = summary.samples - summary.idle_samples
    out.write(f"{summary.samples} samples at {summary.sample_hz} Hz per CPU (period {fmt_ns(summary.period_ns)}), "
              f"{summary.idle_samples} idle: CPUs {100 * busy / summary.samples if summary.samples else 0:.1f}% busy")
    out.write(f"; {summary.missed_samples} missed\n" if summary.missed_samples else "\n")
    out.write("  busy: " + ", ".join(f"CPU{c.cpu} {100 * (c.samples - c.idle_samples) / c.samples:.1f}%"
                                     for c in model.oncpu_cpus.values() if c.samples) + "\n")
    tasks_in = _command_scope(model, args.file) if args.command_only else None
    tasks = task_oncpu(model, tasks_in, pid=args.pid)
    selected = sum(t.samples for t in tasks)
    scope = (f"process/thread {args.pid}" if args.pid else "all threads") + (" of the command" if tasks_in else "")
    out.write(f"{selected} samples of {scope}")
    for cat, label in (("lock_spin", "lock spinning"), ("slab_slow_path", "SLUB slow path")):
        n, pct = category_share(model, cat, tasks_in, pid=args.pid)
        out.write(f"; {label} {pct:.1f}% ({n})")
    out.write("\n")
    for t in tasks[:5]:
        out.write(f"  {printable(t.comm)}[{t.task.pid}] {fmt_ns(t.oncpu_ns)} on CPU ({t.samples} samples)\n")
    out.write(f"\n{'SELF%':>7} {'SELF':>8} {'INCL%':>7} {'INCL':>8}  FUNCTION\n")
    for f in top_functions(model, args.by, tasks_in, pid=args.pid, limit=args.rows):
        suffix = "_[k]" if f.kind == "kernel" else ""
        out.write(f"{f.self_pct:>6.2f}% {f.self_samples:>8} {f.inclusive_pct:>6.2f}% {f.inclusive_samples:>8}  "
                  f"{printable(f.function)}{suffix}\n")
    if not selected:
        out.write("no on-CPU samples" + (f" of {args.pid}" if args.pid else "") + "\n")
    _write_data_loss(model, out)
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

    base, new = load_model(args.base), load_model(args.new)
    scopes = (_command_scope(base, args.base), _command_scope(new, args.new)) if args.command_only else (None, None)
    if args.format != "text":  # the text has the lines; a document keeps its stdout clean
        _warn_data_loss(base, "base")
        _warn_data_loss(new, "new")
    if args.format == "folded":
        text = differential_folded(base, new, scopes)
    else:
        guard = NoiseGuard(args.min_delta * 1e9, args.min_relative / 100.0, args.min_events)
        changes = diff(base, new, guard, include_idle=args.all, scopes=scopes)
        text = (diff_json(base, new, changes, guard, (args.base, args.new)) if args.format == "json"
                else diff_text(base, new, changes, args.rows, (args.base, args.new)))
    _write_output(text, args.output)
    return 0


def _write_output(text: str, path: str | None) -> None:
    if not path:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise StallscopeError(f"cannot write {path}: {exc.strerror}", "check the path and free space") from None


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
        print(f"stallscope: restored {entry['action']['type']} of {_action_target(entry['action'])} to {entry['before']}")
        return 0
    if not args.file or not args.number:
        raise StallscopeError("apply needs a recording and a recommendation number",
                              "see `stallscope recommend FILE`, then `stallscope apply FILE N`")
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.recommend import RECOMMENDED, recommend
    from stallscope.tui.recommend import recommendation_text

    recs = recommend(load_model(args.file))
    if args.number > len(recs):
        raise StallscopeError(f"{args.file} has {len(recs)} recommendation(s), not {args.number}",
                              "see `stallscope recommend FILE`")
    r = recs[args.number - 1]
    sys.stdout.write(recommendation_text(args.number, r))
    if not r.runtime or not r.action:
        print("stallscope: not applied: this is a boot-time or code change; run it yourself if you agree")
        return 0
    if r.status != RECOMMENDED:
        print(f"stallscope: not applied: {r.status}")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise StallscopeError("not applied: no terminal to ask", "add --yes to apply without asking")
        if input("apply it? [y/N] ").strip().lower() not in ("y", "yes"):
            print("stallscope: not applied")
            return 0
    if r.action.get("affects"):
        print(f"stallscope: this write affects the cache named {', '.join(r.action['affects'])}")
    entry = applier.apply(r.action)
    print(f"stallscope: applied; was {entry['before']}; `stallscope apply --undo` reverts it")
    return 0


def _action_target(action: dict) -> str:
    from stallscope.analyzer.untrusted import printable

    return printable(f"{action.get('comm')}[{action['tid']}]" if "tid" in action else action.get("path", "?"))


def cmd_slab(args) -> int:
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.slab import BLIND_SPOTS, METHOD_ESTIMATE, boot_summary, slab_rows
    from stallscope.analyzer.units import fmt_bytes, fmt_ns
    from stallscope.analyzer.untrusted import printable

    model = load_model(args.file)
    probe = model.meta.probes.get("slab")
    if probe is None or not probe.enabled:
        why = probe.reason if probe is not None else "recorded before the slab probe existed"
        raise StallscopeError(f"{args.file} has no slab data: {why}", "record with --probes +slab")
    scope = _command_scope(model, args.file) if args.command_only else None
    rows = slab_rows(model, scope)
    out = sys.stdout
    out.write(boot_summary(model) + "\n")
    out.write(f"{'CACHE':<24} {'ALIASES':<28} {'OBJECTS':>8} {'ALLOCS':>10} {'FREES':>10} {'BYTES':>9} "
              f"{'SLOW-PATH SIGNAL':>16} {'METHOD':<30} {'ORDER':>5} {'OBJ/SLAB':>8} {'LIST_LOCK':>14}\n")
    for r in rows[: args.rows]:
        aliases = ",".join(r.aliases)
        signal = "-" if r.slow_signal is None else f"{r.slow_signal} ({r.switch_pct or 0:.1f}%)"
        lock = f"{r.lock_contentions}/{fmt_ns(r.lock_wait_ns)}" if r.lock_contentions else "-"
        out.write(f"{printable(r.cache)[:24]:<24} {printable(aliases)[:28]:<28} "
                  f"{'-' if r.objects is None else r.objects:>8} {r.allocs:>10} {r.frees:>10} "
                  f"{fmt_bytes(r.bytes_alloc):>9} {signal:>16} {r.method[:30]:<30} "
                  f"{'-' if r.order is None else r.order:>5} {'-' if r.objs_per_slab is None else r.objs_per_slab:>8} "
                  f"{lock:>14}\n")
    if not rows:
        out.write("no slab allocations recorded\n")
    for note in probe.reason.split("; "):  # what this kernel did not allow (the slow path is explained below)
        if note and not note.startswith("slow path"):
            out.write(f"note: {printable(note)}\n")
    if any(r.method == METHOD_ESTIMATE for r in rows):
        out.write("SLOW-PATH SIGNAL: CPU-slab switches (% of the allocations judged), an estimate, not a fast-path "
                  "rate. Blind spots: " + "; ".join(BLIND_SPOTS) + ".\n")
    _write_data_loss(model, out)
    return 0


def cmd_doctor(args) -> int:
    from stallscope.doctor import run_doctor

    return run_doctor(as_json=args.json)


def cmd_top(args) -> int:
    from stallscope.session import Session
    from stallscope.tui.text import LiveText

    options = _session_options(args, command=[], duration_s=None, max_intervals=args.iterations)
    view = LiveText(rows=args.rows, out=sys.stdout, hide_tgid=os.getpid())
    Session(options).run(view.start, view.update)
    return 0


def _session_options(args, command, duration_s, max_intervals=None):
    from stallscope.session import SessionOptions

    return SessionOptions(interval_s=args.interval, duration_s=duration_s, pid=args.pid, command=command,
                          min_stack_ns=int(args.min_stack_wait * 1e9), user_stacks=not args.no_user_stacks,
                          stack_walks_per_s=max(args.stack_rate, 0), stack_scale_ns=int(args.stack_scale * 1e9),
                          user_walks_per_s=max(args.user_stack_rate, 0), probes=args.probes, sample_hz=args.sample_hz,
                          max_intervals=max_intervals, overhead_budget_pct=args.overhead_budget,
                          degrade=args.degrade, nice=args.nice, max_tasks=args.max_tasks,
                          stack_map_entries=args.stack_map_entries)


COMMANDS = {"apply": cmd_apply, "causes": cmd_causes, "diff": cmd_diff, "recommend": cmd_recommend,
            "record": cmd_record, "export": cmd_export, "locks": cmd_locks, "slab": cmd_slab, "profile": cmd_profile,
            "doctor": cmd_doctor, "top": cmd_top}

if __name__ == "__main__":
    sys.exit(main())
