"""The official memory-planning algorithm protocol, over our planner.

An official algorithm is called as ``algo(alignment, specs, graph_module,
graph_signature, extra_padding)`` on specs whose ``lifetime`` is already set, and
returns a :class:`MemoryAlgoResult` (each spec's memory id, shared object and
offset, and the arena sizes by memory id). :class:`MemoryPlanningAlgorithmSuite`
runs several and keeps the smallest; ``MemoryPlanningPass(memory_planning_algo=...)``
accepts any of these as well as our own ``items -> Plan`` algorithms.

Also here, the official helper names (``apply_algo``, ``collect_specs_from_nodes``,
``filter_nodes``, ``get_node_tensor_specs``, the plan ``Verifier``).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch.export.graph_signature import ExportGraphSignature, InputKind, TensorArgument
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

from pyexecutorch.exir.error import InternalError
from pyexecutorch.exir.graph_utils import graph_modules, is_inplace
from pyexecutorch.exir.memory_lifetimes import PlanItem, node_specs, storage_root
from pyexecutorch.exir.memory_planning import Plan
from pyexecutorch.exir.tensor_spec import ALIGNMENT, TensorSpec, aligned


@dataclass
class SpecAllocResult:
    """Where an algorithm put one spec."""

    mem_id: int
    mem_obj_id: int
    mem_offset: int


@dataclass
class MemoryAlgoResult:
    """An official algorithm's answer: ``spec_dict`` by spec, ``bufsizes`` by memory
    id (index 0 is the constant segment, always 0)."""

    spec_dict: dict[TensorSpec, SpecAllocResult] = field(default_factory=dict)
    bufsizes: list[int] = field(default_factory=list)


def takes_items(algo: Any) -> bool:
    """Whether ``algo`` is one of ours (``items -> Plan``) rather than official."""
    if getattr(algo, "takes_items", False):
        return True
    if isinstance(algo, MemoryPlanningAlgorithmSuite):
        return False
    try:
        params = [
            p
            for p in inspect.signature(algo).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
    except (TypeError, ValueError):
        return False
    return len(params) == 1


def items_from_specs(specs: Iterable[TensorSpec], alignment: int) -> list[PlanItem]:
    """Plan items for specs whose ``lifetime`` is set (in a stable order)."""
    items = []
    for order, spec in enumerate(specs):
        start, end = spec.lifetime
        if start is None or end is None:
            raise InternalError(f"{spec} has no lifetime: plan it through MemoryPlanningPass")
        size = aligned(spec.nbytes(), alignment)
        items.append(PlanItem(spec, size, start, end, order))
    return items


def as_official(item_algorithm: Callable[[list[PlanItem]], Plan]) -> Callable[..., Any]:
    """``item_algorithm`` callable both ways: ``algo(items) -> Plan`` (ours) and
    ``algo(alignment, specs, graph_module, graph_signature, extra_padding=0)
    -> MemoryAlgoResult`` (official). Called the official way, it plans each memory
    pool (the ``mem_id`` a spec already has, else 1) on its own, and a spec with a
    ``storage_base`` inside its base's memory, at its offset there."""

    def algorithm(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], list):
            return item_algorithm(args[0])
        bound = _OFFICIAL_SIGNATURE.bind(*args, **kwargs)
        alignment = bound.arguments.get("alignment", ALIGNMENT)
        padding = bound.arguments.get("extra_padding", 0)
        specs = sorted(bound.arguments["specs"], key=lambda s: (s.lifetime[0], id(s)))
        given = {id(s) for s in specs}
        # A spec sharing the memory of another planned here is placed with it.
        owners = [s for s in specs if s.storage_base is None or id(storage_root(s)[0]) not in given]
        pools: dict[int, list[TensorSpec]] = {}
        for spec in owners:
            pools.setdefault(spec.mem_id or 1, []).append(spec)
        result = MemoryAlgoResult(bufsizes=[0] * (max(pools, default=1) + 1))
        next_object = 0
        for mem_id, pool in sorted(pools.items()):
            items = items_from_specs(pool, alignment)
            for it in items:
                it.size = aligned(it.size + padding, alignment)
            plan = item_algorithm(items)
            objects = plan.objects or list(range(len(items)))
            for it, offset, obj in zip(items, plan.offsets, objects, strict=True):
                result.spec_dict[it.spec] = SpecAllocResult(mem_id, next_object + obj, offset)
            next_object += max(objects, default=-1) + 1
            result.bufsizes[mem_id] = plan.size
        for spec in specs:
            if spec not in result.spec_dict:
                root, offset = storage_root(spec)
                where = result.spec_dict[root]
                result.spec_dict[spec] = SpecAllocResult(
                    where.mem_id, where.mem_obj_id, where.mem_offset + offset
                )
        return result

    algorithm.__name__ = item_algorithm.__name__
    algorithm.__doc__ = item_algorithm.__doc__
    algorithm.takes_items = True  # type: ignore[attr-defined]  # our planner passes items
    return algorithm


