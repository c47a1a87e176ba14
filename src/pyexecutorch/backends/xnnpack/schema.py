"""The XNNPACK delegate's payload: an ``XNNGraph`` flatbuffer behind an ``XH00`` header.

This is the one description of the format the official XNNPACK partitioner
writes into a program's delegate data (``runtime_schema.fbs``, namespace
``fb_xnnpack``, file identifiers ``XN00`` and ``XN01``). Each table is a
dataclass whose fields carry their flatbuffer type, in schema order, read and
written by the generic codec of :mod:`pyexecutorch.schema.flatbuffer`.

A payload is laid out as::

    [XH00 header, 30 bytes, padded to 16][XNNGraph flatbuffer, padded to 16][constant data]

The header gives the flatbuffer's and the constant data's offsets; a payload
without it is a bare flatbuffer whose constants sit in ``constant_buffer``.
A tensor's ``constant_buffer_idx`` (0: not a constant) indexes
``constant_data``, whose entries name either an offset into the constant data
or a key of the program's named data.

Node types that share a table layout (``XNNAdd`` and ``XNNMultiply`` are both
a ``_XNNNode2x1``) get one subclass each, so a decoded node's class name is its
type in the ``XNodeUnion``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Any

from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.flatbuffer import decode_root, encode_root
from pyexecutorch.schema.program import Union, _list, fb

IDENTIFIERS = (b"XN00", b"XN01")
HEADER_MAGIC = b"XH00"
HEADER_LENGTH = 30
ALIGNMENT = 16

# Value flags, node flags and the "no value" id, as XNNPACK defines them.
INVALID_ID = 0xFFFFFFFF
VALUE_FLAG_EXTERNAL_INPUT = 0x1
VALUE_FLAG_EXTERNAL_OUTPUT = 0x2
FLAG_TRANSPOSE_WEIGHTS = 0x1  # fully connected: the filter is [input, output]
FLAG_TRANSPOSE_B = 0x1  # batch matrix multiply: the second operand is [..., n, k]
FLAG_TENSORFLOW_SAME_PADDING = 0x4
FLAG_ALIGN_CORNERS = 0x8
FLAG_KEEP_DIMS = 0x40


class XnnpackError(FormatError):
    """The delegate's payload or graph is malformed, or does not fit its inputs."""


class XNNDatatype(enum.IntEnum):
    invalid = 0
    fp32 = 1
    fp16 = 2
    qint8 = 3
    quint8 = 4
    qint32 = 5
    qcint8 = 6
    qcint32 = 7
    qcint4 = 8
    qdint8 = 9
    qbint4 = 10
    qpint8 = 11
    int32 = 12
    pfp32 = 13
    bf16 = 14


def _datatype(default: XNNDatatype = XNNDatatype.invalid) -> Any:
    return fb(("enum", XNNDatatype, "int16"), default)


# ------------------------------------------------------------------ values


@dataclass
class Buffer:
    storage: Any = fb("bytes", b"")


@dataclass
class PerChannelQuant:
    scale: list[float] = fb(("vector", "float32"), factory=_list())
    channel_dim: int = fb("int32", 0)
    scale_buffer_idx: int = fb("uint32", 0)
    num_scales: int = fb("uint32", 0)


@dataclass
class PerTokenDynamicQuant:
    num_nonbatch_dims: int = fb("int32", 0)


@dataclass
class PerTensorQuant:
    scale: float = fb("float32", 0.0)
    zero_point: int = fb("int32", 0)


@dataclass
class PerChannelGroupQuant:
    scale: list[float] = fb(("vector", "float32"), factory=_list())
    channel_dim: int = fb("int32", 0)
    group_size: int = fb("int32", 0)
    scale_bf16: list[int] = fb(("vector", "uint16"), factory=_list())  # deprecated
    scale_buffer_idx: int = fb("uint32", 0)
    num_scales: int = fb("uint32", 0)


XNNQuantParams = Union(
    "XNNQuantParams", [PerChannelQuant, PerTensorQuant, PerTokenDynamicQuant, PerChannelGroupQuant]
)


