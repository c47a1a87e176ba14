"""Errors raised for malformed program and data files."""


class FormatError(ValueError):
    """A truncated, corrupt or foreign file; the message says what and where."""
