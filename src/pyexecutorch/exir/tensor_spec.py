"""``TensorSpec``: what the compiler knows about one tensor value.

Every graph node that produces a tensor carries ``node.meta["spec"]`` (a tuple
or list of specs for multi-output nodes).  Passes fill the shape/dtype fields,
memory planning fills ``mem_id``/``mem_offset``/``lifetime``, and the emitter
turns each spec into one ``schema.Tensor`` value.

Conventions (shared with the emitter):

- ``shape`` is a tuple of ints; for dynamic dimensions it holds the upper
  bound, and ``shape_dynamism`` says whether the shape is static.
- ``dim_order`` is the memory order of the dimensions (contiguous = 0..n-1).
- ``const`` specs are constants lifted into the program; ``storage`` holds
  their (contiguous) torch tensor.
- ``mem_id`` 1 is the planned arena, ``None`` means "not planned"; a pass may
  put tensors in other pools (ids 2, 3, ...) before planning, and non-CPU devices
  get arenas of their own after the CPU ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from pyexecutorch.schema.program import DeviceType, ExtraTensorInfo, TensorShapeDynamism
from pyexecutorch.schema.scalar_type import ScalarType

ALIGNMENT = 16

TORCH_TO_SCALAR_TYPE: dict[torch.dtype, ScalarType] = {
    torch.uint8: ScalarType.BYTE,
    torch.int8: ScalarType.CHAR,
    torch.int16: ScalarType.SHORT,
    torch.int32: ScalarType.INT,
    torch.int64: ScalarType.LONG,
    torch.float16: ScalarType.HALF,
    torch.float32: ScalarType.FLOAT,
    torch.float64: ScalarType.DOUBLE,
    torch.complex32: ScalarType.COMPLEX32,
    torch.complex64: ScalarType.COMPLEX64,
    torch.complex128: ScalarType.COMPLEX128,
    torch.bool: ScalarType.BOOL,
    torch.qint8: ScalarType.QINT8,
    torch.quint8: ScalarType.QUINT8,
    torch.qint32: ScalarType.QINT32,
    torch.bfloat16: ScalarType.BFLOAT16,
    torch.quint4x2: ScalarType.QUINT4X2,
    torch.float8_e5m2: ScalarType.FLOAT8E5M2,
    torch.float8_e4m3fn: ScalarType.FLOAT8E4M3FN,
    torch.uint16: ScalarType.UINT16,
    torch.uint32: ScalarType.UINT32,
    torch.uint64: ScalarType.UINT64,
    torch.quint2x4: ScalarType.QUINT2X4,
    torch.bits16: ScalarType.BITS16,
    torch.float8_e5m2fnuz: ScalarType.FLOAT8E5M2FNUZ,
    torch.float8_e4m3fnuz: ScalarType.FLOAT8E4M3FNUZ,
}
SCALAR_TYPE_TO_TORCH: dict[ScalarType, torch.dtype] = {
    v: k for k, v in TORCH_TO_SCALAR_TYPE.items()
}


def scalar_type_of_torch(dtype: torch.dtype) -> ScalarType:
    """The program format's scalar type for a torch dtype."""
    try:
        return TORCH_TO_SCALAR_TYPE[dtype]
    except KeyError:
        raise TypeError(f"dtype {dtype} has no ExecuTorch scalar type") from None


