"""A readable listing of an XNNPACK delegate payload, for ``pyexecutorch inspect``.

``describe_payload(data, named_data)`` decodes the payload through :mod:`.schema` and
lists the graph: a summary (nodes, values, constant bytes and where they are stored),
each node with its inputs, outputs, parameters and fused activation
(``output_min_max``), and, with ``verbose``, each value with its datatype, shape and
role (external input or output, constant and its bytes, or internal). It reads the
decoded tables only and never needs torch.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from pyexecutorch.backends.xnnpack import schema as S

__all__ = ["describe_payload"]

# output_min_max pairs that are a named activation.
_ACTIVATIONS = {(0.0, math.inf): "relu", (0.0, 6.0): "relu6", (-1.0, 1.0): "hardtanh"}
# Parameter fields shown together: (label, separator, fields); paddings are t,r,b,l.
_GROUPED = [
    ("kernel", "x", ("kernel_height", "kernel_width")),
    ("pool", "x", ("pooling_height", "pooling_width")),
    ("stride", "x", ("subsampling_height", "subsampling_width")),
    ("stride", "x", ("stride_height", "stride_width")),
    ("dilation", "x", ("dilation_height", "dilation_width")),
    ("adjustment", "x", ("adjustment_height", "adjustment_width")),
    ("padding", ",", ("padding_top", "padding_right", "padding_bottom", "padding_left")),
    ("group_channels", "->", ("group_input_channels", "group_output_channels")),
]
_MAX_LISTED = 16
_QUANT_NAMES = {
    "PerTensorQuant": "per-tensor",
    "PerChannelQuant": "per-channel",
    "PerTokenDynamicQuant": "per-token dynamic",
    "PerChannelGroupQuant": "per-channel-group",
}


def _nbytes(blob: Any) -> int:
    data = getattr(blob, "data", blob)
    return memoryview(data).nbytes


def _value_table(graph: S.XNNGraph) -> dict[int, S.XNNTensorValue]:
    """Tensor values by their id (``id_out``)."""
    return {v.tensor.id_out: v.tensor for v in graph.xvalues if v.tensor is not None}


class _Constants:
    """Where each constant of the graph lies, and its size in bytes."""

    def __init__(self, payload: S.Payload, named_data: Mapping[str, Any] | None) -> None:
        self.graph = payload.graph
        self.named_data = named_data

    def where(self, idx: int) -> tuple[str, int]:
        """(description, bytes) of constant ``idx`` (> 0)."""
        g = self.graph
        if g.constant_data:
            if idx >= len(g.constant_data):
                return f"#{idx} (out of range: {len(g.constant_data)} entries)", 0
            entry = g.constant_data[idx]
            if entry.named_key:
                size = entry.size
                if self.named_data is not None:
                    blob = self.named_data.get(entry.named_key)
                    if blob is None:
                        return f"named {_short(entry.named_key)} (missing from the file)", 0
                    size = _nbytes(blob)
                return f"named {_short(entry.named_key)}", size
            return f"inline at offset {entry.offset}", entry.size
        if idx < len(g.constant_buffer):
            return "in the flatbuffer", len(g.constant_buffer[idx].storage)
        return f"#{idx} (out of range: {len(g.constant_buffer)} buffers)", 0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _short(key: str) -> str:
    return repr(key if len(key) <= 20 else key[:16] + "...")


def _dims(t: S.XNNTensorValue) -> str:
    return f"{t.datatype.name}[{', '.join(map(str, t.dims))}]"


def _activation(mm: S.OutputMinMax | None) -> str:
    if mm is None:
        return ""
    bounds = (mm.output_min, mm.output_max)
    name = _ACTIVATIONS.get(bounds)
    shown = f"[{mm.output_min:g}, {mm.output_max:g}]"
    return f"  fused {name} {shown}" if name else f"  fused clamp {shown}"


def _used_inputs(node: Any) -> int | None:
    """How many inputs an ``XNNConcatenateN`` node uses (its other slots are unused)."""
    m = re.fullmatch(r"XNNConcatenate(\d)", type(node).__name__)
    return int(m.group(1)) if m else None


def _references(node: Any) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(inputs, outputs) of a node as (role, value id): ``filter_id`` is ("filter", id),
    ``input1_id`` ("", id); absent ones (INVALID_ID, a concatenation's unused slots) are
    left out."""
    inputs, outputs = [], []
    concat_inputs = _used_inputs(node)
    for f in dataclasses.fields(node):
        if not f.name.endswith("_id"):
            continue
        v = getattr(node, f.name)
        role = f.name[: -len("_id")]
        m = re.fullmatch(r"input(\d*)", role)
        if v == S.INVALID_ID or (
            concat_inputs is not None and m and int(m.group(1) or 1) > concat_inputs
        ):
            continue
        if role.startswith("output"):
            outputs.append((role[len("output_") :], v))
        else:
            inputs.append(("" if m else role, v))
    return inputs, outputs


