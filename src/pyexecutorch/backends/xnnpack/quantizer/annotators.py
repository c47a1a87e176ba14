"""The patterns the XNNPACK quantizer annotates, one function each, in a table.

Each annotator walks an ATen training graph (``torch.export`` before
decomposition) and writes ``QuantizationAnnotation``s for one pattern, as the
official XNNPACK quantizer does: which inputs are observed with which spec,
which node's output carries the pattern's output spec, and which nodes count
as taken so that later patterns skip them.  ``propagate_annotation`` then lets
operators that keep their input's quantization (relu, hardtanh, max pooling,
views, ...) share it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch._subclasses import FakeTensor
from torch.fx import GraphModule, Node
from torch.fx.passes.utils.matcher_with_name_node_map_utils import (
    SubgraphMatcherWithNameNodeMap,
)
from torchao.quantization.pt2e import WrapperModule
from torchao.quantization.pt2e.graph_utils import get_source_partitions
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    QuantizationConfig,
    QuantizationSpec,
    SharedQuantizationSpec,
    annotate_input_qspec_map,
    annotate_output_qspec,
    get_bias_qspec,
    get_input_act_qspec,
    get_output_act_qspec,
    get_weight_qspec,
)
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY
from torchao.quantization.pt2e.utils import (
    _get_aten_graph_module_for_pattern,
    _is_conv_node,
    _is_conv_transpose_node,
    get_new_attr_name_with_prefix,
)

aten = torch.ops.aten

NodeFilter = Callable[[Node], bool] | None
Annotator = Callable[[GraphModule, QuantizationConfig | None, NodeFilter], list[list[Node]]]

RELU_TARGETS = (aten.relu.default, aten.relu_.default)
ADD_TARGETS = (aten.add.Tensor, aten.add_.Tensor)
MUL_TARGETS = (aten.mul.Tensor, aten.mul_.Tensor)

# torch.histc (the histogram observer) works up to this magnitude.
_HISTC_UPPER_BOUND = 3.4028235e15

# Operators whose output keeps their first input's quantization parameters.
SHARING_OPS = frozenset(
    {
        aten.relu.default,
        aten.hardtanh.default,
        aten.hardtanh_.default,
        aten.max_pool2d.default,
        aten.mean.default,
        aten.mean.dim,
        aten.permute.default,
        aten.permute_copy.default,
        aten.transpose.int,
        aten.squeeze.dim,
        aten.squeeze_copy.dim,
        aten.adaptive_avg_pool2d.default,
        aten.view_copy.default,
        aten.view.default,
        aten.reshape.default,
        aten.slice.Tensor,
        aten.slice_copy.Tensor,
        aten.flatten.using_ints,
        # Identity in eval mode, which is how a quantized model is deployed.
        aten.dropout.default,
        aten.dropout_.default,
    }
)


# --------------------------------------------------------------------------------------
# Helpers


def is_annotated(nodes: Iterable[Node | None]) -> bool:
    return any(
        n is not None and Q_ANNOTATION_KEY in n.meta and n.meta[Q_ANNOTATION_KEY]._annotated
        for n in nodes
    )


def mark_annotated(nodes: Iterable[Node | None]) -> None:
    for n in nodes:
        if n is None:
            continue
        n.meta.setdefault(Q_ANNOTATION_KEY, QuantizationAnnotation())
        n.meta[Q_ANNOTATION_KEY]._annotated = True


def _passes(filter_fn: NodeFilter, nodes: Iterable[Node]) -> bool:
    return filter_fn is None or all(filter_fn(n) for n in nodes)


def _annotate(node: Node, inputs: dict[Node, object], output: object = None) -> None:
    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(
        input_qspec_map=inputs, output_qspec=output, _annotated=True
    )


def _single_user_producer(node: Node, is_producer: Callable[[Node], bool]) -> Node | None:
    """``node.args[0]`` when it is a producer of the wanted kind used only by ``node``."""
    prev = node.args[0] if node.args else None
    if not isinstance(prev, Node) or not is_producer(prev) or len(prev.users) > 1:
        return None
    return prev


def _is_call(targets: tuple) -> Callable[[Node], bool]:
    return lambda n: n.op == "call_function" and n.target in targets


_is_relu = _is_call(RELU_TARGETS)


def conv_groups(conv: Node) -> int:
    """Groups of a training-graph convolution, from its weight and activation shapes."""
    weight = conv.args[1]
    if _is_conv_node(conv):
        return conv.args[0].meta["val"].shape[1] // weight.meta["val"].shape[1]
    return conv.meta["val"].shape[1] // weight.meta["val"].shape[1]


def is_depthwise(weight_shape: tuple[int, ...], groups: int = 1) -> bool:
    """One input channel per group and a whole number of outputs per group."""
    if len(weight_shape) < 2 or groups < 1:
        return False
    per_group_in = weight_shape[1]
    per_group_out = int(weight_shape[0] / groups)
    return per_group_in == 1 and per_group_out % per_group_in == 0


def with_channel_axis(spec: QuantizationSpec | None, axis: int) -> QuantizationSpec | None:
    """``spec`` observed along ``axis`` (transposed convolutions keep outputs on axis 1)."""
    if spec is None:
        return None
    return QuantizationSpec(
        dtype=spec.dtype,
        quant_min=spec.quant_min,
        quant_max=spec.quant_max,
        qscheme=spec.qscheme,
        ch_axis=axis or spec.ch_axis,
        is_dynamic=spec.is_dynamic,
        observer_or_fake_quant_ctr=spec.observer_or_fake_quant_ctr,
    )


def _is_large_scalar(node: Node, gm: GraphModule) -> bool:
    if node.op != "get_attr":
        return False
    module_path, _, name = str(node.target).rpartition(".")
    tensor = getattr(gm.get_submodule(module_path), name)
    return tensor.numel() == 1 and abs(tensor.item()) > _HISTC_UPPER_BOUND


def _is_non_float(node: Node) -> bool:
    val = node.meta.get("val")
    return not isinstance(val, FakeTensor) or val.dtype != torch.float32


# --------------------------------------------------------------------------------------
# Linear


def annotate_linear(gm, config, filter_fn):
    partitions = []
    act_spec, out_spec = get_input_act_qspec(config), get_output_act_qspec(config)
    weight_spec, bias_spec = get_weight_qspec(config), get_bias_qspec(config)
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target != aten.linear.default:
            continue
        if (filter_fn and not filter_fn(node)) or is_annotated([node]):
            continue
        act, weight = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        annotate_input_qspec_map(node, act, act_spec)
        annotate_input_qspec_map(node, weight, weight_spec)
        partition = [node, weight]
        if bias:
            annotate_input_qspec_map(node, bias, bias_spec)
            partition.append(bias)
        annotate_output_qspec(node, out_spec)
        mark_annotated(partition)
        partitions.append(partition)
    return partitions


def annotate_linear_relu(gm, config, filter_fn):
    partitions = []
    for relu in gm.graph.nodes:
        if not _is_relu(relu):
            continue
        linear = _single_user_producer(relu, _is_call((aten.linear.default,)))
        if linear is None:
            continue
        act, weight = linear.args[0], linear.args[1]
        inputs = {act: get_input_act_qspec(config), weight: get_weight_qspec(config)}
        partition = [relu, linear, weight]
        bias = linear.args[2] if len(linear.args) > 2 else None
        if isinstance(bias, Node):
            inputs[bias] = get_bias_qspec(config)
            partition.append(bias)
        if is_annotated(partition) or not _passes(filter_fn, partition):
            continue
        _annotate(linear, inputs)
        _annotate(relu, {}, get_output_act_qspec(config))
        mark_annotated(partition)
        partitions.append(partition)
    return partitions


# --------------------------------------------------------------------------------------
# Convolutions


def _conv_inputs(conv: Node, config, transposed: bool) -> tuple[dict, list[Node]]:
    weight = conv.args[1]
    weight_spec = get_weight_qspec(config)
    if transposed:
        weight_spec = with_channel_axis(weight_spec, 1)
    inputs = {conv.args[0]: get_input_act_qspec(config), weight: weight_spec}
    partition = [conv, weight]
    bias = conv.args[2] if len(conv.args) > 2 else None
    if isinstance(bias, Node):
        inputs[bias] = get_bias_qspec(config)
        partition.append(bias)
    return inputs, partition


def _annotate_conv(gm, config, filter_fn, transposed: bool):
    is_conv = _is_conv_transpose_node if transposed else _is_conv_node
    dynamic = bool(config and config.input_activation and config.input_activation.is_dynamic)
    partitions = []
    for conv in gm.graph.nodes:
        if not is_conv(conv):
            continue
        # A convolution feeding only a relu is left to the conv+relu pattern.
        if len(conv.users) == 1 and _is_relu(next(iter(conv.users))):
            continue
        skip = transposed and conv_groups(conv) != 1
        if dynamic:
            # Dynamic quantization covers plain 2-d convolutions only.
            shape = getattr(conv.args[1].meta.get("val"), "shape", None)
            skip = skip or (shape is not None and len(shape) != 4)
            skip = skip or (not transposed and shape is not None and is_depthwise(shape, 1))
        inputs, partition = _conv_inputs(conv, config, transposed)
        if is_annotated(partition) or skip or not _passes(filter_fn, partition):
            continue
        _annotate(conv, inputs, get_output_act_qspec(config))
        mark_annotated(partition)
        partitions.append(partition)
    return partitions


def _annotate_conv_relu(gm, config, filter_fn, transposed: bool):
    is_conv = _is_conv_transpose_node if transposed else _is_conv_node
    partitions = []
    for relu in gm.graph.nodes:
        if not _is_relu(relu):
            continue
        conv = _single_user_producer(relu, is_conv)
        if conv is None:
            continue
        inputs, partition = _conv_inputs(conv, config, transposed)
        partition.insert(0, relu)
        if is_annotated(partition) or (transposed and conv_groups(conv) != 1):
            continue
        if not _passes(filter_fn, partition):
            continue
        _annotate(conv, inputs)
        _annotate(relu, {}, get_output_act_qspec(config))
        mark_annotated(partition)
        partitions.append(partition)
    return partitions


# Example inputs to trace conv + batch norm patterns with: x, conv weight, conv bias,
# bn weight, bn bias, running mean, running var.
def _bn_example_inputs(rank: int) -> tuple[torch.Tensor, ...]:
    spatial = (3,) * rank
    return (
        torch.randn(1, 1, *spatial),
        torch.randn(1, 1, *((1,) * rank)),
        *(torch.randn(1) for _ in range(5)),
    )


def _conv_bn_pattern(conv_fn: Callable, relu: str | None) -> WrapperModule:
    def pattern(x, conv_weight, conv_bias, bn_weight, bn_bias, bn_rm, bn_rv):
        conv = conv_fn(x, conv_weight, conv_bias)
        out = F.batch_norm(conv, bn_rm, bn_rv, bn_weight, bn_bias, training=True)
        if relu == "inplace":
            out = F.relu_(out)
        elif relu == "relu":
            out = F.relu(out)
        names = {"input": x, "conv": conv, "weight": conv_weight, "bias": conv_bias}
        return out, {**names, "output": out}

    return WrapperModule(pattern)


def _annotate_conv_bn(gm, config, filter_fn, has_relu: bool, transposed: bool):
    """Conv + training-mode batch norm (+ relu): only QAT graphs keep the batch norm."""
    # Unused batch-norm outputs would stop the matcher.
    gm.graph.eliminate_dead_code()
    gm.recompile()
    if transposed:
        fns = ((F.conv_transpose1d, 1), (F.conv_transpose2d, 2))
    else:
        fns = ((F.conv1d, 1), (F.conv2d, 2))
    cuda = [True, False] if torch.cuda.is_available() else [False]
    relus = ["inplace", "relu"] if has_relu else [None]
    matches = []
    for (conv_fn, rank), is_cuda, relu in itertools.product(fns, cuda, relus):
        pattern = _get_aten_graph_module_for_pattern(
            _conv_bn_pattern(conv_fn, relu), _bn_example_inputs(rank), is_cuda
        )
        pattern.graph.eliminate_dead_code()
        pattern.recompile()
        matches += SubgraphMatcherWithNameNodeMap(pattern, ignore_literals=True).match(gm.graph)

    partitions = []
    for match in matches:
        names = match.name_node_map
        conv, x, weight, bias = names["conv"], names["input"], names["weight"], names["bias"]
        if conv.args[0] is not x or conv.args[1] is not weight:
            raise ValueError(f"conv + batch norm match: {conv} does not take {x} and {weight}")
        if len(conv.args) > 2 and conv.args[2] is not bias:
            raise ValueError(f"conv + batch norm match: {conv} does not take bias {bias}")
        partition = [conv, weight] + ([bias] if bias is not None else [])
        if is_annotated(partition) or not _passes(filter_fn, partition):
            continue
        inputs = {x: get_input_act_qspec(config), weight: get_weight_qspec(config)}
        if bias is not None:
            inputs[bias] = get_bias_qspec(config)
        _annotate(conv, inputs)
        _annotate(names["output"], {}, get_output_act_qspec(config))
        mark_annotated(partition)
        partitions.append(partition)
    return partitions


# --------------------------------------------------------------------------------------
# Pooling, binary operators, concatenation


def annotate_adaptive_avg_pool2d(gm, config, filter_fn):
    found = get_source_partitions(
        gm.graph, [torch.nn.AdaptiveAvgPool2d, F.adaptive_avg_pool2d], filter_fn
    )
    partitions = []
    for partition in itertools.chain.from_iterable(found.values()):
        pool = partition.output_nodes[0]
        if pool.op != "call_function" or pool.target != aten.adaptive_avg_pool2d.default:
            raise ValueError(f"{pool} is not an aten adaptive_avg_pool2d operator")
        if is_annotated([pool]):
            continue
        partitions.append(partition.nodes)
        act = pool.args[0]
        # Share the input's parameters when its producer already has an output spec.
        producer = act.meta.get(Q_ANNOTATION_KEY)
        if producer is not None and producer._annotated and producer.output_qspec is not None:
            act_spec = SharedQuantizationSpec(act)
        else:
            act_spec = get_input_act_qspec(config)
        _annotate(pool, {act: act_spec}, SharedQuantizationSpec((act, pool)))
    return partitions


def _binary_inputs(node: Node, gm: GraphModule, config) -> dict[Node, object] | None:
    """The tensor operands to observe, or None when one cannot be (a huge scalar
    constant or a non-float tensor)."""
    inputs = {}
    for arg in node.args[:2]:
        if not isinstance(arg, Node):
            continue
        if _is_large_scalar(arg, gm) or _is_non_float(arg):
            return None
        inputs[arg] = get_input_act_qspec(config)
    return inputs


def _binary_annotator(targets: tuple) -> Annotator:
    def annotate(gm, config, filter_fn):
        partitions = []
        for node in gm.graph.nodes:
            if node.op != "call_function" or node.target not in targets:
                continue
            if is_annotated([node]) or not _passes(filter_fn, [node]):
                continue
            inputs = _binary_inputs(node, gm, config)
            if inputs is None:
                continue
            _annotate(node, inputs, get_output_act_qspec(config))
            partitions.append([node, *inputs])
        return partitions

    return annotate


def _binary_relu_annotator(targets: tuple) -> Annotator:
    def annotate(gm, config, filter_fn):
        partitions = []
        for relu in gm.graph.nodes:
            if not _is_relu(relu):
                continue
            op = _single_user_producer(relu, _is_call(targets))
            if op is None:
                continue
            partition = [relu, op]
            if is_annotated(partition) or not _passes(filter_fn, partition):
                continue
            inputs = _binary_inputs(op, gm, config)
            if inputs is None:
                continue
            _annotate(op, inputs)
            _annotate(relu, {}, get_output_act_qspec(config))
            partitions.append([*partition, *inputs])
        return partitions

    return annotate


def _shares_annotated_source(node: Node) -> bool:
    """``node`` gets its parameters from an annotated output, through sharing operators."""
    seen: set[Node] = set()
    while node not in seen:
        seen.add(node)
        annotation = node.meta.get(Q_ANNOTATION_KEY)
        if annotation is not None and annotation._annotated and annotation.output_qspec:
            return True
        if node.op != "call_function" or node.target not in SHARING_OPS:
            return False
        prev = node.args[0]
        if not isinstance(prev, Node):
            return False
        node = prev
    return False


def annotate_cat(gm, config, filter_fn):
    # As the official quantizer: every cat is annotated, whatever the filter says.
    partitions = []
    for cat in gm.graph.nodes:
        if cat.target != aten.cat.default or is_annotated([cat]):
            continue
        partitions.append(cat.all_input_nodes)
        tensors = cat.args[0]
        source = next(
            (t for t in tensors if isinstance(t, Node) and _shares_annotated_source(t)),
            tensors[0],
        )
        shared = SharedQuantizationSpec((source, cat))
        inputs = {source: get_input_act_qspec(config)} if isinstance(source, Node) else {}
        for t in tensors:
            inputs.setdefault(t, shared)
        _annotate(cat, inputs, shared)
    return partitions


def propagate_annotation(gm: GraphModule) -> None:
    """Sharing operators after an annotated output take its parameters."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in SHARING_OPS:
            continue
        prev = node.args[0]
        if not isinstance(prev, Node):
            continue
        annotation = prev.meta.get(Q_ANNOTATION_KEY)
        if not annotation or not annotation.output_qspec or is_annotated([node]):
            continue
        shared = SharedQuantizationSpec(prev)
        _annotate(node, {prev: shared}, shared)


