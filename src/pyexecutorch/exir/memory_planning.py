"""Memory planning: one arena (memory id 1) per method, offsets for every tensor.

Lifetimes (:mod:`pyexecutorch.exir.memory_lifetimes`) are computed over the whole method,
control-flow submodules included: the nodes of a ``cond``'s branches (or a ``while_loop``'s condition
and body) are numbered inside the control-flow node's own range, in the order
the emitter lays them out, so branch temporaries share the arena with the rest
of the method instead of getting a reserved region.

A ``map``'s body is planned on its own, as the official planner does: its tensors
(all its inputs included, the operands' memory unused, as there) from offset 0, in a
region at the start of the arena as large as the largest body, which the method's
other tensors follow (map bodies never run at once; one inside another is planned
the same way inside its body's plan). The body's ``non_const_buffer_sizes`` are its
own.

Conventions (those of the official exporter):

- user inputs, outputs and mutable buffers are planned; constants are not;
- mutable buffers live for the whole method (their state persists);
- a control-flow branch's inputs alias the caller's values (not planned);
  its outputs are moved into the control-flow node's outputs, so they live as
  long as those do;
- a ``memory.view`` shares its base's memory; the base lives while any view
  is used;
- sizes are rounded up to ``alignment`` (16).

Several algorithms run and the smallest arena wins: the official ``greedy``
(shared objects by descending size) and ``naive`` (no reuse), and ours,
``best_fit``: tensors placed one by one (in several orders) at the offset
whose free gap among the tensors alive at the same time fits them best.
"""

from __future__ import annotations

import bisect
import operator
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from torch.export.graph_signature import ExportGraphSignature
from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir import memory
from pyexecutorch.exir.graph_utils import HOP_MAP, is_control_flow, submodules
from pyexecutorch.exir.memory_lifetimes import (  # noqa: F401 (ELEMENTWISE_OUT_OPS, Lifetimes: the module's API)
    ELEMENTWISE_OUT_OPS,
    Lifetimes,
    PlanItem,
    arg_nodes,
    compute_lifetimes,
    node_specs,
    specs_of,
    storage_root,
)
from pyexecutorch.exir.tensor_spec import ALIGNMENT, TensorSpec, aligned
from pyexecutorch.schema.program import DeviceType, NonConstBufferDevice

# --------------------------------------------------------------------------------------
# Algorithms: each maps items to (offsets by item index, arena size)


@dataclass
class Plan:
    offsets: list[int]
    size: int
    algorithm: str = ""
    # The shared object each item sits in (greedy's objects); None: one per item.
    objects: list[int] | None = None


def _overlap(a: PlanItem, b: PlanItem) -> bool:
    return not (a.end < b.start or a.start > b.end)


def naive(items: list[PlanItem]) -> Plan:
    """Every tensor gets its own memory (the official ``naive``)."""
    offsets, total = [], 0
    for it in items:
        offsets.append(total)
        total += it.size
    return Plan(offsets, total, "naive")


@dataclass
class _SharedObject:
    size: int
    allocs: list[tuple[int, PlanItem]] = field(default_factory=list)  # (offset in object, item)


def greedy(items: list[PlanItem]) -> Plan:
    """The official ``greedy`` algorithm: tensors by descending size join the
    first shared object free during their lifetime (at offset 0), else sit on
    top of the overlapping tensors inside an object if they fit, else open a
    new object; objects are laid out one after another."""
    ascending: list[PlanItem] = []
    for it in items:
        bisect.insort(ascending, it, key=lambda x: x.size)
    objects: list[_SharedObject] = []
    where: dict[int, tuple[int, int]] = {}
    for it in reversed(ascending):
        chosen = None
        for k, obj in enumerate(objects):
            if all(not _overlap(it, other) for _, other in obj.allocs):
                obj.allocs.append((0, it))
                chosen = (k, 0)
                break
        if chosen is None:
            for k, obj in enumerate(objects):
                top = max(
                    (off + other.size for off, other in obj.allocs if _overlap(it, other)),
                    default=0,
                )
                if top > 0 and top + it.size <= obj.size:
                    obj.allocs.append((top, it))
                    chosen = (k, top)
                    break
        if chosen is None:
            objects.append(_SharedObject(it.size, [(0, it)]))
            chosen = (len(objects) - 1, 0)
        where[id(it)] = chosen
    bases, total = [], 0
    for obj in objects:
        bases.append(total)
        total += obj.size
    offsets = [bases[where[id(it)][0]] + where[id(it)][1] for it in items]
    return Plan(offsets, total, "greedy", [where[id(it)][0] for it in items])


