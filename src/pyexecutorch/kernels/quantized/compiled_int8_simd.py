"""Integer SIMD vectors for the quantized compiled kernels: int8 dot products in registers.

The float vectors of :mod:`pyexecutorch.jit.simd` hold ``L`` float32
lanes (16 with AVX-512, else 8); the types here are their integer companions, one
register wide too:

* :class:`Int32Vector`: ``L`` int32 lanes (a group's accumulators);
* :class:`ByteVector`: ``4 L`` bytes, four per int32 lane (the operands of a dot product).

and these intrinsics:

* :func:`load_bytes`: the ``4 L`` bytes at ``p + i`` of an int8/uint8 :func:`pointer`;
* :func:`splat_quad`: the four bytes of an int32 (four consecutive int8 inputs) in every lane;
* :func:`low_nibbles` / :func:`high_nibbles`: each byte's 4-bit halves as bytes 0..15;
* :func:`dot_u8s8`: ``acc + sum over each lane's 4 bytes of u8(a) * s8(b)``: one
  ``vpdpbusd`` where the CPU has AVX-512 VNNI (or AVX-VNNI at 256 bits); else two
  ``pmaddwd`` on the bytes widened to int16 (AVX2: 7x the plain-vector form LLVM made of
  the same sums, which widened to int32 and multiplied with ``vpmulld``), or for 4-bit
  operands (:class:`NibbleVector`) ``pmaddubsw`` then ``pmaddwd`` by ones; plain LLVM
  vectors elsewhere; exact in int32 for the sums a kernel here makes (no saturation);
* :func:`izeros`, :func:`isplat`, :func:`iadd`, :func:`imul`, :func:`to_float` (int32
  lanes to the float32 :data:`~pyexecutorch.jit.simd.Vector` of the same lanes).

Imported only by the compiled tier (it needs numba).
"""

from __future__ import annotations

from typing import Any

from llvmlite import binding, ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from pyexecutorch.jit import simd

LANES = simd.lanes("float32")  # int32 lanes: as many as a float32 vector's


def _features() -> dict[str, bool]:
    try:
        return dict(binding.get_host_cpu_features())
    except Exception:  # noqa: BLE001 - unknown features: the portable form is safe
        return {}


_CPU = _features()
# the x86 instruction a dot product becomes, when the CPU has it at this width
if LANES == 16 and _CPU.get("avx512vnni"):
    VNNI: str | None = "llvm.x86.avx512.vpdpbusd.512"
elif LANES == 8 and (_CPU.get("avxvnni") or (_CPU.get("avx512vnni") and _CPU.get("avx512vl"))):
    VNNI = "llvm.x86.avx512.vpdpbusd.256"
else:
    VNNI = None
# without VNNI: int16 pair products summed into int32 lanes (pmaddwd), at this width
PAIRS: str | None = (
    "llvm.x86.avx2.pmadd.wd" if LANES == 8 and _CPU.get("avx2") else
    "llvm.x86.avx512.pmaddw.d.512" if LANES == 16 and _CPU.get("avx512bw") else None
)  # fmt: skip
# and unsigned by signed byte pairs into int16, saturating (pmaddubsw): for 4-bit operands
SMALL_PAIRS: str | None = (
    None if PAIRS is None else
    "llvm.x86.avx2.pmadd.ub.sw" if LANES == 8 else "llvm.x86.avx512.pmaddubs.w.512"
)  # fmt: skip
# Static int8 products lay their rows out as uint16 (the inputs plus 128, an int64 per four:
# two 32-bit pairs to broadcast, no widening in the loop) and pack weights pair-major (a
# load and a sign extension a half) where the dot products are pmaddwd's.
WIDE_ROWS = VNNI is None and PAIRS is not None


class Int32Vector(types.Type):
    def __init__(self) -> None:
        super().__init__(name=f"Int32Vector({LANES})")


class ByteVector(types.Type):
    def __init__(self) -> None:
        super().__init__(name=f"ByteVector({4 * LANES})")


class NibbleVector(types.Type):
    """A :class:`ByteVector` whose bytes are 0..15 (4-bit weights): their products with
    int8 fit a cheaper exact form where the CPU has no VNNI (see :func:`dot_u8s8`)."""

    def __init__(self) -> None:
        super().__init__(name=f"NibbleVector({4 * LANES})")


