"""Caller inputs in: the checks and conversions at the boundary.

Inputs are read into numpy arrays (tensors) or Python values (scalars):

- numpy arrays and any object with the buffer protocol, typed by the PEP 3118
  format and item size; native byte order and dense layouts only; read-only
  memory is copied, since a method may write its inputs;
- torch tensors, recognised only when torch is already imported (this module
  never imports it) and read through the tensor the caller passed;
- DLPack producers (``__dlpack__``) and capsules;
- Python and NumPy numbers for inputs the method declares as ``Int``,
  ``Double`` or ``Bool``, and ``None``.

A tensor dense in another dimension order than the method's is copied into the
method's order. Otherwise an input borrows the caller's memory: the method
reads it at every run, so a caller's later in-place change is seen, and a
torch tensor pointed at other storage since (``resize_``, ``set_``) is refused.

Outputs go back as :mod:`pyexecutorch.runtime.outputs` describes.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from pyexecutorch.runtime.errors import InputMismatchError
from pyexecutorch.runtime.meta import Tag, scalar_type_name, tag_of
from pyexecutorch.schema.program import ExecutionPlan, Tensor, TensorShapeDynamism
from pyexecutorch.schema.scalar_type import (
    DTYPE_TO_SCALAR_TYPE,
    SCALAR_TYPE_ITEMSIZE,
    SCALAR_TYPE_TO_DTYPE,
    ScalarType,
)

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts

OUTPUT_ENV = "PYEXECUTORCH_TENSOR_OUTPUT"
TENSOR_DIMENSION_LIMIT = 16

# The official runtime's error codes, which the official bindings print.
ERROR_NOT_SUPPORTED = 0x10
ERROR_INVALID_ARGUMENT = 0x12
ERROR_NOT_FOUND = 0x20
ERROR_ACCESS_FAILED = 0x22
ERROR_INVALID_PROGRAM = 0x23
ERROR_INVALID_EXTERNAL_DATA = 0x24

ST = ScalarType

# (kind, itemsize) of a number -> scalar type. The kind comes from a PEP 3118
# struct code or a numpy dtype kind; the width always from the item size, which
# also covers platform-sized codes such as 'l' and 'n'.
_BY_KIND_AND_SIZE: dict[tuple[str, int], ScalarType] = {
    ("b", 1): ST.BOOL,
    ("i", 1): ST.CHAR,
    ("i", 2): ST.SHORT,
    ("i", 4): ST.INT,
    ("i", 8): ST.LONG,
    ("u", 1): ST.BYTE,
    ("u", 2): ST.UINT16,
    ("u", 4): ST.UINT32,
    ("u", 8): ST.UINT64,
    ("f", 2): ST.HALF,
    ("f", 4): ST.FLOAT,
    ("f", 8): ST.DOUBLE,
    ("c", 8): ST.COMPLEX64,
    ("c", 16): ST.COMPLEX128,
}
_STRUCT_CODE_KIND = {
    "?": "b",
    **dict.fromkeys("bhilqn", "i"),
    **dict.fromkeys("BHILQN", "u"),
    **dict.fromkeys("efd", "f"),
}
_NATIVE_PREFIX = "<" if sys.byteorder == "little" else ">"

# torch dtype names (``str(tensor.dtype)`` without ``torch.``) -> scalar type.
_TORCH_DTYPES: dict[str, ScalarType] = {
    "uint8": ST.BYTE,
    "int8": ST.CHAR,
    "int16": ST.SHORT,
    "int32": ST.INT,
    "int64": ST.LONG,
    "float16": ST.HALF,
    "float32": ST.FLOAT,
    "float64": ST.DOUBLE,
    "complex32": ST.COMPLEX32,
    "complex64": ST.COMPLEX64,
    "complex128": ST.COMPLEX128,
    "bool": ST.BOOL,
    "bfloat16": ST.BFLOAT16,
    "float8_e5m2": ST.FLOAT8E5M2,
    "float8_e4m3fn": ST.FLOAT8E4M3FN,
    "float8_e5m2fnuz": ST.FLOAT8E5M2FNUZ,
    "float8_e4m3fnuz": ST.FLOAT8E4M3FNUZ,
    "uint16": ST.UINT16,
    "uint32": ST.UINT32,
    "uint64": ST.UINT64,
}
# Types numpy cannot hold are carried as raw bits of the same width.
_RAW_BITS = {ST.COMPLEX32: np.dtype(np.uint32)}
# torch dtypes numpy lacks (ml_dtypes holds them) cross over as integers of their width.
TORCH_BITS = {1: "uint8", 2: "int16", 4: "int32"}


def _torch_view(torch: Any, t: Any, dtype: np.dtype) -> np.ndarray:
    """The numpy array of a torch tensor whose dtype numpy only has through ml_dtypes."""
    return t.view(getattr(torch, TORCH_BITS[dtype.itemsize])).numpy().view(dtype)


def foreign(dtype: np.dtype) -> bool:
    """Whether numpy knows ``dtype`` only as a registered type (ml_dtypes: bfloat16, float8,
    int4, ...), which torch.from_numpy does not take and buffers cannot describe (their
    kind letter does not tell them apart: float8_e5m2's is "f")."""
    return dtype.isbuiltin == 2


# DLPack (type code, bits) -> scalar type.
_DLPACK_DTYPES: dict[tuple[int, int], ScalarType] = {
    (0, 8): ST.CHAR,
    (0, 16): ST.SHORT,
    (0, 32): ST.INT,
    (0, 64): ST.LONG,
    (1, 8): ST.BYTE,
    (1, 16): ST.UINT16,
    (1, 32): ST.UINT32,
    (1, 64): ST.UINT64,
    (2, 16): ST.HALF,
    (2, 32): ST.FLOAT,
    (2, 64): ST.DOUBLE,
    (4, 16): ST.BFLOAT16,
    (5, 32): ST.COMPLEX32,
    (5, 64): ST.COMPLEX64,
    (5, 128): ST.COMPLEX128,
    (6, 8): ST.BOOL,
}
_DLPACK_CPU, _DLPACK_CUDA = 1, 2


# ---------------------------------------------------------------- declarations


@dataclass(frozen=True)
class InputDecl:
    """What a method declares for one input."""

    position: int
    tag: Tag
    scalar_type: int = 0
    sizes: tuple[int, ...] = ()
    dim_order: tuple[int, ...] = ()
    dynamism: TensorShapeDynamism = TensorShapeDynamism.STATIC
    exported: Any = None  # the value a scalar input was exported with
    contiguous_order: bool = field(init=False)  # dim_order is 0, 1, 2, ...
    # (dtype, shape) of a static, contiguous tensor input numpy can hold: an array
    # matching it exactly needs none of the general checks (see read_input).
    fast_key: tuple[np.dtype, tuple[int, ...]] | None = field(init=False)

    def __post_init__(self) -> None:
        contiguous = self.dim_order == tuple(range(len(self.dim_order)))
        object.__setattr__(self, "contiguous_order", contiguous)
        dtype = SCALAR_TYPE_TO_DTYPE.get(self.scalar_type)
        static = self.tag == Tag.Tensor and self.dynamism == TensorShapeDynamism.STATIC
        key = (dtype, self.sizes) if static and contiguous and dtype is not None else None
        object.__setattr__(self, "fast_key", key)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.sizes, dtype=np.int64)) * SCALAR_TYPE_ITEMSIZE.get(
            ScalarType(self.scalar_type), 0
        )


