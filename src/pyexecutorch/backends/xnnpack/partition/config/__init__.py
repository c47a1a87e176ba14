"""Which edge nodes XNNPACK takes: one table of op configs.

Each :class:`OpConfig` names an edge operator, the precision it serves and a
``check`` that returns why a node cannot go to XNNPACK (``None``: it can),
with the same constraints as the official 1.5.1 partitioner's configs (alpha
on add/sub, softmax on the last dim, mean over H and W of 4-D tensors, ...).
``deps`` lists the nodes that must be delegated together with the node (a
convolution's weight and bias, the ``getitem`` reading a batch norm).

Quantized patterns are further configs with precision ``STATIC_QUANT`` or
``DYNAMIC_QUANT``; :func:`register_configs` adds them to the table.
"""

from __future__ import annotations

import enum
import math
import operator
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch.export import ExportedProgram
from torch.fx import Node
from torch.fx.passes.utils.source_matcher_utils import SourcePartition, get_source_partitions

aten = torch.ops.aten


class ConfigPrecisionType(enum.Enum):
    FP32 = 1
    STATIC_QUANT = 2
    DYNAMIC_QUANT = 3


FP32 = ConfigPrecisionType.FP32
FLOAT_DTYPES = frozenset({torch.float32, torch.float16})

Check = Callable[[Node, ExportedProgram], "str | None"]
Deps = Callable[[Node, ExportedProgram], list[Node]]


def _no_check(node: Node, ep: ExportedProgram) -> str | None:
    return None


def _no_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    return []


@dataclass(frozen=True)
class OpConfig:
    """One edge operator XNNPACK can take at one precision.

    - ``name``: the official config class this mirrors (``"AddConfig"``).
    - ``keep_whole``: ``to_edge_transform_and_lower`` keeps the operator
      undecomposed where ``check`` accepts the node.
    - ``check_dtypes``: apply the common float32/float16 check to the node's
      tensor inputs and outputs before ``check`` (quantized configs do their own).
    """

    name: str
    op: torch._ops.OpOverload
    precision: ConfigPrecisionType
    check: Check = _no_check
    deps: Deps = _no_deps
    keep_whole: bool = False
    check_dtypes: bool = True
    dtypes: frozenset = field(default=FLOAT_DTYPES)

    @property
    def key(self) -> str:
        return op_key(self.op)


def op_key(target: object) -> str:
    """``"aten::add.Tensor"``: how tables name an operator (stable across packet objects)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return getattr(target, "__name__", str(target))
    return f"{schema.name}.{target._overloadname}"


# ------------------------------------------------------------------ helpers


def constant_tensor(ep: ExportedProgram, node: object) -> torch.Tensor | None:
    """The data of a parameter, buffer or lifted constant placeholder (or get_attr)."""
    if not isinstance(node, Node):
        return None
    if node.op == "get_attr":
        value = getattr(node.graph.owning_module, node.target, None)
        return value if isinstance(value, torch.Tensor) else None
    if node.op != "placeholder":
        return None
    sig = ep.graph_signature
    for table, store in (
        (sig.inputs_to_parameters, ep.state_dict),
        (sig.inputs_to_buffers, ep.state_dict),
        (sig.inputs_to_lifted_tensor_constants, ep.constants),
    ):
        if node.name in table:
            target = table[node.name]
            value = store.get(target)
            if value is None:
                value = ep.constants.get(target, ep.state_dict.get(target))
            return value
    return None


def is_constant(ep: ExportedProgram, node: object) -> bool:
    if not isinstance(node, Node):
        return False
    if node.op == "get_attr":
        return True
    if node.op != "placeholder":
        return False
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    name = node.name
    if name in sig.inputs_to_buffers:
        return sig.inputs_to_buffers[name] not in mutated
    return name in sig.inputs_to_parameters or name in sig.inputs_to_lifted_tensor_constants


def arg(node: Node, index: int, name: str, default: object = None) -> object:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def shape_of(node: object) -> tuple:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else ()


def rank(node: object) -> int:
    return len(shape_of(node))


def is_dynamic(node: Node) -> bool:
    """Whether the node or any of its tensor inputs has a symbolic size."""
    for n in (node, *node.all_input_nodes):
        if any(not isinstance(d, int) for d in shape_of(n)):
            return True
    return False


def _tensors(value: object) -> list[object]:
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _tensors(item)]
    return [value]


def dtype_problem(node: Node, dtypes: frozenset) -> str | None:
    """The common check: tensor inputs and outputs of one allowed dtype, not empty."""
    reference = None
    for a in node.all_input_nodes:
        val = a.meta.get("val")
        if val is None or isinstance(val, (tuple, list)):
            continue
        if not isinstance(val, torch.Tensor):
            return f"input {a.name} is not a tensor"
        if val.numel() == 0 if all(isinstance(d, int) for d in val.shape) else False:
            return f"input {a.name} is empty"
        if val.dtype not in dtypes:
            return f"input {a.name} has dtype {val.dtype}"
        reference = reference or val.dtype
        if val.dtype != reference:
            return f"mixed input dtypes {reference} and {val.dtype}"
    outs = _tensors(node.meta.get("val"))
    for val in outs:
        if not isinstance(val, torch.Tensor):
            return "output is not a tensor"
        if val.dtype not in dtypes:
            return f"output dtype {val.dtype}"
    return None


def pool2d_args(
    node: Node, has_dilation: bool
) -> tuple[list[int], list[int], list[int], list[int]]:
    """``(kernel, stride, padding, dilation)`` as pairs, with ATen's defaults."""

    def pair(index: int, default: list[int]) -> list[int]:
        value = node.args[index] if len(node.args) > index else None
        if isinstance(value, int):
            return [value, value]
        values = list(value or [])
        if not values:
            return default
        return [values[0], values[0]] if len(values) == 1 else [values[0], values[1]]

    kernel = pair(1, [1, 1])
    stride = pair(2, kernel)
    padding = pair(3, [0, 0])
    dilation = pair(4, [1, 1]) if has_dilation else [1, 1]
    return kernel, stride, padding, dilation


