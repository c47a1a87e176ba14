"""Bad programs fail at load with errors naming the method and the value or instruction."""

from __future__ import annotations

import pytest

from pyexecutorch.runtime import (
    ExecutionError,
    InvalidProgramError,
    MissingOperatorError,
    Runtime,
    Verification,
)
from pyexecutorch.schema import KernelCall, Operator, Tensor, decode_pte, encode_pte
from tests import models, official


@pytest.fixture(scope="module")
def mlp_pte() -> bytes:
    return official.official_export(models.CASES_BY_NAME["mlp"])


def _mutated(pte: bytes, mutate) -> bytes:  # noqa: ANN001
    f = decode_pte(pte)
    mutate(f.program.execution_plan[0])
    return encode_pte(f)


def _load(data: bytes, verification=Verification.InternalConsistency):  # noqa: ANN001
    return Runtime.get().load_program(data, verification=verification).load_method("forward")


def test_value_index_out_of_range(mlp_pte):
    def mutate(plan):  # noqa: ANN001
        instr = plan.chains[0].instructions[0].instr_args
        assert isinstance(instr, KernelCall)
        instr.args[0] = 9999

    with pytest.raises(
        InvalidProgramError,
        match=r"method 'forward': chain 0 instruction 0 .* refers to value 9999",
    ):
        _load(_mutated(mlp_pte, mutate))


def test_operator_index_out_of_range(mlp_pte):
    def mutate(plan):  # noqa: ANN001
        plan.chains[0].instructions[1].instr_args.op_index = 77

    with pytest.raises(InvalidProgramError, match=r"instruction 1: operator index 77 out of range"):
        _load(_mutated(mlp_pte, mutate))


def test_tensor_larger_than_its_arena(mlp_pte):
    def mutate(plan):  # noqa: ANN001
        for i, ev in enumerate(plan.values):
            if isinstance(ev.val, Tensor) and ev.val.allocation_info is not None:
                ev.val.sizes = [s * 1000 for s in ev.val.sizes] or [1000]
                mutate.index = i
                return

    data = _mutated(mlp_pte, mutate)
    with pytest.raises(
        InvalidProgramError,
        match=rf"value {mutate.index}: tensor of \d+ bytes .* extends past the end of buffer 1",
    ):
        _load(data)
    # Minimal verification skips the check, but loading still refuses the tensor.
    with pytest.raises(InvalidProgramError, match=rf"value {mutate.index}: tensor of \d+ bytes"):
        _load(data, Verification.Minimal)


def test_unknown_instruction(mlp_pte):
    def mutate(plan):  # noqa: ANN001
        plan.chains[0].instructions[0].instr_args = None

    with pytest.raises(
        InvalidProgramError, match=r"chain 0 instruction 0: unknown instruction NONE"
    ):
        _load(_mutated(mlp_pte, mutate))


def test_missing_kernels_listed_together(mlp_pte):
    def mutate(plan):  # noqa: ANN001
        plan.operators.append(Operator("custom::frobnicate", "out"))
        plan.operators.append(Operator("custom::zap", ""))
        plan.chains[0].instructions[0].instr_args.op_index = len(plan.operators) - 2
        plan.chains[0].instructions[1].instr_args.op_index = len(plan.operators) - 1

    with pytest.raises(MissingOperatorError) as info:
        _load(_mutated(mlp_pte, mutate))
    assert str(info.value) == (
        "method 'forward' calls 2 operator(s) with no kernel: custom::frobnicate.out, custom::zap"
    )


def test_kernel_failure_names_instruction_and_operator():
    # An index past the embedding table is the caller's mistake, caught by the kernel.
    case = models.CASES_BY_NAME["embedding"]
    method = _load(official.official_export(case))
    tokens = case.inputs()[0].numpy().copy()
    method.execute([tokens])
    tokens[0, 0] = 1_000
    with pytest.raises(
        ExecutionError,
        match=r"method 'forward' failed at instruction \d+ \(aten::embedding\.out\): .*1000",
    ):
        method.execute([tokens])
