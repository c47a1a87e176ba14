"""``DebugPass``: logs a graph's operators (and optionally their source lines and
tensor specs) without changing it."""

from __future__ import annotations

import logging
from collections import Counter

from torch.fx import GraphModule
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from pyexecutorch.exir.error import op_name, source_location
from pyexecutorch.exir.graph_utils import nodes_with_owner

logger = logging.getLogger("pyexecutorch.exir")


class DebugPass(PassBase):
    """Log each operator node (``show_src``: with its source line; ``show_spec``:
    with its tensor spec) and a count per operator, to the ``pyexecutorch.exir``
    logger at INFO, and to ``log_filename`` when given."""

    def __init__(
        self,
        msg: str = "",
        enable_debug_pass: bool = True,
        show_src: bool = False,
        show_full_path: bool = False,
        show_all_frames: bool = False,
        path_filter: str | None = None,
        show_spec: bool = False,
        log_filename: str | None = None,
    ) -> None:
        self.msg = msg
        self.enable_debug_pass = enable_debug_pass
        self.show_src = show_src
        self.show_spec = show_spec
        self.log_filename = log_filename

    def lines(self, graph_module: GraphModule) -> list[str]:
        out = [self.msg] if self.msg else []
        # the generated code first: it names each operator as Python calls it
        # (``torch.ops.aten.mul.Tensor``), as the official pass's log does
        graph_module.recompile()
        out.append(f"Code is:\n{graph_module.code.strip()}")
        counts: Counter = Counter()
        for _, node, owner in nodes_with_owner(graph_module):
            if node.op != "call_function":
                continue
            name = op_name(node.target)
            counts[name] += 1
            line = f"{node.name}: {name}"
            if self.show_src:
                line += f" at {source_location(node, owner)}"
            if self.show_spec and "spec" in node.meta:
                line += f" {node.meta['spec']}"
            out.append(line)
        out += [f"{n}: {c}" for n, c in sorted(counts.items())]
        return out

    def call(self, graph_module: GraphModule) -> PassResult:
        if not self.enable_debug_pass:
            return PassResult(graph_module, False)
        text = "\n".join(self.lines(graph_module))
        logger.info("%s", text)
        if self.log_filename:
            with open(self.log_filename, "w") as f:
                f.write(text + "\n")
        return PassResult(graph_module, False)


__all__ = ["DebugPass"]
