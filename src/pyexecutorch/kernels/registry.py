"""The one registry of operator kernels, keyed by the name a program uses.

A program names an operator as ``name`` + ``overload`` (``aten::add`` +
``out``); the registry key joins them with a dot (``aten::add.out``).

Calling convention (fixed at load time by the runtime, so ``execute`` only
calls kernels):

* A kernel is a plain function called with the program's arguments in order,
  already resolved to Python values: tensors as numpy arrays, ``Int`` as
  ``int``, ``Double`` as ``float``, ``Bool`` as ``bool``, ``Null`` as ``None``,
  ``IntList`` as a tuple of ints, ``DoubleList``/``BoolList`` as tuples,
  ``TensorList`` as a list of arrays, ``OptionalTensorList`` as a list of
  arrays or ``None``.
* The last ``n_outs`` arguments are the outputs. For a tensor output the
  kernel receives the planned array (for a dynamic-bound tensor, its storage
  at the upper-bound shape) and must write its result into it, usually via
  :func:`pyexecutorch.kernels.common.fit`, which returns a view of the right
  shape. For a non-tensor output (``executorch_prim`` scalar ops) it receives
  the current value, which it ignores.
* The kernel returns its outputs: one value when ``n_outs == 1`` (typically
  the array it wrote), a tuple of ``n_outs`` values otherwise. The runtime
  stores them in the output slots so that later instructions see the right
  shapes. A kernel with ``n_outs == 0`` (in-place ops such as
  ``aten::copy_``) mutates its first argument and returns ``None``.
* Problems with the arguments raise :class:`KernelError` (a ``ValueError``)
  with a message that explains what the kernel expected; the runtime adds the
  method, the instruction index and the operator name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class KernelError(ValueError):
    """A kernel refused its arguments (wrong dtype, shape, value)."""


@dataclass(frozen=True)
class Kernel:
    """A registered kernel: its program name, function and output count."""

    name: str
    fn: Callable[..., Any]
    n_outs: int = 1


_KERNELS: dict[str, Kernel] = {}


def kernel(*names: str, n_outs: int = 1) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` under each program name in ``names``.

    Registering a name twice is a programming error and raises ``ValueError``
    so that each operator has exactly one kernel.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            if name in _KERNELS:
                raise ValueError(f"kernel {name!r} is registered twice")
            _KERNELS[name] = Kernel(name, fn, n_outs)
        return fn

    return register


_SPECIALIZERS: dict[str, Callable[..., Any]] = {}


@dataclass(frozen=True)
class Const:
    """A value fixed at load, passed to an :class:`Inline` call as is."""

    value: Any


@dataclass(frozen=True)
class Inline:
    """A fast path simple enough for the runtime to call in place: ``fn(*parts)``.

    Each part is the position of one of the kernel's arguments (negative
    positions count from the end: ``-1`` is the last output) or a
    :class:`Const`. ``fn`` writes the result into the argument at ``out`` and
    the kernel returns that argument. The runtime emits the call directly into
    its generated code, saving the Python frame of a wrapper around ``fn``
    (about a third of a small elementwise op); called as a function, an
    ``Inline`` behaves as the kernel does.
    """

    fn: Callable[..., Any]
    parts: tuple[int | Const, ...]
    out: int = -1
    keyword_out: bool = False  # pass the last part as ``out=`` (np.maximum wants it so)

    def __post_init__(self) -> None:
        object.__setattr__(self, "function", self._as_function())

    def _as_function(self) -> Callable[..., Any]:
        # A plain function with the kernel's signature, built once: the
        # fallback when the call cannot be emitted in place.
        names: dict[str, Any] = {"fn": self.fn}
        parts = []
        for i, p in enumerate(self.parts):
            if isinstance(p, Const):
                names[f"c{i}"] = p.value
                parts.append(f"c{i}")
            else:
                parts.append(f"a[{int(p)}]")
        if self.keyword_out:
            parts[-1] = f"out={parts[-1]}"
        source = f"lambda *a: (fn({', '.join(parts)}), a[{int(self.out)}])[1]"
        return eval(source, names)  # noqa: S307 - built from integers and bound names only

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)


def specializer(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a load-time fast path for the kernels ``names``.

    The runtime calls a specializer once per instruction, at load, with the
    instruction's arguments as they are then (output arrays included), but only
    when no non-tensor argument can change at run time, and when some tensor
    has a dynamic-bound shape only if the specializer declares a keyword
    parameter ``dynamic``: it then receives ``dynamic=True`` and the tensors at
    their upper-bound shapes, and its fast path must size its outputs per call
    (:func:`pyexecutorch.kernels.common.fit`) and return them. It returns a callable with the kernel's signature
    that may assume those dtypes, shapes and constants (an :class:`Inline`
    where one numpy call does the work), or ``None`` to keep the general
    kernel. A specializer must compute exactly what its kernel
    computes; tests compare the two. A specializer that declares a keyword
    parameter ``unused_outputs`` also receives the positions (0-based among
    the outputs) of outputs that nothing in the method reads; it may leave
    those unwritten.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            if name in _SPECIALIZERS:
                raise ValueError(f"specializer {name!r} is registered twice")
            _SPECIALIZERS[name] = fn
        return fn

    return register


def get_specializer(name: str) -> Callable[..., Any] | None:
    """The load-time fast path registered for ``name``, or ``None``."""
    _ensure_loaded()
    return _SPECIALIZERS.get(name)


_COMPILED_FORMS: dict[str, Callable[..., Any]] = {}


def compiled_form(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a load-time compiled (numba) form for the kernels ``names``.

    It is called as a :func:`specializer` is, and only when the compiled tier
    is on (its module, ``kernels/<family>/compiled.py``, imports numba and is
    imported only then); it returns a callable with the kernel's signature, or
    ``None`` to leave the instruction to the numpy fast path and kernel.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            if name in _COMPILED_FORMS:
                raise ValueError(f"compiled form {name!r} is registered twice")
            _COMPILED_FORMS[name] = fn
        return fn

    return register


def get_compiled_form(name: str) -> Callable[..., Any] | None:
    """The compiled form registered for ``name`` (once the compiled tier loaded them), or None."""
    return _COMPILED_FORMS.get(name)


def _ensure_loaded() -> None:
    # The kernel modules register themselves on import; importing the package
    # imports them all exactly once.
    import pyexecutorch.kernels  # noqa: F401


def get_kernel(name: str) -> Kernel | None:
    """The kernel registered under the program name ``name``, or ``None``."""
    _ensure_loaded()
    return _KERNELS.get(name)


def operator_names() -> list[str]:
    """Every registered program name, sorted."""
    _ensure_loaded()
    return sorted(_KERNELS)