def _neighbours(items: list[PlanItem]) -> list[list[int]]:
    """For each item, the items whose lifetimes overlap it (a sweep over starts)."""
    order = sorted(range(len(items)), key=lambda i: items[i].start)
    out: list[list[int]] = [[] for _ in items]
    active: list[int] = []
    for i in order:
        start = items[i].start
        active = [j for j in active if items[j].end >= start]
        for j in active:
            out[i].append(j)
            out[j].append(i)
        active.append(i)
    return out


def _place(
    order: list[int], items: list[PlanItem], best: bool, neighbours: list[list[int]]
) -> tuple[list[int], int]:
    offsets = [-1] * len(items)
    total = 0
    for i in order:
        size = items[i].size
        busy = sorted(
            (offsets[j], offsets[j] + items[j].size) for j in neighbours[i] if offsets[j] >= 0
        )
        cur = 0
        choice = None
        gap_size = None
        for lo, hi in busy:
            if lo - cur >= size:
                if not best:
                    choice = cur
                    break
                gap = lo - cur
                if gap_size is None or gap < gap_size:
                    choice, gap_size = cur, gap
            cur = max(cur, hi)
        if choice is None:
            choice = cur
        offsets[i] = choice
        total = max(total, choice + size)
    return offsets, total


def live_peak(items: list[PlanItem]) -> int:
    """The largest total size alive at one instant: no plan can be smaller."""
    events = []
    for it in items:
        events.append((it.start, 0, it.size))
        events.append((it.end, 1, -it.size))
    peak = cur = 0
    for _, kind, delta in sorted(events):
        cur += delta
        if kind == 0:
            peak = max(peak, cur)
    return peak


def _breadth(items: list[PlanItem]) -> list[int]:
    """For each item, the peak live size over its lifetime."""
    points = sorted({it.start for it in items} | {it.end for it in items})
    live = dict.fromkeys(points, 0)
    for it in items:
        for p in points[bisect.bisect_left(points, it.start) : bisect.bisect_right(points, it.end)]:
            live[p] += it.size
    out = []
    for it in items:
        span = points[bisect.bisect_left(points, it.start) : bisect.bisect_right(points, it.end)]
        out.append(max(live[p] for p in span))
    return out


def best_fit(items: list[PlanItem]) -> Plan:
    """Ours: place tensors one at a time at the best-fitting free gap among the
    tensors alive at the same time, trying several orders (by size, by the
    peak pressure over the lifetime, by lifetime area); keep the smallest."""
    if not items:
        return Plan([], 0, "best_fit")
    n = len(items)
    breadth = _breadth(items)
    orders = {
        "size": sorted(range(n), key=lambda i: (-items[i].size, items[i].start, i)),
        "breadth": sorted(range(n), key=lambda i: (-breadth[i], -items[i].size, items[i].start, i)),
        "area": sorted(
            range(n), key=lambda i: (-items[i].size * (items[i].end - items[i].start + 1), i)
        ),
        "length": sorted(
            range(n), key=lambda i: (-(items[i].end - items[i].start), -items[i].size, i)
        ),
        "start": sorted(range(n), key=lambda i: (items[i].start, -items[i].size, i)),
    }
    # A few deterministic perturbations of the size order (ties broken by
    # pseudo-random keys, sizes jittered by one bucket) widen the search.
    rng = random.Random(0x5EED)
    for trial in range(6 if n <= 2000 else 0):
        noise = [rng.random() for _ in range(n)]
        jitter = 1.0 + 0.25 * trial / 6
        orders[f"jitter{trial}"] = sorted(
            range(n), key=lambda i: (-items[i].size * (1 + noise[i] * (jitter - 1)), noise[i])
        )
    bound = live_peak(items)
    neighbours = _neighbours(items)
    best_plan = None
    for order in orders.values():
        for fit in (True, False):
            offsets, total = _place(order, items, fit, neighbours)
            if best_plan is None or total < best_plan.size:
                best_plan = Plan(offsets, total, "best_fit")
            if best_plan.size <= bound:
                return best_plan
    return best_plan


DEFAULT_ALGORITHMS: tuple[Callable[[list[PlanItem]], Plan], ...] = (greedy, naive, best_fit)


# --------------------------------------------------------------------------------------
# The pass


