"""Runs an XNNPACK delegate's graph with numpy.

:func:`load_graph` resolves a decoded :class:`~.schema.XNNGraph` once per
delegate: value dtypes and shapes, constants (from the payload's constant
data, the program's named data or the legacy inline buffers), external
inputs and outputs. Unsupported node types and value types are refused there,
by name.

A :class:`Plan` is that graph specialised to one set of input shapes: every
node becomes a closure over preallocated buffers (weights pre-packed for the
matmul they feed, padded inputs, im2col scratch), and running the plan calls
them in order. Delegate inputs and outputs are bound into the plan's value
table on each call, so outputs are written straight into the caller's arrays.
The node types themselves are in :mod:`.nodes`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.nodes import BUILDERS
from pyexecutorch.backends.xnnpack.nodes_quantized import QUANT_DTYPES, Quant, load_quant
from pyexecutorch.backends.xnnpack.schema import XnnpackError
from pyexecutorch.kernels.common import fit
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_TO_DTYPE, ScalarType

Step = Callable[[], None]
NDArray = np.ndarray

_DTYPES = {
    S.XNNDatatype.fp32: np.dtype(np.float32),
    S.XNNDatatype.fp16: np.dtype(np.float16),
    S.XNNDatatype.int32: np.dtype(np.int32),
}
UINT64_MAX = 0xFFFFFFFFFFFFFFFF


# ------------------------------------------------------------------ the graph


@dataclass
class Value:
    id: int
    dtype: np.dtype
    dims: tuple[int, ...]
    const: NDArray | None
    external_id: int | None
    flags: int
    quant: Quant | None = None  # quantization parameters of a quantized value

    @property
    def bound(self) -> bool:
        """Whether the value is a delegate input or output, bound anew on every call."""
        return self.external_id is not None


@dataclass
class Graph:
    values: list[Value]
    nodes: list[S.XNode]
    inputs: list[Value]  # in external-id order
    outputs: list[Value]
    num_args: int  # the delegate call's arguments (num_externs): inputs, then outputs
    # arrays the compiled plans make from constants at load (weights laid out or packed
    # for a kernel), by what they are: made once, every plan (one per input shapes) reads
    # the same (see compiled_nodes.shared)
    derived: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)


def _constant(
    graph: S.XNNGraph,
    idx: int,
    payload: S.Payload,
    named_data: Mapping[str, Any],
    what: str,
) -> memoryview:
    if payload.constant_data is None:
        if idx >= len(graph.constant_buffer):
            raise XnnpackError(f"{what}: constant buffer {idx} of {len(graph.constant_buffer)}")
        return memoryview(graph.constant_buffer[idx].storage).cast("B")
    if idx >= len(graph.constant_data):
        raise XnnpackError(f"{what}: constant data entry {idx} of {len(graph.constant_data)}")
    entry = graph.constant_data[idx]
    if entry.named_key:
        blob = named_data.get(entry.named_key)
        if blob is None:
            raise XnnpackError(
                f"{what}: named data {entry.named_key!r} is not in the program or its data files"
            )
        return memoryview(blob).cast("B")
    data = payload.constant_data
    if entry.offset == UINT64_MAX or entry.offset + entry.size > len(data):
        raise XnnpackError(
            f"{what}: constant data [{entry.offset}, +{entry.size}) is outside the "
            f"{len(data)}-byte constant data"
        )
    return data[entry.offset : entry.offset + entry.size]


def load_graph(payload: S.Payload, named_data: Mapping[str, Any]) -> Graph:
    """Resolve values and constants; refuse what this interpreter cannot run."""
    g = payload.graph
    values: list[Value] = []
    for i, xv in enumerate(g.xvalues):
        u = xv.xvalue_union
        if u is None:
            raise XnnpackError(f"value {i} is empty")
        quant = None
        if isinstance(u, S.XNNQuantizedTensorValue):
            if u.tensor_value is None:
                raise XnnpackError(f"value {i}: quantized value without a tensor")
            t: S.XNNTensorValue = u.tensor_value
            quant = load_quant(
                i,
                t,
                u.quant_params,
                lambda k, i=i: _constant(g, k, payload, named_data, f"value {i}"),
            )
            dtype = QUANT_DTYPES.get(t.datatype)
        else:
            t = u
            dtype = _DTYPES.get(t.datatype)
            if t.datatype == S.XNNDatatype.bf16:
                dtype = SCALAR_TYPE_TO_DTYPE[ScalarType.BFLOAT16]  # (imports ml_dtypes)
        if t.id_out != i:
            raise XnnpackError(f"value {i} has id_out {t.id_out}; ids must follow the value order")
        if dtype is None or t.dq_datatype != S.XNNDatatype.invalid:
            dt = t.datatype if t.dq_datatype == S.XNNDatatype.invalid else t.dq_datatype
            raise NotImplementedError(
                f"XNNPACK delegate: value {i} has datatype {dt.name}, which pyexecutorch does not support"
            )
        dims = tuple(int(d) for d in t.dims)
        const = None
        if t.constant_buffer_idx:
            raw = _constant(g, t.constant_buffer_idx, payload, named_data, f"value {i}")
            n = math.prod(dims)
            packed = quant is not None and quant.packed4
            need = math.prod(dims[:-1]) * ((dims[-1] + 1) // 2) if packed else n * dtype.itemsize
            if len(raw) < need:
                raise XnnpackError(
                    f"value {i}: constant holds {len(raw)} bytes, its {dtype.name}{list(dims)} needs "
                    f"{need}"
                )
            if quant is not None and quant.packed4:
                const = quant.unpack4(raw, dims, i)
            else:
                const = np.frombuffer(raw, dtype=dtype, count=n).reshape(dims)
        io = t.flags & (S.VALUE_FLAG_EXTERNAL_INPUT | S.VALUE_FLAG_EXTERNAL_OUTPUT)
        ext = t.external_id if io and t.external_id != S.INVALID_ID else None
        values.append(Value(i, dtype, dims, const, ext, t.flags, quant))
    for k, n in enumerate(g.xnodes):
        if n.xnode_union is None:
            raise XnnpackError(f"node {k} is empty")
        name = type(n.xnode_union).__name__
        if name not in BUILDERS:
            raise NotImplementedError(
                f"XNNPACK delegate: node {k} is an {name}, which pyexecutorch's XNNPACK runtime does not "
                f"support (supported: {', '.join(sorted(BUILDERS))})"
            )
    _check_bfloat16(values, g.xnodes)
    inputs = sorted(
        (v for v in values if v.flags & S.VALUE_FLAG_EXTERNAL_INPUT and v.external_id is not None),
        key=lambda v: v.external_id,
    )
    outputs = sorted(
        (v for v in values if v.flags & S.VALUE_FLAG_EXTERNAL_OUTPUT and v.external_id is not None),
        key=lambda v: v.external_id,
    )
    externals = sorted(v.external_id for v in inputs + outputs)
    # an external id is the position of the delegate call's argument; a position no value
    # takes is a non-tensor argument (a symbolic size the exporter passed in)
    num_args = g.num_externs or len(externals)
    if len(set(externals)) != len(externals) or (externals and externals[-1] >= num_args):
        raise XnnpackError(
            f"external ids {externals} of the delegate's inputs and outputs are not distinct "
            f"ids below num_externs {num_args}"
        )
    return Graph(values, list(g.xnodes), inputs, outputs, num_args)


# Where bfloat16 values may appear (XNNPACK's qd8-bf16-qb4w linears): the input a
# Convert quantizes per token, the output of a fully connected layer on such rows.
_BF16_USES = {
    ("XNNConvert", "input_id"): "qdint8 output",
    ("XNNFullyConnected", "output_id"): "qdint8 input",
}


def _check_bfloat16(values: list[Value], nodes: list[S.XNode]) -> None:
    """Refuse a bfloat16 value anywhere but a dynamically quantized linear's ends."""
    for k, node in enumerate(nodes):
        u = node.xnode_union
        name = type(u).__name__
        for f in dataclasses.fields(u):
            vid = getattr(u, f.name)
            if not f.name.endswith("_id") or not 0 <= vid < len(values):
                continue
            if values[vid].dtype.name != "bfloat16":
                continue
            other = getattr(u, "output_id" if f.name == "input_id" else "input1_id", None)
            dynamic = (
                other is not None
                and 0 <= other < len(values)
                and (values[other].quant is not None and values[other].quant.kind == "token")
            )
            if (name, f.name) not in _BF16_USES or not dynamic:
                raise NotImplementedError(
                    f"XNNPACK delegate: node {k} ({name}) reads or writes bfloat16 value {vid} "
                    f"as {f.name}; pyexecutorch takes bfloat16 only as the float input of a "
                    "Convert to qdint8 and the output of a fully connected layer on qdint8 rows"
                )


