"""``Runtime``, ``Program`` and ``Method``: the Python API of the runtime."""

from __future__ import annotations

import enum
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pyexecutorch.jit import numba_env
from pyexecutorch.runtime import backend as backends
from pyexecutorch.runtime import tiers
from pyexecutorch.runtime.data_loader import (
    LoadedBytes,
    is_data_loader,
    load_checked,
    loader_size,
    segments_for_method,
)
from pyexecutorch.runtime.errors import DataFileError
from pyexecutorch.runtime.etdump import EventTracer
from pyexecutorch.runtime.exact_inputs import exact_installer
from pyexecutorch.runtime.io import (
    Input,
    check_install,
    exact_slots,
    input_decls,
    read_input,
)
from pyexecutorch.runtime.limits import DEFAULT_LIMITS, LoadLimits
from pyexecutorch.runtime.loader import open_bytes
from pyexecutorch.runtime.memory import SharedArenas
from pyexecutorch.runtime.meta import MethodMeta
from pyexecutorch.runtime.method import LoadedMethod
from pyexecutorch.runtime.method_plan import MethodPlan
from pyexecutorch.runtime.outputs import convert_outputs, forced_output_kind
from pyexecutorch.runtime.threads import follow_threads, set_threads
from pyexecutorch.runtime.verify import verify_program
from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.pte import PteFile, decode_pte


class Verification(enum.IntEnum):
    """How much of a program is checked when it loads."""

    Minimal = 0  # the header and file identifier
    InternalConsistency = 1  # also every index, size, offset and dtype


class Method:
    """A loaded method: ``execute(inputs)`` returns its outputs."""

    def __init__(self, loaded: LoadedMethod, program: Program) -> None:
        self._loaded = loaded
        self._program = program  # keeps the file mapping alive
        self._lock = threading.Lock()
        self._meta = MethodMeta(loaded.plan)
        self._decls = input_decls(loaded.plan)
        self._exact = exact_slots(self._decls, loaded.facts)
        self._views = OutputViews(len(loaded.plan.outputs))
        self._install_exact = exact_installer(self._exact, loaded.values, loaded.name)

    @property
    def metadata(self) -> MethodMeta:
        return self._meta

    @property
    def plan(self) -> MethodPlan:
        """What loading decided for this method: its tier, whether it compiled whole,
        its fused loops, epilogues, views and each instruction's form (see
        :mod:`pyexecutorch.runtime.method_plan`). A dynamic-shape method on the compiled
        tier lists the static plans made so far."""
        return self._loaded.method_plan

    @property
    def name(self) -> str:
        return self._loaded.name

    def execute(self, inputs: Sequence[Any] | Any = (), *, clone_outputs: bool = True) -> list[Any]:
        """Run the method on ``inputs`` (a sequence, or one tensor) and return its outputs.

        Inputs are read as :mod:`pyexecutorch.runtime.io` describes; with
        ``clone_outputs=False`` tensor outputs are views of the method's
        memory, valid until it runs again.
        """
        loaded = self._loaded
        if not isinstance(inputs, (list, tuple)):
            inputs = (inputs,)
        with self._lock:
            follow_threads()
            if self._install_exact(inputs):
                loaded.run()
                if not clone_outputs:
                    return self._views.of(loaded.outputs(), loaded.name)
                converted = ()
            else:
                converted = self._install(inputs)
                loaded.run()
            return convert_outputs(
                loaded.outputs(), clone=clone_outputs, inputs=converted, method=loaded.name
            )

    def _install(self, inputs: Sequence[Any]) -> list[Input]:
        """The general input path: convert and check every input, then store them."""
        loaded = self._loaded
        decls = self._decls
        if len(inputs) != len(decls):
            raise ValueError(
                f"method '{loaded.name}' takes {len(decls)} inputs, but got {len(inputs)}"
            )
        converted = [read_input(x, d, loaded.name) for x, d in zip(inputs, decls, strict=True)]
        for inp, decl in zip(converted, decls, strict=True):
            check_install(inp, decl, loaded.name)
        for i, inp in enumerate(converted):
            loaded.set_input(i, inp.value)
        return converted

    __call__ = execute

    def __repr__(self) -> str:
        return f"Method({self._meta!r})"


