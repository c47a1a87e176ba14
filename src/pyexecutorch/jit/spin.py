"""Intrinsics for compiled threads that hand work to each other without a parallel region.

numba's parallel loops start and join a team of OpenMP threads for every loop; a decoded
token's linears are some twenty such loops of ~50 us each, and on this VM each start and
join cost ~40 us of CPU (a sleeping thread woken through the kernel, spin-waits at two
barriers), as much as the second thread saved. A thread that polls shared words instead
(:mod:`pyexecutorch.kernels.linalg.one_row_pool`) needs these, all on 1-D int64 arrays
(or plain machine calls):

* :func:`load` / :func:`store`: an element read with acquire / written with release
  ordering (never torn, never hoisted out of a loop);
* :func:`fetch_add`: adds to an element atomically and returns the value before;
* :func:`compare_swap`: writes an element if it holds an expected value, returning the
  value it held (the write happened where that is the expected one);
* :func:`pause`: the CPU's spin-wait hint (x86 ``pause``; nothing elsewhere);
* :func:`cycles`: the CPU's cycle counter (``llvm.readcyclecounter``: TSC ticks on x86);
* :func:`yield_cpu` / :func:`sleep_us`: libc's ``sched_yield`` and ``usleep``;
* :func:`float32_at`: a float32 pointer at an address (``numba.carray`` makes the array).

Imported only by the compiled tier (it needs numba).
"""

from __future__ import annotations

import platform
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def _slot_types(a: Any, i: Any, *words: Any) -> bool:
    """An element of a 1-D int64 array by an integer index, and integer words."""
    return (
        isinstance(a, types.Array)
        and a.dtype == types.int64
        and a.ndim == 1
        and all(isinstance(t, types.Integer) for t in (i, *words))
    )


def _slot(context: Any, builder: Any, signature: Any, args: Any) -> tuple[Any, list[Any]]:
    """The element's pointer and the further arguments as int64 values."""
    index = context.cast(builder, args[1], signature.args[1], types.intp)
    data = context.make_array(signature.args[0])(context, builder, args[0]).data
    words = [
        context.cast(builder, v, t, types.int64)
        for v, t in zip(args[2:], signature.args[2:], strict=True)
    ]
    return builder.gep(data, [index]), words


@intrinsic
def load(typingctx: Any, a: Any, i: Any) -> Any:
    if not _slot_types(a, i):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer, _ = _slot(context, builder, signature, args)
        return builder.load_atomic(pointer, "acquire", 8)

    return types.int64(a, i), codegen


@intrinsic
def store(typingctx: Any, a: Any, i: Any, v: Any) -> Any:
    if not _slot_types(a, i, v):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer, (value,) = _slot(context, builder, signature, args)
        builder.store_atomic(value, pointer, "release", 8)
        return context.get_dummy_value()

    return types.none(a, i, v), codegen


@intrinsic
def fetch_add(typingctx: Any, a: Any, i: Any, v: Any) -> Any:
    if not _slot_types(a, i, v):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer, (value,) = _slot(context, builder, signature, args)
        return builder.atomic_rmw("add", pointer, value, "acq_rel")

    return types.int64(a, i, v), codegen


@intrinsic
def compare_swap(typingctx: Any, a: Any, i: Any, expected: Any, new: Any) -> Any:
    if not _slot_types(a, i, expected, new):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer, (old, value) = _slot(context, builder, signature, args)
        pair = builder.cmpxchg(pointer, old, value, "acq_rel", "acquire")
        return builder.extract_value(pair, 0)

    return types.int64(a, i, expected, new), codegen


@intrinsic
def pause(typingctx: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if _X86:
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(
                cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause"), []
            )
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def cycles(typingctx: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(_I64, [])
        return builder.call(
            cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter"), []
        )

    return types.int64(), codegen


@intrinsic
def yield_cpu(typingctx: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(_I32, [])
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, "sched_yield"), [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def sleep_us(typingctx: Any, us: Any) -> Any:
    if not isinstance(us, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = ir.FunctionType(_I32, [_I32])
        value = builder.trunc(context.cast(builder, args[0], signature.args[0], types.int64), _I32)
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, "usleep"), [value])
        return context.get_dummy_value()

    return types.none(us), codegen


@intrinsic
def float32_at(typingctx: Any, address: Any) -> Any:
    if not isinstance(address, types.Integer):
        return None
    pointer = types.CPointer(types.float32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        value = context.cast(builder, args[0], signature.args[0], types.int64)
        return builder.inttoptr(value, context.get_value_type(pointer))

    return pointer(address), codegen
