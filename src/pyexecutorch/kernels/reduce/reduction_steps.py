"""Sum, mean and any as the primitive steps of the runtime's fused reduction loops (see
:class:`pyexecutorch.kernels.registry.Reduction`), and how reductions' arguments name
their reduced dimensions; declared in :mod:`pyexecutorch.kernels.reduce.facts`."""

from __future__ import annotations

from typing import Any

from pyexecutorch.kernels.registry import Reduction


def _sum(g: Any, x: str, n: str, c: dict, t: dict) -> dict[int, str]:
    return {0: g.elem("{0}", g.reduce("sum", x))}


def _mean(g: Any, x: str, n: str, c: dict, t: dict) -> dict[int, str]:
    return {0: g.elem("{0} / " + n, g.reduce("sum", x))}


def _any(g: Any, x: str, n: str, c: dict, t: dict) -> dict[int, str]:
    return {0: g.reduce("any", x)}


def one_dim(c: dict[int, Any], rank: int) -> tuple[int, ...] | None:
    """The one dimension given as argument 1 (softmax's, any's)."""
    d = c[1]
    if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank:
        return None
    return (d % rank,)


def listed_dims(c: dict[int, Any], rank: int) -> tuple[int, ...] | None:
    """The dimensions listed in argument 1, every one where it is None or empty."""
    dims = c[1]
    if dims is None or len(dims) == 0:
        return tuple(range(rank))
    if any(isinstance(d, bool) or not -rank <= d < rank for d in dims):
        return None
    out = tuple(sorted({d % rank for d in dims}))
    return out if len(out) == len(dims) else None


def trailing_dims(c: dict[int, Any], rank: int) -> tuple[int, ...] | None:
    """The trailing dimensions, as many as argument 1 lists (a layer norm's shape)."""
    k = len(c[1])
    return tuple(range(rank - k, rank)) if 0 < k <= rank else None


# mean/sum(x, dims, keepdim, dtype): no dtype conversion inside a fused loop; on a stored
# input, kernels/reduce/compiled.py's standalone kernels run them as well.
MEAN = Reduction(_mean, listed_dims, keepdim_at=2, constant=lambda c: c[3] is None, standalone=True)
SUM = Reduction(_sum, listed_dims, keepdim_at=2, constant=lambda c: c[3] is None, standalone=True)
ANY = Reduction(_any, one_dim, keepdim_at=2, tests=True)
