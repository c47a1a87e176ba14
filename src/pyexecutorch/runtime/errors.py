"""Exceptions of the runtime: each names the method, value or instruction at fault."""

from pyexecutorch.schema.errors import FormatError


class InvalidProgramError(FormatError):
    """The program is internally inconsistent (an index, size or offset out of range)."""


class DataFileError(FormatError):
    """A ``.ptd`` data file passed beside a program is malformed (the program itself is
    fine); the message names the file's position among the data files."""


class MissingOperatorError(RuntimeError):
    """A method calls operators that have no registered kernel."""

    def __init__(self, method: str, missing: list[str]) -> None:
        self.method = method
        self.missing = missing
        super().__init__(
            f"method '{method}' calls {len(missing)} operator(s) with no kernel: {', '.join(missing)}"
        )


class MissingBackendError(RuntimeError):
    """A method delegates to a backend that is not registered or not available."""


class InputMismatchError(ValueError, RuntimeError):
    """An input's dtype or rank is not the one the method declares. A ``ValueError``,
    and a ``RuntimeError`` as the official bindings raise for it."""


class ExecutionError(RuntimeError):
    """A kernel or delegate failed while a method ran."""


class DeviceMemoryError(RuntimeError):
    """A method plans a memory buffer on a device (``non_const_buffer_device``) this
    runtime has no allocator for: it runs on the host only. A ``RuntimeError`` with the
    official runtime's message, which refuses such a method when it loads it."""
