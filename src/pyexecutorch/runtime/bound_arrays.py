"""``bound_array``: an array rebuilt inside compiled code from words of ``meta`` (see
:mod:`pyexecutorch.runtime.whole_arguments`). Imported by generated whole-method modules
only (it needs numba)."""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def bound_array(typingctx: Any, meta: Any, offset: Any, dtype: Any, ndim: Any, layout: Any) -> Any:
    """The array of ``dtype`` (a numpy scalar type), rank ``ndim`` and numba ``layout``
    whose data address, shape and strides are ``meta[offset:]`` (1 + 2 * ndim words); it
    owns nothing."""
    if not (
        isinstance(meta, types.Array)
        and meta.dtype == types.int64
        and meta.ndim == 1
        and isinstance(offset, types.Integer)
        and isinstance(dtype, types.NumberClass)
        and isinstance(ndim, types.IntegerLiteral)
        and isinstance(layout, types.StringLiteral)
    ):
        return None
    rank = ndim.literal_value
    array_type = types.Array(dtype.dtype, rank, layout.literal_value)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        words = context.make_array(signature.args[0])(context, builder, args[0])
        base = builder.gep(words.data, [args[1]])
        i64 = ir.IntType(64)

        def word(k: int) -> Any:
            return builder.load(builder.gep(base, [ir.Constant(i64, k)]))

        array = context.make_array(array_type)(context, builder)
        intp = context.get_value_type(types.intp)
        dims = [word(1 + d) for d in range(rank)]
        steps = [word(1 + rank + d) for d in range(rank)]
        itemsize = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
        context.populate_array(
            array,
            data=builder.inttoptr(word(0), array.data.type),
            shape=cgutils.pack_array(builder, dims, ty=intp),
            strides=cgutils.pack_array(builder, steps, ty=intp),
            itemsize=context.get_constant(types.intp, itemsize),
            meminfo=None,
        )
        return array._getvalue()

    return array_type(meta, offset, dtype, ndim, layout), codegen
