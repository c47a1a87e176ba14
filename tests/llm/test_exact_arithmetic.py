"""The float operators of the official LLM programs, bit for bit against the official runtime.

An 8da4w program quantizes its activations to int8 after every normalisation: an output
one ulp from the official one flips a code wherever it lands on a rounding boundary, and
the KV cache keeps the flip (the Qwen2 8da4w drift of test_official_llm_programs). So
these operators are compared with ``array_equal``, not a tolerance, on both tiers and over
several calls with changing inputs:

* XNNPACK's sin, cos, sigmoid and 1/sqrt (its own approximations, not correctly rounded;
  1/sqrt from the CPU's estimate instruction), whose kernels the official delegate picks
  by the CPU's features: AVX-512F (``vrsqrt14ps``) or AVX2 (``rsqrtps``), each tier
  emulating this host's, and both tiers agreeing on each variant's arithmetic;
* the portable ``mean`` (a running float32 sum, then a division), on the rows of an
  RMS norm.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch.runtime import Runtime
from pyexecutorch.schema.pte import decode_pte
from tests import official

TIERS = {"numpy": False, "compiled": True}
CALLS = 3
SIZE = 4096


class _Ops(torch.nn.Module):
    def forward(self, x: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mean = torch.mean(x * x, dim=-1, keepdim=True)  # the square delegated, not the mean
        return torch.sin(x), torch.cos(x), torch.sigmoid(x), torch.rsqrt(p), mean


def _inputs(call: int) -> list[np.ndarray]:
    """Call ``call``'s inputs: angles and sigmoid arguments over the ranges the programs
    see and beyond, positive values over many binades for 1/sqrt (and special values)."""
    rng = np.random.default_rng(call)
    x = np.concatenate(
        [rng.uniform(-130, 130, SIZE // 2), rng.normal(0, 3, SIZE // 2 - 10)]
    ).astype(np.float32)
    specials = [0, -0.0, 1e-40, np.inf, -np.inf, np.nan, 88, -150, 1e30, -1e30]
    x = np.concatenate([x, np.array(specials, np.float32)])
    p = np.exp(rng.uniform(-90, 85, SIZE - 10)).astype(np.float32)
    p = np.concatenate(
        [p, np.array([1, 4, 2, 1e-40, 3.4e38, 0, -0.0, np.inf, -1, np.nan], np.float32)]
    )
    return [x.reshape(-1, 64), p.reshape(-1, 64)]


@pytest.fixture(scope="module")
def program() -> bytes:
    """The official XNNPACK export of ``_Ops`` (cached)."""

    inputs = tuple(torch.from_numpy(a) for a in _inputs(0))
    key = repr(SIZE) + "v1"
    return official.module_xnnpack_pte("exact_arithmetic", key, _Ops, inputs)


def test_the_program_delegates_the_unary_operators_and_keeps_the_mean_portable(program):
    plan = decode_pte(program).program.execution_plan[0]
    assert [d.id for d in plan.delegates] == ["XnnpackBackend"]
    assert "aten::mean.out" in {op.qualified_name for op in plan.operators}


@pytest.mark.parametrize("tier", TIERS)
def test_operators_equal_the_official_bit_for_bit(program, tier):
    theirs = official.OfficialRunner(program)
    ours = Runtime.get().load_program(program, jit=TIERS[tier]).load_method("forward")
    for call in range(CALLS):
        inputs = _inputs(call)
        expected = theirs.run(inputs)
        got = [np.asarray(o) for o in ours.execute(inputs)]
        names = ("sin", "cos", "sigmoid", "rsqrt", "mean")
        for name, g, e in zip(names, got, expected, strict=True):
            same = (g.view(np.uint32) == e.view(np.uint32)) | (np.isnan(g) & np.isnan(e))
            where = np.flatnonzero(~same.reshape(-1))
            arguments = inputs[1 if name == "rsqrt" else 0].reshape(-1)
            first = (
                "" if name == "mean" or not where.size else f", first at {arguments[where[0]]!r}"
            )
            assert not where.size, (
                f"call {call}: {name} differs from the official on {where.size} of {g.size}{first}"
            )


@pytest.mark.parametrize(
    ("node", "exact", "plain"),
    [
        ("XNNSigmoid", "sigmoid", lambda x: 1 / (1 + np.exp(-x.astype(np.float64)))),
        ("XNNSin", "sin", lambda x: np.sin(x.astype(np.float64))),
        ("XNNCos", "cos", lambda x: np.cos(x.astype(np.float64))),
    ],
)
def test_numpy_tier_emulates_up_to_its_limit_and_takes_numpys_function_past_it(node, exact, plain):
    # The emulation costs ~100 ns a value on the numpy tier: a CNN's activations take
    # numpy's function (within an ulp or two of XNNPACK's), an LLM's per-token tensors
    # XNNPACK's own bits.
    from pyexecutorch.backends.xnnpack import exact_math, nodes

    run = nodes._UNARY[node]()
    rng = np.random.default_rng(7)
    for size in (nodes.EXACT_NUMPY_LIMIT, nodes.EXACT_NUMPY_LIMIT + 1):
        x = rng.uniform(-8, 8, size).astype(np.float32)
        out = np.empty_like(x)
        run(x, out)
        emulated = getattr(exact_math, exact)(x)
        if size <= nodes.EXACT_NUMPY_LIMIT:
            assert np.array_equal(out.view(np.uint32), emulated.view(np.uint32))
        else:
            np.testing.assert_allclose(out, plain(x), rtol=3e-7, atol=1e-7)
            np.testing.assert_allclose(out, emulated, rtol=1e-6, atol=1e-6)


def test_the_variant_follows_the_cpu_features_as_xnnpacks_config():
    from pyexecutorch.backends.xnnpack import exact_math
    from pyexecutorch.jit import xnnpack_coefficients as coefficients

    intel = {"sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vnni"}
    zen3 = {"sse2", "avx", "avx2", "fma"}
    assert coefficients.variant(intel) == coefficients.AVX512F == "avx512f"
    assert coefficients.variant(zen3) == coefficients.AVX2 == "avx2"
    # LLVM's host features: a map with false entries
    assert coefficients.variant({"avx512f": False, "avx2": True, "fma": True}) == "avx2"
    assert coefficients.variant({"avx512f": True, "avx2": True}) == "avx512f"
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n"
    assert exact_math.host_flags(cpuinfo) == frozenset({"fpu", "sse2", "avx", "avx2", "fma"})
    assert exact_math.host_flags("processor\t: 0\n") == frozenset()
    # this host: both tiers picked the same kernels, from its real features
    from pyexecutorch.jit import xnnpack_math

    assert exact_math.VARIANT == xnnpack_math.VARIANT
    avx512 = exact_math.VARIANT == "avx512f"
    assert exact_math.sigmoid is (exact_math.sigmoid_avx512f if avx512 else exact_math.sigmoid_avx2)
    assert exact_math.rsqrt is (exact_math.rsqrt_avx512f if avx512 else exact_math.rsqrt_avx)
    assert xnnpack_math.xnn_sigmoid_f32 is (
        xnnpack_math.sigmoid_avx512f if avx512 else xnnpack_math.sigmoid_avx2
    )


def _sweep() -> np.ndarray:
    """float32 arguments over every binade, both signs, with the special values."""
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    near = rng.normal(0, 20, 1 << 18).astype(np.float32)
    specials = np.array(
        [0, -0.0, 1e-40, -1e-40, np.inf, -np.inf, np.nan, 87.33, -87.34], np.float32
    )
    return np.concatenate([bits.view(np.float32), near, specials])


def _compiled(name: str):  # noqa: ANN202 - a numba dispatcher
    from numba import njit

    from pyexecutorch.jit import xnnpack_math

    f = getattr(xnnpack_math, name)

    @njit(error_model="numpy")
    def run(x, out):  # noqa: ANN001, ANN202
        for i in range(x.size):
            out[i] = f(x[i])

    def call(x: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        run(x, out)
        return out

    return call


@pytest.mark.parametrize("name", ["sigmoid_avx512f", "sigmoid_avx2", "rsqrt_avx512f"])
def test_both_tiers_compute_each_variant_alike(name):
    # Each variant on any x86-64 host (the official checks only this host's).
    from pyexecutorch.backends.xnnpack import exact_math

    x = _sweep()
    if name.startswith("rsqrt"):
        x = np.abs(x)
    got = _compiled(name)(x)
    expected = getattr(exact_math, name)(x)
    same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
    assert same.all(), f"{name}: {np.count_nonzero(~same)} values differ, first at {x[~same][0]!r}"


def test_the_kernels_vector_silu_is_the_scalar_sigmoid_steps():
    # The convolutions' SiLU epilogue (16-lane vectors: one vpermi2ps for the table, one
    # vscalefps for the scaling) against x * the scalar steps, bit for bit, with the
    # arguments whose exponent step overflows to -inf (|x| past 2.3587e38: NaN).
    from numba import njit

    from pyexecutorch.jit import simd, xnnpack_math

    if not xnnpack_math.SILU_VECTORS:
        pytest.skip("the kernels apply SiLU in vectors only with AVX-512F")
    edge = np.linspace(2.3586e38, 2.3589e38, 4096, dtype=np.float32)
    sweep = _sweep()
    x = np.concatenate([sweep, edge, -edge, np.zeros(16, np.float32)])
    x = x[: x.size // 16 * 16]

    @njit(error_model="numpy")
    def vectors(x, out):  # noqa: ANN001, ANN202
        xp, op = simd.pointer(x), simd.pointer(out)
        for i in range(0, x.size, 16):
            simd.store(op, i, xnnpack_math.vector_silu(simd.load(xp, i)))

    got, scalar = np.empty_like(x), _compiled("sigmoid_avx512f")(x)
    vectors(x, got)
    expected = x * scalar
    same = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
    assert same.all(), f"{np.count_nonzero(~same)} values differ, first at {x[~same][0]!r}"
    assert np.isnan(got[sweep.size + np.argmax(edge > 2.3588e38)])


def test_the_numpy_tier_rsqrtps_table_is_the_instruction():
    # Where the delegate runs avx_rsqrt, the compiled tier calls rsqrtps itself and the
    # numpy tier reads an AMD Zen 3's estimate from a table: equal for every mantissa of
    # [1, 4), scaled over the exponents, and at the special values. (With AVX-512F the
    # table is not used, and another vendor's rsqrtps is not this table.)
    from pyexecutorch.backends.xnnpack import exact_math

    if exact_math.VARIANT != "avx2":
        pytest.skip("this CPU has AVX-512F: the delegate's 1/sqrt is vrsqrt14ps, not rsqrtps")
    mantissas = np.arange(1 << 23, dtype=np.uint32)
    for exponents in ((127, 128), (1, 2), (253, 254)):
        x = np.concatenate([(mantissas | (e << 23)).view(np.float32) for e in exponents])
        got, expected = exact_math.rsqrt_avx(x), _compiled("rsqrt_avx")(x)
        different = np.count_nonzero(got.view(np.uint32) != expected.view(np.uint32))
        assert not different, f"exponents {exponents}: {different} of {x.size} differ"
    x = np.array([0, -0.0, 1e-40, np.inf, -1, np.nan, 3.4e38], np.float32)
    got, expected = exact_math.rsqrt_avx(x), _compiled("rsqrt_avx")(x)
    assert np.array_equal(got, expected, equal_nan=True)