@dataclass
class XNNTensorValue:
    datatype: XNNDatatype = _datatype()
    num_dims: int = fb("uint32", 0)
    dims: list[int] = fb(("vector", "uint32"), factory=_list())
    constant_buffer_idx: int = fb("uint32", 0)
    external_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)
    id_out: int = fb("uint32", 0)
    dq_datatype: XNNDatatype = _datatype()


@dataclass
class XNNQuantizedTensorValue:
    tensor_value: XNNTensorValue | None = fb(("table", XNNTensorValue), None)
    quant_params: Any = fb(("union", XNNQuantParams), None)


XValueUnion = Union("XValueUnion", [XNNTensorValue, XNNQuantizedTensorValue])


@dataclass
class XValue:
    xvalue_union: Any = fb(("union", XValueUnion), None)

    @property
    def tensor(self) -> XNNTensorValue:
        u = self.xvalue_union
        return u.tensor_value if isinstance(u, XNNQuantizedTensorValue) else u


# ------------------------------------------------------------------ nodes


@dataclass
class Node1x1:
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class Node2x1:
    input1_id: int = fb("uint32", 0)
    input2_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class Cat:
    axis: int = fb("uint32", 0)
    input1_id: int = fb("uint32", 0)
    input2_id: int = fb("uint32", 0)
    input3_id: int = fb("uint32", 0)
    input4_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)
    input5_id: int = fb("uint32", 0)


@dataclass
class Conv:
    padding_top: int = fb("uint32", 0)
    padding_right: int = fb("uint32", 0)
    padding_bottom: int = fb("uint32", 0)
    padding_left: int = fb("uint32", 0)
    kernel_height: int = fb("uint32", 0)
    kernel_width: int = fb("uint32", 0)
    subsampling_height: int = fb("uint32", 0)
    subsampling_width: int = fb("uint32", 0)
    dilation_height: int = fb("uint32", 0)
    dilation_width: int = fb("uint32", 0)
    group_input_channels: int = fb("uint32", 0)
    group_output_channels: int = fb("uint32", 0)
    groups: int = fb("uint32", 0)
    adjustment_height: int = fb("uint32", 0)
    adjustment_width: int = fb("uint32", 0)
    input1_id: int = fb("uint32", 0)
    filter_id: int = fb("uint32", 0)
    bias_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class Pooling2D:
    padding_top: int = fb("uint32", 0)
    padding_right: int = fb("uint32", 0)
    padding_bottom: int = fb("uint32", 0)
    padding_left: int = fb("uint32", 0)
    pooling_height: int = fb("uint32", 0)
    pooling_width: int = fb("uint32", 0)
    stride_height: int = fb("uint32", 0)
    stride_width: int = fb("uint32", 0)
    dilation_height: int = fb("uint32", 0)
    dilation_width: int = fb("uint32", 0)
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNFullyConnected:
    input1_id: int = fb("uint32", 0)
    filter_id: int = fb("uint32", 0)
    bias_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNStaticTranspose:
    num_dims: int = fb("uint32", 0)
    perm: list[int] = fb(("vector", "uint32"), factory=_list())
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNStaticResizeBilinear2D:
    new_height: int = fb("uint32", 0)
    new_width: int = fb("uint32", 0)
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNStaticConstantPad:
    pre_paddings: list[int] = fb(("vector", "uint32"), factory=_list())
    post_paddings: list[int] = fb(("vector", "uint32"), factory=_list())
    padding_value: float = fb("float32", 0.0)
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNELU:
    alpha: float = fb("float32", 0.0)
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNStaticReshape:
    num_dims: int = fb("uint32", 0)
    new_shape: list[int] = fb(("vector", "uint32"), factory=_list())
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNStaticSlice:
    num_dims: int = fb("uint32", 0)
    offsets: list[int] = fb(("vector", "uint32"), factory=_list())
    sizes: list[int] = fb(("vector", "uint32"), factory=_list())
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNScaledDotProductAttention:
    query_id: int = fb("uint32", 0)
    key_id: int = fb("uint32", 0)
    value_id: int = fb("uint32", 0)
    scale_id: int = fb("uint32", 0)
    mask_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNArgMaxPooling2d:
    padding_top: int = fb("uint32", 0)
    padding_right: int = fb("uint32", 0)
    padding_bottom: int = fb("uint32", 0)
    padding_left: int = fb("uint32", 0)
    pooling_height: int = fb("uint32", 0)
    pooling_width: int = fb("uint32", 0)
    input_id: int = fb("uint32", 0)
    output_value_id: int = fb("uint32", 0)
    output_index_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


