"""What a dialect's operator object shares with the operation it stands for (``_op``).

An edge operator stands for torch's overload, an ``executorch_prim`` operator for a Python
symbolic-int operation. Either calls it, equals it (and any stand-in for the same
operation) and hashes as it, so tables keyed by the original find the stand-in; a deep
copy of a graph keeps the one object.
"""

from __future__ import annotations

from typing import Any


class StandIn:
    """Mixed in before the operator's own base: ``_op`` is set by the subclass."""

    _op: Any

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return self._op(*args, **kwargs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StandIn):
            return other._op is self._op
        return other is self._op

    def __hash__(self) -> int:
        return hash(self._op)

    def __deepcopy__(self, memo: Any = None) -> Any:
        return self
