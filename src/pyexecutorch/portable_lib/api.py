"""Modules, programs and methods with the official bindings' behaviour.

Every object has its own re-entrant lock: calls on one object from several
threads run one at a time, and different objects run concurrently.

Outputs are copies by default. With ``clone_outputs=False`` a tensor output
is a view of the method's planned memory, valid until the method runs again;
an output that is an input the method did not plan memory for is a view of
that input (for torch inputs, a torch view of the caller's tensor).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.portable_lib.result import tensor_output, wrap_outputs
from pyexecutorch.runtime import backend as backends
from pyexecutorch.runtime import meta as _meta
from pyexecutorch.runtime.data_loader import is_data_loader
from pyexecutorch.runtime.errors import DataFileError
from pyexecutorch.runtime.io import (
    ERROR_ACCESS_FAILED,
    ERROR_INVALID_ARGUMENT,
    ERROR_INVALID_EXTERNAL_DATA,
    ERROR_INVALID_PROGRAM,
    ERROR_NOT_FOUND,
    Input,
    InputDecl,
    InstallError,
    check_install,
    input_decls,
    normalize_inputs,
    read_input,
)
from pyexecutorch.runtime.loader import owned_bytes
from pyexecutorch.runtime.method import LoadedMethod
from pyexecutorch.runtime.outputs import convert_outputs
from pyexecutorch.runtime.program import Program, Runtime, Verification
from pyexecutorch.runtime.threads import follow_threads, set_threads
from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.program import ExecutionPlan, Tensor

if TYPE_CHECKING:  # (imported when a bundled program is loaded: devtools costs start-up)
    from pyexecutorch.devtools.bundled_program.runtime import BundledModule

logger = logging.getLogger("pyexecutorch")

_MAX_OPTION_KEY_LENGTH = 64
_MAX_OPTION_VALUE_LENGTH = 256
_INT32 = (-(2**31), 2**31 - 1)


class MethodMeta(_meta.MethodMeta):
    """What a method takes and returns. As in the official bindings, ``repr``
    raises ``IndexError`` for a method with a non-tensor input."""

    _REPR_TAGS_OF_INPUTS = False


TensorInfo = _meta.TensorInfo


def _no_method(program: Program, name: str) -> str:
    return f"No method named '{name}' in program (it has: {', '.join(_method_names(program)) or 'none'})"


def _method_names(program: Program) -> list[str]:
    return [plan.name for plan in program.pte_file.program.execution_plan]


def _plan(program: Program, name: str) -> ExecutionPlan | None:
    for plan in program.pte_file.program.execution_plan:
        if plan.name == name:
            return plan
    return None


def _install(loaded: LoadedMethod, decls: Sequence[InputDecl], inputs: Sequence[Input]) -> None:
    for decl, inp in zip(decls, inputs, strict=True):
        check_install(inp, decl, loaded.name)
    for decl, inp in zip(decls, inputs, strict=True):
        loaded.set_input(decl.position, inp.value)


def _run(loaded: LoadedMethod) -> None:
    follow_threads()
    if _profile_blocks:
        start = time.perf_counter_ns()
        loaded.run()
        _record(loaded.name, time.perf_counter_ns() - start)
    else:
        loaded.run()


def _attribute(loaded: LoadedMethod, name: str) -> Any:
    for i, ev in enumerate(loaded.plan.values):
        val = ev.val
        extra = val.extra_tensor_info if isinstance(val, Tensor) else None
        if extra is not None and extra.fully_qualified_name == name:
            value = loaded.values[i]
            if not isinstance(value, np.ndarray):
                break
            if i in loaded.constant_values or not value.flags.writeable:
                # Constant data is never handed out writable: numpy gets a
                # read-only view, torch (whose tensors cannot be read-only) a copy.
                if tensor_output() == "torch":
                    return outputs_for_caller([value], clone=True)[0]
                view = value.view()
                view.flags.writeable = False
                return outputs_for_caller([view], clone=False)[0]
            return outputs_for_caller([value], clone=False)[0]
    raise RuntimeError(
        f"Failed to get attribute '{name}' for method '{loaded.name}', error: 0x{ERROR_NOT_FOUND:x}: "
        f"method '{loaded.name}' has no tensor named '{name}'"
    )


def outputs_for_caller(
    values: Sequence[Any],
    *,
    clone: bool = True,
    inputs: Sequence[Input] = (),
    method: str = "",
) -> list[Any]:
    """A method's outputs as torch tensors, ``ExecuTorchResult`` objects or numpy
    arrays (see :func:`pyexecutorch.portable_lib.result.tensor_output`)."""
    kind = tensor_output()
    if kind == "torch":
        return convert_outputs(values, clone=clone, inputs=inputs, method=method, kind="torch")
    out = convert_outputs(values, clone=clone, inputs=inputs, method=method, kind="numpy")
    return wrap_outputs(out) if kind == "executorch" else out


class _Etdump:
    """The ETDump of a loaded program: its runtime EventTracer, when enabled."""

    def __init__(self, program: Program) -> None:
        self.tracer = program.event_tracer

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def write(self, path: str, debug_buffer_path: str | None) -> None:
        if self.tracer is None:
            raise RuntimeError("No etdump found")
        self.tracer.write(path, debug_buffer_path)


class ExecuTorchModule:
    """A loaded program whose methods run by name: ``module.forward(inputs)``.

    Fewer inputs than a method takes reuse the inputs of its previous call
    for the rest, as the official bindings do.
    """

    def __init__(
        self, program: Program, etdump: _Etdump, data_error: DataFileError | None = None
    ) -> None:
        self._program = program
        self._etdump = etdump
        # A malformed .ptd: the official Module reads its data files when it loads the
        # program for the first method, so the error comes with that call, not here.
        self._data_error = data_error
        self._lock = threading.RLock()
        self._decls: dict[str, list[InputDecl]] = {}
        self._retained: dict[str, list[Input]] = {}
        self._failed: set[str] = set()

    def run_method(
        self, method_name: str, inputs: Any = (), clone_outputs: bool = True
    ) -> list[Any]:
        with self._lock:
            values = normalize_inputs(inputs)
            count = len(values)
            decls = self._decls.get(method_name)
            if decls is None:
                plan = _plan(self._program, method_name)
                if plan is None:
                    raise RuntimeError(
                        f"Failed to get metadata for method {method_name}: {_no_method(self._program, method_name)}"
                    )
                decls = self._decls[method_name] = input_decls(plan)
            # Checked before anything is installed, so that an extra input
            # cannot block the partial calls that follow.
            if count > len(decls):
                raise RuntimeError(
                    f"Method '{method_name}' takes {len(decls)} inputs, but got {count}"
                )
            if count < len(decls) and method_name in self._failed:
                raise RuntimeError(
                    f"The last call to method '{method_name}' failed while setting its inputs, so the inputs it "
                    "would reuse may be a mix of two calls. Pass every input on the next call."
                )
            new = [read_input(values[i], decls[i], method_name) for i in range(count)]
            retained = self._retained.get(method_name, [])
            for i in range(count, len(retained)):
                retained[i].check_storage(i, method_name)
            if self._data_error is not None:
                raise RuntimeError(
                    f"Failed to load method {method_name}, error: "
                    f"0x{ERROR_INVALID_EXTERNAL_DATA:x}: {self._data_error}"
                )
            loaded = self._program.load_method(method_name)._loaded
            passed = max(len(retained), count)
            if passed < len(decls):
                raise RuntimeError(
                    f"Method '{method_name}' takes {len(decls)} inputs, but only {passed} were ever passed. "
                    "Pass every input."
                )
            current = new + retained[count:]
            try:
                _install(loaded, decls, current)
            except InstallError as e:
                self._failed.add(method_name)
                raise RuntimeError(
                    f"Failed to set input {e.position} of method {method_name}, error: 0x{e.code:x}: {e}"
                ) from None
            self._failed.discard(method_name)
            self._retained[method_name] = current
            _run(loaded)
            return outputs_for_caller(
                loaded.outputs(), clone=clone_outputs, inputs=current, method=method_name
            )

    def forward(self, inputs: Any = (), clone_outputs: bool = True) -> list[Any]:
        return self.run_method("forward", inputs, clone_outputs)

    __call__ = forward

    def plan_execute(self, method_name: str, clone_outputs: bool = True) -> list[Any]:
        """Run ``method_name`` on the inputs of its previous call."""
        with self._lock:
            return self.run_method(method_name, [], clone_outputs)

    def method_meta(self, method_name: str) -> MethodMeta:
        with self._lock:
            plan = _plan(self._program, method_name)
            if plan is None:
                raise RuntimeError(
                    f"failed to retrieve method_meta for method {method_name}, error 0x{ERROR_INVALID_ARGUMENT:x}: "
                    f"{_no_method(self._program, method_name)}"
                )
            return MethodMeta(plan)

    def method_names(self) -> list[str]:
        with self._lock:
            return _method_names(self._program)

    def has_etdump(self) -> bool:
        with self._lock:
            return self._etdump.enabled

    def write_etdump_result_to_file(self, path: str, debug_buffer_path: str | None = None) -> None:
        with self._lock:
            self._etdump.write(path, debug_buffer_path)


class ExecuTorchMethod:
    """One loaded method: ``set_inputs``, ``execute``, ``get_outputs``, or ``call`` for all three.

    Each method object has planned memory of its own. The method reads its
    inputs at every ``execute``, so an in-place change the caller makes to an
    input after ``set_inputs`` is seen.
    """

    def __init__(self, loaded: LoadedMethod, program: Program) -> None:
        self._loaded = loaded
        self._program = program  # keeps the program's memory alive
        self._decls = input_decls(loaded.plan)
        self._lock = threading.RLock()
        self._inputs: list[Input] = []
        self._inputs_set = not self._decls
        self._inputs_failed = False
        self._outputs_valid = False

    @property
    def _name(self) -> str:
        return self._loaded.name

    def set_inputs(self, inputs: Any) -> None:
        with self._lock:
            values = normalize_inputs(inputs)
            if len(values) != len(self._decls):
                raise RuntimeError(
                    f"Method '{self._name}' takes {len(self._decls)} inputs, but got {len(values)}"
                )
            new = [read_input(v, d, self._name) for v, d in zip(values, self._decls, strict=True)]
            try:
                _install(self._loaded, self._decls, new)
            except InstallError as e:
                # The official runtime installs inputs one by one and keeps a
                # failed call's prefix, so it refuses to run until a full set arrives.
                self._inputs_failed = True
                self._outputs_valid = False
                raise RuntimeError(
                    f"method->set_inputs() for method '{self._name}' failed with error 0x{e.code:x}: {e}"
                ) from None
            self._inputs_failed = False
            self._inputs_set = True
            self._inputs = new
            # An output can share memory with an input, so it would now show
            # data no execute() produced.
            self._outputs_valid = False

    def execute(self) -> None:
        with self._lock:
            if not self._inputs_set:
                raise RuntimeError(
                    f"Method '{self._name}' has no inputs yet. Call set_inputs() before executing."
                )
            if self._inputs_failed:
                raise RuntimeError(
                    f"The last set_inputs() for method '{self._name}' failed partway, so the method may hold a "
                    "mix of new and old inputs. Call set_inputs() again with every input before executing."
                )
            self._outputs_valid = False
            for i, inp in enumerate(self._inputs):
                inp.check_storage(i, self._name)
            for decl, inp in zip(self._decls, self._inputs, strict=True):
                self._loaded.set_input(decl.position, inp.value)
            _run(self._loaded)
            self._outputs_valid = True

    def get_outputs(self, clone_outputs: bool = True) -> list[Any]:
        with self._lock:
            if not self._outputs_valid:
                raise RuntimeError(
                    f"Method '{self._name}' has no outputs to return: it has not executed since its last "
                    "set_inputs(), or that execution failed. Call execute() first."
                )
            return outputs_for_caller(
                self._loaded.outputs(), clone=clone_outputs, inputs=self._inputs, method=self._name
            )

    def call(self, inputs: Any = (), clone_outputs: bool = True) -> list[Any]:
        with self._lock:
            self.set_inputs(inputs)
            self.execute()
            return self.get_outputs(clone_outputs)

    __call__ = call

    def get_attribute(self, name: str) -> Any:
        """The current value of the tensor the program names ``name`` (a mutable buffer:
        a view of its planned memory; a constant: read-only, or a copy for torch)."""
        with self._lock:
            return _attribute(self._loaded, name)

    def method_meta(self) -> MethodMeta:
        with self._lock:
            return MethodMeta(self._loaded.plan)


class ExecuTorchProgram:
    """A loaded program; ``load_method`` gives independent method objects."""

    def __init__(self, program: Program, etdump: _Etdump) -> None:
        self._program = program
        self._etdump = etdump
        self._lock = threading.RLock()

    def num_methods(self) -> int:
        return len(self._program.pte_file.program.execution_plan)

    def get_method_name(self, method_index: int) -> str:
        names = _method_names(self._program)
        if not 0 <= method_index < len(names):
            raise RuntimeError(
                f"Failed get method name, error: 0x{ERROR_INVALID_ARGUMENT:x}: "
                f"Plan index {method_index} >= num methods {len(names)}"
            )
        return names[method_index]

    def _plan_or_raise(self, name: str) -> ExecutionPlan:
        plan = _plan(self._program, name)
        if plan is None:
            raise RuntimeError(
                f"Failed to get method meta for method {name}, error: 0x{ERROR_INVALID_ARGUMENT:x}: "
                f"{_no_method(self._program, name)}"
            )
        return plan

    def load_method(self, method_name: str) -> ExecuTorchMethod:
        with self._lock:
            plan = self._plan_or_raise(method_name)
            program = self._program
            program.ensure_segments(method_name)
            # A fresh method each time, with memory of its own, so that two
            # method objects never share state. (The runtime's Program caches
            # one method per name; these are loaded beside it.)
            loaded = LoadedMethod(
                program.pte_file,
                plan,
                named_data=program._named,
                backend_options=program._backend_options,
                jit=program.jit,
                event_tracer=program.event_tracer,
                limits=program.limits,
            )
            logger.debug("loaded method %r", method_name)
            return ExecuTorchMethod(loaded, program)

    def method_meta(self, method_name: str) -> MethodMeta:
        with self._lock:
            return MethodMeta(self._plan_or_raise(method_name))

    def has_etdump(self) -> bool:
        return self._etdump.enabled

    def write_etdump_result_to_file(self, path: str, debug_buffer_path: str | None = None) -> None:
        with self._lock:
            self._etdump.write(path, debug_buffer_path)


# --------------------------------------------------------------------- loaders


def _verification(value: Any) -> Verification:
    try:
        return Verification(value)
    except ValueError:
        raise TypeError(f"program_verification must be a Verification, got {value!r}") from None


def _owned_buffer(buffer: Any, what: str) -> Any:
    """``buffer`` itself when its bytes cannot change (``bytes``, read-only views of
    ``bytes``), else a copy (a read-only view of a ``bytearray`` too)."""
    return owned_bytes(buffer, what)


def _load(
    source: Any,
    data: Any,
    verification: Any,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    max_instructions: int | None = None,
    keep_data_error: bool = False,
) -> Program:
    data_files = [] if data is None else list(data) if isinstance(data, (list, tuple)) else [data]
    try:
        program = Runtime.get().load_program(
            source,
            verification=_verification(verification),
            data_files=data_files,
            backend_options=backend_options or None,
            enable_etdump=bool(enable_etdump),
            debug_buffer_size=debug_buffer_size,
            max_instructions=max_instructions,
        )
    except OSError as e:
        raise RuntimeError(
            f"Failed to create MmapDataLoader, error: 0x{ERROR_ACCESS_FAILED:x}: {e}"
        ) from e
    except FormatError as e:
        if keep_data_error and isinstance(e, DataFileError):
            raise
        raise RuntimeError(
            f"Failed to load program, error: 0x{ERROR_INVALID_PROGRAM:x}: {e}"
        ) from e
    logger.debug("loaded program with methods %s", _method_names(program))
    return program


def _load_module(source: Any, data: Any, verification: Any, **kwargs: Any) -> ExecuTorchModule:
    """A module over the program; a malformed data file fails its first method call
    rather than the load, as with the official ``Module`` (which reads its data files
    when the first method loads)."""
    try:
        program = _load(source, data, verification, keep_data_error=True, **kwargs)
    except DataFileError as e:
        program = _load(source, None, verification, **kwargs)
        return ExecuTorchModule(program, _Etdump(program), data_error=e)
    return ExecuTorchModule(program, _Etdump(program))


def _load_for_executorch(
    program_path: str | os.PathLike,
    data_path: str | os.PathLike | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.InternalConsistency,
    max_instructions: int | None = None,
) -> ExecuTorchModule:
    """Load the program at ``program_path`` (weights in ``data_path`` when they live apart)."""
    return _load_module(
        os.fspath(program_path),
        data_path,
        program_verification,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
        max_instructions=max_instructions,
    )


def _load_for_executorch_from_buffer(
    buffer: Any,
    data_map_buffer: Any = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.InternalConsistency,
    max_instructions: int | None = None,
) -> ExecuTorchModule:
    """Load a program from bytes. The module keeps ``buffer`` alive for as long
    as anything loaded from it lives; a writable buffer is copied first."""
    return _load_module(
        _owned_buffer(buffer, "buffer"),
        None if data_map_buffer is None else _owned_buffer(data_map_buffer, "data_map_buffer"),
        program_verification,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
        max_instructions=max_instructions,
    )


def _load_for_executorch_from_data_loader(
    loader: Any,
    data_path: str | os.PathLike | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    max_instructions: int | None = None,
) -> ExecuTorchModule:
    """Load a program through a data loader (``FileDataLoader``, ``MmapDataLoader``,
    ``BufferDataLoader`` or any object with ``size`` and ``load(offset, size)``);
    segments are read when a method needs them."""
    if not is_data_loader(loader):
        raise TypeError(
            "loader must be a data loader with size and load(offset, size), got "
            f"{type(loader).__name__}"
        )
    return _load_module(
        loader,
        None if data_path is None else os.fspath(data_path),
        Verification.InternalConsistency,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
        max_instructions=max_instructions,
    )


def _load_program(
    path: str | os.PathLike,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.Minimal,
    data_path: str | os.PathLike | None = None,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
    max_instructions: int | None = None,
) -> ExecuTorchProgram:
    options = _load_options(backend_options)
    program = _load(
        os.fspath(path),
        data_path,
        program_verification,
        options,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
        max_instructions=max_instructions,
    )
    return ExecuTorchProgram(program, _Etdump(program))


def _load_program_from_buffer(
    buffer: Any,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.Minimal,
    data_path: str | os.PathLike | None = None,
    backend_options: Mapping[str, Mapping[str, Any]] | None = None,
    max_instructions: int | None = None,
) -> ExecuTorchProgram:
    options = _load_options(backend_options)
    program = _load(
        _owned_buffer(buffer, "buffer"),
        data_path,
        program_verification,
        options,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
        max_instructions=max_instructions,
    )
    return ExecuTorchProgram(program, _Etdump(program))


# -------------------------------------------------------------------- backends


def _backend_options(options: Any) -> dict[str, bool | int | str]:
    """Check one backend's options as the official bindings do."""
    if not isinstance(options, dict):
        raise TypeError("Backend options must be a dict")
    checked: dict[str, bool | int | str] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise TypeError(f"Backend option keys must be str, got {type(key).__name__}")
        if len(key) >= _MAX_OPTION_KEY_LENGTH:
            raise ValueError(f"Backend option key is too long: {key}")
        if isinstance(value, bool):
            pass
        elif isinstance(value, int):
            if not _INT32[0] <= value <= _INT32[1]:
                raise ValueError(f"Backend option {key} does not fit an int")
        elif isinstance(value, str):
            if len(value.encode()) >= _MAX_OPTION_VALUE_LENGTH:
                raise ValueError(f"Backend option {key} is too long")
        else:
            raise TypeError(f"Backend option {key} must be a bool, int or str")
        checked[key] = value
    return checked