# ------------------------------------------------------------------ constraints


def _alpha_one(node: Node, ep: ExportedProgram) -> str | None:
    alpha = node.kwargs.get("alpha", 1)
    if abs(float(alpha) - 1.0) > 1e-9:
        return f"alpha={alpha} (XNNPACK takes alpha=1 only)"
    return None


def _softmax(node: Node, ep: ExportedProgram) -> str | None:
    dim, n = int(node.args[1]), rank(node.args[0])
    if dim not in (-1, n - 1):
        return f"softmax over dim {dim} of a rank-{n} tensor (last dim only)"
    return None


def _avg_pool(node: Node, ep: ExportedProgram) -> str | None:
    kernel, _, padding, _ = pool2d_args(node, has_dilation=False)
    ceil_mode = bool(arg(node, 4, "ceil_mode", False))
    count_include_pad = bool(arg(node, 5, "count_include_pad", True))
    divisor = arg(node, 6, "divisor_override", None)
    if ceil_mode:
        return "ceil_mode=True"
    if count_include_pad and any(padding):
        return "count_include_pad=True with non-zero padding"
    if divisor is not None and divisor != kernel[0] * kernel[1]:
        return f"divisor_override={divisor}"
    return None


def _max_pool(node: Node, ep: ExportedProgram) -> str | None:
    kernel, stride, _, _ = pool2d_args(node, has_dilation=True)
    if bool(arg(node, 5, "ceil_mode", False)) and is_dynamic(node):
        return "ceil_mode=True with dynamic shapes"
    if stride[0] > kernel[0] or stride[1] > kernel[1]:
        return f"stride {stride} larger than kernel {kernel}"
    return None


def _cat(node: Node, ep: ExportedProgram) -> str | None:
    n = len(node.all_input_nodes)
    if n < 2:
        return f"concatenation of {n} tensor(s) (needs at least 2)"
    return None


def _clone(node: Node, ep: ExportedProgram) -> str | None:
    src, out = node.args[0].meta["val"], node.meta["val"]
    if tuple(src.dim_order()) != tuple(out.dim_order()):
        return "clone changes the dim order"
    return None


def _clone_dim_order(node: Node, ep: ExportedProgram) -> str | None:
    order = node.kwargs.get("dim_order")
    if order is not None and list(node.args[0].meta["val"].dim_order()) != list(order):
        return "clone changes the dim order"
    return None


def _to_dim_order_copy(node: Node, ep: ExportedProgram) -> str | None:
    src, out = node.args[0].meta["val"], node.meta["val"]
    if src.dtype != out.dtype:
        return f"dtype conversion from {src.dtype} to {out.dtype}"
    return None


def _upsample(node: Node, ep: ExportedProgram) -> str | None:
    # XNNPACK's static resize takes any input size; only the output's is fixed (the
    # official UpsampleBilinear2dConfig checks the output alone too)
    if any(not isinstance(d, int) for d in shape_of(node)):
        return "dynamic output size"
    return None


