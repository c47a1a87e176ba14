"""Fusion of elementwise instructions into one generated, compiled loop (the compiled tier).

At load, runs of consecutive elementwise instructions of one dtype and one
output shape (operands broadcasting to it) become one numba loop built from
each operator's scalar formula (:data:`pyexecutorch.kernels.elementwise.formulas.FORMULAS`).
An intermediate that nothing outside the run reads lives in a register only;
the others are stored as they would have been. A run is kept on the numpy
kernels when a stored output overlaps an input it does not match element for
element (the fused loop would read bytes it already wrote).

The generated source depends only on the formulas, the dtype, each operand's
rank and which of its dimensions broadcast, never on sizes: the same loop (and
its cached machine code) serves every model with that pattern.

float16, which numba cannot type, travels as its uint16 bits (:func:`loop_array`):
the loop reads each element as its float32 value, computes in float32 and rounds
every result to half precision, as numpy's float16 kernels round each pass
(:mod:`pyexecutorch.jit.half`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.jit import generated
from pyexecutorch.kernels.elementwise.formulas import FORMULAS, Formula
from pyexecutorch.kernels.registry import facts_of
from pyexecutorch.runtime.dataflow import Flow
from pyexecutorch.schema.program import KernelCall, Tensor, TensorList, TensorShapeDynamism

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts

HALF = np.dtype(np.float16)
_FLOAT_DTYPES = {np.dtype(np.float32), np.dtype(np.float64), HALF}
_INT_DTYPES = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8)}
_LOOP_DTYPES = _FLOAT_DTYPES | _INT_DTYPES | {np.dtype(np.bool_)}  # what a loop stores


@dataclass(frozen=True)
class _Piece:
    """One output of a split into equal parts: ``src``'s part ``n`` along ``axis``."""

    pc: int
    src: int
    n: int
    axis: int
    listed: int  # the split's output list
    items: tuple[int, ...]  # every part


@dataclass
class _Member:
    pc: int
    out: int
    formula: Formula
    tensors: dict[int, int]  # argument position -> value index
    constants: dict[int, Any]  # argument position -> value
    expression: str
    literals: dict[int, str]  # argument position -> source of its constant value
    dtype: np.dtype | None  # the loop's dtype (a test's operands'); None: bool in and out
    shape_refs: tuple[int, ...] = ()  # values read for their shape only


