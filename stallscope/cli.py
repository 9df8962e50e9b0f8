"""The stallscope command line: the one place that wires collector, store and views."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from stallscope import __version__
from stallscope.errors import StallscopeError

EXIT_ERROR = 2

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s|m|h)?\s*$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(text: str) -> float:
    """`30`, `30s`, `1.5m`, `250ms` -> seconds."""
    m = _DURATION.match(text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30s, 2m, 500ms)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return v


def _add_trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--interval", type=duration, default=1.0, metavar="INTERVAL",
                   help="drain the in-kernel aggregates every INTERVAL (default 1s)")
    p.add_argument("-p", "--pid", type=_positive_int, default=0, metavar="PID",
                   help="trace only this process (its threads); default: the whole system")
    p.add_argument("--min-stack-wait", type=duration, default=0.0, metavar="TIME",
                   help="walk stacks only for waits at least this long (default 0: every wait); "
                        "totals stay exact, shorter waits are grouped as '(stack not collected)'")
    p.add_argument("--no-user-stacks", action="store_true", help="do not collect user stacks")
    p.add_argument("--probes", type=_probe_spec, default=DEFAULT_PROBES, metavar="SPEC",
                   help="optional probe groups on top of the scheduler probes: +GROUP adds, -GROUP removes "
                        f"(groups: {', '.join(OPTIONAL_PROBES)}; default: {', '.join(sorted(DEFAULT_PROBES))})")
    p.add_argument("--stack-rate", type=int, default=1000, metavar="N",
                   help="walk at most N stacks per second per CPU (default 1000; 0: no limit). A walk costs "
                        "microseconds; waits beyond the budget keep exact totals and are attributed by the "
                        "task's sampled stacks, marked as estimated")


def _groups():
    from stallscope.bpf.groups import GROUPS, default_groups

    return tuple(GROUPS), default_groups()


OPTIONAL_PROBES, DEFAULT_PROBES = _groups()


def _probe_spec(text: str) -> frozenset[str]:
    """`-locks`, `+locks`, `+a,-b`: changes to the default set."""
    groups = set(DEFAULT_PROBES)
    for part in filter(None, (p.strip() for p in text.split(","))):
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
    _add_trace_options(p)
    p.add_argument("-n", "--iterations", type=_positive_int, default=None, metavar="N",
                   help="stop after N refreshes (default: until Ctrl-C)")
    p.add_argument("--rows", type=_positive_int, default=15, help="rows per table (default 15)")

    p = sub.add_parser("record", help="record to a file, system-wide or one command",
                       description="Record the scheduler probes to FILE. With `-- CMD ARGS`, the command "
                                   "starts once the probes are attached, keeps its stdin/stdout/stderr, and "
                                   "the recording ends when it exits (stallscope then exits with its status).")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the recording file to write")
    p.add_argument("-d", "--duration", type=duration, default=None, metavar="SECONDS",
                   help="stop after this long (e.g. 30, 30s, 2m); default: until Ctrl-C or the command exits")
    _add_trace_options(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="run and record this command")

    p = sub.add_parser("export", help="data for scripts and other tools",
                       description="Export a recording as the versioned JSON document (docs/export.md) or as "
                                   "folded off-CPU stacks for FlameGraph and speedscope.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", choices=("json", "folded"), default="json")
    p.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    p.add_argument("--command-only", action="store_true",
                   help="only the tasks of the recorded command (recordings made with `-- CMD`)")

    p = sub.add_parser("locks", help="lock_stat-like table of kernel and user-space lock contention in a recording",
                       description="Locks by contention: name, type, contentions, wait min/max/avg/total "
                                   "with spin and sleep parts, and the top contention points of each lock. "
                                   "Kernel locks come from lock:contention_begin/end; user-space locks (type "
                                   "futex) are futex words of one process, named by the variable holding them "
                                   "when its executable or library has a symbol for it, with the functions that "
                                   "called pthread_mutex_lock & co as contention points.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--type", choices=("all", "kernel", "futex"), default="all", dest="lock_type",
                   help="kernel locks, user-space locks (futex), or both (default)")
    p.add_argument("--sort", choices=("total", "max", "count", "avg"), default="total", help="default: total wait")
    p.add_argument("-n", "--rows", type=_positive_int, default=20,
                   help="locks to show of each type, kernel then futex (default 20)")
    p.add_argument("--callers", type=_positive_int, default=3, help="contention points per lock (default 3)")

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
    if state.get("error"):
        return EXIT_ERROR
    if result.exit_status is not None:
        return result.exit_status if result.exit_status >= 0 else 128 - result.exit_status
    return 0


def cmd_export(args) -> int:
    from stallscope.analyzer.export import to_folded, to_json
    from stallscope.analyzer.load import load_model

    model = load_model(args.file)
    scope = None
    if args.command_only:
        cmd = model.meta.options.get("command")
        if not cmd:
            raise StallscopeError(f"{args.file} was not recorded with a command", "drop --command-only")
        scope = model.descendants(cmd["pid"])
    text = to_json(model, scope) if args.format == "json" else to_folded(model, scope)
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


def cmd_locks(args) -> int:
    from stallscope.analyzer.load import load_model
    from stallscope.analyzer.locks import lock_stats
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
    rows = [s for kind in kinds for s in lock_stats(model, args.sort, kind=kind)[: args.rows]]
    out = sys.stdout
    out.write(f"{'LOCK':<40} {'TYPE':<13} {'CONTENTIONS':>11} {'TOTAL':>10} {'MAX':>9} {'AVG':>9} {'MIN':>9} "
              f"{'SPIN':>10} {'SLEEP':>10}\n")
    for s in rows:
        out.write(f"{printable(s.name)[:40]:<40} {s.type:<13} {s.contentions:>11} {fmt_ns(s.wait_total_ns):>10} "
                  f"{fmt_ns(s.wait_max_ns):>9} {fmt_ns(s.wait_avg_ns):>9} {fmt_ns(s.wait_min_ns):>9} "
                  f"{fmt_ns(s.spin_ns):>10} {fmt_ns(s.sleep_ns):>10}\n")
        for c in s.callers[: args.callers]:
            out.write(f"    {printable(c.point)[:60]:<60} {c.count:>8} {fmt_ns(c.total_ns):>10}\n")
        if s.owner:
            out.write(f"    owner when contended: {printable(s.owner)}\n")
    if not rows:
        out.write({"all": "no lock contention recorded\n", "kernel": "no kernel lock contention recorded\n",
                   "futex": "no futex waits recorded\n"}[args.lock_type])
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
                          stack_walks_per_s=max(args.stack_rate, 0), probes=args.probes,
                          max_intervals=max_intervals)


COMMANDS = {"record": cmd_record, "export": cmd_export, "locks": cmd_locks, "doctor": cmd_doctor, "top": cmd_top}

if __name__ == "__main__":
    sys.exit(main())
