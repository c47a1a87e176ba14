"""The emitter on execution-dialect programs made by the OFFICIAL exporter's passes.

Each case: the official pipeline runs up to (not including) its emitter, our
emitter emits the captured programs, our schema encodes them, and the official
runtime runs the result against torch eager. The same programs then go through
the official emitter, and the two programs are compared instruction by
instruction (operators and what each argument holds).

A representative subset runs by default; ``PYEXECUTORCH_EMIT_ALL=1`` runs the
whole model suite (about 3 minutes).
"""

from __future__ import annotations

import hashlib
import os

import pytest

from pyexecutorch.exir.emit import emit_program
from pyexecutorch.schema import encode_pte
from tests import models, official
from tests.exir._emit_support import case_execution_programs

DEFAULT = {
    "mlp",
    "embedding",
    "argmax_topk",
    "shape_ops",
    "float16",
    "scalar_input",
    "nested_outputs",
    "multi_method",
    "dynamic_batch",
    "mutable_buffer",
    "kv_cache",
    "cond",
    "while_loop",
}
CASES = (
    models.CASES
    if os.environ.get("PYEXECUTORCH_EMIT_ALL")
    else [c for c in models.CASES if c.name in DEFAULT]
)


def _tol(case: models.ModelCase) -> dict:
    tol = getattr(case, "official_tol", None) or (case.rtol, case.atol)
    return {"rtol": tol[0], "atol": tol[1]}


def _check_runs(case: models.ModelCase, pte: bytes) -> None:
    runner = official.OfficialRunner(pte)
    if case.official_mismatch:
        # The official kernels disagree with eager here: match the official program instead.
        reference = official.OfficialRunner(official.official_export(case))
        for j, inputs in enumerate(case.all_inputs()):
            official.assert_close(
                case, runner.run(inputs), reference.run(inputs), what=f"inputs #{j}"
            )
        return
    if case.stateful:
        expected = official.eager_call_outputs(case)
        for i, inputs in enumerate(case.call_sequence()):
            official.assert_close(
                case, runner.run(inputs), expected[i], what=f"call {i}", **_tol(case)
            )
    else:
        for j, inputs in enumerate(case.all_inputs()):
            got = runner.run(inputs)
            official.assert_close(
                case, got, official.eager_outputs(case, inputs), what=f"inputs #{j}", **_tol(case)
            )
    for meth, (_, inputs, _) in case.programs().items():
        if meth != "forward":
            got = runner.run(inputs, meth)
            official.assert_close(case, got, official.eager_outputs(case, method=meth), what=meth)
    for name, value in case.constant_methods.items():
        got = runner.module.run_method(name, ())
        assert list(got) == (value if isinstance(value, list) else [value]), name


# ---------------------------------------------------------------------------
# Structural comparison with the official emitter


def _blob_digest(program, index: int) -> str:
    return hashlib.sha256(bytes(program.constant_buffer[index].storage)).hexdigest()[:16]


def _qname(op) -> str:
    return f"{op.name}.{op.overload}" if op.overload else op.name


# Ours and the official schema classes share names and fields, not types.
def _describe(program, plan, index: int):
    v = plan.values[index].val
    name = type(v).__name__
    if name == "Tensor":
        alloc = v.allocation_info
        planned = None
        if alloc is not None:
            planned = (alloc.memory_id, alloc.memory_offset_low | (alloc.memory_offset_high << 32))
        data = (
            _blob_digest(program, v.data_buffer_idx)
            if alloc is None and v.data_buffer_idx
            else None
        )
        return (
            "T",
            int(v.scalar_type),
            tuple(v.sizes),
            tuple(v.dim_order),
            int(v.shape_dynamism),
            planned,
            data,
        )
    if name == "IntList":
        return ("IL", tuple(_describe(program, plan, i) for i in v.items))
    if name in ("TensorList", "OptionalTensorList"):
        return (name, tuple(None if i < 0 else _describe(program, plan, i) for i in v.items))
    if name == "Null":
        return ("N",)
    if name == "Double":
        return (name, repr(float(v.double_val)))  # the official table keeps inf/nan as strings
    if name in ("Int", "Bool", "String"):
        return (name, getattr(v, next(iter(v.__dataclass_fields__))))
    return (name, tuple(getattr(v, "items", ())))


def _canonical(program, plan):
    out = []
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        kind = type(a).__name__
        if kind == "KernelCall":
            op = _qname(plan.operators[a.op_index])
            out.append((op, tuple(_describe(program, plan, i) for i in a.args)))
        elif kind == "DelegateCall":
            out.append(("delegate", tuple(_describe(program, plan, i) for i in a.args)))
        elif kind == "JumpFalseCall":
            out.append(
                ("jf", _describe(program, plan, a.cond_value_index), a.destination_instruction)
            )
        elif kind == "MoveCall":
            out.append(
                ("move", _describe(program, plan, a.move_from), _describe(program, plan, a.move_to))
            )
        else:
            out.append((type(a).__name__,))
    return {
        "instructions": out,
        "inputs": [_describe(program, plan, i) for i in plan.inputs],
        "outputs": [_describe(program, plan, i) for i in plan.outputs],
        "container": (
            plan.container_meta_type.encoded_inp_str,
            plan.container_meta_type.encoded_out_str,
        ),
        "sizes": list(plan.non_const_buffer_sizes),
        "operators": sorted(_qname(op) for op in plan.operators),
    }


def _official_emit(methods, getters):
    official.silence_noise()
    import warnings

    from executorch.exir.emit import emit_program as official_emit_program

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return official_emit_program(methods, False, getters).program


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: models.ModelCase):
    methods, getters = case_execution_programs(case)
    out = emit_program(methods, case.constant_methods, None)
    pte = encode_pte(out.pte_file)
    _check_runs(case, pte)

    if not case.official_exportable:
        return
    ours = out.program
    theirs = _official_emit(methods, getters)
    assert [p.name for p in ours.execution_plan] == [p.name for p in theirs.execution_plan]
    for mine, ref in zip(ours.execution_plan, theirs.execution_plan, strict=True):
        a, b = _canonical(ours, mine), _canonical(theirs, ref)
        for key in a:
            assert a[key] == b[key], (
                f"{case.name}.{mine.name}: {key} differs from the official emitter"
            )
