"""`stallscope diff` as text and as its JSON document."""

from __future__ import annotations

import json

from stallscope.analyzer.data_loss import data_loss_lines, model_losses
from stallscope.analyzer.diff import Change, NoiseGuard
from stallscope.analyzer.model import Model
from stallscope.analyzer.units import fmt_ns
from stallscope.analyzer.untrusted import printable

DIFF_VERSION = 1
WHAT_WIDTH, WHAT_WIDTH_MAX = 46, 72


def _rel(c: Change) -> str:
    return "new" if c.delta_pct is None else f"{c.delta_pct:+.0f}%"


def diff_text(base: Model, new: Model, changes: list[Change], rows: int, names: tuple[str, str]) -> str:
    # as wide as the names shown need (a futex's call site), within reason
    w = min(max([WHAT_WIDTH] + [len(printable(c.name)) for c in changes[:rows]]), WHAT_WIDTH_MAX)
    waits = [f"{c.base_count:,}->{c.new_count:,}" for c in changes[:rows]]
    ww = max([13] + [len(x) for x in waits])
    lines = [f"base {printable(names[0])}: {base.duration_s:.1f} s; new {printable(names[1])}: {new.duration_s:.1f} s; "
             "wait per second of each recording\n\n",
             f"{'KIND':<6} {'WHAT':<{w}} {'BASE/s':>10} {'NEW/s':>10} {'CHANGE/s':>10} {'REL':>7} {'WAITS':>{ww}}\n"]
    for c, n in zip(changes[:rows], waits):
        mark = "" if c.significant else " ~"
        sign = "+" if c.delta_ns_per_s >= 0 else "-"
        name = printable(c.name)
        name = name if len(name) <= w else name[:w - 1] + "\u2026"  # cut, and said to be
        lines.append(f"{c.kind:<6} {name:<{w}} {fmt_ns(c.base_ns_per_s):>10} {fmt_ns(c.new_ns_per_s):>10} "
                     f"{sign + fmt_ns(abs(c.delta_ns_per_s)):>10} {_rel(c):>7} {n:>{ww}}{mark}\n")
    if not any(c.significant for c in changes):
        lines.append("\nno change passed the noise guard\n")
    lines.append("\n~ : below the noise guard (too small, or too few waits): listed, not ranked first\n")
    for model, which in ((base, "base"), (new, "new")):
        lines.extend(line + "\n" for line in data_loss_lines(model, which))
    return "".join(lines)


def diff_json(base: Model, new: Model, changes: list[Change], guard: NoiseGuard, names: tuple[str, str]) -> str:
    return json.dumps(diff_doc(base, new, changes, guard, names), sort_keys=True, indent=1) + "\n"


def diff_doc(base: Model, new: Model, changes: list[Change], guard: NoiseGuard, names: tuple[str, str]) -> dict:
    """The diff's JSON document (`stallscope diff --format json`)."""
    def side(model: Model, name: str) -> dict:
        return {"file": name, "kernel": model.meta.kernel, "host": model.meta.host, "duration_s": round(model.duration_s, 6),
                "start_wall": model.meta.start_wall, "data_loss": [loss.as_dict() for loss in model_losses(model)]}

    doc = {
        "format": "stallscope-diff", "version": DIFF_VERSION,
        "base": side(base, names[0]), "new": side(new, names[1]),
        "noise_guard": {"min_delta_ns_per_s": guard.min_delta_ns_per_s, "min_relative_pct": 100 * guard.min_relative,
                        "min_events": guard.min_events},
        "changes": [{"kind": c.kind, "name": c.name, "base_ns_per_s": round(c.base_ns_per_s),
                     "new_ns_per_s": round(c.new_ns_per_s), "delta_ns_per_s": round(c.delta_ns_per_s),
                     "delta_pct": None if c.delta_pct is None else round(c.delta_pct, 3),
                     "base_count": c.base_count, "new_count": c.new_count, "significant": c.significant}
                    for c in changes],
    }
    return doc
