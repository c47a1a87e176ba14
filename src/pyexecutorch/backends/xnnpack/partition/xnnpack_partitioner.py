"""``XnnpackPartitioner``: tags the nodes of an edge program that XNNPACK runs.

Each call_function node is matched against the op configs of its operator
(:mod:`.config`) at the enabled precisions; a config that accepts the node
names the nodes delegated with it (weights, fused activations), and groups of
matched nodes that touch are merged, as the official partitioner does. Each
group stays whole in one delegate; groups are merged greedily into larger
delegates wherever no path leaves and re-enters one (:mod:`.grouping`). Why a node stays with the portable kernels is logged, one line per
node, at DEBUG on the logger ``pyexecutorch.backends.xnnpack`` (``verbose=True``
turns that level on).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Node

from pyexecutorch.backends.xnnpack.partition.config import (
    FLOAT_DTYPES,
    ConfigPrecisionType,
    OpConfig,
    all_configs,
    dtype_problem,
    is_constant,
    op_key,
)
from pyexecutorch.backends.xnnpack.partition.grouping import delegate_groups
from pyexecutorch.exir.backend import (
    DELEGATION_TAG,
    DelegationSpec,
    Partitioner,
    PartitionResult,
)

logger = logging.getLogger("pyexecutorch.backends.xnnpack")
BACKEND_ID = "XnnpackBackend"


class XnnpackPartitioner(Partitioner):
    """Delegates to ``XnnpackBackend`` every node an op config accepts.

    - ``configs``: the :class:`OpConfig` entries to use, or the official config
      class names (``["LinearConfig", "ReLUConfig"]``); default: every config.
    - ``config_precisions``: a :class:`ConfigPrecisionType` or a list of them;
      only configs of these precisions apply (default: all of them).
    - ``per_op_mode``: one delegate per matched node (with the nodes its config
      takes along), never merged with its neighbours.
    - ``verbose``: log why each node is not delegated (DEBUG level on).
    - ``force_non_static_weights_for_f32_linear``: leave float linear weights
      outside the delegate (as delegate inputs).
    - ``enable_bf16``: also take bfloat16 nodes.
    """

    def __init__(
        self,
        configs: Iterable[OpConfig | str] | None = None,
        config_precisions: ConfigPrecisionType | Sequence[ConfigPrecisionType] | None = None,
        per_op_mode: bool = False,
        verbose: bool = False,
        *,
        force_non_static_weights_for_f32_linear: bool = False,
        enable_bf16: bool = False,
        compile_specs: list[Any] | None = None,
    ) -> None:
        super().__init__()
        if verbose:
            logger.setLevel(logging.DEBUG)
        table = all_configs() if configs is None else _resolve(configs)
        available = {c.precision for c in table}
        if config_precisions is None:
            wanted = available
        else:
            asked = (
                [config_precisions]
                if isinstance(config_precisions, ConfigPrecisionType)
                else list(config_precisions)
            )
            for p in asked:
                if not isinstance(p, ConfigPrecisionType):
                    raise TypeError(
                        "XnnpackPartitioner: config_precisions must be ConfigPrecisionType "
                        f"values, got {p!r}"
                    )
            missing = [p.name for p in asked if p not in available]
            if missing:
                raise ValueError(
                    f"XnnpackPartitioner: no op config handles precision {', '.join(missing)} "
                    f"(configs given cover {sorted(p.name for p in available)})"
                )
            wanted = set(asked)
        self.configs: dict[str, list[OpConfig]] = {}
        for c in table:
            if c.precision in wanted:
                self.configs.setdefault(c.key, []).append(c)
        self.precisions = frozenset(wanted)
        self.per_op_mode = per_op_mode
        self.force_non_static_weights_for_f32_linear = force_non_static_weights_for_f32_linear
        self.dtypes = frozenset({torch.float32, torch.float16}) | (
            {torch.bfloat16} if enable_bf16 else set()
        )
        self.delegation_spec = DelegationSpec(BACKEND_ID, list(compile_specs or []))

    # ------------------------------------------------------------------ matching

    def match(self, node: Node, ep: ExportedProgram) -> tuple[list[Node] | None, str]:
        """The nodes delegated with ``node`` (itself first), or None and why not."""
        configs = self.configs.get(op_key(node.target))
        if not configs:
            return None, f"no XNNPACK config for {op_key(node.target)}"
        reasons = []
        for c in configs:
            problem = None
            if c.check_dtypes:
                dtypes = self.dtypes if c.dtypes == FLOAT_DTYPES else c.dtypes
                problem = dtype_problem(node, dtypes)
            if problem is None:
                problem = c.check(node, ep)
            if problem is None:
                deps = [d for d in c.deps(node, ep) if isinstance(d, Node)]
                if self.force_non_static_weights_for_f32_linear and c.op in _LINEARS:
                    deps = [d for d in deps if not is_constant(ep, d)]
                return [node, *deps], ""
            reasons.append(f"{c.name}: {problem}")
        return None, "; ".join(reasons)

    def _groups(self, ep: ExportedProgram) -> list[list[Node]]:
        parent: dict[Node, Node] = {}

        def find(x: Node) -> Node:
            parent.setdefault(x, x)
            while parent[x] is not x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        matches = []
        for node in ep.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            group, why = self.match(node, ep)
            if group is None:
                logger.debug(
                    "XNNPACK leaves %s (%s) to portable: %s", node.name, op_key(node.target), why
                )
                continue
            matches.append(group)
        for group in matches:
            # constants shared between groups are copied, not merged through
            members = [n for n in group if not (is_constant(ep, n) and n in parent)]
            root = find(members[0])
            for n in members[1:]:
                parent[find(n)] = root
        by_root: dict[Node, list[Node]] = {}
        for n in parent:
            by_root.setdefault(find(n), []).append(n)
        return [g for g in by_root.values() if not _unread_dynamic_quantization(g)]

    # ------------------------------------------------------------------ partition

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        ep = exported_program
        groups = self._groups(ep)
        tags: list[str] = []
        if self.per_op_mode:
            # one delegate per group of overlapping matches, never merged with its neighbours
            order = {n: i for i, n in enumerate(ep.graph.nodes)}
            for group in sorted(groups, key=lambda g: min(order[n] for n in g)):
                tag = f"tag{len(tags)}"
                for n in group:
                    if n.op == "call_function":
                        n.meta[DELEGATION_TAG] = tag
                _tag_constants(ep, group)
                tags.append(tag)
        else:
            supported = {n for g in groups for n in g if n.op == "call_function"}
            while True:
                # a matched group (a quantized linear with its input's quantization, a
                # q/dq pair and its op) is never split across delegates
                kept = [[n for n in g if n in supported or n.op != "call_function"] for g in groups]
                tags = []
                for nodes in delegate_groups(ep.graph, kept):
                    tag = f"tag{len(tags)}"
                    for n in nodes:
                        n.meta[DELEGATION_TAG] = tag
                    tags.append(tag)
                for group in groups:
                    _tag_constants(ep, group)
                unplaced = _shared_static_inputs(ep, supported)
                if not unplaced:
                    break
                # a constant read elsewhere too stays outside the delegate: the nodes that
                # need it as static data stay portable, and the rest is tagged again
                for node, weight in unplaced.items():
                    logger.debug(
                        "XNNPACK leaves %s (%s) to portable: its constant %s is also read "
                        "outside this delegate",
                        node.name,
                        op_key(node.target),
                        weight.name,
                    )
                supported -= set(unplaced)
                for n in ep.graph.nodes:
                    n.meta.pop(DELEGATION_TAG, None)
        if not tags:
            logger.warning(
                "XnnpackPartitioner: nothing in this program can be delegated to XNNPACK; "
                "it runs on the portable kernels (verbose=True says why, node by node)"
            )
        return PartitionResult(ep, {t: self.delegation_spec for t in tags})

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[Node], bool] | None]:
        keep = []
        for configs in self.configs.values():
            for c in configs:
                if c.keep_whole and c.op not in keep:
                    keep.append(c.op)

        from pyexecutorch.exir.graph_utils import is_control_flow

        # the filter also sees copies of the graphs: the top level is the one holding
        # the control-flow nodes (where there are any)
        has_branches = any(is_control_flow(n) for n in ep.graph.nodes)

        def top_level(graph: torch.fx.Graph) -> bool:
            return not has_branches or any(is_control_flow(n) for n in graph.nodes)

        def accepts(node: Node) -> bool:
            # nodes inside control-flow branches are not partitioned: keep none whole there
            if node.op != "call_function" or not top_level(node.graph):
                return False
            return self.match(node, ep)[0] is not None

        return keep, accepts


def _resolve(configs: Iterable[OpConfig | str]) -> list[OpConfig]:
    """OpConfig entries, with official config class names (``"LinearConfig"``) looked up."""
    by_name: dict[str, list[OpConfig]] = {}
    for c in all_configs():
        by_name.setdefault(c.name, []).append(c)
    out: list[OpConfig] = []
    for c in configs:
        if isinstance(c, str):
            if c not in by_name:
                raise ValueError(
                    f"XnnpackPartitioner: no op config named {c!r} (known: {sorted(by_name)})"
                )
            out += by_name[c]
        elif isinstance(c, OpConfig):
            out.append(c)
        else:
            raise TypeError(
                "XnnpackPartitioner: configs must be OpConfig entries or config names, "
                f"got {type(c).__name__}"
            )
    return out


# Inputs XNNPACK needs as static data (serialized into the delegate), by operator.
_STATIC_INPUTS = {
    op_key(torch.ops.aten.convolution.default): (1, 2),
    op_key(torch.ops.aten.prelu.default): (1,),
    op_key(torch.ops.aten._native_batch_norm_legit_no_training.default): (1, 2, 3, 4),
}


def _shared_static_inputs(ep: ExportedProgram, supported: set[Node]) -> dict[Node, Node]:
    """Tagged nodes whose static inputs did not join their delegate (read elsewhere too)."""
    out: dict[Node, Node] = {}
    for node in supported:
        tag = node.meta.get(DELEGATION_TAG)
        for i in _STATIC_INPUTS.get(op_key(node.target), ()):
            arg = node.args[i] if len(node.args) > i else None
            if (
                isinstance(arg, Node)
                and is_constant(ep, arg)
                and arg.op == "placeholder"
                and arg.meta.get(DELEGATION_TAG) != tag
            ):
                out[node] = arg
                break
    return out


_LINEARS = (torch.ops.aten.linear.default, torch.ops.aten.addmm.default, torch.ops.aten.mm.default)
_GEMM_KEYS = frozenset(op_key(op) for op in (*_LINEARS, torch.ops.aten.convolution.default))
# a quantization whose parameters are chosen at run time, and torchao's (de)quantizations
_DYNAMIC_QUANTIZATION_KEYS = frozenset(
    {
        "quantized_decomposed::choose_qparams.tensor",
        "quantized_decomposed::quantize_per_tensor.tensor",
        "quantized_decomposed::dequantize_per_tensor.tensor",
        "torchao::choose_qparams_affine.default",
        "torchao::quantize_affine.default",
        "torchao::dequantize_affine.default",
    }
)


def _unread_dynamic_quantization(group: list[Node]) -> bool:
    """A quantization at run time with no GEMM in its group: XNNPACK's per-row int8
    values feed fully connected and convolution nodes only, and the official partitioner
    takes them as those nodes' dependencies, never alone."""
    keys = {op_key(n.target) for n in group if n.op == "call_function"}
    if keys & _DYNAMIC_QUANTIZATION_KEYS and not keys & _GEMM_KEYS:
        names = ", ".join(n.name for n in group if n.op == "call_function")
        logger.debug("XNNPACK leaves %s to portable: no delegated GEMM reads them", names)
        return True
    return False