class WeightVector(types.Type):
    """A :class:`ByteVector` of packed weights (:func:`load_weights`): where
    :data:`WIDE_ROWS`, pair-major (bytes 0-1 of every lane, then bytes 2-3)."""

    def __init__(self) -> None:
        super().__init__(name=f"WeightVector({4 * LANES})")


class WideQuad(types.Type):
    """Four inputs widened to uint16 (an int64 of a :data:`WIDE_ROWS` row), splat lazily
    by :func:`dot_u8s8` as two 32-bit pairs."""

    def __init__(self) -> None:
        super().__init__(name="WideQuad")


INT32_VECTOR, BYTE_VECTOR, NIBBLE_VECTOR = Int32Vector(), ByteVector(), NibbleVector()
WEIGHT_VECTOR, WIDE_QUAD = WeightVector(), WideQuad()
_I32, _I8 = ir.IntType(32), ir.IntType(8)
_IVEC, _BVEC = ir.VectorType(_I32, LANES), ir.VectorType(_I8, 4 * LANES)


@register_model(Int32Vector)
class _Int32Model(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Int32Vector) -> None:
        super().__init__(dmm, fe_type, _IVEC)


@register_model(ByteVector)
@register_model(NibbleVector)
@register_model(WeightVector)
class _ByteModel(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: ByteVector) -> None:
        super().__init__(dmm, fe_type, _BVEC)


@register_model(WideQuad)
class _WideModel(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: WideQuad) -> None:
        super().__init__(dmm, fe_type, ir.IntType(64))


def _byte_pointer(p: Any) -> bool:
    return isinstance(p, types.CPointer) and p.dtype in (types.int8, types.uint8)


def _unaligned_load(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    """Codegen of a byte vector's load at ``pointer + index`` (``args``), no alignment."""
    address = builder.bitcast(builder.gep(args[0], [args[1]]), _BVEC.as_pointer())
    value = builder.load(address)
    value.align = 1
    return value


@intrinsic
def load_bytes(typingctx: Any, p: Any, i: Any) -> Any:
    """The ``4 L`` bytes at ``p + i`` (``p`` an int8/uint8 pointer; no alignment needed)."""
    if not (_byte_pointer(p) and isinstance(i, types.Integer)):
        return None

    return BYTE_VECTOR(p, i), _unaligned_load


def _splat(builder: Any, value: Any, vty: ir.VectorType) -> Any:
    one = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(_I32, 0))
    zeros = ir.Constant(ir.VectorType(_I32, vty.count), [0] * vty.count)
    return builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), zeros)


@intrinsic
def load_weights(typingctx: Any, p: Any, i: Any) -> Any:
    """:func:`load_bytes` of weights packed for this CPU (see :class:`WeightVector`)."""
    if not (_byte_pointer(p) and isinstance(i, types.Integer)):
        return None

    return WEIGHT_VECTOR(p, i), _unaligned_load


@intrinsic
def splat_row(typingctx: Any, p: Any, i: Any) -> Any:
    """Quad ``i`` of a row of inputs: ``p`` an int32 pointer (four bytes a quad: as
    :func:`splat_quad`) or an int64 one (four uint16: a :data:`WIDE_ROWS` row's, a
    :class:`WideQuad`)."""
    if not (isinstance(p, types.CPointer) and isinstance(i, types.Integer)):
        return None
    if p.dtype not in (types.int32, types.int64):
        return None
    wide = p.dtype == types.int64

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        value = builder.load(builder.gep(args[0], [args[1]]))
        return value if wide else builder.bitcast(_splat(builder, value, _IVEC), _BVEC)

    return (WIDE_QUAD if wide else BYTE_VECTOR)(p, i), codegen


@intrinsic
def splat_quad_at(typingctx: Any, p: Any, e: Any) -> Any:
    """The four inputs at element ``e`` of a row (no alignment needed): ``p`` an int8
    pointer (four bytes in every lane: as :func:`splat_quad`) or an int16 one (four
    uint16: a :data:`WIDE_ROWS` row's, a :class:`WideQuad`)."""
    if not (isinstance(p, types.CPointer) and isinstance(e, types.Integer)):
        return None
    if p.dtype not in (types.int8, types.int16):
        return None
    wide = p.dtype == types.int16
    quad = ir.IntType(64) if wide else _I32

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address = builder.bitcast(builder.gep(args[0], [args[1]]), quad.as_pointer())
        value = builder.load(address)
        value.align = 1
        return value if wide else builder.bitcast(_splat(builder, value, _IVEC), _BVEC)

    return (WIDE_QUAD if wide else BYTE_VECTOR)(p, e), codegen