@dataclass
class FusedCall:
    """One fused run: ``function(flat)(*inputs, *outputs)`` computes every member instruction.

    The loop nest follows the output's rank, each input indexed with its own
    broadcasting; the ``flat`` form (one loop over 1-D views) serves runs whose
    arrays all have the output's shape and are C-contiguous, and vectorizes best.
    """

    pcs: list[int]
    inputs: list[int]
    outputs: list[int]
    dtype: np.dtype
    rank: int
    loads: list[tuple[str, str, int]] = field(repr=False)  # (name, index, input read) per load
    body: list[str] = field(repr=False)
    stores: list[str] = field(repr=False)  # the value each output stores
    same_shape: bool = False  # no input broadcasts: the flat form may be used
    absorbed: list[int] = field(default_factory=list)  # splits whose pieces the loop reads itself
    halves: frozenset[int] = frozenset()  # inputs (by position) that are float16 bits
    half_outputs: frozenset[int] = frozenset()  # outputs (by position) stored as float16 bits
    # The loop level run as a ``prange`` (numba's threads share its iterations), or None:
    # serial. See :func:`parallel_level`.
    parallel: int | None = None

    def source(self, flat: bool, aliases: dict[int, int] | None = None) -> str:
        """The loop's module; ``aliases`` maps inputs to the outputs whose memory they are.

        An input that is an output's very memory is read through that output's
        parameter: two parameters on one buffer would make the compiler's
        vectorized loop fall back to its scalar one at run time.
        """
        aliases = aliases or {}
        params = [f"in{k}" for k in range(len(self.inputs)) if k not in aliases]
        params += [f"out{k}" for k in range(len(self.outputs))]
        source_of = {
            k: f"out{aliases[k]}" if k in aliases else f"in{k}" for k in range(len(self.inputs))
        }
        lines = loop_header(
            self.dtype, params, bool(self.halves or self.half_outputs), self.parallel is not None
        )
        loads = [
            f"{name} = " + decoded(f"{source_of[k]}[{'i' if flat else at}]", k in self.halves)
            for name, at, k in self.loads
        ]
        index = "i" if flat else ", ".join(f"i{d}" for d in range(self.rank))
        stores = [
            f"out{k}[{index}] = " + (f"half_bits({value})" if k in self.half_outputs else value)
            for k, value in enumerate(self.stores)
        ]
        loop = ["range" if d != self.parallel else "prange" for d in range(max(self.rank, 1))]
        if flat:
            lines.append(f"    for i in {loop[0]}(out0.size):")
            lines.extend("        " + s for s in loads + self.body + stores)
            return "\n".join(lines) + "\n"
        # Each load and formula sits in the outermost loop whose indices it needs: a
        # squeeze-excite gate (N, C, 1, 1) broadcast over (N, C, H, W) is computed once per
        # channel, not once per pixel. (A broadcast input never overlaps a stored output, see
        # Fuser._safe, so reading it before the inner loops' stores reads the same values.)
        depth: dict[str, int] = {}
        placed: list[list[str]] = [[] for _ in range(self.rank + 1)]
        for (name, at, _), line in zip(self.loads, loads, strict=True):
            used = [int(d) for d in re.findall(r"\bi(\d+)\b", at)]
            depth[name] = max(used, default=-1) + 1
            placed[depth[name]].append(line)
        for line in self.body:
            name = line.split(" = ", 1)[0]
            refs = re.findall(r"\b([xt]\d+)\b", line.split(" = ", 1)[1])
            depth[name] = max((depth[r] for r in refs if r in depth), default=0)
            placed[depth[name]].append(line)
        placed[self.rank].extend(stores)
        indent = "    "
        for d in range(self.rank):
            lines.extend(indent + s for s in placed[d])
            lines.append(f"{indent}for i{d} in {loop[d]}(out0.shape[{d}]):")
            indent += "    "
        lines.extend(indent + s for s in placed[self.rank])
        return "\n".join(lines) + "\n"

    def in_memory_order(
        self, arrays: list[np.ndarray]
    ) -> tuple[FusedCall, list[np.ndarray]] | None:
        """This loop over 4-D channels-last arrays (the compiled tier's CNN activations) and
        the arrays it then takes: each 4-D as (N, H, W, C), an input of lower rank first
        given leading dims of 1; so that the innermost loop runs along channels, contiguous
        in memory (a squeeze-excite gate times its tensor vectorizes). None where it does
        not apply (another rank, a loop reading split pieces, a 0-d input)."""
        if self.rank != 4 or self.absorbed or len(arrays) != len(self.inputs) + len(self.outputs):
            return None
        order = (0, 2, 3, 1)  # loop position -> logical dim
        position = {d: p for p, d in enumerate(order)}
        moved: list[np.ndarray] = []
        for a in arrays:
            if a.ndim == 0 or a.ndim > 4:
                return None
            moved.append(a.reshape((1,) * (4 - a.ndim) + a.shape).transpose(order))
        rename = lambda m: f"i{position[int(m.group(1))]}"  # noqa: E731
        loads = []
        for name, at, k in self.loads:
            parts = at.split(", ")
            parts = ["0"] * (4 - len(parts)) + parts
            parts = [re.sub(r"\bi(\d+)\b", rename, parts[d]) for d in order]
            loads.append((name, ", ".join(parts), k))
        return dataclasses.replace(self, loads=loads), moved

    def function(self, flat: bool, aliases: dict[int, int] | None = None) -> Any:
        """The compiled loop (a numba dispatcher), generated and imported on first use."""
        return self.lazy_function(flat, aliases).load()

    def lazy_function(
        self, flat: bool, aliases: dict[int, int] | None = None
    ) -> generated.GeneratedFunction:
        """The compiled loop, named but not imported yet (see generated.GeneratedFunction)."""
        return generated.GeneratedFunction(self.source(flat, aliases), "fused", "fused")


def decoded(element: str, half: bool) -> str:
    """Source reading ``element``: a float16 one (its bits) as its float32 value."""
    return f"HALF_TO_FLOAT[{element}]" if half else element


def loop_array(a: Any) -> Any:
    """An argument as a generated loop takes it: a float16 array as its uint16 bits."""
    if isinstance(a, np.ndarray) and a.dtype == HALF:
        return a.view(np.uint16)
    return a


def fused_live(dispatcher: Any, dtype: np.dtype) -> Any:
    """A loop called on arguments read at run time: float16 ones viewed as their bits."""
    if dtype != HALF:
        return dispatcher
    return lambda *arrays: dispatcher(*(loop_array(a) for a in arrays))


