"""The runtime: load ``.pte`` programs and run their methods with numpy, without torch.

>>> from pyexecutorch.runtime import Runtime
>>> program = Runtime.get().load_program("model.pte")     # doctest: +SKIP
>>> outputs = program.load_method("forward").execute([x])  # doctest: +SKIP
"""

from pyexecutorch.runtime.backend import BackendInitContext, BackendInterface, register_backend
from pyexecutorch.runtime.data_loader import (
    BufferDataLoader,
    DataLoader,
    FileDataLoader,
    MmapDataLoader,
)
from pyexecutorch.runtime.errors import (
    DataFileError,
    ExecutionError,
    InvalidProgramError,
    MissingBackendError,
    MissingOperatorError,
)
from pyexecutorch.runtime.meta import MethodMeta, Tag, TensorInfo
from pyexecutorch.runtime.method_plan import InstructionPlan, MethodPlan
from pyexecutorch.runtime.program import (
    BackendRegistry,
    Method,
    OperatorRegistry,
    Program,
    Runtime,
    Verification,
)
from pyexecutorch.runtime.tiers import JitUnavailableError

__all__ = [
    "BackendInitContext",
    "BackendInterface",
    "BackendRegistry",
    "BufferDataLoader",
    "DataFileError",
    "DataLoader",
    "ExecutionError",
    "FileDataLoader",
    "InstructionPlan",
    "InvalidProgramError",
    "JitUnavailableError",
    "Method",
    "MethodMeta",
    "MethodPlan",
    "MissingBackendError",
    "MissingOperatorError",
    "MmapDataLoader",
    "OperatorRegistry",
    "Program",
    "Runtime",
    "Tag",
    "TensorInfo",
    "Verification",
    "register_backend",
]
