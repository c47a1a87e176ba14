"""Compiled forms in two variants, serial and parallel, and the choice between them.

A parallel region costs tens of microseconds (far more on a busy machine): compiled
kernels take their parallel variant only above :data:`PARALLEL_WORK` elements. Only
compiled-form modules, which need numba, call :func:`njit_renamed` and
:func:`serial_and_parallel`.
"""

from __future__ import annotations

import types
from typing import Any

from pyexecutorch.jit.deferral import form_entry_point

PARALLEL_WORK = 1 << 18


def njit_renamed(fn: Any, name: str, **options: Any) -> Any:
    """``fn`` compiled by ``numba.njit(cache=True, **options)`` as a copy named ``name``.

    numba names its cache files after the function, so two compilations of one function
    (serial and parallel, say) would overwrite each other's; whole-method functions
    import a form by that name too.
    """
    import numba  # noqa: PLC0415 - only compiled-form modules, which need numba, call this

    copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__)
    copy.__qualname__ = name
    return numba.njit(cache=True, **options)(copy)


def serial_and_parallel(fn: Any, name: str) -> tuple[Any, Any]:
    """``fn`` compiled twice, as ``name`` and ``name_parallel`` (its ``prange`` threaded).

    Neither uses fastmath, so NaN, infinity and -0.0 come out as numpy gives them.
    """
    serial = njit_renamed(fn, name, error_model="numpy")
    parallel = njit_renamed(fn, f"{name}_parallel", parallel=True, error_model="numpy")
    return serial, parallel


def choose(variants: tuple[Any, Any], work: int) -> Any:
    """The dispatcher :func:`pick` compiles for ``work`` elements (the serial or parallel one)."""
    import numba  # noqa: PLC0415

    threads = numba.get_num_threads()
    return variants[1] if work >= PARALLEL_WORK and threads > 1 else variants[0]


def pick(variants: tuple[Any, Any], work: int, arguments: tuple[Any, ...]) -> Any:
    """The compiled function of the serial or parallel variant (of :func:`serial_and_parallel`)
    for ``work`` elements, for exactly the types of ``arguments`` (see
    :func:`~.entry_points.entry_point`).

    Callers pass C-contiguous arrays of those dtypes and ranks on every call.
    Inside :func:`~.deferral.deferred_entry_points` it may be a placeholder (see
    :func:`~.deferral.form_entry_point`).
    """
    return form_entry_point(choose(variants, work), arguments)
