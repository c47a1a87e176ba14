"""Programs exported by the official package: decode, check, re-encode, run officially."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.schema import (
    DataLocation,
    PteFile,
    Tensor,
    TensorDataLocation,
    decode_pte,
    dtype_of,
    encode_pte,
)

CASES = ["linear", "conv", "transformer", "mutable", "two_methods", "xnnpack"]


def _case(official, name):
    if name not in official:
        pytest.fail(f"{name} could not be exported")
    return official[name]


def _tensors(plan):
    return [v.val for v in plan.values if isinstance(v.val, Tensor)]


def _constant_bytes(pte: PteFile) -> list[bytes]:
    return [bytes(b.storage) for b in pte.program.constant_buffer]


def _weights(module) -> dict[str, bytes]:
    return {
        name: t.detach().contiguous().numpy().tobytes()
        for name, t in module.state_dict().items()
        if t.is_floating_point()
    }


def _run(runtime, data: bytes, case, calls: int | None = None):
    """Outputs of every method (and of consecutive calls for stateful programs)."""
    module = runtime._load_for_executorch_from_buffer(data)
    results = {}
    for method, inputs in case.inputs.items():
        results[method] = [
            [t.clone() for t in module.run_method(method, inputs)]
            for _ in range(calls or case.calls)
        ]
    return results


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for method in a:
        for call_a, call_b in zip(a[method], b[method], strict=True):
            assert len(call_a) == len(call_b)
            for x, y in zip(call_a, call_b, strict=True):
                assert torch.equal(x, y), method


@pytest.mark.parametrize("name", CASES)
def test_decode_contents(official, name):
    case = _case(official, name)
    pte = decode_pte(case.data)
    plans = {p.name: p for p in pte.program.execution_plan}
    assert set(plans) == set(case.inputs)
    ops = {op.qualified_name for p in plans.values() for op in p.operators}
    assert case.operators <= ops, ops - case.operators
    # Input shapes and dtypes are those of the example inputs.
    for method, inputs in case.inputs.items():
        plan = plans[method]
        got = [plan.values[i].val for i in plan.inputs]
        tensors = [t for t in got if isinstance(t, Tensor)]
        assert [list(t.sizes) for t in tensors] == [list(x.shape) for x in inputs]
        for t in tensors:
            assert t.allocation_info is not None  # inputs are planned
            assert list(t.dim_order) == list(range(len(t.sizes)))
        assert plan.outputs and all(isinstance(plan.values[i].val, Tensor) for i in plan.outputs)


@pytest.mark.parametrize("name", ["linear", "conv", "transformer", "two_methods"])
def test_constants_are_the_weights(official, name):
    case = _case(official, name)
    pte = decode_pte(case.data)
    constants = set(_constant_bytes(pte))
    assert _constant_bytes(pte)[0] == b""  # buffer 0 is reserved
    modules = [case.module] + ([case.extra["other"]] if "other" in case.extra else [])
    for module in modules:
        for wname, raw in _weights(module).items():
            assert raw in constants, f"{name}: weight {wname} not found among constants"
    # Each constant tensor's byte size matches its shape, and its data is a view.
    for plan in pte.program.execution_plan:
        for t in _tensors(plan):
            if t.allocation_info is None and t.data_buffer_idx:
                storage = pte.program.constant_buffer[t.data_buffer_idx].storage
                assert isinstance(storage, memoryview)
                assert len(storage) == int(np.prod(t.sizes)) * dtype_of(t.scalar_type).itemsize


def test_mutable_buffer(official):
    case = _case(official, "mutable")
    pte = decode_pte(case.data)
    assert pte.mutable_data is not None and len(pte.mutable_data) == 2
    assert bytes(pte.mutable_data[1].storage) == (torch.arange(3.0) + 1).numpy().tobytes()
    (plan,) = pte.program.execution_plan
    initial = [
        t for t in _tensors(plan) if t.allocation_info is not None and t.data_buffer_idx == 1
    ]
    assert len(initial) == 1 and initial[0].sizes == [3]


def test_delegate(official):
    case = _case(official, "xnnpack")
    pte = decode_pte(case.data)
    (plan,) = pte.program.execution_plan
    (delegate,) = plan.delegates
    assert delegate.id == "XnnpackBackend"
    assert delegate.processed.location == DataLocation.SEGMENT
    assert len(pte.delegate_segments) == 1 and len(pte.delegate_segments[0]) > 0
    # Weights travel as named data, keyed by hash.
    blobs = {bytes(b.data) for b in pte.named_data.values()}
    for raw in _weights(case.module).values():
        assert raw in blobs


def test_external_constants_reference_the_ptd(official):
    case = _case(official, "external")
    pte = decode_pte(case.data)
    names = {
        t.extra_tensor_info.fully_qualified_name
        for t in _tensors(pte.program.execution_plan[0])
        if t.extra_tensor_info is not None
        and t.extra_tensor_info.location == TensorDataLocation.EXTERNAL
    }
    assert names == {"weight", "bias"}


@pytest.mark.parametrize("name", CASES)
def test_reencoded_runs_in_official_runtime(official, official_runtime, name):
    case = _case(official, name)
    original = case.data
    again = encode_pte(decode_pte(original))
    expected = _run(official_runtime, original, case)
    got = _run(official_runtime, again, case)
    _assert_same(expected, got)
    # And the eager module agrees on the first call.
    eager = case.module(*case.inputs["forward"])
    eager = eager if isinstance(eager, tuple | list) else (eager,)
    for x, y in zip(expected["forward"][0], eager, strict=True):
        torch.testing.assert_close(x, y.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", CASES + ["external"])
def test_official_reencode_is_stable(official, name):
    """official -> decode -> encode -> decode -> encode: the two encodings are equal."""
    case = _case(official, name)
    once = encode_pte(decode_pte(case.data))
    assert encode_pte(decode_pte(once)) == once


def test_decode_from_mmap(official):
    import mmap

    case = _case(official, "conv")
    with open(case.pte, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        pte = decode_pte(mm)
        assert [p.name for p in pte.program.execution_plan] == ["forward"]
        weights = _weights(case.module)
        assert weights["0.weight"] in set(_constant_bytes(pte))
        del pte  # release the views before the map closes
