"""Names that come from other users' processes (comm, paths, symbols) made safe to print.

Plain text only: HTML and Textual markup have their own escaping, applied where they render.
"""


def printable(text: str, replacement: str = "?") -> str:
    """Control characters (a terminal escape, a newline that would split a record) replaced."""
    return "".join(ch if ch.isprintable() else replacement for ch in text)
