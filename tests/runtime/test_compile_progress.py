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


def test_numbas_ssa_scope_warning_is_hidden_and_others_are_not():
    """A cold load of a transformer printed numba's pedantic "variable '...' is not in
    scope" check (an inlined closure in a generated whole-method function) once per
    variable; numba_env filters it when it imports numba, and only it."""
    import warnings  # noqa: PLC0415

    from pyexecutorch.jit import numba_env  # noqa: PLC0415

    pedantic = numba.core.errors.NumbaIRAssumptionWarning
    with warnings.catch_warnings(record=True) as seen:
        # pytest puts its own "always" filters first: test the package's filter alone.
        warnings.resetwarnings()
        numba_env._quiet_ssa_scope_check(numba)
        warnings.warn(pedantic("variable '_exp_v113.1' is not in scope."), stacklevel=1)
        warnings.warn(pedantic("some other IR assumption"), stacklevel=1)
    assert [str(w.message).split("\n")[0] for w in seen] == ["some other IR assumption"]


def test_nested_compiles_are_numbered_in_the_order_they_start(caplog):
    """A kernel's callee (its job, called by symbol) compiles inside the kernel's compile:
    each announcement counts the compiles started so far (the CLI showed "1 so far" for a
    kernel, its parallel form and its job alike)."""
    import re  # noqa: PLC0415

    from pyexecutorch.jit import numba_env  # noqa: PLC0415

    with caplog.at_level(logging.INFO, logger="pyexecutorch.compiled"):
        with numba_env.compiling("kernel(float32)", announce="progress_kernel"):
            with numba_env.compiling("job(float32)", announce="progress_job"):
                pass
        with numba_env.compiling("other(float32)", announce="progress_other"):
            pass
    lines = [r.getMessage() for r in caplog.records if "progress_" in r.getMessage()]
    counts = [int(re.search(r"\((\d+) so far in this process", ln).group(1)) for ln in lines]
    assert [ln.split()[1] for ln in lines] == ["progress_kernel", "progress_job", "progress_other"]
    assert counts == [counts[0], counts[0] + 1, counts[0] + 2], lines