def _official_signature(
    alignment: int,
    specs: Iterable[TensorSpec],
    graph_module: GraphModule | None = None,
    graph_signature: ExportGraphSignature | None = None,
    extra_padding: int = 0,
    *,
    allow_overlapping_allocations: bool = True,
) -> None: ...


_OFFICIAL_SIGNATURE = inspect.signature(_official_signature)


class MemoryPlanningAlgorithmSuite:
    """Runs each algorithm of ``algo_list``, keeps the plan with the smallest total
    arena, writes it into the specs and returns its ``bufsizes``."""

    def __init__(self, algo_list: Sequence[Callable[..., Any]] | None = None) -> None:
        from pyexecutorch.exir.memory_planning import greedy, naive  # noqa: PLC0415

        self.algo_list = list(algo_list) if algo_list else [greedy, naive]
        self.algo_results: dict[str, MemoryAlgoResult] = {}

    def __call__(
        self,
        alignment: int,
        specs: Iterable[TensorSpec],
        graph_module: GraphModule | None = None,
        graph_signature: ExportGraphSignature | None = None,
        extra_padding: int = 0,
    ) -> list[int]:
        specs = list(specs)
        best: MemoryAlgoResult | None = None
        for algo in self.algo_list:
            result = algo(alignment, specs, graph_module, graph_signature, extra_padding)
            self.algo_results[getattr(algo, "__name__", repr(algo))] = result
            if best is None or sum(result.bufsizes) < sum(best.bufsizes):
                best = result
        if best is None:
            return [0, 0]
        for spec, where in best.spec_dict.items():
            spec.mem_id, spec.mem_obj_id, spec.mem_offset = (
                where.mem_id,
                where.mem_obj_id,
                where.mem_offset,
            )
        return list(best.bufsizes)


def run_official(
    algo: Callable[..., Any],
    items: list[PlanItem],
    gm: GraphModule,
    signature: ExportGraphSignature | None,
    alignment: int,
    mem_id: int = 1,
) -> Plan:
    """Our planner's items of one pool (``mem_id``) planned by an official-protocol
    algorithm."""
    specs = [it.spec for it in items]
    before = {id(s): (s.mem_id, s.mem_offset) for s in specs}
    result = algo(alignment, specs, gm, signature, 0)
    if isinstance(result, MemoryAlgoResult):
        offsets = [result.spec_dict[s].mem_offset for s in specs]
        bufsizes = result.bufsizes
    else:  # a suite (or an algorithm) that wrote the specs and returned bufsizes
        offsets = [s.mem_offset for s in specs]
        bufsizes = list(result)
        for s in specs:  # our planner assigns mem_id/offset itself
            s.mem_id, s.mem_offset = before[id(s)]
    if any(o is None for o in offsets):
        raise InternalError(f"memory planning algorithm {algo!r} left tensors unplaced")
    size = max((o + it.size for o, it in zip(offsets, items, strict=True)), default=0)
    size = max(size, *(bufsizes[mem_id : mem_id + 1] or [0]))
    return Plan(offsets, size, getattr(algo, "__name__", type(algo).__name__))


# --------------------------------------------------------------------------------------
# Official helper names


def filter_nodes(inputs: Any) -> list[Node]:
    """The graph nodes among the leaves of ``inputs``."""
    return [x for x in pytree.tree_leaves(inputs) if isinstance(x, Node)]


def get_node_tensor_specs(node: Node) -> list[TensorSpec]:
    """The tensor specs a node produces (several for a multi-output node)."""
    return node_specs(node)


def _is_inplace_node(node: Node) -> bool:
    """Whether ``node`` calls an in-place (mutating, non-out) operator."""
    return node.op == "call_function" and is_inplace(node.target)