def loop_header(
    dtype: np.dtype, params: list[str], half: bool = False, parallel: bool = False
) -> list[str]:
    """The lines that open a generated loop module: its imports, ``T`` (rounds to the
    loop's dtype), ``C`` (the dtype reductions compute in: float32 for float16, as the
    numpy kernels compute), ``EXP``/``ERF``/``TANH`` and the signature of its compiled
    function ``fused``. ``half``: the loop of another dtype reads or stores float16 bits;
    ``parallel``: compiled with numba's threads (a loop level is a ``prange``)."""
    from pyexecutorch.jit.math_functions import header_lines  # noqa: PLC0415 - needs numba

    if dtype == HALF:
        types = [
            "from pyexecutorch.jit.half import HALF_TO_FLOAT, half_bits, round_half",
            "T = round_half",
            "C = np.float32",
        ]
    else:
        types = [f"T = np.{dtype.name}", "C = T"]
        if half:  # (a bool loop comparing float16 values; a float16 result of a bool test)
            types.insert(0, "from pyexecutorch.jit.half import HALF_TO_FLOAT, half_bits")
    return [
        "import math",
        "import numpy as np",
        "from numba import njit, prange" if parallel else "from numba import njit",
        *header_lines(dtype),
        *types,
        "",
        "",
        '@njit(cache=True, error_model="numpy", parallel=True)'
        if parallel
        else '@njit(cache=True, error_model="numpy")',
        f"def fused({', '.join(params)}):",
    ]


# Elements from which a generated loop shares its iterations among numba's threads (where
# it can run more than one). Far fewer than a loop's own gain asks for: a serial loop
# between parallel convolutions gathers its whole output in one core's cache, which the
# next convolution's other thread then reads from that core (EfficientNet-B0's
# squeeze-excite gates, 7x7x1152 to 112x112x32, and MobileNetV3-Small's, 7x7x288 to
# 56x56x16: at two threads, from 2^18 elements 13.18 and 1.675 ms a call, from 2^14 12.27
# and 1.589; one thread unchanged, 20.9 -> 19.9 and 2.156 -> 2.163; prioritised runs on
# the loaded 2-core VM, alternated in one process).
PARALLEL_ELEMENTS = 1 << 14


def parallel_level(shape: tuple[int, ...], flat: bool) -> int | None:
    """The level of a loop over ``shape`` (a flat loop: one level) that a ``prange`` shares
    among numba's threads: the outermost of at least 16 iterations (so that two or four
    threads get even shares of it), where the loop has :data:`PARALLEL_ELEMENTS` elements
    and numba can run more than one thread; else None (serial)."""
    from pyexecutorch.jit import variants  # noqa: PLC0415 - the compiled tier only

    if math.prod(shape) < PARALLEL_ELEMENTS or not variants.can_thread():
        return None
    if flat:
        return 0
    return next((d for d, n in enumerate(shape) if n >= 16), None)


def flat_views(arrays: list[np.ndarray]) -> list[np.ndarray] | None:
    """The arrays as 1-D views of their memory when a flat loop over them is an elementwise
    loop: one shape, one set of strides, each dense (C-contiguous, or channels-last as the
    compiled tier stores a CNN's activations); else None."""
    if all(a.flags.c_contiguous for a in arrays):  # (of one size: a leading 1 more or less)
        return [a.reshape(-1) for a in arrays]
    first = arrays[0]
    if any(a.shape != first.shape or a.strides != first.strides for a in arrays):
        return None
    if first.ndim == 4 and first.transpose(0, 2, 3, 1).flags.c_contiguous:
        return [a.transpose(0, 2, 3, 1).reshape(-1) for a in arrays]
    return None


