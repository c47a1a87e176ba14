"""The example backend at run time: parses its bytes in ``init`` and runs them
with numpy in ``execute``. Imports numpy only (no torch).

Options (``backend_options={"ExampleBackend": {...}}`` at load, or
``_set_option("ExampleBackend", {...})``):

- ``trace`` (bool): record the op names each ``execute`` runs in ``handle.trace``.
- ``check_shapes`` (bool, default True): check input shapes against the shapes
  the delegate was compiled for (dimensions that vary at run time are not checked).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyexecutorch.backends.example.format import BACKEND_ID, OPS, FormatError, unpack
from pyexecutorch.runtime.backend import BackendInitContext, BackendInterface, register_backend

OPTION_TYPES: dict[str, type] = {"trace": bool, "check_shapes": bool}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype, copy=False)


def _alpha(x: np.ndarray, alpha: float) -> np.ndarray:
    return x if alpha == 1 else x * np.float32(alpha)


def _kernel(op: str, attrs: dict[str, Any]) -> Callable[..., np.ndarray]:
    """The numpy function of one op (arguments are arrays, in the format's order)."""
    if op == "add":
        alpha = attrs.get("alpha", 1)
        return lambda a, b: np.add(a, _alpha(b, alpha))
    if op == "sub":
        alpha = attrs.get("alpha", 1)
        return lambda a, b: np.subtract(a, _alpha(b, alpha))
    if op == "mul":
        return np.multiply
    if op == "relu":
        return lambda x: np.maximum(x, np.float32(0))
    if op == "sigmoid":
        return _sigmoid
    if op == "tanh":
        return np.tanh
    if op == "mm":
        return np.matmul
    if op == "linear":

        def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
            y = np.matmul(x, w.T)
            return y if b is None else np.add(y, b, out=y)

        return linear
    if op == "addmm":
        beta, alpha = attrs.get("beta", 1), attrs.get("alpha", 1)

        def addmm(bias: np.ndarray, m1: np.ndarray, m2: np.ndarray) -> np.ndarray:
            y = _alpha(np.matmul(m1, m2), alpha)
            return np.add(y, _alpha(bias, beta) if beta != 0 else np.float32(0))

        return addmm
    if op == "permute":
        dims = tuple(attrs["dims"])
        return lambda x: np.ascontiguousarray(np.transpose(x, dims))
    raise FormatError(f"unknown op {op!r} (known: {sorted(OPS)})")


@dataclass
class ExampleHandle:
    """One initialized delegate."""

    inputs: list[int]
    outputs: list[int]
    shapes: list[tuple[int | None, ...]]
    slots: list[Any]  # value id -> array (constants filled at init)
    steps: list[tuple[Callable[..., np.ndarray], list[int], int, str]]
    options: dict[str, Any]
    trace: list[str] = field(default_factory=list)
    # With ETDump on: the runtime EventTracer and each step's event key and op index
    # (the key of the delegate's debug-handle map).
    tracer: Any = None
    step_events: list[tuple[int, int]] = field(default_factory=list)


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    out = {"trace": False, "check_shapes": True}
    for key, value in options.items():
        expected = OPTION_TYPES.get(key)
        if expected is None:
            raise ValueError(
                f"{BACKEND_ID}: unknown option {key!r} (options: {sorted(OPTION_TYPES)})"
            )
        if type(value) is not expected:
            raise TypeError(
                f"{BACKEND_ID}: option {key!r} must be {expected.__name__}, got {value!r}"
            )
        out[key] = value
    return out


class ExampleBackend(BackendInterface):
    """Runs example-backend programs with numpy. ``handles`` lists the live handles."""

    tensor_arguments_only = True

    def __init__(self) -> None:
        self.handles: list[ExampleHandle] = []

    def init(
        self, processed: memoryview, compile_specs: dict[str, bytes], context: BackendInitContext
    ) -> ExampleHandle:
        options = _check_options(dict(context.options))
        header, blob = unpack(processed)
        values = header["values"]
        slots: list[Any] = [None] * len(values)
        constant: set[int] = set()
        for c in header["constants"]:
            vid = c["value"]
            shape = tuple(values[vid]["shape"])
            if "key" in c:
                if c["key"] not in context.named_data:
                    raise FormatError(
                        f"named data {c['key']!r} is not in the program or its data files"
                    )
                raw = memoryview(context.named_data[c["key"]]).cast("B")
                if len(raw) != 4 * int(np.prod(shape)):
                    raise FormatError(
                        f"named data {c['key']!r} holds {len(raw)} bytes, value {vid} needs "
                        f"{4 * int(np.prod(shape))}"
                    )
                arr = np.frombuffer(raw, dtype=np.float32)
            else:
                start, n = c["offset"], c["nbytes"]
                if start + n > len(blob):
                    raise FormatError(
                        f"constant {vid} ({n} bytes at {start}) runs past the weights blob"
                    )
                arr = np.frombuffer(blob, dtype=np.float32, count=n // 4, offset=start)
            slots[vid] = arr.reshape(shape)
            constant.add(vid)
        steps = []
        step_ids = []
        for index, op in enumerate(header["ops"]):
            fn = _kernel(op["op"], op.get("attrs", {}))
            args, out = list(op["args"]), op["out"]
            if all(a == -1 or a in constant for a in args):
                # Work that depends only on weights (a transposed weight) is done once, here.
                slots[out] = np.ascontiguousarray(
                    fn(*[None if a == -1 else slots[a] for a in args])
                )
                constant.add(out)
                continue
            steps.append((fn, args, out, op["op"]))
            step_ids.append(index)
        tracer = context.event_tracer
        handle = ExampleHandle(
            inputs=list(header["inputs"]),
            outputs=list(header["outputs"]),
            shapes=[tuple(values[i]["shape"]) for i in header["inputs"]],
            slots=slots,
            steps=steps,
            options=options,
            tracer=tracer,
            step_events=[
                (tracer.delegate_key(index, metadata=name.encode()), index)
                for index, (_, _, _, name) in zip(step_ids, steps, strict=True)
            ]
            if tracer is not None
            else [],
        )
        self.handles.append(handle)
        return handle

    def execute(self, handle: ExampleHandle, args: list[Any]) -> list[Any] | None:
        n_in = len(handle.inputs)
        if len(args) != n_in + len(handle.outputs):
            raise ValueError(
                f"{BACKEND_ID}: expected {n_in} inputs and {len(handle.outputs)} outputs, got {len(args)} arguments"
            )
        v = list(handle.slots)
        for vid, shape, a in zip(handle.inputs, handle.shapes, args, strict=False):
            if handle.options["check_shapes"] and (
                len(shape) != a.ndim
                or any(d is not None and d != s for d, s in zip(shape, a.shape, strict=True))
            ):
                raise ValueError(f"{BACKEND_ID}: input of shape {a.shape}, compiled for {shape}")
            v[vid] = a
        trace = handle.trace if handle.options["trace"] else None
        if handle.tracer is not None:
            self._run_traced(handle, v, trace)
        else:
            for fn, ins, out, name in handle.steps:
                v[out] = fn(*[None if i == -1 else v[i] for i in ins])
                if trace is not None:
                    trace.append(name)
        replaced = False
        result = list(args)
        for k, vid in enumerate(handle.outputs):
            dst, got = args[n_in + k], v[vid]
            if isinstance(dst, np.ndarray) and dst.shape == got.shape:
                np.copyto(dst, got)
                continue
            # A dynamic shape: reuse the planned buffer when it is big enough.
            if (
                isinstance(dst, np.ndarray)
                and dst.flags.c_contiguous
                and dst.size >= got.size
                and dst.dtype == got.dtype
            ):
                view = dst.reshape(-1)[: got.size].reshape(got.shape)
                np.copyto(view, got)
                got = view
            result[n_in + k] = got
            replaced = True
        return result if replaced else None

    @staticmethod
    def _run_traced(handle: ExampleHandle, v: list[Any], trace: list[str] | None) -> None:
        """The steps, each an ETDump event identified by its op index, its output logged."""
        from pyexecutorch.runtime.etdump import clock  # noqa: PLC0415 - only when tracing

        tracer = handle.tracer
        for (fn, ins, out, name), (key, index) in zip(
            handle.steps, handle.step_events, strict=True
        ):
            start = clock()
            v[out] = fn(*[None if i == -1 else v[i] for i in ins])
            tracer.record_delegate(key, start, clock())
            if tracer.logs_delegate_outputs:
                tracer.log_delegate_output(v[out], index)
            if trace is not None:
                trace.append(name)

    def destroy(self, handle: ExampleHandle) -> None:
        self.handles = [h for h in self.handles if h is not handle]


register_backend(BACKEND_ID, ExampleBackend())

__all__ = ["ExampleBackend", "ExampleHandle"]
