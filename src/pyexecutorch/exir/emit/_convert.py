"""Conversions from torch/FX objects to the program format's tables.

Small, table-driven helpers shared by the method emitter and the program
state: dtype and enum codes, tensor specs to ``Tensor`` tables, constant
bytes, container (pytree) strings, stack-trace frames, and the error type the
emitter raises.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from pyexecutorch.exir.tensor_spec import TORCH_TO_SCALAR_TYPE
from pyexecutorch.schema.program import (
    AllocationDetails,
    DeviceType,
    ExtraTensorInfo,
    Frame,
    FrameList,
    Tensor,
    TensorDataLocation,
    TensorShapeDynamism,
)
from pyexecutorch.schema.scalar_type import ScalarType


class EmitError(RuntimeError):
    """Emission failed; the message names the method, the node and its source line."""


LAYOUT_CODE = {torch.strided: 0, torch.sparse_coo: 1}
MEMORY_FORMAT_CODE = {torch.contiguous_format: 0, torch.preserve_format: 1}


def scalar_type(dtype: torch.dtype) -> ScalarType:
    try:
        return TORCH_TO_SCALAR_TYPE[dtype]
    except KeyError:
        raise EmitError(f"dtype {dtype} has no ExecuTorch scalar type") from None


# ---------------------------------------------------------------------------
# Tensor specs


def is_tensor_spec(spec: Any) -> bool:
    """A tensor spec (ours or the official one): anything with a dtype and a shape."""
    return hasattr(spec, "dtype") and hasattr(spec, "shape") and hasattr(spec, "mem_id")


def spec_dim_order(spec: Any) -> list[int]:
    order = getattr(spec, "dim_order", None)
    if order is None:
        return list(range(len(spec.shape)))
    return [int(d) for d in order]


def spec_dynamism(spec: Any) -> TensorShapeDynamism:
    value = getattr(spec, "shape_dynamism", None)
    return TensorShapeDynamism.STATIC if value is None else TensorShapeDynamism(int(value))


def spec_allocation(spec: Any) -> AllocationDetails | None:
    mem_id = spec.mem_id
    offset = spec.mem_offset
    if mem_id is None or offset is None:
        return None
    if offset < 0 or offset >= 1 << 64:
        raise EmitError(
            f"memory offset {offset} of a {tuple(spec.shape)} {spec.dtype} tensor does not fit in 64 bits; "
            "a dynamic dimension probably lacks an upper bound (give torch.export.Dim a max)"
        )
    return AllocationDetails.at(int(mem_id), int(offset))


def spec_extra_info(spec: Any) -> ExtraTensorInfo | None:
    """Convert a spec's ``extra_tensor_info`` (ours or the official one) to our table,
    with the spec's device where it is not the host (as the official emitter writes it:
    a host tensor's table is left out, to keep programs small)."""
    info = getattr(spec, "extra_tensor_info", None)
    if info is not None and not isinstance(info, ExtraTensorInfo):
        info = ExtraTensorInfo(
            mutable_data_segments_idx=int(getattr(info, "mutable_data_segments_idx", 0) or 0),
            fully_qualified_name=getattr(info, "fully_qualified_name", None),
            location=TensorDataLocation(int(getattr(info, "location", 0))),
        )
    device = DeviceType(int(getattr(spec, "device", DeviceType.CPU)))
    if device == DeviceType.CPU:
        return info
    return dataclasses.replace(
        info or ExtraTensorInfo(),
        device_type=device,
        device_index=int(getattr(spec, "device_index", 0)),
    )


def is_external(info: ExtraTensorInfo | None) -> bool:
    return (
        info is not None
        and info.fully_qualified_name is not None
        and info.location == TensorDataLocation.EXTERNAL
    )


def make_tensor(
    spec: Any,
    *,
    data_buffer_idx: int = 0,
    allocation: AllocationDetails | None = None,
    extra: ExtraTensorInfo | None = None,
    dynamism: TensorShapeDynamism | None = None,
) -> Tensor:
    sizes = [int(s) for s in spec.shape]
    return Tensor(
        scalar_type=scalar_type(spec.dtype),
        storage_offset=0,
        sizes=sizes,
        dim_order=spec_dim_order(spec),
        requires_grad=bool(getattr(spec, "requires_grad", False)),
        data_buffer_idx=data_buffer_idx,
        allocation_info=allocation,
        layout=0,
        shape_dynamism=spec_dynamism(spec) if dynamism is None else dynamism,
        extra_tensor_info=extra,
    )