@intrinsic
def splat_quad(typingctx: Any, q: Any) -> Any:
    """The int32 ``q`` (four bytes: four int8 inputs, the first lowest) in every lane."""
    if not isinstance(q, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        v = args[0]
        if v.type.width != 32:
            v = builder.trunc(v, _I32) if v.type.width > 32 else builder.sext(v, _I32)
        return builder.bitcast(_splat(builder, v, _IVEC), _BVEC)

    return BYTE_VECTOR(q), codegen


@intrinsic
def low_nibbles(typingctx: Any, v: Any) -> Any:
    """Each byte's low four bits, as a byte 0..15."""
    if v != BYTE_VECTOR:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.and_(args[0], ir.Constant(_BVEC, [15] * _BVEC.count))

    return NIBBLE_VECTOR(v), codegen


@intrinsic
def high_nibbles(typingctx: Any, v: Any) -> Any:
    """Each byte's high four bits, as a byte 0..15."""
    if v != BYTE_VECTOR:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.lshr(args[0], ir.Constant(_BVEC, [4] * _BVEC.count))

    return NIBBLE_VECTOR(v), codegen


def _halves(builder: Any, v: Any, t: int, extend: str) -> Any:
    """Bytes ``t`` and ``t + 1`` of every lane of ``v`` as 2 L int16 (``extend``: zext/sext)."""
    picks = ir.Constant(
        ir.VectorType(_I32, 2 * LANES), [4 * (i // 2) + t + i % 2 for i in range(2 * LANES)]
    )
    pairs = builder.shuffle_vector(v, ir.Constant(_BVEC, ir.Undefined), picks)
    return getattr(builder, extend)(pairs, ir.VectorType(ir.IntType(16), 2 * LANES))


def _pair_sums(builder: Any, a: Any, b: Any) -> Any:
    """``a[2j] * b[2j] + a[2j + 1] * b[2j + 1]`` of int16 vectors as L int32 (``pmaddwd``
    where the CPU has AVX2; exact: no operand here is -32768)."""
    if PAIRS is not None:
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_IVEC, [a.type, b.type]), PAIRS
        )
        return builder.call(fn, [a, b])
    wide = ir.VectorType(_I32, 2 * LANES)
    products = builder.mul(builder.sext(a, wide), builder.sext(b, wide))
    undefined = ir.Constant(wide, ir.Undefined)
    even = ir.Constant(ir.VectorType(_I32, LANES), [2 * j for j in range(LANES)])
    odd = ir.Constant(ir.VectorType(_I32, LANES), [2 * j + 1 for j in range(LANES)])
    return builder.add(
        builder.shuffle_vector(products, undefined, even),
        builder.shuffle_vector(products, undefined, odd),
    )


def _nibble_dot(builder: Any, acc: Any, a: Any, b: Any) -> Any:
    """acc + per-lane sums of four u8(a) * s8(b) products, ``a`` at most 15: saturating
    byte pair products into int16 (``pmaddubsw``: none saturates), then int16 pairs into
    int32 (``pmaddwd`` by ones)."""
    halves = ir.VectorType(ir.IntType(16), 2 * LANES)
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(halves, [_BVEC, _BVEC]), SMALL_PAIRS
    )
    sums16 = builder.call(fn, [a, b])
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_IVEC, [halves, halves]), PAIRS
    )
    return builder.add(acc, builder.call(fn, [sums16, ir.Constant(halves, [1] * 2 * LANES)]))


def _wide_halves(builder: Any, v: Any) -> tuple[Any, Any]:
    """A :class:`WideQuad`'s two pairs of uint16, each splat as 2 L int16."""
    halves = ir.VectorType(ir.IntType(16), 2 * LANES)
    low = builder.trunc(v, _I32)
    high = builder.trunc(builder.lshr(v, ir.Constant(v.type, 32)), _I32)
    return (builder.bitcast(_splat(builder, w, _IVEC), halves) for w in (low, high))


def _wide_bytes(builder: Any, v: Any) -> Any:
    """A :class:`WideQuad` as a splat quad of bytes (its uint16 are bytes)."""
    words = builder.bitcast(v, ir.VectorType(ir.IntType(16), 4))
    quad = builder.bitcast(builder.trunc(words, ir.VectorType(_I8, 4)), _I32)
    return builder.bitcast(_splat(builder, quad, _IVEC), _BVEC)


