"""stallscope.reports: self-contained HTML post-mortems and diff reports.

`build(recording)` (or `build_diff(base, new)`) gathers the page data and `render(data)` writes the
page; the command puts it on disk by the rules every output follows (stallscope/outputs.py). The data
side never imports the templates, so any source of the export document, the series and the stacks can
feed a page."""

from stallscope.reports.build import assemble, build
from stallscope.reports.diff import build_diff
from stallscope.reports.render import render

__all__ = ["assemble", "build", "build_diff", "render"]
