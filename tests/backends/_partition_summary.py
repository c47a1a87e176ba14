"""How a lowered edge program was split into delegates: ``summarize(edge_manager)`` counts
the delegates and the operators inside and outside them, for our manager or the official
one. Shared by the XNNPACK export tests and the official-export cache (tests/official.py),
which records the official partition while it exports, so it is not partitioned twice.
"""

from __future__ import annotations

import json
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def op_name(target: Any) -> str:
    """``aten.convolution.default`` for an operator (an official ``EdgeOpOverload`` or a
    torch ``OpOverload``), the function name otherwise."""
    schema = getattr(target, "_schema", None) or getattr(
        getattr(target, "_op", None), "_schema", None
    )
    if schema is not None:
        return f"{schema.name.replace('::', '.')}.{schema.overload_name or 'default'}"
    return getattr(target, "__name__", str(target))


def _is_delegate_call(node) -> bool:
    return node.op == "call_function" and op_name(node.target) == "executorch_call_delegate"


def _counted(node) -> bool:
    """An operator node; ``getitem`` only unpacks a multi-output node and is not one."""
    return node.op == "call_function" and node.target is not operator.getitem


@dataclass
class Summary:
    """How one program was split: per method, its delegates and the operators in them
    and outside them."""

    delegates: int = 0
    delegated: Counter = field(default_factory=Counter)
    portable: Counter = field(default_factory=Counter)
    backends: Counter = field(default_factory=Counter)

    @property
    def delegated_ops(self) -> int:
        return sum(self.delegated.values())

    @property
    def portable_ops(self) -> int:
        return sum(self.portable.values())

    def to_json(self) -> bytes:
        data = {k: dict(v) if isinstance(v, Counter) else v for k, v in vars(self).items()}
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Summary:
        d = json.loads(data)
        return cls(
            d["delegates"], Counter(d["delegated"]), Counter(d["portable"]), Counter(d["backends"])
        )


def _submodules(gm) -> list:
    """``gm`` and the graphs of its control-flow branches (nested ``GraphModule``s that
    are not lowered delegates)."""
    import torch.fx  # noqa: PLC0415

    out = [gm]
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(gm, node.target, None)
            if isinstance(sub, torch.fx.GraphModule):
                out += _submodules(sub)
    return out


def summarize(edge_manager) -> Summary:  # noqa: ANN001 - ours or the official manager
    """Delegates and operators of every method of an (official or our) edge program
    manager after lowering."""
    s = Summary()
    for method in edge_manager.methods:
        for gm in _submodules(edge_manager.exported_program(method).graph_module):
            for node in gm.graph.nodes:
                if _is_delegate_call(node):
                    lowered = getattr(gm, node.args[0].target)
                    s.delegates += 1
                    s.backends[lowered.backend_id] += 1
                    for inner in lowered.original_module.graph.nodes:
                        if _counted(inner):
                            s.delegated[op_name(inner.target)] += 1
                elif _counted(node):
                    s.portable[op_name(node.target)] += 1
    return s