def _do_user_inputs_exist(graph_signature: ExportGraphSignature | None) -> bool:
    """Whether the method has at least one tensor user input."""
    if graph_signature is None:
        return False
    return any(
        s.kind == InputKind.USER_INPUT and isinstance(s.arg, TensorArgument)
        for s in graph_signature.input_specs
    )


def _extend_storage_base_lifetimes(specs: Iterable[TensorSpec]) -> None:
    """Each storage base lives at least as long as the specs that share its memory."""
    for spec in specs:
        base = spec.storage_base
        while base is not None:
            if spec.lifetime[0] is not None:
                base.lifetime = [
                    min(x for x in (base.lifetime[0], spec.lifetime[0]) if x is not None),
                    max(x for x in (base.lifetime[1], spec.lifetime[1]) if x is not None),
                ]
            base = base.storage_base


def collect_specs_from_nodes(
    nodes: Iterable[Node],
    graph_signature: ExportGraphSignature | None = None,
    ignore_graph_input: bool = False,
    ignore_graph_output: bool = False,
    ignore_const: bool = True,
    ignore_out_var_node: bool = True,
    dedup: bool = True,
    do_assertion: bool = True,
    ignore_dynamic_unbound_tensor: bool = True,
    ignore_mutable_buffers: bool = False,
) -> Iterable[TensorSpec]:
    """The specs of ``nodes`` (skipping, as asked, graph inputs and outputs,
    constants and mutable buffers), each once when ``dedup``."""
    seen: set[int] = set()
    for node in nodes:
        if node.op == "output" and ignore_graph_output:
            continue
        if node.op == "placeholder" and ignore_graph_input:
            continue
        source = node.args[0] if node.op == "output" else node
        for spec in _node_specs_tree(source):
            if ignore_const and spec.const:
                continue
            if ignore_mutable_buffers and spec.is_mutable_buffer:
                continue
            if dedup and id(spec) in seen:
                continue
            seen.add(id(spec))
            yield spec


def _node_specs_tree(x: Any) -> list[TensorSpec]:
    return [s for n in filter_nodes(x) for s in node_specs(n)]


def apply_algo(
    algo: Callable[..., Any],
    graph_module: GraphModule,
    alignment: int,
    graph_signature: ExportGraphSignature | None = None,
    alloc_graph_input: bool = True,
    alloc_graph_output: bool = True,
    alloc_mutable_buffers: bool = True,
    enable_non_cpu_memory_planning: bool = False,
) -> list[int]:
    """Plan ``graph_module`` with ``algo`` (either protocol); returns the arena sizes
    by memory id, also stored as ``graph_module.meta["non_const_buffer_sizes"]``.
    With ``enable_non_cpu_memory_planning`` each non-CPU device's tensors get arenas
    of their own (``graph_module.meta["non_const_buffer_device"]``)."""
    from pyexecutorch.exir.memory_planning import plan_memory  # noqa: PLC0415

    plan_memory(
        graph_module,
        graph_signature,
        algorithms=(algo,),
        alignment=alignment,
        alloc_graph_input=alloc_graph_input,
        alloc_graph_output=alloc_graph_output,
        alloc_mutable_buffers=alloc_mutable_buffers,
        enable_non_cpu_memory_planning=enable_non_cpu_memory_planning,
    )
    return list(graph_module.meta["non_const_buffer_sizes"])


