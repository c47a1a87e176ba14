"""A loaded method: planned memory, resolved kernels, compiled instructions.

Everything is decided here, at load: arenas are allocated once, every tensor
becomes a numpy view at its planned offset, every operator is resolved to its
kernel, and the instructions are compiled to Python source (see
:mod:`pyexecutorch.runtime.codegen`). ``run`` then only calls kernels.
"""

from __future__ import annotations

import functools
import inspect
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyexecutorch.jit import deferral, entry_points
from pyexecutorch.kernels.common import fit, fp_warnings_off, fp_warnings_restore, keep_size
from pyexecutorch.kernels.registry import (
    Const,
    Inline,
    KernelError,
    facts_of,
    get_compiled_form,
    get_kernel,
    get_specializer,
)
from pyexecutorch.runtime import backend as backends
from pyexecutorch.runtime import shape_plans
from pyexecutorch.runtime.argument_checks import refused_instructions
from pyexecutorch.runtime.arity import check_kernel_call
from pyexecutorch.runtime.codegen import (
    CompiledChain,
    Line,
    Namespace,
    compile_chain,
    failing_instruction,
    literal,
)
from pyexecutorch.runtime.dataflow import Flow, accesses, fills_in_place
from pyexecutorch.runtime.epilogue import fuse_epilogues
from pyexecutorch.runtime.errors import (
    ExecutionError,
    InvalidProgramError,
    MissingBackendError,
    MissingOperatorError,
)
from pyexecutorch.runtime.etdump import EventTracer, clock
from pyexecutorch.runtime.fold import fold_constants
from pyexecutorch.runtime.fusion import (
    HALF,
    FusedCall,
    flat_views,
    fuse,
    fused_live,
    loop_array,
    same_layout,
)
from pyexecutorch.runtime.io import ExactSlot
from pyexecutorch.runtime.layout import (
    channels_last_form,
    channels_last_values,
    store_channels_last,
)
from pyexecutorch.runtime.limits import (
    DEFAULT_LIMITS,
    InstructionBudgetError,
    LoadLimits,
    check_load_memory,
)
from pyexecutorch.runtime.low_precision import is_low, widened
from pyexecutorch.runtime.shape_plans import ShapePlans, static_plan
from pyexecutorch.runtime.tensors import dim_order_of, view_of
from pyexecutorch.runtime.verify import check_data_flow, verify_plan
from pyexecutorch.runtime.views import ViewElider, identity
from pyexecutorch.runtime.whole_method import (
    Step,
    compile_steps,
    copy_source_position,
    copy_step,
    elementwise_step,
    product_step,
    same_elements,
    view_copy_step,
)
from pyexecutorch.schema.etdump import ProfileEvent
from pyexecutorch.schema.program import (
    Bool,
    BoolList,
    DataLocation,
    DelegateCall,
    Double,
    DoubleList,
    ExecutionPlan,
    FreeCall,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Null,
    OptionalTensorList,
    String,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)
from pyexecutorch.schema.pte import PteFile
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_NAME, dtype_of

# Operators whose kernels take the program's output value as their last
# argument and return its new value (no separate return slot): executorch_prim's, and
# those whose family declares it (OperatorFacts.stack_style).
_STACK_STYLE_PREFIXES = ("executorch_prim::",)


@dataclass(frozen=True, eq=False)
class _EntryPoint:
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


def _filling(fast: Callable[..., Any]) -> Callable[..., Any]:
    """``fast`` (a one-output kernel call), writing its out array and returning it."""
    if getattr(fast, "fills_outputs", False):
        return fast

    def filled(*args: Any) -> Any:
        out = args[-1]
        result = fast(*args)
        if result is not out:
            np.copyto(out, result)
        return out

    return filled


@functools.cache
def _parameters(fast_path: Callable[..., Any]) -> frozenset[str]:
    """The parameter names of a kernel's fast path or compiled form (module-level
    functions, asked once per instruction at every load)."""
    return frozenset(inspect.signature(fast_path).parameters)


def whole_form_step(name: str, args: list[Any]) -> Step | None:
    """The Step of a compiled form that takes ``whole=True``: one it offers only inside a
    whole method (there no per-call cost weighs against its loop), or None."""
    form = get_compiled_form(name)
    if form is None or "whole" not in _parameters(form):
        return None
    try:
        fast = form(*args, whole=True)
    except Exception:  # noqa: BLE001 - a form that cannot decide offers no step
        return None
    planned = getattr(fast, "step", None)
    return None if planned is None else Step(*planned)


def staged_form_steps(name: str, arrays: list[Any], out: np.ndarray) -> list[Step] | None:
    """A whole-method form's step on C-contiguous copies of its strided inputs, each copy a
    step before it (a convolution reading a channels-last tensor's permuted view), or None."""
    staged = list(arrays)
    copies = []
    for k, a in enumerate(arrays):
        if isinstance(a, np.ndarray) and not a.flags.c_contiguous:
            staged[k] = np.empty(a.shape, a.dtype)
            copy = view_copy_step(a, staged[k])
            if copy is None:
                return None
            copies.append(copy)
    step = whole_form_step(name, [*staged, out]) if copies else None
    return None if step is None else [*copies, step]


class _BoundShapes:
    """The shapes a dynamic input has been accepted at, each with the view of its planned
    storage there (True for an input the method reads as given): what the generated input
    installer looks up, so that a repeated shape costs one dictionary look-up."""

    _MAX = 256  # distinct shapes kept; then forgotten (a dynamic dim may take many sizes)

    def __init__(self, bound: tuple[int, ...], planned: np.ndarray | None) -> None:
        self.bound = tuple(bound)
        self.planned = planned
        self.views: dict[tuple[int, ...], Any] = {}

    def accept(self, shape: tuple[int, ...]) -> Any:
        """The view for ``shape`` (True without planned storage), or None past the bounds."""
        if len(shape) != len(self.bound) or any(
            n > b for n, b in zip(shape, self.bound, strict=True)
        ):
            return None
        if len(self.views) >= self._MAX:
            self.views.clear()
        view = True if self.planned is None else fit(self.planned, shape)
        self.views[shape] = view
        return view


def _destroy_delegates(delegates: list[tuple[Any, Any]]) -> None:
    for backend, handle in delegates:
        backend.destroy(handle)
    delegates.clear()


@dataclass
class SharedArenas:
    """The arenas a program's methods share: memory ids 2 and up, where
    ``share_mutable_buffers`` places the state every method reads and writes (sized to
    the largest method's), and which initial states have been written."""

    arenas: dict[int, np.ndarray]
    initialized: set[tuple[int, int]]

    @staticmethod
    def of(plans: Sequence[ExecutionPlan], limits: LoadLimits) -> SharedArenas | None:
        """The shared arenas of ``plans``; ``InvalidProgramError`` when they need more than
        ``limits.max_arena_bytes`` (checked before anything is allocated)."""
        sizes: dict[int, int] = {}
        owners: dict[int, str] = {}
        for plan in plans:
            for mem_id, size in enumerate(plan.non_const_buffer_sizes):
                if mem_id >= SHARED_FROM_MEMORY_ID and max(size, 0) >= sizes.get(mem_id, 0):
                    sizes[mem_id], owners[mem_id] = max(size, 0), plan.name
        if not sizes:
            return None
        limit = limits.arena_bytes
        if sum(sizes.values()) > limit:
            asked = ", ".join(
                f"method '{owners[m]}' {n} bytes in memory id {m}" for m, n in sizes.items() if n
            )
            raise InvalidProgramError(
                f"the program's shared arenas need {sum(sizes.values())} bytes ({asked}), more "
                f"than the limit of {limit} bytes (max_arena_bytes={limits.max_arena_bytes})"
            )
        return SharedArenas({m: arena_bytes(n) for m, n in sizes.items()}, set())


