"""Control flow of one method, inlined into its single chain (see :mod:`._method` for the
layouts of ``cond``, ``map_impl`` and ``while_loop``): the part of
:class:`~._method.MethodEmitter` that emits jumps, loop counters and the moves and copies
between a branch's or a loop body's values and the results they stand for."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from pyexecutorch.exir.emit._convert import (
    EmitError,
    make_tensor,
    spec_allocation,
    spec_extra_info,
)
from pyexecutorch.schema.program import Bool, Int, JumpFalseCall, MoveCall, TensorShapeDynamism


class ControlFlowEmitter:
    """Emission of ``cond``, ``map_impl`` and ``while_loop`` nodes, over the value and
    instruction helpers of the emitter that inherits it."""

    def _subgraph(self, gm: torch.fx.GraphModule, bindings: list[int | None]) -> list[int]:
        """Inline ``gm`` with its placeholders bound to ``bindings``; return its output values."""

        def placeholder(node: torch.fx.Node, position: int) -> int:
            if position >= len(bindings):
                raise EmitError(
                    f"submodule placeholder {node.name} has no operand (got {len(bindings)})"
                )
            value = bindings[position]
            if value is None:
                value = self._spec_value(node.meta["spec"])
            return value

        leaves = self._walk(gm, placeholder)
        flat: list[int] = []
        for leaf in leaves:
            if isinstance(leaf, list):
                flat.extend(leaf)
            else:
                flat.append(leaf)
        return flat

    def _moves(self, concrete: list[int], binding: list[int], node: torch.fx.Node) -> None:
        if len(concrete) != len(binding):
            raise EmitError(f"branch returns {len(concrete)} values, expected {len(binding)}")
        for src, dst in zip(concrete, binding, strict=True):
            if src != dst:
                self._emit(MoveCall(move_from=src, move_to=dst), node)

    def _cond(self, node: torch.fx.Node, gm: Any) -> list[int]:
        pred, true_gm, false_gm, operands = node.args
        results = self._result_values(node)
        pred_v = self._arg(pred, "scalar")
        bindings = [self._arg(o, None) for o in operands]
        to_else = JumpFalseCall(cond_value_index=pred_v, destination_instruction=-1)
        self._emit(to_else, node)
        self._moves(self._subgraph(self._node_value(true_gm), bindings), results, node)
        to_end = JumpFalseCall(cond_value_index=self._false(), destination_instruction=-1)
        self._emit(to_end, node)
        to_else.destination_instruction = len(self.instructions)
        self._moves(self._subgraph(self._node_value(false_gm), bindings), results, node)
        to_end.destination_instruction = len(self.instructions)
        return results

    def _map(self, node: torch.fx.Node, gm: Any) -> list[int]:
        f, xs, pos_args = node.args
        body = self._node_value(f)
        specs = node.meta.get("spec")
        if not isinstance(specs, (list, tuple)):
            specs = [specs]
        # et_copy_index grows the stacked results one row per iteration.
        results = []
        for spec in specs:
            index = self._new(
                make_tensor(
                    spec,
                    allocation=spec_allocation(spec),
                    extra=spec_extra_info(spec),
                    dynamism=TensorShapeDynamism.DYNAMIC_BOUND,
                )
            )
            if spec.mem_id is not None and spec.mem_offset is not None:
                self._note_planned(spec)
            self._spec_values[id(spec)] = index
            results.append(index)
        xs_v = [self._arg(x, "tensor") for x in xs]
        extra = [self._arg(a, None) for a in pos_args]
        placeholders = [n for n in body.graph.nodes if n.op == "placeholder"]
        slices = [self._spec_value(placeholders[i].meta["spec"]) for i in range(len(xs_v))]

        zero = self._int(0)
        counter = self._new(Int(0))
        count = self._new(Int(0))
        self._kernel("aten::sym_size", "int", [xs_v[0], zero, count], node)
        loop_start = len(self.instructions)
        for x, s in zip(xs_v, slices, strict=True):
            self._kernel("aten::select_copy", "int_out", [x, zero, counter, s, s], node)
        outs = self._subgraph(body, [*slices, *extra])
        if len(outs) != len(results):
            raise EmitError(f"map body returns {len(outs)} values, expected {len(results)}")
        for result, out in zip(results, outs, strict=True):
            self._kernel("executorch_prim::et_copy_index", "tensor", [result, out, counter], node)
        self._kernel("executorch_prim::add", "Scalar", [counter, self._int(1), counter], node)
        done = self._new(Bool(False))
        self._kernel("executorch_prim::eq", "Scalar", [counter, count, done], node)
        self._emit(JumpFalseCall(cond_value_index=done, destination_instruction=loop_start), node)
        # Reset the counter for the next execution.
        self._kernel("executorch_prim::sub", "Scalar", [counter, count, counter], node)
        return results

    def _while(self, node: torch.fx.Node, gm: Any) -> list[int]:
        cond_fn, body_fn, carried, additional = node.args
        cond_gm = self._node_value(cond_fn)
        body_gm = self._node_value(body_fn)
        state = self._result_values(node)
        if len(state) != len(carried):
            raise EmitError(
                f"while_loop has {len(carried)} carried values but {len(state)} results"
            )
        init = [self._arg(c, None) for c in carried]
        extra = [self._arg(a, None) for a in additional]
        for src, dst in zip(init, state, strict=True):
            self._copy(src, dst, node)
        loop_start = len(self.instructions)
        cond_out = self._subgraph(cond_gm, [*state, *extra])
        if len(cond_out) != 1:
            raise EmitError(f"while_loop cond_fn returns {len(cond_out)} values, expected 1")
        exit_jump = JumpFalseCall(cond_value_index=cond_out[0], destination_instruction=-1)
        self._emit(exit_jump, node)
        body_out = self._subgraph(body_gm, [*state, *extra])
        if len(body_out) != len(state):
            raise EmitError(
                f"while_loop body_fn returns {len(body_out)} values, expected {len(state)}"
            )
        self._parallel_copy(list(zip(body_out, state, strict=True)), node)
        self._emit(
            JumpFalseCall(cond_value_index=self._false(), destination_instruction=loop_start), node
        )
        exit_jump.destination_instruction = len(self.instructions)
        return state