# ------------------------------------------------------------------ planning


class Builder:
    """Turns the graph's nodes into steps for one set of input shapes."""

    def __init__(
        self, graph: Graph, input_shapes: tuple[tuple[int, ...], ...], declared: bool = False
    ) -> None:
        self.graph = graph
        self.declared = declared  # the payload's own shapes: every value must get its dims
        self.env: list[Any] = [None] * len(graph.values)
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.steps: list[Step] = []
        self.rebound: set[int] = set()  # values whose array a step replaces on every call
        # per-row parameters of dynamically quantized values, filled by their Convert
        self.dynamic: dict[int, Any] = {}
        self.where = ""
        for v in graph.values:
            if v.const is not None:
                self.env[v.id] = v.const
                self.shapes[v.id] = v.dims
        for v, shape in zip(graph.inputs, input_shapes, strict=True):
            self.shapes[v.id] = shape
            self.env[v.id] = np.zeros(shape, v.dtype)  # stands in until the first call binds it

    # values -------------------------------------------------------------

    def value(self, vid: int) -> Value:
        if vid >= len(self.graph.values):
            raise XnnpackError(
                f"{self.where}: value {vid} does not exist ({len(self.graph.values)} values)"
            )
        return self.graph.values[vid]

    def shape(self, vid: int) -> tuple[int, ...]:
        shape = self.shapes.get(vid)
        if shape is None:
            raise XnnpackError(f"{self.where}: value {vid} is read before any node writes it")
        return shape

    def dtype(self, vid: int) -> np.dtype:
        return self.value(vid).dtype

    def fixed(self, vid: int) -> bool:
        """Whether ``env[vid]`` stays the same array on every call (not a delegate input/output)."""
        return not self.value(vid).bound and vid not in self.rebound

    def const(self, vid: int) -> NDArray | None:
        return self.value(vid).const

    def out(self, vid: int, shape: tuple[int, ...]) -> NDArray:
        """Allocate the buffer of the value ``vid`` that a node writes."""
        shape = self.claim(vid, shape)
        buf = self.allocate(vid, shape, self.value(vid).dtype)
        self.env[vid] = buf
        return buf

    def claim(self, vid: int, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Record ``shape`` as the value ``vid``'s that a node writes, checked: written once,
        not a constant, no larger than the payload declares."""
        v = self.value(vid)
        if v.const is not None or vid in self.shapes:
            raise XnnpackError(f"{self.where}: value {vid} is written twice (or is a constant)")
        shape = tuple(int(d) for d in shape)
        if self.declared and v.dims and math.prod(shape) > math.prod(v.dims):
            # Checked before allocating: a corrupt padding or size would otherwise ask for
            # any amount of memory. Sizes, not shapes: the official exporter declares some
            # internal values in NCHW order that XNNPACK lays out as NHWC (a dynamically
            # quantized convolution's converted input). At most, not equal: a dynamic
            # size's bound may be loose (two batch dims of one size s give a linear's
            # output the exporter's shape (s, s**2 // s), bounded at max**2 / min).
            raise XnnpackError(
                f"{self.where}: value {vid} would be {list(shape)}, larger than the "
                f"payload declares, {list(v.dims)}"
            )
        self.shapes[vid] = shape
        return shape

    def allocate(self, vid: int, shape: tuple[int, ...], dtype: np.dtype) -> NDArray:
        """The memory of value ``vid`` (a new array here; a compiled plan reuses memory)."""
        return np.empty(shape, dtype)

    def alias(self, vid: int, src: int, shape: tuple[int, ...]) -> None:
        """Make ``vid`` a reshaped view of ``src`` (no copy when both are fixed)."""
        env = self.env
        dst_fixed = self.fixed(vid)
        self.out(vid, shape)
        if dst_fixed and self.fixed(src) and env[src].flags.c_contiguous:
            env[vid] = env[src].reshape(shape)
        elif dst_fixed:
            self.rebound.add(vid)

            def rebind() -> None:
                env[vid] = env[src].reshape(shape)

            self.steps.append(rebind)
        else:

            def copy() -> None:
                np.copyto(env[vid], env[src].reshape(shape))

            self.steps.append(copy)

    def getter(self, vid: int) -> Callable[[], NDArray]:
        """A function returning the value's array at run time."""
        env = self.env
        if self.fixed(vid) or self.const(vid) is not None:
            arr = env[vid]
            return lambda: arr
        return lambda: env[vid]

    def step(self, fn: Step) -> None:
        self.steps.append(fn)


# What the official preprocess writes in a node's debug_handle when it has none.
NO_DEBUG_HANDLE = 65535


def _output_ids(node: Any) -> list[int]:
    """The values a node writes (for logging them as intermediate outputs)."""
    if hasattr(node, "output_id"):
        return [node.output_id]
    if hasattr(node, "output_ids"):
        return list(node.output_ids)
    return [node.output_value_id]


def node_event(tracer: Any, k: int, nodes: list[S.XNode]) -> tuple[int, int | None, str]:
    """(event key in ``tracer``, debug id, label) of nodes ``k``... run as one timed call:
    identified by the first node's ``debug_handle`` (the key of the delegate's debug-handle
    map; ours numbers the nodes from 0) when it has one, else by the label, the nodes'
    types joined by ``+`` and ``k``."""
    kind = "+".join(type(n.xnode_union).__name__ for n in nodes)
    handle = nodes[0].debug_handle
    debug_id = None if handle == NO_DEBUG_HANDLE else handle
    label = f"{kind} #{k}"
    return tracer.delegate_key(debug_id, label, kind.encode()), debug_id, label


def _traced_steps(
    b: Builder, spans: list[tuple[int, S.XNode, int, int]], tracer: Any
) -> list[Step]:
    """One step per node, timed into ``tracer`` (a runtime EventTracer), outputs logged
    (each node's event: :func:`node_event`)."""
    from pyexecutorch.runtime.etdump import clock  # noqa: PLC0415 - only traced plans need it

    env = b.env
    traced: list[Step] = []
    for k, node, first, end in spans:
        key, debug_id, label = node_event(tracer, k, [node])
        outs = _output_ids(node.xnode_union) if tracer.logs_delegate_outputs else []

        def step(
            steps: tuple[Step, ...] = tuple(b.steps[first:end]),
            key: int = key,
            outs: list[int] = outs,
            debug_id: int | None = debug_id,
            label: str = label,
        ) -> None:
            start = clock()
            for s in steps:
                s()
            tracer.record_delegate(key, start, clock())
            for vid in outs:
                tracer.log_delegate_output(env[vid], debug_id, label)

        traced.append(step)
    return traced


def same_memory_shape(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether two shapes differ in dimensions of size 1 only."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


class Plan:
    """The graph specialised to one set of input shapes."""

    compiled = False  # (see compiled.CompiledPlan)

    def __init__(
        self,
        graph: Graph,
        input_shapes: tuple[tuple[int, ...], ...],
        tracer: Any = None,
        declared: bool = False,
    ) -> None:
        b = Builder(graph, input_shapes, declared)
        spans = []
        for k, node in enumerate(graph.nodes):
            name = type(node.xnode_union).__name__
            b.where = f"node {k} ({name})"
            first = len(b.steps)
            BUILDERS[name](b, node.xnode_union, node)
            spans.append((k, node, first, len(b.steps)))
        self.steps = b.steps if tracer is None else _traced_steps(b, spans, tracer)
        self.env = b.env
        self.inputs = [(v.id, v.external_id, v.dtype) for v in graph.inputs]
        # (value, external id, shape, dtype, own buffer, may bind the caller's array)
        self.outputs: list[tuple[int, int, tuple[int, ...], np.dtype, NDArray, bool]] = []
        for v in graph.outputs:
            shape = b.shapes.get(v.id)
            if shape is None:
                raise XnnpackError(f"output value {v.id} is never written")
            self.outputs.append((v.id, v.external_id, shape, v.dtype, b.env[v.id], v.const is None))
        self.accepted: list[Any] = [None] * len(self.outputs)

    def run(self, args: list[Any]) -> list[Any] | None:
        env, accepted = self.env, self.accepted
        # Outputs are computed straight into the caller's arrays where they fit
        # (checked once per array object), else into the plan's own buffers.
        for k, (vid, ext, shape, dtype, own, bindable) in enumerate(self.outputs):
            a = args[ext]
            if a is accepted[k]:
                env[vid] = a
            elif (
                bindable
                and type(a) is np.ndarray
                and a.shape == shape
                and a.dtype == dtype
                and a.flags.c_contiguous
                and a.flags.writeable
            ):
                env[vid] = accepted[k] = a
            else:
                env[vid] = own
        for vid, ext, dtype in self.inputs:
            a = args[ext]
            if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
                a = np.ascontiguousarray(a, dtype=dtype)
            env[vid] = a
        for step in self.steps:
            step()
        result = None
        replaced: list[tuple[int, NDArray]] = []
        for vid, ext, shape, dtype, own, _ in self.outputs:
            a = args[ext]
            val = env[vid]
            if val is a:
                env[vid] = own
                continue
            if type(a) is np.ndarray and a.dtype == dtype and a.flags.writeable:
                if a.flags.c_contiguous and same_memory_shape(a.shape, shape):
                    np.copyto(a.reshape(shape), val)  # (its own array: a scalar's rank aside)
                    continue
                try:
                    dst = a if a.shape == shape else fit(a, shape)
                except ValueError:
                    dst = None
                if dst is not None:
                    np.copyto(dst, val)
                    if dst is not a:
                        replaced.append((ext, dst))
                    continue
            replaced.append((ext, np.array(val, dtype=dtype, copy=True)))
        if replaced:
            result = list(args)
            for ext, arr in replaced:
                result[ext] = arr
        return result