def aligned(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """``nbytes`` rounded up to a multiple of ``alignment``."""
    return -(-nbytes // alignment) * alignment


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def dim_order_from_strides(strides: tuple[int, ...]) -> tuple[int, ...]:
    """Outer-most to inner-most dimension; ties keep their original order."""
    return tuple(sorted(range(len(strides)), key=lambda d: -strides[d]))


def strides_from_dim_order(shape: tuple[int, ...], dim_order: tuple[int, ...]) -> tuple[int, ...]:
    strides = [0] * len(shape)
    acc = 1
    for d in reversed(dim_order):
        strides[d] = acc
        acc *= max(shape[d], 1)
    return tuple(strides)


@dataclass(eq=False)
class TensorSpec:
    """Metadata of one tensor value (identity matters: compare with ``is``)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    shape_dynamism: TensorShapeDynamism = TensorShapeDynamism.STATIC
    dim_order: tuple[int, ...] | None = None
    const: bool = False
    storage: torch.Tensor | None = None
    requires_grad: bool = False
    mem_id: int | None = None
    mem_offset: int | None = None
    mem_obj_id: int | None = None  # the official planners' shared-object index
    lifetime: list[Any] = field(default_factory=lambda: [None, None])
    is_user_input: bool = False
    is_mutable_buffer: bool = False
    fqn: str | None = None
    extra_tensor_info: ExtraTensorInfo | None = None
    alignment: int = ALIGNMENT
    layout: torch.layout = torch.strided
    # Compiler bookkeeping (not emitted): the spec whose memory this one
    # shares (views, in-place write-backs), and its byte offset there.
    storage_base: TensorSpec | None = None
    storage_base_offset: int = 0
    # Where the tensor lives (a delegate's inputs and outputs may be device memory);
    # with non-CPU planning each device gets its own arenas.
    device: DeviceType = DeviceType.CPU
    device_index: int = 0

    def __post_init__(self) -> None:
        self.shape = tuple(int(s) for s in self.shape)
        if self.dim_order is None:
            self.dim_order = tuple(range(len(self.shape)))
        else:
            self.dim_order = tuple(int(d) for d in self.dim_order)

    # ---- sizes -----------------------------------------------------------
    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def nbytes(self) -> int:
        """Bytes of the (upper-bound) contiguous data."""
        return self.numel * self.dtype.itemsize

    @property
    def allocated_memory(self) -> int:
        """Bytes the planner reserves: ``nbytes`` rounded up to the alignment."""
        return aligned(self.nbytes(), self.alignment)

    def realign(self, new_alignment: int) -> int:
        """Plan this tensor at ``new_alignment``; returns the bytes it then takes."""
        self.alignment = new_alignment
        return self.allocated_memory

    # ---- views of the same facts under other names -------------------------
    @property
    def scalar_type(self) -> torch.dtype:
        """The official ``TensorSpec`` calls the dtype ``scalar_type``."""
        return self.dtype

    @property
    def schema_scalar_type(self) -> ScalarType:
        return scalar_type_of_torch(self.dtype)

    @property
    def stride(self) -> tuple[int, ...]:
        return strides_from_dim_order(self.shape, self.dim_order)

    @property
    def is_static_shape_tensor(self) -> bool:
        return self.shape_dynamism == TensorShapeDynamism.STATIC

    @property
    def is_dynamic_shape_tensor(self) -> bool:
        return self.shape_dynamism != TensorShapeDynamism.STATIC

    @property
    def is_upper_bound_tensor(self) -> bool:
        return self.shape_dynamism == TensorShapeDynamism.DYNAMIC_BOUND

    @property
    def is_planned(self) -> bool:
        return self.mem_id is not None and self.mem_offset is not None

    # ---- construction --------------------------------------------------------
    @classmethod
    def from_tensor(cls, tensor: torch.Tensor, const: bool = False) -> TensorSpec:
        """A spec for a concrete tensor; constants keep a contiguous copy."""
        shape = tuple(tensor.shape)
        if const:
            data = tensor.detach()
            if not data.is_contiguous() or data.untyped_storage().nbytes() != data.nbytes:
                data = data.contiguous().clone()
            return cls(
                dtype=tensor.dtype,
                shape=shape,
                const=True,
                storage=data,
                requires_grad=tensor.requires_grad,
                layout=tensor.layout,
            )
        dim_order = (
            dim_order_from_strides(tuple(tensor.stride()))
            if tensor.layout == torch.strided
            else None
        )
        return cls(
            dtype=tensor.dtype,
            shape=shape,
            dim_order=dim_order,
            requires_grad=tensor.requires_grad,
            layout=tensor.layout,
        )

    def init_mem_planning_fields(self) -> None:
        self.lifetime = [None, None]
        self.mem_id = None
        self.mem_offset = None
        self.mem_obj_id = None

    def __repr__(self) -> str:
        extra = ""
        if self.mem_id is not None:
            extra = (
                f", mem_id={self.mem_id}, mem_offset={self.mem_offset}, lifetime={self.lifetime}"
            )
        dyn = "" if self.is_static_shape_tensor else f", {self.shape_dynamism.name}"
        const = ", const" if self.const else ""
        device = f", device={self.device.name}:{self.device_index}"
        return f"TensorSpec({self.dtype}, {list(self.shape)}{dyn}{const}{device}{extra})"