def _node_line(k: int, xnode: S.XNode, values: dict[int, S.XNNTensorValue]) -> str:
    node = xnode.xnode_union
    if node is None:
        return f"{k}: (empty node)"
    inputs, outputs = _references(node)

    def ref(role: str, v: int) -> str:
        return f"{role + ' ' if role else ''}%{v}{'' if v in values else '(?)'}"

    params, grouped = [], set()
    for name, sep, fields in _GROUPED:
        if all(hasattr(node, f) for f in fields):
            vals = [getattr(node, f) for f in fields]
            grouped.update(fields)
            if any(vals):
                params.append(f"{name}={sep.join(map(str, vals))}")
    for f in dataclasses.fields(node):
        v = getattr(node, f.name)
        if f.name in grouped or f.name.endswith("_id") or f.name == "num_dims":
            continue
        if f.name == "flags":
            if v:
                params.append(f"flags=0x{v:x}")
        elif v not in (0, 0.0, [], None):
            params.append(f"{f.name}={v:g}" if isinstance(v, float) else f"{f.name}={v}")
    text = (
        f"{k}: {type(node).__name__}({', '.join(ref(*r) for r in inputs)} -> "
        f"{', '.join(ref(*r) for r in outputs)})"
    )
    if params:
        text += "  " + " ".join(params)
    return text + _activation(xnode.output_min_max) + f"  [debug {xnode.debug_handle}]"


def _storage(g: S.XNNGraph, idx: int) -> tuple[str, Any]:
    """Where constant ``idx``'s bytes are stored: ("named", key), ("inline", offset) or
    ("buffer", idx); values sharing storage share this key."""
    if g.constant_data and idx < len(g.constant_data):
        entry = g.constant_data[idx]
        if entry.named_key:
            return "named", entry.named_key
        return "inline", entry.offset
    return "buffer", idx


def _value_line(t: S.XNNTensorValue, quant: Any, constants: _Constants) -> str:
    parts = [f"%{t.id_out}: {_dims(t)}"]
    if quant is not None:
        name = _QUANT_NAMES.get(type(quant).__name__, type(quant).__name__)
        if isinstance(quant, S.PerTensorQuant):
            name += f" scale={quant.scale:g} zero_point={quant.zero_point}"
        elif isinstance(quant, S.PerChannelQuant | S.PerChannelGroupQuant):
            n = quant.num_scales or len(quant.scale)
            name += f" {n} scales on dim {quant.channel_dim}"
            if isinstance(quant, S.PerChannelGroupQuant):
                name += f", groups of {quant.group_size}"
            if quant.scale_buffer_idx:
                where, size = constants.where(quant.scale_buffer_idx)
                name += f" (in constant #{quant.scale_buffer_idx}: {where}, {size} bytes)"
        parts.append(name)
    if t.dq_datatype != S.XNNDatatype.invalid:
        parts.append(f"quantized at run time to {t.dq_datatype.name}")
    if t.flags & S.VALUE_FLAG_EXTERNAL_INPUT:
        parts.append(f"external input {t.external_id}")
    if t.flags & S.VALUE_FLAG_EXTERNAL_OUTPUT:
        parts.append(f"external output {t.external_id}")
    if t.constant_buffer_idx:
        where, size = constants.where(t.constant_buffer_idx)
        parts.append(f"constant #{t.constant_buffer_idx} ({where}, {size} bytes)")
    return "  ".join(parts)