def _pair_major(builder: Any, v: Any, half: int) -> Any:
    """Bytes ``16 half`` on of pair-major weights, sign-extended to 2 L int16."""
    picks = ir.Constant(
        ir.VectorType(_I32, 2 * LANES), [2 * LANES * half + i for i in range(2 * LANES)]
    )
    part = builder.shuffle_vector(v, ir.Constant(_BVEC, ir.Undefined), picks)
    return builder.sext(part, ir.VectorType(ir.IntType(16), 2 * LANES))


def _portable_dot(builder: Any, acc: Any, a: Any, b: Any, wide: bool, paired: bool) -> Any:
    """acc + per-lane sums of four u8(a) * s8(b) products without VNNI: bytes 0-1 and 2-3
    of each lane widened to int16 and multiplied pairwise into int32 (two ``pmaddwd`` on
    AVX2; the widening of an operand shared by several products is computed once, LLVM
    merging the equal instructions). Exact: ``|u8 * s8| <= 32640``, a pair's sum fits.
    ``wide``: ``a`` a :class:`WideQuad`; ``paired``: ``b`` pair-major weights."""
    if wide:
        a0, a2 = _wide_halves(builder, a)
    else:
        a0, a2 = _halves(builder, a, 0, "zext"), _halves(builder, a, 2, "zext")
    if paired:
        b0, b2 = _pair_major(builder, b, 0), _pair_major(builder, b, 1)
    else:
        b0, b2 = _halves(builder, b, 0, "sext"), _halves(builder, b, 2, "sext")
    low, high = _pair_sums(builder, a0, b0), _pair_sums(builder, a2, b2)
    return builder.add(acc, builder.add(low, high))


@intrinsic
def dot_u8s8(typingctx: Any, acc: Any, a: Any, b: Any) -> Any:
    """``acc[j] + sum_t u8(a[4j + t]) * s8(b[4j + t])`` for every lane j (``a`` a
    :class:`ByteVector`, or a :class:`NibbleVector`, whose products take ``pmaddubsw``
    without VNNI: exact, as a pair of them is at most ``2 * 15 * 128`` in size)."""
    if acc != INT32_VECTOR or a not in (BYTE_VECTOR, NIBBLE_VECTOR, WIDE_QUAD):
        return None
    if b not in (BYTE_VECTOR, WEIGHT_VECTOR):
        return None
    nibbles, wide = a == NIBBLE_VECTOR, a == WIDE_QUAD
    paired = b == WEIGHT_VECTOR and WIDE_ROWS

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        acc_v, a_v, b_v = args
        if VNNI is None and nibbles and SMALL_PAIRS is not None and not paired:
            return _nibble_dot(builder, acc_v, a_v, b_v)
        if VNNI is None:
            return _portable_dot(builder, acc_v, a_v, b_v, wide, paired)
        if wide:
            a_v = _wide_bytes(builder, a_v)
        # (LLVM 22 declares the byte operands as <4L x i8>; older ones as <L x i32>)
        fnty = ir.FunctionType(_IVEC, [_IVEC, _BVEC, _BVEC])
        fn = cgutils.get_or_insert_function(builder.module, fnty, VNNI)
        return builder.call(fn, [acc_v, a_v, b_v])

    return INT32_VECTOR(acc, a, b), codegen


@intrinsic
def izeros(typingctx: Any) -> Any:
    """int32 lanes, all 0."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return ir.Constant(_IVEC, None)

    return INT32_VECTOR(), codegen


@intrinsic
def isplat(typingctx: Any, x: Any) -> Any:
    """The integer ``x`` (as int32) in every lane."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        v = args[0]
        if v.type.width != 32:
            v = builder.trunc(v, _I32) if v.type.width > 32 else builder.sext(v, _I32)
        return _splat(builder, v, _IVEC)

    return INT32_VECTOR(x), codegen


