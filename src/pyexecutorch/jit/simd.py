"""Explicit SIMD vectors for compiled kernels: LLVM vector values inside numba functions.

numba vectorizes simple loops, but not a register-blocked product or a filter whose
accumulators must stay in registers across taps: LLVM's loop vectorizer takes one
innermost loop at a time, and its SLP vectorizer left such kernels scalar (2.7 GMAC/s
for a 1x1 convolution, against 40-70 GMAC/s written here with vectors). This module
gives kernels the vector value itself: :data:`VECTOR` types hold ``lanes(dtype)``
elements of float32 or float64 in one LLVM vector (a zmm register with AVX-512, two
ymm registers with AVX2; LLVM splits wider vectors for narrower machines), and these
intrinsics operate on them:

* :func:`load` / :func:`store`: a vector at ``a[i : i + L]`` of a C-contiguous 1-D array
  (or of a :func:`pointer` to an array's data, which inlined helpers should take);
  :func:`store_interleaved3` three vectors' lanes as triples;
  :func:`load_first` / :func:`store_first` the first ``n < L`` of those lanes only
  (masked: the lanes past ``n`` are neither read nor written, their loaded value 0);
* :func:`splat`: a scalar in every lane; :func:`zeros_like`: a vector of zeros;
  :func:`lanes_of`: the lane count of an array's dtype, a compile-time constant;
* :func:`fma` (``a * b + c`` through ``llvm.fmuladd``: fused where the CPU has FMA, as
  the scalar kernels do), :func:`add`, :func:`mul`, :func:`div`;
* :func:`clamp`: ``min(max(v, lo), hi)`` that keeps NaN (as torch's clamp/hardtanh do),
  :func:`running_max` (a maximum over taps in order, as max pooling takes it: the
  earlier of equal values kept, NaN propagated), and :func:`total` (the lanes' sum);
* :func:`splat_pair` (:func:`splat_pair_first` masked) / :func:`fold_pairs`: two adjacent
  elements in every pair of lanes, and the sums of lane pairs (a product over half-vector
  outputs, two inputs a lane pair); :func:`fold_pairs2` folds two such vectors into one;
* :func:`prefetch`: a cache hint for the line of a pointer's element.

No bounds are checked: a kernel computes its indices from the shapes it was given
and handles tails with the masked forms. No fastmath flag is set anywhere.
Imported only by the compiled tier (it needs numba).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, overload, register_model


def _host_has_avx512() -> bool:
    try:
        from llvmlite import binding  # noqa: PLC0415

        return bool(binding.get_host_cpu_features().get("avx512f", False))
    except Exception:  # noqa: BLE001 - features unknown: the narrower vectors are safe
        return False


# Bytes per vector: one AVX-512 register where the CPU has them, else one AVX register
# (wider vectors would only be split, and a kernel's accumulators would spill).
VECTOR_BYTES = 64 if _host_has_avx512() else 32


def lanes(dtype: Any) -> int:
    """Elements of ``dtype`` in one vector (16 float32 with AVX-512, else 8)."""
    return VECTOR_BYTES // np.dtype(dtype).itemsize


class Vector(types.Type):
    """``count`` elements of ``dtype`` (a numba float type) held as one LLVM vector."""

    def __init__(self, dtype: types.Float, count: int) -> None:
        self.dtype = dtype
        self.count = count
        super().__init__(name=f"Vector({dtype}, {count})")


@register_model(Vector)
class _VectorModel(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Vector) -> None:
        element = ir.FloatType() if fe_type.dtype == types.float32 else ir.DoubleType()
        super().__init__(dmm, fe_type, ir.VectorType(element, fe_type.count))


_FLOAT_TYPES = (types.float32, types.float64)


def _vector_of(dtype: Any) -> Vector | None:
    if dtype not in _FLOAT_TYPES:
        return None
    return Vector(dtype, lanes(np.float32 if dtype == types.float32 else np.float64))


def _flat_array(a: Any) -> bool:
    """A 1-D C-contiguous array, or a :func:`pointer` (of a float type)."""
    if isinstance(a, types.CPointer):
        return a.dtype in _FLOAT_TYPES
    return isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C"


def _address(context: Any, builder: Any, array_type: Any, array: Any, index: Any) -> Any:
    """Pointer to element ``index`` of a 1-D array (or from a pointer), as a pointer to a vector."""
    if isinstance(array_type, types.CPointer):
        data = array
    else:
        data = context.make_array(array_type)(context, builder, array).data
    vector = context.get_value_type(_vector_of(array_type.dtype))
    return builder.bitcast(builder.gep(data, [index]), vector.as_pointer())


@intrinsic
def pointer(typingctx: Any, a: Any) -> Any:
    """The address of C-contiguous array ``a``'s first element (float or integer), as a
    typed pointer: the intrinsics here take a float one in place of the array, and
    ``p[i]`` reads or writes element i (no wraparound, no bounds). Helpers inlined into a kernel should take
    pointers: numba counts references to an array handed to an inlined function under
    a branch or between loops, a runtime call each way that spills every vector
    register (a 1x1 convolution's tile ran 7x slower so). Valid while ``a`` lives."""
    if not (isinstance(a, types.Array) and a.layout == "C"):
        return None
    if not isinstance(a.dtype, (types.Float, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return context.make_array(signature.args[0])(context, builder, args[0]).data

    return types.CPointer(a.dtype)(a), codegen


@intrinsic
def prefetch(typingctx: Any, p: Any, i: Any) -> Any:
    """A hint to bring the cache line holding ``p[i]`` (``p`` a :func:`pointer`) into every
    cache level: a stream of weights that comes from memory once a call runs ahead of
    its loads (the hardware prefetchers ramp up too slowly on a kernel's short runs)."""
    if not (isinstance(p, types.CPointer) and isinstance(i, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address = builder.gep(args[0], [args[1]])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [address.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # (a read, locality 3: kept in every level, a data cache)
        builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(p, i), codegen


def _lane_mask(builder: Any, count: int, n: Any) -> Any:
    """<count x i1>: lane k is on when k < n (0 <= n; all lanes from n >= count on): the
    bits of (1 << min(n, count)) - 1, a shift and a decrement (a mask register with
    AVX-512), rather than a comparison of lane positions (a compare per 8 lanes)."""
    i64 = ir.IntType(64)
    n = builder.sext(n, i64) if n.type.width < 64 else n
    limited = builder.select(
        builder.icmp_signed("<", n, ir.Constant(i64, count)), n, ir.Constant(i64, count)
    )
    bits = builder.sub(builder.shl(ir.Constant(i64, 1), limited), ir.Constant(i64, 1))
    return builder.bitcast(
        builder.trunc(bits, ir.IntType(count)), ir.VectorType(ir.IntType(1), count)
    )


def _suffix(vector: Vector) -> str:
    return f"v{vector.count}{'f32' if vector.dtype == types.float32 else 'f64'}"


@intrinsic
def load(typingctx: Any, a: Any, i: Any) -> Any:
    """The vector ``a[i : i + L]`` (``a`` 1-D, C-contiguous, float32 or float64)."""
    if not (_flat_array(a) and isinstance(i, types.Integer)):
        return None
    vector = _vector_of(a.dtype)
    if vector is None:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _address(context, builder, signature.args[0], args[0], args[1])
        value = builder.load(pointer)
        value.align = vector.dtype.bitwidth // 8
        return value

    return vector(a, i), codegen


@intrinsic
def store(typingctx: Any, a: Any, i: Any, v: Any) -> Any:
    """``a[i : i + L] = v``."""
    if not (_flat_array(a) and isinstance(i, types.Integer) and v == _vector_of(a.dtype)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _address(context, builder, signature.args[0], args[0], args[1])
        done = builder.store(args[2], pointer)
        done.align = v.dtype.bitwidth // 8
        return context.get_dummy_value()

    return types.void(a, i, v), codegen


@intrinsic
def load_first(typingctx: Any, a: Any, i: Any, n: Any) -> Any:
    """The first ``n`` lanes of ``a[i : i + L]`` (0 <= n <= L), the others 0; elements past
    ``a[i + n - 1]`` are not read."""
    if not (_flat_array(a) and isinstance(i, types.Integer) and isinstance(n, types.Integer)):
        return None
    vector = _vector_of(a.dtype)
    if vector is None:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _address(context, builder, signature.args[0], args[0], args[1])
        lty = context.get_value_type(vector)
        mask = _lane_mask(builder, vector.count, args[2])
        fnty = ir.FunctionType(lty, [pointer.type, ir.IntType(32), mask.type, lty])
        name = f"llvm.masked.load.{_suffix(vector)}.p0"
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        align = ir.Constant(ir.IntType(32), vector.dtype.bitwidth // 8)
        return builder.call(fn, [pointer, align, mask, ir.Constant(lty, None)])

    return vector(a, i, n), codegen


@intrinsic
def store_first(typingctx: Any, a: Any, i: Any, v: Any, n: Any) -> Any:
    """``a[i : i + n] = v[:n]`` (0 <= n <= L); elements past ``a[i + n - 1]`` untouched."""
    if not (
        _flat_array(a)
        and isinstance(i, types.Integer)
        and v == _vector_of(a.dtype)
        and isinstance(n, types.Integer)
    ):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _address(context, builder, signature.args[0], args[0], args[1])
        value = args[2]
        mask = _lane_mask(builder, v.count, args[3])
        fnty = ir.FunctionType(ir.VoidType(), [value.type, pointer.type, ir.IntType(32), mask.type])
        name = f"llvm.masked.store.{_suffix(v)}.p0"
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        align = ir.Constant(ir.IntType(32), v.dtype.bitwidth // 8)
        builder.call(fn, [value, pointer, align, mask])
        return context.get_dummy_value()

    return types.void(a, i, v, n), codegen


@intrinsic
def store_interleaved3(typingctx: Any, a: Any, i: Any, x: Any, y: Any, z: Any) -> Any:
    """``a[i + 3k] = x[k]``, ``a[i + 3k + 1] = y[k]``, ``a[i + 3k + 2] = z[k]`` for every
    lane k: three planes' vectors as 3L elements of (x, y, z) triples, as three channels'
    planes become channels-last pixels (LLVM turns the interleave into a few two-source
    permutes)."""
    if not (
        _flat_array(a)
        and isinstance(i, types.Integer)
        and _same_vectors(x, y, z)
        and x == _vector_of(a.dtype)
    ):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        count = x.count
        indices = ir.IntType(32)
        both = builder.shuffle_vector(
            args[2], args[3], ir.Constant(ir.VectorType(indices, 2 * count), list(range(2 * count)))
        )
        third = builder.shuffle_vector(
            args[4],
            ir.Constant(args[4].type, ir.Undefined),
            ir.Constant(ir.VectorType(indices, 2 * count), list(range(count)) * 2),
        )
        order = [k + (m % 3) * count for k in range(count) for m in range(3)]
        value = builder.shuffle_vector(
            both, third, ir.Constant(ir.VectorType(indices, 3 * count), order)
        )
        element = context.get_value_type(x.dtype)
        if isinstance(signature.args[0], types.CPointer):
            data = args[0]
        else:
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
        wide = ir.VectorType(element, 3 * count)
        pointer = builder.bitcast(builder.gep(data, [args[1]]), wide.as_pointer())
        done = builder.store(value, pointer)
        done.align = x.dtype.bitwidth // 8
        return context.get_dummy_value()

    return types.void(a, i, x, y, z), codegen


@intrinsic
def splat(typingctx: Any, x: Any) -> Any:
    """``x`` (float32 or float64) in every lane."""
    vector = _vector_of(x)
    if vector is None:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        lty = context.get_value_type(vector)
        one = builder.insert_element(
            ir.Constant(lty, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0)
        )
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), vector.count), [0] * vector.count)
        return builder.shuffle_vector(one, ir.Constant(lty, ir.Undefined), zeros)

    return vector(x), codegen


@intrinsic
def zeros_like(typingctx: Any, v: Any) -> Any:
    """A vector of ``v``'s type, every lane 0.0 (a sum's start where no scalar of the dtype
    is at hand)."""
    if not isinstance(v, Vector):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return ir.Constant(args[0].type, None)

    return v(v), codegen


def _same_vectors(*vs: Any) -> bool:
    return isinstance(vs[0], Vector) and all(v == vs[0] for v in vs)


@intrinsic
def fma(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` lane by lane, through ``llvm.fmuladd`` (one rounding where fused)."""
    if not _same_vectors(a, b, c):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        lty = args[0].type
        fnty = ir.FunctionType(lty, [lty, lty, lty])
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.fmuladd.{_suffix(a)}")
        return builder.call(fn, args)

    return a(a, b, c), codegen


def _lanewise(name: str, op: str, doc: str) -> Any:
    """The intrinsic ``name(a, b)``: LLVM's ``op`` (an IR builder method) on two vectors of
    one type, lane by lane."""

    def typer(typingctx: Any, a: Any, b: Any) -> Any:
        if not _same_vectors(a, b):
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return getattr(builder, op)(args[0], args[1])

        return a(a, b), codegen

    typer.__name__ = typer.__qualname__ = name
    typer.__doc__ = doc
    return intrinsic(typer)


add = _lanewise("add", "fadd", "``a + b`` lane by lane.")
sub = _lanewise("sub", "fsub", "``a - b`` lane by lane.")
mul = _lanewise("mul", "fmul", "``a * b`` lane by lane.")
div = _lanewise(
    "div", "fdiv", "``a / b`` lane by lane (IEEE division: correctly rounded, as numpy divides)."
)


@intrinsic
def running_max(typingctx: Any, best: Any, v: Any) -> Any:
    """``v`` where ``v > best`` or ``v`` is NaN, else ``best``, lane by lane: folded over
    a window's taps in order, the first of equal maxima stays (-0.0 before 0.0 stays
    -0.0) and a NaN, once taken, stays, as torch's max pooling picks."""
    if not _same_vectors(best, v):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        m, x = args
        take = builder.or_(builder.fcmp_ordered(">", x, m), builder.fcmp_unordered("uno", x, x))
        return builder.select(take, x, m)

    return best(best, v), codegen


@intrinsic
def clamp(typingctx: Any, v: Any, lo: Any, hi: Any) -> Any:
    """``lo`` where ``v < lo``, ``hi`` where ``v > hi``, else ``v`` (NaN stays NaN); an
    infinite bound clamps nothing on its side."""
    if not _same_vectors(v, lo, hi):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        x, low, high = args
        x = builder.select(builder.fcmp_ordered("<", x, low), low, x)
        return builder.select(builder.fcmp_ordered(">", x, high), high, x)

    return v(v, lo, hi), codegen


@intrinsic
def total(typingctx: Any, v: Any) -> Any:
    """The sum of ``v``'s lanes (in a tree order: not bit-identical to a serial sum)."""
    if not isinstance(v, Vector):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        value, count = args[0], v.count
        while count > 1:
            count //= 2
            low = ir.Constant(ir.VectorType(ir.IntType(32), count), list(range(count)))
            high = ir.Constant(ir.VectorType(ir.IntType(32), count), list(range(count, 2 * count)))
            value = builder.fadd(
                builder.shuffle_vector(value, value, low),
                builder.shuffle_vector(value, value, high),
            )
        return builder.extract_element(value, ir.Constant(ir.IntType(32), 0))

    return v.dtype(v), codegen


def _pair_pointer(context: Any, builder: Any, signature: Any, args: Any, vector: Vector) -> Any:
    """A pointer to the two elements at ``a[i]`` (``args``: the array or data pointer, then
    the index) as one two-lane vector."""
    if isinstance(signature.args[0], types.CPointer):
        data = args[0]
    else:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
    pair_type = ir.VectorType(context.get_value_type(vector.dtype), 2)
    return builder.bitcast(builder.gep(data, [args[1]]), pair_type.as_pointer())


def _pairs_everywhere(builder: Any, pair: Any, vector: Vector) -> Any:
    """A two-lane ``pair`` repeated across a vector of ``vector``'s type."""
    lanes = ir.Constant(ir.VectorType(ir.IntType(32), vector.count), [0, 1] * (vector.count // 2))
    return builder.shuffle_vector(pair, ir.Constant(pair.type, ir.Undefined), lanes)


@intrinsic
def splat_pair(typingctx: Any, a: Any, i: Any) -> Any:
    """``a[i]`` in the even lanes and ``a[i + 1]`` in the odd ones (one 64-bit broadcast for
    float32): with weights interleaved to match, one vector sums two input channels into
    half as many outputs (see :func:`fold_pairs`)."""
    if not (_flat_array(a) and isinstance(i, types.Integer)):
        return None
    vector = _vector_of(a.dtype)
    if vector is None:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _pair_pointer(context, builder, signature, args, vector)
        pair = builder.load(pointer)
        pair.align = vector.dtype.bitwidth // 8
        return _pairs_everywhere(builder, pair, vector)

    return vector(a, i), codegen


@intrinsic
def splat_pair_first(typingctx: Any, a: Any, i: Any, n: Any) -> Any:
    """As :func:`splat_pair` with only the first ``n`` (0 to 2) of ``a[i]``, ``a[i + 1]``
    read, the others 0 (an odd run's last element, with nothing after it to read)."""
    if not (_flat_array(a) and isinstance(i, types.Integer) and isinstance(n, types.Integer)):
        return None
    vector = _vector_of(a.dtype)
    if vector is None:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _pair_pointer(context, builder, signature, args, vector)
        pair_type = pointer.type.pointee
        mask = _lane_mask(builder, 2, args[2])
        fnty = ir.FunctionType(pair_type, [pointer.type, ir.IntType(32), mask.type, pair_type])
        suffix = f"v2{'f32' if vector.dtype == types.float32 else 'f64'}"
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.masked.load.{suffix}.p0")
        align = ir.Constant(ir.IntType(32), vector.dtype.bitwidth // 8)
        pair = builder.call(fn, [pointer, align, mask, ir.Constant(pair_type, None)])
        return _pairs_everywhere(builder, pair, vector)

    return vector(a, i, n), codegen


@intrinsic
def fold_pairs(typingctx: Any, v: Any) -> Any:
    """Lane k of the first half: ``v[2k] + v[2k + 1]``; the second half repeats the first."""
    if not isinstance(v, Vector):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        half = v.count // 2
        indices = ir.VectorType(ir.IntType(32), v.count)
        even = ir.Constant(indices, [2 * (k % half) for k in range(v.count)])
        odd = ir.Constant(indices, [2 * (k % half) + 1 for k in range(v.count)])
        return builder.fadd(
            builder.shuffle_vector(args[0], args[0], even),
            builder.shuffle_vector(args[0], args[0], odd),
        )

    return v(v), codegen


@intrinsic
def fold_pairs2(typingctx: Any, a: Any, b: Any) -> Any:
    """Lane k of the first half: ``a[2k] + a[2k + 1]``; of the second: ``b[2k] + b[2k + 1]``
    (two pixels' paired sums in one vector: their outputs side by side, as NHWC memory
    holds two pixels of half-vector outputs)."""
    if not _same_vectors(a, b):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        count = a.count
        indices = ir.VectorType(ir.IntType(32), count)
        even = ir.Constant(indices, [2 * k for k in range(count)])
        odd = ir.Constant(indices, [2 * k + 1 for k in range(count)])
        return builder.fadd(
            builder.shuffle_vector(args[0], args[1], even),
            builder.shuffle_vector(args[0], args[1], odd),
        )

    return a(a, b), codegen


def lanes_of(a):  # noqa: ANN001, ANN201 - numba matches the overload's signature to this
    """The lane count of array ``a``'s dtype (a constant inside compiled code)."""
    return lanes(a.dtype)


@overload(lanes_of, inline="always")
def _lanes_of(a):  # noqa: ANN001, ANN202
    vector = _vector_of(getattr(a, "dtype", None))
    if vector is None:
        return None
    count = vector.count
    return lambda a: count


@intrinsic
def exp(typingctx: Any, v: Any) -> Any:
    """e**v of a float32 vector, lane by lane: ``math_functions.exp_f32``'s arithmetic
    (Cody-Waite reduction, Cephes' polynomial, a scaling by 2**n in two halves), so each
    lane equals what that scalar function gives (within one ulp of the correctly rounded
    result; NaN stays NaN, overflow is inf, underflow 0)."""
    if not (isinstance(v, Vector) and v.dtype == types.float32):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        from pyexecutorch.jit import math_functions as m  # noqa: PLC0415 - its constants

        x = args[0]
        vty = x.type
        count = v.count
        i32 = ir.IntType(32)
        ity = ir.VectorType(i32, count)

        def const(value: float) -> Any:
            return ir.Constant(vty, [float(value)] * count)

        def iconst(value: int) -> Any:
            return ir.Constant(ity, [int(value)] * count)

        fmuladd = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fmuladd.{_suffix(v)}"
        )

        def fma_(a: Any, b: Any, c: Any) -> Any:
            return builder.call(fmuladd, [a, b, c])

        hi, lo = const(m._EXP32_HI), const(m._EXP32_LO)
        c = builder.select(builder.fcmp_ordered(">", x, hi), hi, x)
        c = builder.select(builder.fcmp_ordered("<", c, lo), lo, c)
        round32 = const(m._ROUND32)
        t = fma_(c, const(m._LOG2E32), round32)
        n = builder.fsub(t, round32)
        r = fma_(n, const(m._LN2_HI32), c)
        r = fma_(n, const(m._LN2_LO32), r)
        r2 = builder.fmul(r, r)
        q = fma_(fma_(const(m._C5), r, const(m._C4)), r2, fma_(const(m._C3), r, const(m._C2)))
        q = fma_(q, r2, fma_(const(m._C1), r, const(m._C0)))
        p = builder.fadd(fma_(q, r2, r), const(m._ONE32))
        # p * 2**k, k in t's low mantissa bits, in two halves (a subnormal rounds once)
        k = builder.sub(builder.bitcast(t, ity), iconst(m._ROUND32_BITS))
        half = builder.ashr(k, iconst(1))
        rest = builder.sub(k, half)
        s1 = builder.bitcast(builder.shl(builder.add(half, iconst(127)), iconst(23)), vty)
        s2 = builder.bitcast(builder.shl(builder.add(rest, iconst(127)), iconst(23)), vty)
        y = builder.fmul(builder.fmul(p, s1), s2)
        return builder.select(builder.fcmp_ordered("==", x, x), y, x)

    return v(v), codegen


@intrinsic
def neg(typingctx: Any, a: Any) -> Any:
    """``-a`` lane by lane (the sign flipped: -0.0 for 0.0, NaN's sign too)."""
    if not isinstance(a, Vector):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.fneg(args[0])

    return a(a), codegen


@intrinsic
def transpose_square(
    typingctx: Any, src: Any, i: Any, src_stride: Any, dst: Any, j: Any, dst_stride: Any
) -> Any:
    """``dst[j + c * dst_stride + r] = src[i + r * src_stride + c]`` for ``r, c < L``: an
    ``L x L`` block moved transposed, ``L`` row loads and ``L`` row stores with
    ``log2(L)`` rounds of two-source lane shuffles between them in registers (a scalar
    copy would load and store each element alone). ``src`` and ``dst`` are flat arrays or
    pointers of one float type."""
    ok = _flat_array(src) and _flat_array(dst) and src.dtype == dst.dtype
    if not (ok and all(isinstance(x, types.Integer) for x in (i, src_stride, j, dst_stride))):
        return None
    vector = _vector_of(src.dtype)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        count = vector.count
        i64 = ir.IntType(64)
        src_t, _, _, dst_t = signature.args[:4]
        source, first, sstride, target, tfirst, tstride = (
            builder.sext(a, i64) if isinstance(a.type, ir.IntType) and a.type.width < 64 else a
            for a in args
        )
        rows = []
        for r in range(count):
            at = builder.add(first, builder.mul(sstride, ir.Constant(i64, r)))
            value = builder.load(_address(context, builder, src_t, source, at))
            value.align = vector.dtype.bitwidth // 8
            rows.append(value)
        # Round ``m`` swaps bit ``m`` of the row index with bit ``m`` of the lane index
        # (element (r, c) goes to (c, r) once every bit has been swapped).
        indices = ir.VectorType(ir.IntType(32), count)
        m = count // 2
        while m:
            low = ir.Constant(indices, [c if not c & m else count + c - m for c in range(count)])
            high = ir.Constant(indices, [c + m if not c & m else count + c for c in range(count)])
            for r in range(count):
                if r & m:
                    continue
                a, b = rows[r], rows[r + m]
                rows[r] = builder.shuffle_vector(a, b, low)
                rows[r + m] = builder.shuffle_vector(a, b, high)
            m //= 2
        for c in range(count):
            at = builder.add(tfirst, builder.mul(tstride, ir.Constant(i64, c)))
            done = builder.store(rows[c], _address(context, builder, dst_t, target, at))
            done.align = vector.dtype.bitwidth // 8
        return context.get_dummy_value()

    return types.void(src, i, src_stride, dst, j, dst_stride), codegen
