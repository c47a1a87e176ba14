"""Which form of its kernel each call takes: a load-time fast path, a compiled form.

Asked per kernel call when a method loads (:mod:`pyexecutorch.runtime.lowering`): with
the compiled tier on, the kernel's compiled form first, then its numpy fast path, then the
reference kernel itself. Also the compiled forms' steps that only a method compiled whole
takes (:func:`whole_form_step`, :func:`staged_form_steps`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pyexecutorch.jit import deferral
from pyexecutorch.kernels.registry import (
    Kernel,
    facts_of,
    fast_path_of,
    get_cell_step,
    get_compiled_form,
    get_specializer,
    offer,
    options_of,
)
from pyexecutorch.runtime.layout import channels_last_form
from pyexecutorch.runtime.method_facts import MethodFacts
from pyexecutorch.runtime.whole_method import Step, view_copy_step
from pyexecutorch.schema.program import (
    IntList,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)


def _filling(fast: Callable[..., Any]) -> Callable[..., Any]:
    """``fast`` (a one-output kernel call), writing its out array and returning it."""
    if fast_path_of(fast).fills_outputs:
        return fast

    def filled(*args: Any) -> Any:
        out = args[-1]
        result = fast(*args)
        if result is not out:
            np.copyto(out, result)
        return out

    return filled


class PendingFastPath(deferral.PendingEntryPoint):
    """A kernel's load-time fast path that writes the out array it is given and returns
    it (``fills_outputs``), made when first called or when its line is kept: in a method
    compiled whole the kernel's compiled step does the work, and the fast path (a
    convolution's packed weights and generated code) would never run."""

    __slots__ = ()


offer(PendingFastPath, fills_outputs=True)


def whole_form_step(name: str, args: list[Any]) -> Step | None:
    """The Step of a compiled form that takes ``whole=True``: one it offers only inside a
    whole method (there no per-call cost weighs against its loop), or None."""
    form = get_compiled_form(name)
    if form is None or "whole" not in options_of(form):
        return None
    try:
        fast = form(*args, whole=True)
    except Exception:  # noqa: BLE001 - a form that cannot decide offers no step
        return None
    planned = fast_path_of(fast).step
    return None if planned is None else Step(*planned)


def staged_form_steps(name: str, arrays: list[Any], out: np.ndarray) -> list[Step] | None:
    """A whole-method form's step on C-contiguous copies of its strided inputs, each copy a
    step before it (a convolution reading a channels-last tensor's permuted view), or None."""
    staged = list(arrays)
    copies = []
    for k, a in enumerate(arrays):
        if isinstance(a, np.ndarray) and not a.flags.c_contiguous:
            staged[k] = np.empty(a.shape, a.dtype)
            copy = view_copy_step(a, staged[k])
            if copy is None:
                return None
            copies.append(copy)
    step = whole_form_step(name, [*staged, out]) if copies else None
    return None if step is None else [*copies, step]