def input_decls(plan: ExecutionPlan) -> list[InputDecl]:
    """The declaration of each input of ``plan``."""
    decls = []
    for position, index in enumerate(plan.inputs):
        val = plan.values[index].val
        tag = tag_of(val)
        if isinstance(val, Tensor):
            order = tuple(val.dim_order) if val.dim_order else tuple(range(len(val.sizes)))
            decls.append(
                InputDecl(
                    position,
                    tag,
                    int(val.scalar_type),
                    tuple(val.sizes),
                    order,
                    val.shape_dynamism,
                )
            )
        else:
            exported = {Tag.Int: "int_val", Tag.Double: "double_val", Tag.Bool: "bool_val"}.get(tag)
            decls.append(
                InputDecl(position, tag, exported=getattr(val, exported) if exported else None)
            )
    return decls


class ExactSlot(NamedTuple):
    """What one input must be to take the exact path (see runtime.exact_inputs)."""

    index: int  # value index
    dtype: np.dtype | None  # a tensor's dtype; None for a scalar input
    shape: tuple[int, ...]  # a tensor's shape, or its upper bound when dynamic
    planned: np.ndarray | None  # a planned tensor's storage
    dynamic: bool
    scalar: Any = None  # a scalar input: the value it was exported with (its type too)


_SCALAR_TAGS = (Tag.Int, Tag.Double, Tag.Bool)


