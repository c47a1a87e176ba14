"""The runtime half of delegation: the backend interface and its registry.

A backend turns the bytes its ahead-of-time half wrote (``processed``) into a
handle once, when a method loads, and runs that handle on every call::

    class MyBackend(BackendInterface):
        def init(self, processed, compile_specs, context):
            return parse(processed)
        def execute(self, handle, args):
            ...  # read input arrays from args, write outputs into the output arrays

    register_backend("MyBackend", MyBackend())
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

OptionValue = bool | int | str


@dataclass
class BackendInitContext:
    """What a backend may use while initializing one delegate."""

    method_name: str
    delegate_index: int
    named_data: Mapping[str, memoryview]
    options: Mapping[str, OptionValue] = field(default_factory=dict)
    # The method's pyexecutorch.runtime.etdump.EventTracer when ETDump is on: a
    # backend that sees one may record events from inside its delegate.
    event_tracer: Any = None
    # Whether the method runs on the compiled tier (numba imports and the program was
    # loaded with jit on): a backend may then compile its delegate.
    jit: bool = False


class BackendInterface:
    """Base class of runtime backends: ``init`` once per delegate, ``execute`` per call."""

    # True: every argument of the backend's delegate calls must be a tensor, which
    # loading checks (a corrupt call passing an int fails at load, not in ``execute``).
    tensor_arguments_only: bool = False
    # True: ``execute`` writes each output of a static shape into the array it is given
    # and never returns another array for it (a method then keeps its planned arrays).
    fills_static_outputs: bool = False

    def is_available(self) -> bool:
        return True

    def init(
        self, processed: memoryview, compile_specs: dict[str, bytes], context: BackendInitContext
    ) -> Any:
        raise NotImplementedError

    def execute(self, handle: Any, args: list[Any]) -> list[Any] | None:
        """Run the delegate. ``args`` holds its inputs then its outputs (numpy arrays,
        Python scalars). Write outputs into the output arrays in place, or return a
        full list of the same length whose output entries replace them."""
        raise NotImplementedError

    def whole_steps(self, handle: Any, args: list[Any]) -> list[Any] | None:
        """The delegate's call on ``args`` (arrays a method made at load and passes on
        every call) as compiled steps (:class:`pyexecutorch.runtime.whole_method.Step`)
        that a method compiled whole calls in its place, or None (the default)."""
        return None

    def tensor_arguments(self, handle: Any, count: int) -> Iterable[int]:
        """The positions among a delegate call's ``count`` arguments that must hold
        tensors, which loading checks (default: all of them where
        ``tensor_arguments_only``, else none)."""
        return range(count) if self.tensor_arguments_only else ()

    def written_arguments(self, handle: Any) -> frozenset[int] | None:
        """The positions of the call's arguments that the delegate writes whole on every call
        without reading them (its outputs), or None (the default: any argument may be read,
        and written in part)."""
        return None

    def destroy(self, handle: Any) -> None:
        return None


_BACKENDS: dict[str, BackendInterface] = {}
_OPTIONS: dict[str, dict[str, OptionValue]] = {}
_LOCK = threading.Lock()


def register_backend(name: str, backend: BackendInterface) -> None:
    """Register ``backend`` under ``name`` (the id its partitioner writes into programs)."""
    if not isinstance(backend, BackendInterface):
        raise TypeError(
            f"backend {name!r} must be a BackendInterface, got {type(backend).__name__}"
        )
    with _LOCK:
        _BACKENDS[name] = backend


def _ensure_builtin_backends() -> None:
    # Built-in backends register themselves when their runtime half is imported.
    import importlib
    import pkgutil

    import pyexecutorch.backends as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        try:
            importlib.import_module(f"pyexecutorch.backends.{mod.name}.runtime")
        except ModuleNotFoundError as e:
            if e.name != f"pyexecutorch.backends.{mod.name}.runtime":
                raise


_loaded = False


def get_backend(name: str) -> BackendInterface | None:
    global _loaded
    if not _loaded:
        _loaded = True
        _ensure_builtin_backends()
    return _BACKENDS.get(name)


def registered_backend_names() -> list[str]:
    get_backend("")
    return sorted(_BACKENDS)


def is_available(name: str) -> bool:
    backend = get_backend(name)
    return backend is not None and backend.is_available()


def check_options(backend: str, options: Mapping[str, Any]) -> dict[str, OptionValue]:
    if get_backend(backend) is None:
        raise ValueError(f"unknown backend {backend!r}; registered: {registered_backend_names()}")
    checked: dict[str, OptionValue] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise TypeError(
                f"backend {backend!r}: option keys must be str, got {type(key).__name__}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TypeError(
                f"backend {backend!r}: option {key!r} must be bool, int or str, got {type(value).__name__}"
            )
        checked[key] = value
    return checked


def set_options(backend: str, options: Mapping[str, Any]) -> None:
    """Set global options for ``backend``, passed to every later ``init``."""
    checked = check_options(backend, options)
    with _LOCK:
        _OPTIONS.setdefault(backend, {}).update(checked)


def get_options(backend: str, keys: Any = None) -> dict[str, OptionValue]:
    """The global options of ``backend`` (only ``keys`` when given)."""
    check_options(backend, {})
    current = dict(_OPTIONS.get(backend, {}))
    if keys is None:
        return current
    return {k: current[k] for k in keys if k in current}


def effective_options(
    backend: str, per_program: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, OptionValue]:
    options = dict(_OPTIONS.get(backend, {}))
    if per_program and backend in per_program:
        options.update(check_options(backend, per_program[backend]))
    return options
