"""README's "Writing a backend" example, run as written: its code blocks are read from the
README, so the example cannot drift from the API (an ``is`` check on an operator target,
which finds no edge operator, once made its partitioner tag nothing)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def _backend_section_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Writing a backend", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_readme_backend_delegates_relus_and_runs():
    blocks = _backend_section_blocks()
    assert len(blocks) >= 2, "README's backend section lost its example"
    definition, usage = blocks[0], blocks[1]

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.relu(torch.relu(x) * 2.0) - 1.0

    model = Model().eval()
    args = (torch.randn(3, 5),)
    namespace: dict = {"model": model, "args": args}
    exec(compile(definition, "README.md (backend)", "exec"), namespace)
    namespace["exported"] = torch.export.export(model, args)
    exec(compile(usage, "README.md (usage)", "exec"), namespace)

    from pyexecutorch.runtime import Runtime

    et = namespace["et"]
    # Two relus apart (a multiply between them): two delegates of the example's backend.
    assert [d.id for d in et.executorch_program.execution_plan[0].delegates] == [
        "ReluBackend",
        "ReluBackend",
    ]
    program = Runtime.get().load_program(bytes(et.buffer))
    for _ in range(3):  # a fresh input each call
        x = torch.randn(3, 5)
        (out,) = program.load_method("forward").execute([x.numpy()])
        np.testing.assert_allclose(out, model(x).numpy(), rtol=1e-6, atol=1e-6)