def exact_slots(decls: Sequence[InputDecl], loaded: MethodFacts) -> list[ExactSlot]:
    """The exact form of each input of ``loaded`` (its MethodFacts).

    Empty when some input has none (a string or None input, an unbounded
    shape, a dim order numpy cannot hold): such methods always take the
    general path.
    """
    slots = []
    for decl, spec in zip(decls, loaded.inputs, strict=True):
        if decl.tag in _SCALAR_TAGS:
            slots.append(ExactSlot(spec.index, None, (), None, False, decl.exported))
            continue
        dtype = SCALAR_TYPE_TO_DTYPE.get(decl.scalar_type)
        bounded = decl.dynamism in (
            TensorShapeDynamism.STATIC,
            TensorShapeDynamism.DYNAMIC_BOUND,
        )
        if decl.tag != Tag.Tensor or not decl.contiguous_order or dtype is None or not bounded:
            return []
        planned = loaded.capacity[spec.index] if spec.planned else None
        dynamic = decl.dynamism != TensorShapeDynamism.STATIC
        slots.append(ExactSlot(spec.index, dtype, decl.sizes, planned, dynamic))
    return slots


# ---------------------------------------------------------------------- inputs


@dataclass
class Input:
    """One input read from the caller: what the method stores, and where it came from."""

    value: Any  # a numpy array for a tensor, else a Python value
    scalar_type: int | None = None  # set for tensors
    source: Any = None  # the caller's torch tensor whose memory ``value`` borrows
    storage: tuple[int, int] | None = None  # (address, nbytes) of that memory when passed

    @property
    def tag(self) -> Tag:
        if self.scalar_type is not None:
            return Tag.Tensor
        value = self.value
        if value is None:
            return Tag.None_
        if isinstance(value, bool):
            return Tag.Bool
        if isinstance(value, int):
            return Tag.Int
        return Tag.Double

    def check_storage(self, position: int, method: str) -> None:
        """Refuse a borrowed input whose storage the caller has changed since it was passed.

        Only torch tensors are watched: a buffer export pins its memory for as
        long as the view of it lives (numpy refuses to resize an array that is
        viewed, a bytearray to grow while exported), but a tensor can be pointed
        at other storage (``set_``, ``resize_``) while its old storage lives on.
        """
        if self.storage is not None and _torch_storage(self.source) != self.storage:
            raise ValueError(
                f"Input {position} of method '{method}': its storage changed after it was passed in; pass it again"
            )


def _named(cls: type[Exception], where: str, message: str) -> Exception:
    return cls(f"{where}: {message}")


def _where(position: int, method: str) -> str:
    return f"Input {position} of method '{method}'"


def is_torch_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, getattr(torch, "Tensor", ()))


def _is_capsule(value: Any) -> bool:
    return type(value).__name__ == "PyCapsule" and type(value).__module__ == "builtins"


def _has_buffer(value: Any) -> bool:
    if isinstance(value, (np.ndarray, np.generic, bytes, bytearray, memoryview)):
        return True
    try:
        memoryview(value).release()
    except TypeError:
        return False
    return True


def is_single_tensor(value: Any) -> bool:
    """Whether ``value`` is one tensor-like input rather than a sequence of inputs."""
    return (
        isinstance(value, (np.ndarray, np.generic))
        or is_torch_tensor(value)
        or hasattr(value, "__dlpack__")
        or _is_capsule(value)
        or _has_buffer(value)
    )


