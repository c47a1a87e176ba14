"""Method and tensor metadata, readable without loading a method.

``MethodMeta`` and ``TensorInfo`` answer the same questions, with the same
``repr``, as the official bindings' classes of those names.
"""

from __future__ import annotations

import enum
import math

from pyexecutorch.runtime.tensors import dim_order_of
from pyexecutorch.schema.program import (
    Bool,
    BoolList,
    DeviceType,
    Double,
    DoubleList,
    ExecutionPlan,
    Int,
    IntList,
    Null,
    OptionalTensorList,
    String,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)
from pyexecutorch.schema.scalar_type import (
    SCALAR_TYPE_ITEMSIZE,
    SCALAR_TYPE_NAME,
    SCALAR_TYPE_TORCH_NAME,
    ScalarType,
)


class Tag(enum.IntEnum):
    """The kind of a method input or output (the runtime's EValue tag numbering)."""

    None_ = 0
    Tensor = 1
    String = 2
    Double = 3
    Int = 4
    Bool = 5
    ListBool = 6
    ListDouble = 7
    ListInt = 8
    ListTensor = 9
    ListScalar = 10
    ListOptionalTensor = 11

    def __str__(self) -> str:
        return "None" if self is Tag.None_ else self.name


_TAG_OF = {
    type(None): Tag.None_,
    Null: Tag.None_,
    Tensor: Tag.Tensor,
    String: Tag.String,
    Double: Tag.Double,
    Int: Tag.Int,
    Bool: Tag.Bool,
    BoolList: Tag.ListBool,
    DoubleList: Tag.ListDouble,
    IntList: Tag.ListInt,
    TensorList: Tag.ListTensor,
    OptionalTensorList: Tag.ListOptionalTensor,
}


def tag_of(value: object) -> Tag:
    """The tag of one program value (the ``val`` of an ``EValue``)."""
    return _TAG_OF.get(type(value), Tag.None_)


def scalar_type_name(scalar_type: int) -> str:
    """The runtime's name of a scalar type (``Float``), or its number when unknown."""
    try:
        return SCALAR_TYPE_NAME[ScalarType(scalar_type)]
    except (KeyError, ValueError):
        return str(int(scalar_type))


def is_memory_planned(tensor: Tensor) -> bool:
    """Whether a tensor has storage before any input arrives: planned memory or
    constant data (the official metadata counts constants as planned)."""
    return tensor.allocation_info is not None or tensor.data_buffer_idx != 0


class TensorInfo:
    """Shape, dtype and placement of one tensor of a method."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Tensor) -> None:
        self._tensor = tensor

    def sizes(self) -> tuple[int, ...]:
        """The size of each dimension (the upper bounds for a dynamic shape)."""
        return tuple(self._tensor.sizes)

    def dtype(self) -> int:
        """The ScalarType code (``6`` is Float)."""
        return int(self._tensor.scalar_type)

    def dtype_name(self) -> str:
        """torch's name of the dtype (``float32``)."""
        try:
            return SCALAR_TYPE_TORCH_NAME[ScalarType(self._tensor.scalar_type)]
        except (KeyError, ValueError):
            return scalar_type_name(self._tensor.scalar_type)

    def dim_order(self) -> tuple[int, ...]:
        """The order of the dimensions in memory, outermost first."""
        return dim_order_of(self._tensor)

    def is_memory_planned(self) -> bool:
        return is_memory_planned(self._tensor)

    def is_dynamic(self) -> bool:
        """Whether the shape may change per call (``sizes()`` are then its upper bounds).
        Not in the official bindings, whose ``TensorInfo`` does not say."""
        return self._tensor.shape_dynamism != TensorShapeDynamism.STATIC

    def nbytes(self) -> int:
        try:
            itemsize = SCALAR_TYPE_ITEMSIZE[ScalarType(self._tensor.scalar_type)]
        except (KeyError, ValueError):
            itemsize = 0
        return math.prod(self._tensor.sizes) * itemsize

    def device(self) -> str:
        """Where the tensor lives: ``"cpu"`` or ``"cuda:N"``."""
        extra = self._tensor.extra_tensor_info
        if extra is not None and extra.device_type == DeviceType.CUDA:
            return f"cuda:{extra.device_index}"
        return "cpu"

    def __repr__(self) -> str:
        sizes = ", ".join(str(s) for s in self._tensor.sizes)
        return (
            f"TensorInfo(sizes=[{sizes}], dtype={scalar_type_name(self._tensor.scalar_type)}, "
            f"is_memory_planned={self.is_memory_planned()}, nbytes={self.nbytes()})"
        )

    __str__ = __repr__


