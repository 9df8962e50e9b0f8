"""What the page's script reads: the charts' per-interval series, each table row's parts per span of
intervals (what a selected window sums), and the flame graphs' trees. It reaches the page only as JSON."""

from __future__ import annotations

from stallscope.analyzer.blockers import percentiles
from stallscope.analyzer.causes import CPU, IDLE
from stallscope.analyzer.sample import TaskId
from stallscope.analyzer.series import Series, _seriesfold
from stallscope.reports.flametree import build_tree

CHART_CAUSES = 6  # causes drawn one by one in the waiting chart; the rest summed
# a window's tables are made of parts of at most this many spans of consecutive intervals (the charts keep
# every interval): a long recording's page stays small, and a window snaps to whole spans
MAX_SPANS = 120


def chart_value(v: float, digits: int = 4) -> float:
    """A chart value to `digits` significant digits: plenty for a line, and a smaller page."""
    if not v:
        return 0
    return float(f"{v:.{digits}g}")


def _sparse(parts: dict[int, list]) -> dict:
    """A row's per-interval parts as {"i": [intervals, in order], "v": [[values], ...]}."""
    idx = sorted(parts)
    return {"i": idx, "v": [[round(v, 3) if isinstance(v, float) else v for v in parts[i]] for i in idx]}


def script_series(s: Series, tables: dict) -> dict:
    secs = [d / 1e9 for d in s.duration_ns]
    start = [round(x / 1e9, 3) for x in s.start_ns]

    def per_s(values) -> list[float]:
        return [chart_value(v / d) if d else 0 for v, d in zip(values, secs)]

    def ratio(values) -> list[float]:  # ns per ns: seconds per second, tasks on average
        return [chart_value(v / dn) if dn else 0 for v, dn in zip(values, s.duration_ns)]

    blockers = tables["blockers"]["rows"]
    shown = [b["cause"] for b in blockers if b["class"] != IDLE][:CHART_CAUSES]
    cause_lines = []
    for name in shown:
        cs = s.causes.get(name)
        cause_lines.append({"name": name, "class": next(b["class"] for b in blockers if b["cause"] == name),
                            "values": ratio([cs.ns.get(i, 0) if cs else 0 for i in range(s.intervals)])})
    rest_blocked = [sum(c.ns.get(i, 0) for n, c in s.causes.items() if n not in shown and c.cls != IDLE)
                    for i in range(s.intervals)]
    idle = [sum(c.ns.get(i, 0) for c in s.causes.values() if c.cls == IDLE) for i in range(s.intervals)]
    if any(rest_blocked):
        cause_lines.append({"name": "other causes", "class": "blocker", "values": ratio(rest_blocked)})
    cause_lines.append({"name": "idle (not waiting)", "class": IDLE, "values": ratio(idle)})
    runq_p99 = []
    for h in s.runq_hist:
        p = percentiles({k: v for k, v in h.items()}, 0, (0.99,))
        runq_p99.append(p.get("p99_ns", 0) / 1e6)
    charts = {
        "t": start,
        "cs_per_s": per_s(s.switches),
        "runnable": ratio([r + q for r, q in zip(s.run_ns, s.runq_ns)]),
        "waiting": ratio(s.runq_ns),
        "runq_p99_ms": runq_p99,
        "migrations_per_s": per_s(s.migrations),
        "lock_wait": ratio(s.lock_wait_ns),
        "causes": cause_lines,
        # each CPU's busy share summed (/proc/stat): null where an interval did not keep it
        "cpus_busy": [None if b is None else chart_value(b) for b in s.cpus_busy],
        "throttled": ratio(s.throttled_ns),
        "throttled_per_s": per_s(s.throttled_periods),
    }
    return {"start_s": start, "duration_s": [round(x, 6) for x in secs], "charts": charts,
            "window": _window_parts(s, tables)}


def _spans(parts: dict[int, list], k: int, how: str = "sum") -> dict[int, list]:
    """Per-interval parts summed (or, `how` "max", maximised) over spans of `k` intervals: in C where
    analyzer/seriesfold.c is built (a page's 200 threads, 100 processes and their causes, over 600 intervals: 0.3 s
    in Python), else py_spans."""
    if k == 1:
        return parts
    if _seriesfold is not None:
        return _seriesfold.spans(parts, k, how == "max")
    return py_spans(parts, k, how)