def _view_copy(node: Node, ep: ExportedProgram) -> str | None:
    new_shape = list(node.args[1])
    if not all(isinstance(d, int) for d in new_shape):
        return f"symbolic reshape to {new_shape}"
    if sum(d == -1 for d in new_shape) > 1:
        return f"more than one inferred dim in {new_shape}"
    return None


def _gelu(node: Node, ep: ExportedProgram) -> str | None:
    if node.meta["val"].dtype == torch.float16:
        return "GELU in float16"
    # XNNPACK computes the erf form only; the official partitioner takes the tanh form
    # too and so computes something else than eager there
    approximate = arg(node, 1, "approximate", "none")
    if approximate != "none":
        return f"GELU approximate={approximate!r} (XNNPACK has the erf form only)"
    return None


def _mean_dim(node: Node, ep: ExportedProgram) -> str | None:
    n = rank(node.args[0])
    if n != 4:
        return f"mean of a rank-{n} tensor (4-D only)"
    if node.kwargs.get("dtype") is not None:
        return "mean with a dtype"
    dims = node.args[1] if len(node.args) > 1 else None
    dims = [dims] if isinstance(dims, int) else list(dims or range(n))
    if sorted(d % n for d in dims) != [2, 3]:
        return f"mean over dims {dims} (H and W only)"
    if not bool(arg(node, 2, "keepdim", False)):
        return "mean with keepdim=False"
    return None


def _pow(node: Node, ep: ExportedProgram) -> str | None:
    power = node.args[1]
    if not isinstance(power, int) or isinstance(power, bool):
        return f"power {power!r} is not an int"
    if power != 2:
        return f"power {power} (2 only)"
    return None


def _slice(node: Node, ep: ExportedProgram) -> str | None:
    step = arg(node, 4, "step", 1)
    if step != 1:
        return f"slice step {step}"
    for what, n in (("input", node.args[0]), ("output", node)):
        for d in shape_of(n):
            if not isinstance(d, int) or d == 0:
                return f"{what} shape {list(shape_of(n))} is dynamic or empty"
    return None


def _constant_pad(node: Node, ep: ExportedProgram) -> str | None:
    if any(p < 0 for p in node.args[1]):
        return "negative padding"
    return None


def _unsqueeze(node: Node, ep: ExportedProgram) -> str | None:
    dim, n = node.args[1], rank(node.args[0])
    if dim not in (-1, n):
        return f"unsqueeze at dim {dim} (trailing dim only)"
    return None


def _prelu(node: Node, ep: ExportedProgram) -> str | None:
    if not is_constant(ep, node.args[1]):
        return "PReLU weight is not a constant"
    return None


def _prelu_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    return [node.args[1]]


def _first_getitems(node: Node) -> list[Node] | None:
    """The users of a multi-output node when they all read output 0."""
    users = list(node.users)
    if not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
        return None
    return users


def _batch_norm(node: Node, ep: ExportedProgram) -> str | None:
    if _first_getitems(node) is None:
        return "a batch-norm output other than the first is read"
    params = node.args[1:5]
    if not all(p is None or is_constant(ep, p) for p in params):
        return "batch-norm parameters are not constants"
    src = node.args[0]
    fusable = (
        isinstance(src, Node)
        and src.target in (aten.convolution.default, aten.linear.default)
        and len(src.users) == 1
        and is_constant(ep, src.args[1])
    )
    if not fusable and rank(src) != 4:
        return "batch norm neither follows a convolution nor has a 4-D input"
    return None


def _batch_norm_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    params = [p for p in node.args[1:5] if isinstance(p, Node)]
    return params + list(node.users)


def _max_dim(node: Node, ep: ExportedProgram) -> str | None:
    if rank(node.args[0]) != 4:
        return f"max.dim of a rank-{rank(node.args[0])} tensor (4-D only)"
    dim = node.args[1] % 4
    # the official visitor raises on these at preprocess; here they stay portable
    if dim not in (2, 3):
        return f"max over dim {node.args[1]} (H or W only)"
    if not bool(arg(node, 2, "keepdim", False)):
        return "max.dim with keepdim=False"
    if node.args[0].meta["val"].dtype not in FLOAT_DTYPES:
        return f"input dtype {node.args[0].meta['val'].dtype}"
    if _first_getitems(node) is None:
        return "the indices of max.dim are read"
    return None


def _max_dim_deps(node: Node, ep: ExportedProgram) -> list[Node]:
    return list(node.users)


# GEMMs: weight (and bias) must be constants; a following relu/hardtanh joins.
_GEMM_ACTS = (aten.relu.default, aten.hardtanh.default)


