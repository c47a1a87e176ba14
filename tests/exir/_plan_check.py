"""An independent check of a memory plan, by simulating the method's execution.

The planner computes lifetimes from node indices; this checker does not reuse
that code.  It walks the executorch-dialect graph the way the emitter lays it
out and the runtime runs it — every branch of every ``cond`` (each path
separately), two iterations of every ``while_loop`` with the loop state copied
at the end of the body, ``MoveCall`` semantics for branch results (the result
*becomes* the moved tensor) — and at each instruction checks that the memory
an operator writes does not overlap any tensor that is read later.  Writing
over an input that the same instruction reads for the last time is accepted
only for the elementwise kernels the planner may update in place, and only at
the identical address.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field

import torch
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

from pyexecutorch.exir import memory
from pyexecutorch.exir.memory_planning import ELEMENTWISE_OUT_OPS
from pyexecutorch.exir.tensor_spec import TensorSpec

COND = torch.ops.higher_order.cond
WHILE = torch.ops.higher_order.while_loop


class PlanViolation(AssertionError):
    pass


@dataclass
class Step:
    label: str
    reads: list[object] = field(default_factory=list)  # value keys
    writes: list[object] = field(default_factory=list)
    in_place_ok: bool = False


def _specs(x) -> list[TensorSpec]:
    return [s for s in pytree.tree_leaves(x) if isinstance(s, TensorSpec)]


def _node_specs(n) -> list[TensorSpec]:
    return _specs(n.meta.get("spec")) if isinstance(n, Node) else []


def _range(spec: TensorSpec) -> tuple[int, int] | None:
    if spec.mem_id is None or spec.mem_offset is None or spec.const:
        return None
    if spec.nbytes() == 0:
        return None  # an empty tensor occupies nothing
    return (spec.mem_offset, spec.mem_offset + spec.nbytes())


class _Path:
    """One execution path: steps over 'values', each value with a memory range."""

    def __init__(self, choices: dict[int, bool]) -> None:
        self.choices = choices  # id(cond node) -> branch taken (True = then-branch)
        self.steps: list[Step] = []
        self.where: dict[object, tuple[int, int] | None] = {}
        self.counter = itertools.count()

    def value(self, spec: TensorSpec) -> object:
        key = ("spec", id(spec))
        if key not in self.where:
            self.where[key] = _range(spec)
        return key

    def moved(self, src: object) -> object:
        """A fresh value living where ``src`` lives (a MoveCall result)."""
        key = ("moved", next(self.counter))
        self.where[key] = self.where[src]
        return key


def _run_graph(
    path: _Path, gm: GraphModule, env: dict[Node, list[object]], top: bool
) -> list[object]:
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if top:
                vals = [path.value(s) for s in _node_specs(node)]
                env[node] = vals
                path.steps.append(Step(f"input {node.name}", writes=vals))
            continue
        if node.op == "get_attr":
            env[node] = []
            continue
        if node.op == "output":
            outs = []
            for leaf in pytree.tree_leaves(node.args[0]):
                if isinstance(leaf, Node):
                    outs += env.get(leaf, [])
            return outs
        target = node.target
        if target is memory.alloc:
            env[node] = [path.value(s) for s in _node_specs(node)]
            continue
        if target is operator.getitem:
            parent = env.get(node.args[0], [])
            specs = _node_specs(node.args[0])
            spec = node.meta.get("spec")
            idx = next((i for i, s in enumerate(specs) if s is spec), None)
            env[node] = (
                [parent[idx]]
                if idx is not None and idx < len(parent)
                else [path.value(spec)]
                if isinstance(spec, TensorSpec)
                else []
            )
            continue
        if target is memory.view:
            base = env.get(node.args[0], [])
            view = [path.value(s) for s in _node_specs(node)]
            if (
                view
                and base
                and path.where[view[0]] is not None
                and path.where[base[0]] is not None
            ):
                lo, hi = path.where[view[0]]
                blo, bhi = path.where[base[0]]
                if lo < blo or hi > bhi:
                    raise PlanViolation(f"view {node.name} lies outside its base's memory")
            env[node] = view
            path.steps.append(Step(f"view {node.name}", reads=list(base), writes=view))
            continue
        if target is COND:
            pred, true_gm, false_gm, operands = node.args
            taken = path.choices.get(id(node), True)
            sub = getattr(gm, (true_gm if taken else false_gm).target)
            reads = list(env.get(pred, []))
            for o in operands:
                reads += env.get(o, [])
            path.steps.append(Step(f"cond {node.name}", reads=reads))
            sub_env = {}
            phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
            for ph, o in zip(phs, operands, strict=True):
                sub_env[ph] = list(env.get(o, []))
            outs = _run_graph(path, sub, sub_env, False)
            results = [path.moved(o) for o in outs]
            path.steps.append(
                Step(f"move {node.name}", reads=list(outs), writes=results, in_place_ok=True)
            )
            env[node] = results
            continue
        if target is WHILE:
            cond_gm, body_gm, carried, additional = node.args
            cond_sub, body_sub = getattr(gm, cond_gm.target), getattr(gm, body_gm.target)
            state = [path.value(s) for s in _node_specs(node)]
            init = []
            for c in carried:
                init += env.get(c, [])
            extra = []
            for a in additional:
                extra += env.get(a, [])
            path.steps.append(Step(f"while init {node.name}", reads=init, writes=state))
            for it in range(3):
                phs = [n for n in cond_sub.graph.nodes if n.op == "placeholder"]
                sub_env = {ph: [v] for ph, v in zip(phs, state + extra, strict=False)}
                c_out = _run_graph(path, cond_sub, sub_env, False)
                path.steps.append(
                    Step(f"while test {node.name} #{it}", reads=c_out + state + extra)
                )
                if it == 2:
                    break
                phs = [n for n in body_sub.graph.nodes if n.op == "placeholder"]
                sub_env = {ph: [v] for ph, v in zip(phs, state + extra, strict=False)}
                b_out = _run_graph(path, body_sub, sub_env, False)
                path.steps.append(
                    Step(f"while copy {node.name} #{it}", reads=b_out + extra, writes=list(state))
                )
            env[node] = state
            continue
        if getattr(target, "__module__", "") in ("_operator", "builtins") or not isinstance(
            target, torch._ops.OpOverload
        ):
            env[node] = [path.value(s) for s in _node_specs(node)]
            continue
        # An operator call: reads its inputs, writes its out arguments.
        out_names = {a.name for a in target._schema.arguments if a.is_out}
        reads, writes = [], []
        for a in node.args:
            for leaf in pytree.tree_leaves(a):
                if isinstance(leaf, Node):
                    reads += env.get(leaf, [])
        for k, v in node.kwargs.items():
            for leaf in pytree.tree_leaves(v):
                if isinstance(leaf, Node):
                    (writes if k in out_names else reads).extend(env.get(leaf, []))
        if not out_names:  # in-place op (copy_): writes its first argument
            writes = list(env.get(node.args[0], []))
            env[node] = writes
        else:
            env[node] = [path.value(s) for s in _node_specs(node)]
        path.steps.append(
            Step(
                f"{target} ({node.name})",
                reads=reads,
                writes=writes,
                in_place_ok=target in ELEMENTWISE_OUT_OPS,
            )
        )
    return []


def _cond_nodes(gm: GraphModule) -> list[Node]:
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (COND, WHILE):
            if node.target is COND:
                out.append(node)
            for a in node.args:
                if isinstance(a, Node) and a.op == "get_attr":
                    sub = getattr(gm, a.target)
                    if isinstance(sub, GraphModule):
                        out += _cond_nodes(sub)
    return out


def _instances(path: _Path, outputs: list[object], mutable: list[object]):
    """Each write of a value, with the last step that reads that write."""
    steps = path.steps
    writes: dict[object, list[int]] = {}
    reads: dict[object, list[int]] = {}
    for i, st in enumerate(steps):
        for r in st.reads:
            reads.setdefault(r, []).append(i)
        for w in st.writes:
            writes.setdefault(w, []).append(i)
    end = len(steps)
    out = []  # (value, write step, last read step)
    for v, ws in writes.items():
        rs = reads.get(v, [])
        for k, w in enumerate(ws):
            nxt = ws[k + 1] if k + 1 < len(ws) else end + 1
            last = max([r for r in rs if w < r <= nxt] + [w])
            if k + 1 == len(ws) and (v in outputs or v in mutable):
                last = end
            out.append((v, w, last))
    return out


def _check_path(path: _Path, outputs: list[object], mutable: list[object]) -> None:
    steps = path.steps
    inst = _instances(path, outputs, mutable)
    for v, w, _ in inst:
        wr = path.where.get(v)
        if wr is None:
            continue
        st = steps[w]
        for x, xw, xlast in inst:
            if x == v or xw > w or xlast < w:
                continue
            if xw == w and x not in st.writes:
                continue
            xr = path.where.get(x)
            if xr is None or xr[1] <= wr[0] or wr[1] <= xr[0]:
                continue
            if xw < w and xlast == w and xr == wr and x in st.reads:
                if st.in_place_ok or st.label.startswith(("move", "view")):
                    continue  # an input updated in place / a moved or viewed value
            if xw < w and xr == wr and st.label.startswith(("move", "view")):
                continue
            raise PlanViolation(
                f"step {w} ({st.label}) writes [{wr[0]}, {wr[1]}) over a live tensor at "
                f"[{xr[0]}, {xr[1]}) written at step {xw} ({steps[xw].label}) and read until step "
                f"{xlast} ({steps[min(xlast, len(steps) - 1)].label})"
            )


def check_plan(gm: GraphModule, max_paths: int = 64) -> int:
    """Check every execution path of ``gm``; returns the number of paths."""
    conds = _cond_nodes(gm)
    combos = list(itertools.product([True, False], repeat=len(conds)))[:max_paths]
    for combo in combos:
        path = _Path({id(c): taken for c, taken in zip(conds, combo, strict=True)})
        outs = _run_graph(path, gm, {}, True)
        mutable = [
            path.value(s)
            for n in gm.graph.nodes
            if n.op == "placeholder"
            for s in _node_specs(n)
            if s.is_mutable_buffer
        ]
        _check_path(path, outs, mutable)
    return len(combos)