def normalize_inputs(inputs: Any) -> Sequence[Any]:
    """A flat sequence of inputs from a sequence or one tensor."""
    if type(inputs) in (list, tuple):
        return inputs
    if is_single_tensor(inputs):
        return [inputs]
    if isinstance(inputs, Mapping) or not (
        hasattr(inputs, "__getitem__") and hasattr(inputs, "__len__")
    ):
        raise TypeError("Inputs must be a tensor buffer or a flat sequence")
    return inputs


def read_input(value: Any, decl: InputDecl, method: str) -> Input:
    """Read one caller input for ``decl``; errors name the input and the method.

    Raises ``TypeError``, ``ValueError``, ``BufferError`` or ``RuntimeError`` as
    the official bindings do. Shapes are checked later, by :func:`check_install`.
    """
    key = decl.fast_key
    if (
        key is not None
        and type(value) is np.ndarray
        and (value.dtype, value.shape) == key
        and value.flags.c_contiguous
        and value.flags.writeable
    ):
        # The common case: a dense, writable array of exactly the declared dtype
        # and static shape is what the general path below would return as is.
        return Input(value, decl.scalar_type)
    where = _where(decl.position, method)
    try:
        if decl.tag in (Tag.Double, Tag.Int, Tag.Bool):
            return Input(_number(value, decl, where))
        if is_torch_tensor(value):
            inp = _from_torch(value, decl, where)
        elif value is None:
            return Input(None)
        elif isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
            return Input(value)
        elif hasattr(value, "__result_array__"):
            # portable_lib's ExecuTorchResult: its numpy memory, any dtype included.
            inp = _from_buffer(value.__result_array__(), decl, where)
        elif _prefers_dlpack(value):
            inp = _from_dlpack(value, decl, where)
        elif isinstance(value, (np.ndarray, np.generic)) or _has_buffer(value):
            inp = _from_buffer(value, decl, where)
        else:
            raise _named(
                RuntimeError,
                where,
                f"unsupported python type {type(value)}. Ensure that inputs are passed as a flat list of tensors.",
            )
    except Exception as e:
        # Errors of a producer or of torch keep their type and get the input's name as a note.
        if not str(e).startswith(where):
            e.add_note(where)
        raise
    return inp


def _number(value: Any, decl: InputDecl, where: str) -> Any:
    number: Any = None
    if isinstance(value, (bool, int, float)):
        number = value
    elif isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        number = value.item()
    is_bool = isinstance(number, bool)
    is_int = isinstance(number, int) and not is_bool
    if decl.tag == Tag.Double and (is_int or isinstance(number, float)):
        return float(number)
    if decl.tag == Tag.Int and is_int:
        return int(number)
    if decl.tag == Tag.Bool and is_bool:
        return bool(number)
    raise _named(RuntimeError, where, f"the method expects {decl.tag}, but got {type(value)}")


def _check_tensor(decl: InputDecl, scalar_type: int, ndim: int, where: str) -> None:
    if decl.tag != Tag.Tensor:
        raise RuntimeError(f"{where} is not a tensor input: the method expects {decl.tag}")
    if scalar_type != decl.scalar_type:
        raise InputMismatchError(
            f"{where} has dtype {scalar_type_name(scalar_type)} but the method expects {scalar_type_name(decl.scalar_type)}"
        )
    if ndim != len(decl.sizes):
        raise InputMismatchError(
            f"{where} has rank {ndim}, but the method expects rank {len(decl.sizes)}"
        )


def _dim_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> list[int]:
    """Dimensions from the largest stride to the smallest (a stable sort)."""
    return sorted(range(len(shape)), key=lambda d: -strides[d])


