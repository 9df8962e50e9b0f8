"""Open a recording and build its model (the whole recording or a window of intervals)."""

from __future__ import annotations

import sys
from dataclasses import replace

from stallscope.analyzer.model import Model
from stallscope.analyzer.store import Recording
from stallscope.analyzer.untrusted import escaped


def load_model(path: str, first: int = 0, last: int | None = None, warn=None) -> Model:
    """The model of a recording. Rows the reader found damaged are left out and counted in
    `Model.damaged_rows`; `warn` (default: one line on stderr) is told, so no command reads a damaged
    recording silently."""
    rec = Recording(path)
    try:
        model = Model.from_intervals(rec.meta, rec.intervals(first, last), rec.tasks(), rec.stacks(),
                                     slab_caches=rec.slab_caches(), functions=rec.functions())
    finally:
        rec.close()
    if rec.damaged:
        model = replace(model, damaged_rows=dict(rec.damaged))
        (warn or _warn_on_stderr)(damaged_text(path, model.damaged_rows))
    return model


def damaged_text(path: str, damaged: dict[str, int]) -> str:
    counts = ", ".join(f"{table} {n}" for table, n in sorted(damaged.items()))
    return (f"warning: {escaped(path)} is damaged: {sum(damaged.values())} rows left out ({counts}); "
            "the rest is read")


def _warn_on_stderr(text: str) -> None:
    print(f"stallscope: {text}", file=sys.stderr, flush=True)