class MethodMeta:
    """What a method takes and returns, and the memory it plans."""

    # Whether ``repr`` may describe a non-tensor input by its tag. The official
    # bindings raise ``IndexError`` there instead; ``portable_lib`` does too.
    _REPR_TAGS_OF_INPUTS = True

    def __init__(self, plan: ExecutionPlan) -> None:
        self._plan = plan
        self._attributes = [
            i
            for i, ev in enumerate(plan.values)
            if isinstance(ev.val, Tensor)
            and ev.val.extra_tensor_info is not None
            and ev.val.extra_tensor_info.fully_qualified_name is not None
        ]

    def name(self) -> str:
        return self._plan.name

    def num_inputs(self) -> int:
        return len(self._plan.inputs)

    def num_outputs(self) -> int:
        return len(self._plan.outputs)

    def num_attributes(self) -> int:
        """Tensors with a name of their own (mutable buffers, external constants)."""
        return len(self._attributes)

    def _tensor_info(self, indices: list[int], i: int, what: str) -> TensorInfo:
        head = f"Cannot get {what} tensor meta at {i}"
        if not 0 <= i < len(indices):
            raise IndexError(f"{head}: method '{self.name()}' has {len(indices)} {what}s")
        val = self._plan.values[indices[i]].val
        if not isinstance(val, Tensor):
            raise IndexError(
                f"{head}: {what} {i} of method '{self.name()}' is {tag_of(val)}, not a tensor"
            )
        return TensorInfo(val)

    def input_tensor_meta(self, index: int) -> TensorInfo:
        return self._tensor_info(self._plan.inputs, index, "input")

    def output_tensor_meta(self, index: int) -> TensorInfo:
        return self._tensor_info(self._plan.outputs, index, "output")

    def attribute_tensor_meta(self, index: int) -> TensorInfo:
        return self._tensor_info(self._attributes, index, "attribute")

    def _tag(self, indices: list[int], i: int, what: str) -> Tag:
        if not 0 <= i < len(indices):
            raise IndexError(
                f"Cannot get Tag for {what} at {i}: method '{self.name()}' has {len(indices)} {what}s"
            )
        return tag_of(self._plan.values[indices[i]].val)

    def input_tag(self, index: int) -> Tag:
        return self._tag(self._plan.inputs, index, "input")

    def output_tag(self, index: int) -> Tag:
        return self._tag(self._plan.outputs, index, "output")

    def num_memory_planned_buffers(self) -> int:
        # Buffer 0 is reserved by the format; the planned arenas start at 1.
        return max(len(self._plan.non_const_buffer_sizes) - 1, 0)

    def memory_planned_buffer_size(self, index: int) -> int:
        if not 0 <= index < self.num_memory_planned_buffers():
            raise IndexError(
                f"Cannot get size of memory planned buffer {index}: method '{self.name()}' has "
                f"{self.num_memory_planned_buffers()}"
            )
        return self._plan.non_const_buffer_sizes[index + 1]

    def __repr__(self) -> str:
        inputs = []
        for i in range(self.num_inputs()):
            tag = self.input_tag(i)
            if tag == Tag.Tensor or not self._REPR_TAGS_OF_INPUTS:
                inputs.append(
                    repr(self.input_tensor_meta(i))
                )  # IndexError for a non-tensor, as official
            else:
                inputs.append(str(tag))
        outputs = []
        for i in range(self.num_outputs()):
            tag = self.output_tag(i)
            outputs.append(repr(self.output_tensor_meta(i)) if tag == Tag.Tensor else str(tag))
        return (
            f"MethodMeta(name='{self.name()}', num_inputs={self.num_inputs()}, input_tensor_meta={inputs!r}, "
            f"num_outputs={self.num_outputs()}, output_tensor_meta={outputs!r})"
        )

    __str__ = __repr__
