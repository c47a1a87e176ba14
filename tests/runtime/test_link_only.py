"""Link-only helpers (pyexecutorch.jit.link_only): compiled as IR that their callers link and
optimise, with no module passes and no machine code of their own.

A two-level helper chain under a plain numba kernel gives numpy's results over several
calls with changing sizes and values; the helpers' own native functions never reach the
execution engine; calling a helper from Python is a TypeError naming it.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

import numba  # noqa: E402

from pyexecutorch.jit.link_only import LinkOnlyLibrary, link_only  # noqa: E402


@link_only(error_model="numpy")
def _scaled(x, i, a):
    return a * x[i]


@link_only(error_model="numpy", forceinline=True)
def _pair_sum(x, i, a):
    return _scaled(x, i, a) + _scaled(x, i + 1, a)


@numba.njit(error_model="numpy")
def _pair_sums(x, a, out):
    for i in range(out.size):
        out[i] = _pair_sum(x, i, a)


def _engine_defines(dispatcher):
    """For each compiled signature of ``dispatcher``: (its library is link-only, the
    execution engine defines its native function)."""
    found = []
    for result in dispatcher.overloads.values():
        engine = result.library.codegen._engine
        found.append(
            (
                isinstance(result.library, LinkOnlyLibrary),
                engine.is_symbol_defined(result.fndesc.llvm_func_name),
            )
        )
    return found


def test_a_kernel_calling_link_only_helpers_computes_what_numpy_does():
    rng = np.random.default_rng(0)
    for size, a in ((5, 2.0), (17, -0.5), (64, 3.25)):
        x = rng.standard_normal(size)
        out = np.empty(size - 1)
        _pair_sums(x, a, out)
        np.testing.assert_array_equal(out, a * x[:-1] + a * x[1:])
    # every helper signature compiled into a link-only library, none into the engine
    assert _engine_defines(_scaled) == [(True, False)]
    assert _engine_defines(_pair_sum) == [(True, False)]


def test_a_link_only_helper_called_from_python_is_a_type_error():
    @link_only()
    def twice(v):
        return 2 * v

    with pytest.raises(TypeError, match=r"^.*twice is compiled only into the compiled code"):
        twice(3)
    with pytest.raises(TypeError, match=r"twice is compiled only into the compiled code"):
        twice(4)  # (compiled once: the same stand-in answers again)
    assert _engine_defines(twice) == [(True, False)]

    @numba.njit
    def caller(v):
        return twice(v) + 1

    assert [caller(v) for v in (3, 10, -7)] == [7, 21, -13]


def test_a_link_only_helper_has_no_machine_code_to_cache():
    with pytest.raises(TypeError, match="a link-only helper has no machine code to cache"):
        link_only(cache=True)