@intrinsic
def iload(typingctx: Any, p: Any, i: Any) -> Any:
    """The ``L`` int32 at ``p + i`` (``p`` an int32 pointer)."""
    if not (isinstance(p, types.CPointer) and p.dtype == types.int32):
        return None
    if not isinstance(i, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address = builder.bitcast(builder.gep(args[0], [args[1]]), _IVEC.as_pointer())
        value = builder.load(address)
        value.align = 4
        return value

    return INT32_VECTOR(p, i), codegen


@intrinsic
def iadd(typingctx: Any, a: Any, b: Any) -> Any:
    """``a + b`` lane by lane (int32, wrapping)."""
    if not (a == INT32_VECTOR and b == INT32_VECTOR):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.add(args[0], args[1])

    return INT32_VECTOR(a, b), codegen


@intrinsic
def imul(typingctx: Any, a: Any, b: Any) -> Any:
    """``a * b`` lane by lane (int32, wrapping)."""
    if not (a == INT32_VECTOR and b == INT32_VECTOR):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.mul(args[0], args[1])

    return INT32_VECTOR(a, b), codegen


# int16 pair products added into int32 lanes in one instruction (vpdpwssd), where the CPU
# has VNNI at this width
WORD_VNNI: str | None = None if VNNI is None else VNNI.replace("vpdpbusd", "vpdpwssd")


@intrinsic
def low_words(typingctx: Any, a: Any) -> Any:
    """Each int32 lane's low 16 bits, the high ones zero: the form :func:`madd_words`
    multiplies by (``a`` from -32767 to 32767)."""
    if a != INT32_VECTOR:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.and_(args[0], ir.Constant(_IVEC, [0xFFFF] * LANES))

    return INT32_VECTOR(a), codegen


@intrinsic
def madd_words(typingctx: Any, acc: Any, a: Any, b: Any) -> Any:
    """``acc + a * b`` lane by lane for ``a`` from -32767 to 32767 and ``b`` of
    :func:`low_words`: the lanes as int16 pairs multiplied and summed (the high
    halves' product is 0), one ``vpdpwssd`` with VNNI, else ``pmaddwd`` and an addition
    (one uop against ``vpmulld``'s two and its 10-cycle latency)."""
    if not (acc == INT32_VECTOR and a == INT32_VECTOR and b == INT32_VECTOR):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        acc_v, a_v, b_v = args
        words = ir.VectorType(ir.IntType(16), 2 * LANES)
        a_w, b_w = builder.bitcast(a_v, words), builder.bitcast(b_v, words)
        if WORD_VNNI is not None:
            fnty = ir.FunctionType(_IVEC, [_IVEC, words, words])
            fn = cgutils.get_or_insert_function(builder.module, fnty, WORD_VNNI)
            return builder.call(fn, [acc_v, a_w, b_w])
        return builder.add(acc_v, _pair_sums(builder, a_w, b_w))

    return INT32_VECTOR(acc, a, b), codegen


_FLOAT_VECTOR = simd.Vector(types.float32, LANES)


@intrinsic
def to_float(typingctx: Any, a: Any) -> Any:
    """int32 lanes as float32 lanes (rounded to nearest, as a C cast is)."""
    if a != INT32_VECTOR:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.sitofp(args[0], ir.VectorType(ir.FloatType(), LANES))

    return _FLOAT_VECTOR(a), codegen


@intrinsic
def load_scales(typingctx: Any, p: Any, i: Any) -> Any:
    """The ``L`` scales at ``p + i`` as float32 lanes: ``p`` a float32 pointer, or a
    uint16 one holding bfloat16 (widened exactly: the bits shifted up by 16)."""
    if not (isinstance(p, types.CPointer) and isinstance(i, types.Integer)):
        return None
    if p.dtype not in (types.float32, types.uint16):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        floats = ir.VectorType(ir.FloatType(), LANES)
        if p.dtype == types.float32:
            address = builder.bitcast(builder.gep(args[0], [args[1]]), floats.as_pointer())
            value = builder.load(address)
            value.align = 4
            return value
        halves = ir.VectorType(ir.IntType(16), LANES)
        address = builder.bitcast(builder.gep(args[0], [args[1]]), halves.as_pointer())
        bits = builder.load(address)
        bits.align = 2
        wide = builder.shl(builder.zext(bits, _IVEC), ir.Constant(_IVEC, [16] * LANES))
        return builder.bitcast(wide, floats)

    return _FLOAT_VECTOR(p, i), codegen


@intrinsic
def rint(typingctx: Any, v: Any) -> Any:
    """float32 lanes rounded to the nearest integer, ties to even (numpy's rint)."""
    if v != _FLOAT_VECTOR:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fty = ir.VectorType(ir.FloatType(), LANES)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(fty, [fty]), f"llvm.roundeven.v{LANES}f32"
        )
        return builder.call(fn, [args[0]])

    return _FLOAT_VECTOR(v), codegen