def _load_options(backend_options: Any) -> dict[str, dict[str, bool | int | str]]:
    if backend_options is None:
        return {}
    if not isinstance(backend_options, dict):
        raise TypeError("backend_options must be a dict of backend name to options")
    return {str(name): _backend_options(options) for name, options in backend_options.items()}


def _get_operator_names() -> list[str]:
    # (through the runtime's registry, which loads every kernel module: this layer reaches
    # kernels only through the runtime)
    return sorted(Runtime.get().operator_registry.operator_names)


def _get_registered_backend_names() -> list[str]:
    return backends.registered_backend_names()


def _is_available(backend_name: str) -> bool:
    return backends.is_available(backend_name)


def _set_option(backend_name: str, options: dict[str, Any]) -> None:
    checked = _backend_options(options)
    try:
        backends.set_options(backend_name, checked)
    except ValueError as e:
        raise RuntimeError(
            f"Failed to set options for backend {backend_name}, error: 0x{ERROR_NOT_FOUND:x}: {e}"
        ) from None


def _get_option(backend_name: str, options: dict[str, Any]) -> dict[str, bool | int | str]:
    """The backend's current value of each key of ``options`` (its given value where unset)."""
    checked = _backend_options(options)
    try:
        current = backends.get_options(backend_name)
    except ValueError as e:
        raise RuntimeError(
            f"Failed to get options for backend {backend_name}, error: 0x{ERROR_NOT_FOUND:x}: {e}"
        ) from None
    return {key: current.get(key, value) for key, value in checked.items()}


