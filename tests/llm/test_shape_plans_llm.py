"""Static plans of dynamic-length methods that read a position from their inputs' data.

An LLM program reads its start position with ``item()`` and slices its rotary tables
with it: the compiled tier keeps that scalar live in its static plan for each input
length (see ``runtime/shape_plans``), so each call reads the position it is given. A
slice clamped at the end of its dimension would be shorter than the plan's: that call
raises, as the numpy tier's does, rather than reading a stale tail.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.errors import ExecutionError

ROWS, WIDTH = 16, 8


class Window(torch.nn.Module):
    """``x * table[p : p + s]`` for a start position ``p`` read from ``pos``."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer(
            "table", torch.arange(ROWS * WIDTH, dtype=torch.float32).view(ROWS, WIDTH)
        )

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        p = pos[0].item()
        torch._check(p >= 0)
        torch._check(p < ROWS)
        return x * self.table[p : p + x.shape[1]] + 1.0


@pytest.fixture(scope="module")
def program() -> bytes:
    """Our export (the official ``to_executorch`` refuses the slice's unbacked bound:
    ``GuardOnDataDependentSymNode``; the official LLM programs' tests cover its files)."""
    seq = torch.export.Dim("seq", min=1, max=ROWS)
    ep = torch.export.export(
        Window(),
        (torch.ones(1, 3, WIDTH), torch.tensor([0])),
        dynamic_shapes=({1: seq}, None),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_edge(ep).to_executorch().buffer


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "compiled"])
def test_position_follows_each_call(program, jit):
    method = Runtime.get().load_program(program, jit=jit).load_method("forward")
    rng = np.random.default_rng(0)
    # each length twice or more (its plan is built on the second call), positions changing
    calls = [(3, 0), (3, 5), (1, 2), (1, 9), (3, 13), (1, 15), (5, 4), (5, 11), (1, 0)]
    for seq, position in calls:
        x = rng.standard_normal((1, seq, WIDTH)).astype(np.float32)
        (got,) = method.execute([x, np.array([position])])
        want = Window()(torch.from_numpy(x), torch.tensor([position])).numpy()
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"{seq=} {position=}")
    plan = method.plan
    if jit:
        assert plan.shape_plans and set(plan.static_plans) == {((1, s, WIDTH),) for s in (1, 3, 5)}
        # each one compiled function, the position in a cell it reads per call
        assert all(static.whole for static in plan.static_plans.values())
    else:
        assert not plan.shape_plans


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "compiled"])
def test_clamped_slice_raises(program, jit):
    method = Runtime.get().load_program(program, jit=jit).load_method("forward")
    x = np.ones((1, 4, WIDTH), np.float32)
    for position in (0, 12, 3):  # a static plan for length 4 on the compiled tier
        method.execute([x, np.array([position])])
    if jit:  # (its compiled slice checks the length the position gives)
        assert all(static.whole for static in method.plan.static_plans.values())
    # rows 14 and 15 only: two rows where the other operand has four
    with pytest.raises(ExecutionError, match="slice_copy|broadcast|shape"):
        method.execute([x, np.array([14])])
    (got,) = method.execute([x, np.array([2])])  # and the method goes on
    np.testing.assert_array_equal(np.asarray(got), Window().table[None, 2:6].numpy() + 1.0)