@dataclass
class XNNLeakyReLU:
    negative_slope: float = fb("float32", 0.0)
    input_id: int = fb("uint32", 0)
    output_id: int = fb("uint32", 0)
    flags: int = fb("uint32", 0)


def _member(name: str, table: type) -> type:
    """The union member ``name``: ``table`` itself, or a subclass named ``name``
    where the schema aliases one table under several member names. The subclass inherits
    the table's fields and generated methods (its repr and equality name its own class):
    made a dataclass again, the 38 aliases cost 14 ms of every start's import."""
    if table.__name__ == name:
        return table
    return type(name, (table,), {"__module__": __name__, "__qualname__": name})


# The XNodeUnion's members in type-code order (code = position + 1).
XNodeUnion = Union(
    "XNodeUnion",
    [
        _member(name, table)
        for name, table in [
            ("XNNAdd", Node2x1),
            ("XNNFullyConnected", XNNFullyConnected),
            ("XNNSoftmax", Node1x1),
            ("XNNSigmoid", Node1x1),
            ("XNNStaticTranspose", XNNStaticTranspose),
            ("XNNClamp", Node1x1),
            ("XNNConv2d", Conv),
            ("XNNDiv", Node2x1),
            ("XNNStaticResizeBilinear2D", XNNStaticResizeBilinear2D),
            ("XNNStaticConstantPad", XNNStaticConstantPad),
            ("XNNAvgPooling2d", Pooling2D),
            ("XNNMinimum", Node2x1),
            ("XNNDepthwiseConv2d", Conv),
            ("XNNMaxPooling2d", Pooling2D),
            ("XNNMultiply", Node2x1),
            ("XNNSubtract", Node2x1),
            ("XNNFloor", Node1x1),
            ("XNNConvert", Node1x1),
            ("XNNGlobalAvgPooling2d", Node1x1),
            ("XNNStaticReshape", XNNStaticReshape),
            ("XNNArgMaxPooling2d", XNNArgMaxPooling2d),
            ("XNNSquareRoot", Node1x1),
            ("XNNCeiling", Node1x1),
            ("XNNHardswish", Node1x1),
            ("XNNLeakyReLU", XNNLeakyReLU),
            ("XNNMaximum", Node2x1),
            ("XNNNegate", Node1x1),
            ("XNNSquare", Node1x1),
            ("XNNELU", XNNELU),
            ("XNNAbs", Node1x1),
            ("XNNPReLU", Node2x1),
            ("XNNConcatenate2", Cat),
            ("XNNConcatenate3", Cat),
            ("XNNConcatenate4", Cat),
            ("XNNStaticSlice", XNNStaticSlice),
            ("XNNScaledDotProductAttention", XNNScaledDotProductAttention),
            ("XNNBatchMatrixMultiply", Node2x1),
            ("XNNConcatenate5", Cat),
            ("XNNConvTranspose2d", Conv),
            ("XNNReciprocalSquareRoot", Node1x1),
            ("XNNLog", Node1x1),
            ("XNNGelu", Node1x1),
            ("XNNTanh", Node1x1),
            ("XNNExp", Node1x1),
            ("XNNSin", Node1x1),
            ("XNNCopy", Node1x1),
            ("XNNCos", Node1x1),
        ]
    ],
)
NODE_TYPES: dict[str, type] = {cls.__name__: cls for cls in XNodeUnion.members}


@dataclass
class OutputMinMax:
    output_min: float = fb("float32", 0.0)
    output_max: float = fb("float32", 0.0)


@dataclass
class XNode:
    xnode_union: Any = fb(("union", XNodeUnion), None)
    debug_handle: int = fb("uint32", 0)
    output_min_max: OutputMinMax | None = fb(("table", OutputMinMax), None)


# ------------------------------------------------------------------ graph


