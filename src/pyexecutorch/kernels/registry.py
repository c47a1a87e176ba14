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

import dataclasses
import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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


def registrar(
    table: dict[str, Any], what: str, names: tuple[str, ...]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator entering its function in ``table`` under each of ``names``, once each
    (a name registered twice is a programming error: ``ValueError`` naming ``what``)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            if name in table:
                raise ValueError(f"{what} {name!r} is registered twice")
            table[name] = fn
        return fn

    return register


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
    return registrar(_SPECIALIZERS, "specializer", names)


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
    return registrar(_COMPILED_FORMS, "compiled form", names)


def get_compiled_form(name: str) -> Callable[..., Any] | None:
    """The compiled form registered for ``name`` (once the compiled tier is on: see
    :func:`use_compiled_forms`), or None."""
    if _compiled_tier_on and name not in _COMPILED_FORMS:
        _import_compiled_modules_for(name)
    return _COMPILED_FORMS.get(name)


_CELL_STEPS: dict[str, Callable[..., Any]] = {}


def cell_step(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the whole-method step maker of the kernels ``names`` for an instruction some
    of whose int scalars are computed at run time (an LLM's start position): called with
    the instruction's arguments, each such scalar given as its cell (a 1-element int64
    array the whole-method function fills per call), it returns a callable offering the
    ``step`` that reads the cells (and, given the arguments with the cells' values, raises
    the error where a checked step refuses), or None. Registered by the compiled tier's
    modules (see ``kernels/prim/compiled_cells.py``)."""
    return registrar(_CELL_STEPS, "cell step", names)


def get_cell_step(name: str) -> Callable[..., Any] | None:
    """The cell step maker registered for ``name`` (once the compiled tier is on)."""
    if _compiled_tier_on and name not in _CELL_STEPS:
        _import_compiled_modules_for(name)
    return _CELL_STEPS.get(name)


# The compiled forms and cell steps are registered by the families' compiled modules
# (``kernels/<family>/compiled*.py``, which import numba and make its dispatchers), imported
# a family at a time: when a load first asks for one of the family's kernels, once the
# runtime has turned the compiled tier on. A warm start of MobileNetV2 imported every family's
# (33 modules, 258 dispatchers) for the 12 its plan uses: 25 ms of its 0.62 s of CPU.
_compiled_tier_on = False
# Families whose kernels have compiled forms or cell steps in another family's compiled
# modules as well as in their own (tests check that every registration is found so).
COMPILED_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "norm": ("reduce",),  # softmax and log_softmax, reductions along one dim
    "shape": ("prim",),  # slice_copy at a start position computed at run time
}
_imported_families: set[str] = set()


def use_compiled_forms() -> None:
    """Turn the compiled tier's registrations on: from now on :func:`get_compiled_form` and
    :func:`get_cell_step` import the compiled modules of the family of the kernel asked for."""
    global _compiled_tier_on
    _compiled_tier_on = True


def import_compiled_family(family: str) -> None:
    """Import the compiled modules of kernel family ``family`` (``compiled.py`` first: it
    registers the forms the others serve), once."""
    if family in _imported_families:
        return
    root = Path(__file__).parent / family
    names = sorted(p.stem for p in root.glob("compiled*.py"))
    for module in sorted(names, key=lambda n: n != "compiled"):
        importlib.import_module(f"{__package__}.{family}.{module}")
    _imported_families.add(family)  # (after: a failed import is tried again)


def family_of(name: str) -> str | None:
    """The kernel family (``kernels/<family>/``) of the reference kernel ``name``, or None."""
    _ensure_loaded()
    registered = _KERNELS.get(name)
    if registered is None:
        return None
    parts = registered.fn.__module__.split(".")
    return parts[2] if parts[:2] == ["pyexecutorch", "kernels"] and len(parts) > 3 else None


def _import_compiled_modules_for(name: str) -> None:
    family = family_of(name)
    if family is None:
        return
    for holder in (family, *COMPILED_ELSEWHERE.get(family, ())):
        import_compiled_family(holder)


# ---------------------------------------------------------------------------------------
# The fast-path contract: what a fast path (the callable a specializer or compiled form
# returns) may offer besides being called as its kernel is, and the keyword options the
# runtime passes to the specializers and compiled forms that declare them.


@dataclass(frozen=True)
class FastPath:
    """What a fast path (the callable a specializer or compiled form returns) offers the
    runtime besides being called as its kernel is; attached by :func:`offer`, read by
    :func:`fast_path_of`.

    * ``step``: its call on the planned arrays, which a whole-method function makes in
      its place (a compiled form's): ``(function, arguments)``, ``(function, arguments,
      checked)`` (``checked``: the function returns False where the reference kernel
      raises, see runtime.whole_method.Step), or a list of ``(function, arguments)``
      calls made in order;
    * ``pieces``: a split's or cat's ``(position, key)`` pairs: each output (split) or
      input (cat) is a copy of the slice ``key`` of the whole, which the runtime may plan
      as one copy per piece;
    * ``with_epilogue``: a convolution that runs the elementwise run after it too (its
      step is made with that run's);
    * ``view_of_input``: for a copy, the function from its input array to the view it
      copies, which a reader may take instead while the input's bytes stay unchanged;
    * ``fills_outputs``: it writes the out arrays it is given and returns them, so the
      planned arrays stay the outputs.
    """

    step: tuple[Any, ...] | list[tuple[Any, ...]] | None = None
    pieces: tuple[tuple[int, Any], ...] | None = None
    with_epilogue: bool = False
    view_of_input: Callable[[Any], Any] | None = None
    fills_outputs: bool = False

    def __post_init__(self) -> None:
        for field in ("with_epilogue", "fills_outputs"):
            if type(getattr(self, field)) is not bool:
                raise TypeError(f"fast path fact {field!r} must be a bool")
        if self.view_of_input is not None and not callable(self.view_of_input):
            raise TypeError("fast path fact 'view_of_input' must be a function of the input")
        if self.step is not None and not _valid_step(self.step):
            raise TypeError(
                "fast path fact 'step' must be (function, arguments[, checked]) or a list of "
                f"(function, arguments) calls, not {type(self.step).__name__}"
            )
        if self.pieces is not None and not (
            isinstance(self.pieces, tuple)
            and all(isinstance(p, tuple) and len(p) == 2 and type(p[0]) is int for p in self.pieces)
        ):
            raise TypeError("fast path fact 'pieces' must be a tuple of (position, key) pairs")


def _valid_call(call: Any, checked: bool) -> bool:
    return (
        isinstance(call, tuple)
        and len(call) in ((2, 3) if checked else (2,))
        and call[0] is not None  # (a dispatcher, or a generated one named before its import)
        and isinstance(call[1], (tuple, list))
        and (len(call) == 2 or type(call[2]) is bool)
    )


def _valid_step(step: Any) -> bool:
    if isinstance(step, list):
        return bool(step) and all(_valid_call(c, False) for c in step)
    return _valid_call(step, True)


_FAST_PATH_FIELDS = frozenset(f.name for f in dataclasses.fields(FastPath))
_NO_FAST_PATH = FastPath()
# The attribute :func:`offer` sets on a fast path (a function, an object or a class).
_OFFERED = "offered_fast_path"


def offer(fast: Any, **facts: Any) -> Any:
    """Attach what ``fast`` offers (the fields of :class:`FastPath`, validated) and return
    it: a function or object a specializer returns, or a class whose instances all offer
    the same. The one way a kernel offers these facts (:func:`fast_path_of` refuses them
    as bare attributes)."""
    unknown = set(facts) - _FAST_PATH_FIELDS
    if unknown:
        raise TypeError(f"unknown fast path facts {sorted(unknown)} offered")
    setattr(fast, _OFFERED, FastPath(**facts))
    return fast


def fast_path_of(fast: Any) -> FastPath:
    """What the callable ``fast`` offers (see :class:`FastPath` and :func:`offer`); nothing
    for None or a callable that offers nothing."""
    if fast is None:
        return _NO_FAST_PATH
    offered = getattr(fast, _OFFERED, None)
    if offered is not None:
        return offered
    held = getattr(fast, "__dict__", None)
    if (held and not _FAST_PATH_FIELDS.isdisjoint(held)) or _bare_on_class(type(fast)):
        bare = sorted(f for f in _FAST_PATH_FIELDS if hasattr(fast, f))
        raise TypeError(
            f"{fast!r} offers {bare} as bare attributes: a fast path offers them through "
            "pyexecutorch.kernels.registry.offer"
        )
    return _NO_FAST_PATH


@functools.cache
def _bare_on_class(cls: type) -> bool:
    return any(f in vars(c) for c in cls.__mro__ for f in _FAST_PATH_FIELDS)


def whole_step(function: Any, arguments: tuple[Any, ...]) -> Any:
    """A compiled form's answer inside a whole method (called with ``whole=True``) where it
    offers nothing alone: only its call on the planned arrays, ``function(*arguments)``
    (see ``runtime.whole_method``)."""
    return offer(_WholeStep(), step=(function, arguments))


class _WholeStep:
    """What :func:`whole_step` returns: a step and nothing to call."""


# The keyword options the runtime passes to a specializer or compiled form that declares a
# parameter of that name (see :func:`specializer` and :func:`compiled_form`).
FAST_PATH_OPTIONS = {
    "dynamic": "some tensor has a dynamic-bound shape: the tensors come at their upper bounds",
    "unused_outputs": "the positions (among the outputs) of outputs nothing reads",
    "whole": "a compiled form asked for the step a whole-method function would call (inside "
    "a whole method, or a traced method taking the whole-method form)",
    "live_scalars": "the positions of scalar arguments written at run time (a start position "
    "read from the inputs): their load-time value is only a placeholder, the fast path reads "
    "them per call; only fast paths declaring this are asked for such an instruction",
}


@functools.cache
def options_of(fast_path_maker: Callable[..., Any]) -> frozenset[str]:
    """The options of :data:`FAST_PATH_OPTIONS` that a specializer or compiled form takes
    (its parameters of those names), read once per function."""
    return frozenset(inspect.signature(fast_path_maker).parameters) & FAST_PATH_OPTIONS.keys()


# ---------------------------------------------------------------------------------------
# Operator facts: what the runtime's compiled lowering may rely on about an operator
# besides its kernels, stated by the operator's family (a ``facts.py`` beside its kernels)
# so that the runtime names no operator itself.

# The channels-last access rules the runtime knows (see pyexecutorch.runtime.layout): which
# of an instruction's 4-D tensors may be stored channels-last, and in which groups.
LAYOUT_RULES = frozenset(
    {"convolution", "elementwise", "spatial_mean", "pooling", "channel_pieces"}
)


@dataclass(frozen=True)
class Product:
    """A matrix product the runtime may run as one BLAS call in a method compiled whole:
    the argument positions of its operands (``a @ b``), of a bias added to the product
    (None: none), and of scale factors that must be 1 for that call."""

    a: int
    b: int
    bias: int | None = None
    unit_scales: tuple[int, ...] = ()


def _all_constants(constants: dict[int, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Reduction:
    """A reduction the runtime may fuse with the elementwise runs around it (the compiled
    tier's reduction loops, :mod:`pyexecutorch.runtime.fusion_reductions`), written once as
    primitive steps.

    * ``build(g, x, n, constants, tensors)``: its steps on the loop's graph ``g``
      (``g.reduce(kind, node)`` with kind ``"sum"``, ``"max"`` or ``"any"``;
      ``g.elem(expression, *nodes)`` over ``{0}``, ``{1}``...), from the reduced input's
      node ``x``, the element count of one row ``n`` (a source expression), the constant
      arguments and the tensor operands' nodes (position -> node or None); returns the
      node of each output position;
    * ``dims(constants, rank)``: the reduced dimensions, or None where it does not fuse;
    * ``tensors``: optional tensor operands besides the input (position 0);
    * ``keepdim_at``: the keepdim argument (None: outputs keep every dimension);
    * ``constant(constants)``: whether it fuses with these constant arguments;
    * ``tests``: bool in and out (``any``): only inside a group of a float reduction;
    * ``standalone``: on a stored input its family's standalone compiled kernel runs it as
      well as a fused loop (sums over one run of axes, eight partial sums per row).
    """

    build: Callable[..., dict[int, str]]
    dims: Callable[[dict[int, Any], int], tuple[int, ...] | None]
    tensors: tuple[int, ...] = ()
    keepdim_at: int | None = None
    constant: Callable[[dict[int, Any]], bool] = _all_constants
    tests: bool = False
    standalone: bool = False


@dataclass(frozen=True)
class Epilogue:
    """An operator whose channels-last compiled step may apply the elementwise run after
    it as it stores (a convolution's residual add, activation and clamps; see
    :mod:`pyexecutorch.runtime.epilogue`).

    * ``store_pass(ops, out, number, value)``: the run ``ops`` (``(operator name,
      arguments, output)`` triples) after the instruction writing value ``out`` as what
      the step applies (a record with ``residual``, the value index added or None), or
      None; ``number(j)``: value ``j`` as a number or None; ``value(j)``: its load-time
      value;
    * ``channels_last_step(values, out, found, residual)``: its step on the load-time
      ``values`` (outs excluded) writing ``out`` with that pass (``residual``: the added
      array or None), or None.
    """

    store_pass: Callable[..., Any]
    channels_last_step: Callable[..., Any]


# What a "shape_from_data" fact may say: the output's size depends on the input's values
# always, or when an index is a boolean mask.
SHAPE_FROM_DATA = frozenset({"always", "boolean_mask"})
# The parts of an inference batch norm folded into the convolution before it at load.
BATCH_NORM_FOLD_ROLES = frozenset({"convolution", "batch_norm"})


@dataclass(frozen=True)
class OperatorFacts:
    """What the runtime may rely on about one operator (by its program name).

    For the channels-last layout and whole-method functions (compiled tier):

    * ``layout``: the channels-last access rule of its instruction (one of
      :data:`LAYOUT_RULES`), None: its tensors stay NCHW.
    * ``channels_last_step``: builds its compiled step on channels-last arrays from the
      instruction's load-time arguments (the kernel's order, outs last): ``(function,
      arguments)``, or None where it has none for those arguments. Called only with the
      compiled tier on.
    * ``step_only_when_whole``: its numpy fast path costs a warm load milliseconds (a
      convolution packs its weights and generates its code) while, inside a method
      compiled whole, its compiled step does all the work: in a method that may compile
      whole, that fast path is made only if a line calls it. It writes its out array.
    * ``traced_as_whole``: its whole-method form sums differently from its
      per-instruction one (a product's loop of multiply-adds): a traced method, which
      never compiles whole, takes the whole-method form, so that tracing a method does
      not change its numbers.
    * ``copy_source``: the operator copies the argument at this position to its output,
      same elements in the same order (for the in-place ``copy_``, the first argument is
      the destination).
    * ``product``: a matrix product (see :class:`Product`).
    * ``fused_reduction``: a reduction fused with the elementwise runs around it (see
      :class:`Reduction`).
    * ``epilogue``: it may apply the elementwise run after it as it stores (see
      :class:`Epilogue`).
    * ``split_dim``: it splits its first argument along the dimension given by the
      argument at this position into its output list (a loop may read a piece in place).

    For loading, verification and folding:

    * ``stack_style``: its kernel takes the program's output value as its last argument
      and returns its new value (no separate return slot), as ``executorch_prim``
      operators' kernels do.
    * ``impure``: its result is not a function of its arguments (random numbers,
      uninitialized memory): never computed once at load.
    * ``byte_copy``: it copies its first argument's bytes as they are (a reshape's copy):
      written onto those same bytes it changes nothing.
    * ``batch_norm_fold``: its part in folding an inference batch norm into the convolution
      before it (:mod:`pyexecutorch.runtime.batch_norm_fold`, one of
      :data:`BATCH_NORM_FOLD_ROLES`): ``"convolution"``, a kernel taking ``(input, weight,
      bias, stride, padding, dilation, transposed, output_padding, groups, out)``, or
      ``"batch_norm"``, one taking ``(input, gamma, beta, mean, var, momentum, eps, out,
      save_mean, save_invstd)``.
    * ``run_time_view``: its output is a view of its first argument's bytes made at run
      time (it writes no data); the value names the copy operator (same arguments) that
      stands for it where shapes are fixed (a static plan).

    For the static plans of dynamic-shape methods (:mod:`pyexecutorch.runtime.shape_plans`):

    * ``shape_from_data``: its output's size depends on its inputs' values, not only their
      shapes (one of :data:`SHAPE_FROM_DATA`).
    * ``computes_sizes``: its scalar outputs follow from its arguments' sizes and scalars
      (``sym_size``, the scalar arithmetic of ``executorch_prim``).
    * ``reads_scalar``: it reads a scalar from a tensor's data (``item()``).
    * ``shape_ignores_scalars``: its output shapes do not depend on its scalar arguments
      (a KV-cache update at a start position).
    * ``clamped_slice``: a slice ``(input, dim, start, end, step, out)`` whose bounds are
      clamped to the dimension (its length follows its bounds' values).
    """

    layout: str | None = None
    channels_last_step: Callable[..., Any] | None = None
    step_only_when_whole: bool = False
    traced_as_whole: bool = False
    copy_source: int | None = None
    product: Product | None = None
    fused_reduction: Reduction | None = None
    epilogue: Epilogue | None = None
    split_dim: int | None = None
    stack_style: bool = False
    impure: bool = False
    byte_copy: bool = False
    run_time_view: str | None = None
    batch_norm_fold: str | None = None
    shape_from_data: str | None = None
    computes_sizes: bool = False
    reads_scalar: bool = False
    shape_ignores_scalars: bool = False
    clamped_slice: bool = False

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            kinds = _FACT_KINDS[field.name]
            if value is not None and not (
                callable(value) if kinds == "callable" else type(value) in kinds
            ):
                text = (
                    "a function" if kinds == "callable" else " or ".join(k.__name__ for k in kinds)
                )
                raise TypeError(f"operator fact {field.name!r} must be {text}")
        if self.layout is not None and self.layout not in LAYOUT_RULES:
            raise ValueError(f"unknown layout rule {self.layout!r} (known: {sorted(LAYOUT_RULES)})")
        if self.shape_from_data is not None and self.shape_from_data not in SHAPE_FROM_DATA:
            raise ValueError(
                f"unknown shape_from_data {self.shape_from_data!r} (known: "
                f"{sorted(SHAPE_FROM_DATA)})"
            )
        if self.batch_norm_fold is not None and self.batch_norm_fold not in BATCH_NORM_FOLD_ROLES:
            raise ValueError(
                f"unknown batch_norm_fold role {self.batch_norm_fold!r} (known: "
                f"{sorted(BATCH_NORM_FOLD_ROLES)})"
            )
        if self.run_time_view is not None and "::" not in self.run_time_view:
            raise ValueError(f"run_time_view {self.run_time_view!r} is not an operator name")


# Each fact's accepted value types (besides None where its default is None).
_FACT_KINDS: dict[str, Any] = {
    "layout": (str,),
    "channels_last_step": "callable",
    "step_only_when_whole": (bool,),
    "traced_as_whole": (bool,),
    "copy_source": (int,),
    "product": (Product,),
    "fused_reduction": (Reduction,),
    "epilogue": (Epilogue,),
    "split_dim": (int,),
    "stack_style": (bool,),
    "impure": (bool,),
    "byte_copy": (bool,),
    "run_time_view": (str,),
    "shape_from_data": (str,),
    "computes_sizes": (bool,),
    "reads_scalar": (bool,),
    "shape_ignores_scalars": (bool,),
    "clamped_slice": (bool,),
    "batch_norm_fold": (str,),
}


NO_FACTS = OperatorFacts()
_FACTS: dict[str, OperatorFacts] = {}


def declare(*names: str, **facts: Any) -> None:
    """Declare facts (the fields of :class:`OperatorFacts`) of the operators ``names``.

    Each fact of an operator is declared once: a second declaration of the same field
    raises ``ValueError``, as a second kernel does.
    """
    unknown = set(facts) - {f.name for f in dataclasses.fields(OperatorFacts)}
    if unknown:
        raise TypeError(f"unknown operator facts {sorted(unknown)} declared for {names}")
    for name in names:
        held = _FACTS.get(name, NO_FACTS)
        for field in facts:
            if getattr(held, field) != getattr(NO_FACTS, field):
                raise ValueError(f"fact {field!r} of {name!r} is declared twice")
        _FACTS[name] = dataclasses.replace(held, **facts)


def facts_of(name: str) -> OperatorFacts:
    """The facts declared for the operator ``name`` (none declared: :data:`NO_FACTS`)."""
    _ensure_loaded()
    return _FACTS.get(name, NO_FACTS)


def declared(field: str) -> dict[str, Any]:
    """Every operator with the fact ``field`` declared, and its value."""
    _ensure_loaded()
    default = getattr(NO_FACTS, field)
    return {n: getattr(f, field) for n, f in _FACTS.items() if getattr(f, field) != default}


_loaded = False


def _ensure_loaded() -> None:
    # The kernel modules register themselves on import; importing the package
    # imports them all exactly once. (A flag: a load asks for facts thousands of times.)
    global _loaded
    if not _loaded:
        import pyexecutorch.kernels as package  # noqa: PLC0415

        # (not while the package is still importing: another thread must then wait for it)
        _loaded = not getattr(package.__spec__, "_initializing", False)


def get_kernel(name: str) -> Kernel | None:
    """The kernel registered under the program name ``name``, or ``None``."""
    _ensure_loaded()
    return _KERNELS.get(name)


def operator_names() -> list[str]:
    """Every registered program name, sorted."""
    _ensure_loaded()
    return sorted(_KERNELS)
