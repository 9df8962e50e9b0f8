"""Names that come from other users' processes (comm, paths, symbols) and from recording files made
safe to print.

Plain text only: HTML and Textual markup have their own escaping, applied where they render.
"""


def printable(text: str, replacement: str = "?") -> str:
    """Control characters (a terminal escape, a newline that would split a record) replaced."""
    return "".join(ch if ch.isprintable() else replacement for ch in text)


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escaped(text: object) -> str:
    """`text` with every character that is not printable written as a backslash escape (`\\x1b`, `\\n`,
    `\\u2028`; a byte that was not UTF-8, kept as a surrogate by surrogateescape, as `\\xff`): a message
    keeps what the user typed or the file held, legibly, on one line, and sends no escape sequence to
    the terminal. For messages (stderr), where nothing is aligned in columns; tables use `printable`."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    if ch in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for an undecodable byte
        return f"\\x{code - 0xDC00:02x}"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
