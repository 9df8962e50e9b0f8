"""What the Textual views put in a cell: literal text (never markup), numbers with units, sparklines
and heat-map shades. Names come from other users' processes: a thread named `[bold]x` shows those
characters, and a control, escape or bidi character shows as its escape (\\x1b, \\u202e), not as an effect.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from stallscope.analyzer.units import fmt_longest, fmt_ns

SPARK = " ▁▂▃▄▅▆▇█"
# heat map shades, light to dark (a 256-colour ramp that reads on dark and light themes)
HEAT = ("#1c2a3a", "#1f4e79", "#2e75b6", "#5b9bd5", "#f4b183", "#ed7d31", "#c00000")


def visible(text: str) -> str:
    """Every character that is not printable shown as its escape; the rest as it is."""
    if text.isprintable():  # nearly every name: one look in C, not one a character
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)


def lit(text: str, style: str | Style = "") -> Text:
    """A literal cell: Text is never parsed as markup."""
    return Text(visible(text), style=style, no_wrap=True, overflow="ellipsis")


PLACE_TAIL = 6  # cells of a lock's place kept at least, at its end, when the lock's name is kept whole
ADDRESS_TAIL = 4  # an address's last digits kept, where the middle of a name with an address and a place goes


NOTE_WORD = " est"  # the word a blocker's note (`~27% est`) ends with, left out first where room is short


def _head(text: Text, n: int) -> Text:
    """Its first n characters, as a cell still (never wrapped)."""
    out = text[:n]
    out.no_wrap = text.no_wrap
    return out


def elide_middle(text: Text, width: int) -> Text:
    """A cell longer than `width` cells with its middle left out (`…`), not its end: a cause's, a lock's or a
    task's name says the most at its ends (the caller, the lock, the process id). Text whose characters are not
    one cell each is left to the table's own ellipsis. A short styled note at the end (a blocker's `~27% est`)
    gives way to the name: it loses its word (`~27%`), then goes, before the name loses a character; a name that
    does not fit alone keeps the note's short form, the name before it shortened. A lock's place in parentheses
    is shortened before its name."""
    plain = text.plain
    if width < 12 or text.cell_len <= width or text.cell_len != len(plain):
        return text
    end = len(plain)
    note = next((s for s in reversed(text.spans) if s.end == end and 0 < s.start and end - s.start <= width // 3),
                None)
    if note is not None and plain.endswith(NOTE_WORD):
        short = _head(text, end - len(NOTE_WORD))
        if note.start <= width < short.cell_len:  # the name fits alone, not beside the note's short form
            return _head(text, note.start)
        if short.cell_len <= width or note.start > width:
            return short if short.cell_len <= width else elide_middle(short, width)
    name_end = note.start if note is not None else end
    room = width - (end - name_end) - 1  # the name's cells, less the ellipsis
    head = room * 2 // 5
    # a lock named with its place, "&futex_hash_bucket->lock (in a kmalloc-cg-2k object)": the lock kept whole
    # where it fits beside the place's end, the place shortened
    place = plain.find(" (in ", 0, name_end)
    if 0 < place and place + 2 + PLACE_TAIL <= room:
        head = place + 2
    elif (at := _address_before_place(plain, name_end)) is not None:
        # a futex named by its address and its process, "futex 0x563a5ea1dd10 (sysbench[28441])": two of one
        # process differ in the address's last digits, two processes in their ids: those stay, with the word
        # before them, the process's name shortened too where the two do not fit beside it
        if room - at[0] >= name_end - at[1] + ADDRESS_TAIL:
            head = at[0]
        elif (pid := plain.rfind("[", at[1], name_end)) > 0:
            # futex 0x…b2c3d4 (stress…[22135]): the address's tail and the name's head share what is left
            left = room - at[0] - 3 - (name_end - pid)  # less the place's " (", its ellipsis and its id
            tail = min(at[1] - at[0], max(ADDRESS_TAIL, left // 2))
            if left - tail >= 3:
                return _cut(text, [(0, at[0]), (at[1] - tail, at[1] + 2 + left - tail), (pid, end)])
    return _cut(text, [(0, head), (name_end - (room - head), end)])


def _cut(text: Text, kept: list[tuple[int, int]]) -> Text:
    """These spans of `text` (in order), an ellipsis between each two: a cell (never wrapped)."""
    out = Text(style=text.style, justify=text.justify, no_wrap=True, overflow="ellipsis")
    for i, (a, b) in enumerate(kept):
        if i:
            out.append("…")
        out.append_text(text[a:b])
    return out


def _address_before_place(plain: str, end: int) -> tuple[int, int] | None:
    """Where the hex address of a name such as "futex 0x563a5ea1dd10 (sysbench[28441])" begins (after its "0x"),
    and where its place in parentheses begins; None for any other name."""
    if not plain.endswith(")", 0, end):
        return None
    paren = plain.rfind(" (", 0, end)
    word = plain.rfind(" ", 0, paren) + 1
    if paren <= 0 or not plain.startswith("0x", word, paren):
        return None
    digits = plain[word + 2:paren]
    if len(digits) <= ADDRESS_TAIL or not all(c in "0123456789abcdef" for c in digits):
        return None
    return word + 2, paren


def num(text: str, style: str = "") -> Text:
    return Text(text, style=style, justify="right", no_wrap=True)


def rate(ns_per_s: float) -> Text:
    """ns of waiting per second of the window, as a time per second."""
    return num(fmt_ns(ns_per_s) if ns_per_s else "-")


def dur(ns: float) -> Text:
    return num(fmt_ns(ns) if ns else "-")


def longest(ns: float, ongoing: bool) -> Text:
    """A longest wait; one still going, "+" after it, in bold (a task stuck now)."""
    if not ns:
        return num("-")
    return num(fmt_longest(ns, ongoing), style="bold" if ongoing else "")


def pct(value: float | None, digits: int = 1) -> Text:
    return num("-" if value is None else f"{value:.{digits}f}%")


def count(n: float, digits: int = 0) -> Text:
    """A count, grouped by thousands; from a million on, three figures and a unit (17.1M): the views' count
    columns are 8 wide, and a longer number would be cut, showing another number (17,116,1)."""
    if not n:
        return num("-")
    if abs(n) >= 1e6:
        return num(_figures(n))
    return num(f"{n:,.{digits}f}")


def _figures(n: float) -> str:
    for unit, scale in (("M", 1e6), ("G", 1e9), ("T", 1e12)):
        v = n / scale
        if abs(v) < 999.5:
            break
    text = f"{v:.2f}" if abs(v) < 9.995 else f"{v:.1f}" if abs(v) < 99.95 else f"{v:.0f}"
    return text + unit


def sparkline(values: list[float], width: int = 20) -> Text:
    """The last `width` values, each a block whose height is its share of the largest."""
    values = values[-width:]
    top = max(values, default=0)
    if top <= 0:
        return Text(" " * len(values), no_wrap=True)
    chars = "".join(SPARK[min(len(SPARK) - 1, int(round(v / top * (len(SPARK) - 1))))] if v > 0 else SPARK[0]
                    for v in values)
    return Text(chars, style="cyan", no_wrap=True)


def heat(value: int, top: int) -> Style:
    if value <= 0 or top <= 0:
        return Style(color="grey50")
    i = min(len(HEAT) - 1, int(value / top * (len(HEAT) - 1) + 0.999))
    return Style(bgcolor=HEAT[i], color="white")
