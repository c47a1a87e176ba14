"""An element selected from a 1-D input is read on every call, not once at load.

``select_copy.int`` on a 1-D tensor yields a 0-d tensor. Its load-time fast path once
took ``a[(i,)]``, a numpy scalar: a copy of the value the input held at load, which
every later call repeated (``x * pos[0]`` gave ``[0, 0]`` for pos = 3, 5, 7), and which
``_local_scalar_dense`` refused as "expects a tensor". Dynamic LLM programs read their
start position this way.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from tests import official


class ScaleByPosition(torch.nn.Module):
    def forward(self, x, pos):
        return x * pos[0]


class RowAtPosition(torch.nn.Module):
    def forward(self, x, pos):
        p = pos[0].item()
        torch._check(p >= 0)
        torch._check(p < x.shape[0])
        return x[p] * 2


CASES = {
    "scale": (ScaleByPosition, torch.ones(2)),
    "row": (RowAtPosition, torch.arange(24.0).reshape(6, 4)),
}


def _program(name: str, exporter: str) -> bytes:
    module, x = CASES[name]
    ep = torch.export.export(module(), (x, torch.tensor([0])))
    if exporter == "official":
        return official.export_programs({"forward": ep})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_edge(ep).to_executorch().buffer


@pytest.mark.parametrize("jit", [False, True], ids=["numpy", "compiled"])
@pytest.mark.parametrize("exporter", ["ours", "official"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_selected_element_follows_each_call(name, exporter, jit):
    module, x = CASES[name]
    method = Runtime.get().load_program(_program(name, exporter), jit=jit).load_method("forward")
    for position in (3, 5, 1, 3):
        (got,) = method.execute([x.numpy(), np.array([position])])
        want = module()(x, torch.tensor([position])).numpy()
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"pos={position}")
