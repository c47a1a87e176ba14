"""Emission of one method: an execution-dialect graph to an ``ExecutionPlan``.

The emitter walks the graph once, in node order. Each node's result is kept
in an environment as a value index (or a list of them for multi-output
nodes); arguments are converted to values on the way, with constants and
lists deduplicated through a dictionary keyed by their content. Values that
the runtime writes (inputs, outputs of symbolic-int ops, loop counters) are
never shared.

Control flow is inlined into the method's single chain:

* ``cond``: ``JumpFalse(pred → else)``, then-branch, moves into the
  results, ``JumpFalse(False → end)``, else-branch, moves (the official
  layout).
* ``map_impl``: a counted loop around ``select_copy`` / body /
  ``et_copy_index`` (the official layout).
* ``while_loop``: the initial values are copied into the loop state; then
  cond-graph, ``JumpFalse(cond → end)``, body, copies of the body's results
  into the state, ``JumpFalse(False → cond)``. Tensors are copied with
  ``aten::clone.out`` rather than rebound with ``MoveCall``, because a
  move makes the state alias the body's output buffer, which the next
  iteration overwrites while still reading the state. Non-tensor state uses
  ``MoveCall``. The copies behave as one parallel assignment; a body that
  permutes its state values is handled by rebinding them with ``MoveCall``.

Memory planning must keep a ``while_loop``'s results (the loop state) apart
from every tensor of its cond and body graphs and from its inputs, since
the state is live for the whole loop.
"""

from __future__ import annotations

import copy
import math
import operator
from typing import Any

import torch
import torch.fx
from torch.export.exported_program import ExportedProgram, OutputKind

from pyexecutorch.exir.backend.compile_spec_schema import spec_bytes
from pyexecutorch.exir.emit._control_flow import ControlFlowEmitter
from pyexecutorch.exir.emit._convert import (
    LAYOUT_CODE,
    MEMORY_FORMAT_CODE,
    EmitError,
    TensorFromTensor,
    container_string,
    empty_tensor,
    frames_of,
    is_external,
    is_tensor_spec,
    make_tensor,
    scalar_type,
    source_line,
    spec_allocation,
    spec_dim_order,
    spec_extra_info,
    tensor_bytes,
)
from pyexecutorch.exir.emit._operators import IGNORED_OPS, PY_SYM_OPS, OperatorInfo, target_name
from pyexecutorch.exir.emit._program_state import ProgramState
from pyexecutorch.schema.flat_tensor_schema import TensorLayout
from pyexecutorch.schema.program import (
    BackendDelegate,
    Bool,
    BoolList,
    Chain,
    CompileSpec,
    ContainerMetadata,
    DelegateCall,
    Double,
    DoubleList,
    EValue,
    ExecutionPlan,
    ExtraTensorInfo,
    FrameList,
    FreeCall,
    Instruction,
    Int,
    IntList,
    KernelCall,
    MoveCall,
    NonConstBufferDevice,
    Null,
    Operator,
    OptionalTensorList,
    String,
    Tensor,
    TensorDataLocation,
    TensorList,
    TensorShapeDynamism,
)

MEMORY_MODULES = frozenset({"pyexecutorch.exir.memory", "executorch.exir.memory"})
DEFAULT_EXTERNAL_TAG = "_default_external_constant"