# ------------------------------------------------------------------ threadpool

_THREAD_ENVIRONMENT = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _threadpool_get_thread_count() -> int:
    """The number of threads numpy's BLAS uses (threadpoolctl, else the environment)."""
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415 - optional
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        counts = [
            info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"
        ]
        if counts:
            return max(counts)
    for var in _THREAD_ENVIRONMENT:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return os.cpu_count() or 1


def _unsafe_reset_threadpool(num_threads: int) -> None:
    """Set the number of threads of numpy's BLAS and of the compiled loops (needs threadpoolctl)."""
    set_threads(num_threads)


# --------------------------------------------------------------------- profile
#
# ``_create_profile_block(name)`` starts a block; every method run after it is
# recorded in it until the next block. ``_dump_profile_results()`` returns the
# blocks as UTF-8 text (bytes, like the official bindings), empty when no block
# was created.

_profile_blocks: list[tuple[str, dict[str, list[int]]]] = []
_profile_lock = threading.Lock()


def _record(method: str, nanoseconds: int) -> None:
    with _profile_lock:
        if _profile_blocks:
            _profile_blocks[-1][1].setdefault(method, []).append(nanoseconds)


def _create_profile_block(name: str) -> None:
    with _profile_lock:
        _profile_blocks.append((str(name), {}))


