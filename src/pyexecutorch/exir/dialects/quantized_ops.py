"""Out variants of the quantization operators, so quantized programs can run on
portable kernels.

The ``quantized_decomposed`` operators that the official runtime's quantized
kernel library implements get exactly its schemas (the program names its
kernels are registered under: ``quantized_decomposed::quantize_per_tensor.out``
...); the other ``quantized_decomposed`` and ``torchao`` quantization operators
get their functional schema followed by ``*, Tensor(a!) out`` (or
``scale_out, zero_point_out`` for the two-result ``choose_qparams`` forms).

An operator is defined only when nothing defined it first: the official
package registers the same schemas when its quantized library is loaded, and
either registration then serves both exporters. (The official package defines
its ``embedding_*`` operators in Python and refuses to import if they exist, so
those are defined only by :func:`ensure_embedding_ops`, when the quantized
fusion pass needs them; import the official package first in a process that
uses both.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

QUANT_NAMESPACES = frozenset({"quantized_decomposed", "torchao"})

_ONE_OUT = "*, Tensor(a!) out) -> Tensor(a!)"
_QPARAM_OUTS = "*, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))"

# (namespace, functional "name.overload", out overload, out schema after the name)
OUT_VARIANTS: tuple[tuple[str, str, str, str], ...] = (
    # The official quantized kernel library's schemas (kernels/quantized/quantized.yaml).
    (
        "quantized_decomposed",
        "quantize_per_tensor.default",
        "out",
        "(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, " + _ONE_OUT,
    ),
    (
        "quantized_decomposed",
        "quantize_per_tensor.tensor",
        "Tensor_out",
        "(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, " + _ONE_OUT,
    ),
    (
        "quantized_decomposed",
        "dequantize_per_tensor.default",
        "out",
        "(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    ),
    (
        "quantized_decomposed",
        "dequantize_per_tensor.tensor",
        "Tensor_out",
        "(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    ),
    (
        "quantized_decomposed",
        "quantize_per_channel.default",
        "out",
        "(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, "
        "int quant_max, ScalarType dtype, " + _ONE_OUT,
    ),
    (
        "quantized_decomposed",
        "dequantize_per_channel.default",
        "out",
        "(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, "
        "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) "
        "-> Tensor(a!)",
    ),
    (
        "quantized_decomposed",
        "choose_qparams.tensor",
        "Tensor_out",
        "(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, " + _QPARAM_OUTS,
    ),
    (
        "quantized_decomposed",
        "choose_qparams_per_token_asymmetric.default",
        "out",
        "(Tensor input, ScalarType dtype, " + _QPARAM_OUTS,
    ),
    (
        "quantized_decomposed",
        "quantize_per_token.default",
        "out",
        "(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
        "ScalarType dtype, " + _ONE_OUT,
    ),
    (
        "quantized_decomposed",
        "dequantize_per_token.default",
        "out",
        "(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
        "ScalarType dtype, ScalarType output_dtype, " + _ONE_OUT,
    ),
    # Ours: the functional schema, then the outs.
    (
        "quantized_decomposed",
        "quantize_per_tensor.tensor2",
        "tensor2_out",
        "(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min, Tensor quant_max, "
        "ScalarType dtype, " + _ONE_OUT,
    ),
    (
        "quantized_decomposed",
        "dequantize_per_tensor.tensor2",
        "tensor2_out",
        "(Tensor input, Tensor scale, Tensor zero_point, Tensor quant_min, Tensor quant_max, "
        "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)",
    ),
    (
        "quantized_decomposed",
        "choose_qparams_symmetric.tensor",
        "Tensor_out",
        "(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, " + _QPARAM_OUTS,
    ),
    (
        "quantized_decomposed",
        "choose_qparams_per_token.default",
        "out",
        "(Tensor input, ScalarType dtype, " + _QPARAM_OUTS,
    ),
    (
        "quantized_decomposed",
        "quantize_per_channel_group.default",
        "out",
        "(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
        "ScalarType dtype, int group_size, " + _ONE_OUT,
    ),
    (
        "quantized_decomposed",
        "dequantize_per_channel_group.default",
        "out",
        "(Tensor input, Tensor scales, Tensor? zero_points, int quant_min, int quant_max, "
        "ScalarType dtype, int group_size, ScalarType output_dtype, " + _ONE_OUT,
    ),
    (
        "torchao",
        "quantize_affine.default",
        "out",
        "(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, "
        "ScalarType output_dtype, Scalar? quant_min=None, Scalar? quant_max=None, " + _ONE_OUT,
    ),
    (
        "torchao",
        "dequantize_affine.default",
        "out",
        "(Tensor input, SymInt[] block_size, Tensor scale, Tensor? zero_point, "
        "ScalarType input_dtype, Scalar? quant_min=None, Scalar? quant_max=None, "
        "ScalarType output_dtype=6, " + _ONE_OUT,
    ),
    (
        "torchao",
        "choose_qparams_affine.default",
        "out",
        "(Tensor? input, str mapping_type, SymInt[] block_size, ScalarType target_dtype, "
        "Scalar? quant_min=None, Scalar? quant_max=None, float? eps=None, "
        "ScalarType? scale_dtype=None, ScalarType? zero_point_dtype=None, bool keepdim=False, "
        + _QPARAM_OUTS,
    ),
)

# The fused embedding operators of the official quantized library (and their
# out variants, with its schemas): name -> functional schemas by overload.
_EMBEDDING_ARGS = (
    "Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
    "int weight_quant_min, int weight_quant_max, Tensor indices"
)
EMBEDDING_OPS: dict[str, int] = {"embedding_byte": 8, "embedding_4bit": 4, "embedding_2bit": 2}

_libraries: dict[str, torch.library.Library] = {}


def _library(namespace: str) -> torch.library.Library:
    lib = _libraries.get(namespace)
    if lib is None:
        lib = _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")  # noqa: TOR901
    return lib


def overload_names(qualified_name: str) -> list[str]:
    """Overloads of ``ns::name`` registered now, the packet's first (a packet's
    ``overloads()`` misses those a library loaded after the packet was first looked up)."""
    namespace, name = qualified_name.split("::")
    try:
        names = list(getattr(getattr(torch.ops, namespace), name).overloads())
    except (AttributeError, RuntimeError):
        names = []
    for schema in torch._C._jit_get_schemas_for_operator(qualified_name):
        overload = schema.overload_name or "default"
        if overload not in names:
            names.append(overload)
    return names


def _has(namespace: str, name: str, overload: str) -> bool:
    return overload in overload_names(f"{namespace}::{name}")


def _functional(namespace: str, qualified: str) -> torch._ops.OpOverload | None:
    name, overload = qualified.split(".")
    if not _has(namespace, name, overload):
        return None
    return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _out_impl(functional: Callable[..., Any], out_names: tuple[str, ...]) -> Callable[..., Any]:
    """An eager out-variant kernel: the functional result copied into the outs."""

    def impl(*args: Any, **kwargs: Any) -> Any:
        outs = [kwargs.pop(n) for n in out_names]
        result = functional(*args, **kwargs)
        results = result if isinstance(result, (tuple, list)) else (result,)
        for out, value in zip(outs, results, strict=True):
            out.resize_(value.shape)
            out.copy_(value)
        return outs[0] if len(outs) == 1 else tuple(outs)

    return impl


def _define(namespace: str, name: str, overload: str, schema: str, impl: Callable) -> None:
    lib = _library(namespace)
    qualified = f"{name}.{overload}" if overload else name
    lib.define(qualified + schema)
    lib.impl(qualified, impl, "CompositeExplicitAutograd")


@functools.cache
def ensure_out_variants() -> None:
    """Define each missing out variant of :data:`OUT_VARIANTS` whose functional
    operator exists (torchao's exist once torchao is imported; then call
    ``ensure_out_variants.cache_clear()`` first)."""
    for namespace, qualified, out_overload, schema in OUT_VARIANTS:
        functional = _functional(namespace, qualified)
        name = qualified.split(".")[0]
        if functional is None or _has(namespace, name, out_overload):
            continue
        outs = ("scale_out", "zero_point_out") if "scale_out" in schema else ("out",)
        _define(namespace, name, out_overload, schema, _out_impl(functional, outs))


def refresh_out_variants() -> None:
    """:func:`ensure_out_variants` again if new quantization operators were registered."""
    missing = [
        (ns, q)
        for ns, q, out, _ in OUT_VARIANTS
        if _functional(ns, q) is not None and not _has(ns, q.split(".")[0], out)
    ]
    if missing:
        ensure_out_variants.cache_clear()
        ensure_out_variants()


# --------------------------------------------------------------------------------------
# The fused embedding operators


def _unpack(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """Packed ``uint8`` rows to signed ``int8`` values (first value in the high bits,
    as the official kernels read them)."""
    if bits == 8:
        return weight
    mask = (1 << bits) - 1
    # 4-bit: the first value in the high nibble; 2-bit: the first value lowest.
    shifts = (4, 0) if bits == 4 else (0, 2, 4, 6)
    u = weight.to(torch.uint8)
    parts = [(u >> s) & mask for s in shifts]
    values = torch.stack(parts, dim=-1).reshape(weight.shape[0], -1)
    return values.to(torch.int8) - (1 << (bits - 1))


def pack_embedding_weight(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Signed ``int8`` values in ``[-2**(bits-1), 2**(bits-1))`` packed into ``uint8`` rows."""
    if bits == 8:
        return values
    per_byte = 8 // bits
    rows, cols = values.shape
    if cols % per_byte:
        raise ValueError(f"embedding dim {cols} is not a multiple of {per_byte} for {bits}-bit")
    u = (values.to(torch.int16) + (1 << (bits - 1))).to(torch.uint8).view(rows, -1, per_byte)
    if bits == 4:
        return (u[..., 0] << 4) | u[..., 1]
    packed = u[..., 0]
    for i in range(1, per_byte):
        packed = packed | (u[..., i] << (2 * i))
    return packed


