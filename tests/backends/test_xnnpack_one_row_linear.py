"""A float32 fully connected node on one row (a decoded token) runs on the one-row kernel
(:mod:`pyexecutorch.kernels.linalg.compiled_one_row`): the bias, the depth's fused
multiply-adds in order and the clamp in one call, as XNNPACK's GEMM computes it. Bit for
bit against that order (serial and threaded, rows past the eights, column passes past
the first) and against the official runtime on an official XNNPACK export."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

pytest.importorskip("numba")

from pyexecutorch.backends.xnnpack.nodes import sequential_fma_product  # noqa: E402
from pyexecutorch.jit.variants import can_thread  # noqa: E402
from pyexecutorch.kernels.linalg import compiled_one_row as one_row  # noqa: E402
from pyexecutorch.runtime import Runtime  # noqa: E402
from pyexecutorch.runtime.threads import set_threads, thread_counts  # noqa: E402
from tests import official  # noqa: E402

CALLS = 3
L = one_row.L


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("k", "n"),
    [(7, L), (96, 5 * L), (300, 8 * L), (17, one_row.CHUNK + 3 * L)],  # rows and columns past
)  # the kernel's blocks
def test_one_row_linear_sums_in_xnnpacks_order(k, n, threads):
    rng = np.random.default_rng(k)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    x, out = np.empty(k, np.float32), np.empty(n, np.float32)
    # the process's mailbox (helpers take chunks at two threads), and one no helper reads
    mailboxes = [one_row.mailbox(), np.zeros(one_row.pool.SLOTS, np.int64)]
    before = thread_counts()
    set_threads(threads)
    try:
        for variant, mailbox in itertools.product(one_row.ONE_ROW_LINEAR, mailboxes):
            for call, (lo, hi) in enumerate([(-np.inf, np.inf), (-0.5, 2.0), (0.0, np.inf)]):
                x[:] = rng.normal(0, 1 + call, k)  # the same arrays, new values each call
                out[:] = np.nan
                variant(x, w, bias, out, np.float32(lo), np.float32(hi), mailbox)
                want = np.clip(sequential_fma_product(x[None], w, bias)[0], lo, hi)
                assert np.array_equal(_bits(out), _bits(want)), (variant, call)
    finally:
        set_threads(before["numba"] or 1)


@pytest.mark.skipif(not can_thread(), reason="numba has one thread: no helper to hand to")
def test_one_row_helpers_take_chunks_at_two_threads_and_none_at_one():
    """The helper takes column chunks of shared products at two threads (the chunks it
    finished are counted in ``DONE``), none at one, and the caller's lock is released."""
    pool = one_row.pool
    mailbox = one_row.mailbox()
    shared = one_row.ONE_ROW_LINEAR[1]
    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 64 * L)).astype(np.float32)
    bias, x = np.zeros(64 * L, np.float32), rng.standard_normal(512).astype(np.float32)
    out = np.empty(64 * L, np.float32)
    want = sequential_fma_product(x[None], w, bias)[0]
    before = thread_counts()
    deadline = time.monotonic() + 5
    while mailbox[pool.HELPERS] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert mailbox[pool.HELPERS] >= 1
    try:
        set_threads(2)
        helped, calls = 0, 0
        # 200 calls, and more until the helper has taken a chunk (up to 10 s): on a loaded
        # machine (the suite's three workers on two cores) the helper thread can go
        # unscheduled for all of the first 200
        deadline = time.monotonic() + 10
        while calls < 200 or (helped == 0 and time.monotonic() < deadline):
            shared(x, w, bias, out, np.float32(-np.inf), np.float32(np.inf), mailbox)
            assert np.array_equal(_bits(out), _bits(want))
            assert mailbox[pool.WORKERS] == 2 and mailbox[pool.LOCK] == 0
            helped += int(mailbox[pool.DONE])
            calls += 1
        assert helped > 0  # the helper took chunks
        set_threads(1)
        generation = mailbox[pool.WORD] >> pool.GEN_SHIFT
        for _ in range(20):
            shared(x, w, bias, out, np.float32(-np.inf), np.float32(np.inf), mailbox)
            assert np.array_equal(_bits(out), _bits(want))
        assert mailbox[pool.WORD] >> pool.GEN_SHIFT == generation  # no job published
    finally:
        set_threads(before["numba"] or 1)


class _OneRow(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(5 * L, 96, generator=gen) * 0.3)
        self.b1 = torch.nn.Parameter(torch.randn(5 * L, generator=gen))
        self.w2 = torch.nn.Parameter(torch.randn(2 * L, 5 * L, generator=gen) * 0.3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(torch.nn.functional.linear(x, self.w1, self.b1))  # bias, clamp
        return h, torch.nn.functional.linear(h, self.w2)  # neither


def _input(call: int) -> np.ndarray:
    return np.random.default_rng(call).normal(0, 2, (1, 96)).astype(np.float32)


@pytest.fixture(scope="module")
def program() -> bytes:
    inputs = (torch.from_numpy(_input(0)),)
    key = f"one_row_linear v1 {L}"
    return official.module_xnnpack_pte("one_row_linear", key, lambda: _OneRow().eval(), inputs)


def test_compiled_one_row_linears_equal_the_official_bit_for_bit(program, monkeypatch):
    taken = []
    fits = one_row.fits
    monkeypatch.setattr(one_row, "fits", lambda k, n: taken.append((k, n)) or fits(k, n))
    theirs = official.OfficialRunner(program)
    ours = Runtime.get().load_program(program, jit=True).load_method("forward")
    for call in range(CALLS):
        x = _input(call)
        expected = theirs.run([x])
        got = [np.asarray(o) for o in ours.execute([x])]
        for name, g, e in zip(("bias and relu", "no bias"), got, expected, strict=True):
            assert np.array_equal(_bits(g), _bits(e)), (
                f"call {call}, {name}: {int((g != e).sum())} of {g.size} differ"
            )
    assert sorted(taken) == sorted([(96, 5 * L), (5 * L, 2 * L)])  # both linears on the kernel