def _all_specs(gm: GraphModule) -> list[TensorSpec]:
    out: dict[int, TensorSpec] = {}

    def visit(g: GraphModule) -> None:
        for node in g.graph.nodes:
            for s in specs_of(node.meta.get("spec")):
                out.setdefault(id(s), s)
            if is_control_flow(node):
                for sub in submodules(g, node):
                    visit(sub)

    visit(gm)
    return list(out.values())


def _set_buffer_sizes(gm: GraphModule, sizes: list[int]) -> None:
    """The method's arena sizes on ``gm`` and its branches (a map body keeps its own)."""
    gm.meta["non_const_buffer_sizes"] = list(sizes)
    for node in gm.graph.nodes:
        if is_control_flow(node) and node.target is not HOP_MAP:
            for sub in submodules(gm, node):
                _set_buffer_sizes(sub, sizes)


def _by_memory_id(sizes: dict[PoolKey, int], ids: dict[PoolKey, int]) -> list[int]:
    """Pool sizes as ``non_const_buffer_sizes`` (index 0: the constants, unplanned)."""
    out = [0] * (max(ids.values()) + 1)
    for key, size in sizes.items():
        out[ids[key]] = size
    return out


# A pool: the device it lives on and its memory id there (1 unless a pass chose one).
PoolKey = tuple[tuple[DeviceType, int], int]
_CPU = (DeviceType.CPU, 0)


def _pools(items: list[PlanItem], by_device: bool) -> dict[PoolKey, list[PlanItem]]:
    """Items grouped into pools, each keeping the items' order: by the memory id a
    pass set before planning (custom pools), and with ``by_device`` by device too."""
    pools: dict[PoolKey, list[PlanItem]] = {}
    custom = any(it.spec.mem_id is not None for it in items)
    for it in items:
        device = (it.spec.device, it.spec.device_index) if by_device else _CPU
        if device != _CPU and custom:
            raise NotImplementedError(
                f"{it.spec} is on {device[0].name}:{device[1]} while a pass set memory ids "
                "before planning: planning per device and custom memory pools do not mix "
                "(disable enable_non_cpu_memory_planning or the custom pools)"
            )
        pools.setdefault((device, it.spec.mem_id or 1), []).append(it)
    return pools


def _global_ids(pools: Iterable[PoolKey]) -> dict[PoolKey, int]:
    """Each pool's memory id in the method: the CPU pools keep theirs; each other
    device's pools follow, in order of device type and index."""
    devices = sorted({d for d, _ in pools}, key=lambda d: (d != _CPU, d[0].value, d[1]))
    ids: dict[PoolKey, int] = {}
    base = 1
    for device in devices:
        local = sorted(m for d, m in pools if d == device)
        for m in local:
            ids[(device, m)] = base + m - 1
        base += local[-1]
    return ids


def _plan_pool(
    items: list[PlanItem],
    algorithms: tuple[Callable[..., Any], ...],
    gm: GraphModule,
    signature: ExportGraphSignature | None,
    alignment: int,
    local_id: int,
) -> tuple[Plan, dict[str, int]]:
    """The smallest of the algorithms' plans for one pool, and each one's size."""
    sizes: dict[str, int] = {}
    chosen: Plan | None = None
    for algo in algorithms:
        if _algorithms.takes_items(algo):
            plan = algo(items)
        else:
            plan = _algorithms.run_official(algo, items, gm, signature, alignment, local_id)
        name = plan.algorithm or getattr(algo, "__name__", repr(algo))
        sizes[name] = plan.size
        if chosen is None or plan.size < chosen.size:
            chosen = plan
    return chosen or Plan([], 0, "none"), sizes


