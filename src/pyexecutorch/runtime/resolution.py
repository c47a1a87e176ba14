"""Operators and delegates of a method, resolved at load.

The second step of loading a method, as the C++ runtime's ``Method::resolve_operator``
and its delegates' ``init``: each operator the plan names becomes its registered kernel
(every call checked against the kernel's arity), each delegate its backend's handle. What
a kernel call passes and writes (:func:`kernel_layout`) is decided here, once, for every
later step that reads the instructions.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from pyexecutorch.kernels.registry import Kernel, facts_of, get_kernel
from pyexecutorch.runtime import backend as backends
from pyexecutorch.runtime.arity import check_kernel_call
from pyexecutorch.runtime.errors import (
    InvalidProgramError,
    MissingBackendError,
    MissingOperatorError,
)
from pyexecutorch.runtime.etdump import EventTracer
from pyexecutorch.schema.program import (
    DataLocation,
    DelegateCall,
    ExecutionPlan,
    KernelCall,
    Tensor,
    TensorList,
)
from pyexecutorch.schema.pte import PteFile


@functools.cache
def stack_style(name: str) -> bool:
    """Whether operator ``name`` returns its output value instead of filling a slot.

    Kept per name: families declare their facts when the kernels import, before any
    method loads, and a load asks this of every kernel call's every access (about a
    thousand times for a small transformer)."""
    return facts_of(name).stack_style


def kernel_layout(k: Kernel, call: KernelCall, evalues: Any) -> tuple[list[int], list[int]]:
    """(arguments passed to the kernel, output value indices) of a kernel call; ``evalues``
    are the plan's values."""
    args = list(call.args)
    n_outs = k.n_outs
    if stack_style(k.name):
        return args, args[-n_outs:] if n_outs else []
    if n_outs == 0:
        # In-place op: the trailing return slot aliases the mutated argument.
        return args[:-1] if len(args) > 1 else args, []
    # Out variants end with one return slot: the out value itself for one
    # output, a TensorList of the outs for several; ops returning ``()``
    # (split_copy) have none.
    if len(args) >= 2 and args[-1] == args[-2]:
        args = args[:-1]
    elif len(args) >= 2 and isinstance(evalues[args[-1]].val, TensorList):
        # Several outs return one list; a list out (split_with_sizes_copy)
        # returns another list of the same tensors.
        if n_outs > 1 or isinstance(evalues[args[-2]].val, TensorList):
            args = args[:-1]
    return args, args[-n_outs:]


def resolve_kernels(plan: ExecutionPlan) -> list[Kernel]:
    """The kernel of each operator of ``plan``, every kernel call checked against it;
    ``MissingOperatorError`` naming every operator without one."""
    kernels = [get_kernel(op.qualified_name) for op in plan.operators]
    missing = sorted(
        {op.qualified_name for op, k in zip(plan.operators, kernels, strict=True) if k is None}
    )
    if missing:
        raise MissingOperatorError(plan.name, missing)
    for c, chain in enumerate(plan.chains):
        for pc, instr in enumerate(chain.instructions):
            call = instr.instr_args
            if isinstance(call, KernelCall):
                k = kernels[call.op_index]
                args, outs = kernel_layout(k, call, plan.values)
                check_kernel_call(
                    plan.name, f"chain {c} instruction {pc}", k, args, outs, plan.values
                )
    return kernels


def _destroy_delegates(delegates: list[tuple[Any, Any]]) -> None:
    for backend, handle in delegates:
        backend.destroy(handle)
    delegates.clear()


def init_delegates(
    owner: object,
    pte: PteFile,
    plan: ExecutionPlan,
    *,
    named_data: Mapping[str, Any],
    backend_options: Mapping[str, Mapping[str, Any]] | None,
    event_tracer: EventTracer | None,
    jit: bool,
) -> tuple[list[tuple[Any, Any]], Callable[[], Any]]:
    """(backend, handle) of each delegate of ``plan``, and the function releasing them.

    The handles are destroyed once, by that function or when ``owner`` goes away (also
    when a later delegate fails to initialize)."""
    out: list[tuple[Any, Any]] = []
    release = weakref.finalize(owner, _destroy_delegates, out)
    program = pte.program
    for d, delegate in enumerate(plan.delegates):
        backend = backends.get_backend(delegate.id)
        if backend is None or not backend.is_available():
            state = "not registered" if backend is None else "not available"
            raise MissingBackendError(
                f"method '{plan.name}': delegate {d} needs backend {delegate.id!r}, which is {state} "
                f"(registered: {backends.registered_backend_names()})"
            )
        ref = delegate.processed
        if ref.location == DataLocation.INLINE:
            processed = program.backend_delegate_data[ref.index].data
        else:
            processed = pte.delegate_segments[ref.index]
        specs = {cs.key: bytes(cs.value) for cs in delegate.compile_specs}
        context = backends.BackendInitContext(
            plan.name,
            d,
            named_data,
            backends.effective_options(delegate.id, backend_options),
            event_tracer=event_tracer,
            jit=jit,
        )
        try:
            handle = backend.init(memoryview(processed).cast("B"), specs, context)
        except Exception as e:
            raise MissingBackendError(
                f"method '{plan.name}': backend {delegate.id!r} failed to initialize delegate {d}: {e}"
            ) from e
        out.append((backend, handle))
    _check_tensor_arguments(plan, out)
    return out, release


def _check_tensor_arguments(plan: ExecutionPlan, delegates: list[tuple[Any, Any]]) -> None:
    """Refuse a delegate call passing a non-tensor where its backend reads a tensor."""
    for c, chain in enumerate(plan.chains):
        for pc, instr in enumerate(chain.instructions):
            call = instr.instr_args
            if not isinstance(call, DelegateCall):
                continue
            backend, handle = delegates[call.delegate_index]
            args = list(call.args)
            positions = getattr(backend, "tensor_arguments", None)
            for position in positions(handle, len(args)) if positions else ():
                j = args[position]
                if not isinstance(plan.values[j].val, Tensor):
                    kind = type(plan.values[j].val).__name__
                    raise InvalidProgramError(
                        f"method '{plan.name}': chain {c} instruction {pc} (delegate "
                        f"{call.delegate_index}, {plan.delegates[call.delegate_index].id}) passes "
                        f"value {j}, a {kind}, as argument {position}; the backend takes a "
                        "tensor there"
                    )


def delegate_runner(
    delegates: list[tuple[Any, Any]], call: DelegateCall
) -> Callable[[list[Any]], None]:
    """The function running delegate call ``call`` on a method's value list."""
    backend, handle = delegates[call.delegate_index]
    arg_ids = list(call.args)

    def run_delegate(v: list[Any]) -> None:
        args = [v[j] for j in arg_ids]
        result = backend.execute(handle, args)
        if result is not None:
            for j, value in zip(arg_ids, result, strict=True):
                v[j] = value

    return run_delegate
