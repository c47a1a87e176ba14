"""Each instruction of a chain as one line of generated Python, from the lowering's decisions.

A value is named in a line as cheaply as what is known at load allows: a constant or an
array that is the same at every run is a bound name, anything else is read from the value
list ``v``. The lines of instructions that are compiled calls on bound arrays are also
recorded as steps (:mod:`pyexecutorch.runtime.step_recorder`) for a whole-method
function. See :mod:`pyexecutorch.runtime.lowering` for the decisions themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.jit import deferral
from pyexecutorch.kernels.registry import Const, Inline
from pyexecutorch.runtime.codegen import Line, Namespace, literal
from pyexecutorch.runtime.errors import InvalidProgramError
from pyexecutorch.runtime.fast_paths import FastPaths, PendingFastPath, whole_form_step
from pyexecutorch.runtime.fusion import (
    HALF,
    FusedCall,
    flat_views,
    fused_live,
    loop_array,
    same_layout,
)
from pyexecutorch.runtime.method_facts import MethodFacts
from pyexecutorch.runtime.resolution import delegate_runner
from pyexecutorch.runtime.step_recorder import EntryPoint, StepRecorder, WholeFunction
from pyexecutorch.runtime.views import identity
from pyexecutorch.runtime.whole_method import (
    Step,
    copy_source_position,
    flat_copy_step,
    view_copy_step,
)
from pyexecutorch.schema.program import (
    DelegateCall,
    FreeCall,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Null,
    OptionalTensorList,
    Tensor,
    TensorList,
)

if TYPE_CHECKING:
    from pyexecutorch.runtime.lowering import Analysis


class ChainWriter:
    """The lines of one lowering attempt's chains (see the module docstring)."""

    def __init__(
        self, facts: MethodFacts, analysis: Analysis, fast_paths: FastPaths, *, traced: bool
    ) -> None:
        self.facts = facts
        self.analysis = analysis
        self.fast_paths = fast_paths
        self.traced = traced
        self.ns = Namespace()
        # Views of arrays that are the same every run, made once here (load-time views).
        self.resolved: dict[int, np.ndarray] = {}
        self.load_time_views: list[int] = []
        # fused loops' entry points, bound as placeholders until the lines are final
        self.entry_points: list[EntryPoint] = []
        self.recorder = StepRecorder(
            facts, analysis.written, analysis.fixed, self.bound_array, self.out_expr
        )
        self.whole: WholeFunction | None = None  # set when a chain became one function

    # ------------------------------------------------------------------ names

    def bound_array(self, j: int) -> np.ndarray | None:
        """The array value ``j`` is at every run, when it is known now."""
        if j in self.resolved:
            return self.resolved[j]
        if j in self.facts.constant_values:
            return self.facts.values[j]
        if j in self.analysis.fixed:
            return self.facts.capacity[j]
        return None

    def expr(self, j: int) -> str:
        """Source reading value ``j`` as an argument."""
        facts, ns = self.facts, self.ns
        evalues = facts.plan.values
        val = evalues[j].val
        if isinstance(val, Tensor):
            if j in self.resolved:
                return ns.bind(self.resolved[j], "C")
            if j in facts.constant_values:
                return ns.bind(facts.values[j], "T")
            if j in self.analysis.fixed:
                return ns.bind(facts.capacity[j], "C")
            return f"v[{j}]"
        written = self.analysis.written
        if isinstance(val, IntList):
            if any(i in written for i in val.items):
                return "(" + "".join(f"{self.expr(i)}, " for i in val.items) + ")"
            return literal(facts.values[j], ns)
        if isinstance(val, (TensorList, OptionalTensorList)):
            parts = (
                "None" if i < 0 or isinstance(evalues[i].val, Null) else self.expr(i)
                for i in val.items
            )
            return "[" + ", ".join(parts) + "]"
        if j in written:
            return f"v[{j}]"
        return literal(facts.values[j], ns)

    def out_expr(self, j: int) -> str:
        """Source naming output ``j``'s planned storage."""
        val = self.facts.plan.values[j].val
        capacity = self.facts.capacity
        if isinstance(val, Tensor):
            return self.ns.bind(capacity[j], "C")
        if isinstance(val, TensorList):
            return "[" + ", ".join(self.ns.bind(capacity[i], "C") for i in val.items) + "]"
        return f"v[{j}]"

    def store(self, j: int) -> str:
        """Source storing a call's result ``_r`` as value ``j`` (and a list's items)."""
        val = self.facts.plan.values[j].val
        if isinstance(val, TensorList):
            items = val.items
            targets = "".join(f"v[{i}], " for i in items)
            return f"v[{j}] = _r; {targets or '_'} = _r" if items else f"v[{j}] = _r"
        return f"v[{j}] = _r"

    # ------------------------------------------------------------------ lines

    def chain_lines(self, c: int, whole_candidate: bool) -> tuple[list[Line], dict]:
        """Chain ``c``'s lines and its jumps (pc -> (condition source, destination))."""
        facts = self.facts
        evalues = facts.plan.values
        lines: list[Line] = []
        jumps: dict[int, tuple[str, int]] = {}
        for pc, instr in enumerate(facts.plan.chains[c].instructions):
            a = instr.instr_args
            if c == 0 and pc in self.analysis.folded:
                continue
            if isinstance(a, KernelCall):
                source = self._kernel_line(c, pc, a, whole_candidate)
                if source is not None:
                    lines.append(Line(source, pc))
            elif isinstance(a, DelegateCall):
                runner = delegate_runner(facts.delegates, a)
                lines.append(Line(f"{self.ns.bind(runner, 'D')}(v)", pc))
                if whole_candidate:
                    self.recorder.delegate(pc, a)
            elif isinstance(a, MoveCall):
                lines.append(Line(f"v[{a.move_to}] = v[{a.move_from}]", pc))
            elif isinstance(a, FreeCall):
                j = a.value_index
                if isinstance(evalues[j].val, Tensor):
                    lines.append(Line(f"v[{j}] = {self.ns.bind(facts.capacity[j], 'C')}", pc))
            elif isinstance(a, JumpFalseCall):
                jumps[pc] = (f"v[{a.cond_value_index}]", a.destination_instruction)
            else:
                raise InvalidProgramError(
                    f"method '{facts.name}': chain {c} instruction {pc}: unknown instruction"
                )
        return lines, jumps

    def _kernel_line(self, c: int, pc: int, a: KernelCall, whole_candidate: bool) -> str | None:
        """The line of a kernel call as decided (None: it needs none)."""
        k = self.facts.kernels[a.op_index]
        args, outs = self.facts.kernel_layout(k, a)
        kind, fast = self.analysis.decisions[c, pc]
        if kind == "view":
            return self._view_line(pc, args, outs, fast)
        if kind == "inline":
            source = self._inline_call(fast, args, len(args) - len(outs))
            if whole_candidate:
                self.recorder.kernel(pc, k, args, outs, fast)
            return source
        if kind == "copy":
            return self._plain_copy(k.name, args, outs[0], pc)
        if kind == "skip":
            return None  # computed by the fused loop of a later instruction
        if kind == "fused":
            return self._fused_call(fast, pc)
        source = self._call(fast, args, outs)
        if whole_candidate and kind != "refused":
            self.recorder.kernel(pc, k, args, outs, fast)
        return source

    def _call(self, fast: Any, args: list[int], outs: list[int]) -> str:
        """A call of the kernel (or its form) and the stores of its results."""
        fixed = self.analysis.fixed
        n_in = len(args) - len(outs)
        fn = self.ns.bind(fast, "k")
        call_args = [self.expr(j) for j in args[:n_in]] + [self.out_expr(j) for j in outs]
        call = f"{fn}({', '.join(call_args)})"
        if not outs or all(j in fixed for j in outs):
            return call  # nothing to store: its outputs are their planned arrays
        if len(outs) == 1:
            return f"_r = {call}; {self.store(outs[0])}"
        parts = [f"_r = {call}"]
        for n, j in enumerate(outs):
            parts.append(f"_r{n} = _r[{n}]")
            parts.append(self.store(j).replace("_r", f"_r{n}"))
        return "; ".join(parts)

    def _view_line(self, pc: int, args: list[int], outs: list[int], fast: Any) -> str | None:
        """A copy that is a view of its input: made now when its source is the same array
        every run (then the instruction costs nothing at run time), else each run."""
        base = None if self.traced else self.bound_array(args[0])
        if base is not None:
            view = base if fast is identity else fast(base)
            self.resolved[outs[0]] = self.facts.values[outs[0]] = view
            self.load_time_views.append(pc)
            return None
        source = self.expr(args[0])
        bound = source if fast is identity else f"{self.ns.bind(fast, 'w')}({source})"
        return f"v[{outs[0]}] = {bound}"

    def _inline_call(self, fast: Inline, args: list[int], n_in: int) -> str:
        def part(p: int | Const) -> str:
            if isinstance(p, Const):
                return literal(p.value, self.ns)
            i = p % len(args)
            return self.expr(args[i]) if i < n_in else self.out_expr(args[i])

        out = args[fast.out % len(args)]
        parts = [part(p) for p in fast.parts]
        if fast.keyword_out:
            parts[-1] = f"out={parts[-1]}"
        call = f"{self.ns.bind(fast.fn, 'f')}({', '.join(parts)})"
        return call if out in self.analysis.fixed else f"{call}; v[{out}] = {self.out_expr(out)}"

    def _fused_call(self, call: FusedCall, pc: int) -> str:
        """A fused loop's call: on bound arrays, their loop for these exact arrays."""
        ns = self.ns
        exprs = [self.expr(j) for j in call.inputs] + [self.out_expr(j) for j in call.outputs]
        bound = all(e[0] in "TC" for e in exprs)
        if not bound:
            # some argument is read live: dispatch per call
            fn = fused_live(call.function(flat=False), call.dtype)
        else:
            arrays = [self.bound_array(j) for j in call.inputs]
            arrays += [self.facts.capacity[j] for j in call.outputs]
            dispatcher, arrays = self._fused_arrays(call, arrays)
            exprs = [ns.bind(a, "C") for a in arrays]
            # Its entry point is loaded only if the line is kept (not when the
            # method becomes whole): reading machine code back costs milliseconds.
            fn = EntryPoint(dispatcher, tuple(arrays))
            self.entry_points.append(fn)
        line = f"{ns.bind(fn, 'F')}({', '.join(exprs)})"
        stores = self.recorder.stores(call.outputs)
        if bound:
            self.recorder.record(pc, Step(dispatcher, tuple(arrays)), stores)
        return "; ".join([line, *stores])

    @staticmethod
    def _fused_arrays(call: FusedCall, arrays: list[np.ndarray]) -> tuple[Any, list[np.ndarray]]:
        """(dispatcher, arrays) of a fused loop on bound arrays: their types are known now,
        and dense same-shape arrays run as one flat loop over 1-D views."""
        if any(a.dtype == HALF for a in arrays):  # the loop takes float16 as its bits
            arrays = [loop_array(a) for a in arrays]
        flats = flat_views(arrays) if call.same_shape else None
        flat = flats is not None
        aliases: dict[int, int] = {}
        if flat:
            arrays = flats
        elif isinstance(call, FusedCall) and any(
            a.ndim == 4 and not a.flags.c_contiguous for a in arrays
        ):
            # channels-last (runtime.layout): the loop nest in memory order
            moved = call.in_memory_order(arrays)
            if moved is not None:
                # the reordered loop indexes the transposed views, so the line
                # must pass those views, not the arrays in their logical order
                call, arrays = moved
        n_in = len(call.inputs)
        for k, a in enumerate(arrays[:n_in]):
            for o, b in enumerate(arrays[n_in:]):
                if a.ctypes.data == b.ctypes.data and same_layout(a, b):
                    aliases[k] = o  # the planner gave this output the input's memory
        if flat or aliases:
            arrays = [a for k, a in enumerate(arrays) if k not in aliases]
        return call.lazy_function(flat, aliases), arrays

    def _plain_copy(self, name: str, args: list[int], out: int, pc: int) -> str:
        """A copy (or a plain cast, see lowering._plain_cast) into its planned storage
        (numpy; a compiled step once the method is whole)."""
        ns = self.ns
        source = args[copy_source_position(name)]
        dst = self.facts.capacity[out]
        src = self.bound_array(source)
        stores = [] if out in self.analysis.fixed else [f"v[{out}] = {self.out_expr(out)}"]
        copy = ns.bind(np.copyto, "f")
        if src is not None and src.flags.c_contiguous and src.dtype != dst.dtype:
            line = f"{copy}({self.out_expr(out)}, {ns.bind(src.reshape(dst.shape), 'C')})"
            # the cast's step: the operator's compiled form inside a whole method
            values = [self.bound_array(j) if j == source else self.facts.values[j] for j in args]
            values[-1] = dst
            self.recorder.record(pc, lambda: whole_form_step(name, values), stores)
        elif src is not None and src.flags.c_contiguous:
            # the same bytes every run: their view in the destination's shape, made now
            line = f"{copy}({self.out_expr(out)}, {ns.bind(src.reshape(dst.shape), 'C')})"
            self.recorder.record(pc, lambda: flat_copy_step(src, dst), stores)
        else:
            line = f"{copy}({self.out_expr(out)}, {self.expr(source)}.reshape({dst.shape!r}))"
            view = None if src is None else src.reshape(dst.shape)
            if view is not None and np.may_share_memory(view, src):
                # a strided source numpy reshapes as a view (a squeeze): copied as it is
                self.recorder.record(pc, lambda: view_copy_step(view, dst), stores)
        return "; ".join([line, *stores])

    def bind_pending(self, pending: list[Any]) -> None:
        """Load what the kept lines call: fused loops' entry points, compiled forms'
        deferred functions and numpy fast paths made only when a line calls them."""
        names = self.ns.names
        for placeholder in self.entry_points:
            names[self.ns.bind(placeholder)] = placeholder.load()
        deferral.bind_entry_points(names.values(), pending)
        for name, held in list(names.items()):  # see OperatorFacts.step_only_when_whole
            if type(held) is PendingFastPath:
                names[name] = held.load()
        self.entry_points.clear()