def py_spans(parts: dict[int, list], k: int, how: str = "sum") -> dict[int, list]:
    """_spans in Python, for k > 1."""
    out: dict[int, list] = {}
    for i, values in parts.items():
        e = out.get(i // k)
        if e is None:
            out[i // k] = list(values)
        else:
            for j, v in enumerate(values):
                e[j] = max(e[j], v) if how == "max" else e[j] + v
    return out


def _window_parts(s: Series, tables: dict) -> dict:
    """Each table row's parts per span of intervals, aligned with the rows the page shows (data-i)."""
    n = s.intervals
    k = -(-n // MAX_SPANS)  # ceil
    nspans = -(-n // k)

    def sparse(parts: dict[int, list]) -> dict:
        return _sparse(_spans(parts, k))

    causes = []
    for b in tables["blockers"]["rows"]:
        cs = s.causes.get(b["cause"])
        if cs is None:
            causes.append(None)
            continue
        ns = _spans({i: [v] for i, v in cs.ns.items()}, k)
        count = _spans({i: [v] for i, v in cs.count.items()}, k)
        longest = _spans({i: [v] for i, v in cs.max_ns.items()}, k, "max")
        hist: dict[int, dict[int, float]] = {}
        for i, h in cs.hist.items():
            acc = hist.setdefault(i // k, {})
            for slot, c in h.items():
                acc[slot] = acc.get(slot, 0) + c
        idx = sorted(set(ns) | set(count) | set(hist))
        causes.append({"i": idx, "ns": [round(ns.get(j, [0])[0]) for j in idx],
                       "n": [round(count.get(j, [0])[0], 3) for j in idx],
                       "max": [longest.get(j, [0])[0] for j in idx],
                       "h": [[x for slot, c in sorted(hist.get(j, {}).items()) if c for x in (slot, round(c, 3))]
                             for j in idx]})
    threads = [sparse(s.tasks.get(TaskId(r["pid"], r["start_time_ns"]), {})) for r in tables["threads"]["rows"]]
    cause_names = sorted(s.causes)
    cause_index = {c: i for i, c in enumerate(cause_names)}
    processes = []
    for r in tables["processes"]["rows"]:
        pc = s.process_causes.get(r["tgid"], {})
        processes.append({str(cause_index[c]): _sparse({j: [round(v[0])] for j, v in
                                                        _spans({i: [ns] for i, ns in parts.items()}, k).items()})
                          for c, parts in sorted(pc.items())})
    locks = [sparse(s.locks.get((r["name"], r["lock_type"]), {})) for r in tables["locks"]["rows"]]
    slab = [sparse(s.slab.get(int(r["addr"], 16), {})) for r in tables["slab"]["rows"]]
    functions = [sparse(s.functions.get((r["function"], r["kind"]), {})) for r in tables["functions"]["rows"]]
    runq_spans: dict[int, dict[int, int]] = {}
    for i, h in enumerate(s.runq_hist):
        acc = runq_spans.setdefault(i // k, {})
        for slot, c in h.items():
            acc[slot] = acc.get(slot, 0) + c
    runq = {"i": [j for j in range(nspans) if runq_spans.get(j)],
            "h": [[x for slot, c in sorted(runq_spans[j].items()) for x in (slot, c)]
                  for j in range(nspans) if runq_spans.get(j)]}
    matrix_spans: dict[int, dict[tuple[int, int], int]] = {}
    for i, m in enumerate(s.matrix):
        acc = matrix_spans.setdefault(i // k, {})
        for src, dst, c in m:
            acc[(src, dst)] = acc.get((src, dst), 0) + c
    matrix = {"i": [j for j in range(nspans) if matrix_spans.get(j)],
              "m": [[x for (src, dst), c in sorted(matrix_spans[j].items()) for x in (src, dst, c)]
                    for j in range(nspans) if matrix_spans.get(j)]}
    samples = [sum(s.oncpu_samples[j * k:(j + 1) * k]) for j in range(nspans)]
    # per CPU row: [busy ns, total ns, run-queue wait ns, run-queue waits]
    cpus = [sparse(s.cpus.get(r["cpu"], {})) for r in tables["cpus"]]
    return {"span": k, "spans": nspans, "causes": causes, "cause_names": cause_names,
            "cause_classes": [s.causes[c].cls for c in cause_names], "threads": threads, "processes": processes,
            "locks": locks, "slab": slab, "functions": functions, "runq": runq, "matrix": matrix, "cpus": cpus,
            "oncpu_samples": samples}


def offcpu_tree(stacks) -> dict:
    classes = {st.cause: st.cls for st in stacks}
    return build_tree(((st.frames, {st.cls: st.value_ns}, st.cause) for st in stacks), ("blocker", CPU, IDLE),
                      classes)


def oncpu_tree(stacks) -> dict:
    return build_tree(((st.frames, {"oncpu": st.value_ns}, None) for st in stacks), ("oncpu",))
