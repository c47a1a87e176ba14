"""Method and tensor metadata, readable without loading a method."""

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
)
from pyexecutorch.schema.scalar_type import (
    SCALAR_TYPE_ITEMSIZE,
    SCALAR_TYPE_NAME,
    SCALAR_TYPE_TO_DTYPE,
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

# torch's names for dtypes, as ``TensorInfo.dtype_name`` reports them.
_TORCH_DTYPE_NAME = {st: f"{dt.name}" for st, dt in SCALAR_TYPE_TO_DTYPE.items()}
_TORCH_DTYPE_NAME.update({ScalarType.BOOL: "bool", ScalarType.BFLOAT16: "bfloat16", ScalarType.HALF: "float16"})


class TensorInfo:
    """Shape, dtype and placement of one tensor of a method."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: Tensor) -> None:
        self._tensor = tensor

    def sizes(self) -> tuple[int, ...]:
        return tuple(self._tensor.sizes)

    def dtype(self) -> int:
        """The ScalarType code (``6`` is Float)."""
        return int(self._tensor.scalar_type)

    def dtype_name(self) -> str:
        """torch's name of the dtype (``float32``)."""
        st = ScalarType(self._tensor.scalar_type)
        return _TORCH_DTYPE_NAME.get(st, SCALAR_TYPE_NAME[st])

    def dim_order(self) -> tuple[int, ...]:
        return dim_order_of(self._tensor)

    def is_memory_planned(self) -> bool:
        return self._tensor.allocation_info is not None

    def nbytes(self) -> int:
        return math.prod(self._tensor.sizes) * SCALAR_TYPE_ITEMSIZE[ScalarType(self._tensor.scalar_type)]

    def device(self) -> str:
        extra = self._tensor.extra_tensor_info
        if extra is not None and extra.device_type == DeviceType.CUDA:
            return f"cuda:{extra.device_index}"
        return "cpu"

    def __repr__(self) -> str:
        sizes = ", ".join(str(s) for s in self._tensor.sizes)
        name = SCALAR_TYPE_NAME.get(self._tensor.scalar_type, str(int(self._tensor.scalar_type)))
        planned = "True" if self.is_memory_planned() else "False"
        return f"TensorInfo(sizes=[{sizes}], dtype={name}, is_memory_planned={planned}, nbytes={self.nbytes()})"

    __str__ = __repr__


class MethodMeta:
    """What a method takes and returns, and the memory it plans."""

    def __init__(self, plan: ExecutionPlan) -> None:
        self._plan = plan
        self._attributes = [
            i
            for i, ev in enumerate(plan.values)
            if isinstance(ev.val, Tensor)
            and ev.val.extra_tensor_info is not None
            and ev.val.extra_tensor_info.fully_qualified_name
            and ev.val.allocation_info is not None
        ]

    def name(self) -> str:
        return self._plan.name

    def num_inputs(self) -> int:
        return len(self._plan.inputs)

    def num_outputs(self) -> int:
        return len(self._plan.outputs)

    def num_attributes(self) -> int:
        return len(self._attributes)

    def _tensor_info(self, indices: list[int], i: int, what: str) -> TensorInfo:
        if not 0 <= i < len(indices):
            raise IndexError(f"Cannot get {what} tensor meta at {i}: method '{self.name()}' has {len(indices)} {what}s")
        val = self._plan.values[indices[i]].val
        if not isinstance(val, Tensor):
            raise IndexError(f"{what} {i} of method '{self.name()}' is not a tensor ({self._tag(indices[i])})")
        return TensorInfo(val)

    def _tag(self, value_index: int) -> Tag:
        return _TAG_OF.get(type(self._plan.values[value_index].val), Tag.None_)

    def input_tensor_meta(self, i: int) -> TensorInfo:
        return self._tensor_info(self._plan.inputs, i, "input")

    def output_tensor_meta(self, i: int) -> TensorInfo:
        return self._tensor_info(self._plan.outputs, i, "output")

    def attribute_tensor_meta(self, i: int) -> TensorInfo:
        return self._tensor_info(self._attributes, i, "attribute")

    def input_tag(self, i: int) -> Tag:
        if not 0 <= i < self.num_inputs():
            raise IndexError(f"Cannot get Tag for input at {i}: method '{self.name()}' has {self.num_inputs()} inputs")
        return self._tag(self._plan.inputs[i])

    def output_tag(self, i: int) -> Tag:
        if not 0 <= i < self.num_outputs():
            raise IndexError(f"Cannot get Tag for output at {i}: method '{self.name()}' has {self.num_outputs()} outputs")
        return self._tag(self._plan.outputs[i])

    def num_memory_planned_buffers(self) -> int:
        # Buffer 0 is reserved by the format; the planned arenas start at 1.
        return max(len(self._plan.non_const_buffer_sizes) - 1, 0)

    def memory_planned_buffer_size(self, i: int) -> int:
        if not 0 <= i < self.num_memory_planned_buffers():
            raise IndexError(
                f"memory planned buffer {i} out of range: method '{self.name()}' has "
                f"{self.num_memory_planned_buffers()}"
            )
        return self._plan.non_const_buffer_sizes[i + 1]

    def __repr__(self) -> str:
        inputs = [repr(self.input_tensor_meta(i)) if self.input_tag(i) == Tag.Tensor else str(self.input_tag(i)) for i in range(self.num_inputs())]
        outputs = [
            repr(self.output_tensor_meta(i)) if self.output_tag(i) == Tag.Tensor else str(self.output_tag(i))
            for i in range(self.num_outputs())
        ]
        return (
            f"MethodMeta(name='{self.name()}', num_inputs={self.num_inputs()}, input_tensor_meta={inputs!r}, "
            f"num_outputs={self.num_outputs()}, output_tensor_meta={outputs!r})"
        )

    __str__ = __repr__