def _flatten(arg: Any, out: list[Any]) -> list[Any]:
    if isinstance(arg, (list, tuple)):
        for a in arg:
            _flatten(a, out)
    elif isinstance(arg, dict):
        for a in arg.values():
            _flatten(a, out)
    else:
        out.append(arg)
    return out


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class MethodEmitter(ControlFlowEmitter):
    """Emits one method into values, operators, delegates and one chain of instructions."""

    def __init__(self, name: str, state: ProgramState, config: Any) -> None:
        self.name = name
        self.state = state
        self.emit_stacktrace = bool(getattr(config, "emit_stacktrace", False))
        self.emit_mutable_buffer_names = bool(getattr(config, "emit_mutable_buffer_names", False))
        self.external_constants = getattr(config, "external_constants", False)
        self.external_mutable_weights = getattr(config, "external_mutable_weights", False)

        self.values: list[EValue] = []
        self._const_keys: dict[tuple, int] = {}
        self.operators: list[Operator] = []
        self._op_index: dict[tuple[str, str], int] = {}
        self.delegates: list[BackendDelegate] = []
        self.instructions: list[Instruction] = []
        self.frames: list[FrameList] | None = [] if self.emit_stacktrace else None

        self._spec_values: dict[int, int] = {}
        self._attr_values: dict[int, int] = {}
        self._handlers: dict[Any, Any] = {}
        self._planned_end: dict[int, int] = {}

        self.debug_handle_map: dict[int, Any] = {}
        self.delegate_map: dict[int, dict[str, Any]] = {}
        self.num_outs_map: dict[int, int] = {}

    # ------------------------------------------------------------------
    # Values

    def _new(self, val: Any) -> int:
        self.values.append(EValue(val))
        return len(self.values) - 1

    def _const(self, key: tuple, val: Any) -> int:
        index = self._const_keys.get(key)
        if index is None:
            index = self._const_keys[key] = self._new(val)
        return index

    def _int(self, v: int) -> int:
        return self._const(("i", v), Int(v))

    def _false(self) -> int:
        return self._const(("b", False), Bool(False))

    def _null(self) -> int:
        return self._const(("n",), Null())

    def _scalar(self, v: Any) -> int:
        """A constant non-tensor argument."""
        if v is None:
            return self._null()
        if isinstance(v, bool):
            return self._const(("b", v), Bool(v))
        if isinstance(v, int):
            return self._int(v)
        if isinstance(v, float):
            return self._const(("d", repr(v)), Double(v))
        if isinstance(v, str):
            return self._const(("s", v), String(v))
        if isinstance(v, torch.dtype):
            return self._int(int(scalar_type(v)))
        if isinstance(v, torch.layout):
            if v not in LAYOUT_CODE:
                raise EmitError(f"layout {v} is not supported")
            return self._int(LAYOUT_CODE[v])
        if isinstance(v, torch.memory_format):
            if v not in MEMORY_FORMAT_CODE:
                raise EmitError(
                    f"memory format {v} is not supported; only contiguous_format and preserve_format are"
                )
            return self._int(MEMORY_FORMAT_CODE[v])
        if isinstance(v, torch.Tensor):
            return self._const_tensor(v, None)
        if isinstance(v, (list, tuple)):
            return self._list(v, self._infer_list_kind(v))
        raise EmitError(f"unsupported constant argument {v!r} of type {type(v).__name__}")

    def _new_scalar(self, val: Any, ret_kind: str = "IntType") -> int:
        """A fresh value that the runtime overwrites (a symbolic op's result)."""
        if isinstance(val, (torch.SymBool, bool)) or (val is None and ret_kind == "BoolType"):
            return self._new(Bool(False))
        if isinstance(val, (torch.SymFloat, float)) or (val is None and ret_kind == "FloatType"):
            return self._new(Double(0.0))
        return self._new(Int(0))

    def _is_tensor_value(self, index: int) -> bool:
        return isinstance(self.values[index].val, Tensor)

    def _infer_list_kind(self, v: Any) -> str:
        if not v:
            return "int_list"
        first = v[0]
        if isinstance(first, torch.fx.Node):
            e = self._env.get(first)
            if isinstance(e, int) and self._is_tensor_value(e):
                return "tensor_list"
            return "int_list"
        if first is None:
            return "opt_tensor_list"
        if isinstance(first, bool):
            return "bool_list"
        if isinstance(first, int):
            return "int_list"
        if isinstance(first, float):
            return "float_list"
        raise EmitError(f"cannot tell the element type of list argument {v!r}")

    def _list(self, v: Any, kind: str) -> int:
        if kind == "int_list":
            items = tuple(self._int_item(x) for x in v)
            return self._const(("il", items), IntList(list(items)))
        if kind == "tensor_list":
            items = tuple(self._arg(x, "tensor") for x in v)
            return self._const(("tl", items), TensorList(list(items)))
        if kind == "opt_tensor_list":
            items = tuple(-1 if x is None else self._arg(x, "tensor") for x in v)
            return self._const(("ot", items), OptionalTensorList(list(items)))
        if kind == "float_list":
            floats = [float(x) for x in v]
            return self._const(("dl", tuple(repr(x) for x in floats)), DoubleList(floats))
        if kind == "bool_list":
            bools = [bool(x) for x in v]
            return self._const(("bl", tuple(bools)), BoolList(bools))
        return self._list(v, self._infer_list_kind(v))

    def _int_item(self, x: Any) -> int:
        if isinstance(x, torch.fx.Node):
            return self._node_value(x)
        if isinstance(x, bool) or not isinstance(x, int):
            raise EmitError(f"expected an int in an int list, got {x!r}")
        return self._int(x)

    def _node_value(self, node: torch.fx.Node) -> Any:
        try:
            return self._env[node]
        except KeyError:
            raise EmitError(f"argument {node.name} was not emitted before its use") from None

    def _arg(self, v: Any, kind: str | None) -> int:
        """The value index of argument ``v`` of schema kind ``kind``."""
        if isinstance(v, torch.fx.Node):
            e = self._node_value(v)
            if isinstance(e, int):
                return e
            if isinstance(e, list):
                items = tuple(e)
                return self._const(("tl", items), TensorList(list(items)))
            raise EmitError(f"argument {v.name} is a {type(e).__name__}, not a value")
        if kind is None or kind == "scalar":
            return self._scalar(v)
        if kind in ("tensor", "opt_tensor"):
            if v is None:
                return self._new(empty_tensor()) if kind == "tensor" else self._null()
            if isinstance(v, torch.Tensor):
                return self._const_tensor(v, None)
            raise EmitError(f"expected a tensor argument, got {v!r}")
        if v is None:
            return self._null()
        return self._list(v, kind)

    # -- tensors -----------------------------------------------------------

    def _spec_value(self, spec: Any, dynamism: TensorShapeDynamism | None = None) -> int:
        """The value of a tensor spec; one value per spec object."""
        key = id(spec)
        index = self._spec_values.get(key)
        if index is not None:
            return index
        if not is_tensor_spec(spec):
            raise EmitError(f"expected a tensor spec, got {spec!r}")
        if getattr(spec, "const", False) and getattr(spec, "storage", None) is not None:
            index = self._const_tensor(spec.storage, spec)
        else:
            allocation = spec_allocation(spec)
            if allocation is not None:
                self._note_planned(spec)
            index = self._new(
                make_tensor(
                    spec, allocation=allocation, extra=spec_extra_info(spec), dynamism=dynamism
                )
            )
        self._spec_values[key] = index
        return index

    def _note_planned(self, spec: Any) -> None:
        size = getattr(spec, "allocated_memory", None)
        if not size:
            size = (
                math.prod(int(s) for s in spec.shape)
                * torch.empty((), dtype=spec.dtype).element_size()
            )
        end = int(spec.mem_offset) + int(size)
        mem_id = int(spec.mem_id)
        if end > self._planned_end.get(mem_id, 0):
            self._planned_end[mem_id] = end

    def _const_tensor(
        self,
        t: Any,
        spec: Any,
        external: tuple[str, str] | None = None,
        extra: ExtraTensorInfo | None = None,
    ) -> int:
        """A constant tensor value: its bytes go to the constant pool (or to an external file)."""
        if spec is None:
            if not isinstance(t, torch.Tensor):
                raise EmitError(f"constant of type {type(t).__name__} has no spec")
            spec = TensorFromTensor(t)
        dim_order = spec_dim_order(spec)
        data = tensor_bytes(t, dim_order)
        expected = (
            math.prod(int(s) for s in spec.shape) * torch.empty((), dtype=spec.dtype).element_size()
        )
        if data.size != expected:
            raise EmitError(
                f"constant {tuple(spec.shape)} {spec.dtype} has {data.size} bytes of data, expected {expected}"
            )
        if external is not None:
            tag, fqn = external
            tensor = make_tensor(
                spec,
                extra=ExtraTensorInfo(
                    fully_qualified_name=fqn, location=TensorDataLocation.EXTERNAL
                ),
            )
            layout = TensorLayout(tensor.scalar_type, list(tensor.sizes), list(tensor.dim_order))
            tensor.extra_tensor_info.fully_qualified_name = self.state.add_external(
                tag, fqn, data, layout
            )
            return self._new(tensor)
        buffer_index = self.state.add_constant(data)
        return self._new(make_tensor(spec, data_buffer_idx=buffer_index, extra=extra))

    # ------------------------------------------------------------------
    # Instructions

    def _emit(self, args: Any, node: torch.fx.Node | None) -> int:
        self.instructions.append(Instruction(args))
        if self.frames is not None:
            self.frames.append(
                frames_of(node.meta.get("stack_trace") if node is not None else None)
            )
        return len(self.instructions) - 1

    def _operator(self, name: str, overload: str) -> int:
        key = (name, overload)
        index = self._op_index.get(key)
        if index is None:
            index = self._op_index[key] = len(self.operators)
            self.operators.append(Operator(name=name, overload=overload))
        return index

    def _kernel(self, name: str, overload: str, args: list[int], node: torch.fx.Node | None) -> int:
        return self._emit(KernelCall(op_index=self._operator(name, overload), args=args), node)

    def _copy(self, src: int, dst: int, node: torch.fx.Node) -> None:
        if src == dst:
            return
        if self._is_tensor_value(dst):
            # clone.out resizes its output, so dynamic-shape state works too.
            self._kernel("aten::clone", "out", [src, self._null(), dst, dst], node)
        else:
            self._emit(MoveCall(move_from=src, move_to=dst), node)

    def _parallel_copy(self, pairs: list[tuple[int, int]], node: torch.fx.Node) -> None:
        """Copy each ``src`` into its ``dst`` as if all at once (no copy clobbers a pending source)."""
        pending = [(s, d) for s, d in pairs if s != d]
        while pending:
            sources = {s for s, _ in pending}
            ready = [(s, d) for s, d in pending if d not in sources]
            if ready:
                for s, d in ready:
                    self._copy(s, d, node)
                done = set(ready)
                pending = [p for p in pending if p not in done]
                continue
            # Only cycles are left: the body permutes its state values (returns (b, a)
            # for (a, b)). Permute the values themselves with MoveCalls through a
            # temporary slot; no data moves, each state value just takes another's buffer.
            source_of = {d: s for s, d in pending}
            first = pending[0][1]
            temp = self._new(copy.copy(self.values[first].val))
            self._emit(MoveCall(move_from=first, move_to=temp), node)
            dst = first
            while True:
                src = source_of.pop(dst)
                self._emit(MoveCall(move_from=temp if src == first else src, move_to=dst), node)
                if src == first:
                    break
                dst = src
            pending = [(s, d) for d, s in source_of.items()]

    # ------------------------------------------------------------------
    # Graph walk

    def emit_method(self, ep: ExportedProgram) -> ExecutionPlan:
        gm = ep.graph_module
        self._ep = ep
        self._inputs: list[int] = []
        sig = ep.graph_signature
        self._params = sig.inputs_to_parameters
        self._buffers = sig.inputs_to_buffers
        self._lifted = sig.inputs_to_lifted_tensor_constants
        # Weights the program trains (external_mutable_weights moves them to a .ptd).
        self._trained = {
            s.target for s in sig.output_specs if s.kind == OutputKind.GRADIENT_TO_PARAMETER
        }
        self._mutated = set(sig.buffers_to_mutate.values())
        out_leaves = self._walk(gm, self._top_placeholder)
        outputs = self._top_outputs(out_leaves, sig)

        sizes = gm.meta.get("non_const_buffer_sizes")
        if sizes is None:
            top = max(self._planned_end, default=0)
            sizes = (
                [self._planned_end.get(i, 0) for i in range(top + 1)] if self._planned_end else [0]
            )
        devices = gm.meta.get("non_const_buffer_device")
        if devices is not None:
            devices = [
                NonConstBufferDevice(
                    int(d.buffer_idx), int(d.device_type), int(getattr(d, "device_index", 0))
                )
                for d in devices
            ]
        call_spec = ep.call_spec
        return ExecutionPlan(
            name=self.name,
            container_meta_type=ContainerMetadata(
                container_string(call_spec.in_spec), container_string(call_spec.out_spec)
            ),
            values=self.values,
            inputs=self._inputs,
            outputs=outputs,
            chains=[
                Chain(inputs=[], outputs=[], instructions=self.instructions, stacktrace=self.frames)
            ],
            operators=self.operators,
            delegates=self.delegates,
            non_const_buffer_sizes=[int(s) for s in sizes],
            non_const_buffer_device=devices,
        )

    def _walk(self, gm: torch.fx.GraphModule, placeholder: Any) -> list[Any]:
        """Emit every node of ``gm``; return the leaves of its output, converted to values."""
        outer_env = getattr(self, "_env", None)
        self._env: dict[torch.fx.Node, Any] = {}
        env = self._env
        index = 0
        leaves: list[Any] = []
        node = None
        try:
            for node in gm.graph.nodes:
                op = node.op
                if op == "call_function":
                    handler = self._handlers.get(node.target)
                    if handler is None:
                        handler = self._handlers[node.target] = self._resolve(node.target)
                    env[node] = handler(node, gm)
                elif op == "placeholder":
                    env[node] = placeholder(node, index)
                    index += 1
                elif op == "get_attr":
                    env[node] = self._get_attr(gm, node)
                elif op == "output":
                    leaves = [self._output_leaf(x) for x in _flatten(node.args[0], [])]
                else:
                    raise EmitError(f"{op} nodes are not supported in execution graphs")
        except Exception as e:
            if getattr(e, "_emit_annotated", False) or node is None:
                raise
            where = source_line(node)
            target = node.target if node.op != "call_function" else target_name(node.target)
            err = EmitError(
                f"method {self.name!r}: cannot emit node {node.name} ({target})"
                + (f" from {where}" if where else "")
                + f": {e}"
            )
            err._emit_annotated = True  # type: ignore[attr-defined]
            raise err from e
        finally:
            self._env = outer_env  # type: ignore[assignment]
        return leaves

    def _output_leaf(self, x: Any) -> Any:
        if isinstance(x, torch.fx.Node):
            return self._node_value(x)
        if isinstance(x, str):
            raise EmitError(f"returning a string ({x!r}) is not supported")
        return self._scalar(x)

    def _resolve(self, target: Any) -> Any:
        if target is operator.getitem:
            return self._getitem
        if getattr(target, "__module__", None) in MEMORY_MODULES:
            name = getattr(target, "__name__", "")
            if name == "alloc":
                return self._alloc
            if name == "view":
                return self._view
            if name == "free":
                return self._free
        if target in PY_SYM_OPS:
            name = PY_SYM_OPS[target]
            return lambda node, gm: self._py_sym(name, node)
        if isinstance(target, torch._ops.HigherOrderOperator):
            hop = target.name()
            handler = {
                "cond": self._cond,
                "map_impl": self._map,
                "while_loop": self._while,
                "executorch_call_delegate": self._delegate,
            }.get(hop)
            if handler is None:
                raise EmitError(f"higher-order operator {hop} is not supported by the emitter")
            return handler
        if hasattr(target, "_schema"):
            info = OperatorInfo(target)
            if f"{info.name}" in IGNORED_OPS:
                return lambda node, gm: None
            return lambda node, gm: self._call_op(info, node)
        raise EmitError(f"unsupported call target {target_name(target)}")

    # -- node kinds ----------------------------------------------------------

    def _getitem(self, node: torch.fx.Node, gm: Any) -> Any:
        base, i = node.args
        value = self._node_value(base)
        if not isinstance(value, (list, tuple)):
            raise EmitError(f"getitem on {base.name}, which has a single value")
        return value[i]

    def _alloc(self, node: torch.fx.Node, gm: Any) -> Any:
        spec = node.meta["spec"]
        if isinstance(spec, (list, tuple)):
            return [self._spec_value(s) for s in spec]
        return self._spec_value(spec)

    def _view(self, node: torch.fx.Node, gm: Any) -> int:
        base, size = node.args[0], node.args[1]
        spec = node.meta["spec"]
        static = getattr(spec, "shape_dynamism", 0) is None or int(spec.shape_dynamism) == 0
        planned = spec.mem_id is not None and spec.mem_offset is not None
        constant = (
            bool(getattr(spec, "const", False)) and getattr(spec, "storage", None) is not None
        )
        if static and (planned or constant):
            # Planned at its base's address: no instruction needed.
            return self._spec_value(spec)
        base_v = self._arg(base, "tensor")
        size_v = self._list(size, "int_list")
        out = self._spec_value(spec)
        self._kernel("executorch_prim::et_view", "default", [base_v, size_v, out], node)
        return out

    def _free(self, node: torch.fx.Node, gm: Any) -> None:
        spec = node.args[0]
        if isinstance(spec, torch.fx.Node):
            index = self._arg(spec, "tensor")
        else:
            index = self._spec_values.get(id(spec))
            if index is None:
                raise EmitError("free of a tensor that was never allocated")
        self._emit(FreeCall(value_index=index), node)
        return None

    def _py_sym(self, name: str, node: torch.fx.Node) -> int:
        args = [self._arg(a, "scalar") for a in node.args]
        ret = self._new_scalar(node.meta.get("val"))
        index = self._kernel(f"executorch_prim::{name}", "Scalar", [*args, ret], node)
        self._debug_handle(index, node)
        return ret

    def _call_op(self, info: OperatorInfo, node: torch.fx.Node) -> Any:
        args = node.args
        kwargs = node.kwargs
        nargs = len(args)
        kernel_args: list[int] = []
        for i, (name, kwarg_only, kind, has_default, default) in enumerate(info.args):
            if name in kwargs:
                v = kwargs[name]
            elif not kwarg_only and i < nargs:
                v = args[i]
            elif has_default:
                v = default
            elif kind == "tensor":
                v = None
            else:
                raise EmitError(
                    f"{info.name}.{info.overload or 'default'}: argument {name!r} is missing"
                )
            kernel_args.append(self._arg(v, kind))

        ret = info.ret
        if ret == "out":
            positions = info.out_positions
            if len(positions) == 1:
                p = positions[0]
                name = info.args[p][0]
                v = kwargs[name] if name in kwargs else (args[p] if p < nargs else None)
                result = self._node_value(v) if isinstance(v, torch.fx.Node) else kernel_args[p]
                kernel_args.append(kernel_args[p])
            else:
                items = tuple(kernel_args[p] for p in positions)
                result = list(items)
                kernel_args.append(self._const(("tl", items), TensorList(list(items))))
        elif ret == "sym":
            result = self._new_scalar(node.meta.get("val"), info.ret_kinds[0])
            kernel_args.append(result)
        elif ret == "alias":
            slots = [kernel_args[p] for p in info.alias_positions]
            kernel_args.extend(slots)
            result = slots[0] if len(slots) == 1 else slots
        elif ret == "spec":
            spec = node.meta.get("spec")
            if isinstance(spec, (list, tuple)):
                result = [self._spec_value(s) for s in spec]
                kernel_args.extend(result)
            else:
                result = self._spec_value(spec)
                kernel_args.append(result)
        else:
            # An operator returning nothing (a custom op mutating its inputs) still
            # ends with a return slot, a None, as the official emitter writes it.
            result = None
            kernel_args.append(self._null())
        index = self._kernel(info.name, info.overload, kernel_args, node)
        self._debug_handle(index, node)
        return result

    def _debug_handle(self, index: int, node: torch.fx.Node) -> None:
        handle = node.meta.get("debug_handle")
        if handle is not None:
            self.debug_handle_map[index] = handle

    def _get_attr(self, gm: torch.fx.GraphModule, node: torch.fx.Node) -> Any:
        obj = _fetch_attr(gm, node.target)
        if isinstance(obj, torch.Tensor):
            index = self._attr_values.get(id(obj))
            if index is None:
                spec = node.meta.get("spec")
                use_spec = (
                    spec if is_tensor_spec(spec) and tuple(spec.shape) == tuple(obj.shape) else None
                )
                # A constant made by the compiler (folded weights) is external only
                # when its spec names the weight it stands for.
                fqn = getattr(use_spec, "fqn", None)
                tag = self._external_tag(node) if fqn else None
                external = (tag, fqn) if tag is not None else None
                index = self._attr_values[id(obj)] = self._const_tensor(
                    obj, use_spec, external=external
                )
            return index
        if isinstance(obj, torch._C.ScriptObject):
            raise EmitError(f"custom class object {node.target} is not supported")
        return obj

    # -- top level ------------------------------------------------------------

    def _top_placeholder(self, node: torch.fx.Node, position: int) -> int:
        spec = node.meta.get("spec")
        target = node.target
        if not is_tensor_spec(spec):
            # A scalar (or None) user input: its own value, written by the caller.
            val = node.meta.get("val", spec)
            if isinstance(val, torch.Tensor):
                raise EmitError(
                    f"input {target} has no tensor spec (node.meta['spec']); emit programs made by to_executorch"
                )
            if val is None:
                index = self._new(Null())
            elif isinstance(val, (bool, torch.SymBool)):
                index = self._new(Bool(bool(val) if isinstance(val, bool) else False))
            elif isinstance(val, (float, torch.SymFloat)):
                index = self._new(Double(float(val) if isinstance(val, float) else 0.0))
            elif isinstance(val, (int, torch.SymInt)):
                index = self._new(Int(int(val) if isinstance(val, int) else 0))
            elif isinstance(val, str):
                index = self._new(String(val))
            else:
                raise EmitError(f"input {target} of type {type(val).__name__} is not supported")
            self._inputs.append(index)
            return index

        fqn = self._params.get(target) or self._buffers.get(target) or self._lifted.get(target)
        if fqn is None:
            # A user input.
            index = self._spec_value(spec)
            self._inputs.append(index)
            return index

        ep = self._ep
        tensor = ep.state_dict.get(fqn)
        if tensor is None:
            tensor = ep.constants.get(fqn)
        is_buffer = target in self._buffers
        planned = spec.mem_id is not None and spec.mem_offset is not None
        mutable = is_buffer and (
            fqn in self._mutated or bool(getattr(spec, "is_mutable_buffer", False)) or planned
        )
        if tensor is None:
            tensor = getattr(spec, "storage", None)
            if tensor is None:
                raise EmitError(f"no data for {'buffer' if is_buffer else 'constant'} {fqn!r}")
        if isinstance(tensor, torch.nn.Parameter):
            tensor = tensor.data

        if mutable:
            return self._mutable_buffer(node, spec, fqn, tensor)

        # A lifted constant stays in the program unless it is a folded weight: its
        # spec names the weights it was computed from (const_fold.derived_name).
        lifted = self._lifted.get(target)
        derived = spec.fqn if lifted is not None and spec.fqn not in (None, lifted) else None
        tag = None if lifted is not None and derived is None else self._external_tag(node)
        if tag is None and self.external_mutable_weights and fqn in self._trained:
            tag = DEFAULT_EXTERNAL_TAG
        if tag is None and is_external(spec_extra_info(spec)):
            tag = DEFAULT_EXTERNAL_TAG
        name = derived or fqn
        index = self._const_tensor(tensor, spec, external=(tag, name) if tag is not None else None)
        self._spec_values[id(spec)] = index
        return index

    def _external_tag(self, node: torch.fx.Node) -> str | None:
        """The external file a constant goes to (``constant_tag`` or ``external_constants``), or None."""
        tag = node.meta.get("constant_tag")
        if tag is None and self.external_constants:
            tag = (
                self.external_constants(node)
                if callable(self.external_constants)
                else DEFAULT_EXTERNAL_TAG
            )
        return tag

    def _mutable_buffer(
        self, node: torch.fx.Node, spec: Any, fqn: str, tensor: torch.Tensor
    ) -> int:
        allocation = spec_allocation(spec)
        extra = spec_extra_info(spec)
        if self.emit_mutable_buffer_names:
            extra = ExtraTensorInfo(
                mutable_data_segments_idx=extra.mutable_data_segments_idx if extra else 0,
                fully_qualified_name=fqn,
                location=TensorDataLocation.SEGMENT,
            )
        elif allocation is None:
            raise EmitError(
                f"mutable buffer {fqn!r} has no planned memory; memory-plan mutable buffers or pass "
                "ExecutorchBackendConfig(emit_mutable_buffer_names=True)"
            )
        buffer_index = 0
        if allocation is not None:
            self._note_planned(spec)
            # The buffer's initial value goes to the mutable data segment, which the
            # runtime copies into the planned memory at load. An all-zero buffer
            # needs no data: planned memory starts zeroed.
            data = tensor_bytes(tensor, spec_dim_order(spec))
            if node.meta.get("et_init_buffer") or data.any():
                buffer_index = self.state.add_mutable_initial(data)
        index = self._new(
            make_tensor(spec, data_buffer_idx=buffer_index, allocation=allocation, extra=extra)
        )
        self._spec_values[id(spec)] = index
        return index

    def _top_outputs(self, leaves: list[Any], sig: Any) -> list[int]:
        specs = sig.output_specs
        flat: list[int] = []
        for leaf in leaves:
            if isinstance(leaf, list):
                flat.extend(leaf)
            else:
                flat.append(leaf)
        if len(specs) == len(flat):
            flat = [
                v for v, s in zip(flat, specs, strict=True) if s.kind != OutputKind.BUFFER_MUTATION
            ]
        return flat

    # -- control flow -----------------------------------------------------------

    def _result_values(self, node: torch.fx.Node) -> list[int]:
        """Values for a multi-output node's results, from its specs (or its getitem users' specs)."""
        specs = node.meta.get("spec")
        vals = node.meta.get("val")
        if specs is None:
            users = {
                u.args[1]: u.meta.get("spec") for u in node.users if u.target is operator.getitem
            }
            count = len(vals) if isinstance(vals, (list, tuple)) else max(users, default=-1) + 1
            specs = [users.get(i) for i in range(count)]
        if not isinstance(specs, (list, tuple)):
            specs = [specs]
        if not isinstance(vals, (list, tuple)):
            vals = [vals] * len(specs)
        out = []
        for spec, val in zip(specs, vals, strict=False):
            if is_tensor_spec(spec):
                out.append(self._spec_value(spec))
            else:
                out.append(self._new_scalar(val))
        return out

    # -- delegates ------------------------------------------------------------

    def _delegate(self, node: torch.fx.Node, gm: Any) -> Any:
        lowered = self._node_value(node.args[0])
        backend_id = str(lowered.backend_id)
        args = [self._arg(a, None) for a in node.args[1:]]
        spec = node.meta.get("spec")
        if isinstance(spec, (list, tuple)):
            result: Any = self._result_values(node)
            flat = list(result)
        else:
            val = node.meta.get("val")
            result = self._spec_value(spec) if is_tensor_spec(spec) else self._new_scalar(val)
            flat = [result]
        who = f"method {self.name!r}: delegate {node.name} ({backend_id})"
        reference = self.state.add_delegate_data(lowered.processed_bytes)
        store = getattr(lowered, "named_data_store_output", None)
        if store is None:
            store = getattr(lowered, "data_store_output", None)
        self.state.add_named_data(store, who)
        compile_specs = [
            CompileSpec(key=str(cs.key), value=spec_bytes(cs.value)) for cs in lowered.compile_specs
        ]
        self.delegates.append(
            BackendDelegate(id=backend_id, processed=reference, compile_specs=compile_specs)
        )
        index = self._emit(
            DelegateCall(delegate_index=len(self.delegates) - 1, args=[*args, *flat]), node
        )

        handles = []
        original = getattr(lowered, "original_module", None)
        if original is not None:
            graph = original.graph if hasattr(original, "graph") else original.graph_module.graph
            for n in graph.nodes:
                if n.op == "call_function" and n.meta.get("debug_handle") is not None:
                    handles.append(n.meta["debug_handle"])
        self.debug_handle_map[index] = handles
        self.num_outs_map[index] = len(flat)
        meta = getattr(lowered, "meta", None) or {}
        self.delegate_map[index] = {
            "name": backend_id,
            "delegate_map": meta.get("debug_handle_map", {}),
        }
        return result