def _gemm(weight_index: int, bias_index: int | None, act_index: int) -> tuple[Check, Deps]:
    def weight_of(node: Node) -> object:
        w = node.args[weight_index] if len(node.args) > weight_index else None
        # addmm/mm read a transposed weight: permute_copy(w, [1, 0])
        if (
            weight_index == 2 or (weight_index == 1 and node.target == aten.mm.default)
        ) and isinstance(w, Node):
            if w.target == aten.permute_copy.default and list(w.args[1]) == [1, 0]:
                return w.args[0]
        return w

    def check(node: Node, ep: ExportedProgram) -> str | None:
        if not is_constant(ep, weight_of(node)):
            return "weight is not a constant"
        if bias_index is not None and len(node.args) > bias_index:
            bias = node.args[bias_index]
            if bias is not None and not is_constant(ep, bias):
                return "bias is not a constant"
            # a fully connected layer adds one value per output channel: addmm's (its
            # bias comes first) full (M, N) bias matrix is not that
            val = bias.meta.get("val") if bias_index == 0 and isinstance(bias, Node) else None
            shape = tuple(val.shape) if isinstance(val, torch.Tensor) else ()
            units = node.meta["val"].shape[-1]
            if shape and (shape[-1] != units or math.prod(shape) != units):
                return f"bias {list(shape)} is not one value per output channel ({units})"
        return None

    def deps(node: Node, ep: ExportedProgram) -> list[Node]:
        out = [weight_of(node)]
        w = node.args[weight_index]
        if w is not out[0]:
            out.append(w)
        if bias_index is not None and len(node.args) > bias_index:
            if isinstance(node.args[bias_index], Node):
                out.append(node.args[bias_index])
        end = node
        if node.target in (aten.addmm.default, aten.mm.default):
            # a decomposed nn.Linear (to_edge's addmm between the reshapes of a rank > 2
            # input) goes whole, as the official AddmmConfig takes its source partition
            part = linear_source_partition(node)
            if part is not None:
                out += [n for n in part.nodes if n not in out and n is not node]
                end = part.output_nodes[0]
        users = list(end.users)
        if len(users) == 1 and users[0].target in _GEMM_ACTS:
            out.append(users[0])
        return out

    return check, deps


_LINEAR_SOURCES = (torch.nn.Linear, torch.nn.functional.linear)
# graph -> (its node count when read, node -> the nn.Linear source partition holding it)
_SOURCE_PARTITIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def linear_source_partition(node: Node) -> SourcePartition | None:
    """The ``nn.Linear`` source partition holding ``node`` where it has the form the
    official AddmmConfig takes whole: the activation an input of the partition, one
    output (read per graph once, not per node)."""
    graph = node.graph
    count, table = _SOURCE_PARTITIONS.get(graph, (-1, None))
    if count != len(graph.nodes):
        table = {}
        for parts in get_source_partitions(graph, list(_LINEAR_SOURCES)).values():
            for part in parts:
                for n in part.nodes:
                    table[n] = part
        _SOURCE_PARTITIONS[graph] = (len(graph.nodes), table)
    part = table.get(node)
    if part is None or len(part.output_nodes) != 1:
        return None
    act = node.args[1] if node.target == aten.addmm.default else node.args[0]
    # walk from the activation argument up to the partition's input (the reshape)
    while isinstance(act, Node) and act.all_input_nodes and act not in part.input_nodes:
        act = act.all_input_nodes[0]
    return part if act in part.input_nodes else None


def _conv(node: Node, ep: ExportedProgram) -> str | None:
    weight_rank = rank(node.args[1])
    if weight_rank - 2 > 2:
        return f"{weight_rank - 2}-D convolution (1-D and 2-D only)"
    return _conv_gemm_check(node, ep)


_conv_gemm_check, _conv_deps = _gemm(1, 2, 0)
_linear_check, _linear_deps = _gemm(1, 2, 0)
_addmm_check, _addmm_deps = _gemm(2, 0, 1)
_mm_check, _mm_deps = _gemm(1, None, 0)


def _simple(name: str, target: torch._ops.OpOverload, check: Check = _no_check, **kw) -> OpConfig:
    return OpConfig(name, target, FP32, check, **kw)


