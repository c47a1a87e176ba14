"""``bound_array``: an array rebuilt inside compiled code from words of ``meta`` (see
:mod:`pyexecutorch.runtime.whole_arguments`). Imported by generated whole-method modules
only (it needs numba)."""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np import numpy_support


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
    itemsize = numpy_support.as_dtype(dtype.dtype).itemsize

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        # The array's struct built as a value (what numba's populate_array stores field by
        # field through a stack slot): a whole-method function rebuilds hundreds of arrays,
        # and their proxies' slots were a good part of its compile (lowering, then LLVM's
        # scalar replacement of each).
        i64 = ir.IntType(64)
        meta_data = builder.extract_value(args[0], _field(context, meta, "data"))
        words = builder.gep(meta_data, [args[1]])

        def word(k: int) -> Any:
            return builder.load(builder.gep(words, [ir.Constant(i64, k)]))

        struct = context.get_value_type(array_type)
        value = cgutils.get_null_value(struct)  # (meminfo and parent: none)
        nitems = context.get_constant(types.intp, 1)
        for d in range(rank):
            size, step = word(1 + d), word(1 + rank + d)
            nitems = builder.mul(nitems, size, flags=["nsw"])
            value = builder.insert_value(value, size, [_field(context, array_type, "shape"), d])
            value = builder.insert_value(value, step, [_field(context, array_type, "strides"), d])
        data_at = _field(context, array_type, "data")
        value = builder.insert_value(value, nitems, _field(context, array_type, "nitems"))
        value = builder.insert_value(
            value,
            context.get_constant(types.intp, itemsize),
            _field(context, array_type, "itemsize"),
        )
        return builder.insert_value(
            value, builder.inttoptr(word(0), struct.elements[data_at]), data_at
        )

    return array_type(meta, offset, dtype, ndim, layout), codegen


def _field(context: Any, array_type: Any, name: str) -> int:
    """The position of field ``name`` in numba's struct of ``array_type``."""
    return context.data_model_manager[array_type].get_field_position(name)
