"""The one exception type for errors the user can act on."""

from stallscope.analyzer.untrusted import escaped


class StallscopeError(Exception):
    """An error the user can act on: a one-line message and a hint.

    Messages quote what the user typed and what files and processes held (paths, names, values read
    from a recording): printed, any character that is not printable is a backslash escape, so an error
    is always one line and never writes a terminal escape sequence."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return escaped(f"{self.message} ({self.hint})" if self.hint else self.message)
