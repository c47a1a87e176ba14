"""Lowered modules: a partition compiled by a backend, called through
``torch.ops.higher_order.executorch_call_delegate``.

In a graph a delegate is two nodes: a ``get_attr`` naming a
:class:`LoweredBackendModule` attribute (``lowered_module_0``, ...) and a
``call_function`` of ``executorch_call_delegate(lowered, *inputs)`` returning a
list of tensors (read with ``getitem``). The emitter turns them into a
``BackendDelegate`` entry and a ``DelegateCall`` instruction.
"""

from __future__ import annotations

import copy
import operator
from typing import Any

import torch
from torch._higher_order_ops.executorch_call_delegate import (
    executorch_call_delegate,
    get_lowered_module_name,
    is_lowered_module,
)
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)

from pyexecutorch.exir.backend.compile_spec_schema import CompileSpec


class LoweredBackendModule(torch.nn.Module):
    """A partition lowered to one backend: its id, the bytes ``preprocess`` made,
    the compile specs and named data for the program, and the edge program it
    came from (for debugging and for running it eagerly)."""

    def __init__(
        self,
        edge_program: ExportedProgram,
        backend_id: str,
        processed_bytes: bytes,
        compile_specs: list[CompileSpec],
        named_data_store_output: Any = None,
    ) -> None:
        super().__init__()
        self._original_exported_program = edge_program
        self._backend_id = backend_id
        self._processed_bytes = processed_bytes
        self._compile_specs = list(compile_specs)
        self._named_data_store_output = named_data_store_output
        self.meta: dict[str, Any] | None = None

    @property
    def backend_id(self) -> str:
        return self._backend_id

    @property
    def processed_bytes(self) -> bytes:
        return self._processed_bytes

    @property
    def compile_specs(self) -> list[CompileSpec]:
        return self._compile_specs

    @property
    def original_module(self) -> ExportedProgram:
        """The edge program of the partition (inputs: consumed constants, then the
        delegate's inputs)."""
        return self._original_exported_program

    @property
    def named_data_store_output(self) -> Any:
        return self._named_data_store_output

    def forward(self, *args: Any) -> Any:
        return executorch_call_delegate(self, *args)

    def __deepcopy__(self, memo: dict[int, Any] | None) -> LoweredBackendModule:
        from pyexecutorch.exir.graph_utils import copy_graph_module, rebuild

        ep = self._original_exported_program
        program = rebuild(ep, copy_graph_module(ep.graph_module), copy.deepcopy(ep.graph_signature))
        out = LoweredBackendModule(
            program,
            self._backend_id,
            self._processed_bytes,
            copy.deepcopy(self._compile_specs, memo),
            self._named_data_store_output,
        )
        out.meta = copy.copy(self.meta)
        return out

    def extra_repr(self) -> str:
        return (
            f"backend_id={self._backend_id!r}, processed_bytes={len(self._processed_bytes)} bytes, "
            f"compile_specs={[s.key for s in self._compile_specs]}"
        )

    # -- a program of this delegate alone -------------------------------------

    def as_exported_program(self) -> ExportedProgram:
        """An edge program whose only work is calling this delegate on its user inputs."""
        from pyexecutorch.exir.graph_utils import rebuild

        ep = self._original_exported_program
        sig = ep.graph_signature
        mutations = [s for s in sig.output_specs if s.kind != OutputKind.USER_OUTPUT]
        if mutations:
            raise NotImplementedError(
                f"delegate {self._backend_id}: its program mutates "
                f"{[s.target for s in mutations]}; a program of the delegate alone cannot keep that "
                "state (lower through a partitioner instead)"
            )
        graph = torch.fx.Graph()
        root = torch.nn.Module()
        user = {s.arg.name for s in sig.input_specs if s.kind == InputKind.USER_INPUT}
        inputs = []
        for node in ep.graph.nodes:
            if node.op == "placeholder" and node.name in user:
                new = graph.placeholder(node.name)
                new.meta = dict(node.meta)
                inputs.append(new)
        name = get_lowered_module_name(root, self)
        attr = graph.get_attr(name)
        call = graph.call_function(executorch_call_delegate, (attr, *inputs))
        outs = list(ep.graph.output_node().args[0])
        call.meta["val"] = [o.meta.get("val") if isinstance(o, torch.fx.Node) else o for o in outs]
        results = []
        for i, val in enumerate(call.meta["val"]):
            item = graph.call_function(operator.getitem, (call, i))
            item.meta["val"] = val
            results.append(item)
        graph.output(tuple(results))
        gm = torch.fx.GraphModule(root, graph)
        signature = ExportGraphSignature(
            [InputSpec(InputKind.USER_INPUT, TensorArgument(n.name), None) for n in inputs],
            [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(n.name), None) for n in results],
        )
        return rebuild(ep, gm, signature, constants={}, state_dict={})

    def to_executorch(self, config: Any = None) -> Any:
        """An ``ExecutorchProgramManager`` whose ``forward`` runs this delegate."""
        from pyexecutorch.exir.program_manager import EdgeProgramManager

        return EdgeProgramManager({"forward": self.as_exported_program()}).to_executorch(config)

    def buffer(self, config: Any = None) -> bytes:
        """The ``.pte`` bytes of :meth:`to_executorch`."""
        return self.to_executorch(config).buffer

    def program(self, config: Any = None) -> Any:
        """The emitted ``pyexecutorch.schema.Program`` of :meth:`to_executorch`."""
        return self.to_executorch(config).executorch_program


def get_lowered_submodules(
    gm: torch.fx.GraphModule,
) -> list[tuple[str, LoweredBackendModule, torch.fx.Node]]:
    """``(attribute name, lowered module, call node)`` of each delegate called in ``gm``
    (not inside control-flow submodules)."""
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is executorch_call_delegate:
            attr = node.args[0]
            module = getattr(gm, attr.target)
            out.append((attr.target, module, node))
    return out


def get_lowered_backend_modules(gm: torch.fx.GraphModule) -> list[LoweredBackendModule]:
    """Every lowered module called in ``gm`` and its control-flow submodules."""
    from pyexecutorch.exir.graph_utils import graph_modules

    return [m for g in graph_modules(gm) for _, m, _ in get_lowered_submodules(g)]


__all__ = [
    "LoweredBackendModule",
    "executorch_call_delegate",
    "get_lowered_backend_modules",
    "get_lowered_module_name",
    "get_lowered_submodules",
    "is_lowered_module",
]
