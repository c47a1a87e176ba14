"""A lowered subgraph and the helpers that find them in a graph, under the official
``executorch.exir.lowered_backend_module`` path (implemented in
:mod:`pyexecutorch.exir.backend.lowered_module`)."""

from pyexecutorch.exir.backend.lowered_module import (
    LoweredBackendModule,
    get_lowered_backend_modules,
    get_lowered_submodules,
)

__all__ = ["LoweredBackendModule", "get_lowered_backend_modules", "get_lowered_submodules"]
