"""The names of ``executorch.extension.pybindings.portable_lib``, over our runtime.

Switching from the official bindings is one import::

    from pyexecutorch.portable_lib import _load_for_executorch
    module = _load_for_executorch("model.pte")
    outputs = module.forward([x])

Differences from the official bindings:

- Tensor outputs are torch tensors when torch is already imported and
  ``ExecuTorchResult`` objects otherwise (the official bindings import torch
  when it is installed); ``EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT=torch|executorch``
  forces one, as does our ``PYEXECUTORCH_TENSOR_OUTPUT=torch|executorch|numpy``
  (``numpy``: plain numpy arrays). ``_tensor_output`` says which, ``_uses_aten``
  is False.
- ``clone_outputs=False`` returns views of the method's planned memory, valid
  until the method runs again.
- ETDump is not implemented yet: ``enable_etdump=True`` is accepted, and
  ``write_etdump_result_to_file`` then raises ``NotImplementedError``.
- ``_threadpool_get_thread_count``/``_unsafe_reset_threadpool`` read and set
  the threads of numpy's BLAS (through threadpoolctl).
- Log lines go to the ``logging`` logger ``pyexecutorch``.
"""

from pyexecutorch.portable_lib.api import (
    ExecuTorchMethod,
    ExecuTorchModule,
    ExecuTorchProgram,
    MethodMeta,
    TensorInfo,
    _create_profile_block,
    _dump_profile_results,
    _get_operator_names,
    _get_option,
    _get_registered_backend_names,
    _is_available,
    _load_bundled_program_from_buffer,
    _load_for_executorch,
    _load_for_executorch_from_buffer,
    _load_for_executorch_from_bundled_program,
    _load_for_executorch_from_data_loader,
    _load_program,
    _load_program_from_buffer,
    _reset_profile_results,
    _set_option,
    _threadpool_get_thread_count,
    _unsafe_reset_threadpool,
)
from pyexecutorch.portable_lib.result import ExecuTorchResult, tensor_output
from pyexecutorch.runtime import (
    BufferDataLoader,
    DataLoader,
    FileDataLoader,
    MmapDataLoader,
    Verification,
)

_uses_aten = False


def __getattr__(name: str):  # noqa: ANN202 - module attribute hook
    if name == "_tensor_output":  # read live: the environment may change
        return tensor_output()
    if name == "BundledModule":  # (devtools imported only when asked for: start-up time)
        from pyexecutorch.devtools.bundled_program.runtime import BundledModule  # noqa: PLC0415

        return BundledModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BufferDataLoader",
    "DataLoader",
    "FileDataLoader",
    "MmapDataLoader",
    "BundledModule",
    "ExecuTorchMethod",
    "ExecuTorchResult",
    "ExecuTorchModule",
    "ExecuTorchProgram",
    "MethodMeta",
    "TensorInfo",
    "Verification",
    "_create_profile_block",
    "_dump_profile_results",
    "_get_operator_names",
    "_get_option",
    "_get_registered_backend_names",
    "_is_available",
    "_load_bundled_program_from_buffer",
    "_load_for_executorch",
    "_load_for_executorch_from_buffer",
    "_load_for_executorch_from_data_loader",
    "_load_for_executorch_from_bundled_program",
    "_load_program",
    "_load_program_from_buffer",
    "_reset_profile_results",
    "_set_option",
    "_threadpool_get_thread_count",
    "_unsafe_reset_threadpool",
]
