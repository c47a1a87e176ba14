"""Whole-method compilation (the compiled tier): one numba function runs a method's chain.

When every instruction a chain runs is a compiled loop on arrays known at load
(a fused elementwise run, or a compiled kernel offering a :class:`Step`), and
the rest are no work at run time (views made at load, constants folded,
members of a fused run), the chain becomes one generated ``@njit`` function
calling those loops in order, and ``run`` calls it once: the Python call of
each instruction disappears.

Kernel fast paths take part through two facts they offer (registry.FastPath, read by
runtime.step_recorder):
``fills_outputs`` (it writes the out arrays it is given and returns them, so
its outputs stay their planned arrays and later steps can bind them) and
``step`` (``(dispatcher, args[, checked])``: its compiled call on the planned
arrays; or a list of such unchecked calls, made in order, such as a convolution
and its epilogue's loop). View copies, split/cat pieces and compiled forms taking ``whole=True``
(products a little past the standalone loop's size) become steps too.

The generated source names each loop by the module it was generated in and
says which of the function's parameters each call takes; it depends on no
size, so the disk cache (:mod:`pyexecutorch.jit`) serves every
method with the same pattern of loops, dtypes and ranks.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyexecutorch.jit import entry_points, generated, symbol_calls
from pyexecutorch.kernels.registry import facts_of
from pyexecutorch.runtime.whole_arguments import (
    WholeFunction,
    bound_array_source,
    describe,
    kinds_of,
    words,
)


@dataclass(frozen=True)
class Step:
    """One instruction as a compiled call: ``function(*args)`` does all its work.

    ``function`` is a numba dispatcher defined at the top level of an importable
    module (a generated one, or a kernel family's ``compiled.py``); ``args`` are
    arrays that are the same objects at every run, and plain ints, floats or bools.
    """

    function: Any
    args: tuple[Any, ...]
    # The function returns False, having written nothing, where the reference kernel
    # raises (an index out of range): the method then calls that kernel (see source_of).
    checked: bool = False


def _module_name(function: Any) -> tuple[str, str] | None:
    """(module, attribute) under which ``function`` can be imported, or None."""
    if type(function) is generated.GeneratedFunction:
        return function.module_name, function.name
    py = getattr(function, "py_func", None)
    module = getattr(py, "__module__", None)
    name = getattr(py, "__name__", None)
    if module is None or name is None:
        return None
    import sys  # noqa: PLC0415

    owner = sys.modules.get(module)
    if owner is None:
        return None
    if getattr(owner, name, None) is function:
        return module, name
    # A serial or parallel variant kept in a module-level pair (serial_and_parallel)
    for attr, held in vars(owner).items():
        if isinstance(held, tuple) and not attr.startswith("_"):
            for k, item in enumerate(held):
                if item is function:
                    return module, f"{attr}[{k}]"
    return None


def _constant(value: Any) -> str | None:
    """Source of a scalar argument, exact, or None when it has none.

    A numpy scalar keeps its dtype (a kernel's accumulator type may follow it). A bool or
    an int is typed as numba types a run-time value (``np.bool_(True)``, ``np.int64(3)``),
    not as a literal: numba compiles a function once per literal value it is called with,
    so two pooling layers of different sizes compiled the pooling kernel twice.
    """
    if isinstance(value, (np.floating, np.integer)) and value.dtype.kind in "fiu":
        text = _literal(value.item())
        return None if text is None else f"np.{value.dtype.name}({text})"
    kind = type(value)
    if kind is bool:
        return f"np.bool_({value!r})"
    if kind is int and abs(value) < 1 << 62:
        return f"np.int64({int.__repr__(value)})"
    return _literal(value)


def _literal(value: Any) -> str | None:
    """Python source of an exact bool, int or float, or None."""
    kind = type(value)
    if kind is bool:
        return repr(value)
    if kind is int and abs(value) < 1 << 62:
        return int.__repr__(value)
    if kind is float:
        if value != value:
            return "np.nan"
        if abs(value) == float("inf"):
            return "np.inf" if value > 0 else "-np.inf"
        return float.__repr__(value)
    return None


def source_of(steps: list[Step]) -> tuple[str, list[np.ndarray], list[tuple[str, Any]]] | None:
    """The generated module running ``steps`` in order, its parameters' arrays, and the
    functions it calls (name in the module, function).

    The module does not import the functions it calls: :func:`compile_steps` binds
    them before it compiles, as calls by symbol (:mod:`pyexecutorch.jit.symbol_calls`),
    and a function read back from the disk cache reads their records first, not their
    modules. Each is named in a comment, which makes
    the source, and so its cache entry, this sequence of calls' own.
    None when some step's function cannot be imported by name or some argument
    is neither an array nor an exact scalar.
    """
    callees: dict[tuple[str, str], tuple[str, Any]] = {}
    params: list[np.ndarray] = []
    param_of: dict[int, str] = {}
    calls = []
    for index, step in enumerate(steps):
        where = _module_name(step.function)
        if where is None:
            return None
        if where not in callees:
            callees[where] = (f"f{len(callees)}", step.function)
        fn = callees[where][0]
        parts = []
        for a in step.args:
            if isinstance(a, np.ndarray):
                name = param_of.get(id(a))
                if name is None:
                    name = param_of[id(a)] = f"a{len(params)}"
                    params.append(a)
                parts.append(name)
            else:
                text = _constant(a)
                if text is None:
                    return None
                parts.append(text)
        call = f"{fn}({', '.join(parts)})"
        if step.checked:
            calls += [f"    if not {call}:", f"        return {index}"]
        else:
            calls.append(f"    {call}")
    lines = [
        "import numpy as np",
        "",
        "from pyexecutorch.runtime.bound_arrays import bound_array",
        "",
    ]
    for (module, name), (alias, _) in callees.items():
        lines.append(f"{alias} = None  # {module}:{name}, called by symbol")
    # the arrays come as the words of one array (see runtime.whole_arguments)
    unpack, offset = [], 0
    for k, a in enumerate(params):
        unpack.append(f"    a{k} = {bound_array_source(a, offset)}")
        offset += words(a)
    lines += [
        "",
        "",
        "# compiled by entry_points.plain_entry_point, as njit(error_model='numpy'), and kept in",
        "# a function record (jit/function_records.py)",
        "def whole(meta):",
        *unpack,
        *calls,
        "    return -1",
        "",
    ]
    return "\n".join(lines), params, list(callees.values())


def compile_steps(steps: list[Step]) -> tuple[WholeFunction, tuple[np.ndarray, ...], str] | None:
    """(compiled function, the arrays it takes, its source) running ``steps`` in one call,
    or None. The function is called on the arrays' words: ``function.entry(meta)`` with
    ``meta = function.bind(arrays)`` (see runtime.whole_arguments)."""
    if not steps:
        return None
    built = source_of(steps)
    if built is None:
        return None
    source, params, callees = built
    # Named, not imported: read back from its record, the function needs no module.
    whole = generated.GeneratedFunction(source, "whole", "whole")

    def bind_callees() -> bool:  # only before a compilation: see source_of
        """Bind the callees; True where every one is called by symbol."""
        module = generated.generated_module(source, "whole")
        glue = True
        for alias, function in callees:
            # by symbol: the function's machine code is compiled once, in its own record,
            # not linked into this one and optimised again (symbol_calls)
            callee = symbol_calls.callee_of(function)
            if callee is None:
                setattr(module, alias, generated.dispatcher_of(function))
                glue = False
            else:
                setattr(module, alias, symbol_calls.by_symbol(callee))
        return glue

    arrays = tuple(params)
    meta = describe(arrays)
    entry = entry_points.plain_entry_point(whole, (meta,), bind_callees)
    return WholeFunction(entry, kinds_of(arrays)), arrays, source


_COPY_SOURCE = """from numba import njit


@njit(cache=True, error_model="numpy")
def copy_flat(src, dst):
    for i in range(dst.size):
        dst[i] = src[i]


@njit(cache=True, error_model="numpy")
def copy_view(src, dst):
    dst[...] = src
"""


@functools.cache
def _copy_function(name: str) -> generated.GeneratedFunction:
    return generated.GeneratedFunction(_COPY_SOURCE, "copy", name)


def copy_source_position(name: str) -> int | None:
    """The argument a copy kernel reads its elements from (its family's declared
    ``copy_source``: source and destination hold the same elements in the same order;
    the destination is the out, or for the in-place copy_ the first argument), or None
    for other kernels."""
    return facts_of(name).copy_source


def _overlap_unsafe(inputs: list[np.ndarray], out: np.ndarray) -> bool:
    """Whether ``out`` shares memory with an input it does not match element for element."""
    for a in inputs:
        if np.shares_memory(a, out) and not (
            a.ctypes.data == out.ctypes.data and a.shape == out.shape and a.strides == out.strides
        ):
            return True
    return False


def same_elements(bound: Any, planned: Any) -> bool:
    """Whether array ``bound`` is ``planned``'s memory in its layout (the same object, or a
    view of the same first element, shape and dtype, both C-contiguous: a transpose that
    only moves dims of size 1, such as one token's keys), so a step made for ``planned``
    serves it."""
    if bound is planned:
        return True
    return (
        isinstance(bound, np.ndarray)
        and isinstance(planned, np.ndarray)
        and bound.dtype == planned.dtype
        and bound.shape == planned.shape
        and bound.flags.c_contiguous
        and planned.flags.c_contiguous
        and bound.ctypes.data == planned.ctypes.data
    )


def copy_step(name: str, args: list[Any], out: np.ndarray | None) -> Step | None:
    """A copy kernel call on bound arrays (``args`` as the kernel takes them) as a Step."""
    at = facts_of(name).copy_source
    if at is None:
        return None
    if out is None:  # copy_: the destination is the first argument
        out = args[0]
    return flat_copy_step(args[at], out)


def flat_copy_step(src: Any, out: Any) -> Step | None:
    """Copying array ``src`` into ``out`` (both C-contiguous, same dtype and size) element
    by element as a Step, or None."""
    if not (isinstance(src, np.ndarray) and isinstance(out, np.ndarray)):
        return None
    if (
        src.dtype != out.dtype
        or src.size != out.size
        or out.size == 0
        or not (src.flags.c_contiguous and out.flags.c_contiguous and out.flags.writeable)
        or _overlap_unsafe([src], out)
    ):
        return None
    return Step(_copy_function("copy_flat"), (_bits(src.reshape(-1)), _bits(out.reshape(-1))))


def view_copy_step(src: Any, dst: Any) -> Step | None:
    """Copying array ``src`` (any strides) into ``dst`` of its shape and dtype, as a Step."""
    if not (isinstance(src, np.ndarray) and isinstance(dst, np.ndarray)):
        return None
    if (
        src.dtype != dst.dtype
        or src.dtype.kind not in "biuf"
        or src.shape != dst.shape
        or dst.size == 0
        or not dst.flags.writeable
        or np.shares_memory(src, dst)
    ):
        return None
    return Step(_copy_function("copy_view"), (_bits(src), _bits(dst)))


def _bits(a: np.ndarray) -> np.ndarray:
    """``a`` as numba takes it for a copy: float16, which numba has no type for, as its
    uint16 bits (a copy of the bits is the copy of the values)."""
    return a.view(np.uint16) if a.dtype == np.float16 else a


def product_step(name: str, args: list[Any], out: np.ndarray) -> Step | None:
    """A float matrix product its family declares (``product``: mm, or addmm with a
    constant bias and beta = alpha = 1) on bound arrays as one BLAS call
    (:func:`pyexecutorch.kernels.linalg.compiled.blas_matmul`): the products the linalg
    forms leave to numpy's faster BLAS for their size, such as a CNN's classifier, when
    they are all that keeps a method from compiling whole. None without scipy."""
    product = facts_of(name).product
    if product is None:
        return None
    from pyexecutorch.kernels.linalg import compiled as linalg  # noqa: PLC0415 - needs numba

    a, b = args[product.a], args[product.b]
    bias = None if product.bias is None else args[product.bias]
    if any(isinstance(args[i], bool) or args[i] != 1 for i in product.unit_scales):
        return None
    if product.bias is not None and (not isinstance(bias, np.ndarray) or bias.flags.writeable):
        return None  # a bias that can change between runs is not copied at load
    if not linalg.HAS_BLAS:
        return None
    dt = out.dtype
    if dt not in (np.float32, np.float64):
        return None
    for x in (a, b, out):
        if not (isinstance(x, np.ndarray) and x.dtype == dt and x.ndim == 2):
            return None
        if not x.flags.c_contiguous:
            return None
    if not out.flags.writeable or out.size == 0:
        return None
    if a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]) or a.shape[1] == 0:
        return None
    if np.shares_memory(out, a) or np.shares_memory(out, b):
        return None
    rows = np.zeros((1, 1), dt)
    if bias is not None:
        if bias.dtype != dt:
            return None
        try:
            rows = np.ascontiguousarray(np.broadcast_to(bias, out.shape))
        except ValueError:
            return None
    function, blocks = linalg.blas_form(*a.shape, b.shape[1])
    return Step(function, (a[None], b[None], rows, out[None], bias is not None, blocks))


def elementwise_step(name: str, args: list[Any], out: np.ndarray) -> Step | None:
    """A lone elementwise kernel call on bound arrays as the one-operator fused loop."""
    from pyexecutorch.runtime.fusion import (  # noqa: PLC0415 - compiled tier only
        loop_array,
        single_op_call,
    )

    if not out.flags.writeable or out.size == 0:
        return None
    try:
        call = single_op_call(name, args, out)
    except (KeyError, TypeError, ValueError):
        return None
    if call is None:
        return None
    inputs = [args[p] for p in call.inputs]
    if _overlap_unsafe(inputs, out):
        return None
    arrays = [*inputs, out]
    flat = call.same_shape and all(a.flags.c_contiguous for a in arrays)
    aliases: dict[int, int] = {}
    if flat:
        arrays = [a.reshape(-1) for a in arrays]
        for k, a in enumerate(arrays[:-1]):
            if a.ctypes.data == out.ctypes.data:
                aliases[k] = 0  # read through the output's parameter (see FusedCall.source)
        arrays = [a for k, a in enumerate(arrays) if k not in aliases]
    return Step(call.lazy_function(flat, aliases), tuple(loop_array(a) for a in arrays))
