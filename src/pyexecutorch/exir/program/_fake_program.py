"""A copy of an exported program whose weights are fake tensors, for passes that
only need shapes and dtypes, and the way back to the real weights."""

from __future__ import annotations

import copy

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.export import ExportedProgram


def get_fake_program(real_exported_program: ExportedProgram) -> ExportedProgram:
    """A copy of ``real_exported_program`` with a fake state dict: the graph, the
    signature and the module call graph are deep-copied; the verifiers and the
    constants are shared (both are read-only)."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake_state = {
        name: mode.from_tensor(t, static_shapes=True) if isinstance(t, torch.Tensor) else t
        for name, t in real_exported_program.state_dict.items()
    }
    memo = {
        id(real_exported_program.state_dict): fake_state,
        id(real_exported_program.constants): real_exported_program.constants,
        id(real_exported_program.verifiers): real_exported_program.verifiers,
    }
    return copy.deepcopy(real_exported_program, memo)


def update_to_real_program(
    fake_exported_program: ExportedProgram, real_exported_program: ExportedProgram
) -> None:
    """Put the real weights of ``real_exported_program`` back into the fake copy."""
    for name in fake_exported_program.state_dict:
        fake_exported_program.state_dict[name] = real_exported_program.state_dict[name]


__all__ = ["get_fake_program", "update_to_real_program"]