FLOAT_CONFIGS: list[OpConfig] = [
    _simple("AbsConfig", aten.abs.default),
    _simple("AddConfig", aten.add.Tensor, _alpha_one),
    _simple("AddmmConfig", aten.addmm.default, _addmm_check, deps=_addmm_deps),
    _simple("AvgPoolingConfig", aten.avg_pool2d.default, _avg_pool),
    _simple(
        "BatchNormConfig",
        aten._native_batch_norm_legit_no_training.default,
        _batch_norm,
        deps=_batch_norm_deps,
    ),
    _simple("BMMConfig", aten.bmm.default),
    _simple("CatConfig", aten.cat.default, _cat),
    _simple("CeilConfig", aten.ceil.default),
    _simple("CloneConfig", aten.clone.default, _clone),
    _simple("ConstantPadConfig", aten.constant_pad_nd.default, _constant_pad),
    _simple("ConvolutionConfig", aten.convolution.default, _conv, deps=_conv_deps),
    _simple("ClampConfig", aten.clamp.default),
    _simple("DivConfig", aten.div.Tensor),
    _simple("ExpConfig", aten.exp.default),
    _simple("FloorConfig", aten.floor.default),
    _simple("GeluConfig", aten.gelu.default, _gelu),
    _simple("HardtanhConfig", aten.hardtanh.default),
    _simple("HardswishConfig", aten.hardswish.default, keep_whole=True),
    _simple("LeakyReLUConfig", aten.leaky_relu.default),
    _simple("LinearConfig", aten.linear.default, _linear_check, deps=_linear_deps, keep_whole=True),
    _simple("LogConfig", aten.log.default),
    _simple("MaxDimConfig", aten.max.dim, _max_dim, deps=_max_dim_deps, check_dtypes=False),
    _simple("MaximumConfig", aten.maximum.default),
    _simple("MaxPool2dConfig", aten.max_pool2d.default, _max_pool, keep_whole=True),
    _simple("MeanDimConfig", aten.mean.dim, _mean_dim),
    _simple("MinimumConfig", aten.minimum.default),
    _simple("MMConfig", aten.mm.default, _mm_check, deps=_mm_deps),
    _simple("MulConfig", aten.mul.Tensor),
    _simple("NegConfig", aten.neg.default),
    _simple("PermuteConfig", aten.permute_copy.default),
    _simple("PowConfig", aten.pow.Tensor_Scalar, _pow),
    _simple("PreluConfig", aten.prelu.default, _prelu, deps=_prelu_deps, keep_whole=True),
    _simple("ReciprocalSquareRootConfig", aten.rsqrt.default),
    _simple("ReLUConfig", aten.relu.default),
    _simple("TanhConfig", aten.tanh.default),
    _simple("SigmoidConfig", aten.sigmoid.default),
    _simple("SinConfig", aten.sin.default),
    _simple("CosConfig", aten.cos.default),
    _simple("SliceCopyConfig", aten.slice_copy.Tensor, _slice),
    _simple("SoftmaxConfig", aten._softmax.default, _softmax),
    _simple("SquareRootConfig", aten.sqrt.default),
    _simple("SubConfig", aten.sub.Tensor, _alpha_one),
    _simple("UnsqueezeCopyConfig", aten.unsqueeze_copy.default, _unsqueeze),
    _simple("UpsampleBilinear2dConfig", aten.upsample_bilinear2d.vec, _upsample, keep_whole=True),
    _simple("ViewCopyConfig", aten.view_copy.default, _view_copy),
]


def _dim_order_configs() -> list[OpConfig]:
    """The dim-order copies, under the names the edge dialect gives them."""
    from pyexecutorch.exir.dialects.dim_order_ops import clone_dim_order, to_dim_order_copy

    return [
        _simple("ToDimOrderCopyConfig", to_dim_order_copy(), _to_dim_order_copy),
        _simple("CloneDimOrderConfig", clone_dim_order(), _clone_dim_order),
    ]


_EXTRA: list[OpConfig] = []


def register_configs(configs: Iterable[OpConfig]) -> None:
    """Add configs (quantized patterns) to the default table."""
    for c in configs:
        if not isinstance(c, OpConfig):
            raise TypeError(f"expected an OpConfig, got {type(c).__name__}")
        _EXTRA.append(c)


def all_configs() -> list[OpConfig]:
    """The default table: the float configs, then every registered one."""
    _load_quantized()
    return [*FLOAT_CONFIGS, *_dim_order_configs(), *_EXTRA]


_quantized_loaded = False


def _load_quantized() -> None:
    """Import the quantized configs' module where it exists (it registers itself)."""
    global _quantized_loaded
    if _quantized_loaded:
        return
    _quantized_loaded = True
    import importlib

    name = "pyexecutorch.backends.xnnpack.partition.quant_configs"
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise


__all__ = [
    "FLOAT_CONFIGS",
    "ConfigPrecisionType",
    "OpConfig",
    "all_configs",
    "constant_tensor",
    "dtype_problem",
    "is_constant",
    "op_key",
    "register_configs",
]
