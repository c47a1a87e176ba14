"""Compiled forms in two variants, serial and parallel, and the choice between them.

A parallel region costs tens of microseconds (far more on a busy machine): compiled
kernels take their parallel variant only above :data:`PARALLEL_WORK` elements. The choice
depends on the work only, never on the threads in force at load (``set_threads`` may
change them after a method has loaded): a parallel loop runs on the threads in force at
each call, one included (a few microseconds more than the serial variant). A planner
whose job split depends on the count reads it in compiled code at each call
(:func:`threads_reader`). Only compiled-form modules, which need numba, call
:func:`njit_renamed` and :func:`serial_and_parallel`.
"""

from __future__ import annotations

import functools
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


@functools.cache
def threads_reader() -> Any:
    """An intrinsic that compiled code calls to read the threads numba's parallel loops use
    now (``numba.get_num_threads()`` in compiled code holds a ctypes pointer, which numba
    refuses to cache; this calls the threading layer's function by symbol, as numba's
    parallel loops do). Made once, after numba's threading layer has started."""
    from llvmlite import ir  # noqa: PLC0415 - numba's own dependency
    from numba.core import cgutils  # noqa: PLC0415
    from numba.core import types as nb_types  # noqa: PLC0415
    from numba.extending import intrinsic  # noqa: PLC0415

    from pyexecutorch.jit import numba_env  # noqa: PLC0415

    numba_env.numba_module()  # starts the threading layer, which defines the symbol

    @intrinsic
    def threads(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            fnty = ir.FunctionType(ir.IntType(32), [])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "get_num_threads")
            return builder.sext(builder.call(fn, []), ir.IntType(64))

        return nb_types.int64(), codegen

    return threads


@functools.cache
def job_taker() -> Any:
    """An intrinsic ``take(counter)`` for compiled code: adds 1 to ``counter[0]`` (a 1-D
    int64 array) atomically and returns the value before. The threads of a ``prange`` over
    the threads in force take their jobs from one counter (a dynamic split): a thread the
    system deschedules then delays the loop by one job, not by its whole static share."""
    from llvmlite import ir  # noqa: PLC0415 - numba's own dependency
    from numba.core import types as nb_types  # noqa: PLC0415
    from numba.extending import intrinsic  # noqa: PLC0415

    @intrinsic
    def take(typingctx: Any, counter: Any) -> Any:
        ok = isinstance(counter, nb_types.Array) and counter.dtype == nb_types.int64
        if not ok or counter.ndim != 1:
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            array = context.make_array(signature.args[0])(context, builder, args[0])
            one = ir.Constant(ir.IntType(64), 1)
            return builder.atomic_rmw("add", array.data, one, "monotonic")

        return nb_types.int64(counter), codegen

    return take


def serial_and_parallel(fn: Any, name: str) -> tuple[Any, Any]:
    """``fn`` compiled twice, as ``name`` and ``name_parallel`` (its ``prange`` threaded).

    Neither uses fastmath, so NaN, infinity and -0.0 come out as numpy gives them.
    """
    serial = njit_renamed(fn, name, error_model="numpy")
    parallel = njit_renamed(fn, f"{name}_parallel", parallel=True, error_model="numpy")
    return serial, parallel


def can_thread() -> bool:
    """Whether this process can run more than one thread in numba's parallel loops."""
    import numba  # noqa: PLC0415

    return numba.config.NUMBA_NUM_THREADS > 1


def planned_threads() -> int:
    """The threads a parallel job split made at load is planned for: those in force, or
    where that is one (a later ``set_threads`` may raise it), all numba may use."""
    import numba  # noqa: PLC0415

    threads = numba.get_num_threads()
    return threads if threads > 1 else numba.config.NUMBA_NUM_THREADS


def choose(variants: tuple[Any, Any], work: int) -> Any:
    """The compiled form for ``work`` elements: the serial variant below
    :data:`PARALLEL_WORK` (or where numba has one thread only), else the parallel one,
    whose loops run on the threads in force at each call (one included)."""
    return variants[1] if work >= PARALLEL_WORK and can_thread() else variants[0]


def pick(variants: tuple[Any, Any], work: int, arguments: tuple[Any, ...]) -> Any:
    """The compiled function of the form :func:`choose` gives (of
    :func:`serial_and_parallel`) for ``work`` elements, for exactly the types of
    ``arguments`` (see :func:`~.entry_points.entry_point`).

    Callers pass C-contiguous arrays of those dtypes and ranks on every call.
    Inside :func:`~.deferral.deferred_entry_points` it may be a placeholder (see
    :func:`~.deferral.form_entry_point`).
    """
    return form_entry_point(choose(variants, work), arguments)