class FastPaths:
    """The form each kernel call of one method takes (see the module docstring).

    ``jit``: the compiled tier is on; ``traced``: the method runs under an event tracer
    (then products take their whole-method form, see OperatorFacts.traced_as_whole)."""

    def __init__(self, facts: MethodFacts, *, jit: bool, traced: bool) -> None:
        self.facts = facts
        self.jit = jit
        self.traced = traced

    def specialized(self, k: Kernel, args: list[int], written: set[int], read: set[int]) -> Any:
        """The kernel's load-time fast path for these arguments, or the kernel itself.

        With the compiled tier on, the kernel's compiled form is asked first.
        """
        candidates = [get_specializer(k.name)]
        if self.jit:
            candidates.insert(0, get_compiled_form(k.name))
        candidates = [c for c in candidates if c is not None]
        if not candidates:
            return k.fn
        evalues = self.facts.plan.values
        dynamic = False
        live = []  # positions of scalars written at run time (see FAST_PATH_OPTIONS)
        for position, j in enumerate(args):
            val = evalues[j].val
            if isinstance(val, Tensor):
                dynamic |= val.shape_dynamism != TensorShapeDynamism.STATIC
            elif isinstance(val, (TensorList, OptionalTensorList)):
                for i in val.items:
                    item = evalues[i].val if i >= 0 else None
                    if (
                        isinstance(item, Tensor)
                        and item.shape_dynamism != TensorShapeDynamism.STATIC
                    ):
                        return k.fn
            elif j in written:
                live.append(position)
            elif isinstance(val, IntList) and any(i in written for i in val.items):
                return k.fn
        if live:
            candidates = [c for c in candidates if "live_scalars" in options_of(c)]
            if not candidates:
                return self._filling_live(k, args, dynamic)
            fast = self._fast_path(candidates, args, dynamic, frozenset(), live=frozenset(live))
            return k.fn if fast is None else fast
        unused = frozenset(n for n, j in enumerate(args[len(args) - k.n_outs :]) if j not in read)
        if self.jit and not dynamic:
            values = [self.facts.load_time_value(j) for j in args]
            planned = channels_last_form(k.name, k.fn, values)
            if planned is not None:
                return planned
        if (
            len(candidates) == 2
            and facts_of(k.name).step_only_when_whole
            and k.n_outs == 1
            and not dynamic
            and deferral.deferring()
        ):
            # A method that may compile whole: the compiled form first, as always; the
            # numpy fast path after it only when a line calls it
            # (OperatorFacts.step_only_when_whole).
            fast = self._fast_path(candidates[:1], args, dynamic, unused)
            if fast is not None:
                return fast
            numpy_fast = candidates[1:]
            return PendingFastPath(
                None,
                (),
                lambda: _filling(self._fast_path(numpy_fast, args, dynamic, unused) or k.fn),
            )
        as_whole = self.jit and self.traced and facts_of(k.name).traced_as_whole
        fast = self._fast_path(candidates, args, dynamic, unused, as_whole)
        return k.fn if fast is None else fast

    def _filling_live(self, k: Kernel, args: list[int], dynamic: bool) -> Any:
        """The kernel of an instruction taking scalars computed at run time, writing its one
        static output in place where a whole method has a step for it (a slice at a start
        position: kernels.registry.cell_step), so that later steps can bind that output."""
        out = self.facts.plan.values[args[-1]].val
        if not (
            self.jit
            and not dynamic
            and k.n_outs == 1
            and isinstance(out, Tensor)
            and get_cell_step(k.name) is not None
        ):
            return k.fn
        fast = _filling(k.fn)
        return fast if fast is k.fn else offer(fast, fills_outputs=True)

    def _fast_path(
        self,
        candidates: list[Any],
        args: list[int],
        dynamic: bool,
        unused: frozenset[int],
        as_whole: bool = False,
        live: frozenset[int] = frozenset(),
    ) -> Any:
        """The first fast path ``candidates`` (specializers) offer for these arguments, or
        None; ``as_whole``: the one a compiled form offers inside a whole method; ``live``:
        the positions of scalars written at run time (only forms taking them are asked)."""
        for special in candidates:
            parameters = options_of(special)
            kwargs: dict[str, Any] = {"live_scalars": live} if live else {}
            if as_whole and "whole" in parameters:
                kwargs["whole"] = True
            if dynamic:
                # Only fast paths that size their outputs per call take dynamic shapes.
                if "dynamic" not in parameters:
                    continue
                kwargs["dynamic"] = True
            if "unused_outputs" in parameters:
                kwargs["unused_outputs"] = unused
            try:
                fast = special(*(self.facts.load_time_value(j) for j in args), **kwargs)
            except Exception:  # noqa: BLE001 - a fast path that cannot decide keeps the general kernel
                fast = None
            if fast is not None:
                return fast
        return None
