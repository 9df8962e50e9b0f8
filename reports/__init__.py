"""stallscope.reports: self-contained HTML post-mortems and diff reports.

`build(recording)` (or `build_diff(base, new)`) gathers the page data, `render(data)` writes the
page, `write_page(path, text)` puts it on disk. The data side never imports the templates, so any
source of the export document, the series and the stacks can feed a page."""

from stallscope.reports.build import assemble, build
from stallscope.reports.diff import build_diff
from stallscope.reports.output import write_page
from stallscope.reports.render import render

__all__ = ["assemble", "build", "build_diff", "render", "write_page"]