def same_layout(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays index alike (on one buffer, element ``k`` of each is one element)."""
    return a.shape == b.shape and a.strides == b.strides


def same_elements(a: np.ndarray, out: np.ndarray) -> bool:
    """Whether input ``a``, broadcast to ``out``'s shape, reads at each position the very
    bytes ``out`` has there (a leading size-1 dimension more or less changes nothing)."""
    if a.ctypes.data != out.ctypes.data or a.ndim > out.ndim:
        return False
    offset = out.ndim - a.ndim
    for d, n in enumerate(out.shape):
        if n == 1:
            continue
        k = d - offset
        if k < 0 or a.shape[k] != n or a.strides[k] != out.strides[d]:
            return False
    return True


# Library calls (exp, tanh, erf, ...) recomputed at every element of a wider loop cost more
# than the call they save: 48 sigmoids broadcast over 16x16 were 1.1x slower fused, while
# hardsigmoid (arithmetic only) was 0.9x.
_LIBRARY_CALLS = ("math.", "EXP(", "ERF(", "TANH(")  # see jit.math_functions
_WIDEN_ANY = 4  # recomputing any formula this many times per element is still cheaper


def _widens(shape: tuple[int, ...], to: tuple[int, ...], run: list[_Member]) -> bool:
    """Whether ``run``, whose last output has ``shape``, may go on with an output of shape
    ``to``: the same shape, or one it broadcasts to when recomputing ``run`` at each element
    of ``to`` pays."""
    if shape == to:
        return True
    try:
        if len(shape) > len(to) or np.broadcast_shapes(shape, to) != to:
            return False
    except ValueError:
        return False
    cheap = not any(call in m.expression for m in run for call in _LIBRARY_CALLS)
    return cheap or math.prod(to) <= _WIDEN_ANY * math.prod(shape)


def _broadcasts_to(a_shape: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether an operand of ``a_shape`` broadcasts to exactly ``shape``."""
    try:
        return len(a_shape) <= len(shape) and np.broadcast_shapes(a_shape, shape) == shape
    except ValueError:
        return False


def _dense_like(a_shape: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether an operand of ``a_shape`` has ``shape``'s elements in order (leading 1s aside)."""
    lead = len(shape) - len(a_shape)
    return a_shape == shape[lead:] and all(n == 1 for n in shape[:lead])


def _literal(value: Any, dtype: np.dtype) -> str | None:
    """A constant as source in the loop's dtype, or None when it does not fit that dtype."""
    if isinstance(value, bool):
        value = int(value)
    if dtype in _INT_DTYPES:
        if not isinstance(value, int) or abs(value) >= 1 << 63:
            return None
        return f"T({value})"  # wrapped into the dtype as the numpy kernels wrap Python ints
    if not isinstance(value, (int, float)):
        return None
    value = float(value)
    if math.isnan(value):
        return "T(math.nan)"
    if math.isinf(value):
        return "T(math.inf)" if value > 0 else "T(-math.inf)"
    return f"T({value!r})"


class Fuser:
    """Finds the fusable runs of one single-chain method and builds their loops."""

    def __init__(self, facts: MethodFacts, flow: Flow, written: set[int], region: dict) -> None:
        self.facts = facts
        self.flow = flow
        self.written = written
        self.view_region = region  # where elided views read (ViewElider.region)
        self.evalues = facts.plan.values
        self.outputs = set(facts.plan.outputs)
        self.pieces: dict[int, _Piece] = {}  # an equal split's outputs (see split_pieces)

    def split_pieces(self, pc: int, k: Any, args: list[int], outs: list[int]) -> None:
        """Record the pieces of instruction ``pc`` if it splits a tensor into equal parts.

        A fused loop may read such a piece straight from the split tensor (at
        ``piece * extent`` along the split dimension, generic in sizes) and the
        split is skipped when nothing else reads its pieces.
        """
        at = facts_of(k.name).split_dim  # the argument giving the split dimension
        if at is None or len(outs) != 1 or at >= len(args):
            return
        m = self.facts
        src = args[0]
        listed = self.evalues[outs[0]].val
        if not self._static_tensor(src) or not isinstance(listed, TensorList):
            return
        items = list(listed.items)
        dim = m.values[args[at]] if args[at] not in self.written else None
        shape = m.capacity[src].shape
        if not items or isinstance(dim, bool) or not isinstance(dim, int) or not shape:
            return
        if not -len(shape) <= dim < len(shape):
            return
        axis = dim % len(shape)
        want = shape[:axis] + (shape[axis] // len(items),) + shape[axis + 1 :]
        if shape[axis] % len(items):
            return
        for j in items:
            if not self._static_tensor(j) or m.capacity[j].shape != want:
                return
            if m.capacity[j].dtype != m.capacity[src].dtype:
                return
        for n, j in enumerate(items):
            self.pieces[j] = _Piece(pc, src, n, axis, outs[0], tuple(items))

    def _piece_readable(self, j: int, pcs: set[int], first: int) -> _Piece | None:
        """The split piece ``j`` if a loop over ``pcs`` may read it from the split tensor."""
        piece = self.pieces.get(j)
        if piece is None:
            return None
        flow = self.flow
        for i in (piece.listed, *piece.items):
            if i in self.outputs or i in flow.delegate_reads or flow.write_count[i] != 1:
                return None
            if any(r not in pcs for r in flow.read_at.get(i, ())):
                return None
            if i != piece.listed and flow.aliases_reading(piece.pc, i):
                return None
        region = self.view_region.get(piece.src) or flow.bounds.get(piece.src)
        if region is not None and any(
            flow.writes_to(p, region) for p in range(piece.pc + 1, first)
        ):
            return None  # the split tensor changes between the split and the loop
        return piece

    # ---------------------------------------------------------------- members

    def _static_tensor(self, j: int) -> bool:
        val = self.evalues[j].val
        return isinstance(val, Tensor) and val.shape_dynamism == TensorShapeDynamism.STATIC

    def member(self, pc: int, k: Any, args: list[int], outs: list[int]) -> _Member | None:
        """Instruction ``pc`` as a fusable member, or None."""
        formula = FORMULAS.get(k.name)
        if formula is None or len(outs) != 1:
            return None
        m = self.facts
        out = outs[0]
        if not self._static_tensor(out) or out in m.constant_values:
            return None
        dtype = m.capacity[out].dtype
        if formula.bool_out:
            if dtype != np.bool_ or not self._static_tensor(args[formula.tensors[0]]):
                return None
            dtype = m.capacity[args[formula.tensors[0]]].dtype
            if dtype == np.bool_ and set(formula.tensors) == set(formula.bool_tensors):
                dtype = None  # bool to bool: joins a loop of any dtype
        if dtype is not None and (
            dtype not in _FLOAT_DTYPES and not (formula.ints and dtype in _INT_DTYPES)
        ):
            return None
        if dtype == HALF and not formula.halves:
            return None
        shape = m.capacity[out].shape
        if not shape or 0 in shape:
            return None
        n_in = len(args) - len(outs)
        tensors, constants = {}, {}
        folded: dict[int, str] = {}  # one-element constant tensors, as literals
        for pos in range(n_in):
            j = args[pos]
            if pos in formula.shape_only:
                if not self._static_tensor(j) or m.capacity[j].shape != shape:
                    return None
                continue
            if pos in formula.tensors:
                if not self._static_tensor(j):
                    return None
                arr = m.load_time_value(j)
                want = np.dtype(np.bool_) if pos in formula.bool_tensors else dtype
                if arr.dtype != want or len(arr.shape) > len(shape):
                    return None
                try:
                    if np.broadcast_shapes(arr.shape, shape) != shape:
                        return None
                except ValueError:
                    return None
                if j in m.constant_values and arr.size == 1:
                    # a program's scalar operand (0-d constant): a literal, not an argument
                    item = arr.reshape(()).item()
                    lit = repr(bool(item)) if want.kind == "b" else _literal(item, dtype)
                    if lit is None:
                        return None
                    folded[pos] = lit
                    continue
                tensors[pos] = j
            else:
                if j in self.written or isinstance(self.evalues[j].val, Tensor):
                    return None
                constants[pos] = m.values[j]
        try:
            expression = formula.expression(constants)
        except (KeyError, TypeError, ValueError):
            return None
        if expression is None:
            return None
        literals = {}
        for pos, value in constants.items():
            if "{" + str(pos) + "}" in expression:
                if dtype is None:
                    return None
                lit = _literal(value, dtype)
                if lit is None:
                    return None
                literals[pos] = lit
        literals.update(folded)
        refs = tuple(args[p] for p in formula.shape_only)
        return _Member(pc, out, formula, tensors, constants, expression, literals, dtype, refs)

    # ------------------------------------------------------------------- runs

    def runs(
        self, candidates: dict[int, _Member], silent: frozenset[int] = frozenset()
    ) -> list[list[_Member]]:
        """Consecutive members (but for ``silent`` instructions between them: folded at load,
        nothing runs) of one dtype, worth fusing, each output's shape that of the
        member before or one it broadcasts to (a squeeze-excite gate computed on (N, C, 1, 1)
        and multiplied into (N, C, H, W): the loop runs over the larger shape and recomputes
        the gate's few operations at each element, which costs less than a call; see
        :func:`_widens`)."""
        runs: list[list[_Member]] = []
        current: list[_Member] = []
        cap = self.facts.capacity
        dtype = None
        for pc in sorted(candidates):
            mem = candidates[pc]
            if current and (
                not silent.issuperset(range(current[-1].pc + 1, pc))
                or not _widens(cap[current[-1].out].shape, cap[mem.out].shape, current)
                or (None not in (mem.dtype, dtype) and mem.dtype != dtype)
            ):
                runs.append(current)
                current, dtype = [], None
            current.append(mem)
            if dtype is None:
                dtype = mem.dtype
        if current:
            runs.append(current)
        return [r for r in runs if self.worth_a_loop(r)]

    def worth_a_loop(self, run: list[_Member]) -> bool:
        """Whether ``run`` gains from one loop: more than one pass over memory, or an output
        stored channels-last (the numpy kernel would take it strided)."""
        return (
            sum(m.formula.passes for m in run) > 1
            or not self.facts.capacity[run[-1].out].flags.c_contiguous
        )

    def _stored(self, run: list[_Member]) -> list[int]:
        """Outputs of the run that something outside it reads."""
        pcs = {m.pc for m in run}
        last_writer = {m.out: m.pc for m in run}
        stored = []
        for mem in run:
            j = mem.out
            if last_writer[j] != mem.pc:
                continue  # rewritten later in the run: that member stores it if needed
            if self.must_store(pcs, mem.pc, j):
                stored.append(j)
        return stored

    def must_store(self, pcs: set[int], pc: int, j: int) -> bool:
        """Whether value ``j``, written by instruction ``pc`` of the group of instructions
        ``pcs``, must reach memory: read after the group, a method output, read by a
        delegate, written more than once, or read through an alias."""
        flow = self.flow
        return (
            any(r not in pcs and r > pc for r in flow.read_at.get(j, ()))
            or j in self.outputs
            or j in flow.delegate_reads
            or flow.write_count[j] != 1
            or flow.aliases_reading(pc, j)
        )

    def _safe(self, inputs: list[int], stored: list[int]) -> bool:
        """Whether no stored output overlaps an input it does not match exactly, nor another
        stored output (the loop stores both at each element: where their bytes overlap in
        another layout, a later element's store would clobber an earlier one's, and the
        program's order, the later instruction's values over the earlier's, is lost)."""
        m = self.facts
        bounds = self.flow.bounds
        for n, o in enumerate(stored):
            lo, hi = bounds.get(o, (0, 0))
            for o2 in stored[n + 1 :]:
                lo2, hi2 = bounds.get(o2, (0, 0))
                if not (hi <= lo2 or lo >= hi2):
                    return False
        for x in inputs:
            if x in self.view_region:
                region = self.view_region[x]
                exact = False
            else:
                region = bounds.get(x)
                exact = True
            if region is None:
                continue
            for o in stored:
                lo, hi = bounds.get(o, (0, 0))
                if hi <= region[0] or lo >= region[1]:
                    continue
                if not (exact and same_elements(m.capacity[x], m.capacity[o])):
                    return False
        return True

    def _reads_written(self, run: list[_Member], inputs: list[int]) -> bool:
        """Whether a member reads an input whose bytes an earlier member writes (a static view
        of a fused value): the loop loads its inputs before any store, so that member would
        read the previous call's bytes, not the earlier member's values."""
        bounds = self.flow.bounds
        for n, mem in enumerate(run):
            region = bounds.get(mem.out)
            if region is None:
                continue
            for later in run[n + 1 :]:
                for j in later.tensors.values():
                    other = bounds.get(j) if j in inputs else None
                    if other is not None and other[0] < region[1] and region[0] < other[1]:
                        return True
        return False

    def build(self, run: list[_Member]) -> FusedCall | None:
        """The fused loop of ``run``, or None when it cannot be fused safely."""
        m = self.facts
        produced: dict[int, str] = {}
        inputs: list[int] = []
        input_names: dict[int, str] = {}
        body: list[str] = []
        shape = m.capacity[run[-1].out].shape  # the largest: earlier ones broadcast to it
        rank = len(shape)
        dtype = next((mem.dtype for mem in run if mem.dtype is not None), None)
        if dtype is None:
            if len(run) < 2:
                return None  # one bool operator: its numpy kernel is as fast
            dtype = np.dtype(np.bool_)  # a chain of bool operators: one loop over bools
        loads: list[tuple[str, str, int]] = []
        pcs = {mem.pc for mem in run}
        absorbed: set[int] = set()
        for n, mem in enumerate(run):
            names: dict[int, str] = {}
            for pos, j in mem.tensors.items():
                if j in produced:
                    names[pos] = produced[j]
                    continue
                if j not in input_names:
                    name = f"x{len(loads)}"
                    input_names[j] = name
                    piece = self._piece_readable(j, pcs, run[0].pc)
                    if piece is None:
                        inputs.append(j)
                        loads.append((name, self._index(j, shape), len(inputs) - 1))
                    else:
                        absorbed.add(piece.pc)
                        if piece.src not in inputs:
                            inputs.append(piece.src)
                        at = self._piece_index(j, piece, shape)
                        loads.append((name, at, inputs.index(piece.src)))
                names[pos] = input_names[j]
            names.update(mem.literals)
            expr = mem.expression.format(*(names.get(i, "None") for i in range(max(names) + 1)))
            body.append(f"t{n} = {expr}" if mem.formula.bool_out else f"t{n} = T({expr})")
            produced[mem.out] = f"t{n}"
        stored = self._stored(run)
        if not stored or not self._safe(inputs, stored) or self._reads_written(run, inputs):
            return None
        if any(m.capacity[o].shape != shape for o in stored):
            return None  # an output of a smaller shape would be stored at every element
        same = not absorbed and all(_dense_like(m.capacity[j].shape, shape) for j in inputs)
        stores = [produced[o] for o in stored]
        return FusedCall(
            [mem.pc for mem in run],
            inputs,
            stored,
            dtype,
            rank,
            loads,
            body,
            stores,
            same,
            sorted(absorbed),
            frozenset(k for k, j in enumerate(inputs) if m.capacity[j].dtype == HALF),
            frozenset(k for k, j in enumerate(stored) if m.capacity[j].dtype == HALF),
        )

    def _piece_index(self, j: int, piece: _Piece, shape: tuple[int, ...]) -> str:
        """Index into the split tensor of piece ``j`` at the loop's position."""
        parts = self._index(j, shape).split(", ")
        offset = len(shape) - self.facts.capacity[j].ndim
        loop_dim = offset + piece.axis
        size = self.facts.capacity[j].shape[piece.axis]
        extent = "1" if size == 1 else f"out0.shape[{loop_dim}]"
        parts[piece.axis] = f"{parts[piece.axis]} + {piece.n} * {extent}"
        return ", ".join(parts)

    def _index(self, j: int, shape: tuple[int, ...]) -> str:
        """Index of input ``j`` at the loop's position: broadcast dimensions read element 0."""
        in_shape = self.facts.capacity[j].shape
        if not in_shape:
            return "()"
        offset = len(shape) - len(in_shape)
        parts = [
            "0" if n == 1 and shape[offset + d] != 1 else f"i{offset + d}"
            for d, n in enumerate(in_shape)
        ]
        return ", ".join(parts)


def fuse(
    facts: MethodFacts,
    flow: Flow | None,
    decisions: dict[tuple[int, int], tuple[str, Any]],
    written: set[int],
    view_region: dict,
) -> None:
    """Replace fusable runs in ``decisions`` (chain 0): the last member becomes
    ``("fused", FusedCall)``, the others ``("skip", None)``."""
    if flow is None:
        return
    fuser = Fuser(facts, flow, written, view_region)
    from pyexecutorch.runtime.fusion_reductions import (  # noqa: PLC0415 - imports this module
        build_group,
        groups,
        reduction_member,
    )

    candidates: dict[int, _Member] = {}
    reductions: dict[int, Any] = {}
    for (c, pc), (kind, _fast) in decisions.items():
        if c != 0 or kind in ("view", "refused"):  # (refused: see runtime.argument_checks)
            continue
        a = flow.instructions[pc]
        if not isinstance(a, KernelCall):
            continue
        k = facts.kernels[a.op_index]
        args, outs = facts.kernel_layout(k, a)
        fuser.split_pieces(pc, k, args, outs)
        member = fuser.member(pc, k, args, outs)
        if member is not None:
            candidates[pc] = member
        elif (reduction := reduction_member(fuser, pc, k, args, outs)) is not None:
            reductions[pc] = reduction
    for group in groups(fuser, candidates, reductions):
        reduced = build_group(fuser, group)
        if reduced is None:
            continue
        for pc in reduced.pcs[:-1]:
            decisions[0, pc] = ("skip", None)
            candidates.pop(pc, None)
        decisions[0, reduced.pcs[-1]] = ("fused", reduced)
        candidates.pop(reduced.pcs[-1], None)
    # kernel calls with no decision were folded at load: they do not break a run (a portable
    # program's hardswish, x * clamp(x + 3, 0, 6) / 6, converts its constants in between)
    silent = frozenset(
        pc
        for pc, a in enumerate(flow.instructions)
        if isinstance(a, KernelCall) and (0, pc) not in decisions
    )
    for run in fuser.runs(candidates, silent):
        while run:
            call = _longest_prefix(fuser, run)
            if call is None:
                run = run[1:]
                continue
            for pc in call.pcs[:-1] + call.absorbed:
                decisions[0, pc] = ("skip", None)
            decisions[0, call.pcs[-1]] = ("fused", call)
            run = run[len(call.pcs) :]


_PREFIX_TRIES = 16  # shorter prefixes tried when a run cannot be fused whole


def _longest_prefix(fuser: Fuser, run: list[_Member]) -> FusedCall | None:
    """The loop of the longest prefix of ``run`` that fuses safely (a later member's store
    may land on bytes an earlier one still reads), or None."""
    for end in range(len(run), max(len(run) - _PREFIX_TRIES, 0), -1):
        part = run[:end]
        if not fuser.worth_a_loop(part):
            return None
        call = fuser.build(part)
        if call is not None:
            return call
    return None


def single_op_call(name: str, args: list[Any], out: np.ndarray) -> FusedCall | None:
    """The loop of one operator on these arguments (numpy arrays and constants), or None.

    What a run of that one instruction becomes: tests compare it with the
    operator's numpy kernel, output aliasing an input included.
    """
    formula = FORMULAS.get(name)
    dtype = out.dtype
    if dtype not in _LOOP_DTYPES:
        return None  # (a float8 or other ml_dtypes output: no numba type; its numpy kernel)
    if formula is not None and formula.bool_out:
        first = args[formula.tensors[0]]
        dtype = first.dtype if isinstance(first, np.ndarray) else dtype
    # a logical operator of bool tensors computes in bool (the loop's dtype is theirs)
    logical = formula is not None and set(formula.tensors) <= set(formula.bool_tensors)
    if formula is None or (
        dtype not in _FLOAT_DTYPES
        and not (formula.ints and dtype in _INT_DTYPES)
        and not (logical and formula.bool_out and dtype == np.bool_)
    ):
        return None
    if dtype == HALF and not formula.halves:
        return None
    constants = {p: a for p, a in enumerate(args) if p not in formula.tensors}
    try:
        expression = formula.expression(constants)
    except (KeyError, TypeError, ValueError):
        return None  # (arguments its check refuses: see kernels.elementwise.checks)
    if expression is None:
        return None
    names: dict[int, str] = {}
    loads: list[tuple[str, str, int]] = []
    for pos in formula.tensors:
        a = args[pos] if pos < len(args) else None
        want = np.dtype(np.bool_) if pos in formula.bool_tensors else dtype
        if not isinstance(a, np.ndarray) or a.dtype != want or a.ndim > out.ndim:
            return None
        if not _broadcasts_to(a.shape, out.shape):
            return None
        offset = out.ndim - a.ndim
        at = [
            "0" if n == 1 and out.shape[offset + d] != 1 else f"i{offset + d}"
            for d, n in enumerate(a.shape)
        ]
        names[pos] = f"x{len(loads)}"
        loads.append((names[pos], ", ".join(at) or "()", len(loads)))
    for pos, value in constants.items():
        if "{" + str(pos) + "}" in expression:
            lit = _literal(value, dtype)
            if lit is None:
                return None
            names[pos] = lit
    expr = expression.format(*(names.get(i, "None") for i in range(max(names) + 1)))
    same = all(args[p].shape == out.shape for p in formula.tensors)
    body = [f"t0 = {expr}" if formula.bool_out else f"t0 = T({expr})"]
    halves = frozenset(k for k, p in enumerate(formula.tensors) if args[p].dtype == HALF)
    half_out = frozenset({0}) if out.dtype == HALF else frozenset()
    return FusedCall(
        [0],
        list(formula.tensors),
        [0],
        dtype,
        out.ndim,
        loads,
        body,
        ["t0"],
        same,
        [],
        halves,
        half_out,
    )
