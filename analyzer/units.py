"""Formatting of quantities with their units, one place for every view."""


def log2_bounds(slot: int) -> tuple[int, int]:
    """The lengths a log2 histogram's slot holds, [lower, upper) ns: slot s is [2^s, 2^(s+1)) (bpf/sched.h
    log2_slot), slot 0 every length below 2 ns. The one statement of it for the views, tables and percentiles."""
    return (1 << slot if slot > 0 else 0, 2 << slot)


def fmt_ns(ns: float) -> str:
    """Nanoseconds as a short human figure: 950ns, 12.3us, 4.56ms, 1.23s; from 1,000 s on, whole seconds with
    thousands separators (227,646s: the waiting of a long recording's hundreds of tasks)."""
    ns = float(ns)
    # each unit while its figure, as rounded, stays under 1000: 999,999,000 ns is 1.00s, not 1000.00ms
    if round(ns) < 1e3:
        return f"{ns:.0f}ns"
    if round(ns / 1e3, 1) < 1e3:
        return f"{ns / 1e3:.1f}us"
    if round(ns / 1e6, 2) < 1e3:
        return f"{ns / 1e6:.2f}ms"
    if round(ns / 1e9, 2) < 1e3:
        return f"{ns / 1e9:.2f}s"
    return f"{ns / 1e9:,.0f}s"


def fmt_longest(ns: float, ongoing: bool) -> str:
    """A longest wait: "+" after one still going (it will be longer)."""
    return fmt_ns(ns) + ("+" if ongoing else "")


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: 512B, 12.0K, 3.4M, 1.2G."""
    n = float(n)
    for unit in ("B", "K", "M", "G"):
        if n < 1024 or unit == "G":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}T"
