"""An XNNPACK delegate's plan on the compiled tier: its nodes as one compiled call.

:class:`CompiledPlan` is the graph specialised to one set of input shapes, like the
numpy interpreter's :class:`~pyexecutorch.backends.xnnpack.interpreter.Plan`, but every
value, the delegate's inputs and outputs included, is an array made at load (internal
values in memory that values read no more held, :mod:`.value_memory`), and each
node becomes :class:`~pyexecutorch.runtime.whole_method.Step` calls on those arrays
(:mod:`.compiled_nodes`). Consecutive steps become one generated function
(:func:`~pyexecutorch.runtime.whole_method.compile_steps`), so a delegate whose every
node has a step costs one compiled call. A node without one (a quantized value, an
option no kernel takes) runs its numpy builder's closures over the same arrays, between
the compiled functions of the steps before and after it.

The delegate's inputs and outputs are bound at run time, not copied: each argument of
the compiled functions that lies in a delegate input's or output's array (the array
itself, or a view a kernel made of it at load) is remade as the same view of the
caller's array, once per caller array (the method passes the same arrays on every
call, so a call is an identity check and the compiled call). A caller array that does
not fit (another dtype, layout or alignment, memory shared with another output) and a
value that a numpy closure reads or writes are copied in or out instead.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from pyexecutorch.backends.xnnpack import compiled_quantized  # noqa: F401 - its makers
from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.compiled_nodes import MAKERS, movable
from pyexecutorch.backends.xnnpack.interpreter import (
    Builder,
    Graph,
    node_event,
    same_memory_shape,
)
from pyexecutorch.backends.xnnpack.nodes import BUILDERS
from pyexecutorch.backends.xnnpack.value_memory import SEGMENT_BYTES, ValueMemory
from pyexecutorch.jit import deferral, entry_points, function_records
from pyexecutorch.kernels import registry
from pyexecutorch.kernels.common import fit, fp_warnings_off, fp_warnings_restore
from pyexecutorch.runtime.whole_arguments import WholeFunction
from pyexecutorch.runtime.whole_method import Step, compile_steps, view_copy_step

NDArray = np.ndarray
_CONVOLUTIONS = ("XNNConv2d", "XNNDepthwiseConv2d")
# Nodes whose steps write part of their output once, at load.
_WRITTEN_AT_LOAD = ("XNNStaticConstantPad",)


def operands(u: Any) -> list[int]:
    """The values node ``u`` reads."""
    name = type(u).__name__
    if name.startswith("XNNConcatenate"):
        ids = [u.input1_id, u.input2_id, u.input3_id, u.input4_id, u.input5_id]
        return ids[: int(name[-1])]
    found = []
    for field, value in vars(u).items():
        if field.endswith("_id") and not field.startswith("output") and isinstance(value, int):
            if value != S.INVALID_ID:
                found.append(value)
    return found


def readers_of(graph: Graph) -> dict[int, set[int]]:
    """For each value, the indices of the nodes that read it."""
    readers: dict[int, set[int]] = {}
    for k, node in enumerate(graph.nodes):
        for v in operands(node.xnode_union):
            readers.setdefault(v, set()).add(k)
    return readers


class StepBuilder(Builder):
    """A :class:`Builder` whose every value is an array made at load, building compiled
    steps where a maker takes the node and numpy closures where none does."""

    def __init__(
        self, graph: Graph, input_shapes: tuple[tuple[int, ...], ...], declared: bool = False
    ) -> None:
        super().__init__(graph, input_shapes, declared)
        self.readers = readers_of(graph)
        self.external = {v.id for v in graph.inputs} | {v.id for v in graph.outputs}
        # (internal values share memory across lifetimes; the delegate's inputs and
        # outputs, and arrays lying in them, are read after the last node)
        last_reads = {v: max(ks) for v, ks in self.readers.items()}
        last_reads.update(dict.fromkeys(self.external, len(graph.nodes)))
        # (address space for them all without reuse, and a megabyte for the arrays steps
        # make that are no value's: more than they take, mapped only where written; at
        # most a segment's default, past which more segments are made: a dynamic size's
        # declared bound could ask for more than the machine has)
        internal = [v for v in graph.values if v.const is None and v.id not in self.external]
        need = sum(math.prod(v.dims) * v.dtype.itemsize for v in internal) + (1 << 20)
        self.memory = ValueMemory(last_reads, min(need, SEGMENT_BYTES))
        # values part of which is written once at load (a pad's border): memory of their own
        self.kept = {
            _written(n.xnode_union)[0]
            for n in graph.nodes
            if type(n.xnode_union).__name__ in _WRITTEN_AT_LOAD
        }
        # compiled steps and numpy closures, in order: ("step", Step) / ("numpy", closure)
        self.items: list[tuple[str, Any]] = []
        self.deferred: dict[int, int] = {}  # NHWC value -> the NCHW value it transposes
        self.numpy_arrays: list[NDArray] = []  # arrays numpy closures read or write
        self.declined: list[tuple[int, str]] = []  # (node, type) run by numpy closures
        # (first item, end item, first node, end node): the items each maker or builder made
        self.spans: list[tuple[int, int, int, int]] = []

    def fixed(self, vid: int) -> bool:
        return True  # delegate inputs and outputs too: they are bound into the steps

    def is_external(self, vid: int) -> bool:
        return vid in self.external

    def add(self, step: Step) -> None:
        self.items.append(("step", step))

    def new(self, vid: int, shape: tuple[int, ...]) -> NDArray:
        """An array for value ``vid`` of ``shape``, not yet the value's (see commit)."""
        return self.allocate(vid, tuple(int(d) for d in shape), self.dtype(vid))

    def allocate(self, vid: int, shape: tuple[int, ...], dtype: np.dtype) -> NDArray:
        """Memory that no value read from the node being built on lies in, for an
        internal value; a new array for a delegate input or output."""
        if vid in self.external or vid in self.kept or math.prod(shape) == 0:
            return np.empty(shape, dtype)
        return self.memory.array(shape, dtype)

    def commit(self, vid: int, array: NDArray) -> None:
        """Make ``array`` value ``vid``'s (its shape checked as ``out`` checks it)."""
        self.claim(vid, array.shape)
        self.env[vid] = array

    def array(self, vid: int) -> NDArray:
        """Value ``vid``'s array (a deferred transpose is made now)."""
        src = self.deferred.pop(vid, None)
        if src is not None:
            out = self.allocate(vid, self.shapes[vid], self.dtype(vid))
            step = None
            if movable(self, vid, src):
                step = view_copy_step(self.env[src].transpose(0, 2, 3, 1), out)
            if step is None:
                x = self.env[src]

                def transpose(out: NDArray = out, x: NDArray = x) -> None:
                    np.copyto(out, x.transpose(0, 2, 3, 1))

                self.items.append(("numpy", transpose))
                self.numpy_arrays += [out, x]
            else:
                self.add(step)
            self.env[vid] = out
        return self.env[vid]

    def nchw(self, vid: int) -> NDArray:
        """4-D NHWC value ``vid`` as a logical NCHW array (channels-last memory, or the
        C-contiguous NCHW value it is a deferred transpose of)."""
        src = self.deferred.get(vid)
        return self.env[src] if src is not None else self.env[vid].transpose(0, 3, 1, 2)

    def defer_nhwc(self, vid: int, src: int, shape: tuple[int, ...]) -> None:
        """Value ``vid`` is NCHW value ``src`` transposed to NHWC; made only if something
        other than a convolution's input (:meth:`nchw`) asks for it."""
        self.shapes[vid] = shape
        self.deferred[vid] = src
        self.memory.read_until(src, self.memory.last_read(vid))  # (read when vid is)

    def reads_as_conv_input(self, k: int, vid: int) -> bool:
        u = self.graph.nodes[k].xnode_union
        return (
            type(u).__name__ in _CONVOLUTIONS
            and u.input1_id == vid
            and vid not in (u.filter_id, u.bias_id)
        )

    def build(self) -> None:
        nodes = self.graph.nodes
        k = 0
        while k < len(nodes):
            node = nodes[k]
            u = node.xnode_union
            name = type(u).__name__
            self.where = f"node {k} ({name})"
            self.memory.reclaim(k, self.env)
            make = MAKERS.get(name)
            made = len(self.items)
            consumed = make(self, k) if make is not None else 0
            if consumed:
                self.spans.append((made, len(self.items), k, k + consumed))
                k += consumed
                continue
            for v in operands(u):
                self.array(v)
            first = len(self.steps)
            BUILDERS[name](self, u, node)
            closures = self.steps[first:]
            del self.steps[first:]
            if closures:
                self.items += [("numpy", c) for c in closures]
                self.declined.append((k, name))
                for v in [*operands(u), *_written(u)]:
                    if self.env[v] is not None:
                        self.numpy_arrays.append(self.env[v])
            self.spans.append((made, len(self.items), k, k + 1))
            k += 1