def _is_dense(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether byte ``strides`` lay out ``shape`` densely in some dimension order."""
    if 0 in shape:
        return True
    expected = itemsize
    for d in reversed(_dim_order(shape, strides)):
        if shape[d] > 1 and strides[d] != expected:
            return False
        expected *= max(shape[d], 1)
    return True


def _has_layout(arr: np.ndarray, dim_order: tuple[int, ...]) -> bool:
    """Whether ``arr`` is already laid out in ``dim_order`` (size-one dimensions may sit anywhere)."""
    expected = arr.itemsize
    shape, strides = arr.shape, arr.strides
    for d in reversed(dim_order):
        if shape[d] > 1 and strides[d] != expected:
            return False
        expected *= max(shape[d], 1)
    return True


def _in_layout(arr: np.ndarray, decl: InputDecl) -> np.ndarray | None:
    """A copy of ``arr`` laid out in the method's dim order, or None when it already is (or is empty)."""
    dim_order = decl.dim_order
    if arr.ndim != len(dim_order) or arr.size == 0:
        return None
    if (decl.contiguous_order and arr.flags.c_contiguous) or _has_layout(arr, dim_order):
        return None
    memory = np.empty([arr.shape[d] for d in dim_order], dtype=arr.dtype)
    out = memory.transpose(np.argsort(dim_order))
    np.copyto(out, arr, casting="no")
    return out


def address_of(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _torch_storage(t: Any) -> tuple[int, int]:
    """(address, nbytes) of the memory a torch tensor points at now."""
    numel = t.numel()
    return (t.data_ptr() if numel else 0, numel * t.element_size())


# torch tensors


def _from_torch(t: Any, decl: InputDecl, where: str) -> Input:
    if t.is_neg() or t.is_conj():
        raise _named(
            ValueError,
            where,
            "Lazy conjugate and negative torch tensor views must be resolved before execution",
        )
    numel = t.numel()
    device = t.device.type
    if device not in ("cpu", "cuda") and numel != 0:
        raise _named(
            RuntimeError,
            where,
            f"Torch tensor is on device {device}, and only CPU and CUDA tensors can be passed to portable bindings.",
        )
    dtype_name = str(t.dtype).removeprefix("torch.")
    scalar_type = _TORCH_DTYPES.get(dtype_name)
    if scalar_type is None:
        raise _named(ValueError, where, f"Unsupported torch dtype {dtype_name}")
    shape, strides = tuple(t.shape), tuple(t.stride())
    if numel != 0 and not _is_dense(shape, strides, 1):
        raise _named(
            ValueError, where, "ExecuTorch inputs must have a dense, non-overlapping layout"
        )
    _check_tensor(decl, scalar_type, len(shape), where)
    if device == "cuda" and numel != 0:
        raise ValueError(
            f"{where} is on device cuda:{t.device.index or 0}, but the method expects cpu"
        )
    if numel == 0:
        dtype = _RAW_BITS.get(scalar_type) or SCALAR_TYPE_TO_DTYPE[scalar_type]
        return Input(np.empty(shape, dtype=dtype), scalar_type)
    detached = t.detach()
    raw = _RAW_BITS.get(scalar_type) or SCALAR_TYPE_TO_DTYPE[scalar_type]
    if scalar_type in _RAW_BITS or foreign(raw):
        arr = _torch_view(sys.modules["torch"], detached, raw)
    else:
        arr = detached.numpy()
    converted = _in_layout(arr, decl)
    if converted is not None:
        return Input(converted, scalar_type)  # torch's own copy would be no more use
    return Input(arr, scalar_type, t, _torch_storage(t))


# buffers


def _buffer_scalar_type(fmt: str, itemsize: int, where: str) -> ScalarType:
    code = fmt
    if code and code[0] in "@=<>!":
        if code[0] not in "@=" and code[0] != _NATIVE_PREFIX:
            raise _named(
                BufferError,
                where,
                f"Buffer format '{fmt}' is not in this machine's byte order. "
                "Convert the data to the native byte order before passing it.",
            )
        code = code[1:]
    kind = (
        _STRUCT_CODE_KIND.get(code) if len(code) == 1 else ("c" if code in ("Zf", "Zd") else None)
    )
    scalar_type = _BY_KIND_AND_SIZE.get((kind, itemsize)) if kind else None
    if scalar_type is None:
        raise _named(
            BufferError,
            where,
            f"Unsupported buffer format '{fmt}' with item size {itemsize}. "
            "Use a buffer of booleans, integers, floats, or complex numbers.",
        )
    return scalar_type


def _array_scalar_type(arr: np.ndarray) -> ScalarType | None:
    """The scalar type of a native-order numeric array (None: read it through its buffer)."""
    dtype = arr.dtype
    if foreign(dtype):
        return DTYPE_TO_SCALAR_TYPE.get(dtype)  # bfloat16, float8 (ml_dtypes)
    if not dtype.isnative or dtype.kind not in "biufc":
        return None
    return _BY_KIND_AND_SIZE.get((dtype.kind, dtype.itemsize))


def _from_buffer(value: Any, decl: InputDecl, where: str) -> Input:
    if isinstance(value, np.generic):
        value = np.asarray(value)  # a fresh 0-d copy
    scalar_type = _array_scalar_type(value) if isinstance(value, np.ndarray) else None
    if scalar_type is not None:
        arr = value
        readonly = not arr.flags.writeable
        shape, strides = arr.shape, arr.strides
    else:
        view = memoryview(value)
        if view.ndim > TENSOR_DIMENSION_LIMIT:
            raise _named(BufferError, where, "Buffer rank is too large for ExecuTorch")
        scalar_type = _buffer_scalar_type(view.format, view.itemsize, where)
        arr = _array_of(view, scalar_type, where)
        readonly = view.readonly
        shape, strides = tuple(view.shape or ()), tuple(view.strides or ())
    if len(shape) > TENSOR_DIMENSION_LIMIT:
        raise _named(BufferError, where, "Buffer rank is too large for ExecuTorch")
    if (
        decl.tag == Tag.Tensor
        and decl.scalar_type == ST.BFLOAT16
        and len(shape) == 1
        and scalar_type == ST.BYTE
    ):
        return _raw_bfloat16(arr, strides, decl, where)
    if decl.tag != Tag.Tensor:
        raise _named(RuntimeError, where, f"not a tensor input: the method expects {decl.tag}")
    if not arr.flags.c_contiguous:
        if any(s < 0 or s % arr.itemsize for s in strides):
            raise _named(
                BufferError,
                where,
                "ExecuTorch inputs require non-negative, element-aligned strides",
            )
        if not _is_dense(shape, strides, arr.itemsize):
            raise _named(
                BufferError, where, "ExecuTorch inputs must have a dense, non-overlapping layout"
            )
    if readonly and arr.size:
        arr = arr.copy(order="K")  # a method may write its inputs
    _check_tensor(decl, scalar_type, arr.ndim, where)
    converted = _in_layout(arr, decl)
    return Input(arr if converted is None else converted, scalar_type)


def _array_of(view: memoryview, scalar_type: ScalarType, where: str) -> np.ndarray:
    """A numpy array over a buffer's memory, typed by ``scalar_type``."""
    dtype = SCALAR_TYPE_TO_DTYPE[scalar_type]
    try:
        arr = np.asarray(view)
    except (TypeError, ValueError, NotImplementedError):
        if not view.c_contiguous:
            raise _named(
                BufferError,
                where,
                f"Buffer format '{view.format}' can only be read from a contiguous buffer",
            ) from None
        arr = np.frombuffer(view.cast("B"), dtype=dtype).reshape(view.shape)
    if arr.dtype != dtype:
        arr = arr.view(dtype)
    return arr


def _raw_bfloat16(arr: np.ndarray, strides: tuple[int, ...], decl: InputDecl, where: str) -> Input:
    """The bits of a bfloat16 input given as bytes (numpy has no bfloat16), copied."""
    if tuple(strides) != (1,):
        raise _named(BufferError, where, "Raw bfloat16 inputs require contiguous byte buffers")
    if arr.nbytes != decl.nbytes:
        raise _named(
            ValueError,
            where,
            f"raw bfloat16 input has {arr.nbytes} bytes, but the method expects {decl.nbytes}",
        )
    bits = arr.copy().view(SCALAR_TYPE_TO_DTYPE[ST.BFLOAT16])
    order = decl.dim_order
    memory = bits.reshape([decl.sizes[d] for d in order])
    return Input(memory.transpose(np.argsort(order)), ST.BFLOAT16)


# DLPack


def _prefers_dlpack(value: Any) -> bool:
    if _is_capsule(value):
        return True
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack__"):
        return False
    if not _has_buffer(value):
        return True
    # Host buffers keep the buffer path; device memory has only DLPack.
    device = getattr(value, "__dlpack_device__", None)
    return device is not None and tuple(device())[0] == _DLPACK_CUDA


def _numpy_reads_versioned_dlpack() -> bool:
    major, minor = (int(p) for p in np.__version__.split(".")[:2])
    return (major, minor) >= (2, 1)


def _request_capsule(producer: Any) -> Any:
    """A DLPack 1.0 capsule (which can mark memory read-only), or a legacy one from older producers."""
    if _numpy_reads_versioned_dlpack():
        try:
            return producer.__dlpack__(max_version=(1, 0))
        except TypeError:
            pass
    return producer.__dlpack__()


class _CapsuleHolder:
    """Hands a capsule already obtained to ``np.from_dlpack``."""

    def __init__(self, capsule: Any, device: tuple[int, int]) -> None:
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


@dataclass
class _DLPackHeader:
    device: tuple[int, int]
    code: int
    bits: int
    lanes: int
    ndim: int
    nonempty: bool
    readonly: bool


@functools.cache
def _dlpack_c() -> Any:
    """ctypes views of the DLPack structures and the capsule functions."""
    import ctypes  # noqa: PLC0415 - only DLPack inputs need it

    class Device(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]

    class DataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [
            ("data", ctypes.c_void_p),
            ("device", Device),
            ("ndim", ctypes.c_int32),
            ("dtype", DataType),
            ("shape", ctypes.POINTER(ctypes.c_int64)),
            ("strides", ctypes.POINTER(ctypes.c_int64)),
            ("byte_offset", ctypes.c_uint64),
        ]

    class Managed(ctypes.Structure):
        _fields_ = [
            ("dl_tensor", DLTensor),
            ("manager_ctx", ctypes.c_void_p),
            ("deleter", ctypes.c_void_p),
        ]

    class Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]

    class ManagedVersioned(ctypes.Structure):
        _fields_ = [
            ("version", Version),
            ("manager_ctx", ctypes.c_void_p),
            ("deleter", ctypes.c_void_p),
            ("flags", ctypes.c_uint64),
            ("dl_tensor", DLTensor),
        ]

    api = ctypes.pythonapi
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", api))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", api)
    )

    def header(capsule: Any, where: str) -> _DLPackHeader:
        name = get_name(capsule)
        if name in (b"used_dltensor", b"used_dltensor_versioned"):
            raise _named(ValueError, where, "This DLPack capsule was already consumed")
        readonly = False
        if name == b"dltensor":
            tensor = ctypes.cast(
                get_pointer(capsule, name), ctypes.POINTER(Managed)
            ).contents.dl_tensor
        elif name == b"dltensor_versioned":
            managed = ctypes.cast(
                get_pointer(capsule, name), ctypes.POINTER(ManagedVersioned)
            ).contents
            if managed.version.major != 1:
                raise _named(
                    ValueError, where, f"DLPack version {managed.version.major} is not supported"
                )
            tensor = managed.dl_tensor
            readonly = bool(managed.flags & 1)  # DLPACK_FLAG_BITMASK_READ_ONLY
        else:
            raise _named(ValueError, where, "Expected a dltensor or dltensor_versioned capsule")
        ndim = tensor.ndim
        if ndim < 0 or ndim > TENSOR_DIMENSION_LIMIT:
            raise _named(ValueError, where, "DLPack tensor rank is too large for ExecuTorch")
        if ndim > 0 and not tensor.shape:
            raise _named(ValueError, where, "DLPack tensor shape is missing")
        shape = [tensor.shape[i] for i in range(ndim)]
        dtype = tensor.dtype
        return _DLPackHeader(
            (tensor.device.device_type, tensor.device.device_id),
            dtype.code,
            dtype.bits,
            dtype.lanes,
            ndim,
            all(s != 0 for s in shape),
            readonly,
        )

    return header