def scalars_to_attrs(gm: GraphModule) -> GraphModule:
    """Scalar operands of float add/mul become float buffers, so that they can be observed.

    Integer arithmetic (position ids, index math) keeps its scalars: the official
    quantizer converts those too, which turns the ids into floats and breaks the model
    (an embedding then refuses its float indices)."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in (aten.add.Tensor, aten.mul.Tensor):
            continue
        val = node.meta.get("val")
        if not (isinstance(val, torch.Tensor) and val.is_floating_point()):
            continue
        args = []
        for arg in node.args:
            if isinstance(arg, Node):
                args.append(arg)
                continue
            name = get_new_attr_name_with_prefix("_tensor_constant_")(gm)
            value = torch.tensor(float(arg))
            gm.register_buffer(name, value)
            with gm.graph.inserting_before(node):
                attr = gm.graph.create_node("get_attr", name, (), {})
            attr.meta["val"] = node.meta["val"].fake_mode.from_tensor(value, static_shapes=True)
            args.append(attr)
        node.args = tuple(args)
    gm.recompile()
    return gm


def _conv_variant(fn: Callable, **kw) -> Annotator:
    return lambda gm, config, filter_fn: fn(gm, config, filter_fn, **kw)


ANNOTATORS: dict[str, Annotator] = {
    "linear": annotate_linear,
    "linear_relu": annotate_linear_relu,
    "conv": _conv_variant(_annotate_conv, transposed=False),
    "conv_transpose": _conv_variant(_annotate_conv, transposed=True),
    "conv_relu": _conv_variant(_annotate_conv_relu, transposed=False),
    "conv_transpose_relu": _conv_variant(_annotate_conv_relu, transposed=True),
    "conv_bn": _conv_variant(_annotate_conv_bn, has_relu=False, transposed=False),
    "conv_bn_relu": _conv_variant(_annotate_conv_bn, has_relu=True, transposed=False),
    "conv_transpose_bn": _conv_variant(_annotate_conv_bn, has_relu=False, transposed=True),
    "conv_transpose_bn_relu": _conv_variant(_annotate_conv_bn, has_relu=True, transposed=True),
    "adaptive_avg_pool2d": annotate_adaptive_avg_pool2d,
    "add": _binary_annotator(ADD_TARGETS),
    "add_relu": _binary_relu_annotator(ADD_TARGETS),
    "mul": _binary_annotator(MUL_TARGETS),
    "mul_relu": _binary_relu_annotator(MUL_TARGETS),
    "cat": annotate_cat,
}
