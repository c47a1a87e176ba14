"""Constants folded at ``to_executorch`` are lifted constant inputs of the method (a
placeholder with a CONSTANT_TENSOR input spec, the value in ``constants``), as the
official ``constant_prop_pass`` leaves its results, not ``get_attr`` nodes."""

from __future__ import annotations

import numpy as np
import torch
from torch.export.graph_signature import InputKind

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from tests import official


class _Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(5, 4)

    def forward(self, a, x):
        return a + 1.0, self.linear(x)


def test_a_folded_weight_is_a_lifted_constant_input_and_the_program_runs():
    model = _Linear().eval()
    args = (torch.randn(2, 3), torch.randn(6, 5))
    et = to_edge(torch.export.export(model, args)).to_executorch()
    ep = et.exported_program()
    gm = ep.graph_module
    assert not [n for n in gm.graph.nodes if n.op == "get_attr"]
    specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
    folded = specs["_folded_linear_weight_permute_copy0"]
    assert folded.kind == InputKind.CONSTANT_TENSOR
    assert folded.target == "_folded_linear_weight_permute_copy0"
    torch.testing.assert_close(ep.constants[folded.target], model.linear.weight.detach().T)
    # The bias, the 1.0 of a + 1.0, the folded weight (the weight itself is no longer
    # read), then the user inputs.
    assert [(s.kind, s.arg.name) for s in ep.graph_signature.input_specs] == [
        (InputKind.PARAMETER, "p_linear_bias"),
        (InputKind.CONSTANT_TENSOR, "_lifted_tensor_constant0"),
        (InputKind.CONSTANT_TENSOR, "_folded_linear_weight_permute_copy0"),
        (InputKind.USER_INPUT, "a"),
        (InputKind.USER_INPUT, "x"),
    ]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert [n.name for n in placeholders] == [s.arg.name for s in ep.graph_signature.input_specs]
    spec = placeholders[2].meta["spec"]
    assert spec.const and spec.mem_id is None and spec.mem_offset is None
    method = Runtime.get().load_program(et.buffer).load_method("forward")
    runner = official.OfficialRunner(et.buffer)
    with torch.no_grad():
        for seed in range(3):
            g = torch.Generator().manual_seed(seed)
            inputs = (torch.randn(2, 3, generator=g), torch.randn(6, 5, generator=g))
            expected = [t.numpy() for t in model(*inputs)]
            ours = method.execute([t.numpy() for t in inputs])
            theirs = runner.run(inputs)
            for got, other, want in zip(ours, theirs, expected, strict=True):
                np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
                np.testing.assert_allclose(np.asarray(got), other, rtol=1e-6, atol=1e-6)