def plan_memory(
    gm: GraphModule,
    signature: ExportGraphSignature | None = None,
    *,
    algorithms: Iterable[Callable[[list[PlanItem]], Plan]] = DEFAULT_ALGORITHMS,
    alignment: int = ALIGNMENT,
    alloc_graph_input: bool = True,
    alloc_graph_output: bool = True,
    alloc_mutable_buffers: bool = True,
    reuse_in_place: bool = True,
    enable_non_cpu_memory_planning: bool = False,
) -> dict[str, int]:
    """Plan ``gm``'s memory in place; returns each algorithm's arena size
    (``"chosen"`` is the one kept, ``"lower_bound"`` the live peak).

    Tensors a pass put in a memory pool before planning (``spec.mem_id``) are
    planned in that pool; with ``enable_non_cpu_memory_planning`` the tensors of
    each other device (``spec.device``, ``spec.device_index``) get arenas of their
    own, after the CPU ones, listed in ``gm.meta["non_const_buffer_device"]``."""
    algorithms = tuple(algorithms)
    # An algorithm of the official protocol places every tensor itself, as there:
    # no result is written over a dying input behind its back. Nor is one written
    # over an input of another pool.
    reuse_in_place = (
        reuse_in_place
        and all(_algorithms.takes_items(a) for a in algorithms)
        and all(s.mem_id is None for s in _all_specs(gm) if not s.const)
        and not (
            enable_non_cpu_memory_planning
            and any(s.device != DeviceType.CPU for s in _all_specs(gm))
        )
    )
    life = compute_lifetimes(
        gm,
        signature,
        alloc_graph_input=alloc_graph_input,
        alloc_graph_output=alloc_graph_output,
        alloc_mutable_buffers=alloc_mutable_buffers,
        alignment=alignment,
        reuse_inputs_in_place=reuse_in_place,
    )
    items = life.items
    by_device = enable_non_cpu_memory_planning
    pools = _pools(items, by_device) or {(_CPU, 1): []}
    ids = _global_ids(pools)
    by_body: dict[GraphModule | None, list[PlanItem]] = {}
    for it in items:
        by_body.setdefault(it.body, []).append(it)
    inner: dict[GraphModule | None, list[GraphModule]] = {}
    for body, parent in life.bodies.items():
        inner.setdefault(parent, []).append(body)
    report: dict[str, int] = {}
    names: list[str] = []

    def place(body: GraphModule | None) -> dict[PoolKey, int]:
        """Places ``body``'s own tensors (the method's for None) after the region its
        map bodies share, each planned on its own from offset 0 (they never run at
        once), as the official planner; returns each pool's size."""
        reserved: dict[PoolKey, int] = {}
        for child in inner.get(body, []):
            for key, size in place(child).items():
                reserved[key] = max(reserved.get(key, 0), size)
        sizes = dict(reserved)
        for key, pool in _pools(by_body.get(body, []), by_device).items():
            owner = gm if body is None else body
            plan, by_algo = _plan_pool(pool, algorithms, owner, signature, alignment, key[1])
            base = reserved.get(key, 0)
            for it, off in zip(pool, plan.offsets, strict=True):
                it.spec.mem_id = ids[key]
                it.spec.mem_offset = base + off
            sizes[key] = base + plan.size
            if body is None:
                for name, size in by_algo.items():
                    report[name] = report.get(name, 0) + base + size
                report["lower_bound"] = report.get("lower_bound", 0) + base + live_peak(pool)
                names.append(plan.algorithm)
        if body is not None:
            body.meta["non_const_buffer_sizes"] = _by_memory_id(sizes, ids)
        return sizes

    sizes = _by_memory_id(place(None), ids)
    shared = list(life.views)
    shared += [s for s in _all_specs(gm) if s.storage_base is not None and s not in shared]
    for view in shared:
        base, offset = storage_root(view)
        if base.mem_id is not None and base.mem_offset is not None:
            view.mem_id = base.mem_id
            view.mem_offset = base.mem_offset + offset
    report["chosen"] = sum(sizes)
    report.setdefault("lower_bound", 0)
    report["chosen_algorithm"] = "+".join(dict.fromkeys(names))  # type: ignore[assignment]
    _set_buffer_sizes(gm, sizes)
    devices = [(ids[k], k[0]) for k in sorted(pools, key=ids.__getitem__) if k[0] != _CPU]
    if devices:
        gm.meta["non_const_buffer_device"] = [
            NonConstBufferDevice(buffer_idx=i, device_type=d, device_index=n)
            for i, (d, n) in devices
        ]
    else:
        gm.meta.pop("non_const_buffer_device", None)
    gm.meta["memory_planning"] = dict(report)
    return report