class Verifier:
    """Checks a plan (the official class): no two tensors alive together share
    memory; graph inputs and outputs are planned exactly when asked."""

    def __init__(
        self,
        graph_module: GraphModule,
        alloc_graph_input: bool,
        alloc_graph_output: bool,
        alloc_mutable_buffers: bool,
        graph_signature: ExportGraphSignature | None = None,
    ) -> None:
        self.graph_module = graph_module
        self.graph_signature = graph_signature
        self.alloc_graph_input = alloc_graph_input
        self.alloc_graph_output = alloc_graph_output
        self.alloc_mutable_buffers = alloc_mutable_buffers

    @staticmethod
    def has_overlap(lhs: Sequence[int], rhs: Sequence[int]) -> bool:
        """Whether two inclusive intervals meet (an empty one meets nothing)."""
        if lhs[0] > lhs[1] or rhs[0] > rhs[1]:
            return False
        return lhs[0] <= rhs[1] and rhs[0] <= lhs[1]

    @classmethod
    def lifetime_overlap(cls, lhs: TensorSpec, rhs: TensorSpec) -> bool:
        a, b = lhs.lifetime, rhs.lifetime
        if None in a or None in b:
            return False
        return cls.has_overlap(a, b)

    @classmethod
    def storage_overlap(cls, lhs: TensorSpec, rhs: TensorSpec) -> bool:
        if lhs.mem_id is None or rhs.mem_id is None or lhs.mem_id != rhs.mem_id:
            return False
        a = [lhs.mem_offset, lhs.mem_offset + max(lhs.allocated_memory, 1) - 1]
        b = [rhs.mem_offset, rhs.mem_offset + max(rhs.allocated_memory, 1) - 1]
        return cls.has_overlap(a, b)

    @classmethod
    def mem_obj_id_match(
        cls, lhs: TensorSpec, rhs: TensorSpec, accept_both_none: bool = True
    ) -> bool:
        if lhs.mem_id != rhs.mem_id:
            return False
        if lhs.mem_obj_id is None and rhs.mem_obj_id is None:
            return accept_both_none
        return lhs.mem_obj_id == rhs.mem_obj_id

    def verify_storage_reuse(self, allow_lifetime_and_storage_overlap: bool = False) -> int:
        """The number of pairs of tensors that share memory at different times; raises
        ``InternalError`` for a pair alive together in the same memory."""
        specs = [s for s in _all_planned(self.graph_module) if s.allocated_memory > 0]
        reuse = 0
        for lhs, rhs in itertools.combinations(specs, 2):
            if not self.storage_overlap(lhs, rhs):
                continue
            # A result written over a dying input of the same size (our in-place
            # reuse, or a view's base) shares its root: that is reuse too.
            if not self.lifetime_overlap(lhs, rhs) or storage_root(lhs)[0] is storage_root(rhs)[0]:
                reuse += 1
            elif not allow_lifetime_and_storage_overlap:
                raise InternalError(f"{lhs} and {rhs} are alive together in the same memory")
        return reuse

    def verify_graph_input_output(self) -> None:
        """Graph inputs and outputs are planned exactly when ``alloc_graph_input`` /
        ``alloc_graph_output`` ask for it."""
        for g in graph_modules(self.graph_module):
            top = g is self.graph_module
            if not top:
                continue
            for node in g.graph.nodes:
                if node.op == "placeholder":
                    want, what = self.alloc_graph_input, "graph input"
                    specs = [s for s in node_specs(node) if not s.const]
                    specs = [s for s in specs if not s.is_mutable_buffer]
                elif node.op == "output":
                    want, what = self.alloc_graph_output, "graph output"
                    specs = [s for s in _node_specs_tree(node.args[0]) if not s.const]
                    specs = [s for s in specs if not s.is_mutable_buffer]
                else:
                    continue
                for spec in specs:
                    planned = spec.mem_id is not None and spec.mem_offset is not None
                    if planned != want and not (want is False and _is_user_data(spec)):
                        raise InternalError(
                            f"{what} {node.name}: {spec} is {'' if planned else 'not '}planned "
                            f"with alloc_{what.replace(' ', '_')}={want}"
                        )


def _all_planned(gm: GraphModule) -> list[TensorSpec]:
    """Every distinct planned spec of ``gm`` and its submodules, views included."""
    seen: dict[int, TensorSpec] = {}
    for g in graph_modules(gm):
        for node in g.graph.nodes:
            for spec in node_specs(node):
                if spec.mem_id is not None and spec.mem_offset is not None:
                    seen.setdefault(id(spec), spec)
    return list(seen.values())


def _is_user_data(spec: TensorSpec) -> bool:
    # An output that is also an input (returned as is) follows the input's rule.
    return spec.is_user_input


__all__ = [
    "MemoryAlgoResult",
    "MemoryPlanningAlgorithmSuite",
    "SpecAllocResult",
    "Verifier",
    "_do_user_inputs_exist",
    "_extend_storage_base_lifetimes",
    "_is_inplace_node",
    "apply_algo",
    "as_official",
    "collect_specs_from_nodes",
    "filter_nodes",
    "get_node_tensor_specs",
    "run_official",
    "takes_items",
]
