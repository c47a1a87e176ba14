"""One program run on both tiers and eagerly: the compiled tier's tests compare all three."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime


def program(module: torch.nn.Module, inputs: tuple) -> bytes:
    """``module`` exported through our exporter, as ``.pte`` bytes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_edge(torch.export.export(module, inputs)).to_executorch().buffer


def both_tiers(module: torch.nn.Module, inputs: tuple):  # noqa: ANN201
    """(the compiled tier's method, the numpy tier's outputs, the compiled tier's, eager's)."""
    buf = program(module, inputs)
    arrays = [x.numpy() for x in inputs]
    numpy_tier = Runtime.get().load_program(buf, jit=False).load_method("forward")
    compiled = Runtime.get().load_program(buf, jit=True).load_method("forward")
    want = [np.asarray(o) for o in numpy_tier.execute(arrays)]
    got = [np.asarray(o) for o in compiled.execute(arrays)]
    with torch.no_grad():
        result = module(*inputs)
    eager = [o.numpy() for o in (result if isinstance(result, tuple) else (result,))]
    return compiled, want, got, eager