def _check_dlpack_device(device: tuple[int, int], where: str) -> None:
    if device[0] not in (_DLPACK_CPU, _DLPACK_CUDA):
        raise _named(ValueError, where, "Only CPU and CUDA DLPack tensors are supported")
    if not 0 <= device[1] <= 127:
        raise _named(ValueError, where, "DLPack device index is too large for ExecuTorch")


def _from_dlpack(value: Any, decl: InputDecl, where: str) -> Input:
    read_header = _dlpack_c()
    if _is_capsule(value):
        capsule = value
        header = read_header(capsule, where)
    else:
        advertised = tuple(int(x) for x in value.__dlpack_device__())
        _check_dlpack_device(advertised, where)
        capsule = _request_capsule(value)
        header = read_header(capsule, where)
        if header.device != advertised:
            raise _named(
                ValueError, where, "DLPack capsule device disagrees with __dlpack_device__()"
            )
    _check_dlpack_device(header.device, where)
    if header.lanes != 1:
        raise _named(ValueError, where, "DLPack vector dtypes are not supported")
    scalar_type = _DLPACK_DTYPES.get((header.code, header.bits))
    if scalar_type is None:
        raise _named(ValueError, where, "Unsupported DLPack dtype")
    _check_tensor(decl, scalar_type, header.ndim, where)
    if header.device[0] != _DLPACK_CPU and header.nonempty:
        raise ValueError(
            f"{where} is on device cuda:{header.device[1]}, but the method expects cpu"
        )
    if scalar_type not in SCALAR_TYPE_TO_DTYPE:
        raise _named(
            ValueError,
            where,
            f"{scalar_type_name(scalar_type)} DLPack tensors cannot be read with numpy",
        )
    arr = np.from_dlpack(_CapsuleHolder(capsule, header.device))
    if not _is_dense(arr.shape, arr.strides, arr.itemsize) or any(s < 0 for s in arr.strides):
        raise _named(ValueError, where, "ExecuTorch inputs require dense DLPack tensor storage")
    if header.readonly and arr.size:
        # A method may write its inputs. (numpy also marks arrays from legacy
        # capsules read-only, which says nothing about the memory: those stay.)
        arr = arr.copy(order="K")
    # The array holds the capsule now, and with it the producer's memory.
    converted = _in_layout(arr, decl)
    return Input(arr if converted is None else converted, scalar_type)