def _written(u: Any) -> list[int]:
    if hasattr(u, "output_id"):
        return [u.output_id]
    if hasattr(u, "output_ids"):
        return list(u.output_ids)
    return [u.output_value_id, u.output_index_id]


def _bounds(a: NDArray) -> tuple[int, int]:
    """The first and one past the last byte address ``a`` reaches."""
    lo = hi = a.ctypes.data
    for n, s in zip(a.shape, a.strides, strict=True):
        if n == 0:
            return lo, lo
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + a.itemsize


class _External:
    """A delegate input or output: its array in the plan and how the caller's binds."""

    def __init__(self, vid: int, ext: int, array: NDArray, output: bool, const: bool) -> None:
        self.vid, self.ext, self.array, self.output = vid, ext, array, output
        self.lo, self.hi = _bounds(array)
        # bound to the caller's array (else copied): not for constants, values that numpy
        # closures touch, and arrays sharing memory with another external's
        self.bindable = not const and array.flags.c_contiguous and array.size > 0
        # the output that is this input's memory (a transpose moving only a dimension of
        # size 1 makes its output a view of its input): a method compiled whole binds the
        # input and copies it to the output (see CompiledPlan.whole_steps)
        self.aliased_output: _External | None = None
        self.whole = False  # its array is one value's memory of the plan, all of it

    def apart(self, lo: int, hi: int) -> bool:
        """Whether an array reaching bytes [lo, hi), which overlap this one's, is another
        value's memory at another time (it reaches past a memory that is this one's all)."""
        return self.whole and not (self.lo <= lo and hi <= self.hi)

    def fits(self, a: Any) -> bool:
        """Whether the caller's ``a`` can stand for the plan's array (its memory: a shape
        differing in dimensions of size 1 is the same memory)."""
        p = self.array
        return (
            type(a) is np.ndarray
            and a.dtype == p.dtype
            and same_memory_shape(a.shape, p.shape)
            and a.flags.c_contiguous
            and a.flags.writeable
            and a.flags.aligned
        )


