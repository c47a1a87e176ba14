"""Builds one ``XNNGraph`` from a partition: values, constants, nodes, debug handles.

Visitors (:mod:`.visitors`) ask for the value of an edge node in a layout
(``value(node, nhwc)``): the builder defines it on first use, reads constants
into the program's named data (key: the SHA-256 of the bytes, as the official
exporter does, so equal weights are stored once), and inserts one transpose
per value and layout where a node is stored in the other layout. Delegate
inputs and outputs are external values numbered as the official runtime reads
them: inputs in placeholder order, then outputs.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch.fx import Node

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack._passes.channels_last import NHWC, TO_NCHW, TO_NHWC
from pyexecutorch.backends.xnnpack._passes.common import PassContext, sources
from pyexecutorch.backends.xnnpack._passes.quantized import XNN_QUANT
from pyexecutorch.exir.backend import NamedDataStore, PreprocessError

UINT64_MAX = 0xFFFFFFFFFFFFFFFF
_DATATYPES = {
    torch.float32: S.XNNDatatype.fp32,
    torch.float16: S.XNNDatatype.fp16,
    torch.bfloat16: S.XNNDatatype.bf16,
    torch.int32: S.XNNDatatype.int32,
}


class GraphBuilder:
    def __init__(self, ctx: PassContext, store: NamedDataStore) -> None:
        self.ctx = ctx
        self.store = store
        self.graph = S.XNNGraph(version="0", constant_data=[S.ConstantDataOffset(0, 0)])
        self.debug_handle_map: dict[int, tuple[int, ...]] = {}
        self._ids: dict[tuple[Any, bool], int] = {}
        self._handles: list[int] = []
        self.node: Node | None = None
        nodes = list(ctx.gm.graph.nodes)
        inputs = [n for n in nodes if n.op == "placeholder" and not ctx.is_constant(n)]
        self.outputs: list[Node] = list(next(n for n in nodes if n.op == "output").args[0])
        self._external: dict[Node, tuple[int, int]] = {}
        for n in inputs:
            self._external[n] = (len(self._external), S.VALUE_FLAG_EXTERNAL_INPUT)
        for n in self.outputs:
            if not isinstance(n, Node) or n in self._external:
                raise PreprocessError(
                    f"XnnpackBackend: output {n} of the partition is one of its inputs or "
                    "repeated; XNNPACK delegates cannot pass values through"
                )
            self._external[n] = (len(self._external), S.VALUE_FLAG_EXTERNAL_OUTPUT)
        self.graph.num_externs = len(self._external)
        for n in inputs:
            # a symbolic size passed in (a decomposed linear's reshape read it) keeps
            # its external id, the delegate argument's position, but is no XNNPACK value
            if isinstance(n.meta.get("val"), torch.Tensor):
                self.value(n, False)

    # ------------------------------------------------------------------ shapes

    def dims(self, node: Node, nhwc: bool = False) -> list[int]:
        """Upper-bound dims of ``node``'s tensor, in the layout asked for."""
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise PreprocessError(f"XnnpackBackend: {node.name} is not a tensor ({val!r})")
        dims = [self._bound(d, node) for d in val.shape] or [1]
        if nhwc and len(dims) == 4:
            dims = [dims[i] for i in TO_NHWC]
        return dims

    @staticmethod
    def _bound(d: Any, node: Node) -> int:
        if isinstance(d, int):
            return d
        from pyexecutorch.exir.passes.sym_shape_eval import ConstraintBasedSymShapeEvalPass

        (bound,), _ = ConstraintBasedSymShapeEvalPass().bound_shape([d], node)
        return int(bound)

    def nhwc(self, node: Node) -> bool:
        """Whether ``node`` is stored channels-last (see :mod:`.._passes.channels_last`)."""
        return bool(node.meta.get(NHWC, False))

    # ------------------------------------------------------------------ values

    def value(self, node: Any, nhwc: bool | None = None, *, like: Node | None = None) -> int:
        """The id of ``node``'s value in the layout ``nhwc`` (default: where it is stored).

        A Python number becomes a one-element constant of ``like``'s dtype."""
        if not isinstance(node, Node):
            dtype = like.meta["val"].dtype if like is not None else torch.float32
            return self.constant_data(torch.tensor([node], dtype=dtype), ("scalar", node, dtype))
        have = self.nhwc(node)
        want = have if nhwc is None else nhwc
        if len(node.meta["val"].shape) != 4:
            want = False
        found = self._ids.get((node, want))
        if found is not None:
            return found
        if self.ctx.is_constant(node):
            self.note(node)
            data = self.ctx.constant(node)
            if data is None:
                raise PreprocessError(f"XnnpackBackend: no data for constant {node.name}")
            if want:
                data = data.permute(*TO_NHWC)
            spec = node.meta.get(XNN_QUANT)
            if spec is not None:
                vid = self.constant_data(
                    data, (node, want), datatype=spec.datatype, quant=spec.params
                )
            else:
                vid = self.constant_data(data, (node, want))
            self._ids[(node, want)] = vid
            return vid
        if node.op != "placeholder" and (node, have) not in self._ids:
            raise PreprocessError(
                f"XnnpackBackend: {node.name} is read before any XNNPACK node defines it"
            )
        if have != want:
            src = self.value(node, have)
            out = self.define(node, want)
            perm = list(TO_NHWC if want else TO_NCHW)
            self.emit(
                xnode("XNNStaticTranspose", num_dims=4, perm=perm, input_id=src, output_id=out)
            )
            return out
        return self.define(node, want)

    def define(
        self,
        node: Node,
        nhwc: bool | None = None,
        *,
        datatype: S.XNNDatatype | None = None,
        quant: Any = None,
    ) -> int:
        """A new value holding ``node``'s tensor (external where it is a delegate input or
        output in NCHW). ``datatype``/``quant`` (an ``XNNQuantParams`` member) describe a
        quantized value."""
        nhwc = self.nhwc(node) if nhwc is None else nhwc
        if (node, nhwc) in self._ids:
            return self._ids[(node, nhwc)]
        spec = node.meta.get(XNN_QUANT)  # quantization the XNNPACK passes gave the value
        if datatype is None and spec is not None:
            datatype, quant = spec.datatype, spec.params
        ext_id, flags = S.INVALID_ID, 0
        if not nhwc and node in self._external:
            ext_id, flags = self._external[node]
        vid = self._tensor(
            node.meta["val"].dtype,
            self.dims(node, nhwc),
            ext_id=ext_id,
            flags=flags,
            datatype=datatype,
            quant=quant,
        )
        if flags == S.VALUE_FLAG_EXTERNAL_INPUT:
            self.graph.input_ids.append(vid)
        elif flags == S.VALUE_FLAG_EXTERNAL_OUTPUT:
            self.graph.output_ids.append(vid)
        self._ids[(node, nhwc)] = vid
        return vid

    def alias(self, node: Node, vid: int, nhwc: bool | None = None) -> None:
        """``node``'s value is ``vid`` (a node XNNPACK does not need)."""
        nhwc = self.nhwc(node) if nhwc is None else nhwc
        self._ids[(node, nhwc)] = vid

    def temporary(self, dtype: torch.dtype, dims: list[int], *, like: Node | None = None) -> int:
        """An internal value no edge node names (between the nodes of one visitor), with
        the quantization the XNNPACK passes gave ``like``, if any."""
        spec = None if like is None else like.meta.get(XNN_QUANT)
        if spec is None:
            return self._tensor(dtype, dims)
        return self._tensor(dtype, dims, datatype=spec.datatype, quant=spec.params)

    def _tensor(
        self,
        dtype: torch.dtype,
        dims: list[int],
        *,
        ext_id: int = S.INVALID_ID,
        flags: int = 0,
        buffer: int = 0,
        datatype: S.XNNDatatype | None = None,
        quant: Any = None,
    ) -> int:
        datatype = datatype if datatype is not None else _DATATYPES.get(dtype)
        if datatype is None:
            raise PreprocessError(f"XnnpackBackend: no XNNPACK datatype for {dtype}")
        vid = len(self.graph.xvalues)
        tensor = S.XNNTensorValue(
            datatype=datatype,
            num_dims=len(dims),
            dims=list(dims),
            constant_buffer_idx=buffer,
            external_id=ext_id,
            flags=flags,
            id_out=vid,
        )
        union = tensor if quant is None else S.XNNQuantizedTensorValue(tensor, quant)
        self.graph.xvalues.append(S.XValue(union))
        return vid

    def constant_data(
        self,
        data: torch.Tensor,
        key: Any = None,
        *,
        datatype: S.XNNDatatype | None = None,
        quant: Any = None,
        dims: list[int] | None = None,
    ) -> int:
        """A constant value holding ``data`` (float types other than float16/bfloat16
        stored as float32), its bytes in the named data store. ``datatype``, ``quant``
        and ``dims`` override what ``data`` says (quantized or packed weights)."""
        if key is not None and ("data", key) in self._ids:
            return self._ids[("data", key)]
        data = data.detach()
        if data.is_floating_point() and data.dtype not in (torch.float16, torch.bfloat16):
            data = data.to(torch.float32)
        data = data.contiguous()
        raw = _raw_bytes(data)
        if not raw:
            raise PreprocessError("XnnpackBackend: a constant has no bytes")
        name = hashlib.sha256(raw).hexdigest()
        self.store.add_named_data(name, raw, 16)
        buffer = len(self.graph.constant_data)
        self.graph.constant_data.append(
            S.ConstantDataOffset(offset=UINT64_MAX, size=len(raw), named_key=name)
        )
        shape = dims if dims is not None else (list(data.shape) or [1])
        vid = self._tensor(data.dtype, shape, buffer=buffer, datatype=datatype, quant=quant)
        if key is not None:
            self._ids[("data", key)] = vid
        return vid

    # ------------------------------------------------------------------ nodes

    def note(self, node: Node) -> None:
        """Nodes emitted from now on also stand for ``node`` (a constant read as data)."""
        self._handles += [h for h in sources(node) if h not in self._handles]

    def begin(self, node: Node) -> None:
        """Nodes emitted from now on come from ``node``."""
        self.node = node
        self._handles = list(sources(node))

    def emit(self, table: Any, output_min_max: tuple[float, float] | None = None) -> int:
        index = len(self.graph.xnodes)
        bounds = None
        if output_min_max is not None:
            lo, hi = output_min_max
            bounds = S.OutputMinMax(float(lo), float(hi))
        self.graph.xnodes.append(S.XNode(table, index, bounds))
        self.debug_handle_map[index] = tuple(self._handles)
        return index

    def finish(self) -> S.XNNGraph:
        """Every delegate output defined in NCHW; ids listed in external-id order."""
        last = self.node
        for out in self.outputs:
            if last is not None:
                self.begin(out)
            self.value(out, False)
        ext = {vid: self.graph.xvalues[vid].tensor.external_id for vid in self.graph.input_ids}
        self.graph.input_ids.sort(key=ext.__getitem__)
        ext = {vid: self.graph.xvalues[vid].tensor.external_id for vid in self.graph.output_ids}
        self.graph.output_ids.sort(key=ext.__getitem__)
        return self.graph


def xnode(type_name: str, **fields: Any) -> Any:
    """A node table of the ``XNodeUnion`` member ``type_name`` (``flags`` default 0)."""
    return S.NODE_TYPES[type_name](**fields)


def _raw_bytes(t: torch.Tensor) -> bytes:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


__all__ = ["GraphBuilder", "xnode"]
