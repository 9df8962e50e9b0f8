"""Page data -> one self-contained HTML file: the templates (Jinja2, autoescaping on), the stylesheets
and scripts inlined, and a Content-Security-Policy that lets the browser run nothing else.

The policy is `default-src 'none'`: no network request of any kind, no image, no font, no frame;
scripts and styles run only when their SHA-256 is listed, and the hashes are computed here from the
exact text inlined. Data reaches the script only as JSON in a `<script type="application/json">`
element (`|tojson` escapes `<`, `>` and `&`, so no name can close it), which the script reads with
`textContent` and `JSON.parse`. A violation shows in the browser's console.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache
from importlib import resources

from jinja2 import BytecodeCache, Environment, PackageLoader, StrictUndefined

from stallscope import disk_cache
from stallscope.reports.format import FILTERS

# inlined in this order; vendored libraries first (reports/static/vendor/*/LICENSE)
SCRIPTS = ("vendor/uplot/uPlot.iife.min.js", "flamegraph.js", "report.js")
STYLES = ("vendor/uplot/uPlot.min.css", "report.css")
TEMPLATES = {"report": "report.html.j2", "diff": "diff.html.j2"}


class CompiledTemplates(BytecodeCache):
    """The templates compiled to Python code once, not at each page (0.12-0.16 s of a report's time), kept in
    stallscope's cache directory (stallscope/disk_cache.py: a file another user could have written is not read).
    Jinja2 keys each by the template's name and file and keeps its source's checksum in it: a template changed
    since is compiled again."""

    def load_bytecode(self, bucket) -> None:
        data = disk_cache.read_bytes(f"template-{bucket.key}")
        if data:
            bucket.bytecode_from_string(data)  # one of another source or version is reset, and compiled anew

    def dump_bytecode(self, bucket) -> None:
        disk_cache.write_bytes(f"template-{bucket.key}", bucket.bytecode_to_string())


@lru_cache(maxsize=1)
def environment() -> Environment:
    # autoescape=True, not select_autoescape(): that one leaves `*.html.j2` unescaped
    env = Environment(loader=PackageLoader("stallscope.reports", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                      bytecode_cache=CompiledTemplates())
    env.filters.update(FILTERS)
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":")}
    return env


@lru_cache(maxsize=None)
def asset(name: str) -> str:
    return resources.files("stallscope.reports").joinpath("static", name).read_text(encoding="utf-8")


def csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _inline(text: str, tag: str) -> str:
    """An asset as the body of an element: it must not end the element early."""
    if f"</{tag}" in text.lower():
        raise ValueError(f"an inlined asset contains </{tag}")
    return text


def render(data: dict) -> str:
    """The page of `data` (reports.build or reports.build_diff), as one HTML document."""
    kind = data["page"]["kind"]
    scripts = [_inline(asset(n), "script") for n in SCRIPTS]
    styles = [_inline(asset(n), "style") for n in STYLES]
    policy = "; ".join((
        "default-src 'none'",
        "script-src " + " ".join(csp_hash(s) for s in scripts),
        "style-src " + " ".join(csp_hash(s) for s in styles),
        "base-uri 'none'",
        "form-action 'none'",
    ))
    template = environment().get_template(TEMPLATES[kind])
    return template.render(page=data["page"], script_data=data["script"], redacted=data.get("redacted", False),
                           csp=policy, scripts=scripts, styles=styles)
