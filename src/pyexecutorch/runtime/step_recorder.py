"""Instructions as compiled steps, and a chain of them as one whole-method function.

While a chain's lines are written (:mod:`pyexecutorch.runtime.lowering`), each
instruction that can be one compiled call on arrays bound at load is recorded here as a
:class:`~pyexecutorch.runtime.whole_method.Step` (or a function making its steps, called
only when the whole chain is made of steps), with the stores that follow it. When every
line of a single straight-line chain has one, :meth:`StepRecorder.whole_lines` replaces
the lines by one call of the generated whole-method function.

A compiled form offers (:func:`pyexecutorch.kernels.registry.offer`, read by
``fast_path_of``) its call on the planned arrays as ``step`` (dispatcher, arguments[,
checked]), a list of pieces as ``pieces`` (split / cat), a view of its input as
``view_of_input``; ``with_epilogue`` marks a convolution whose run after it has no step
of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyexecutorch.jit import entry_points
from pyexecutorch.kernels.registry import (
    Kernel,
    KernelError,
    fast_path_of,
    get_cell_step,
    get_compiled_form,
)
from pyexecutorch.runtime.codegen import Line, Namespace
from pyexecutorch.runtime.fast_paths import staged_form_steps, whole_form_step
from pyexecutorch.runtime.method_facts import MethodFacts
from pyexecutorch.runtime.whole_method import (
    Step,
    compile_steps,
    copy_step,
    elementwise_step,
    product_step,
    same_elements,
    view_copy_step,
)
from pyexecutorch.schema.program import (
    DelegateCall,
    Int,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)

# A recorded instruction: its step (or the function making its steps), and its stores.
MadeSteps = Step | list[Step] | None
Recorded = tuple[Step | Callable[[], MadeSteps], list[str]]


def _same_bytes(a: Any, b: np.ndarray) -> bool:
    """Whether array ``a`` holds ``b``'s elements in ``b``'s bytes, in the same order."""
    return (
        isinstance(a, np.ndarray)
        and a.dtype == b.dtype
        and a.size == b.size
        and a.flags.c_contiguous
        and b.flags.c_contiguous
        and a.ctypes.data == b.ctypes.data
    )


@dataclass(frozen=True, eq=False)
class EntryPoint:
    """A fused loop's compiled function for bound arrays, loaded when a line keeps it."""

    dispatcher: Any
    arrays: tuple[np.ndarray, ...]

    def load(self) -> Any:
        return entry_points.entry_point(self.dispatcher, self.arrays)


def _checker(references: dict[int, Callable[[], Any]]) -> Callable[[int], None]:
    """What a whole method does with its function's result: -1 when every step ran; else
    the index of a checked step that wrote nothing, whose reference kernel raises."""

    def check(failed: int) -> None:
        if failed >= 0:
            references[failed]()
            raise KernelError(f"a compiled step (step {failed}) refused arguments the kernel took")

    return check


@dataclass(frozen=True)
class WholeFunction:
    """A chain compiled whole: the generated module and the arrays its function holds."""

    source: str
    arrays: Any


