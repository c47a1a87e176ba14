"""Dynamic-shape methods on the compiled tier: static plans, one per input shapes
(:mod:`pyexecutorch.runtime.shape_plans`), checked against torch eager as one loaded
method grows, shrinks and repeats sizes; bound errors and run-time errors as the numpy
tier reports them; state kept across plans; the official exporter's dynamic program.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim, export

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.io import InstallError
from tests import models, official
from tests.exir.test_dynamic_dims import CASES, _compiled, _eager, _inputs

# Cases whose every static plan compiles whole (the others run their static plans
# instruction by instruction: some kernel there has no compiled step at those shapes).
_WHOLE = {
    "slice_plus_linear",
    "slice_along",
    "slice_step",
    "select",
    "expand",
    "cat_along_and_across",
    "split_across",
    "halves_along_derived",
    "derived_view",
    "views",
    "reductions",
    "sdpa_seq",
}


def _order(sizes: tuple[int, ...]) -> list[int]:
    """Each size twice in a row (the second call builds its plan), then back and forth."""
    a, b, c = sizes
    return [b, b, a, a, c, c, a, b, c, b, a, c]


def _load(pte: bytes, jit: bool = True):  # noqa: ANN202
    return Runtime.get().load_program(pte, jit=jit).load_method("forward")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_static_plans_match_eager(case):
    module, pte = _compiled(case)
    method = _load(pte)
    for n, size in enumerate(_order(case.sizes)):
        inputs = _inputs(case, size, seed=n)
        expected = _eager(module, inputs)
        got = [np.asarray(o) for o in method.execute([x.numpy() for x in inputs])]
        assert [g.shape for g in got] == [e.shape for e in expected], (case.name, size)
        official.assert_close(case.name, got, expected, rtol=1e-4, atol=1e-5, what=f"size {size}")
    plan = method.plan
    assert plan.shape_plans
    assert len(plan.static_plans) == len(case.sizes)
    if case.name in _WHOLE:
        assert all(p.whole for p in plan.static_plans.values())


class _MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _mlp_program() -> tuple[torch.nn.Module, bytes]:
    torch.manual_seed(0)
    module = _MLP().eval()
    batch = Dim("batch", min=1, max=8)
    ep = export(module, (torch.randn(4, 16),), dynamic_shapes=({0: batch},))
    return module, to_edge(ep).to_executorch().buffer


def _mlp_error(method, x: np.ndarray) -> tuple[type, str]:  # noqa: ANN001
    with pytest.raises(Exception) as info:  # noqa: PT011 - compared with the numpy tier's
        method.execute([x])
    return type(info.value), str(info.value)


def test_bound_errors_as_the_numpy_tier():
    module, pte = _mlp_program()
    compiled, numpy_tier = _load(pte), _load(pte, jit=False)
    assert not numpy_tier.plan.shape_plans
    for size in (3, 3, 8, 8, 1, 1):
        x = np.random.default_rng(size).standard_normal((size, 16), dtype=np.float32)
        got = np.asarray(compiled.execute([x])[0])
        with torch.no_grad():
            np.testing.assert_allclose(got, module(torch.from_numpy(x)).numpy(), rtol=1e-5)
    plans = compiled.plan.static_plans
    assert sorted(plans) == [((1, 16),), ((3, 16),), ((8, 16),)]
    assert all(p.whole for p in plans.values())
    for bad in (np.zeros((9, 16), np.float32), np.zeros((3, 17), np.float32)):
        kind, message = _mlp_error(compiled, bad)
        assert (kind, message) == _mlp_error(numpy_tier, bad)
        assert kind is InstallError and "upper bound" in message
    kind, message = _mlp_error(compiled, np.zeros((3,), np.float32))
    assert (kind, message) == _mlp_error(numpy_tier, np.zeros((3,), np.float32))
    # still right after the refusals, at a planned size
    x = np.ones((8, 16), np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(np.asarray(compiled.execute([x])[0]), want, rtol=1e-5)


class _Accumulate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(6))

    def forward(self, x):
        self.total.add_(x.sum(0))
        return x * 2 + self.total


def test_state_kept_across_plans():
    torch.manual_seed(0)
    module = _Accumulate()
    batch = Dim("batch", min=1, max=16)
    ep = export(_Accumulate(), (torch.randn(4, 6),), dynamic_shapes=({0: batch},))
    method = _load(to_edge(ep).to_executorch().buffer)
    for n, size in enumerate([2, 2, 5, 5, 2, 16, 16, 5, 2]):
        x = torch.randn(size, 6, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = module(x.clone()).numpy()
        np.testing.assert_allclose(np.asarray(method.execute([x.numpy()])[0]), want, rtol=1e-5)
    assert len(method.plan.static_plans) == 3


class _Lookup(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)

    def forward(self, idx):
        e = self.emb(idx)
        return e.reshape(idx.shape[0], 2, 2) * 2


def test_run_time_error_names_the_program_instruction():
    torch.manual_seed(0)
    ep = export(_Lookup(), (torch.tensor([1, 2, 3]),), dynamic_shapes=({0: Dim("n", max=8)},))
    pte = to_edge(ep).to_executorch().buffer
    compiled, numpy_tier = _load(pte), _load(pte, jit=False)
    good = np.array([1, 2, 3, 4], np.int64)
    for _ in range(3):
        np.testing.assert_allclose(
            np.asarray(compiled.execute([good])[0]), np.asarray(numpy_tier.execute([good])[0])
        )
    assert list(compiled.plan.static_plans) == [((4,),)]
    bad = np.array([1, 2, 30, 4], np.int64)  # index out of range, at the planned shape
    kind, message = _mlp_error(compiled, bad)
    assert (kind, message) == _mlp_error(numpy_tier, bad)
    assert "aten::embedding.out" in message


def test_official_dynamic_program():
    case = models.CASES_BY_NAME["dynamic_batch"]
    pte = official.official_export(case)
    method = _load(pte)
    calls = [case.inputs(), *case.alt_inputs()] * 2
    for inputs in calls:
        expected = official.eager_outputs(case, inputs)
        got = [np.asarray(o) for o in method.execute([x.numpy() for x in inputs])]
        assert [g.shape for g in got] == [e.shape for e in expected]
        official.assert_close(case.name, got, expected, rtol=case.rtol, atol=case.atol)
    plans = method.plan.static_plans
    assert len(plans) == len(calls) // 2
    assert all(p.whole for p in plans.values())