def describe_payload(
    data: Any, named_data: Mapping[str, Any] | None = None, *, verbose: bool = False
) -> list[str]:
    """Lines describing the XNNPACK payload ``data``; ``named_data`` (key -> bytes or a
    blob with ``.data``) resolves constants stored in the program's named data.

    Raises :class:`pyexecutorch.schema.errors.FormatError` where the payload does not
    decode."""
    payload = S.decode_payload(data)
    g = payload.graph
    values = _value_table(g)
    constants = _Constants(payload, named_data)
    constant_values = [t for t in values.values() if t.constant_buffer_idx]
    # constants: the values' own data and the scales of per-channel quantized values
    referenced = [t.constant_buffer_idx for t in constant_values]
    for v in g.xvalues:
        quant = getattr(v.xvalue_union, "quant_params", None)
        if getattr(quant, "scale_buffer_idx", 0):
            referenced.append(quant.scale_buffer_idx)
    stored: dict[tuple[str, Any], int] = {}
    for idx in referenced:
        stored[_storage(g, idx)] = constants.where(idx)[1]
    by_kind = {
        kind: (
            sum(1 for k in stored if k[0] == kind),
            sum(n for k, n in stored.items() if k[0] == kind),
        )
        for kind in ("named", "inline", "buffer")
    }
    n_in = sum(1 for t in values.values() if t.flags & S.VALUE_FLAG_EXTERNAL_INPUT)
    n_out = sum(1 for t in values.values() if t.flags & S.VALUE_FLAG_EXTERNAL_OUTPUT)
    out = [
        f"XNNPACK graph: {_plural(len(g.xnodes), 'node')}, {_plural(len(g.xvalues), 'value')} "
        f"({_plural(n_in, 'external input')}, {_plural(n_out, 'external output')}, "
        f"{_plural(len(constant_values), 'constant')})",
        f"  constant bytes: {sum(stored.values())} stored: "
        f"{_plural(by_kind['named'][0], 'named key')} ({by_kind['named'][1]} bytes), "
        f"{by_kind['inline'][0]} in the payload ({by_kind['inline'][1]} bytes)"
        + (
            f", {by_kind['buffer'][0]} in the flatbuffer ({by_kind['buffer'][1]} bytes)"
            if by_kind["buffer"][0]
            else ""
        ),
        f"  inputs {list(g.input_ids)}, outputs {list(g.output_ids)}",
    ]
    histogram = Counter(type(n.xnode_union).__name__ for n in g.xnodes if n.xnode_union is not None)
    out.append(
        "  node types: " + ", ".join(f"{k} x{v}" for k, v in sorted(histogram.items()))
        if histogram
        else "  node types: none"
    )
    used = {
        v
        for n in g.xnodes
        if n.xnode_union is not None
        for r in _references(n.xnode_union)
        for _, v in r
    }
    unused = sorted(
        vid
        for vid, t in values.items()
        if vid not in used
        and not t.flags & (S.VALUE_FLAG_EXTERNAL_INPUT | S.VALUE_FLAG_EXTERNAL_OUTPUT)
    )
    if unused:
        shown = ", ".join(f"%{v}" for v in unused[:_MAX_LISTED])
        more = ", ..." if len(unused) > _MAX_LISTED else ""
        out.append(f"  values no node uses: {len(unused)} ({shown}{more})")
    out.append("  nodes:")
    out += [f"    {line}" for line in (_node_line(k, n, values) for k, n in enumerate(g.xnodes))]
    if verbose:
        out.append("  values:")
        for v in g.xvalues:
            u = v.xvalue_union
            quant = u.quant_params if isinstance(u, S.XNNQuantizedTensorValue) else None
            if v.tensor is not None:
                out.append(f"    {_value_line(v.tensor, quant, constants)}")
    return out