class StepRecorder:
    """The compiled steps of one chain's instructions (see the module docstring).

    ``bound_array(j)``: the array value ``j`` is at every run when known at load, else
    None; ``out_expr(j)``: the source naming an output's planned array; ``fixed``: the
    outputs that need no store."""

    def __init__(
        self,
        facts: MethodFacts,
        written: set[int],
        fixed: set[int],
        bound_array: Callable[[int], np.ndarray | None],
        out_expr: Callable[[int], str],
    ) -> None:
        self.facts = facts
        self.written = written
        self.fixed = fixed
        self.bound_array = bound_array
        self.out_expr = out_expr
        self.steps: dict[int, Recorded] = {}
        # int scalars computed at run time, each in its cell inside a whole method
        self.cells: dict[int, np.ndarray] = {}
        self.checks: dict[int, Callable[[], Any]] = {}  # checked steps' reference calls

    def stores(self, outs: Sequence[int]) -> list[str]:
        """The stores of the outputs that are not their planned array at every run."""
        return [f"v[{j}] = {self.out_expr(j)}" for j in outs if j not in self.fixed]

    def record(self, pc: int, step: Step | Callable[[], MadeSteps], stores: list[str]) -> None:
        self.steps[pc] = (step, stores)

    def _tensors_match(self, tensors: list[int]) -> bool:
        facts = self.facts
        return all(same_elements(self.bound_array(j), facts.load_time_value(j)) for j in tensors)

    def _rebound_step(self, k: Kernel, args: list[int], outs: list[int]) -> tuple | None:
        """(arguments, step) of ``k``'s compiled form made on the arrays bound at run
        time (views made at load), or None when some is read live or it offers none."""
        form = get_compiled_form(k.name)
        if form is None:
            return None
        evalues = self.facts.plan.values
        capacity = self.facts.capacity
        values: list[Any] = []
        for j in args:
            val = evalues[j].val
            if j in outs:
                if isinstance(val, TensorList):  # (a split's outputs)
                    items = [capacity.get(i) for i in val.items]
                    if any(a is None for a in items):
                        return None
                    values.append(items)
                elif j in capacity:
                    values.append(capacity[j])
                else:
                    return None
            elif isinstance(val, Tensor):
                values.append(self.bound_array(j))
                if values[-1] is None:
                    return None
            elif isinstance(val, (TensorList, OptionalTensorList)):
                items = [None if i < 0 else self.bound_array(i) for i in val.items]
                if any(a is None and i >= 0 for a, i in zip(items, val.items, strict=True)):
                    return None
                values.append(items)
            elif j in self.written:
                return None
            else:
                values.append(self.facts.values[j])
        try:
            fast = form(*values)
        except Exception:  # noqa: BLE001 - a form that cannot decide offers no step
            return None
        planned = fast_path_of(fast).step
        return None if planned is None else (values, planned)

    def kernel(self, pc: int, k: Kernel, args: list[int], outs: list[int], fast: Any) -> None:
        """Record instruction ``pc`` as a compiled step when it can be one: the step its
        fast path offers on the arrays bound here, else one made from the kernel's name."""
        if self._cell_step(pc, k, args, outs):
            return
        offered = fast_path_of(fast)
        pieces, planned = offered.pieces, offered.step
        if planned is None and offered.with_epilogue:
            return  # a convolution and the run after it, which has no step of its own
        if planned is not None:
            if self._offered_step(pc, k, args, outs, planned):
                return
            if Step(*planned).checked and pieces is None:
                return
            # (else the step is made below, from the arrays bound here)
        if pieces is not None:  # split / cat: one copy per piece, lazily made
            self._pieces(pc, args, outs, pieces)
        elif len(outs) <= 1:
            self._made_step(pc, k.name, args, outs, offered.view_of_input)

    def cell(self, j: int) -> np.ndarray:
        """The cell of int scalar ``j``, computed at run time, inside a whole method: a
        1-element int64 array, the same at every step that writes or reads it."""
        cell = self.cells.get(j)
        if cell is None:
            cell = self.cells[j] = np.zeros(1, np.int64)
        return cell

    def _cell_step(self, pc: int, k: Kernel, args: list[int], outs: list[int]) -> bool:
        """Record the step of an instruction taking or computing int scalars at run time
        (kernels.registry.cell_step), those scalars read and written in their cells;
        False when it has none or takes no such scalar."""
        evalues = self.facts.plan.values
        cells = [n for n, j in enumerate(args) if j in self.written and type(evalues[j].val) is Int]
        if not cells:
            return False
        maker = get_cell_step(k.name)
        if maker is None:
            return False
        values: list[Any] = []
        for n, j in enumerate(args):
            val = evalues[j].val
            if n in cells:
                values.append(self.cell(j))
            elif isinstance(val, Tensor):
                values.append(self.facts.capacity.get(j) if j in outs else self.bound_array(j))
                if values[-1] is None:
                    return False
            elif j in self.written or isinstance(val, (TensorList, OptionalTensorList)):
                return False  # (a float or bool computed at run time; a list)
            else:
                values.append(self.facts.values[j])
        try:
            offered = maker(*values)
        except Exception:  # noqa: BLE001 - a maker that cannot decide offers no step
            return False
        planned = fast_path_of(offered).step
        if planned is None:
            return False
        step = Step(*planned)
        if step.checked:
            # the error from the cells' values at the failing call
            def raise_error() -> None:
                offered(*(int(a[0]) if n in cells else a for n, a in enumerate(values)))

            self.checks[pc] = raise_error
        self.record(pc, step, self.stores([j for j in outs if j in self.facts.capacity]))
        return True

    def _offered_step(
        self, pc: int, k: Kernel, args: list[int], outs: list[int], planned: Any
    ) -> bool:
        """Record the step a fast path offers (``planned``), made again on the arrays bound
        here when they are not its load-time values; False when it cannot serve."""
        evalues = self.facts.plan.values
        tensors = [j for j in args if isinstance(evalues[j].val, Tensor)]
        for j in args:
            if isinstance(evalues[j].val, (TensorList, OptionalTensorList)):
                tensors += [i for i in evalues[j].val.items if i >= 0 and i in self.facts.capacity]
        values = [self.facts.load_time_value(j) for j in args]
        matched = self._tensors_match(tensors)
        # bound to other arrays than its load-time values (a view made at load):
        # the compiled form again, on the arrays bound here
        again = None if matched else self._rebound_step(k, args, outs)
        if again is not None:
            values, planned = again
        if not matched and again is None:
            return False
        # (dispatcher, args[, checked]), or a list of such calls made in order
        if isinstance(planned, list):
            made = [Step(*p) for p in planned]
            step: Step | Callable[[], MadeSteps] = lambda: made  # noqa: E731
        else:
            step = Step(*planned)
        if isinstance(step, Step) and step.checked:
            # the reference kernel on the same arrays raises the error
            self.checks[pc] = functools.partial(k.fn, *values)
        self.record(pc, step, self.stores(outs))
        return True

    def _made_step(
        self, pc: int, name: str, args: list[int], outs: list[int], view_of_input: Any
    ) -> None:
        """Record a step made from the operator's name on the arrays bound here, when every
        input is bound and the output static."""
        evalues = self.facts.plan.values
        arrays = []
        for j in args[: len(args) - len(outs)]:
            if isinstance(evalues[j].val, Tensor):
                arr = self.bound_array(j)
                if arr is None or arr.dtype.kind not in "biuf":
                    return  # read live, or a dtype numba does not take (bfloat16)
                arrays.append(arr)
            elif j in self.written or isinstance(evalues[j].val, (TensorList, OptionalTensorList)):
                return
            else:
                arrays.append(self.facts.values[j])
        out = None
        if outs:
            val = evalues[outs[0]].val
            if not isinstance(val, Tensor) or val.shape_dynamism != TensorShapeDynamism.STATIC:
                return
            out = self.facts.capacity[outs[0]]

        def make() -> MadeSteps:  # built only for a method that may be whole
            if view_of_input is not None and out is not None:
                view = view_of_input(arrays[0])
                if _same_bytes(view, out):
                    return []  # the planner put the copy on its input's bytes: nothing to do
                return view_copy_step(view, out)
            if out is not None and (step := whole_form_step(name, [*arrays, out])):
                return step
            if out is not None and (staged := staged_form_steps(name, arrays, out)):
                return staged
            step = copy_step(name, arrays, out)
            if step is None and out is not None:
                step = elementwise_step(name, arrays, out) or product_step(name, arrays, out)
            return step

        self.record(pc, make, self.stores(outs))

    def _pieces(self, pc: int, args: list[int], outs: list[int], pieces: tuple) -> None:
        """Split (into a list out) or cat (from a list in): each piece a view copy."""
        evalues = self.facts.plan.values
        lists = [j for j in args if isinstance(evalues[j].val, TensorList)]
        if len(lists) != 1 or len(outs) != 1:
            return
        items = [self.bound_array(i) for i in evalues[lists[0]].val.items]
        whole = self.bound_array(args[0] if lists[0] == outs[0] else outs[0])
        if whole is None or any(a is None for a in items):
            return
        splits = lists[0] == outs[0]  # the list is the out: split's pieces are outputs

        def make() -> list[Step] | None:
            made = []
            for i, key in pieces:
                pair = (whole[key], items[i]) if splits else (items[i], whole[key])
                step = view_copy_step(*pair)
                if step is None:
                    return None
                made.append(step)
            return made

        # (a split's list value is stored; its items are their planned arrays)
        stored = splits or outs[0] not in self.fixed
        self.record(pc, make, [f"v[{outs[0]}] = {self.out_expr(outs[0])}"] if stored else [])

    def delegate(self, pc: int, call: DelegateCall) -> None:
        """A delegate call as the steps its backend offers on the arrays bound here."""
        backend, handle = self.facts.delegates[call.delegate_index]
        arrays = [self.bound_array(j) for j in call.args]
        if any(a is None for a in arrays):
            return  # (an argument read live)
        constants = self.facts.constant_values

        def make() -> MadeSteps:
            # A constant is a read-only view of the program's data, which numba types apart
            # from the writable arrays the delegate's steps were compiled for: they read a
            # writable copy (made once; constants never change).
            given = [
                np.array(a) if j in constants and not a.flags.writeable else a
                for j, a in zip(call.args, arrays, strict=True)
            ]
            return backend.whole_steps(handle, given)

        self.record(pc, make, [])

    def whole_lines(
        self, lines: list[Line], ns: Namespace
    ) -> tuple[list[Line], WholeFunction | None]:
        """``lines`` as one call of a whole-method function when each is a compiled step,
        with that function; else ``lines`` as they are and None."""
        steps = self.steps
        if len(lines) < 2 or any(line.instruction not in steps for line in lines):
            return lines, None  # one compiled call already is one call
        made: list[Step] = []
        references: dict[int, Callable[[], Any]] = {}  # step index -> its reference call
        for line in lines:
            step = steps[line.instruction][0]
            step = step if isinstance(step, Step) else step()
            if step is None:
                return lines, None
            if line.instruction in self.checks:
                references[len(made)] = self.checks[line.instruction]
            made.extend(step if isinstance(step, list) else [step])
        whole = compile_steps(made)
        if whole is None:
            return lines, None
        fn, arrays, source = whole
        stores = [s for line in lines for s in steps[line.instruction][1]]
        call = f"{ns.bind(fn.entry, 'W')}({ns.bind(fn.bind(arrays), 'M')})"
        if references:
            call = f"{ns.bind(_checker(references), 'R')}({call})"
        # (its arrays are the method's planned ones, held as long as the method)
        return [Line("; ".join([call, *stores]), lines[0].instruction)], WholeFunction(
            source, arrays
        )
