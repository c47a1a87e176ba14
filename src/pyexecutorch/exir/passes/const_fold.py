"""Constant folding: operators whose inputs are all constants run at export.

Typical case: ``permute_copy(weight)`` in front of every linear layer.  The
result becomes a constant (a ``get_attr`` node with a ``const`` spec, which
:func:`lift_constant_attrs` then makes a lifted constant input of the method, as
the official ``constant_prop_pass`` leaves its results); the runtime neither
computes it on each call nor plans memory for it.  A fold is
only done when it does not grow the program (the result is no larger than the
constant inputs it replaces, or is tiny), and constants left unused are
dropped from the method.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    TensorArgument,
)
from torch.fx import GraphModule, Node
from torch.utils import _pytree as pytree

from pyexecutorch.exir.dialects.quantized_ops import QUANT_NAMESPACES
from pyexecutorch.exir.graph_utils import HOP_COND, HOP_MAP, HOP_WHILE, is_control_flow, submodules
from pyexecutorch.exir.tensor_spec import TensorSpec

aten = torch.ops.aten

# Results of at most this many bytes may be folded even from nothing (full, arange, ...).
SMALL_RESULT = 4096

_NEVER = frozenset(
    {
        aten.sym_size.int,
        aten.sym_stride.int,
        aten.sym_numel.default,
        aten._local_scalar_dense.default,
        aten.empty.memory_format,
        aten.empty_strided.default,
    }
)


def _foldable(target: Any) -> bool:
    if not isinstance(target, torch._ops.OpOverload) or target in _NEVER:
        return False
    if target.namespace in QUANT_NAMESPACES:
        # A dequantized weight would grow the program; the official exporter keeps them too.
        return False
    schema = target._schema
    if schema.is_mutable or any(a.is_out for a in schema.arguments):
        return False
    if (
        torch.Tag.nondeterministic_seeded in target.tags
        or torch.Tag.nondeterministic_bitwise in target.tags
    ):
        return False
    return len(schema.returns) == 1 and isinstance(schema.returns[0].type, torch.TensorType)


def _op_name(op: torch._ops.OpOverload) -> str:
    name = op._schema.name.split("::")[-1]
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def lifted_names(signature: ExportGraphSignature) -> set[str]:
    """Names of the lifted tensor constants (code-like values, never moved to a .ptd)."""
    return {s.target for s in signature.input_specs if s.kind == InputKind.CONSTANT_TENSOR}


def source_name(node: Any, lifted: set[str]) -> str | None:
    """The weight name a constant node stands for (its parameter or buffer, or the name
    a fold derived from them); None for lifted constants and compiler-made values."""
    spec = node.meta.get("spec") if isinstance(node, Node) else None
    fqn = getattr(spec, "fqn", None)
    return fqn if fqn and fqn not in lifted else None


def derived_name(sources: list[str], what: str) -> str | None:
    """A stable name for a constant computed from the weights ``sources``
    (``l.weight:permute_copy``): two exports of one model agree on it. The emitter
    appends a digest where two different values would share one."""
    if not sources:
        return None
    return f"{'+'.join(sources)}:{what}"


class _Folder:
    def __init__(self, fake_mode, lifted: set[str]) -> None:
        self.fake_mode = fake_mode
        self.lifted = lifted
        self.folded = 0
        self.counter = 0

    def run(self, gm: GraphModule, known: dict[Node, torch.Tensor]) -> None:
        for node in list(gm.graph.nodes):
            if node.op == "get_attr":
                obj = _attr(gm, node.target)
                if isinstance(obj, torch.Tensor):
                    known[node] = obj
                continue
            if node.op != "call_function":
                continue
            if is_control_flow(node):
                self._into_control_flow(gm, node, known)
                continue
            if not _foldable(node.target):
                continue
            leaves = pytree.tree_leaves((node.args, node.kwargs))
            inputs = [x for x in leaves if isinstance(x, Node)]
            if any(x not in known for x in inputs):
                continue
            in_bytes = sum(known[x].nbytes for x in inputs)
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or not all(isinstance(s, int) for s in val.shape):
                continue
            out_bytes = math.prod(val.shape) * val.dtype.itemsize
            if out_bytes > max(in_bytes, SMALL_RESULT):
                continue
            args, kwargs = pytree.tree_map_only(Node, lambda x: known[x], (node.args, node.kwargs))
            try:
                with torch.no_grad():
                    result = node.target(*args, **kwargs)
            except Exception:
                continue
            if not isinstance(result, torch.Tensor):
                continue
            result = result.detach().contiguous().clone()
            sources = [n for x in inputs if (n := source_name(x, self.lifted))]
            fqn = derived_name(sorted(set(sources)), _op_name(node.target))
            const = add_constant(
                gm, self._name(gm, fqn), result, self.fake_mode, before=node, fqn=fqn
            )
            node.replace_all_uses_with(const)
            gm.graph.erase_node(node)
            known[const] = result
            self.folded += 1

    def _name(self, gm: GraphModule, fqn: str | None) -> str:
        # Named after its weights, so that a tag function sees "weight" in node.name.
        base = "_folded_" + re.sub(r"\W", "_", fqn) if fqn else "_folded_constant"
        while True:
            name = f"{base}{self.counter}"
            self.counter += 1
            if not hasattr(gm, name):
                return name

    def _into_control_flow(
        self, gm: GraphModule, node: Node, known: dict[Node, torch.Tensor]
    ) -> None:
        subs = submodules(gm, node)
        if node.target is HOP_COND:
            operands = list(node.args[3])
            invariant = list(range(len(operands)))
        elif node.target is HOP_WHILE:
            operands = list(node.args[2]) + list(node.args[3])
            invariant = list(range(len(node.args[2]), len(operands)))  # additional inputs only
        elif node.target is HOP_MAP:
            operands = list(node.args[1]) + list(node.args[2])
            invariant = list(range(len(node.args[1]), len(operands)))
        else:
            return
        for sub in subs:
            placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
            inner: dict[Node, torch.Tensor] = {}
            for i in invariant:
                if i < len(placeholders) and isinstance(operands[i], Node) and operands[i] in known:
                    inner[placeholders[i]] = known[operands[i]]
            self.run(sub, inner)
            sub.graph.eliminate_dead_code()


def _attr(gm: GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _drop_unused_cond_operands(gm: GraphModule) -> None:
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not is_control_flow(node):
            continue
        subs = submodules(gm, node)
        for sub in subs:
            _drop_unused_cond_operands(sub)
        if node.target is not HOP_COND:
            continue
        operands = list(node.args[3])
        phs = [[n for n in sub.graph.nodes if n.op == "placeholder"] for sub in subs]
        keep = [i for i in range(len(operands)) if any(p[i].users for p in phs)]
        if len(keep) == len(operands):
            continue
        for p, sub in zip(phs, subs, strict=True):
            for i in range(len(operands)):
                if i not in keep:
                    sub.graph.erase_node(p[i])
            sub.recompile()
        node.args = (*node.args[:3], tuple(operands[i] for i in keep))


def add_constant(
    gm: GraphModule,
    name: str,
    value: torch.Tensor,
    fake_mode,
    *,
    before: Node,
    fqn: str | None = None,
) -> Node:
    """A new constant ``get_attr`` node for ``value`` (registered on ``gm`` as
    ``name``), inserted before ``before`` and carrying its source metadata.

    ``fqn`` names the weight it stands for (see :func:`derived_name`): with it the
    constant is a weight that ``external_constants`` moves to the ``.ptd``."""
    gm.register_buffer(name, value, persistent=False)
    with gm.graph.inserting_before(before):
        # (the node's own name leaves ``name`` free for the placeholder that
        # lift_constant_attrs makes of it)
        const = gm.graph.create_node("get_attr", name, name=f"{name}_attr")
    const.meta.update(
        {
            k: v
            for k, v in before.meta.items()
            if k in ("stack_trace", "nn_module_stack", "from_node")
        }
    )
    const.meta["val"] = fake_mode.from_tensor(value, static_shapes=True)
    const.meta["spec"] = TensorSpec.from_tensor(value, const=True)
    const.meta["spec"].fqn = fqn
    return const


def constant_inputs(gm: GraphModule) -> dict[Node, torch.Tensor]:
    """The placeholders of ``gm`` holding constants, with their values."""
    known: dict[Node, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            spec = node.meta.get("spec")
            if isinstance(spec, TensorSpec) and spec.const and spec.storage is not None:
                known[node] = spec.storage
    return known


def drop_unused_constants(gm: GraphModule, signature: ExportGraphSignature) -> ExportGraphSignature:
    """Drop constant inputs nothing reads any more; returns the new signature."""
    specs = list(signature.input_specs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    keep = []
    for node, spec in zip(placeholders, specs, strict=True):
        s = node.meta.get("spec")
        if not node.users and isinstance(s, TensorSpec) and s.const:
            gm.graph.erase_node(node)
            continue
        keep.append(spec)
    return ExportGraphSignature(input_specs=keep, output_specs=list(signature.output_specs))


def fold_constants(
    gm: GraphModule, signature: ExportGraphSignature, fake_mode
) -> ExportGraphSignature:
    """Fold in place; returns the signature without the inputs left unused."""
    known = constant_inputs(gm)
    folder = _Folder(fake_mode, lifted_names(signature))
    folder.run(gm, known)
    if not folder.folded:
        return signature
    gm.graph.eliminate_dead_code()
    _drop_unused_cond_operands(gm)
    gm.graph.eliminate_dead_code()
    # Constant inputs nothing reads any more are dropped from the method.
    return drop_unused_constants(gm, signature)


def lift_constant_attrs(
    gm: GraphModule, signature: ExportGraphSignature, constants: dict[str, Any]
) -> tuple[ExportGraphSignature, dict[str, Any]]:
    """The method's tensor ``get_attr`` constants (folded weights) become lifted
    constant inputs, as the official ``constant_prop_pass`` makes its results: a
    placeholder with a ``CONSTANT_TENSOR`` input spec, its value in ``constants``.
    Inserted before the user inputs; each keeps its node's spec (``const``, and the
    ``fqn`` of the weights it stands for). Control-flow submodules keep theirs."""
    attrs = [
        n
        for n in gm.graph.nodes
        if n.op == "get_attr" and isinstance(_attr(gm, n.target), torch.Tensor)
    ]
    if not attrs:
        return signature, constants
    specs = list(signature.input_specs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    at = next((i for i, s in enumerate(specs) if s.kind == InputKind.USER_INPUT), len(specs))
    anchor = placeholders[at] if at < len(placeholders) else None
    constants = dict(constants)
    new_specs = []
    for attr in attrs:
        value = _attr(gm, attr.target)
        if anchor is not None:
            ctx = gm.graph.inserting_before(anchor)
        else:
            last = placeholders[-1] if placeholders else None
            ctx = (
                gm.graph.inserting_after(last) if last is not None else gm.graph.inserting_before()
            )
        with ctx:
            node = gm.graph.placeholder(attr.target)
        node.target = node.name
        if anchor is None:
            placeholders.append(node)
        node.meta.update(attr.meta)
        attr.replace_all_uses_with(node)
        gm.graph.erase_node(attr)
        delattr(gm, attr.target)
        constants[node.name] = value
        new_specs.append(
            InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name=node.name), node.name)
        )
    specs[at:at] = new_specs
    return ExportGraphSignature(
        input_specs=specs, output_specs=list(signature.output_specs)
    ), constants