def _int8_store_parts(builder: Any, args: Any) -> tuple[Any, Any]:
    """(pointer to <L x i8> at p + i, the float lanes as int8: exact integers in range)."""
    bytes_ = ir.VectorType(_I8, LANES)
    address = builder.bitcast(builder.gep(args[0], [args[1]]), bytes_.as_pointer())
    return address, builder.trunc(builder.fptosi(args[2], _IVEC), bytes_)


def _int8_pointer(p: Any) -> bool:
    return isinstance(p, types.CPointer) and p.dtype == types.int8


@intrinsic
def store_int8(typingctx: Any, p: Any, i: Any, v: Any) -> Any:
    """``p[i : i + L] = v`` for float32 lanes holding integers in [-128, 127]."""
    if not (_int8_pointer(p) and isinstance(i, types.Integer) and v == _FLOAT_VECTOR):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address, value = _int8_store_parts(builder, args)
        builder.store(value, address).align = 1
        return context.get_dummy_value()

    return types.void(p, i, v), codegen


@intrinsic
def store_int8_first(typingctx: Any, p: Any, i: Any, v: Any, n: Any) -> Any:
    """:func:`store_int8` of the first ``n`` lanes only (0 <= n <= L)."""
    if not (_int8_pointer(p) and isinstance(i, types.Integer) and v == _FLOAT_VECTOR):
        return None
    if not isinstance(n, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address, value = _int8_store_parts(builder, args)
        mask = simd._lane_mask(builder, LANES, args[3])
        fnty = ir.FunctionType(ir.VoidType(), [value.type, address.type, _I32, mask.type])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.masked.store.v{LANES}i8.p0"
        )
        builder.call(fn, [value, address, ir.Constant(_I32, 1), mask])
        return context.get_dummy_value()

    return types.void(p, i, v, n), codegen


