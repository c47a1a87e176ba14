"""Modules, programs and methods with the official bindings' behaviour."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pyexecutorch.runtime import backend as backends
from pyexecutorch.runtime.io import convert_input, convert_outputs
from pyexecutorch.runtime.meta import MethodMeta
from pyexecutorch.runtime.method import LoadedMethod
from pyexecutorch.runtime.program import Program, Runtime, Verification


def _normalize_inputs(inputs: Any) -> list[Any]:
    if inputs is None:
        return []
    if isinstance(inputs, (list, tuple)):
        return list(inputs)
    return [inputs]


class _MethodState:
    """One loaded method with its lock and the bookkeeping for partial inputs."""

    def __init__(self, loaded: LoadedMethod) -> None:
        self.loaded = loaded
        self.lock = threading.Lock()
        self.has_inputs = False
        self.failed_setting_inputs = False

    def set_inputs(self, inputs: list[Any]) -> None:
        loaded = self.loaded
        n = len(loaded.inputs)
        name = loaded.name
        if len(inputs) > n:
            raise RuntimeError(f"Method '{name}' takes {n} inputs, but got {len(inputs)}")
        if len(inputs) < n:
            if self.failed_setting_inputs:
                raise RuntimeError(
                    f"The last call to method '{name}' failed while setting its inputs, so the inputs it "
                    "would reuse may be a mix of two calls. Pass every input on the next call."
                )
            if not self.has_inputs:
                raise RuntimeError(f"Method '{name}' takes {n} inputs, but only {len(inputs)} were given")
        try:
            converted = [convert_input(x, spec, i, name) for i, (x, spec) in enumerate(zip(inputs, loaded.inputs, strict=False))]
            for i, x in enumerate(converted):
                loaded.set_input(i, x)
        except Exception:
            self.failed_setting_inputs = True
            raise
        self.failed_setting_inputs = False
        if len(inputs) == n:
            self.has_inputs = True

    def call(self, inputs: Any, clone_outputs: bool) -> list[Any]:
        with self.lock:
            self.set_inputs(_normalize_inputs(inputs))
            self.loaded.run()
            return convert_outputs(self.loaded.outputs(), clone_outputs)


class ExecuTorchMethod:
    """A method loaded from an :class:`ExecuTorchProgram`."""

    def __init__(self, state: _MethodState, program: ExecuTorchProgram) -> None:
        self._state = state
        self._program = program

    def set_inputs(self, inputs: Any) -> None:
        with self._state.lock:
            self._state.set_inputs(_normalize_inputs(inputs))

    def execute(self) -> None:
        with self._state.lock:
            if not self._state.has_inputs and self._state.loaded.inputs:
                raise RuntimeError(f"Method '{self._state.loaded.name}': set_inputs must be called before execute")
            self._state.loaded.run()

    def get_outputs(self, clone_outputs: bool = True) -> list[Any]:
        with self._state.lock:
            return convert_outputs(self._state.loaded.outputs(), clone_outputs)

    def call(self, inputs: Any = (), clone_outputs: bool = True) -> list[Any]:
        return self._state.call(inputs, clone_outputs)

    __call__ = call

    def get_attribute(self, name: str) -> Any:
        loaded = self._state.loaded
        for i, ev in enumerate(loaded.plan.values):
            extra = getattr(ev.val, "extra_tensor_info", None)
            if extra is not None and extra.fully_qualified_name == name:
                return convert_outputs([loaded.values[i]], True)[0]
        raise KeyError(f"method '{loaded.name}' has no attribute {name!r}")

    def method_meta(self) -> MethodMeta:
        return MethodMeta(self._state.loaded.plan)


class ExecuTorchProgram:
    """A loaded program whose methods load on demand."""

    def __init__(self, program: Program) -> None:
        self._program = program
        self._names = [plan.name for plan in program.pte_file.program.execution_plan]
        self._states: dict[str, _MethodState] = {}
        self._lock = threading.Lock()

    def _state(self, name: str) -> _MethodState:
        with self._lock:
            state = self._states.get(name)
            if state is None:
                method = self._program.load_method(name)
                state = _MethodState(method._loaded)
                self._states[name] = state
            return state

    def num_methods(self) -> int:
        return len(self._names)

    def get_method_name(self, index: int) -> str:
        if not 0 <= index < len(self._names):
            raise IndexError(f"method index {index} out of range: the program has {len(self._names)} methods")
        return self._names[index]

    def load_method(self, name: str) -> ExecuTorchMethod:
        return ExecuTorchMethod(self._state(name), self)

    def method_meta(self, name: str) -> MethodMeta:
        return self._program.metadata(name)

    def has_etdump(self) -> bool:
        return False

    def write_etdump_result_to_file(self, path: str, debug_buffer_path: str | None = None) -> None:
        raise RuntimeError("ETDump is not enabled for this program (load it with enable_etdump=True)")


class ExecuTorchModule(ExecuTorchProgram):
    """A program with every method loaded: ``module.forward(inputs)``."""

    def __init__(self, program: Program) -> None:
        super().__init__(program)
        for name in self._names:
            self._state(name)

    def run_method(self, method_name: str, inputs: Any = (), clone_outputs: bool = True) -> list[Any]:
        if method_name not in self._names:
            raise RuntimeError(f"Failed to get metadata for method {method_name}: the program has {self._names}")
        return self._state(method_name).call(inputs, clone_outputs)

    def forward(self, inputs: Any = (), clone_outputs: bool = True) -> list[Any]:
        return self.run_method("forward", inputs, clone_outputs)

    __call__ = forward

    def plan_execute(self, method_name: str) -> None:
        state = self._state(method_name)
        with state.lock:
            state.loaded.run()

    def method_names(self) -> set[str]:
        return set(self._names)


def _load(
    data: Any,
    data_files: Sequence[Any],
    verification: Verification,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> Program:
    return Runtime.get().load_program(
        data, verification=verification, data_files=data_files, backend_options=backend_options
    )


def _data_files(data: Any) -> list[Any]:
    if data is None:
        return []
    if isinstance(data, (list, tuple)):
        return list(data)
    return [data]


def _load_for_executorch(
    path: str | os.PathLike,
    data_path: Any = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.InternalConsistency,
) -> ExecuTorchModule:
    return ExecuTorchModule(_load(path, _data_files(data_path), program_verification))


def _load_for_executorch_from_buffer(
    buffer: Any,
    data_map_buffer: Any = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.InternalConsistency,
) -> ExecuTorchModule:
    # The program keeps ``buffer`` alive for as long as anything loaded from it lives.
    return ExecuTorchModule(_load(buffer, _data_files(data_map_buffer), program_verification))


def _load_program(
    path: str | os.PathLike,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.Minimal,
    data_path: Any = None,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> ExecuTorchProgram:
    return ExecuTorchProgram(_load(path, _data_files(data_path), program_verification, backend_options or None))


def _load_program_from_buffer(
    buffer: Any,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.Minimal,
    data_map_buffer: Any = None,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
) -> ExecuTorchProgram:
    return ExecuTorchProgram(_load(buffer, _data_files(data_map_buffer), program_verification, backend_options or None))


def _get_operator_names() -> list[str]:
    from pyexecutorch.kernels import operator_names

    return operator_names()


def _get_registered_backend_names() -> list[str]:
    return backends.registered_backend_names()


def _is_available(backend_name: str) -> bool:
    return backends.is_available(backend_name)


def _set_option(backend_name: str, options: Mapping[str, Any]) -> None:
    backends.set_options(backend_name, options)


def _get_option(backend_name: str, options: Any = None) -> dict[str, Any]:
    return backends.get_options(backend_name, options)


def _threadpool_get_thread_count() -> int:
    """Threads numpy's BLAS uses."""
    try:
        from threadpoolctl import threadpool_info

        counts = [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
        if counts:
            return max(counts)
    except ImportError:
        pass
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return os.cpu_count() or 1


def _unsafe_reset_threadpool(num_threads: int) -> None:
    """Set the number of threads numpy's BLAS uses."""
    if num_threads < 1:
        raise ValueError(f"thread count must be positive, got {num_threads}")
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        raise RuntimeError("resetting the thread pool needs threadpoolctl (pip install threadpoolctl)") from None
    global _thread_limit
    _thread_limit = threadpool_limits(limits=num_threads, user_api="blas")


_thread_limit: Any = None
_profile: dict[str, list[float]] = {}
_profile_lock = threading.Lock()



def _create_profile_block(name: str) -> None:
    """Start a named profiling mark; the time until the next mark is recorded under ``name``."""
    with _profile_lock:
        _profile.setdefault(name, []).append(time.perf_counter())


def _dump_profile_results() -> str:
    with _profile_lock:
        lines = [f"{name}: {len(marks)} mark(s)" for name, marks in sorted(_profile.items())]
    return "\n".join(lines)


def _reset_profile_results() -> None:
    with _profile_lock:
        _profile.clear()