def _embedding_impl(bits: int) -> Callable[..., torch.Tensor]:
    def impl(
        weight: torch.Tensor,
        weight_scales: torch.Tensor,
        weight_zero_points: torch.Tensor | None,
        weight_quant_min: int,
        weight_quant_max: int,
        indices: torch.Tensor,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        values = _unpack(weight, bits)
        scales = weight_scales if weight_scales.dim() == 2 else weight_scales[:, None]
        group = values.shape[1] // scales.shape[1]
        w = values.to(torch.float32)
        if weight_zero_points is not None:
            zp = weight_zero_points.reshape(scales.shape).to(torch.float32)
            w = w - zp.repeat_interleave(group, dim=1)
        w = w * scales.to(torch.float32).repeat_interleave(group, dim=1)
        w = w.to(dtype if dtype is not None else weight_scales.dtype)
        return torch.nn.functional.embedding(indices, w)

    return impl


@functools.cache
def ensure_embedding_ops() -> None:
    """Define the fused embedding operators (functional, ``.dtype`` and out variants)
    where nothing defined them."""
    for name, bits in EMBEDDING_OPS.items():
        impl = _embedding_impl(bits)
        if not _has("quantized_decomposed", name, "default"):
            _define("quantized_decomposed", name, "", f"({_EMBEDDING_ARGS}) -> Tensor", impl)
        if not _has("quantized_decomposed", name, "dtype"):
            _define(
                "quantized_decomposed",
                name,
                "dtype",
                f"({_EMBEDDING_ARGS}, *, ScalarType? dtype=None) -> Tensor",
                impl,
            )
        packet = getattr(torch.ops.quantized_decomposed, name)
        if not _has("quantized_decomposed", name, "out"):
            _define(
                "quantized_decomposed",
                name,
                "out",
                f"({_EMBEDDING_ARGS}, {_ONE_OUT}",
                _out_impl(packet.default, ("out",)),
            )
        if not _has("quantized_decomposed", name, "dtype_out"):
            _define(
                "quantized_decomposed",
                name,
                "dtype_out",
                f"({_EMBEDDING_ARGS}, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)",
                _out_impl(packet.dtype, ("out",)),
            )


def is_quant_op(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target.namespace in QUANT_NAMESPACES