def empty_tensor() -> Tensor:
    """The placeholder for an absent, non-optional tensor argument (as the official emitter writes it)."""
    return Tensor(scalar_type=ScalarType.BYTE, sizes=[0], dim_order=[0])


class TensorFromTensor:
    """A minimal spec for a concrete tensor (constant-method values, get_attr constants)."""

    __slots__ = (
        "dtype",
        "shape",
        "dim_order",
        "requires_grad",
        "shape_dynamism",
        "mem_id",
        "mem_offset",
    )

    def __init__(self, t: torch.Tensor) -> None:
        self.dtype = t.dtype
        self.shape = tuple(t.shape)
        self.dim_order = dim_order_of(t)
        self.requires_grad = False
        self.shape_dynamism = TensorShapeDynamism.STATIC
        self.mem_id = None
        self.mem_offset = None


def dim_order_of(t: torch.Tensor) -> tuple[int, ...]:
    """The dim order of a dense tensor: dimensions from outermost to innermost stride."""
    if t.dim() <= 1 or t.is_contiguous():
        return tuple(range(t.dim()))
    strides = t.stride()
    return tuple(sorted(range(t.dim()), key=lambda d: (-strides[d], d)))


def tensor_bytes(t: Any, dim_order: list[int] | None) -> np.ndarray:
    """The bytes of a constant as a flat uint8 array, laid out in ``dim_order``.

    No copy when the tensor is already dense in that order.
    """
    if isinstance(t, torch.UntypedStorage):
        holder = torch.empty(0, dtype=torch.uint8)
        holder.set_(t)
        return holder.numpy()
    t = t.detach()
    if t.is_quantized:
        raise EmitError(
            f"quantized constant tensors ({t.dtype}) cannot be emitted; quantize with a backend"
        )
    if (
        dim_order is not None
        and len(dim_order) == t.dim()
        and list(dim_order) != list(range(t.dim()))
    ):
        t = t.permute(dim_order)
    t = t.contiguous()
    if t.numel() == 0:
        return np.empty(0, dtype=np.uint8)
    return t.reshape(-1).view(torch.uint8).numpy()


# ---------------------------------------------------------------------------
# Container metadata


def _plain_spec(spec: pytree.TreeSpec) -> pytree.TreeSpec:
    """``spec`` with containers that have no serialized name (named tuples of torch.return_types) as tuples."""
    if spec.is_leaf():
        return spec
    children = [_plain_spec(c) for c in spec.children_specs]
    node_type = spec.type
    context = spec.context
    if node_type not in pytree.SUPPORTED_SERIALIZED_TYPES:
        node_type, context = tuple, None
    return pytree.TreeSpec(node_type, context, children)


def container_string(spec: pytree.TreeSpec | None) -> str:
    """The pytree spec string the official emitter writes for a method's inputs or outputs."""
    if spec is None:
        return ""
    tree = pytree.tree_unflatten([0] * spec.num_leaves, spec)
    _, flat_spec = pytree.tree_flatten(tree)
    try:
        return pytree.treespec_dumps(flat_spec)
    except (NotImplementedError, TypeError, KeyError):
        return pytree.treespec_dumps(_plain_spec(flat_spec))


# ---------------------------------------------------------------------------
# Stack traces

_FRAME = re.compile(r'File "(.*?)", line (\d+), in (.*?)\n([^\n]*)')


def frames_of(stack_trace: str | None) -> FrameList:
    if not stack_trace:
        return FrameList([])
    return FrameList(
        [
            Frame(filename=f, lineno=int(line), name=name, context=ctx.strip())
            for f, line, name, ctx in _FRAME.findall(stack_trace)
        ]
    )


def source_line(node: torch.fx.Node) -> str:
    """``file:line`` of the user code a node came from, or ``""``."""
    trace = node.meta.get("stack_trace")
    if not trace:
        return ""
    found = _FRAME.findall(trace)
    if not found:
        return ""
    f, line, _, ctx = found[-1]
    return f"{f}:{line}" + (f" ({ctx.strip()})" if ctx.strip() else "")
