"""Internal-consistency verification of a decoded program, before anything runs.

Every index, size, offset and dtype is checked so that loading and executing
can trust the program. Each problem raises :class:`InvalidProgramError`
naming the method and the value, instruction or delegate at fault.
"""

from __future__ import annotations

import math

from pyexecutorch.runtime.errors import InvalidProgramError
from pyexecutorch.schema.program import (
    BoolList,
    DataLocation,
    DelegateCall,
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
    Tensor,
    TensorList,
)
from pyexecutorch.schema.pte import PteFile
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_ITEMSIZE

_MAX_RANK = 16


def verify_program(pte: PteFile) -> None:
    """Check every method of the program (``Verification.InternalConsistency``)."""
    names = set()
    for plan in pte.program.execution_plan:
        if plan.name in names:
            raise InvalidProgramError(f"two methods are named '{plan.name}'")
        names.add(plan.name)
        verify_plan(pte, plan)


def verify_plan(pte: PteFile, plan: ExecutionPlan) -> None:
    method = plan.name
    values = plan.values
    n = len(values)

    def fail(msg: str) -> None:
        raise InvalidProgramError(f"method '{method}': {msg}")

    def check_index(i: int, what: str) -> None:
        if not 0 <= i < n:
            fail(f"{what} refers to value {i}, but the method has {n} values")

    arenas = plan.non_const_buffer_sizes
    for i, size in enumerate(arenas):
        if size < 0:
            fail(f"non_const_buffer_sizes[{i}] is negative ({size})")
    constants = pte.program.constant_buffer

    for i, ev in enumerate(values):
        val = ev.val
        if isinstance(val, Tensor):
            _verify_tensor(fail, i, val, arenas, constants, pte)
        elif isinstance(val, IntList):
            for j in val.items:
                check_index(j, f"value {i} (IntList) item")
                if not isinstance(values[j].val, Int):
                    fail(
                        f"value {i} (IntList) item {j} is {type(values[j].val).__name__}, expected Int"
                    )
        elif isinstance(val, TensorList):
            for j in val.items:
                check_index(j, f"value {i} (TensorList) item")
                if not isinstance(values[j].val, Tensor):
                    fail(
                        f"value {i} (TensorList) item {j} is {type(values[j].val).__name__}, expected Tensor"
                    )
        elif isinstance(val, OptionalTensorList):
            for j in val.items:
                if j == -1:
                    continue
                check_index(j, f"value {i} (OptionalTensorList) item")
                if not isinstance(values[j].val, (Tensor, Null)):
                    fail(
                        f"value {i} (OptionalTensorList) item {j} is {type(values[j].val).__name__}"
                    )
        elif isinstance(val, (DoubleList, BoolList)) or val is None:
            pass

    for what, indices in (("inputs", plan.inputs), ("outputs", plan.outputs)):
        for k, i in enumerate(indices):
            check_index(i, f"{what}[{k}]")

    n_ops = len(plan.operators)
    n_delegates = len(plan.delegates)
    for d, delegate in enumerate(plan.delegates):
        ref = delegate.processed
        if ref is None:
            fail(f"delegate {d} ({delegate.id!r}) has no processed data")
        if ref.location == DataLocation.INLINE and ref.index >= len(
            pte.program.backend_delegate_data
        ):
            fail(
                f"delegate {d} ({delegate.id!r}) refers to inline data {ref.index}, but the program has {len(pte.program.backend_delegate_data)}"
            )
        if ref.location == DataLocation.SEGMENT and ref.index >= len(pte.delegate_segments):
            fail(
                f"delegate {d} ({delegate.id!r}) refers to segment {ref.index}, which does not exist"
            )

    for c, chain in enumerate(plan.chains):
        n_instr = len(chain.instructions)
        for k, i in enumerate(chain.inputs):
            check_index(i, f"chain {c} inputs[{k}]")
        for k, i in enumerate(chain.outputs):
            check_index(i, f"chain {c} outputs[{k}]")
        for pc, instr in enumerate(chain.instructions):
            where = f"chain {c} instruction {pc}"
            args = instr.instr_args
            if isinstance(args, KernelCall):
                if not 0 <= args.op_index < n_ops:
                    fail(
                        f"{where}: operator index {args.op_index} out of range ({n_ops} operators)"
                    )
                for i in args.args:
                    check_index(i, f"{where} ({plan.operators[args.op_index].name}) argument")
            elif isinstance(args, DelegateCall):
                if not 0 <= args.delegate_index < n_delegates:
                    fail(
                        f"{where}: delegate index {args.delegate_index} out of range ({n_delegates} delegates)"
                    )
                for i in args.args:
                    check_index(i, f"{where} (delegate {args.delegate_index}) argument")
            elif isinstance(args, MoveCall):
                check_index(args.move_from, f"{where} (MoveCall) source")
                check_index(args.move_to, f"{where} (MoveCall) destination")
            elif isinstance(args, JumpFalseCall):
                check_index(args.cond_value_index, f"{where} (JumpFalseCall) condition")
                if not 0 <= args.destination_instruction <= n_instr:
                    fail(
                        f"{where}: jump destination {args.destination_instruction} out of range ({n_instr} instructions)"
                    )
            elif isinstance(args, FreeCall):
                check_index(args.value_index, f"{where} (FreeCall)")
            else:
                fail(
                    f"{where}: unknown instruction {type(args).__name__ if args is not None else 'NONE'}"
                )