class OutputViews:
    """Torch views of a method's output arrays, kept from one call to the next.

    Wrapping an array as a tensor (``torch.from_numpy``) costs more than many
    small kernels; an output that is the same planned array as last call is
    handed out as the same tensor, unless the caller changed that tensor (its
    version counter moves with in-place data and metadata changes) or made it
    require grad. Only for ``clone_outputs=False`` outputs of the exact input
    path, where no output can be a view of a caller's torch input.
    """

    def __init__(self, n_outputs: int) -> None:
        self._kept: list[tuple[Any, Any, int] | None] = [None] * n_outputs

    def of(self, values: list[Any], method: str) -> list[Any]:
        """``values`` as :func:`convert_outputs` returns them with ``clone=False``."""
        torch = sys.modules.get("torch")
        if forced_output_kind() is not None or torch is None or not hasattr(torch, "from_numpy"):
            return convert_outputs(values, clone=False, method=method)
        kept = self._kept
        out = []
        for p, value in enumerate(values):
            entry = kept[p]
            if entry is not None and entry[0] is value:
                tensor = entry[1]
                if tensor._version == entry[2] and not tensor.requires_grad:
                    out.append(tensor)
                    continue
            if type(value) is np.ndarray and value.flags.writeable and value.dtype.isbuiltin != 2:
                tensor = torch.from_numpy(value)
                kept[p] = (value, tensor, tensor._version)
            else:
                tensor = convert_outputs([value], clone=False, method=method)[0]
            out.append(tensor)
        return out


class Program:
    """A loaded program: its methods, loaded on demand."""

    def __init__(
        self,
        pte: PteFile,
        keepalive: Any,
        *,
        named_data: Mapping[str, Any] | None = None,
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
        jit: bool = False,
        event_tracer: EventTracer | None = None,
        limits: LoadLimits = DEFAULT_LIMITS,
        verified: bool = False,
    ) -> None:
        self._pte = pte
        self.jit = jit  # whether its methods use the compiled tier
        self.event_tracer = event_tracer
        self.limits = limits
        self.verified = verified  # every method was checked at load
        self._keepalive = keepalive
        # A program read through a data loader reads segments as methods need them.
        self._lazy = keepalive if isinstance(keepalive, LoadedBytes) else None
        self._named = dict(pte.named_data and {k: b.data for k, b in pte.named_data.items()} or {})
        if named_data:
            self._named.update(named_data)
        self._backend_options = backend_options
        self._plans = {plan.name: plan for plan in pte.program.execution_plan}
        # State planned with share_mutable_buffers lives once for all methods.
        self._shared = SharedArenas.of(pte.program.execution_plan, limits)
        self._methods: dict[str, Method] = {}
        self._lock = threading.Lock()

    @property
    def pte_file(self) -> PteFile:
        return self._pte

    @property
    def method_names(self) -> set[str]:
        return set(self._plans)

    def _plan(self, name: str):  # noqa: ANN202
        if not isinstance(name, str):
            raise TypeError(f"a method name is a str, got {type(name).__name__}: {name!r}")
        plan = self._plans.get(name)
        if plan is None:
            raise KeyError(f"no method named {name!r}; the program has {sorted(self._plans)}")
        return plan

    def load_method(self, name: str) -> Method:
        """Load (once) and return the method ``name``."""
        with self._lock:
            method = self._methods.get(name)
            if method is None:
                self.ensure_segments(name)
                compiled_before = numba_env.compile_totals.copy()
                loaded = LoadedMethod(
                    self._pte,
                    self._plan(name),
                    named_data=self._named,
                    backend_options=self._backend_options,
                    jit=self.jit,
                    shared=self._shared,
                    event_tracer=self.event_tracer,
                    limits=self.limits,
                    verify=not self.verified,
                )
                method = Method(loaded, self)
                self._methods[name] = method
                new = numba_env.compile_totals - compiled_before
                if new:
                    numba_env.logger.info(
                        "method %r: compiled %d function(s) in %.1f s, cached in %s",
                        name,
                        new["functions"],
                        new["seconds"],
                        numba_env.cache_dir(),
                    )
            return method

    def ensure_segments(self, name: str) -> None:
        """Read the segments method ``name`` needs (a program read through a loader)."""
        if self._lazy is not None:
            self._lazy.ensure(segments_for_method(self._pte, self._plan(name)))

    def metadata(self, name: str) -> MethodMeta:
        return MethodMeta(self._plan(name))

    def write_etdump_result_to_file(
        self, etdump_path: str | os.PathLike, debug_buffer_path: str | os.PathLike | None = None
    ) -> None:
        """Write what the program recorded (loaded with ``enable_etdump=True``) as an ETDump."""
        if self.event_tracer is None:
            raise RuntimeError("No etdump found: load the program with enable_etdump=True")
        with self._lock:
            self.event_tracer.write(etdump_path, debug_buffer_path)