def _dump_profile_results() -> bytes:
    with _profile_lock:
        lines = []
        for name, runs in _profile_blocks:
            lines.append(f"block {name}")
            for method, times in runs.items():
                total = sum(times) / 1e6
                lines.append(
                    f"  {method}: {len(times)} runs, {total:.3f} ms total, {total / len(times):.3f} ms mean"
                )
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _reset_profile_results() -> None:
    with _profile_lock:
        _profile_blocks.clear()


# ------------------------------------------------------------ bundled programs


def _load_bundled_program_from_buffer(
    buffer: Any, non_const_pool_size: int = 16 * 1024
) -> BundledModule:
    """A bundled program (``.bpte`` bytes): its test cases and its program."""
    from pyexecutorch.devtools.bundled_program.runtime import BundledModule  # noqa: PLC0415

    try:
        return BundledModule(_owned_buffer(buffer, "buffer"), non_const_pool_size)
    except FormatError as e:
        raise RuntimeError(
            f"Failed to load bundled program, error: 0x{ERROR_INVALID_PROGRAM:x}: {e}"
        ) from e


def _load_for_executorch_from_bundled_program(
    module: BundledModule,
    data: Any = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
) -> ExecuTorchModule:
    """The program inside ``module``, loaded as ``_load_for_executorch_from_buffer`` does;
    ``data`` is the external data as a buffer or a path."""
    from pyexecutorch.devtools.bundled_program.runtime import BundledModule  # noqa: PLC0415

    if not isinstance(module, BundledModule):
        raise TypeError(f"expected a BundledModule, got {type(module).__name__}")
    return _load_module(
        module.program_bytes,
        None if data is None else data if isinstance(data, str) else _owned_buffer(data, "data"),
        Verification.InternalConsistency,
        enable_etdump=enable_etdump,
        debug_buffer_size=debug_buffer_size,
    )