class MemoryPlanningPass(PassBase):
    """Plans each method's memory (see the module docstring).

    The official constructor and options:

    - ``memory_planning_algo``: a callable ``items -> Plan`` or a list of them
      (all run, the smallest arena kept); defaults to ``greedy``, ``naive`` and
      ``best_fit``. The official protocol is accepted too: a
      ``MemoryPlanningAlgorithmSuite`` or ``algo(alignment, specs, graph_module,
      graph_signature, extra_padding) -> MemoryAlgoResult`` (see
      :mod:`pyexecutorch.exir.memory_algorithms`); such an algorithm places every
      tensor itself (no in-place reuse of dying inputs).
    - ``allow_lifetime_and_storage_overlap``: accepted as in the official pass, where it
      only relaxes a debug check; our plans are always verified without overlap.
    - ``alloc_graph_input`` / ``alloc_graph_output`` / ``alloc_mutable_buffers``: plan
      those tensors (otherwise the runtime's caller provides their memory).
    - ``share_mutable_buffers``: the mutable buffers of every method live in one
      arena (memory id 2) at the same offset in every method, so that one method's
      writes are what another reads; the runtimes give a program's methods one copy
      of that arena.
    - ``alignment``: of every planned tensor.
    - ``enable_non_cpu_memory_planning`` (an attribute, set from the
      ``ExecutorchBackendConfig`` by ``to_executorch``): each non-CPU device's tensors
      get arenas of their own.

    ``reuse_in_place`` (ours) lets elementwise kernels write into an input that dies
    at the call (same shape and dtype); turn it off for runtimes whose kernels cannot
    take an output aliasing an input.
    """

    def __init__(
        self,
        memory_planning_algo: Any = None,
        allow_lifetime_and_storage_overlap: bool = False,
        alloc_graph_input: bool = True,
        alloc_graph_output: bool = True,
        alloc_mutable_buffers: bool = True,
        share_mutable_buffers: bool = False,
        alignment: int = ALIGNMENT,
        reuse_in_place: bool = True,
    ) -> None:
        if memory_planning_algo is None:
            algos = DEFAULT_ALGORITHMS
        elif callable(memory_planning_algo):
            algos = (memory_planning_algo,)
        else:
            algos = tuple(memory_planning_algo)
        if share_mutable_buffers and not alloc_mutable_buffers:
            raise ValueError(
                "share_mutable_buffers needs alloc_mutable_buffers=True (the shared "
                "buffers are planned memory)"
            )
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, got {alignment}")
        self.algorithms = algos
        self.memory_planning_algo = memory_planning_algo
        self.allow_lifetime_and_storage_overlap = allow_lifetime_and_storage_overlap
        self.alloc_graph_input = alloc_graph_input
        self.alloc_graph_output = alloc_graph_output
        self.alloc_mutable_buffers = alloc_mutable_buffers
        self.share_mutable_buffers = share_mutable_buffers
        self.alignment = alignment
        self.reuse_in_place = reuse_in_place
        # Set from ExecutorchBackendConfig.enable_non_cpu_memory_planning by to_executorch.
        self.enable_non_cpu_memory_planning = False
        self.last_report: dict[str, int] = {}
        self._shared: list[tuple[GraphModule, ExportGraphSignature | None]] = []

    def run(
        self, graph_module: GraphModule, graph_signature: ExportGraphSignature | None = None
    ) -> PassResult:
        share = self.share_mutable_buffers
        self.last_report = plan_memory(
            graph_module,
            graph_signature,
            algorithms=self.algorithms,
            alignment=self.alignment,
            alloc_graph_input=self.alloc_graph_input,
            alloc_graph_output=self.alloc_graph_output,
            alloc_mutable_buffers=self.alloc_mutable_buffers and not share,
            reuse_in_place=self.reuse_in_place,
            enable_non_cpu_memory_planning=self.enable_non_cpu_memory_planning,
        )
        if share:
            # Placed by run_multimethod once every method has been planned.
            self._shared.append((graph_module, graph_signature))
        elif self.alloc_graph_input and self.alloc_graph_output and self.alloc_mutable_buffers:
            verify_memory_plan(graph_module, graph_signature)
        return PassResult(graph_module, True)

    def run_multimethod(self) -> None:
        """Place the shared mutable buffers of every method ``run`` planned (memory id 2:
        one offset per buffer name, the same in every method)."""
        if not self.share_mutable_buffers:
            return
        offsets: dict[str, int] = {}
        end = 0
        for gm, _ in self._shared:
            for spec in _mutable_buffer_specs(gm):
                if spec.fqn not in offsets:
                    offsets[spec.fqn] = end
                    end += aligned(spec.nbytes(), self.alignment)
        for gm, signature in self._shared:
            for spec in _mutable_buffer_specs(gm):
                spec.alignment = self.alignment
                spec.mem_id, spec.mem_offset = SHARED_MEMORY_ID, offsets[spec.fqn]
                spec.lifetime = [0, _FOREVER]  # state: alive across calls
            for view in _all_specs(gm):
                if view.storage_base is not None:
                    base, offset = storage_root(view)
                    if base.mem_id is not None and base.mem_offset is not None:
                        view.mem_id, view.mem_offset = base.mem_id, base.mem_offset + offset
            sizes = list(gm.meta["non_const_buffer_sizes"])
            _set_buffer_sizes(gm, [*sizes, end])
            if self.alloc_graph_input and self.alloc_graph_output:
                verify_memory_plan(gm, signature)
        self._shared = []

    def call(self, graph_module: GraphModule) -> PassResult:
        return self.run(graph_module)