@dataclass
class ConstantDataOffset:
    offset: int = fb("uint64", 0)
    size: int = fb("uint64", 0)
    named_key: str | None = fb("string", None)


@dataclass
class XNNGraph:
    version: str = fb("string", "")
    xnodes: list[XNode] = fb(("tables", XNode), factory=_list())
    xvalues: list[XValue] = fb(("tables", XValue), factory=_list())
    num_externs: int = fb("uint32", 0)
    input_ids: list[int] = fb(("vector", "uint32"), factory=_list())
    output_ids: list[int] = fb(("vector", "uint32"), factory=_list())
    constant_buffer: list[Buffer] = fb(("tables", Buffer), factory=_list())
    mem_buffer_sizes: list[int] = fb(("vector", "uint32"), factory=_list())
    constant_data: list[ConstantDataOffset] = fb(("tables", ConstantDataOffset), factory=_list())


# ------------------------------------------------------------------ payload


@dataclass(frozen=True)
class XNNHeader:
    """The ``XH00`` header: where the flatbuffer and the constant data lie."""

    flatbuffer_offset: int
    flatbuffer_size: int
    constant_data_offset: int
    constant_data_size: int

    # 4 zero bytes (the flatbuffer's root offset slot), magic, header length, offsets.
    LAYOUT = struct.Struct("<4s4sHIIIQ")

    def pack(self) -> bytes:
        return self.LAYOUT.pack(
            b"\0\0\0\0",
            HEADER_MAGIC,
            HEADER_LENGTH,
            self.flatbuffer_offset,
            self.flatbuffer_size,
            self.constant_data_offset,
            self.constant_data_size,
        )


@dataclass
class Payload:
    """A decoded delegate payload: the graph and the constant data behind it."""

    graph: XNNGraph
    constant_data: memoryview | None  # None: no header, constants are inline


def decode_payload(processed: Any) -> Payload:
    """Decode the delegate data the XNNPACK partitioner wrote."""
    view = memoryview(processed).cast("B")
    size = len(view)
    if size >= 8 and bytes(view[4:8]) == HEADER_MAGIC:
        if size < HEADER_LENGTH:
            raise FormatError(
                f"XNNPACK payload: {size} bytes, too short for its {HEADER_LENGTH}-byte header"
            )
        _, _, length, fb_off, fb_size, cd_off, cd_size = XNNHeader.LAYOUT.unpack_from(view, 0)
        if length < HEADER_LENGTH:
            raise FormatError(
                f"XNNPACK payload: header length {length}, expected at least {HEADER_LENGTH}"
            )
        if fb_off + fb_size > size or cd_off + cd_size > size or fb_size == 0:
            raise FormatError(
                f"XNNPACK payload: flatbuffer [{fb_off}, +{fb_size}) or constant data "
                f"[{cd_off}, +{cd_size}) lies outside the {size}-byte payload"
            )
        flat = view[fb_off : fb_off + fb_size]
        constant_data: memoryview | None = view[cd_off : cd_off + cd_size]
    else:
        flat, constant_data = view, None
    if len(flat) < 8 or bytes(flat[4:8]) not in IDENTIFIERS:
        found = bytes(flat[4:8]) if len(flat) >= 8 else b""
        raise FormatError(
            f"XNNPACK payload: flatbuffer identifier {found!r}, expected one of {IDENTIFIERS}"
        )
    graph = decode_root(flat, XNNGraph, None)
    return Payload(graph, constant_data)


def _pad(n: int) -> int:
    return -n % ALIGNMENT


def encode_payload(
    graph: XNNGraph, constant_data: bytes = b"", identifier: bytes = b"XN01"
) -> bytes:
    """The payload bytes of ``graph`` followed by ``constant_data`` (for tests and tools)."""
    flat = encode_root(graph, identifier)
    fb_off = HEADER_LENGTH + _pad(HEADER_LENGTH)
    cd_off = fb_off + len(flat) + _pad(len(flat))
    header = XNNHeader(fb_off, len(flat), cd_off, len(constant_data)).pack()
    return b"".join(
        [header, b"\0" * _pad(HEADER_LENGTH), flat, b"\0" * _pad(len(flat)), bytes(constant_data)]
    )
