"""The channels-last steps of pooling, spatial means, cat and split (kernels/pool/compiled_nhwc.py).

Each step runs on channels-last arrays (logical N, C, H, W over N, H, W, C memory) and
is checked against torch eager and the reference numpy kernel (on the same values in
NCHW memory), over generated shapes: kernels 2-3, strides 1-2, padding 0-1, both ceil
modes, dilation 1-2 for max pooling, images 1x1 to 33x33, channels 1, 3, 8, 17, 48, 96,
batches of 1-2, float32 and float64, with NaN, infinities and signed-zero ties among
the values. The outs each step claims (channels-last, and a one-pixel out in either
layout) are checked, and the cases it declines return None. The steps' functions run
inside a generated whole method as the runtime compiles them, and their parallel
compilations compute what the serial ones do.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("numba", reason="the compiled forms need numba (the jit extra)")

from pyexecutorch.kernels import get_kernel  # noqa: E402
from pyexecutorch.kernels.pool import compiled_nhwc as nhwc  # noqa: E402
from pyexecutorch.kernels.pool import pool  # noqa: E402
from pyexecutorch.kernels.registry import KernelError  # noqa: E402
from pyexecutorch.runtime import whole_method  # noqa: E402

# (the reference kernels' sums of inf and -inf warn as numpy computes them)
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered")


@pytest.fixture(autouse=True, scope="module")
def _serial_steps():
    """Each step is its serial compilation (the parallel ones are checked by calling them
    directly), so that the module compiles each kernel's parallel form once, for float32,
    however large the generated cases: one thread, and no work large enough for the
    parallel variant (which a step takes by its work alone, whatever the threads at load)."""
    import numba  # noqa: PLC0415

    from pyexecutorch.jit import variants  # noqa: PLC0415

    threads, least, elements = (
        numba.get_num_threads(),
        variants.PARALLEL_WORK,
        nhwc.PARALLEL_ELEMENTS,
    )
    numba.set_num_threads(1)
    variants.PARALLEL_WORK = nhwc.PARALLEL_ELEMENTS = 1 << 62
    yield
    variants.PARALLEL_WORK, nhwc.PARALLEL_ELEMENTS = least, elements
    numba.set_num_threads(threads)


F32, F64 = np.float32, np.float64
TOL = {F32: {"rtol": 2e-5, "atol": 2e-6}, F64: {"rtol": 1e-12, "atol": 1e-12}}
CHANNELS = [1, 3, 8, 17, 48, 96]


def _channels_last(shape, dtype, values=None):  # noqa: ANN001, ANN202
    """A channels-last array of logical ``shape`` (N, C, H, W), holding ``values``."""
    n, c, h, w = shape
    a = np.empty((n, h, w, c), dtype).transpose(0, 3, 1, 2)
    a[...] = np.nan if values is None else values
    return a


def _values(rng, shape, dtype, special=True):  # noqa: ANN001, ANN202
    """Normal values, with NaN, infinities, signed zeros and ties at random places."""
    x = rng.standard_normal(shape).astype(dtype)
    if special and x.size >= 8:
        flat = x.reshape(-1)
        spots = rng.choice(x.size, size=max(8, x.size // 40), replace=False)
        kinds = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.25, -0.0, 0.0]
        flat[spots] = [kinds[i % len(kinds)] for i in range(len(spots))]
    return x


def _run(step):  # noqa: ANN001, ANN202
    assert step is not None, "the step declined"
    function, args = step
    function(*args)


def _same_values(got, want):  # noqa: ANN001, ANN202
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _valid_geometry(shape, k, s, p, d, ceil, max_pool):  # noqa: ANN001, ANN202
    try:
        op = "max_pool2d_with_indices" if max_pool else "avg_pool2d"
        return pool._pool_geometry(op, np.empty(shape), k, s, p, d, ceil, max_pool)[-1]
    except KernelError:
        return None


def _pool_cases(count, seed, max_pool):  # noqa: ANN001, ANN202
    """Valid pooling geometries over the brief's ranges (a seeded draw)."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < count:
        k = int(rng.integers(2, 4))
        s = int(rng.integers(1, 3))
        p = int(rng.integers(0, 2))
        d = int(rng.integers(1, 3)) if max_pool else 1
        ceil = bool(rng.integers(0, 2))
        hw = (int(rng.integers(1, 34)), int(rng.integers(1, 34)))
        if rng.random() < 0.3:
            hw = (hw[0], hw[0])
        shape = (int(rng.integers(1, 3)), CHANNELS[len(cases) % len(CHANNELS)], *hw)
        if _valid_geometry(shape, k, s, p, d, ceil, max_pool) is not None:
            cases.append((shape, k, s, p, d, ceil))
    return cases


