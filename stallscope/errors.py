"""The one exception type for errors the user can act on."""


class StallscopeError(Exception):
    """An error the user can act on: a one-line message and a hint."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message
