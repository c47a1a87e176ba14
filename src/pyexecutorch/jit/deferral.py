"""Deferred entry points: a method that may compile whole makes its kernels' compiled
functions and line-only fast paths only if it keeps their calls.

A method that may compile whole builds its kernels' compiled forms before it knows
whether any will be called on its own: inside a whole-method function none is, and
reading each one's machine code back costs milliseconds. Within
:func:`deferred_entry_points`, :func:`form_entry_point` and :func:`deferred_function`
hand out placeholders instead; :func:`bind_entry_points` loads the kept ones.
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pyexecutorch.jit import numba_env
from pyexecutorch.jit.entry_points import entry_point
from pyexecutorch.jit.generated import GeneratedFunction

_deferral = threading.local()


def form_entry_point(dispatcher: Any, arguments: tuple[Any, ...]) -> Any:
    """:func:`~.entry_points.entry_point` for a kernel's compiled form built at load: inside
    :func:`deferred_entry_points` a function not yet in memory comes as a
    :class:`PendingEntryPoint` instead, loaded only if its call is kept."""
    pending = getattr(_deferral, "pending", None)
    if pending is None:
        return entry_point(dispatcher, arguments)
    held = dispatcher.loaded() if type(dispatcher) is GeneratedFunction else dispatcher
    if held is not None and held.overloads:  # (none read yet: no argument types to ask)
        numba = numba_env.numba_module()
        loaded = held.overloads.get(tuple(numba.typeof(a) for a in arguments))
        if loaded is not None:
            return loaded.entry_point
    entry = PendingEntryPoint(dispatcher, arguments)
    pending.append(entry)
    return entry


class PendingEntryPoint:
    """A compiled form's function, read from the disk cache when first needed.

    Calling one loads it (so a form called early stays correct);
    :func:`bind_entry_points` loads the kept ones at load time and puts them in place
    of their placeholders.
    """

    __slots__ = ("arguments", "build", "dispatcher", "function")

    def __init__(
        self, dispatcher: Any, arguments: tuple[Any, ...], build: Callable[[], Any] | None = None
    ) -> None:
        self.dispatcher = dispatcher
        self.arguments = arguments
        self.build = build  # (see deferred_function)
        self.function: Any = None

    def load(self) -> Any:
        if self.function is None:
            if self.build is not None:
                # made for a line: its own fast paths made now, none deferred again
                outer = getattr(_deferral, "pending", None)
                _deferral.pending = None
                try:
                    self.function = self.build()
                finally:
                    _deferral.pending = outer
            else:
                self.function = entry_point(self.dispatcher, self.arguments)
        return self.function

    def __call__(self, *args: Any) -> Any:
        return self.load()(*args)


def deferring() -> bool:
    """Whether this thread is inside :func:`deferred_entry_points` (a method that may
    compile whole is being built)."""
    return getattr(_deferral, "pending", None) is not None


def deferred_function(build: Callable[[], Any]) -> Any:
    """The function ``build()`` makes, made now; inside :func:`deferred_entry_points` a
    :class:`PendingEntryPoint` that makes it when first called or when the method keeps
    its lines (:func:`bind_entry_points`): a fast path that only a line calls (not a
    whole-method function) and that costs milliseconds to make (a convolution's, with
    its packed weights and generated code)."""
    pending = getattr(_deferral, "pending", None)
    if pending is None:
        return build()
    entry = PendingEntryPoint(None, (), build)
    pending.append(entry)
    return entry


@contextlib.contextmanager
def deferred_entry_points() -> Iterator[list[PendingEntryPoint]]:
    """Within it (on this thread), :func:`~.variants.pick` defers loading; the list
    collects what it deferred."""
    outer = getattr(_deferral, "pending", None)
    pending: list[PendingEntryPoint] = []
    _deferral.pending = pending
    try:
        yield pending
    finally:
        _deferral.pending = outer


def bind_entry_points(functions: Iterable[Any], pending: list[PendingEntryPoint]) -> None:
    """Load every deferred entry point, and put each in the closure cells of ``functions``
    (and of the functions they close over) that hold its placeholder, so that calls go
    straight to the compiled function."""
    if not pending:
        return
    for entry in pending:
        entry.load()
    stack = [f for f in functions if isinstance(f, types.FunctionType)]
    seen: set[int] = set()
    while stack:
        function = stack.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        for cell in function.__closure__ or ():
            try:
                held = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            if type(held) is PendingEntryPoint:
                cell.cell_contents = held.function
            elif isinstance(held, types.FunctionType):
                stack.append(held)