def _verify_tensor(
    fail, i: int, t: Tensor, arenas: list[int], constants: list, pte: PteFile
) -> None:  # noqa: ANN001
    itemsize = SCALAR_TYPE_ITEMSIZE.get(t.scalar_type)
    if itemsize is None:
        fail(f"value {i}: unknown scalar type {int(t.scalar_type)}")
    if len(t.sizes) > _MAX_RANK:
        fail(f"value {i}: rank {len(t.sizes)} exceeds {_MAX_RANK}")
    if any(s < 0 for s in t.sizes):
        fail(f"value {i}: negative size in {t.sizes}")
    if math.prod(s for s in t.sizes if s) * itemsize >= 1 << 63:
        # numpy refuses such a shape even with a zero dimension among its sizes.
        fail(f"value {i}: sizes {t.sizes} overflow a 64-bit byte count")
    if t.dim_order and sorted(t.dim_order) != list(range(len(t.sizes))):
        fail(
            f"value {i}: dim_order {t.dim_order} is not a permutation of {len(t.sizes)} dimensions"
        )
    nbytes = math.prod(t.sizes) * itemsize
    alloc = t.allocation_info
    if alloc is not None:
        if not 0 < alloc.memory_id < len(arenas):
            fail(
                f"value {i}: memory id {alloc.memory_id} out of range ({len(arenas)} buffers; id 0 is reserved)"
            )
        end = alloc.memory_offset + nbytes
        if end > arenas[alloc.memory_id]:
            fail(
                f"value {i}: tensor of {nbytes} bytes at offset {alloc.memory_offset} extends past the end "
                f"of buffer {alloc.memory_id} ({end} > {arenas[alloc.memory_id]})"
            )
    extra = t.extra_tensor_info
    external = extra is not None and int(extra.location) == 1
    if t.data_buffer_idx and not external:
        if alloc is not None:
            # A planned tensor with data: a mutable buffer's initial value,
            # indexed into the mutable data segment.
            mutable = pte.mutable_data or []
            if t.data_buffer_idx >= len(mutable):
                fail(
                    f"value {i}: mutable data {t.data_buffer_idx} out of range ({len(mutable)} buffers)"
                )
            have = len(memoryview(mutable[t.data_buffer_idx].storage).cast("B"))
            if nbytes > have:
                fail(
                    f"value {i}: mutable tensor needs {nbytes} bytes but mutable data {t.data_buffer_idx} has {have}"
                )
            return
        if t.data_buffer_idx >= len(constants):
            fail(
                f"value {i}: constant buffer {t.data_buffer_idx} out of range ({len(constants)} buffers)"
            )
        have = len(memoryview(constants[t.data_buffer_idx].storage).cast("B"))
        if nbytes > have:
            fail(
                f"value {i}: constant tensor needs {nbytes} bytes but buffer {t.data_buffer_idx} has {have}"
            )