MAX_CASES = _pool_cases(36, 1, True) + [
    ((1, 8, 32, 32), 3, 2, 1, 1, False),  # a resnet stem
    ((1, 17, 31, 31), 3, 2, 0, 1, True),  # squeezenet's ceil-mode windows
    ((2, 48, 15, 15), 3, 2, 0, 1, True),
    ((1, 3, 1, 1), 2, 2, 1, 1, True),
    ((2, 96, 2, 2), 2, 1, 0, 1, False),
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", MAX_CASES, ids=[str(c) for c in MAX_CASES])
def test_max_pool_matches_torch_and_the_reference(case, dtype):
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    values = _values(rng, shape, dtype)
    want = F.max_pool2d(torch.from_numpy(values), k, s, p, d, ceil).numpy()
    ref = np.zeros(want.shape, dtype)
    get_kernel("aten::max_pool2d_with_indices.out").fn(
        values, [k, k], [s, s], [p, p], [d, d], ceil, ref, np.zeros(want.shape, np.int64)
    )
    x = _channels_last(shape, dtype, values)
    out = _channels_last(want.shape, dtype)
    _run(nhwc.max_pool2d_step(x, out, [k, k], [s, s], [p, p], [d, d], ceil))
    _same_values(out, want)
    # (the reference picks the later of -0.0 and 0.0 when they tie: it folds each tap
    # with np.maximum(best, tap), which returns its second argument on ties)
    np.testing.assert_array_equal(out, ref)


def test_max_pool_ties_and_nan_as_torch_picks_them():
    # Each window's taps in row-major order: -0.0 before 0.0 stays -0.0, 0.0 before -0.0
    # stays 0.0, a NaN anywhere wins; over many channels (whole and masked vectors) and
    # pixels (batched and alone).
    rng = np.random.default_rng(5)
    for dtype in (F32, F64):
        for c in (1, 5, 16, 37, 70):
            x = rng.choice(
                np.array([-0.0, 0.0, -1.0, np.nan], dtype),
                (2, c, 9, 11),
                p=[0.45, 0.45, 0.08, 0.02],
            )
            want = F.max_pool2d(torch.from_numpy(x), 3, 2, 1).numpy()
            out = _channels_last(want.shape, dtype)
            _run(nhwc.max_pool2d_step(_channels_last(x.shape, dtype, x), out, 3, 2, 1, 1, False))
            assert np.signbit(want).any() and (~np.signbit(want) & (want == 0)).any()
            _same_values(out, want)


AVG_CASES = _pool_cases(30, 2, False) + [
    ((1, 64, 16, 16), 3, 1, 1, 1, False),
    ((1, 96, 16, 16), 2, 2, 0, 1, False),
    ((2, 17, 33, 33), 3, 2, 1, 1, True),
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", AVG_CASES, ids=[str(c) for c in AVG_CASES])
def test_avg_pool_matches_torch_and_the_reference(case, dtype):
    shape, k, s, p, _, ceil = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    values = _values(rng, shape, dtype)
    values[..., :2, :3] = -0.0  # windows of -0.0 average to 0.0
    for include, override in [(True, None), (False, None), (False, 3)]:
        want = F.avg_pool2d(torch.from_numpy(values), k, s, p, ceil, include, override).numpy()
        ref = get_kernel("aten::avg_pool2d.out").fn(
            values, [k, k], [s, s], [p, p], ceil, include, override, np.zeros(want.shape, dtype)
        )
        x = _channels_last(shape, dtype, values)
        out = _channels_last(want.shape, dtype)
        _run(nhwc.avg_pool2d_step(x, out, [k, k], [s, s], [p, p], ceil, include, override))
        np.testing.assert_allclose(out, want, **TOL[dtype])
        np.testing.assert_allclose(out, ref, **TOL[dtype])
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(out[zero]), np.signbit(want[zero]))


# (input shape, output size): global averages, even and uneven windows, an output as
# large as the input and larger than it
ADAPTIVE = [
    ((1, 320, 2, 2), (1, 1)),
    ((2, 17, 7, 7), (1, 1)),
    ((1, 48, 33, 33), (1, 1)),
    ((1, 8, 14, 14), (7, 7)),
    ((2, 3, 10, 13), (3, 5)),
    ((1, 96, 9, 9), (4, 2)),
    ((1, 17, 5, 6), (5, 6)),
    ((1, 3, 3, 4), (5, 7)),
    ((1, 1, 1, 1), (2, 3)),
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", ADAPTIVE, ids=[str(c) for c in ADAPTIVE])
def test_adaptive_avg_pool_matches_torch_and_the_reference(case, dtype):
    shape, size = case
    values = _values(np.random.default_rng(3), shape, dtype)
    want = F.adaptive_avg_pool2d(torch.from_numpy(values), size).numpy()
    ref = get_kernel("aten::_adaptive_avg_pool2d.out").fn(
        values, list(size), np.zeros(want.shape, dtype)
    )
    x = _channels_last(shape, dtype, values)
    out = _channels_last(want.shape, dtype)
    _run(nhwc.adaptive_avg_pool2d_step(x, out))
    np.testing.assert_allclose(out, want, **TOL[dtype])
    np.testing.assert_allclose(out, ref, **TOL[dtype])
    if size == (1, 1):  # a one-pixel out is both layouts: a C-contiguous one serves too
        dense = np.full(want.shape, np.nan, dtype)
        _run(nhwc.adaptive_avg_pool2d_step(x, dense))
        np.testing.assert_array_equal(dense, out)


# (input shape): SE blocks' 1x1-8x8 over 48-576 channels, and images whose float32 sums
# run past FLOAT32_RUN pixels (float32 runs, added in float64)
MEANS = [
    (1, 48, 1, 1),
    (2, 17, 3, 5),
    (1, 96, 4, 4),
    (1, 576, 8, 8),
    (2, 3, 9, 8),
    (1, 8, 33, 33),
    (1, 40, 70, 65),
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape", MEANS, ids=[str(s) for s in MEANS])
def test_mean_over_h_and_w_matches_torch_and_the_reference(shape, dtype):
    rng = np.random.default_rng(4)
    values = (rng.standard_normal(shape) + 3.0).astype(dtype)  # sums that grow
    values[0, 0] = -0.0  # a plane of -0.0 averages to 0.0
    if shape[1] > 2:
        values[0, 1, 0, 0], values[0, 2, -1, -1] = np.nan, -np.inf
    n, c = shape[:2]
    exact = torch.from_numpy(values.astype(F64)).mean((2, 3)).numpy()
    for keepdim, dims in [(True, [2, 3]), (False, [-1, -2])]:
        want = torch.from_numpy(values).mean(dims, keepdim).numpy()
        ref = get_kernel("aten::mean.out").fn(
            values, dims, keepdim, None, np.zeros(want.shape, dtype)
        )
        out = _channels_last((n, c, 1, 1), dtype) if keepdim else np.full((n, c), np.nan, dtype)
        _run(nhwc.mean_hw_step(_channels_last(shape, dtype, values), out))
        got = out.reshape(n, c)
        np.testing.assert_allclose(got, want.reshape(n, c), **TOL[dtype])
        np.testing.assert_allclose(got, ref.reshape(n, c), **TOL[dtype])
        # float32 means within a few roundings of the float64 one, as the reference's
        np.testing.assert_allclose(
            got, exact, rtol=4 * np.finfo(dtype).eps if dtype == F32 else 1e-13
        )
        assert not np.signbit(got[0, 0])


def test_mean_of_a_long_float32_window_is_within_a_rounding_of_the_exact_one():
    # 6400 pixels of about 1000: one float32 running sum per channel ends 10-35 units in
    # the last place off; float32 runs of FLOAT32_RUN pixels added in float64 do not
    x = (1000 + np.random.default_rng(8).random((1, 16, 80, 80))).astype(F32)
    exact = x.astype(F64).mean((2, 3)).reshape(-1)
    out = _channels_last((1, 16, 1, 1), F32)
    _run(nhwc.mean_hw_step(_channels_last(x.shape, F32, x), out))
    assert (np.abs(out.reshape(-1) - exact) <= np.spacing(exact.astype(F32))).all()


# (piece channel counts, batch, image): SqueezeNet's expand halves, ShuffleNet's halves,
# masked channel runs, one-pixel images, four pieces
CATS = [
    ([16, 16], 1, (16, 16)),
    ([64, 64], 1, (13, 13)),
    ([58, 58], 2, (7, 7)),
    ([3, 17, 1], 1, (5, 4)),
    ([8, 48, 96, 1], 2, (3, 3)),
    ([5, 7], 2, (1, 1)),
]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("case", CATS, ids=[str(c) for c in CATS])
def test_cat_and_split_channels_match_torch(case, dtype):
    sizes, n, hw = case
    rng = np.random.default_rng(6)
    parts = [_values(rng, (n, c, *hw), dtype) for c in sizes]
    want = torch.cat([torch.from_numpy(p) for p in parts], 1).numpy()
    pieces = [_channels_last(p.shape, dtype, p) for p in parts]
    out = _channels_last(want.shape, dtype)
    _run(nhwc.cat_channels_step(pieces, out))
    _same_values(out, want)
    np.testing.assert_array_equal(out, get_kernel("aten::cat.out").fn(parts, 1, out.copy()))

    outs = [_channels_last(p.shape, dtype) for p in parts]
    _run(nhwc.split_channels_step(_channels_last(want.shape, dtype, want), outs))
    for got, expected in zip(outs, torch.split(torch.from_numpy(want), sizes, 1), strict=True):
        _same_values(got, expected.numpy())


def test_the_steps_decline_what_they_do_not_handle():
    x = _channels_last((1, 8, 6, 6), F32, 1.0)
    nchw = np.ones((1, 8, 6, 6), F32)
    out = _channels_last((1, 8, 3, 3), F32)
    assert nhwc.max_pool2d_step(x, out, 2, 2, 0, 1, False) is not None
    assert nhwc.max_pool2d_step(nchw, out, 2, 2, 0, 1, False) is None  # an NCHW input
    assert nhwc.max_pool2d_step(x, np.zeros((1, 8, 3, 3), F32), 2, 2, 0, 1, False) is None
    assert nhwc.max_pool2d_step(x, _channels_last((1, 8, 4, 4), F32), 2, 2, 0, 1, False) is None
    assert nhwc.max_pool2d_step(x, _channels_last((1, 8, 3, 3), F64), 2, 2, 0, 1, False) is None
    assert nhwc.max_pool2d_step(x, out, 2, 2, 2, 1, False) is None  # padding past half
    assert nhwc.max_pool2d_step(x.astype(np.int32), out, 2, 2, 0, 1, False) is None
    read_only = _channels_last((1, 8, 3, 3), F32)
    read_only.flags.writeable = False
    assert nhwc.max_pool2d_step(x, read_only, 2, 2, 0, 1, False) is None
    assert nhwc.avg_pool2d_step(x, out, 2, 2, 0, False, True, 0) is None  # divisor 0
    assert nhwc.avg_pool2d_step(nchw, out, 2, 2, 0, False, True, None) is None
    assert nhwc.adaptive_avg_pool2d_step(x, np.zeros((1, 8, 3, 3), F32)) is None
    assert nhwc.adaptive_avg_pool2d_step(x, x) is None  # its own input
    assert nhwc.mean_hw_step(nchw, np.zeros((1, 8), F32)) is None
    assert nhwc.mean_hw_step(x, np.zeros((1, 8, 2, 1), F32)) is None
    assert nhwc.mean_hw_step(x, np.zeros((8, 2), F32)[:, 0:1].T) is None  # strided (N, C)
    halves = [_channels_last((1, 4, 6, 6), F32, 1.0) for _ in range(2)]
    assert nhwc.cat_channels_step(halves, x) is not None
    assert nhwc.cat_channels_step([np.ones((1, 4, 6, 6), F32)] * 2, x) is None
    assert nhwc.cat_channels_step(halves * 3, _channels_last((1, 24, 6, 6), F32)) is None
    assert nhwc.cat_channels_step(halves, _channels_last((1, 9, 6, 6), F32)) is None
    assert nhwc.cat_channels_step([halves[0], x[:, :4]], x) is None  # reads its own out
    assert nhwc.split_channels_step(x, halves) is not None
    assert nhwc.split_channels_step(x, [halves[0], halves[0]]) is None  # one out twice
    assert nhwc.split_channels_step(nchw, halves) is None


def test_steps_run_in_a_generated_whole_method_and_in_parallel():
    """The steps compile into one function as the runtime's whole method makes it (their
    functions importable by name, their arguments arrays and exact scalars), and each
    function's parallel compilation computes what the serial one does."""
    rng = np.random.default_rng(7)
    values = _values(rng, (2, 24, 17, 17), F32)
    x = _channels_last(values.shape, F32, values)
    pooled = _channels_last((2, 24, 9, 9), F32)
    avg = _channels_last((2, 24, 9, 9), F32)
    halves = [_channels_last((2, 12, 9, 9), F32) for _ in range(2)]
    joined = _channels_last((2, 24, 9, 9), F32)
    mean = np.zeros((2, 24), F32)
    steps = [
        nhwc.max_pool2d_step(x, pooled, 3, 2, 1, 1, True),
        nhwc.avg_pool2d_step(x, avg, 3, 2, 1, False, False, None),
        nhwc.split_channels_step(pooled, halves),
        nhwc.cat_channels_step(halves[::-1], joined),
        nhwc.mean_hw_step(joined, mean),
    ]
    compiled = whole_method.compile_steps([whole_method.Step(f, a) for f, a in steps])
    assert compiled is not None
    function, arrays, _ = compiled
    function(*arrays)
    t = torch.from_numpy(values)
    want = F.max_pool2d(t, 3, 2, 1, 1, True)
    _same_values(pooled, want.numpy())
    np.testing.assert_allclose(avg, F.avg_pool2d(t, 3, 2, 1, False, False).numpy(), **TOL[F32])
    swapped = torch.cat([want[:, 12:], want[:, :12]], 1)
    _same_values(joined, swapped.numpy())
    np.testing.assert_allclose(mean, swapped.mean((2, 3)).numpy(), **TOL[F32])

    pairs = [nhwc.MAX_POOL_NHWC, nhwc.WINDOW_AVERAGE_NHWC, nhwc.SPLIT2_NHWC, nhwc.CAT2_NHWC]
    pairs.append(nhwc.LONG_WINDOW_AVERAGE_NHWC)  # (the mean: 81 float32 pixels a window)
    outs = [[pooled], [avg], halves, [joined], [mean]]
    for (serial, parallel), step, written in zip(pairs, steps, outs, strict=True):
        assert step[0] is serial  # (the work is small)
        expected = [o.copy() for o in written]
        for o in written:
            o[...] = 0
        parallel(*step[1])
        for o, e in zip(written, expected, strict=True):
            np.testing.assert_array_equal(o, e)


def test_steps_from_parallel_elements_take_the_parallel_form_at_one_and_two_threads(
    monkeypatch,
):
    """A concatenation and a max pool of PARALLEL_ELEMENTS work (fire-module sizes, far
    below jit.variants.PARALLEL_WORK) take the parallel compilation where numba can run two
    threads, and give torch's values at two and at one thread over calls with new values."""
    import numba  # noqa: PLC0415

    from pyexecutorch.jit.variants import can_thread  # noqa: PLC0415
    from pyexecutorch.runtime.threads import set_threads  # noqa: PLC0415

    monkeypatch.setattr(nhwc, "PARALLEL_ELEMENTS", 1 << 14)
    halves = [_channels_last((1, 16, 32, 32), F32) for _ in range(2)]
    joined = _channels_last((1, 32, 32, 32), F32)
    pooled = _channels_last((1, 32, 16, 16), F32)
    cat = nhwc.cat_channels_step(halves, joined)
    pool_step = nhwc.max_pool2d_step(joined, pooled, 3, 2, 1, 1, False)
    assert joined.size == nhwc.PARALLEL_ELEMENTS * 2 and pooled.size * 9 > (1 << 14)
    assert cat[0] is nhwc.CAT2_NHWC[can_thread()]
    assert pool_step[0] is nhwc.MAX_POOL_NHWC[can_thread()]
    rng = np.random.default_rng(11)
    before = numba.get_num_threads()
    try:
        for call, threads in enumerate([2, 1, 2]):
            set_threads(threads)
            for half in halves:
                half[...] = _values(rng, half.shape, F32)
            cat[0](*cat[1])
            pool_step[0](*pool_step[1])
            want = torch.cat([torch.from_numpy(np.array(h)) for h in halves], 1)
            np.testing.assert_array_equal(joined, want.numpy(), err_msg=str(call))
            _same_values(pooled, F.max_pool2d(want, 3, 2, 1, 1, False).numpy())
    finally:
        set_threads(before)
