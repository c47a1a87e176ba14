"""Method.execute takes exact inputs without conversion and everything else through the checks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.io import InstallError
from tests import models


def _method(name: str):  # noqa: ANN202
    case = models.CASES_BY_NAME[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pte = to_edge(models.export(case)).to_executorch().buffer
    return case, Runtime.get().load_program(pte).load_method("forward")


def _eager(case, inputs):  # noqa: ANN001, ANN202
    with torch.no_grad():
        return case.make()(*inputs)


def test_dynamic_input_at_each_size_within_its_bound():
    case, method = _method("dynamic_batch")
    for batch in (1, 3, 8, 2):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        (got,) = method.execute([x])
        expected = _eager(case, (torch.from_numpy(x),))
        assert tuple(got.shape) == (batch, expected.shape[1])
        np.testing.assert_allclose(np.asarray(got), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_dynamic_input_above_its_bound_is_refused():
    _, method = _method("dynamic_batch")
    with pytest.raises(InstallError, match=r"size 9 in dimension 0, above its upper bound 8"):
        method.execute([np.zeros((9, 16), np.float32)])


def test_exact_and_converted_inputs_compute_the_same():
    case, method = _method("mlp")
    x = case.inputs()[0].numpy()
    (exact,) = method.execute([x])
    # read-only, non-contiguous and float64 inputs take the general path
    readonly = x.copy()
    readonly.flags.writeable = False
    strided = np.asfortranarray(x)
    for other in (readonly, strided):
        (got,) = method.execute([other])
        np.testing.assert_array_equal(np.asarray(got), np.asarray(exact))
    with pytest.raises(
        ValueError,
        match="Input 0 of method 'forward' has dtype Double but the method expects Float",
    ):
        method.execute([x.astype(np.float64)])


def test_scalar_inputs_must_equal_their_exported_values():
    case, method = _method("scalar_input")
    x, scale, count = case.inputs()
    got = method.execute([x.numpy(), scale, count])
    expected = _eager(case, (x, scale, count))
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.asarray(g), e.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(InstallError, match="must be 2.5, the value the method was exported with"):
        method.execute([x.numpy(), 3.5, count])
    with pytest.raises(RuntimeError, match="Input 2 of method 'forward': the method expects Int"):
        method.execute([x.numpy(), scale, True])