def _named_data_of(data_files: Sequence[Any]) -> dict[str, Any]:
    named: dict[str, Any] = {}
    if not data_files:
        return named
    from pyexecutorch.schema import flat_tensor  # noqa: PLC0415 - only programs with .ptd files need it

    for number, source in enumerate(data_files):
        if is_data_loader(source):
            total = loader_size(source)
            buf = load_checked(source, 0, total, total)
        else:
            buf = open_bytes(source, "data")
        try:
            ptd = flat_tensor.decode_ptd(buf)
        except FormatError as e:
            raise DataFileError(f"data file {number}: {e}") from None
        for key, entry in ptd.entries.items():
            named[key] = entry.data
    return named


class OperatorRegistry:
    @property
    def operator_names(self) -> set[str]:
        from pyexecutorch.kernels import operator_names

        return set(operator_names())


class BackendRegistry:
    @property
    def registered_backend_names(self) -> list[str]:
        return backends.registered_backend_names()

    def is_available(self, backend_name: str) -> bool:
        return backends.is_available(backend_name)


class Runtime:
    """The runtime: loads programs. ``Runtime.get()`` returns the shared instance."""

    _instance: Runtime | None = None

    def __init__(self) -> None:
        self.backend_registry = BackendRegistry()
        self.operator_registry = OperatorRegistry()

    @staticmethod
    def get() -> Runtime:
        if Runtime._instance is None:
            Runtime._instance = Runtime()
        return Runtime._instance

    def load_program(
        self,
        data: Any,
        *,
        verification: Verification = Verification.InternalConsistency,
        data_files: Sequence[Any] = (),
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
        jit: bool | None = None,
        threads: int | None = None,
        enable_etdump: bool = False,
        debug_buffer_size: int = 0,
        log_delegate_outputs: bool = False,
        max_arena_bytes: int | None = None,
        max_instructions: int | None = None,
    ) -> Program:
        """Load a program from a path, bytes-like object, binary file object or data
        loader (see :mod:`pyexecutorch.runtime.data_loader`); ``data_files`` (``.ptd``)
        may be any of these too.

        ``jit``: use the compiled (numba) tier; by default when numba imports and
        ``PYEXECUTORCH_JIT`` is not ``0``; ``True`` without numba raises
        :class:`JitUnavailableError`. ``threads``: run BLAS and compiled loops on
        that many threads (a process-wide setting, as ``_unsafe_reset_threadpool``).
        With ``enable_etdump`` its methods record ETDump events (and, with
        ``debug_buffer_size > 0``, intermediate outputs) for
        :meth:`Program.write_etdump_result_to_file`; ``log_delegate_outputs`` also
        logs the output of each node inside a delegate that can (ours: XNNPACK, the
        example backend), which the official runtime's delegates do not: off by
        default, so that a trace reads as the official runtime's does.
        ``max_arena_bytes`` bounds the memory one method allocates when it loads
        (default: the machine's physical memory); ``max_instructions`` bounds the
        instructions one run of a chain with jumps executes (default:
        ``DEFAULT_MAX_INSTRUCTIONS``, ten million).
        See :mod:`pyexecutorch.runtime.limits`.
        """
        limits = LoadLimits(max_arena_bytes, max_instructions)
        use_jit = tiers.enabled(jit)
        if threads is not None:
            set_threads(threads)
        try:
            verification = Verification(verification)
        except ValueError:
            raise TypeError(f"verification must be a Verification, got {verification!r}") from None
        if backend_options is not None and not isinstance(backend_options, Mapping):
            raise TypeError(
                f"backend_options must map backend names to options, got {type(backend_options).__name__}"
            )
        for backend_name, options in (backend_options or {}).items():
            # Unknown backends and wrongly typed values fail here, not at first use.
            backends.check_options(backend_name, options)
        lazy = LoadedBytes(data) if is_data_loader(data) else None
        buf = lazy.buffer if lazy is not None else open_bytes(data)
        pte = decode_pte(buf)
        if lazy is not None:
            lazy.attach(pte)
            buf = lazy
        verified = verification == Verification.InternalConsistency
        if verified:
            verify_program(pte)
        if isinstance(data_files, (str, bytes)) or hasattr(data_files, "__fspath__"):
            data_files = (data_files,)
        return Program(
            pte,
            buf,
            named_data=_named_data_of(data_files),
            backend_options=backend_options,
            jit=use_jit,
            event_tracer=EventTracer(debug_buffer_size, log_delegate_outputs)
            if enable_etdump
            else None,
            limits=limits,
            verified=verified,
        )