# (the argument's types as function_records.types_key writes them: finer than its numba
# type, and read from its flags, where numba's typeof imports numpy.ma, 39 ms of a start)
# (argument position, external, byte offset, shape, strides, dtype, compiled type key)
Recipe = tuple[int, "_External", int, tuple[int, ...], tuple[int, ...], np.dtype, str | None]


class _Call:
    """One compiled function (or numpy closure) and its arguments."""

    def __init__(
        self, function: Callable[..., Any], args: tuple[Any, ...], source: str | None = None
    ) -> None:
        self.function = function
        self.args = args
        self.compiled = source is not None  # (else a numpy closure)
        self.source = source  # the generated module of the compiled function ("" for one step)
        # (position, external, byte offset, shape, strides, numba type) of each argument
        # that lies in an external's array: remade on the caller's array
        self.recipes: list[Recipe] = []


class CompiledPlan:
    """The graph specialised to one set of input shapes, as compiled calls."""

    compiled = True

    def __init__(
        self,
        graph: Graph,
        input_shapes: tuple[tuple[int, ...], ...],
        declared: bool = False,
        tracer: Any = None,
    ) -> None:
        registry.use_compiled_forms()  # (its nodes ask the kernel families for their steps)
        b = StepBuilder(graph, input_shapes, declared)
        # (the kernels' standalone entry points are never called here: only their steps)
        with deferral.deferred_entry_points():
            b.build()
        self.declined = b.declined
        self.steps = [item for kind, item in b.items if kind == "step"]
        externals: list[_External] = []
        for v in graph.inputs:
            externals.append(_External(v.id, v.external_id, b.env[v.id], False, False))
        for v in graph.outputs:
            externals.append(_External(v.id, v.external_id, b.env[v.id], True, v.const is not None))
        for e in externals:
            # (an output lying in the plan's memory whose bytes are one value's all: other
            # arrays overlapping it in part are values dead before it was made)
            e.whole = b.memory.whole_block(e.lo, e.hi)
            overlapping = [f for f in externals if f is not e and _overlap(e, f)]
            if overlapping:
                e.bindable = False  # (one value both input and output, or views of one array)
            if len(overlapping) == 1 and _aliased(e, overlapping[0]):
                e.aliased_output = overlapping[0]
            for a in b.numpy_arrays:
                lo, hi = _bounds(a)
                if lo < e.hi and e.lo < hi and not e.apart(lo, hi):
                    e.bindable = False
                    e.aliased_output = None
            if tracer is not None:  # (timed calls run on the plan's arrays: copied in and out)
                e.bindable = False
                e.aliased_output = None
        self.externals = externals
        # (value, external id, shape, dtype, array): as the numpy plan lists them
        self.outputs = [
            (e.vid, e.ext, e.array.shape, e.array.dtype, e.array) for e in externals if e.output
        ]
        self.calls = _calls(b.items if tracer is None else _timed_items(b, graph, tracer))
        self.numpy_steps = any(not c.compiled for c in self.calls)
        for call in self.calls:
            call.recipes = self._recipes(call.args, call.compiled)
        self.step_recipes = [self._recipes(s.args, True) for s in self.steps]
        self.held: list[Any] = []  # the caller's arguments the calls are bound to
        self._set_bound([(c.function, c.args) for c in self.calls])
        self.copy_in = [e for e in externals if not e.output]
        self.copy_out = [e for e in externals if e.output]

    def _recipes(self, args: tuple[Any, ...], rebindable: bool) -> list[Recipe]:
        """How each argument lying in an external's array is remade on the caller's; an
        external some argument covers only in part (or a numpy closure reads) is copied."""
        recipes = []
        for position, a in enumerate(args):
            if not isinstance(a, np.ndarray):
                continue
            lo, hi = _bounds(a)
            for e in self.externals:
                if lo < e.hi and e.lo < hi and not e.apart(lo, hi):
                    if e.lo <= lo and hi <= e.hi and rebindable:
                        offset = a.ctypes.data - e.array.ctypes.data
                        kind = function_records.types_key((a,))
                        recipes.append((position, e, offset, a.shape, a.strides, a.dtype, kind))
                    else:
                        e.bindable = False
                        e.aliased_output = None
        return recipes

    def _chosen(self, args: list[Any]) -> dict[int, np.ndarray]:
        """The caller's arrays (by id of their external) that the calls can bind."""
        chosen = {id(e): args[e.ext] for e in self.externals if e.bindable and e.fits(args[e.ext])}
        for e in self.externals:
            if e.output and id(e) in chosen:
                a = chosen[id(e)]
                # an output sharing memory with another argument is computed apart
                for f in self.externals:
                    other = args[f.ext]
                    if f is not e and isinstance(other, np.ndarray) and np.shares_memory(a, other):
                        chosen.pop(id(e), None)
                        if f.output:
                            chosen.pop(id(f), None)
        return chosen

    @staticmethod
    def _rebound(
        args: tuple[Any, ...], recipes: list[Recipe], chosen: dict[int, np.ndarray]
    ) -> tuple[tuple[Any, ...], _External | None]:
        """``args`` remade on the chosen arrays, or the external whose view would not
        have the type the function was compiled for (its layout or writability, say)."""
        params = list(args)
        for position, e, offset, shape, strides, dtype, kind in recipes:
            a = chosen.get(id(e))
            if a is None:
                continue
            # (in the argument's own dtype: a step may read or write an external's bytes
            # as another type, a quantized value's raw bytes, say)
            view = np.ndarray(shape, dtype, a, offset, strides)
            if function_records.types_key((view,)) != kind:
                return args, e
            params[position] = view
        return tuple(params), None

    def _set_bound(self, bound: list[tuple[Any, tuple[Any, ...]]]) -> None:
        """The calls made with these arguments. A function compiled from several steps
        takes its arrays' words (runtime.whole_arguments), made once here; the arrays they
        describe are held beside them."""
        self.bound_arrays = [params for _, params in bound]
        self.bound = [
            (f.entry, (f.bind(params),)) if isinstance(f, WholeFunction) else (f, params)
            for f, params in bound
        ]

    def _bind(self, args: list[Any]) -> None:
        """Bind the calls to the caller's arrays where they fit."""
        chosen = self._chosen(args)
        while True:
            bound = []
            for call in self.calls:
                params, refused = self._rebound(call.args, call.recipes, chosen)
                if refused is not None:
                    chosen.pop(id(refused))
                    break
                bound.append((call.function, params))
            else:
                break
        self._set_bound(bound)
        self.copy_in = [e for e in self.externals if not e.output and id(e) not in chosen]
        self.copy_out = [e for e in self.externals if e.output and id(e) not in chosen]
        self.held = list(args)

    def whole_steps(self, args: list[Any]) -> list[Step] | None:
        """The plan's steps on the caller's arrays ``args`` (the delegate call's inputs
        then outputs), for a caller that compiles them into a function of its own (a
        method compiled whole); None unless every node is a step and every argument binds."""
        if self.numpy_steps or len(args) != len(self.externals):
            return None
        chosen = self._chosen(args)
        # an input whose memory is also an output: the steps read the caller's input,
        # and a copy at the end makes the caller's output
        copies = []
        for e in self.externals:
            f = e.aliased_output
            if f is None or e.output or not (e.fits(args[e.ext]) and f.fits(args[f.ext])):
                continue
            src, dst = args[e.ext], args[f.ext]
            copy = view_copy_step(src.reshape(f.array.shape), dst.reshape(f.array.shape))
            if copy is not None:  # (the output stays out of chosen: its steps read src)
                chosen[id(e)] = src
                copies.append(copy)
        if len(chosen) + len(copies) != len(self.externals):
            return None
        made = []
        for step, recipes in zip(self.steps, self.step_recipes, strict=True):
            params, refused = self._rebound(step.args, recipes, chosen)
            if refused is not None:
                return None
            made.append(Step(step.function, params, step.checked))
        return made + copies

    def holds(self, args: list[Any]) -> bool:
        """Whether the calls are bound to exactly these arguments."""
        held = self.held
        return len(args) == len(held) and all(map(operator.is_, args, held))

    def run(self, args: list[Any]) -> list[Any] | None:
        if not self.holds(args):
            self._bind(args)
        return self.run_bound(args)

    def run_bound(self, args: list[Any]) -> list[Any] | None:
        """Run on ``args``, which the calls are bound to (see holds)."""
        token = fp_warnings_off() if self.numpy_steps else None
        try:
            for e in self.copy_in:
                a = np.asarray(args[e.ext]).reshape(e.array.shape)
                np.copyto(e.array, a, casting="unsafe")
            for function, params in self.bound:
                function(*params)
            return self._outputs(args) if self.copy_out else None
        finally:
            if token is not None:
                fp_warnings_restore(token)

    def _outputs(self, args: list[Any]) -> list[Any] | None:
        """Outputs the calls computed into the plan's arrays, into the caller's (or, where
        they do not fit, into new arrays returned in their place)."""
        replaced: list[tuple[int, NDArray]] = []
        for e in self.copy_out:
            a, val = args[e.ext], e.array
            if type(a) is np.ndarray and a.dtype == val.dtype and a.flags.writeable:
                if a.flags.c_contiguous and same_memory_shape(a.shape, val.shape):
                    np.copyto(a.reshape(val.shape), val)  # (its own array: a scalar's rank aside)
                    continue
                try:
                    dst = a if a.shape == val.shape else fit(a, val.shape)
                except ValueError:
                    dst = None
                if dst is not None:
                    np.copyto(dst, val)
                    if dst is not a:
                        replaced.append((e.ext, dst))
                    continue
            replaced.append((e.ext, np.array(val, copy=True)))
        if not replaced:
            return None
        result = list(args)
        for ext, arr in replaced:
            result[ext] = arr
        return result


