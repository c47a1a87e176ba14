"""Quantized XNNPACK nodes on the compiled tier (``backends/xnnpack/compiled_quantized.py``,
``kernels/quantized/compiled_linear.py``).

- The kernels: rows quantized bit-exactly as the numpy interpreter's ``DynamicRows``
  (zero rows, one-signed rows, odd sizes); 4-bit blockwise and int8 per-channel
  products against float64 on the same integers (outputs not a multiple of the tile,
  several rows, clamps), over several calls with changing inputs; bad arguments of
  :class:`DynamicLinear` refused by name.
- The official dynamic-int8 and 8da4w XNNPACK programs: every Convert and fully
  connected node a compiled step, against the official runtime.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from pyexecutorch.backends.xnnpack.nodes_quantized import DynamicRows  # noqa: E402
from pyexecutorch.backends.xnnpack.runtime import Delegate  # noqa: E402
from pyexecutorch.kernels.quantized import compiled_linear as ql  # noqa: E402
from pyexecutorch.runtime import Runtime  # noqa: E402

from . import _quantized_programs as qp  # noqa: E402


def _rows(rng, m, k):
    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10)).astype(np.float32)
    if m > 2:
        x[1] = 0.0  # an all-zero row: multiplier 1
        x[2] = np.abs(x[2])  # one-signed: the range widened to 0
    return x


def _reference_rows(x):
    m, k = x.shape
    rows, q = DynamicRows(m, k), np.empty((m, k), np.int8)
    rows.quantize(lambda: x, lambda: q)
    return q, rows.zps.astype(np.int32), rows.scales


@pytest.mark.parametrize("m, k", [(1, 7), (5, 64), (3, 257)])
def test_quantize_rows_bit_exact_with_numpy_interpreter(m, k):
    rng = np.random.default_rng(k)
    q, zps, scales = np.empty((m, k), np.int8), np.empty(m, np.int32), np.empty(m, np.float32)
    for _ in range(3):
        x = _rows(rng, m, k)
        ql.quantize_rows(x, q, zps, scales)
        ref_q, ref_zps, ref_scales = _reference_rows(x)
        np.testing.assert_array_equal(q, ref_q)
        np.testing.assert_array_equal(zps, ref_zps)
        np.testing.assert_array_equal(scales, ref_scales)


def _expected(x, w, scales, bias, low, high):
    """float64 on the integers the kernels see: dequantized rows times weights."""
    q, zps, xs = _reference_rows(x)
    centered = q.astype(np.float64) - zps[:, None]
    if scales.ndim == 2:
        block = w.shape[1] // scales.shape[1]
        wf = w.astype(np.float64) * np.repeat(scales.astype(np.float64), block, axis=1)
        y = (centered @ wf.T) * xs[:, None]
    else:
        y = (centered @ w.T.astype(np.float64)) * xs[:, None] * scales
    if bias is not None:
        y = y + bias
    return np.clip(y, low, high)


def _fold_error(x, w, scales):
    """What XNNPACK's fold of the 4-bit zero point's share, ``zp * sum_b s_b * sum_k w``
    in float32, may lose per output: a few float32 roundings of that term."""
    if scales.ndim == 1:
        return 0.0  # (int8: exact integer sums)
    _, zps, xs = _reference_rows(x)
    block = w.shape[1] // scales.shape[1]
    sums = w.reshape(w.shape[0], -1, block).sum(axis=2, dtype=np.int64)
    share = np.abs(sums * scales.astype(np.float64)).sum(axis=1)
    return 8 * np.finfo(np.float32).eps * np.abs(zps * xs)[:, None] * share


@pytest.mark.parametrize(
    "kind, m, k, n, block",
    [("int4", 1, 256, 100, 32), ("int4", 3, 384, 48, 128), ("int4", 2, 64, 5, 8),
     ("int8", 1, 260, 100, None), ("int8", 4, 64, 33, None)],
)  # fmt: skip
def test_dynamic_linear_against_float64(kind, m, k, n, block):
    rng = np.random.default_rng(n)
    if kind == "int4":
        w = rng.integers(-8, 8, (n, k)).astype(np.int8)
        scales = rng.uniform(1e-3, 2e-2, (n, k // block)).astype(np.float32)
    else:
        w = rng.integers(-128, 128, (n, k)).astype(np.int8)
        scales = rng.uniform(1e-3, 2e-2, n).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if m != 2 else None
    low, high = (-0.5, 0.75) if m == 3 else (-np.inf, np.inf)
    linear = ql.DynamicLinear(w, scales, bias, low, high)
    out = np.full((m, n), np.nan, np.float32)
    for call in range(3):  # packed once; new rows each call
        x = _rows(rng, m, k)
        got = linear(x, out if call else None)
        expected = _expected(x, w, scales, bias, low, high)
        assert got.shape == (m, n) and got.dtype == np.float32
        bound = 2e-5 * (np.abs(expected).max() + np.abs(expected)) + _fold_error(x, w, scales)
        err = np.abs(got - expected)
        assert (err <= bound).all(), (
            f"call {call}: worst {err.max():.3g}, over by {(err - bound).max():.3g}"
        )


def test_dynamic_linear_refuses_bad_arguments():
    w = np.zeros((4, 32), np.int8)
    with pytest.raises(ValueError, match="4-bit weights must lie in"):
        ql.DynamicLinear(np.full((4, 32), 9, np.int8), np.ones((4, 1), np.float32))
    with pytest.raises(ValueError, match="blocks of a multiple of 8"):
        ql.DynamicLinear(w, np.ones((4, 8), np.float32))
    with pytest.raises(ValueError, match="weight must be a 2-D int8"):
        ql.DynamicLinear(w.astype(np.int16), np.ones(4, np.float32))
    linear = ql.DynamicLinear(w, np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"input must be float32 \(\.\.\., 32\)"):
        linear(np.zeros((2, 31), np.float32))
    with pytest.raises(ValueError, match="out must be a C-contiguous float32"):
        linear(np.zeros((2, 32), np.float32), np.zeros((2, 5), np.float32))


@pytest.fixture
def plans(monkeypatch):
    made = []
    make_plan = Delegate.make_plan

    def compiled_plan(self, key, declared=False):
        self.jit = True
        plan = make_plan(self, key, declared)
        made.append(plan)
        return plan

    monkeypatch.setattr(Delegate, "make_plan", compiled_plan)
    return made


@pytest.mark.parametrize("model, recipe", [("mlp", "dynamic"), ("mlp", "int4")])
def test_official_dynamic_programs_compiled_match_official_runtime(plans, model, recipe):
    pte = qp.official_pte(qp.quantize(model, recipe), "xnnpack")
    method = Runtime.get().load_program(pte).load_method("forward")
    for seed in (1, 2):
        inputs = qp.inputs_for(model, seed)
        got = np.asarray(method.execute([x.numpy() for x in inputs])[0])
        np.testing.assert_allclose(got, qp.official_run(pte, inputs)[0], rtol=1e-5, atol=1e-5)
    assert plans and all(p.compiled and not p.declined for p in plans), [
        getattr(p, "declined", "numpy plan") for p in plans
    ]
