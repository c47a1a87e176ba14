"""A kernel's first compile is announced at INFO (the CLI shows it): one line when it
compiles, none when it is already there (issue 28: progress during a cold compile)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

numba = pytest.importorskip("numba")


def test_a_kernel_compile_is_announced_once(caplog):
    from pyexecutorch.jit import numba_env  # noqa: PLC0415
    from pyexecutorch.jit.entry_points import entry_point  # noqa: PLC0415

    numba_env.numba_module()

    @numba.njit  # (not cached on disk: it compiles in every run of this test)
    def scaled_sum_for_progress(a, b):
        return (a * 2.5 + b).sum()

    x, y = np.arange(6.0), np.ones(6)
    with caplog.at_level(logging.INFO, logger="pyexecutorch.compiled"):
        first = entry_point(scaled_sum_for_progress, (x, y))
        again = entry_point(scaled_sum_for_progress, (2 * x, y))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    announced = [ln for ln in lines if "scaled_sum_for_progress" in ln]
    assert len(announced) == 1, lines
    assert announced[0].startswith("compiling test_a_kernel_compile_is_announced_once.")
    assert f"later loads read it from {numba_env.cache_dir()}" in announced[0]
    assert first(x, y) == pytest.approx(float((x * 2.5 + y).sum()))
    assert again(2 * x, y) == pytest.approx(float((2 * x * 2.5 + y).sum()))
