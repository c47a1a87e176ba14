"""The ahead-of-time half of a backend: ``preprocess`` and the registry of backends.

A backend is a subclass of :class:`BackendDetails`; its class name is its id
(the name partitioners put in ``DelegationSpec`` and the runtime half
registers under)::

    class MyBackend(BackendDetails):
        @staticmethod
        def preprocess(edge_program, compile_specs):
            return PreprocessResult(processed_bytes=serialize(edge_program))

Defining the class registers it. ``register_backend_details`` registers one
under another id.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from torch.export import ExportedProgram

from pyexecutorch.exir.backend.compile_spec_schema import CompileSpec
from pyexecutorch.exir.error import ExportError


class UnknownBackendError(ExportError, NotImplementedError):
    """No ahead-of-time backend is registered under the requested id."""


class PreprocessError(ExportError, RuntimeError):
    """A backend's ``preprocess`` failed or returned something unusable (a
    ``RuntimeError``, as the official ``to_backend`` raises)."""


@dataclass
class PreprocessResult:
    """What ``preprocess`` returns.

    - ``processed_bytes``: the delegate's blob, handed to the runtime half's ``init``.
    - ``debug_handle_map``: the backend's own ids to the debug handles of the
      edge nodes they came from (for profiling tools).
    - ``data_store_output``: named data (``NamedDataStore.get_named_data_store_output()``)
      stored once in the program and shared by key between delegates.
    """

    processed_bytes: bytes = b""
    debug_handle_map: dict[Any, tuple[int, ...]] | None = None
    data_store_output: Any = None
    _delegate_info_meta: Any = None


_REGISTRY: dict[str, type[BackendDetails]] = {}
_LOCK = threading.Lock()


class BackendDetails(ABC):
    """Base class of ahead-of-time backends. Subclasses implement ``preprocess``
    (a static method) and are registered under their class name."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__bases__:
            if base is not BackendDetails and issubclass(base, BackendDetails):
                raise TypeError(
                    f"backend {cls.__name__!r} subclasses backend {base.__name__!r}; a backend is "
                    "a direct subclass of BackendDetails (share code through a helper instead)"
                )
        with _LOCK:
            _REGISTRY[cls.__name__] = cls

    @staticmethod
    @abstractmethod
    def preprocess(
        edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> PreprocessResult:
        """Compile one partition (an edge ``ExportedProgram`` whose inputs are the
        delegate's inputs, parameters first) into the delegate's bytes."""

    @classmethod
    def copy_exported_program_for_preprocess(
        cls, edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> ExportedProgram:
        """The program handed to ``preprocess``: a copy, so a backend may rewrite it."""
        from pyexecutorch.exir.graph_utils import copy_graph_module, rebuild

        gm = copy_graph_module(edge_program.graph_module)
        return rebuild(
            edge_program,
            gm,
            copy.deepcopy(edge_program.graph_signature),
            constants=dict(edge_program.constants),
            state_dict=dict(edge_program.state_dict),
        )

    @classmethod
    def preprocess_multimethod(
        cls,
        edge_programs: dict[str, list[ExportedProgram]],
        compile_specs: dict[str, list[list[CompileSpec]]],
    ) -> dict[str, list[PreprocessResult]]:
        """Preprocess every partition of every method at once (override to share
        data between partitions); by default ``preprocess`` on each."""
        out: dict[str, list[PreprocessResult]] = {}
        for method, programs in edge_programs.items():
            specs = compile_specs.get(method)
            if specs is None or len(specs) != len(programs):
                raise PreprocessError(
                    f"backend {cls.__name__}: method {method!r} has {len(programs)} partitions "
                    f"but {0 if specs is None else len(specs)} compile spec lists"
                )
            out[method] = [cls.preprocess(p, s) for p, s in zip(programs, specs, strict=True)]
        return out


def register_backend_details(cls: type[BackendDetails], backend_id: str | None = None) -> None:
    """Register ``cls`` under ``backend_id`` (default: its class name)."""
    if not (isinstance(cls, type) and issubclass(cls, BackendDetails)):
        raise TypeError(f"expected a BackendDetails subclass, got {cls!r}")
    with _LOCK:
        _REGISTRY[backend_id or cls.__name__] = cls


_builtins_loaded = False


def _load_builtin_backends() -> None:
    """Import the ahead-of-time half (``aot``) of every ``pyexecutorch.backends`` package."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    import pyexecutorch.backends as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        name = f"pyexecutorch.backends.{mod.name}.aot"
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise


def registered_backend_details() -> list[str]:
    """The ids of every registered ahead-of-time backend."""
    _load_builtin_backends()
    return sorted(_REGISTRY)


def get_backend_details(backend_id: str) -> type[BackendDetails]:
    """The backend registered under ``backend_id``; :class:`UnknownBackendError` if none."""
    if not isinstance(backend_id, str):
        raise TypeError(f"backend id must be a str, got {type(backend_id).__name__}")
    cls = _REGISTRY.get(backend_id)
    if cls is None:
        _load_builtin_backends()
        cls = _REGISTRY.get(backend_id)
    if cls is None:
        raise UnknownBackendError(
            # The first sentence is the official message (code matching it keeps working).
            f"Backend {backend_id} was not found. No ahead-of-time backend named "
            f"{backend_id!r} (registered: {sorted(_REGISTRY)}); "
            "define a BackendDetails subclass with that name, or register one with "
            "register_backend_details(cls, backend_id)"
        )
    return cls


__all__ = [
    "BackendDetails",
    "PreprocessError",
    "PreprocessResult",
    "UnknownBackendError",
    "get_backend_details",
    "register_backend_details",
    "registered_backend_details",
]
