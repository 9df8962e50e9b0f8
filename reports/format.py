"""The report's number formats, registered in one place as Jinja filters. The page's script formats
a window's numbers with the same rules (static/report.js `fmt`), so a number reads the same whether
the server or the page wrote it."""

from __future__ import annotations

import datetime

from stallscope.analyzer.units import fmt_bytes, fmt_ns


def ns(value) -> str:
    """Nanoseconds with their unit: 950ns, 12.3us, 4.56ms, 1.23s; '-' for none."""
    return "-" if value is None else fmt_ns(value)


def ns_per_s(value) -> str:
    """A wait per second of recording: 12.3ms/s."""
    return "-" if value is None else fmt_ns(value) + "/s"


def count(value) -> str:
    """A count with thousands separators: 260,177."""
    return "-" if value is None else f"{round(value):,}"


def rate(value) -> str:
    """Events per second: 12,345/s (three significant digits below 100)."""
    if value is None:
        return "-"
    return f"{value:,.0f}/s" if value >= 100 else f"{value:.3g}/s"


def pct(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}%"


def size(value) -> str:
    return "-" if value is None else fmt_bytes(value)


def seconds(value) -> str:
    """A duration in seconds, for the recording's window: 9.1 s, 10 min 3 s."""
    if value is None:
        return "-"
    if value < 10:
        return f"{value:.2f} s"
    if value < 120:
        return f"{value:.1f} s"
    m, s = divmod(round(value), 60)
    return f"{m} min {s} s" if m < 120 else f"{m // 60} h {m % 60} min"


def wall(value) -> str:
    """A Unix time as UTC, to the second: a report read elsewhere keeps the recording's clock."""
    if not value:
        return "-"
    return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def signed_ns_per_s(value) -> str:
    if value is None:
        return "-"
    return ("+" if value >= 0 else "-") + fmt_ns(abs(value)) + "/s"


def relative(value) -> str:
    """A relative change: +12%, -3%; 'new' when there was nothing to compare with."""
    return "new" if value is None else f"{value:+.0f}%"


FILTERS = {"ns": ns, "ns_per_s": ns_per_s, "count": count, "rate": rate, "pct": pct, "bytes": size,
           "seconds": seconds, "wall": wall, "signed_ns_per_s": signed_ns_per_s, "relative": relative}
