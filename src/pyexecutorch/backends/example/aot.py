"""The example backend, ahead of time: a partitioner and ``preprocess``.

``ExamplePartitioner`` takes float32 ``add``, ``sub``, ``mul``, ``relu``,
``sigmoid``, ``tanh``, ``linear``, ``addmm``, ``mm`` and ``permute_copy``
nodes, in the top-level graph and inside ``torch.cond`` branches, and the
weights only they use. ``ExampleBackend.preprocess`` writes each partition in
the format of :mod:`pyexecutorch.backends.example.format`.

Compile specs (``CompileSpec(key, value)``):

- ``weights``: ``b"inline"`` (default) stores weights in the delegate's own
  bytes; ``b"named"`` stores them as named data in the program, keyed by
  their content, so equal weights of several delegates are stored once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from pyexecutorch.backends.example.format import ALIGNMENT, BACKEND_ID, pack, pad
from pyexecutorch.exir.backend import (
    DELEGATION_TAG,
    BackendDetails,
    CompileSpec,
    DelegationSpec,
    NamedDataStore,
    Partitioner,
    PartitionResult,
    PreprocessError,
    PreprocessResult,
    tag_constant_data,
    tag_supported_nodes,
)

aten = torch.ops.aten

# Edge operator -> (format name, {format attribute: (argument position, default)}).
SUPPORTED: dict[Any, tuple[str, dict[str, tuple[int, Any]]]] = {
    aten.add.Tensor: ("add", {"alpha": (2, 1)}),
    aten.sub.Tensor: ("sub", {"alpha": (2, 1)}),
    aten.mul.Tensor: ("mul", {}),
    aten.relu.default: ("relu", {}),
    aten.sigmoid.default: ("sigmoid", {}),
    aten.tanh.default: ("tanh", {}),
    aten.linear.default: ("linear", {}),
    aten.addmm.default: ("addmm", {"beta": (3, 1), "alpha": (4, 1)}),
    aten.mm.default: ("mm", {}),
    aten.permute_copy.default: ("permute", {"dims": (1, None)}),
}
# How many leading arguments of each operator are tensors.
_TENSOR_ARGS = {
    "add": 2,
    "sub": 2,
    "mul": 2,
    "relu": 1,
    "sigmoid": 1,
    "tanh": 1,
    "linear": 3,
    "addmm": 3,
    "mm": 2,
    "permute": 1,
}


def _plain_f32(val: Any) -> bool:
    """A float32 tensor in the default (contiguous) dim order."""
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
        return False
    try:
        return tuple(val.dim_order()) == tuple(range(val.dim()))
    except Exception:  # noqa: BLE001 - dim order undefined for odd strides
        return False


def _attr(node: torch.fx.Node, name: str, position: int, default: Any) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[position] if len(node.args) > position else default


def is_node_supported(node: torch.fx.Node, ops: Iterable[str] | None = None) -> bool:
    """Whether the example backend can run ``node`` (limited to format ops ``ops``)."""
    if node.op != "call_function" or node.target not in SUPPORTED:
        return False
    name, attrs = SUPPORTED[node.target]
    if ops is not None and name not in ops:
        return False
    if not _plain_f32(node.meta.get("val")):
        return False
    n_tensors = _TENSOR_ARGS[name]
    for i, arg in enumerate(node.args[:n_tensors]):
        if arg is None and name == "linear" and i == 2:
            continue
        if not isinstance(arg, torch.fx.Node) or not _plain_f32(arg.meta.get("val")):
            return False
    allowed = set(attrs) | {"input", "other", "self", "mat1", "mat2", "weight", "bias", "dims"}
    if set(node.kwargs) - allowed:
        return False
    for attr_name, (pos, default) in attrs.items():
        value = _attr(node, attr_name, pos, default)
        if attr_name == "dims":
            continue
        if isinstance(value, torch.fx.Node) or not isinstance(value, (int, float)):
            return False
    return True


class ExamplePartitioner(Partitioner):
    """Tags every group of supported nodes (see the module doc) for ``ExampleBackend``.

    - ``ops``: limit the backend to these format op names (``{"add", "relu"}``).
    - ``compile_specs``: passed to every delegate (``[CompileSpec("weights", b"named")]``).
    - ``keep_linear``: ask ``to_edge_transform_and_lower`` to keep ``aten.linear``
      whole where its input, weight and bias are float32 (``check_op_support``).
    - ``control_flow``: also partition inside ``torch.cond`` branches.
    """

    def __init__(
        self,
        ops: Iterable[str] | None = None,
        compile_specs: list[CompileSpec] | None = None,
        keep_linear: bool = True,
        control_flow: bool = True,
    ) -> None:
        super().__init__()
        self.ops = frozenset(ops) if ops is not None else None
        self.compile_specs = list(compile_specs or [])
        self.keep_linear = keep_linear
        self.control_flow = control_flow

    def _supported(self, node: torch.fx.Node) -> bool:
        return is_node_supported(node, self.ops)

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tags: list[str] = []
        graphs = [exported_program.graph_module]
        while graphs:
            gm = graphs.pop(0)
            tags += tag_supported_nodes(gm, self._supported, "example", len(tags))
            if self.control_flow:
                graphs += _branches(gm)
            _tag_branch_constants(gm)
        tag_constant_data(exported_program)
        spec = DelegationSpec(BACKEND_ID, self.compile_specs)
        return PartitionResult(exported_program, {tag: spec for tag in tags})

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[Any], Callable[[torch.fx.Node], bool] | None]:
        if not self.keep_linear or (self.ops is not None and "linear" not in self.ops):
            return [], None
        return [aten.linear.default], self._supported


def _branches(gm: torch.fx.GraphModule) -> list[torch.fx.GraphModule]:
    from pyexecutorch.exir.graph_utils import is_control_flow, submodules

    out = []
    for node in gm.graph.nodes:
        if is_control_flow(node) and DELEGATION_TAG not in node.meta:
            out.extend(submodules(gm, node))
    return out


def _tag_branch_constants(gm: torch.fx.GraphModule) -> None:
    """Constant tensors read with ``get_attr`` (inside branches) go with their users."""
    for node in gm.graph.nodes:
        if node.op != "get_attr" or not node.users:
            continue
        if not isinstance(getattr(gm, node.target, None), torch.Tensor):
            continue
        tags = {u.meta.get(DELEGATION_TAG) for u in node.users}
        if len(tags) == 1 and None not in tags:
            node.meta[DELEGATION_TAG] = tags.pop()


# --------------------------------------------------------------------------------------
# preprocess


def _shape(val: Any) -> list[int | None]:
    return [int(d) if isinstance(d, int) else None for d in val.shape]


def _constant_data(ep: ExportedProgram, target: str) -> torch.Tensor:
    if target in ep.state_dict:
        t = ep.state_dict[target]
    elif target in ep.constants:
        t = ep.constants[target]
    else:
        raise PreprocessError(f"{BACKEND_ID}: no data for constant {target!r}")
    return t.detach().contiguous()


class ExampleBackend(BackendDetails):
    """Serializes a partition of supported nodes (see the module doc)."""

    @staticmethod
    def preprocess(
        edge_program: ExportedProgram, compile_specs: list[CompileSpec]
    ) -> PreprocessResult:
        specs = {s.key: s.value for s in compile_specs}
        mode = specs.get("weights", b"inline")
        if mode not in (b"inline", b"named"):
            raise PreprocessError(
                f"{BACKEND_ID}: compile spec 'weights' must be b'inline' or b'named', got {mode!r}"
            )
        sig = edge_program.graph_signature
        kinds = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
        ids: dict[torch.fx.Node, int] = {}
        values: list[dict[str, Any]] = []
        header: dict[str, Any] = {
            "values": values,
            "inputs": [],
            "outputs": [],
            "constants": [],
            "ops": [],
        }
        blob = bytearray()
        store = NamedDataStore() if mode == b"named" else None
        debug_handle_map: dict[str, tuple[int, ...]] = {}

        def new_value(node: torch.fx.Node) -> int:
            val = node.meta.get("val")
            if not _plain_f32(val):
                raise PreprocessError(
                    f"{BACKEND_ID}: value {node.name} is not a contiguous float32 tensor ({val!r})"
                )
            ids[node] = len(values)
            values.append({"dtype": "float32", "shape": _shape(val)})
            return ids[node]

        for node in edge_program.graph.nodes:
            if node.op == "placeholder":
                vid = new_value(node)
                spec = kinds[node.name]
                if spec.kind == InputKind.USER_INPUT:
                    header["inputs"].append(vid)
                    continue
                data = _constant_data(edge_program, spec.target)
                raw = data.numpy().tobytes()
                if store is not None:
                    key = f"example_backend/{hashlib.sha256(raw).hexdigest()[:32]}"
                    store.add_named_data(key, raw, ALIGNMENT)
                    header["constants"].append({"value": vid, "key": key})
                else:
                    blob += bytes(pad(len(blob)))
                    header["constants"].append(
                        {"value": vid, "offset": len(blob), "nbytes": len(raw)}
                    )
                    blob += raw
            elif node.op == "call_function":
                if node.target not in SUPPORTED:
                    raise PreprocessError(
                        f"{BACKEND_ID} cannot run node {node.name} ({node.target})"
                    )
                name, attrs = SUPPORTED[node.target]
                args = []
                for i, arg in enumerate(node.args[: _TENSOR_ARGS[name]]):
                    if arg is None:
                        args.append(-1)  # linear without bias
                    elif isinstance(arg, torch.fx.Node) and arg in ids:
                        args.append(ids[arg])
                    else:
                        raise PreprocessError(
                            f"{BACKEND_ID}: argument {i} of {node.name} is not a tensor"
                        )
                while name == "linear" and len(args) < 3:
                    args.append(-1)
                op = {"op": name, "args": args, "out": new_value(node)}
                attr_values = {k: _attr(node, k, p, d) for k, (p, d) in attrs.items()}
                if attr_values:
                    op["attrs"] = {
                        k: [int(x) for x in v] if k == "dims" else v for k, v in attr_values.items()
                    }
                handle = node.meta.get("debug_handle")
                if isinstance(handle, int):
                    debug_handle_map[str(len(header["ops"]))] = (handle,)
                header["ops"].append(op)
            elif node.op == "output":
                for out in node.args[0]:
                    if not isinstance(out, torch.fx.Node) or out not in ids:
                        raise PreprocessError(
                            f"{BACKEND_ID}: output {out!r} is not a tensor of the partition"
                        )
                    header["outputs"].append(ids[out])
            else:
                raise PreprocessError(f"{BACKEND_ID}: unsupported {node.op} node {node.name}")
        return PreprocessResult(
            processed_bytes=pack(header, bytes(blob)),
            debug_handle_map=debug_handle_map,
            data_store_output=store.get_named_data_store_output() if store is not None else None,
        )


__all__ = ["SUPPORTED", "ExampleBackend", "ExamplePartitioner", "is_node_supported"]
