"""A whole-method function's arrays passed as the words of one array
(runtime/whole_arguments.py, runtime/bound_arrays.py): rebuilt inside compiled code
with their dtypes, shapes, strides and memory, whatever their rank and layout."""

from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

from pyexecutorch.runtime.bound_arrays import bound_array  # noqa: E402
from pyexecutorch.runtime.whole_arguments import (  # noqa: E402
    WholeFunction,
    describe,
    kinds_of,
    layout_of,
)


@numba.njit
def _scaled_copy(meta):  # noqa: ANN001, ANN202
    src = bound_array(meta, 0, np.float32, 3, "A")
    dst = bound_array(meta, 7, np.float64, 3, "C")
    count = bound_array(meta, 14, np.int64, 0, "C")
    for i in range(src.shape[0]):
        for j in range(src.shape[1]):
            for k in range(src.shape[2]):
                dst[i, j, k] = src[i, j, k] * 2.0
    count[()] = src.size
    return dst.sum()


def test_arrays_are_rebuilt_on_their_own_memory_any_strides():
    base = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    src = base[::2, 1:, ::-2]  # strided, negative steps, an offset start
    dst = np.zeros(src.shape, np.float64)
    count = np.zeros((), np.int64)
    arrays = (src, dst, count)
    assert [layout_of(a) for a in arrays] == ["A", "C", "C"]
    total = _scaled_copy(describe(arrays))
    np.testing.assert_array_equal(dst, src * 2.0)  # written through, in the caller's array
    assert count[()] == src.size
    assert total == (src * 2.0).sum()


@numba.njit
def _first_of_fortran(meta):  # noqa: ANN001, ANN202
    a = bound_array(meta, 0, np.float64, 2, "F")
    return a[1, 0] + a.shape[0] * 100 + a.strides[1]


def test_fortran_layout_keeps_its_strides():
    a = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    assert _first_of_fortran(describe([a])) == a[1, 0] + 200 + a.strides[1]


def test_a_whole_function_checks_the_kinds_it_binds():
    arrays = (np.zeros((2, 3), np.float32), np.zeros(4, np.int64))
    function = WholeFunction(lambda meta: meta, kinds_of(arrays))
    meta = function.bind(arrays)
    assert meta.dtype == np.int64 and meta[0] == arrays[0].ctypes.data
    np.testing.assert_array_equal(function(*arrays), meta)
    with pytest.raises(ValueError, match="takes 2 arrays, not 1"):
        function.bind(arrays[:1])
    with pytest.raises(ValueError, match="array 0: expected float32 of rank 2"):
        function.bind((np.zeros((2, 3), np.float64), arrays[1]))
    with pytest.raises(ValueError, match="array 0: expected layout C, got A"):
        function.bind((np.zeros((2, 6), np.float32)[:, ::2], arrays[1]))


def test_a_method_compiled_whole_takes_one_argument():
    import torch

    from pyexecutorch.exir import to_edge
    from pyexecutorch.runtime import Runtime

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    pte = to_edge(torch.export.export(model.eval(), (x,))).to_executorch().buffer
    method = Runtime.get().load_program(pte, jit=True).load_method("forward")
    source = method.plan.whole_source
    assert "def whole(meta):" in source
    assert source.count("bound_array(meta,") == len(method._loaded.whole_arrays)
    (got,) = method.execute([x.numpy()])
    with torch.no_grad():
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-6)