# Where share_mutable_buffers puts the state (the official exporter's choice).
SHARED_MEMORY_ID = 2
_FOREVER = 1 << 62


def _mutable_buffer_specs(gm: GraphModule) -> list[TensorSpec]:
    return [
        s
        for node in gm.graph.nodes
        if node.op == "placeholder"
        for s in node_specs(node)
        if s.is_mutable_buffer and s.fqn and s.storage_base is None
    ]


# --------------------------------------------------------------------------------------
# Checking a plan


class MemoryPlanError(AssertionError):
    pass


def planned_specs(gm: GraphModule) -> list[TensorSpec]:
    """Every distinct planned (non-view) spec in ``gm`` and its submodules."""
    seen: dict[int, TensorSpec] = {}

    def visit(g: GraphModule) -> None:
        for node in g.graph.nodes:
            for s in specs_of(node.meta.get("spec")):
                if s.mem_id is not None and s.storage_base is None and id(s) not in seen:
                    seen[id(s)] = s
            if is_control_flow(node):
                for sub in submodules(g, node):
                    visit(sub)

    visit(gm)
    return list(seen.values())


def verify_memory_plan(gm: GraphModule, signature: ExportGraphSignature | None = None) -> None:
    """Raise :class:`MemoryPlanError` if two tensors alive at the same time
    overlap in the arena, a tensor lies outside the arena, or a tensor an
    operator reads or writes was not planned."""
    sizes = gm.meta.get("non_const_buffer_sizes", [0, 0])
    specs = planned_specs(gm)
    for s in specs:
        size = sizes[s.mem_id] if 0 < s.mem_id < len(sizes) else -1
        if s.mem_offset is None or s.mem_offset < 0 or s.mem_offset + s.allocated_memory > size:
            raise MemoryPlanError(f"{s} lies outside arena {s.mem_id} of {size} bytes")
        if s.mem_offset % s.alignment:
            raise MemoryPlanError(f"{s} is not aligned to {s.alignment}")
    by_start = sorted(specs, key=lambda s: s.lifetime[0])
    for i, a in enumerate(by_start):
        for b in by_start[i + 1 :]:
            if b.lifetime[0] > a.lifetime[1]:
                break
            if a.mem_id == b.mem_id and (
                a.mem_offset < b.mem_offset + b.allocated_memory
                and b.mem_offset < a.mem_offset + a.allocated_memory
            ):
                raise MemoryPlanError(f"{a} and {b} are alive together and overlap in memory")

    # Every tensor an operator touches is planned, const, or a branch input.
    def check(g: GraphModule, top: bool) -> None:
        branch_inputs = set()
        for node in g.graph.nodes:
            if node.op == "placeholder" and not top:
                branch_inputs.update(id(s) for s in node_specs(node))
            if node.op != "call_function" or node.target in (operator.getitem, memory.alloc):
                continue
            if is_control_flow(node):
                for sub in submodules(g, node):
                    check(sub, False)
            for arg in arg_nodes(node) + [node]:
                for s in node_specs(arg):
                    if s.const or id(s) in branch_inputs:
                        continue
                    if s.storage_base is not None:
                        continue
                    if s.mem_id is None or s.mem_offset is None:
                        raise MemoryPlanError(f"{s} used by {node.format_node()} was not planned")

    check(gm, True)


# The official algorithm protocol and helper names, re-exported here under the
# official module path (memory_algorithms builds on the definitions above).
from pyexecutorch.exir import memory_algorithms as _algorithms  # noqa: E402

for _name in _algorithms.__all__:
    globals().setdefault(_name, getattr(_algorithms, _name))

# Callable with items (ours) or as official algorithms: (alignment, specs, ...).
greedy = _algorithms.as_official(greedy)
naive = _algorithms.as_official(naive)
