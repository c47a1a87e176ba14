"""Kernel calls on bfloat16 and float8 tensors (ml_dtypes' numpy dtypes).

Torch computes these types in float32 and rounds each operator's result to the
tensor's type (round to nearest even); so does a widened call: its low-precision
inputs are read as float32, its low-precision outputs are computed in float32
scratch and rounded into their planned storage. Chosen per call when a method loads,
so programs without these types pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pyexecutorch.kernels.common import fit

# ml_dtypes' types, by dtype name (numpy's own dtypes have other names): a tensor of one
# exists only once ml_dtypes has imported, which a program without them never pays for.
LOW_PRECISION_NAMES = frozenset(
    ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz")
)
_WIDE = np.dtype(np.float32)


def is_low(x: Any) -> bool:
    if isinstance(x, np.ndarray):
        return x.dtype.name in LOW_PRECISION_NAMES
    if isinstance(x, (list, tuple)):
        return any(is_low(i) for i in x)
    return False


def _widen(x: Any, cache: dict[int, tuple[Any, np.ndarray]]) -> Any:
    if isinstance(x, np.ndarray):
        if x.dtype.name not in LOW_PRECISION_NAMES:
            return x
        if not x.flags.writeable:  # a constant: widened once
            hit = cache.get(id(x))
            if hit is not None and hit[0] is x:
                return hit[1]
            wide = x.astype(_WIDE)
            cache[id(x)] = (x, wide)
            return wide
        return x.astype(_WIDE)
    if isinstance(x, list):
        return [_widen(i, cache) for i in x]
    return x


def _scratch(out: Any) -> Any:
    if isinstance(out, np.ndarray) and out.dtype.name in LOW_PRECISION_NAMES:
        return np.empty(out.shape, dtype=_WIDE)
    if isinstance(out, list):
        return [_scratch(o) for o in out]
    return out


def _narrow(result: Any, out: Any, scratch: Any) -> Any:
    if scratch is out:
        return result
    if isinstance(out, list):
        return [_narrow(r, o, s) for r, o, s in zip(result, out, scratch, strict=True)]
    dst = fit(out, tuple(result.shape))
    dst[...] = result.astype(out.dtype)  # round to nearest even, as torch does
    return dst


def widened(fn: Callable[..., Any], n_in: int, n_outs: int) -> Callable[..., Any]:
    """``fn`` computing in float32 on low-precision tensors (see the module docstring)."""
    cache: dict[int, tuple[Any, np.ndarray]] = {}

    def call(*args: Any) -> Any:
        ins = [_widen(a, cache) for a in args[:n_in]]
        outs = list(args[n_in:])
        scratch = [_scratch(o) for o in outs]
        result = fn(*ins, *scratch)
        if n_outs == 0:
            # In place: the first argument is the tensor the operator changes.
            first = args[0]
            if isinstance(first, np.ndarray) and ins[0] is not first:
                first[...] = ins[0].astype(first.dtype)
            return None
        results: Sequence[Any] = (result,) if n_outs == 1 else result
        narrowed = [_narrow(r, o, s) for r, o, s in zip(results, outs, scratch, strict=True)]
        return narrowed[0] if n_outs == 1 else tuple(narrowed)

    call.__name__ = f"widened_{getattr(fn, '__name__', 'kernel')}"
    return call
