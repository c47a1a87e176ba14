"""The compiled tier's matrix products (kernels/blas.py, linalg/compiled_gemv.py):
numpy's own BLAS called from compiled code, large products split across numba's threads,
and OpenBLAS left at the thread count it was set to."""

from __future__ import annotations

import numpy as np
import pytest
import torch

numba = pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

from pyexecutorch.jit import blas  # noqa: E402
from pyexecutorch.kernels.linalg import compiled as linalg_compiled  # noqa: E402
from pyexecutorch.kernels.linalg.compiled_gemv import product  # noqa: E402
from pyexecutorch.runtime.threads import set_threads, thread_counts  # noqa: E402

TOL = {np.float32: {"rtol": 2e-5, "atol": 2e-4}, np.float64: {"rtol": 1e-12, "atol": 1e-11}}
needs_blas = pytest.mark.skipif(not linalg_compiled.HAS_BLAS, reason="no BLAS for compiled code")
needs_numpy_blas = pytest.mark.skipif(
    not blas.NUMPY_BLAS, reason="numpy's own OpenBLAS is not found: products are np.dot"
)


@numba.njit
def _gemm(a, b, out):  # noqa: ANN001, ANN202
    blas.gemm(a, b, out)


@numba.njit
def _product(a, b, out):  # noqa: ANN001, ANN202
    product(a, b, out)


@pytest.fixture
def two_threads():
    before = thread_counts()
    set_threads(2)
    yield
    set_threads(before["blas"] or 1)


def _operands(m: int, k: int, n: int, dtype: type, strided: bool) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(m * 7 + k * 3 + n)
    a = rng.standard_normal((m, k + 5 if strided else k)).astype(dtype)[:, :k]
    b = rng.standard_normal((n, k)).astype(dtype).T  # a transposed view: rows n apart
    b = b.copy() if not strided else np.ascontiguousarray(b)
    return a, b, np.full((m, n), np.nan, dtype)


# (m, k, n): under the split size, split by columns (wide), by rows (tall), one row,
# one column, sizes that divide into no whole cache line.
SHAPES = [(7, 13, 5), (200, 130, 171), (13, 301, 1003), (1001, 299, 13), (1, 700, 3001)]
SHAPES += [(3001, 700, 1), (97, 389, 127)]


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_products_match_torch_at_two_threads(two_threads, shape, strided, dtype):
    m, k, n = shape
    a, b, out = _operands(m, k, n, dtype, strided)
    want = (torch.from_numpy(np.ascontiguousarray(a)) @ torch.from_numpy(b)).numpy()
    _gemm(a, b, out)
    np.testing.assert_allclose(out, want, **TOL[dtype])
    out[:] = np.nan
    _product(a, b, out)
    np.testing.assert_allclose(out, want, **TOL[dtype])


@needs_blas
@pytest.mark.parametrize("threads", [1, 2])
def test_products_into_column_views(threads):
    # out[:, j0:j1] of a wider output (a split block writes such a view itself)
    before = thread_counts()
    set_threads(threads)
    try:
        a, b, _ = _operands(300, 100, 260, np.float32, False)
        wide = np.full((300, 400), 7.0, np.float32)
        _gemm(a, b, wide[:, 50:310])
        np.testing.assert_allclose(wide[:, 50:310], a @ b, **TOL[np.float32])
        assert (wide[:, :50] == 7.0).all() and (wide[:, 310:] == 7.0).all()
    finally:
        set_threads(before["blas"] or 1)


@needs_numpy_blas
def test_compiled_code_reads_numbas_thread_count():
    @numba.njit
    def threads():  # noqa: ANN202
        return blas._numba_threads()

    before = thread_counts()
    try:
        for n in (1, 2):
            set_threads(n)
            assert threads() == numba.get_num_threads() == min(n, numba.config.NUMBA_NUM_THREADS)
    finally:
        set_threads(before["blas"] or 1)


def _numpy_blas_threads() -> int:
    found = [i for i in threadpool_info() if "scipy_openblas64_" in i["filepath"]]
    return found[0]["num_threads"]


@needs_numpy_blas
def test_products_leave_the_blas_at_one_thread():
    # each call runs OpenBLAS on one thread (split or not) and leaves it there for the
    # process: setting it back woke OpenBLAS's workers to spin against numba's threads
    side = round(blas.SPLIT_PRODUCT ** (1 / 3)) + 8  # just past the split size
    with threadpool_limits(2, user_api="blas"):
        for m, n in ((4, side), (side, side), (1, side), (side, 1)):
            a, b, out = _operands(m, side, n, np.float32, False)
            _gemm(a, b, out)
            np.testing.assert_allclose(out, a @ b, **TOL[np.float32])
            _product(a, b, out)
            np.testing.assert_allclose(out, a @ b, **TOL[np.float32])
            assert _numpy_blas_threads() == 1
            threadpool_limits(2, user_api="blas")  # (as set_threads would set it again)


class _Mlp(torch.nn.Module):
    # 64 x 256 @ 256 x 512: 8M multiply-adds, split at two threads
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.up = torch.nn.Linear(256, 512)
        self.down = torch.nn.Linear(512, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


@needs_numpy_blas
def test_a_method_loaded_with_two_threads_splits_its_products_and_matches_torch():
    from pyexecutorch.exir import to_edge  # noqa: PLC0415
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    model = _Mlp().eval()
    x = torch.randn(64, 256)
    assert 64 * 256 * 512 >= blas.SPLIT_PRODUCT
    buf = to_edge(torch.export.export(model, (x,))).to_executorch().buffer
    before = thread_counts()
    try:
        method = Runtime.get().load_program(buf, jit=True, threads=2).load_method("forward")
        assert thread_counts() == {"blas": 2, "numba": min(2, numba.config.NUMBA_NUM_THREADS)}
        (got,) = method.execute([x.numpy()])
        np.testing.assert_allclose(np.asarray(got), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)
        # (numpy's OpenBLAS left at one thread by the compiled products; scipy's unused)
        assert thread_counts()["blas"] == 1
    finally:
        set_threads(before["blas"] or 1)
