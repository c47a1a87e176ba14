"""Delegation, ahead of time: partitioners, backends' ``preprocess``, ``to_backend``.

Write a backend in two halves (see ``pyexecutorch.backends.example``):

- here, a :class:`BackendDetails` subclass whose ``preprocess`` turns a
  partition (an edge ``ExportedProgram``) into bytes, and a
  :class:`Partitioner` that tags the nodes it takes;
- at run time, a ``pyexecutorch.runtime.BackendInterface`` registered under
  the same name, which ``init``\\ s those bytes and ``execute``\\ s them.
"""

from pyexecutorch.exir.backend._partition import DelegationError
from pyexecutorch.exir.backend.backend_api import (
    MethodProgramsPartitionerSpec,
    to_backend,
    to_backend_multimethod,
)
from pyexecutorch.exir.backend.backend_details import (
    BackendDetails,
    PreprocessError,
    PreprocessResult,
    UnknownBackendError,
    get_backend_details,
    register_backend_details,
    registered_backend_details,
)
from pyexecutorch.exir.backend.compile_spec_schema import CompileSpec, compile_specs_dict
from pyexecutorch.exir.backend.lowered_module import (
    LoweredBackendModule,
    executorch_call_delegate,
    get_lowered_backend_modules,
    get_lowered_submodules,
    is_lowered_module,
)
from pyexecutorch.exir.backend.named_data_store import (
    DataEntry,
    NamedDataStore,
    NamedDataStoreOutput,
)
from pyexecutorch.exir.backend.partitioner import (
    DELEGATION_TAG,
    DelegationSpec,
    Partitioner,
    PartitionResult,
)
from pyexecutorch.exir.backend.preserve import (
    PreservedOpError,
    check_preserved_ops_consumed,
    prepare_preserved_ops,
)
from pyexecutorch.exir.backend.utils import (
    DelegationInfo,
    get_delegation_info,
    tag_constant_data,
    tag_supported_nodes,
)

__all__ = [
    "DELEGATION_TAG",
    "BackendDetails",
    "CompileSpec",
    "DataEntry",
    "DelegationError",
    "DelegationInfo",
    "DelegationSpec",
    "LoweredBackendModule",
    "MethodProgramsPartitionerSpec",
    "NamedDataStore",
    "NamedDataStoreOutput",
    "PartitionResult",
    "Partitioner",
    "PreprocessError",
    "PreprocessResult",
    "PreservedOpError",
    "UnknownBackendError",
    "check_preserved_ops_consumed",
    "compile_specs_dict",
    "executorch_call_delegate",
    "get_backend_details",
    "get_delegation_info",
    "get_lowered_backend_modules",
    "get_lowered_submodules",
    "is_lowered_module",
    "prepare_preserved_ops",
    "register_backend_details",
    "registered_backend_details",
    "tag_constant_data",
    "tag_supported_nodes",
    "to_backend",
    "to_backend_multimethod",
]