# -------------------------------------------------------------------- install


class InstallError(RuntimeError):
    """An input the method cannot take: wrong kind, value, shape or bound.

    ``code`` is the official runtime's error code for the same refusal.
    """

    def __init__(self, position: int, code: int, message: str) -> None:
        super().__init__(message)
        self.position = position
        self.code = code


def check_install(inp: Input, decl: InputDecl, method: str) -> None:
    """Check that the method can store ``inp`` for ``decl`` (its kind, value and shape)."""
    where = _where(decl.position, method)
    tag = inp.tag
    if tag != decl.tag:
        raise InstallError(
            decl.position,
            ERROR_INVALID_ARGUMENT,
            f"{where} was expected to have type {decl.tag} but was {tag}",
        )
    if tag in (Tag.Int, Tag.Double, Tag.Bool):
        both_nan = inp.value != inp.value and decl.exported != decl.exported  # NaN is NaN
        if inp.value != decl.exported and not both_nan:
            raise InstallError(
                decl.position,
                ERROR_INVALID_ARGUMENT,
                f"{where} must be {decl.exported!r}, the value the method was exported with, but got {inp.value!r}",
            )
        return
    if tag != Tag.Tensor:
        return
    shape = inp.value.shape
    if decl.dynamism == TensorShapeDynamism.STATIC:
        if shape != decl.sizes:
            raise InstallError(
                decl.position,
                ERROR_NOT_SUPPORTED,
                f"{where} has shape {list(shape)}, but the method expects {list(decl.sizes)}",
            )
    elif decl.dynamism == TensorShapeDynamism.DYNAMIC_BOUND:
        for d, (got, bound) in enumerate(zip(shape, decl.sizes, strict=True)):
            if got > bound:
                raise InstallError(
                    decl.position,
                    ERROR_NOT_SUPPORTED,
                    f"{where} has size {got} in dimension {d}, above its upper bound {bound} "
                    f"(the method takes sizes up to {list(decl.sizes)})",
                )