@intrinsic
def load_int8(typingctx: Any, p: Any, i: Any) -> Any:
    """The ``L`` int8 at ``p + i`` as int32 lanes (sign-extended)."""
    if not (_int8_pointer(p) and isinstance(i, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        bytes_ = ir.VectorType(_I8, LANES)
        address = builder.bitcast(builder.gep(args[0], [args[1]]), bytes_.as_pointer())
        value = builder.load(address)
        value.align = 1
        return builder.sext(value, _IVEC)

    return INT32_VECTOR(p, i), codegen


@intrinsic
def load_int8_first(typingctx: Any, p: Any, i: Any, n: Any) -> Any:
    """:func:`load_int8` of the first ``n`` lanes (0 <= n <= L), the others 0, unread."""
    if not (_int8_pointer(p) and isinstance(i, types.Integer) and isinstance(n, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        bytes_ = ir.VectorType(_I8, LANES)
        address = builder.bitcast(builder.gep(args[0], [args[1]]), bytes_.as_pointer())
        mask = simd._lane_mask(builder, LANES, args[2])
        fnty = ir.FunctionType(bytes_, [address.type, _I32, mask.type, bytes_])
        fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.masked.load.v{LANES}i8.p0")
        value = builder.call(fn, [address, ir.Constant(_I32, 1), mask, ir.Constant(bytes_, None)])
        return builder.sext(value, _IVEC)

    return INT32_VECTOR(p, i, n), codegen


@intrinsic
def imax(typingctx: Any, a: Any, b: Any) -> Any:
    """The larger of ``a`` and ``b`` lane by lane (signed)."""
    if not (a == INT32_VECTOR and b == INT32_VECTOR):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.select(builder.icmp_signed(">", args[0], args[1]), args[0], args[1])

    return INT32_VECTOR(a, b), codegen


@intrinsic
def imin(typingctx: Any, a: Any, b: Any) -> Any:
    """The smaller of ``a`` and ``b`` lane by lane (signed)."""
    if not (a == INT32_VECTOR and b == INT32_VECTOR):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.select(builder.icmp_signed("<", args[0], args[1]), args[0], args[1])

    return INT32_VECTOR(a, b), codegen


@intrinsic
def store_int8_lanes(typingctx: Any, p: Any, i: Any, v: Any, n: Any) -> Any:
    """``p[i : i + n] = v[:n]`` for int32 lanes holding values in [-128, 127] (0 <= n <= L)."""
    if not (_int8_pointer(p) and isinstance(i, types.Integer) and v == INT32_VECTOR):
        return None
    if not isinstance(n, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        bytes_ = ir.VectorType(_I8, LANES)
        address = builder.bitcast(builder.gep(args[0], [args[1]]), bytes_.as_pointer())
        value = builder.trunc(args[2], bytes_)
        mask = simd._lane_mask(builder, LANES, args[3])
        fnty = ir.FunctionType(ir.VoidType(), [bytes_, address.type, _I32, mask.type])
        fn = cgutils.get_or_insert_function(
            builder.module, fnty, f"llvm.masked.store.v{LANES}i8.p0"
        )
        builder.call(fn, [value, address, ir.Constant(_I32, 1), mask])
        return context.get_dummy_value()

    return types.void(p, i, v, n), codegen


@intrinsic
def store_int8_interleaved3(typingctx: Any, p: Any, i: Any, a: Any, b: Any, c: Any) -> Any:
    """``p[i : i + 3 L] = a[0], b[0], c[0], a[1], b[1], ...`` for float32 lanes holding
    integers in [-128, 127]: three channels' values of L pixels stored pixel by pixel
    (one byte shuffle, not 3 L single-byte stores)."""
    if not (_int8_pointer(p) and isinstance(i, types.Integer)):
        return None
    if not (a == _FLOAT_VECTOR and b == _FLOAT_VECTOR and c == _FLOAT_VECTOR):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        bytes_ = ir.VectorType(_I8, LANES)
        a8, b8, c8 = (builder.trunc(builder.fptosi(v, _IVEC), bytes_) for v in args[2:])
        two = ir.VectorType(_I32, 2 * LANES)
        ab = builder.shuffle_vector(a8, b8, ir.Constant(two, list(range(2 * LANES))))
        c2 = builder.shuffle_vector(
            c8, ir.Constant(bytes_, None), ir.Constant(two, list(range(2 * LANES)))
        )
        picks = [lane + channel * LANES for lane in range(LANES) for channel in range(3)]
        mixed = builder.shuffle_vector(ab, c2, ir.Constant(ir.VectorType(_I32, 3 * LANES), picks))
        wide = ir.VectorType(_I8, 3 * LANES)
        address = builder.bitcast(builder.gep(args[0], [args[1]]), wide.as_pointer())
        builder.store(mixed, address).align = 1
        return context.get_dummy_value()

    return types.void(p, i, a, b, c), codegen


# ------------------------------------------------------------------ signed 4-bit weights


def _nibble_mask() -> Any:
    return ir.Constant(_BVEC, [0xF0] * _BVEC.count)


@intrinsic
def signed_low_nibbles(typingctx: Any, v: Any) -> Any:
    """Each byte's low four bits, a two's complement 4-bit ``w``, as the signed byte
    ``16 w`` (moved to the high half: exact). With :func:`signed_high_nibbles`, the weights
    of a VNNI product on unsigned inputs, two a byte, unpacked in three instructions."""
    if v != BYTE_VECTOR:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        lanes = builder.bitcast(args[0], _IVEC)  # (a 32-bit shift: x86 has no byte shift)
        moved = builder.shl(lanes, ir.Constant(_IVEC, [4] * LANES))
        return builder.and_(builder.bitcast(moved, _BVEC), _nibble_mask())

    return BYTE_VECTOR(v), codegen


@intrinsic
def signed_high_nibbles(typingctx: Any, v: Any) -> Any:
    """Each byte's high four bits, a two's complement 4-bit ``w``, as the signed byte
    ``16 w`` (the low bits cleared)."""
    if v != BYTE_VECTOR:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.and_(args[0], _nibble_mask())

    return BYTE_VECTOR(v), codegen


# A cache hint for a byte pointer's line (weights streamed once a call).
prefetch = simd.prefetch


# ------------------------------------------------------------------ row extremes


def _lanes_fold(builder: Any, value: Any, compare: str) -> Any:
    """The lane of ``value`` that ``compare`` (an ordered fcmp) picks over all others."""
    count = LANES
    while count > 1:
        count //= 2
        low = ir.Constant(ir.VectorType(_I32, count), list(range(count)))
        high = ir.Constant(ir.VectorType(_I32, count), list(range(count, 2 * count)))
        a = builder.shuffle_vector(value, value, low)
        b = builder.shuffle_vector(value, value, high)
        value = builder.select(builder.fcmp_ordered(compare, b, a), b, a)
    return builder.extract_element(value, ir.Constant(_I32, 0))


def _extreme(compare: str, doc: str) -> Any:
    def typer(typingctx: Any, v: Any) -> Any:
        if v != _FLOAT_VECTOR:
            return None

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return _lanes_fold(builder, args[0], compare)

        return types.float32(v), codegen

    typer.__name__ = typer.__qualname__ = f"lanes_{'min' if compare == '<' else 'max'}"
    typer.__doc__ = doc
    return intrinsic(typer)


lanes_min = _extreme("<", "The smallest of float32 lanes (NaN lanes are passed over).")
lanes_max = _extreme(">", "The largest of float32 lanes (NaN lanes are passed over).")


# ------------------------------------------------------------------ channel quads


def _byte_mask(builder: Any, n: Any) -> Any:
    """<4 L x i1>: byte k on when k < n (all from n >= 4 L on; a shift by 64 is no mask)."""
    i64, count = ir.IntType(64), _BVEC.count
    n = builder.sext(n, i64) if n.type.width < 64 else n
    full = builder.icmp_signed(">=", n, ir.Constant(i64, count))
    shift = builder.select(full, ir.Constant(i64, 0), n)
    bits = builder.sub(builder.shl(ir.Constant(i64, 1), shift), ir.Constant(i64, 1))
    bits = builder.select(full, ir.Constant(i64, -1), bits)
    if count < 64:
        bits = builder.trunc(bits, ir.IntType(count))
    return builder.bitcast(bits, ir.VectorType(ir.IntType(1), count))


@intrinsic
def flip_bytes(typingctx: Any, v: Any) -> Any:
    """Each byte's sign bit flipped: int8 ``x`` as the uint8 ``x + 128``."""
    if v != BYTE_VECTOR:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.xor(args[0], ir.Constant(_BVEC, [0x80] * _BVEC.count))

    return BYTE_VECTOR(v), codegen


@intrinsic
def load_bytes_first(typingctx: Any, p: Any, i: Any, n: Any) -> Any:
    """:func:`load_bytes` of the first ``n`` bytes (0 <= n < 4 L), the others 0, unread."""
    if not (_byte_pointer(p) and isinstance(i, types.Integer) and isinstance(n, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        address = builder.bitcast(builder.gep(args[0], [args[1]]), _BVEC.as_pointer())
        mask = _byte_mask(builder, args[2])
        fnty = ir.FunctionType(_BVEC, [address.type, _I32, mask.type, _BVEC])
        name = f"llvm.masked.load.v{_BVEC.count}i8.p0"
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        return builder.call(fn, [address, ir.Constant(_I32, 1), mask, ir.Constant(_BVEC, None)])

    return BYTE_VECTOR(p, i, n), codegen


@intrinsic
def store_int8_quads(typingctx: Any, p: Any, i: Any, a: Any, b: Any, c: Any, d: Any, n: Any) -> Any:
    """``p[i + 4 k + m] = (a, b, c, d)[m][k]`` for the first ``n`` of the ``4 L`` bytes
    (``n`` from 1 to 4 L): four float32 vectors holding integers in [-128, 127], the
    values of channels ``4 k + m`` of a block of ``4 L`` (one byte shuffle, one store)."""
    if not (_int8_pointer(p) and isinstance(i, types.Integer) and isinstance(n, types.Integer)):
        return None
    if not all(v == _FLOAT_VECTOR for v in (a, b, c, d)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        lanes = ir.VectorType(_I8, LANES)
        parts = [builder.trunc(builder.fptosi(v, _IVEC), lanes) for v in args[2:6]]
        pairs = ir.Constant(ir.VectorType(_I32, 2 * LANES), list(range(2 * LANES)))
        ab = builder.shuffle_vector(parts[0], parts[1], pairs)
        cd = builder.shuffle_vector(parts[2], parts[3], pairs)
        picks = [m * LANES + k for k in range(LANES) for m in range(4)]
        quads = builder.shuffle_vector(ab, cd, ir.Constant(ir.VectorType(_I32, 4 * LANES), picks))
        address = builder.bitcast(builder.gep(args[0], [args[1]]), _BVEC.as_pointer())
        mask = _byte_mask(builder, args[6])
        fnty = ir.FunctionType(ir.VoidType(), [_BVEC, address.type, _I32, mask.type])
        name = f"llvm.masked.store.v{_BVEC.count}i8.p0"
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        builder.call(fn, [quads, address, ir.Constant(_I32, 1), mask])
        return context.get_dummy_value()

    return types.void(p, i, a, b, c, d, n), codegen
