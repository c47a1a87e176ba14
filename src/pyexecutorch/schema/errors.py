"""Errors raised for malformed program and data files."""


class FormatError(ValueError, RuntimeError):
    """A truncated, corrupt or foreign file; the message says what and where. Also a
    ``RuntimeError``: the official runtime raises that for bad files, so code written
    against it (``except RuntimeError``) keeps working."""
