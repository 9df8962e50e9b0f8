"""Open a recording and build its model (the whole recording or a window of intervals)."""

from __future__ import annotations

from stallscope.analyzer.model import Model
from stallscope.analyzer.store import Recording


def load_model(path: str, first: int = 0, last: int | None = None) -> Model:
    rec = Recording(path)
    try:
        return Model.from_intervals(rec.meta, rec.intervals(first, last), rec.tasks(), rec.stacks(),
                                    slab_caches=rec.slab_caches(), functions=rec.functions())
    finally:
        rec.close()