def _tag_constants(ep: ExportedProgram, group: list[Node]) -> None:
    """Constants of a group go with the group's delegate where all users share its tag."""
    for n in group:
        if n.op not in ("placeholder", "get_attr") or not is_constant(ep, n):
            continue
        tags = {u.meta.get(DELEGATION_TAG) for u in n.users}
        if len(tags) == 1 and None not in tags:
            n.meta[DELEGATION_TAG] = tags.pop()


class XnnpackDynamicallyQuantizedPartitioner(XnnpackPartitioner):
    """Only the dynamically quantized configs (``config_precisions`` is fixed)."""

    def __init__(self, **kwargs: Any) -> None:
        if "config_precisions" in kwargs:
            raise ValueError(
                "XnnpackDynamicallyQuantizedPartitioner: config_precisions is DYNAMIC_QUANT "
                "here; use XnnpackPartitioner(config_precisions=...) to choose"
            )
        super().__init__(config_precisions=ConfigPrecisionType.DYNAMIC_QUANT, **kwargs)


class XnnpackFloatingPointPartitioner(XnnpackPartitioner):
    """Only the floating-point configs."""

    def __init__(self) -> None:
        super().__init__(config_precisions=ConfigPrecisionType.FP32)


class XnnpackQuantizedPartitioner(XnnpackPartitioner):
    """Only the statically quantized configs."""

    def __init__(self) -> None:
        super().__init__(config_precisions=ConfigPrecisionType.STATIC_QUANT)


__all__ = [
    "BACKEND_ID",
    "ConfigPrecisionType",
    "XnnpackDynamicallyQuantizedPartitioner",
    "XnnpackFloatingPointPartitioner",
    "XnnpackPartitioner",
    "XnnpackQuantizedPartitioner",
    "logger",
]