def _overlap(e: _External, f: _External) -> bool:
    return e.lo < f.hi and f.lo < e.hi


def _aliased(e: _External, f: _External) -> bool:
    """Whether input ``e`` and output ``f`` are one memory, elements in the same order."""
    a, b = e.array, f.array
    return (
        not e.output
        and f.output
        and a.dtype == b.dtype
        and a.size == b.size > 0
        and a.flags.c_contiguous
        and b.flags.c_contiguous
        and a.ctypes.data == b.ctypes.data
    )


def _timed_items(b: StepBuilder, graph: Graph, tracer: Any) -> list[tuple[str, Any]]:
    """The plan's items as one timed closure per node, or per group of nodes one maker
    fused (a convolution and its activation, say), each recorded into ``tracer`` (a
    runtime EventTracer) as an event inside the delegate (:func:`node_event`): the profile
    of what the compiled tier runs."""
    from pyexecutorch.runtime.etdump import clock  # noqa: PLC0415 - only traced plans need it

    timed: list[tuple[str, Any]] = []
    done = 0  # items before this one are in ``timed``
    for first, end, k, k_end in b.spans:
        if first == end:
            continue  # (a node folded into another's steps, or a no-op)
        timed += b.items[done:first]  # (made outside any node's span: run untimed)
        done = end
        key = node_event(tracer, k, graph.nodes[k:k_end])[0]
        calls = [
            (entry_points.entry_point(item.function, item.args), item.args)
            if what == "step"
            else (item, ())
            for what, item in b.items[first:end]
        ]

        def timed_call(calls: list[tuple[Any, tuple[Any, ...]]] = calls, key: int = key) -> None:
            start = clock()
            for function, args in calls:
                function(*args)
            tracer.record_delegate(key, start, clock())

        timed.append(("numpy", timed_call))
    return timed + b.items[done:]


def _calls(items: list[tuple[str, Any]]) -> list[_Call]:
    """Consecutive steps as one compiled function each; numpy closures between them."""
    calls: list[_Call] = []
    run: list[Step] = []

    def flush() -> None:
        if not run:
            return
        whole = compile_steps(run) if len(run) > 1 else None
        if whole is not None:
            function, arrays, source = whole
            calls.append(_Call(function, arrays, source))
        else:
            for step in run:
                entry = entry_points.entry_point(step.function, step.args)
                calls.append(_Call(entry, step.args, ""))
        run.clear()

    for kind, item in items:
        if kind == "step":
            run.append(item)
        else:
            flush()
            calls.append(_Call(item, ()))
    flush()
    return calls