# Bytes an arena's start is aligned to: a cache line. Planned offsets are multiples of 16
# (the format's alignment) and, for most tensors, of 64; an arena starting on a line keeps
# those tensors' vectors within lines (numpy's own 16-byte start split every 64-byte vector
# access of the compiled kernels in two: up to twice their time).
ARENA_ALIGNMENT = 64


def arena_bytes(size: int) -> np.ndarray:
    """``size`` zeroed bytes starting on an ARENA_ALIGNMENT boundary."""
    raw = np.zeros(size + ARENA_ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ARENA_ALIGNMENT
    return raw[start : start + size]


# Memory id 1 holds each method's own activations; ids from 2 are shared state.
SHARED_FROM_MEMORY_ID = 2


@dataclass
class InputSpec:
    """How one method input is accepted: a tensor of a dtype and (bound) shape, or a scalar."""

    index: int  # value index
    kind: str  # "tensor", "int", "double", "bool", "string", "none"
    dtype: np.dtype | None = None
    scalar_type: int = 0
    sizes: tuple[int, ...] = ()
    dynamic: bool = False
    planned: bool = False


class LoadedMethod:
    """The executable form of one execution plan."""

    def __init__(
        self,
        pte: PteFile,
        plan: ExecutionPlan,
        *,
        named_data: Mapping[str, Any] | None = None,
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
        jit: bool = False,
        shared: SharedArenas | None = None,
        event_tracer: EventTracer | None = None,
        limits: LoadLimits = DEFAULT_LIMITS,
        verify: bool = True,
        arenas: list[np.ndarray] | None = None,
        delegates: list[tuple[Any, Any]] | None = None,
    ) -> None:
        """``arenas``: those of the dynamic-shape method this one is a static plan of (see
        :mod:`pyexecutorch.runtime.shape_plans`); their state is kept, no initial data
        written. ``delegates``: that method's delegate handles, used (not destroyed) here."""
        start = clock()
        # With a tracer the method compiles to an instrumented variant (see _traced_lines).
        self.tracer = event_tracer
        self._slot_times: list[tuple[tuple[int, ...], list[int]]] = []
        self.name = plan.name
        self.jit = jit  # the compiled tier: fused loops and compiled kernel forms
        self.plan = plan
        self._pte = pte
        self._named_data = named_data or {}
        self._shared = shared
        self.limits = limits
        if verify:  # a program loaded with Verification.Minimal is checked method by method
            verify_plan(pte, plan)
        check_load_memory(plan, limits)
        self._reused_arenas = arenas is not None
        self.arenas = arenas or [
            shared.arenas[mem_id]
            if shared is not None and mem_id in shared.arenas
            else arena_bytes(max(size, 0))
            for mem_id, size in enumerate(plan.non_const_buffer_sizes)
        ]
        self.values: list[Any] = [None] * len(plan.values)
        # Planned storage of each tensor value (upper-bound shape for dynamic ones).
        self.capacity: dict[int, np.ndarray] = {}
        self.constant_values: set[int] = set()
        self._build_values()
        self.inputs = [self._input_spec(i) for i in plan.inputs]
        self._resolve_kernels()
        check_data_flow(self)  # needs the kernels: which arguments each call writes
        if delegates is None:
            self._delegates = self._init_delegates(backend_options)
        else:
            self._delegates, self._release = delegates, lambda: None
        dynamic = shape_plans.dynamic_values(self) if jit and event_tracer is None else None
        # The compiled tier runs such a method through static plans of it, one per input
        # shapes; its own code is the numpy tier's, which stores every size it computes.
        self.jit = jit and dynamic is None
        # The index in the program of each instruction (a static plan drops some), if not pc.
        self.instruction_numbers: list[int] | None = None
        self.chains = self._compile()
        # The static plans of a dynamic-shape method on the compiled tier, else None.
        self.shape_plans: ShapePlans | None = None
        if self.whole_source is not None:
            self.run = self._run_whole
        elif dynamic is not None:
            self.shape_plans = ShapePlans(self, dynamic, self._static_plan, self.run)
            self.run = self.shape_plans.run
        if event_tracer is not None:
            end = clock()
            event_tracer.profile("Method::init", start, end)
            event_tracer.profile("Program::load_method", start, end)
            self.run = self._traced_run

    # ------------------------------------------------------------------ values

    def _fail(self, msg: str) -> InvalidProgramError:
        return InvalidProgramError(f"method '{self.name}': {msg}")

    def _tensor(self, i: int, t: Tensor) -> np.ndarray:
        try:
            dtype = dtype_of(t.scalar_type)
        except TypeError:
            name = SCALAR_TYPE_NAME.get(t.scalar_type, str(int(t.scalar_type)))
            raise NotImplementedError(
                f"method '{self.name}': value {i} has scalar type {name}, which the numpy runtime does not support"
            ) from None
        sizes = tuple(t.sizes)
        order = dim_order_of(t)
        alloc = t.allocation_info
        extra = t.extra_tensor_info
        program = self._pte.program
        if alloc is not None:
            if not 0 < alloc.memory_id < len(self.arenas):
                raise self._fail(f"value {i}: memory id {alloc.memory_id} out of range")
            arena = self.arenas[alloc.memory_id]
            nbytes = math.prod(sizes) * dtype.itemsize
            if alloc.memory_offset + nbytes > arena.size:
                raise self._fail(
                    f"value {i}: tensor of {nbytes} bytes at offset {alloc.memory_offset} extends past "
                    f"the end of buffer {alloc.memory_id} ({arena.size} bytes)"
                )
            arr = view_of(arena, alloc.memory_offset, sizes, order, dtype)
            initial = self._initial_data(i, t, dtype, sizes, order)
            if initial is not None and self._first_placement(alloc.memory_id, alloc.memory_offset):
                arr[...] = initial
            return arr
        if extra is not None and extra.location == 1:  # TensorDataLocation.EXTERNAL
            key = extra.fully_qualified_name
            blob = self._named_data.get(key) if key is not None else None
            if blob is None:
                raise self._fail(
                    f"value {i}: external tensor {key!r} was not found in the data files "
                    f"(pass the .ptd with data_files=/data_path=)"
                )
            self.constant_values.add(i)
            return self._readonly_view(blob, i, sizes, order, dtype)
        if t.data_buffer_idx:
            if t.data_buffer_idx >= len(program.constant_buffer):
                raise self._fail(f"value {i}: constant buffer {t.data_buffer_idx} out of range")
            self.constant_values.add(i)
            return self._readonly_view(
                program.constant_buffer[t.data_buffer_idx].storage, i, sizes, order, dtype
            )
        if t.shape_dynamism == TensorShapeDynamism.DYNAMIC_UNBOUND:
            return np.empty((0,) * max(len(sizes), 1), dtype=dtype)
        return np.zeros(sizes, dtype=dtype)

    def _static_plan(self, fixed: dict[int, Any]) -> LoadedMethod:
        """This dynamic-shape method with each value of ``fixed`` fixed (see
        shape_plans.static_plan), on the compiled tier, over this method's arenas."""
        plan, kept = static_plan(self.plan, self.shape_plans.dynamic, fixed)
        method = LoadedMethod(
            self._pte,
            plan,
            named_data=self._named_data,
            jit=True,
            shared=self._shared,
            limits=self.limits,
            verify=False,
            arenas=self.arenas,
            delegates=self._delegates,
        )
        method.instruction_numbers = kept
        return method

    def _first_placement(self, mem_id: int, offset: int) -> bool:
        """Whether a tensor's initial state may be written at (arena, offset): always in
        this method's own arenas; in a shared one only by the first method to load, so
        that loading a method does not reset state another method has written."""
        if self._reused_arenas:
            return False
        shared = self._shared
        if shared is None or mem_id not in shared.arenas:
            return True
        if (mem_id, offset) in shared.initialized:
            return False
        shared.initialized.add((mem_id, offset))
        return True

    def _readonly_view(self, storage: Any, i: int, sizes, order, dtype) -> np.ndarray:  # noqa: ANN001
        view = memoryview(storage).cast("B")
        need = math.prod(sizes) * dtype.itemsize
        if need > len(view):
            raise self._fail(
                f"value {i}: constant tensor needs {need} bytes but its data has {len(view)}"
            )
        arr = view_of(view, 0, sizes, order, dtype)
        arr.flags.writeable = False
        return arr

    def _initial_data(self, i: int, t: Tensor, dtype, sizes, order) -> np.ndarray | None:  # noqa: ANN001
        """Initial contents of a planned tensor: a mutable buffer's starting state,
        stored in the mutable data segment at ``data_buffer_idx``."""
        if not t.data_buffer_idx:
            return None
        mutable = self._pte.mutable_data or []
        if t.data_buffer_idx >= len(mutable):
            raise self._fail(
                f"value {i}: mutable data {t.data_buffer_idx} out of range ({len(mutable)} buffers)"
            )
        return self._readonly_view(mutable[t.data_buffer_idx].storage, i, sizes, order, dtype)

    def _build_values(self) -> None:
        plan = self.plan
        v = self.values
        evalues = plan.values
        # Scalars and tensors first: lists refer to them.
        for i, ev in enumerate(evalues):
            val = ev.val
            if isinstance(val, Tensor):
                arr = self._tensor(i, val)
                v[i] = arr
                self.capacity[i] = arr
                if val.shape_dynamism == TensorShapeDynamism.STATIC:
                    keep_size(arr)  # a kernel may not resize it (see kernels.common.fit)
            elif isinstance(val, Int):
                v[i] = val.int_val
            elif isinstance(val, Double):
                v[i] = val.double_val
            elif isinstance(val, Bool):
                v[i] = val.bool_val
            elif isinstance(val, String):
                v[i] = val.string_val
            elif isinstance(val, (DoubleList, BoolList)):
                v[i] = tuple(val.items)
        n = len(evalues)
        for i, ev in enumerate(evalues):
            val = ev.val
            try:
                if isinstance(val, IntList):
                    v[i] = tuple(v[j] for j in val.items)
                elif isinstance(val, TensorList):
                    v[i] = [v[j] for j in val.items]
                elif isinstance(val, OptionalTensorList):
                    v[i] = [None if j < 0 else v[j] for j in val.items]
            except (IndexError, TypeError):
                raise self._fail(f"value {i}: list refers to a value outside 0..{n - 1}") from None

    def _input_spec(self, index: int) -> InputSpec:
        val = self.plan.values[index].val
        if isinstance(val, Tensor):
            return InputSpec(
                index,
                "tensor",
                dtype=self.capacity[index].dtype,
                scalar_type=int(val.scalar_type),
                sizes=tuple(val.sizes),
                dynamic=val.shape_dynamism != TensorShapeDynamism.STATIC,
                planned=val.allocation_info is not None,
            )
        kind = {Int: "int", Double: "double", Bool: "bool", String: "string"}.get(type(val), "none")
        return InputSpec(index, kind)

    # ----------------------------------------------------------------- kernels

    def _resolve_kernels(self) -> None:
        self.kernels = []
        missing = []
        for op in self.plan.operators:
            k = get_kernel(op.qualified_name)
            if k is None:
                missing.append(op.qualified_name)
            self.kernels.append(k)
        if missing:
            raise MissingOperatorError(self.name, sorted(set(missing)))
        for c, chain in enumerate(self.plan.chains):
            for pc, instr in enumerate(chain.instructions):
                call = instr.instr_args
                if isinstance(call, KernelCall):
                    k = self.kernels[call.op_index]
                    args, outs = self.kernel_layout(k, call)
                    check_kernel_call(
                        self.name, f"chain {c} instruction {pc}", k, args, outs, self.plan.values
                    )

    def _init_delegates(self, backend_options) -> list[tuple[Any, Any]]:  # noqa: ANN001
        out: list[tuple[Any, Any]] = []
        # Handles are destroyed when the method goes away (or fails to load), once.
        self._release = weakref.finalize(self, _destroy_delegates, out)
        program = self._pte.program
        for d, delegate in enumerate(self.plan.delegates):
            backend = backends.get_backend(delegate.id)
            if backend is None or not backend.is_available():
                state = "not registered" if backend is None else "not available"
                raise MissingBackendError(
                    f"method '{self.name}': delegate {d} needs backend {delegate.id!r}, which is {state} "
                    f"(registered: {backends.registered_backend_names()})"
                )
            ref = delegate.processed
            if ref.location == DataLocation.INLINE:
                processed = program.backend_delegate_data[ref.index].data
            else:
                processed = self._pte.delegate_segments[ref.index]
            specs = {cs.key: bytes(cs.value) for cs in delegate.compile_specs}
            context = backends.BackendInitContext(
                self.name,
                d,
                self._named_data,
                backends.effective_options(delegate.id, backend_options),
                event_tracer=self.tracer,
                jit=self.jit,
            )
            try:
                handle = backend.init(memoryview(processed).cast("B"), specs, context)
            except Exception as e:
                raise MissingBackendError(
                    f"method '{self.name}': backend {delegate.id!r} failed to initialize delegate {d}: {e}"
                ) from e
            out.append((backend, handle))
        for c, chain in enumerate(self.plan.chains):
            for pc, instr in enumerate(chain.instructions):
                call = instr.instr_args
                if (
                    isinstance(call, DelegateCall)
                    and out[call.delegate_index][0].tensor_arguments_only
                ):
                    for j in call.args:
                        if not isinstance(self.plan.values[j].val, Tensor):
                            kind = type(self.plan.values[j].val).__name__
                            raise self._fail(
                                f"chain {c} instruction {pc} (delegate {call.delegate_index}, "
                                f"{self.plan.delegates[call.delegate_index].id}) passes value {j}, "
                                f"a {kind}; the backend takes tensors only"
                            )
        return out

    def destroy(self) -> None:
        self._release()
        self._delegates = []

    # ----------------------------------------------------------------- compile

    def _written_values(self) -> set[int]:
        """Values that instructions (or inputs) may change: read them live, never inline."""
        written = set(self.plan.inputs)
        for chain in self.plan.chains:
            for instr in chain.instructions:
                written.update(accesses(self, instr.instr_args)[1])
        return written

    def kernel_layout(self, k, call: KernelCall) -> tuple[list[int], list[int]]:  # noqa: ANN001
        """(arguments passed to the kernel, output value indices) of a kernel call."""
        args = list(call.args)
        n_outs = k.n_outs
        stack_style = k.name.startswith(_STACK_STYLE_PREFIXES) or facts_of(k.name).stack_style
        if stack_style:
            return args, args[-n_outs:] if n_outs else []
        if n_outs == 0:
            # In-place op: the trailing return slot aliases the mutated argument.
            return args[:-1] if len(args) > 1 else args, []
        # Out variants end with one return slot: the out value itself for one
        # output, a TensorList of the outs for several; ops returning ``()``
        # (split_copy) have none.
        if len(args) >= 2 and args[-1] == args[-2]:
            args = args[:-1]
        elif len(args) >= 2 and isinstance(self.plan.values[args[-1]].val, TensorList):
            # Several outs return one list; a list out (split_with_sizes_copy)
            # returns another list of the same tensors.
            if n_outs > 1 or isinstance(self.plan.values[args[-2]].val, TensorList):
                args = args[:-1]
        return args, args[-n_outs:]

    def _compile(self) -> list[CompiledChain]:
        self.channels_last: set[int] = set()  # values stored channels-last (runtime.layout)
        if not (self.jit and self.tracer is None and len(self.plan.chains) == 1):
            return self._compile_chains([])
        # A CNN's activations go channels-last when the method then compiles whole;
        # otherwise it compiles again in the program's own layout.
        chosen = channels_last_values(self, Flow.of(self), self._read_values())
        if chosen:
            restore = store_channels_last(self, chosen)
            with deferral.deferred_entry_points() as pending:
                chains = self._compile_chains(pending, whole_only=True)
            if chains is not None:
                self.channels_last = chosen
                return chains
            restore()
        # It may compile whole: its compiled forms' functions load only if their calls stay.
        with deferral.deferred_entry_points() as pending:
            return self._compile_chains(pending)

    def _compile_chains(
        self, pending: list[Any], whole_only: bool = False
    ) -> list[CompiledChain] | None:
        """The chains' generated code; ``pending`` lists compiled forms' deferred functions
        (see deferral.deferred_entry_points), loaded when the chain does not compile whole.
        ``whole_only``: None instead when the chain does not compile whole."""
        plan = self.plan
        ns = Namespace()
        written = self._written_values()
        flow = Flow.of(self)
        # Traced, every instruction runs (and is recorded) as in the official runtime.
        folded = set() if self.tracer else fold_constants(self, written, flow)
        elider = ViewElider(self, flow)
        read = self._read_values()
        v = self.values
        evalues = plan.values
        # Instructions whose arguments their kernel refuses: no faster form (argument_checks).
        self.refused = refused_instructions(self, written)

        # First pass: what each kernel call becomes (a view, an inline numpy
        # call, or a kernel call), so that values every writer of which is an
        # inline call are known before any line is written (see _fixed_values).
        decisions: dict[tuple[int, int], tuple[str, Any]] = {}
        for c, chain in enumerate(plan.chains):
            for pc, instr in enumerate(chain.instructions):
                a = instr.instr_args
                if not isinstance(a, KernelCall) or (c == 0 and pc in folded):
                    continue
                k = self.kernels[a.op_index]
                args, outs = self.kernel_layout(k, a)
                low = self.widened_kernel(k, args, outs)
                if low is not None:  # bfloat16 / float8: the reference kernel in float32
                    decisions[c, pc] = ("call", low)
                    continue
                if (c, pc) in self.refused:  # its kernel raises the error when it runs
                    decisions[c, pc] = ("refused", k.fn)
                    continue
                fast = self._specialized(k, args, written, read)
                if c == 0 and (view := elider.view_for(pc, args, outs, fast)) is not None:
                    decisions[c, pc] = ("view", view)
                elif isinstance(fast, Inline) and isinstance(
                    evalues[args[fast.out % len(args)]].val, Tensor
                ):
                    decisions[c, pc] = ("inline", fast)
                elif self.jit and c == 0 and flow is not None and self._plain_copy(k, args, outs):
                    decisions[c, pc] = ("copy", outs[0])
                else:
                    decisions[c, pc] = ("call", fast)
        if self.jit:
            fuse(self, flow, decisions, written, elider.region)
        # The fused runs (their instruction indices), for tests and profiles.
        self.fused_runs = [fast.pcs for (kind, fast) in decisions.values() if kind == "fused"]
        # Copies that became views (chain 0's instruction indices); the ones made at load.
        self.view_instructions = sorted(
            pc for (_, pc), (kind, _) in decisions.items() if kind == "view"
        )
        self.load_time_views: list[int] = []
        self.whole_source: str | None = None  # set when the chain became one compiled function
        # Convolutions that apply the fused run after them in place (their instruction indices).
        self.conv_epilogues = (
            fuse_epilogues(self, flow, decisions, written, read) if self.jit else []
        )
        fixed = self._fixed_values(flow, decisions)
        # Views of arrays that are the same every run, made once here (see _resolve_view).
        resolved: dict[int, np.ndarray] = {}

        def bound_array(j: int) -> np.ndarray | None:
            """The array value ``j`` is at every run, when it is known now."""
            if j in resolved:
                return resolved[j]
            if j in self.constant_values:
                return v[j]
            if j in fixed:
                return self.capacity[j]
            return None

        def expr(j: int) -> str:
            val = evalues[j].val
            if isinstance(val, Tensor):
                if j in resolved:
                    return ns.bind(resolved[j], "C")
                if j in self.constant_values:
                    return ns.bind(v[j], "T")
                if j in fixed:
                    return ns.bind(self.capacity[j], "C")
                return f"v[{j}]"
            if isinstance(val, IntList):
                if any(i in written for i in val.items):
                    return "(" + "".join(f"{expr(i)}, " for i in val.items) + ")"
                return literal(v[j], ns)
            if isinstance(val, (TensorList, OptionalTensorList)):
                items = val.items
                return (
                    "["
                    + ", ".join(
                        "None" if i < 0 or isinstance(evalues[i].val, Null) else expr(i)
                        for i in items
                    )
                    + "]"
                )
            if j in written:
                return f"v[{j}]"
            return literal(v[j], ns)

        def out_expr(j: int) -> str:
            val = evalues[j].val
            if isinstance(val, Tensor):
                return ns.bind(self.capacity[j], "C")
            if isinstance(val, TensorList):
                return "[" + ", ".join(ns.bind(self.capacity[i], "C") for i in val.items) + "]"
            return f"v[{j}]"

        def store(j: int) -> str:
            val = evalues[j].val
            if isinstance(val, TensorList):
                items = val.items
                targets = "".join(f"v[{i}], " for i in items)
                return f"v[{j}] = _r; {targets or '_'} = _r" if items else f"v[{j}] = _r"
            return f"v[{j}] = _r"

        def inline_call(fast: Inline, args: list[int], n_in: int) -> str:
            def part(p: int | Const) -> str:
                if isinstance(p, Const):
                    return literal(p.value, ns)
                i = p % len(args)
                return expr(args[i]) if i < n_in else out_expr(args[i])

            out = args[fast.out % len(args)]
            parts = [part(p) for p in fast.parts]
            if fast.keyword_out:
                parts[-1] = f"out={parts[-1]}"
            call = f"{ns.bind(fast.fn, 'f')}({', '.join(parts)})"
            return call if out in fixed else f"{call}; v[{out}] = {out_expr(out)}"

        # Instructions that are one compiled call on bound arrays, with the stores
        # after it: what a whole-method function is made of (see whole_method).
        steps: dict[int, tuple[Step | Callable[[], Step | list[Step] | None], list[str]]] = {}

        def fused_call(call: FusedCall, pc: int) -> str:
            exprs = [expr(j) for j in call.inputs] + [out_expr(j) for j in call.outputs]
            if not all(e[0] in "TC" for e in exprs):
                # some argument is read live: dispatch per call
                fn = fused_live(call.function(flat=False), call.dtype)
            else:
                # Every argument is a bound array: its types are known now, and
                # dense same-shape arrays run as one flat loop over 1-D views.
                arrays = [bound_array(j) for j in call.inputs]
                arrays += [self.capacity[j] for j in call.outputs]
                if any(a.dtype == HALF for a in arrays):  # the loop takes float16 as its bits
                    arrays = [loop_array(a) for a in arrays]
                    exprs = [ns.bind(a, "C") for a in arrays]
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
                        exprs = [ns.bind(a, "C") for a in arrays]
                n_in = len(call.inputs)
                for k, a in enumerate(arrays[:n_in]):
                    for o, b in enumerate(arrays[n_in:]):
                        if a.ctypes.data == b.ctypes.data and same_layout(a, b):
                            aliases[k] = o  # the planner gave this output the input's memory
                if flat or aliases:
                    arrays = [a for k, a in enumerate(arrays) if k not in aliases]
                    exprs = [ns.bind(a, "C") for a in arrays]
                dispatcher = call.lazy_function(flat, aliases)
                # Its entry point is loaded only if the line is kept (not when the
                # method becomes whole): reading machine code back costs milliseconds.
                fn = _EntryPoint(dispatcher, tuple(arrays))
                entry_points.append(fn)
            line = f"{ns.bind(fn, 'F')}({', '.join(exprs)})"
            stores = [f"v[{j}] = {out_expr(j)}" for j in call.outputs if j not in fixed]
            if all(e[0] in "TC" for e in exprs):
                steps[pc] = (Step(dispatcher, tuple(arrays)), stores)
            return "; ".join([line, *stores])

        whole_candidate = self.jit and self.tracer is None and len(plan.chains) == 1
        entry_points: list[_EntryPoint] = []  # bound as placeholders until the lines are final
        checks: dict[int, Callable[[], Any]] = {}  # checked steps' reference calls

        def tensors_match(tensors: list[int]) -> bool:
            return all(same_elements(bound_array(j), self.load_time_value(j)) for j in tensors)

        def rebound_step(k: Any, args: list[int], outs: list[int]) -> tuple[list, Any] | None:
            """(arguments, step) of ``k``'s compiled form made on the arrays bound at run
            time (views made at load), or None when some is read live or it offers none."""
            form = get_compiled_form(k.name)
            if form is None:
                return None
            values: list[Any] = []
            for j in args:
                val = evalues[j].val
                if j in outs:
                    if isinstance(val, TensorList):  # (a split's outputs)
                        items = [self.capacity.get(i) for i in val.items]
                        if any(a is None for a in items):
                            return None
                        values.append(items)
                    elif j in self.capacity:
                        values.append(self.capacity[j])
                    else:
                        return None
                elif isinstance(val, Tensor):
                    values.append(bound_array(j))
                    if values[-1] is None:
                        return None
                elif isinstance(val, (TensorList, OptionalTensorList)):
                    items = [None if i < 0 else bound_array(i) for i in val.items]
                    if any(a is None and i >= 0 for a, i in zip(items, val.items, strict=True)):
                        return None
                    values.append(items)
                elif j in written:
                    return None
                else:
                    values.append(v[j])
            try:
                fast = form(*values)
            except Exception:  # noqa: BLE001 - a form that cannot decide offers no step
                return None
            planned = getattr(fast, "step", None)
            return None if planned is None else (values, planned)

        def kernel_step(pc: int, k: Any, args: list[int], outs: list[int], fast: Any) -> None:
            """Record instruction ``pc`` as a compiled step when it can be one.

            A compiled form offers its call on the planned arrays as ``fast.step``
            (dispatcher, arguments); it serves when the arrays bound here are those.
            """
            pieces = getattr(fast, "pieces", None)
            name = k.name
            planned = getattr(fast, "step", None)
            if planned is None and getattr(fast, "with_epilogue", False):
                return  # a convolution and the run after it, which has no step of its own
            if planned is not None:
                tensors = [j for j in args if isinstance(evalues[j].val, Tensor)]
                for j in args:
                    if isinstance(evalues[j].val, (TensorList, OptionalTensorList)):
                        tensors += [
                            i for i in evalues[j].val.items if i >= 0 and i in self.capacity
                        ]
                values = [self.load_time_value(j) for j in args]
                matched = tensors_match(tensors)
                # bound to other arrays than its load-time values (a view made at load):
                # the compiled form again, on the arrays bound here
                again = None if matched else rebound_step(k, args, outs)
                if again is not None:
                    values, planned = again
                if matched or again is not None:
                    # (dispatcher, args[, checked]), or a list of such calls made in order
                    if isinstance(planned, list):
                        made = [Step(*p) for p in planned]
                        step = lambda made=made: made  # noqa: E731
                    else:
                        step = Step(*planned)
                    if isinstance(step, Step) and step.checked:
                        # the reference kernel on the same arrays raises the error
                        checks[pc] = functools.partial(k.fn, *values)
                    stores = [f"v[{j}] = {out_expr(j)}" for j in outs if j not in fixed]
                    steps[pc] = (step, stores)
                    return
                if Step(*planned).checked and pieces is None:
                    return
                # (else the step is made below, from the arrays bound here)
            if pieces is not None:  # split / cat: one copy per piece, lazily made
                piece_steps(pc, args, outs, pieces)
                return
            if len(outs) > 1:
                return
            arrays = []
            for j in args[: len(args) - len(outs)]:
                if isinstance(evalues[j].val, Tensor):
                    arr = bound_array(j)
                    if arr is None or arr.dtype.kind not in "biuf":
                        return  # read live, or a dtype numba does not take (bfloat16)
                    arrays.append(arr)
                elif j in written or isinstance(evalues[j].val, (TensorList, OptionalTensorList)):
                    return
                else:
                    arrays.append(v[j])
            out = None
            if outs:
                if (
                    not isinstance(evalues[outs[0]].val, Tensor)
                    or evalues[outs[0]].val.shape_dynamism != TensorShapeDynamism.STATIC
                ):
                    return
                out = self.capacity[outs[0]]

            view_of_input = getattr(fast, "view_of_input", None)

            def make() -> Step | list[Step] | None:  # built only for a method that may be whole
                if view_of_input is not None and out is not None:
                    return view_copy_step(view_of_input(arrays[0]), out)
                if out is not None and (step := whole_form_step(name, [*arrays, out])):
                    return step
                if out is not None and (staged := staged_form_steps(name, arrays, out)):
                    return staged
                step = copy_step(name, arrays, out)
                if step is None and out is not None:
                    step = elementwise_step(name, arrays, out) or product_step(name, arrays, out)
                return step

            steps[pc] = (make, [f"v[{j}] = {out_expr(j)}" for j in outs if j not in fixed])

        def piece_steps(pc: int, args: list[int], outs: list[int], pieces: tuple) -> None:
            """Split (into a list out) or cat (from a list in): each piece a view copy."""
            lists = [j for j in args if isinstance(evalues[j].val, TensorList)]
            if len(lists) != 1 or len(outs) != 1:
                return
            items = [bound_array(i) for i in evalues[lists[0]].val.items]
            whole = bound_array(args[0] if lists[0] == outs[0] else outs[0])
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
            stored = splits or outs[0] not in fixed
            steps[pc] = (make, [f"v[{outs[0]}] = {out_expr(outs[0])}"] if stored else [])

        def delegate_step(pc: int, call: DelegateCall) -> None:
            """A delegate call as the steps its backend offers on the arrays bound here."""
            backend, handle = self._delegates[call.delegate_index]
            arrays = [bound_array(j) for j in call.args]
            if any(a is None for a in arrays):
                return  # (an argument read live)
            steps[pc] = (lambda: backend.whole_steps(handle, arrays), [])

        def plain_copy(source: int, out: int, pc: int) -> str:
            """A copy into its planned storage (numpy; a compiled step once the method is whole)."""
            dst = self.capacity[out]
            src = bound_array(source)
            stores = [] if out in fixed else [f"v[{out}] = {out_expr(out)}"]
            copy = ns.bind(np.copyto, "f")
            if src is not None and src.flags.c_contiguous:
                # the same bytes every run: their view in the destination's shape, made now
                line = f"{copy}({out_expr(out)}, {ns.bind(src.reshape(dst.shape), 'C')})"
                steps[pc] = (lambda: copy_step("aten::clone.out", [src], dst), stores)
            else:
                line = f"{copy}({out_expr(out)}, {expr(source)}.reshape({dst.shape!r}))"
            return "; ".join([line, *stores])

        compiled = []
        for c, chain in enumerate(plan.chains):
            lines: list[Line] = []
            jumps: dict[int, tuple[str, int]] = {}
            for pc, instr in enumerate(chain.instructions):
                a = instr.instr_args
                if c == 0 and pc in folded:
                    continue
                if isinstance(a, KernelCall):
                    k = self.kernels[a.op_index]
                    args, outs = self.kernel_layout(k, a)
                    kind, fast = decisions[c, pc]
                    n_in = len(args) - len(outs)
                    if kind == "view":
                        base = None if self.tracer is not None else bound_array(args[0])
                        if base is not None:
                            # The source is the same array every run: so is its view, and
                            # the instruction costs nothing at run time.
                            resolved[outs[0]] = v[outs[0]] = (
                                base if fast is identity else fast(base)
                            )
                            self.load_time_views.append(pc)
                            continue
                        source = expr(args[0])
                        bound = source if fast is identity else f"{ns.bind(fast, 'w')}({source})"
                        lines.append(Line(f"v[{outs[0]}] = {bound}", pc))
                        continue
                    if kind == "inline":
                        lines.append(Line(inline_call(fast, args, n_in), pc))
                        if whole_candidate:
                            kernel_step(pc, k, args, outs, fast)
                        continue
                    if kind == "copy":
                        lines.append(Line(plain_copy(args[0], outs[0], pc), pc))
                        continue
                    if kind == "skip":
                        continue  # computed by the fused loop of a later instruction
                    if kind == "fused":
                        lines.append(Line(fused_call(fast, pc), pc))
                        continue
                    fn = ns.bind(fast, "k")
                    call_args = [expr(j) for j in args[:n_in]] + [out_expr(j) for j in outs]
                    call = f"{fn}({', '.join(call_args)})"
                    if not outs or all(j in fixed for j in outs):
                        src = call  # nothing to store: its outputs are their planned arrays
                    elif len(outs) == 1:
                        src = f"_r = {call}; {store(outs[0])}"
                    else:
                        parts = [f"_r = {call}"]
                        for n, j in enumerate(outs):
                            parts.append(f"_r{n} = _r[{n}]")
                            parts.append(store(j).replace("_r", f"_r{n}"))
                        src = "; ".join(parts)
                    lines.append(Line(src, pc))
                    if whole_candidate and kind != "refused":
                        kernel_step(pc, k, args, outs, fast)
                elif isinstance(a, DelegateCall):
                    runner = self._delegate_runner(a)
                    lines.append(Line(f"{ns.bind(runner, 'D')}(v)", pc))
                    if whole_candidate:
                        delegate_step(pc, a)
                elif isinstance(a, MoveCall):
                    lines.append(Line(f"v[{a.move_to}] = v[{a.move_from}]", pc))
                elif isinstance(a, FreeCall):
                    j = a.value_index
                    if isinstance(evalues[j].val, Tensor):
                        lines.append(Line(f"v[{j}] = {ns.bind(self.capacity[j], 'C')}", pc))
                elif isinstance(a, JumpFalseCall):
                    jumps[pc] = (f"v[{a.cond_value_index}]", a.destination_instruction)
                else:
                    raise self._fail(f"chain {c} instruction {pc}: unknown instruction")
            if self.tracer is not None:
                lines = self._traced_lines(c, lines, jumps, ns, expr)
            elif self.jit and len(plan.chains) == 1 and not jumps:
                lines = self._whole_lines(lines, steps, checks, ns)
            if whole_only and self.whole_source is None:
                return None
            if self.whole_source is None:
                for placeholder in entry_points:
                    ns.names[ns.bind(placeholder)] = placeholder.load()
                deferral.bind_entry_points(ns.names.values(), pending)
                for name, held in list(ns.names.items()):  # see OperatorFacts.step_only_when_whole
                    if type(held) is deferral.PendingFastPath:
                        ns.names[name] = held.load()
            entry_points.clear()
            budget = self.limits.max_instructions
            over = (budget, InstructionBudgetError.raiser(self.name, c, budget)) if budget else None
            compiled.append(
                compile_chain(self.name, c, lines, jumps, len(chain.instructions), ns, over)
            )
        return compiled

    def _plain_copy(self, k, args: list[int], outs: list[int]) -> bool:  # noqa: ANN001
        """Whether a kernel call copies a static tensor's elements, in order, into another's
        planned storage of the same dtype and size (so it can fill that storage in place)."""
        if copy_source_position(k.name) != 0 or len(outs) != 1 or not args:
            return False
        src, out = args[0], outs[0]
        for j in (src, out):
            val = self.plan.values[j].val
            if not isinstance(val, Tensor) or val.shape_dynamism != TensorShapeDynamism.STATIC:
                return False
        a, b = self.load_time_value(src), self.capacity[out]
        return (
            out not in self.constant_values
            and self.values[out] is b
            and a.dtype == b.dtype
            and a.dtype.kind in "biuf"
            and a.size == b.size
            and b.flags.c_contiguous
            and not np.shares_memory(a, b)
        )

    def _whole_lines(
        self,
        lines: list[Line],
        steps: dict[int, tuple[Step | Callable[[], Step | list[Step] | None], list[str]]],
        checks: dict[int, Callable[[], Any]],
        ns: Namespace,
    ) -> list[Line]:
        """``lines`` as one call of a whole-method function when each is a compiled step.

        Sets ``whole_source`` (the generated module) when it does; else ``lines`` as they are.
        """
        if len(lines) < 2 or any(line.instruction not in steps for line in lines):
            return lines  # one compiled call already is one call
        made: list[Step] = []
        references: dict[int, Callable[[], Any]] = {}  # step index -> its reference call
        for line in lines:
            step = steps[line.instruction][0]
            step = step if isinstance(step, Step) else step()
            if step is None:
                return lines
            if line.instruction in checks:
                references[len(made)] = checks[line.instruction]
            made.extend(step if isinstance(step, list) else [step])
        whole = compile_steps(made)
        if whole is None:
            return lines
        fn, arrays, self.whole_source = whole
        stores = [s for line in lines for s in steps[line.instruction][1]]
        # (its arrays are the method's planned ones, held as long as the method)
        self.whole_arrays = arrays
        call = f"{ns.bind(fn.entry, 'W')}({ns.bind(fn.bind(arrays), 'M')})"
        if references:
            call = f"{ns.bind(_checker(references), 'R')}({call})"
        return [Line("; ".join([call, *stores]), lines[0].instruction)]

    def _traced_lines(
        self, c: int, lines: list[Line], jumps: dict, ns: Namespace, expr
    ) -> list[Line]:  # noqa: ANN001
        """``lines`` with their kernel and delegate calls timed into the tracer.

        A straight-line chain without a debug buffer takes one clock reading
        per call into a list of times (a call ends when the next begins; the
        list goes to the tracer after each run); otherwise each call appends
        ``(key, start, end)`` and logs its outputs.
        """
        tracer = self.tracer
        clk = ns.bind(clock, "clk")
        slots = not jumps and not tracer.logs_outputs
        keys: list[int] = []
        times: list[int] = []
        out: list[Line] = []
        for line in lines:
            pc = line.instruction
            a = self.plan.chains[c].instructions[pc].instr_args
            if isinstance(a, KernelCall):
                k = self.kernels[a.op_index]
                op = self.plan.operators[a.op_index]
                prim = k.name.startswith(_STACK_STYLE_PREFIXES) or facts_of(k.name).stack_style
                key = tracer.kernel_key(op.name, op.overload, c, pc, prim=prim)
                logged = self.kernel_layout(k, a)[1]
                before = ""
            elif isinstance(a, DelegateCall):
                key = tracer.key(
                    ProfileEvent(name="DELEGATE_CALL", chain_index=c, instruction_id=pc)
                )
                logged = list(a.args)
                before = f"{ns.bind(tracer, 'tr')}.instruction = ({c}, {pc}); "
            else:
                out.append(line)
                continue
            if slots:
                out.append(
                    Line(f"{ns.bind(times, 'T')}[{len(keys)}] = {clk}(); {before}{line.source}", pc)
                )
                keys.append(key)
                continue
            record = ns.bind(tracer.record, "ev")
            source = f"_t = {clk}(); {before}{line.source}; {record}(({key}, _t, {clk}()))"
            if tracer.logs_outputs and logged:
                values = "".join(f"{expr(j)}, " for j in logged)
                source += f"; {ns.bind(tracer.log_values, 'log')}({c}, {pc}, ({values}))"
            out.append(Line(source, pc))
        if keys:
            times.extend([0] * (len(keys) + 1))
            out.append(Line(f"{ns.bind(times, 'T')}[{len(keys)}] = {clk}()", out[-1].instruction))
            self._slot_times.append((tuple(keys), times))
        return out

    def _traced_run(self) -> None:
        """``run`` of a traced method: one ``Execute`` block per run, outputs logged."""
        tracer = self.tracer
        tracer.begin_block("Execute")
        start = clock()
        try:
            LoadedMethod.run(self)
        finally:
            end = clock()
            for keys, times in self._slot_times:
                tracer.record_slots(keys, times)
            tracer.flush()
        tracer.profile("Method::execute", start, end)
        if tracer.logs_outputs:
            tracer.log_run_outputs(self.outputs())

    def _fixed_values(self, flow: Flow | None, decisions: dict[tuple[int, int], Any]) -> set[int]:
        """Tensors whose array at run time is always their planned storage.

        Such a value is read as a bound name rather than from the value list,
        and its writers need not store it there: a static planned tensor of a
        method :class:`Flow` follows, written only by inline numpy calls (which
        fill their output in place) or in place, or a planned input.
        """
        if flow is None:
            return set()
        evalues = self.plan.values
        inline_outs: dict[int, int] = {}
        for (_, pc), (kind, fast) in decisions.items():
            if kind == "fused":
                for out in fast.outputs:
                    inline_outs[out] = inline_outs.get(out, 0) + 1
            elif kind == "copy":
                inline_outs[fast] = inline_outs.get(fast, 0) + 1
            elif kind == "skip" and fast:  # outputs an earlier call fills in place (epilogue)
                for out in fast:
                    inline_outs[out] = inline_outs.get(out, 0) + 1
            elif kind == "inline":
                args, _ = self.kernel_layout(
                    self.kernels[flow.instructions[pc].op_index], flow.instructions[pc]
                )
                out = args[fast.out % len(args)]
                inline_outs[out] = inline_outs.get(out, 0) + 1
            elif kind == "call" and getattr(fast, "fills_outputs", False):
                # A fast path marked so writes the out arrays it is given and returns them.
                _, outs = self.kernel_layout(
                    self.kernels[flow.instructions[pc].op_index], flow.instructions[pc]
                )
                for j in outs:
                    val = evalues[j].val
                    for out in val.items if isinstance(val, TensorList) else (j,):
                        inline_outs[out] = inline_outs.get(out, 0) + 1
        in_place = {
            pc: self.kernels[a.op_index].n_outs == 0
            for pc, a in enumerate(flow.instructions)
            if isinstance(a, KernelCall)
        }
        fills: dict[int, int] = {}  # delegate calls that leave a value its planned array
        for pc, a in enumerate(flow.instructions):
            if isinstance(a, DelegateCall):
                for j in flow.writes[pc]:
                    if fills_in_place(self, a, j):
                        fills[j] = fills.get(j, 0) + 1
                        inline_outs[j] = inline_outs.get(j, 0) + 1
        writers: dict[int, int] = {}
        for pc, w in enumerate(flow.writes):
            if in_place.get(pc):
                continue  # mutates the array it is given: still the planned one
            for j in w:
                writers[j] = writers.get(j, 0) + 1
        inputs = set(self.plan.inputs)
        fixed = set()
        for j, cap in self.capacity.items():
            val = evalues[j].val
            if (
                j in self.constant_values
                or j in flow.rebound
                or not isinstance(val, Tensor)
                or val.shape_dynamism != TensorShapeDynamism.STATIC
                or val.allocation_info is None
                or self.values[j] is not cap
            ):
                continue
            if j in inputs:
                # install puts a static planned input in its storage (a delegate reading it
                # counts as writing it: see dataflow)
                if writers.get(j, 0) == fills.get(j, 0):
                    fixed.add(j)
            elif writers.get(j, 0) == inline_outs.get(j, 0):
                # (no writer at all: a static view the planner put on its base's bytes)
                fixed.add(j)
        return fixed

    def widened_kernel(self, k, args: list[int], outs: list[int]):  # noqa: ANN001, ANN202
        """The kernel computing in float32 when the call touches bfloat16 or float8
        tensors (see :mod:`pyexecutorch.runtime.low_precision`), else None."""
        if not any(is_low(self.values[j]) for j in args if j < len(self.values)):
            return None
        return widened(k.fn, len(args) - len(outs), len(outs))

    def _specialized(self, k, args: list[int], written: set[int], read: set[int]):  # noqa: ANN001, ANN202
        """The kernel's load-time fast path for these arguments, or the kernel itself.

        With the compiled tier on, the kernel's compiled form is asked first.
        """
        candidates = [get_specializer(k.name)]
        if self.jit:
            candidates.insert(0, get_compiled_form(k.name))
        candidates = [c for c in candidates if c is not None]
        if not candidates:
            return k.fn
        evalues = self.plan.values
        dynamic = False
        for j in args:
            val = evalues[j].val
            if isinstance(val, Tensor):
                dynamic |= val.shape_dynamism != TensorShapeDynamism.STATIC
            elif isinstance(val, (TensorList, OptionalTensorList)):
                for i in val.items:
                    item = evalues[i].val if i >= 0 else None
                    if (
                        isinstance(item, Tensor)
                        and item.shape_dynamism != TensorShapeDynamism.STATIC
                    ):
                        return k.fn
            elif j in written:
                return k.fn
            elif isinstance(val, IntList) and any(i in written for i in val.items):
                return k.fn
        unused = frozenset(n for n, j in enumerate(args[len(args) - k.n_outs :]) if j not in read)
        if self.jit and not dynamic:
            planned = channels_last_form(k.name, k.fn, [self.load_time_value(j) for j in args])
            if planned is not None:
                return planned
        if (
            len(candidates) == 2
            and facts_of(k.name).step_only_when_whole
            and k.n_outs == 1
            and not dynamic
            and deferral.deferring()
        ):
            # A method that may compile whole: the compiled form first, as always; the
            # numpy fast path (costly to make: a convolution packs its weights and generates
            # its code) after it only when a line calls it (deferral.PendingFastPath), taken
            # to write its out array (see _filling).
            fast = self._fast_path(candidates[:1], args, dynamic, unused)
            if fast is not None:
                return fast
            numpy_fast = candidates[1:]
            return deferral.PendingFastPath(
                None,
                (),
                lambda: _filling(self._fast_path(numpy_fast, args, dynamic, unused) or k.fn),
            )
        as_whole = self.jit and self.tracer is not None and facts_of(k.name).traced_as_whole
        fast = self._fast_path(candidates, args, dynamic, unused, as_whole)
        return k.fn if fast is None else fast

    def _fast_path(
        self,
        candidates: list[Any],
        args: list[int],
        dynamic: bool,
        unused: frozenset[int],
        as_whole: bool = False,
    ) -> Any:
        """The first fast path ``candidates`` (specializers) offer for these arguments, or
        None; ``as_whole``: the one a compiled form offers inside a whole method."""
        for special in candidates:
            parameters = _parameters(special)
            kwargs: dict[str, Any] = {}
            if as_whole and "whole" in parameters:
                kwargs["whole"] = True
            if dynamic:
                # Only fast paths that size their outputs per call take dynamic shapes.
                if "dynamic" not in parameters:
                    continue
                kwargs["dynamic"] = True
            if "unused_outputs" in parameters:
                kwargs["unused_outputs"] = unused
            try:
                fast = special(*(self.load_time_value(j) for j in args), **kwargs)
            except Exception:  # noqa: BLE001 - a fast path that cannot decide keeps the general kernel
                fast = None
            if fast is not None:
                return fast
        return None

    def _read_values(self) -> set[int]:
        """Values something reads: instruction inputs, method and chain outputs."""
        read = set(self.plan.outputs)
        for chain in self.plan.chains:
            read.update(chain.outputs)
            for instr in chain.instructions:
                read.update(accesses(self, instr.instr_args)[0])
        return read

    def load_time_value(self, j: int) -> Any:
        """Value ``j`` as a specializer sees it: planned storage for tensors and lists of them."""
        val = self.plan.values[j].val
        if isinstance(val, Tensor):
            return self.capacity[j]
        if isinstance(val, (TensorList, OptionalTensorList)):
            return [self.capacity[i] if i >= 0 and i in self.capacity else None for i in val.items]
        return self.values[j]

    def _delegate_runner(self, call: DelegateCall):  # noqa: ANN202
        backend, handle = self._delegates[call.delegate_index]
        arg_ids = list(call.args)

        def run_delegate(v: list[Any]) -> None:
            args = [v[j] for j in arg_ids]
            result = backend.execute(handle, args)
            if result is not None:
                for j, value in zip(arg_ids, result, strict=True):
                    v[j] = value

        return run_delegate

    # ----------------------------------------------------------------- execute

    def set_input(self, position: int, value: Any) -> None:
        """Store one converted input (a numpy array or a Python scalar).

        A memory-planned input is copied into its planned memory. Any other
        tensor input is used as given, as the official runtime does: the
        method reads the caller's array, and an output that is this input
        is that array. Kernels never write into it (they write planned or
        capacity storage and rebind the value).
        """
        spec = self.inputs[position]
        if spec.kind != "tensor" or not spec.planned:
            self.values[spec.index] = value
            return
        cap = self.capacity[spec.index]
        shape = value.shape
        dst = cap if shape == cap.shape else fit(cap, shape)
        np.copyto(dst, value, casting="no")
        self.values[spec.index] = dst

    def exact_installer(self, slots: Sequence[ExactSlot]) -> Callable[[Sequence[Any]], bool]:
        """A function installing the inputs when each is exactly what its slot declares, or
        returning False when one is not, generated once for these ``slots``.

        A dense, writable array of the declared dtype and shape (within its bounds for a
        dynamic one), or for a scalar input the very value the method was exported with,
        needs none of the general conversions and checks
        (:func:`pyexecutorch.runtime.io.exact_slots`); this is the common call. Each
        static check is a comparison against a bound constant and every planned input
        one copy; a dynamic input's shape is looked up among those already accepted
        (:class:`_BoundShapes`: the planned storage's view at it). An input that fails
        may leave the ones before it installed, which is harmless since the general path
        then installs them all again. Without slots only a call with no inputs is exact.
        """
        if not slots:
            return lambda inputs: len(inputs) == 0
        ns = Namespace()
        xs = [f"x{k}" for k in range(len(slots))]
        src = [
            "def install(inputs):",
            f"    if len(inputs) != {len(slots)}: return False",
            f"    {', '.join(xs)}, = inputs",
        ]
        stores = []
        for x, (index, dtype, shape, planned, dynamic, scalar) in zip(xs, slots, strict=True):
            if dtype is None:
                kind, value = ns.bind(type(scalar), "Y"), ns.bind(scalar, "S")
                src.append(f"    if type({x}) is not {kind} or {x} != {value}: return False")
                stores.append(f"    v[{index}] = {x}")
                continue
            array, dt = ns.bind(np.ndarray, "N"), ns.bind(dtype, "D")
            if dynamic:
                bounds = _BoundShapes(shape, planned)
                views, accept = ns.bind(bounds.views, "V"), ns.bind(bounds.accept, "A")
                src += [
                    f"    if type({x}) is not {array} or {x}.dtype != {dt}: return False",
                    f"    {x}s = {views}.get({x}.shape)",
                    f"    if {x}s is None: {x}s = {accept}({x}.shape)",
                    f"    if {x}s is None: return False",
                ]
                if planned is None:
                    src.append(
                        f"    if not ({x}.flags.c_contiguous and {x}.flags.writeable): return False"
                    )
                    stores.append(f"    v[{index}] = {x}")
                else:
                    stores.append(f"    {x}s[...] = {x}; v[{index}] = {x}s")
                continue
            src.append(
                f"    if type({x}) is not {array} or {x}.dtype != {dt} or {x}.shape != "
                f"{ns.bind(tuple(shape), 'S')}: return False"
            )
            if planned is None:
                # read by the method itself: dense and writable, as the general path makes it
                src.append(
                    f"    if not ({x}.flags.c_contiguous and {x}.flags.writeable): return False"
                )
                stores.append(f"    v[{index}] = {x}")
            else:
                storage = ns.bind(planned, "P")
                stores.append(f"    {storage}[...] = {x}; v[{index}] = {storage}")
        src += [*stores, "    return True"]
        namespace = {**ns.names, "v": self.values}
        exec(
            compile("\n".join(src) + "\n", f"<pyexecutorch inputs of {self.name!r}>", "exec"),
            namespace,
        )  # noqa: S102
        return namespace["install"]

    def _run_whole(self) -> None:
        """``run`` of a method compiled whole: numba code raises no numpy warnings."""
        chain = self.chains[0]
        try:
            chain.run(self.values)
        except Exception as e:
            raise self._execution_error(e, chain) from e

    def run(self) -> None:
        v = self.values
        # torch never warns about inf/nan arithmetic; silence numpy once per run.
        token = fp_warnings_off()
        chain = None
        try:
            for chain in self.chains:  # noqa: B007 - the failing chain names the error
                chain.run(v)
        except InstructionBudgetError:
            raise
        except Exception as e:
            raise self._execution_error(e, chain) from e
        finally:
            fp_warnings_restore(token)

    def _execution_error(self, e: Exception, chain: CompiledChain) -> ExecutionError:
        pc = failing_instruction(e, chain)
        numbers = self.instruction_numbers
        where = "an instruction" if pc is None else f"instruction {numbers[pc] if numbers else pc}"
        op = ""
        if pc is not None:
            instr = self.plan.chains[self.chains.index(chain)].instructions[pc].instr_args
            if isinstance(instr, KernelCall):
                op = f" ({self.plan.operators[instr.op_index].qualified_name})"
            elif isinstance(instr, DelegateCall):
                op = f" (delegate {instr.delegate_index}, {self.plan.delegates[instr.delegate_index].id})"
        return ExecutionError(
            f"method '{self.name}' failed at {where}{op}: {type(e).__name__}: {e}"
        )

    def outputs(self) -> list[Any]:
        v = self.values
        return [v[i] for i in self.plan.outputs]
