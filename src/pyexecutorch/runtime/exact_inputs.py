"""The exact input path: inputs installed by a function generated once per method.

A call whose inputs are each exactly what the method declares (a dense, writable array of
the declared dtype and shape, or the scalar it was exported with) skips the general
conversions and checks of :mod:`pyexecutorch.runtime.io`; :func:`exact_installer` writes
that check and install as one generated function over the method's values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pyexecutorch.kernels.common import fit
from pyexecutorch.runtime.codegen import Namespace
from pyexecutorch.runtime.io import ExactSlot


class BoundShapes:
    """The shapes a dynamic input has been accepted at, each with the view of its planned
    storage there (True for an input the method reads as given): what the generated input
    installer looks up, so that a repeated shape costs one dictionary look-up."""

    _MAX = 256  # distinct shapes kept; then forgotten (a dynamic dim may take many sizes)

    def __init__(self, bound: tuple[int, ...], planned: np.ndarray | None) -> None:
        self.bound = tuple(bound)
        self.planned = planned
        self.views: dict[tuple[int, ...], Any] = {}

    def accept(self, shape: tuple[int, ...]) -> Any:
        """The view for ``shape`` (True without planned storage), or None past the bounds."""
        if len(shape) != len(self.bound) or any(
            n > b for n, b in zip(shape, self.bound, strict=True)
        ):
            return None
        if len(self.views) >= self._MAX:
            self.views.clear()
        view = True if self.planned is None else fit(self.planned, shape)
        self.views[shape] = view
        return view


def exact_installer(
    slots: Sequence[ExactSlot], values: list[Any], name: str
) -> Callable[[Sequence[Any]], bool]:
    """A function installing the inputs into method ``name``'s ``values`` when each is
    exactly what its slot declares, or returning False when one is not, generated once
    for these ``slots``.

    A dense, writable array of the declared dtype and shape (within its bounds for a
    dynamic one), or for a scalar input the very value the method was exported with,
    needs none of the general conversions and checks
    (:func:`pyexecutorch.runtime.io.exact_slots`); this is the common call. Each
    static check is a comparison against a bound constant and every planned input
    one copy; a dynamic input's shape is looked up among those already accepted
    (:class:`BoundShapes`: the planned storage's view at it). An input that fails
    may leave the ones before it installed, which is harmless since the general path
    then installs them all again. Without slots only a call with no inputs is exact.
    """
    if not slots:
        return lambda inputs: len(inputs) == 0
    ns = Namespace()
    xs = [f"x{k}" for k in range(len(slots))]
    src = [
        "def install(inputs):",
        f"    if len(inputs) != {len(slots)}: return False",
        f"    {', '.join(xs)}, = inputs",
    ]
    stores = []
    for x, (index, dtype, shape, planned, dynamic, scalar) in zip(xs, slots, strict=True):
        if dtype is None:
            kind, value = ns.bind(type(scalar), "Y"), ns.bind(scalar, "S")
            src.append(f"    if type({x}) is not {kind} or {x} != {value}: return False")
            stores.append(f"    v[{index}] = {x}")
            continue
        array, dt = ns.bind(np.ndarray, "N"), ns.bind(dtype, "D")
        if dynamic:
            bounds = BoundShapes(shape, planned)
            views, accept = ns.bind(bounds.views, "V"), ns.bind(bounds.accept, "A")
            src += [
                f"    if type({x}) is not {array} or {x}.dtype != {dt}: return False",
                f"    {x}s = {views}.get({x}.shape)",
                f"    if {x}s is None: {x}s = {accept}({x}.shape)",
                f"    if {x}s is None: return False",
            ]
            if planned is None:
                src.append(
                    f"    if not ({x}.flags.c_contiguous and {x}.flags.writeable): return False"
                )
                stores.append(f"    v[{index}] = {x}")
            else:
                stores.append(f"    {x}s[...] = {x}; v[{index}] = {x}s")
            continue
        src.append(
            f"    if type({x}) is not {array} or {x}.dtype != {dt} or {x}.shape != "
            f"{ns.bind(tuple(shape), 'S')}: return False"
        )
        if planned is None:
            # read by the method itself: dense and writable, as the general path makes it
            src.append(f"    if not ({x}.flags.c_contiguous and {x}.flags.writeable): return False")
            stores.append(f"    v[{index}] = {x}")
        else:
            storage = ns.bind(planned, "P")
            stores.append(f"    {storage}[...] = {x}; v[{index}] = {storage}")
    src += [*stores, "    return True"]
    namespace = {**ns.names, "v": values}
    exec(
        compile("\n".join(src) + "\n", f"<pyexecutorch inputs of {name!r}>", "exec"),
        namespace,
    )  # noqa: S102
    return namespace["install"]
