"""Reductions fused with the elementwise chains around them (the compiled tier).

A reduction (softmax, log-softmax, layer norm, mean, sum) over some
dimensions of a "full" shape, the consecutive elementwise instructions of
that shape before it (its prologue), and the consecutive elementwise
instructions after it of that shape or of its kept-dimension shape (its
epilogue, where RMSNorm's add/rsqrt/mul/mul lives) become one generated loop
nest: outer loops over the kept dimensions, and per row one inner loop over
the reduced dimensions for each reduction in turn, then one that computes and
stores the full-shape results. Full-shape intermediates are recomputed in each
inner loop rather than stored, so nothing but the instructions' stored outputs
is written; except that a summed value computed by a library call (softmax's
exp) is first stored in a row of scratch by a loop of its own, which vectorizes
where the float64 sum cannot, and read back from there by the later loops.

Each reduction is written once as primitive steps (sum, max, elementwise
formulas) by its family, declared to the registry as its ``fused_reduction``
(:class:`pyexecutorch.kernels.registry.Reduction`). Sums accumulate in float64 and are rounded
once to the dtype, within the kernel tests' tolerances of the numpy kernels'
pairwise float32 sums; NaN and infinities propagate as there. float16 groups
compute their reductions in float32 and round what each instruction outputs to
half precision, as the numpy kernels do; as no standalone compiled kernel takes
float16, a float16 reduction forms a group of its own. As with :mod:`pyexecutorch.runtime.fusion`, the source
depends on ranks, dtypes, broadcasting and which dimensions reduce, never on
sizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyexecutorch.jit import generated
from pyexecutorch.kernels.registry import Reduction, facts_of
from pyexecutorch.runtime.fusion import (
    _FLOAT_DTYPES,
    _LIBRARY_CALLS,
    HALF,
    Fuser,
    _literal,
    _Member,
    decoded,
    loop_header,
    same_elements,
)
from pyexecutorch.schema.program import Tensor

FULL, ROW = "full", "row"


@dataclass
class _Node:
    name: str
    level: str  # FULL: one value per element of the full shape; ROW: one per kept index
    expr: str = ""  # elementwise: over operand names; a load: the array read
    deps: tuple[str, ...] = ()
    reduce: str | None = None  # "sum" or "max": a reduction of deps[0] over the reduced dims
    load: bool = False


class _Graph:
    """The steps of one group, in order, and what it stores."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {}
        self.stores: list[tuple[str, int, str]] = []  # (node, output param, index kind)

    def add(self, level: str, expr: str, deps: tuple[str, ...], reduce: str | None = None) -> str:
        name = f"t{len(self.nodes)}"
        self.nodes[name] = _Node(name, level, expr, deps, reduce)
        return name

    def elem(self, expr: str, *deps: str, rounded: bool = True, cast: str = "C") -> str:
        """``expr`` over ``{0}``, ``{1}``... (the operands), rounded by ``cast`` (``C``: to
        the dtype reductions compute in, ``T``: to the tensors' dtype) unless a test."""
        level = FULL if any(self.nodes[d].level == FULL for d in deps) else ROW
        expr = expr.format(*deps)
        return self.add(level, f"{cast}({expr})" if rounded else expr, deps)

    def reduce(self, kind: str, x: str) -> str:
        return self.add(ROW, "", (x,), kind)


# ----------------------------------------------------------------- members


@dataclass
class _ReductionMember:
    pc: int
    op: Reduction
    x: int  # the reduced input
    tensors: dict[int, int]  # optional tensor operands: position -> value
    constants: dict[int, Any]
    outs: list[int]
    full: tuple[int, ...]
    dims: tuple[int, ...]
    keepdim: bool


def reduction_member(fuser: Fuser, pc: int, k: Any, args: list[int], outs: list[int]) -> Any:
    """Instruction ``pc`` as a fusable reduction, or None."""
    op = facts_of(k.name).fused_reduction
    if op is None:
        return None
    m = fuser.facts
    n_in = len(args) - len(outs)
    x = args[0]
    if not fuser._static_tensor(x) or not all(fuser._static_tensor(o) for o in outs):
        return None
    dtype = m.capacity[x].dtype
    full = m.capacity[x].shape
    if not m.capacity[x].flags.c_contiguous:
        # a channels-last activation (see runtime.layout): its rows would be read across
        # the memory's order; the layout's own steps (a spatial mean) read it in order
        return None
    if dtype not in ({np.dtype(np.bool_)} if op.tests else _FLOAT_DTYPES) or not full or 0 in full:
        return None
    if any(m.capacity[o].dtype != dtype or o in m.constant_values for o in outs):
        return None
    tensors, constants = {}, {}
    for pos in range(1, n_in):
        j = args[pos]
        if pos in op.tensors and isinstance(fuser.evalues[j].val, Tensor):
            if not fuser._static_tensor(j) or m.capacity[j].dtype != dtype:
                return None
            tensors[pos] = j
        elif j in fuser.written or isinstance(fuser.evalues[j].val, Tensor):
            return None
        else:
            constants[pos] = m.values[j]
    try:
        if not op.constant(constants):
            return None
        dims = op.dims(constants, len(full))
    except (KeyError, TypeError, IndexError):
        return None
    if dims is None:
        return None
    keepdim = True if op.keepdim_at is None else constants.get(op.keepdim_at)
    if not isinstance(keepdim, bool):
        return None
    for j in tensors.values():
        shape = m.capacity[j].shape
        if len(shape) > len(full) or np.broadcast_shapes(shape, full) != full:
            return None
    return _ReductionMember(pc, op, x, tensors, constants, list(outs), full, dims, keepdim)


# ----------------------------------------------------------------- the call


@dataclass
class ReducedCall:
    """One fused group: ``function(False)(*inputs, *outputs)`` computes every member."""

    pcs: list[int]
    inputs: list[int]
    outputs: list[int]
    dtype: np.dtype
    source_text: str = field(repr=False)
    same_shape: bool = False  # never the flat form: rows need their own loops

    def source(self, flat: bool = False, aliases: dict[int, int] | None = None) -> str:
        """The loop's module; an input in ``aliases`` (input -> output) is that output's very
        memory and is read through the output's parameter, as in FusedCall.source: two
        parameters on one buffer send the vectorized loops to their scalar fallback."""
        if not aliases:
            return self.source_text
        text = self.source_text
        head, sep, body = text.partition("def fused(")
        signature, colon, body = body.partition("):\n")
        params = [p for p in signature.split(", ") if p not in {f"in{k}" for k in aliases}]
        for k, o in aliases.items():
            body = re.sub(rf"\bin{k}\b", f"out{o}", body)
        return f"{head}{sep}{', '.join(params)}{colon}{body}"

    def function(self, flat: bool = False, aliases: dict[int, int] | None = None) -> Any:
        return self.lazy_function(flat, aliases).load()

    def lazy_function(
        self, flat: bool = False, aliases: dict[int, int] | None = None
    ) -> generated.GeneratedFunction:
        return generated.GeneratedFunction(self.source(flat, aliases), "reduced", "fused")


class _Builder:
    """Turns one group (elementwise members and reductions, in order) into a ReducedCall."""

    def __init__(self, fuser: Fuser, group: list[Any]) -> None:
        self.fuser = fuser
        self.m = fuser.facts
        self.group = group
        red = next(g for g in group if isinstance(g, _ReductionMember))
        self.full = red.full
        self.dims = red.dims
        self.dtype = self.m.capacity[red.x].dtype
        self.g = _Graph()
        self.produced: dict[int, str] = {}  # value -> node
        self.dropped: set[int] = set()  # reduction outputs without their reduced dimensions
        self.inputs: list[int] = []
        self.input_node: dict[int, str] = {}
        self.half_params: set[str] = set()  # outputs stored as float16 bits

    def _is_row(self, shape: tuple[int, ...]) -> bool:
        offset = len(self.full) - len(shape)
        return all(shape[d - offset] == 1 for d in self.dims if d - offset >= 0)

    def operand(self, j: int) -> str | None:
        if j in self.dropped:
            return None
        if j in self.produced:
            return self.produced[j]
        if j not in self.input_node:
            shape = self.m.capacity[j].shape
            level = ROW if self._is_row(shape) else FULL
            name = self.g.add(level, f"in{len(self.inputs)}", ())
            self.g.nodes[name].load = True
            self.input_node[j] = name
            self.inputs.append(j)
        return self.input_node[j]

    def add_member(self, mem: Any) -> bool:
        g = self.g
        if isinstance(mem, _Member):
            names: dict[int, str] = {}
            deps = []
            for pos, j in mem.tensors.items():
                node = self.operand(j)
                if node is None:
                    return False
                names[pos] = "{" + str(len(deps)) + "}"
                deps.append(node)
            names.update(mem.literals)
            top = max(names, default=-1)
            expr = mem.expression.format(*(names.get(i, "None") for i in range(top + 1)))
            rounded = not mem.formula.bool_out
            self.produced[mem.out] = g.elem(expr, *deps, rounded=rounded, cast="T")
            shape = self.m.capacity[mem.out].shape
            want = FULL if shape == self.full else ROW
            if want == FULL and not deps:
                g.nodes[self.produced[mem.out]].level = FULL  # a constant: computed per element
            return g.nodes[self.produced[mem.out]].level == want and (
                want == FULL or shape == self.row_shape(True)
            )
        if mem.full != self.full or mem.dims != self.dims:
            return False
        x = self.operand(mem.x)
        if x is None or g.nodes[x].level != FULL:
            return False
        t = {}
        for pos, j in mem.tensors.items():
            t[pos] = self.operand(j)
            if t[pos] is None:
                return False
        consts = {pos: _literal(v, self.dtype) for pos, v in mem.constants.items()}
        # constants as the reduction computes with them (float32 for float16)
        consts = {p: None if c is None else "C" + c[1:] for p, c in consts.items()}
        count = "C(" + " * ".join(f"n{d}" for d in self.dims) + ")"
        results = mem.op.build(g, x, count, consts, t)
        if self.dtype == HALF:  # what the instruction outputs is rounded to half precision
            results = {p: g.elem("{0}", r, cast="T") for p, r in results.items()}
        for pos, o in enumerate(mem.outs):
            self.produced[o] = results[pos]
            if g.nodes[results[pos]].level == ROW and not mem.keepdim:
                self.dropped.add(o)
        return True

    def row_shape(self, keepdim: bool) -> tuple[int, ...]:
        if keepdim:
            return tuple(1 if d in self.dims else n for d, n in enumerate(self.full))
        return tuple(n for d, n in enumerate(self.full) if d not in self.dims)

    # -------------------------------------------------------------- source

    def _index(self, j: int, row: bool) -> str:
        shape = self.m.capacity[j].shape
        offset = len(self.full) - len(shape)
        parts = []
        for d, n in enumerate(shape):
            at = offset + d
            if (row and at in self.dims) or (n == 1 and self.full[at] != 1):
                parts.append("0")
            else:
                parts.append(f"i{at}")
        return ", ".join(parts) or "()"

    def _extent(self, d: int, params: list[tuple[str, tuple[int, ...], int]]) -> str | None:
        """Source of the full shape's extent along ``d``, read from some parameter."""
        if self.full[d] == 1:
            return "1"
        for name, shape, offset in params:
            k = d - offset
            if 0 <= k < len(shape) and shape[k] == self.full[d]:
                return f"{name}.shape[{k}]"
        return None

    def _parameters(
        self, stored: list[int], kept: list[int]
    ) -> tuple[list[tuple[str, tuple[int, ...], int]], list[tuple[str, str, str]]]:
        """The loop's parameters (name, shape, offset of its dims in the full shape), and
        each stored output's (node, parameter, index expression)."""
        nodes = self.g.nodes
        rank = len(self.full)
        params = [
            (f"in{k}", self.m.capacity[j].shape, rank - self.m.capacity[j].ndim)
            for k, j in enumerate(self.inputs)
        ]
        store_of: list[tuple[str, str, str]] = []  # (node, param, index)
        for k, o in enumerate(stored):
            node = self.produced[o]
            shape = self.m.capacity[o].shape
            if nodes[node].level == FULL:
                index = ", ".join(f"i{d}" for d in range(rank))
                params.append((f"out{k}", shape, 0))
            elif o in self.dropped:
                index = ", ".join(f"i{d}" for d in kept) or "()"
                params.append((f"out{k}", (), rank))  # read for no extent
            else:
                index = ", ".join("0" if d in self.dims else f"i{d}" for d in range(rank))
                params.append((f"out{k}", shape, 0))
            store_of.append((node, f"out{k}", index))
            if self.m.capacity[o].dtype == HALF:
                self.half_params.add(f"out{k}")
        return params, store_of

    def _phases(self) -> tuple[dict[str, int], list[str], set[str]]:
        """Each node's phase (after every reduction it depends on), the reductions, and the
        summed full-shape values worth a scratch row (see the module's docstring), held in
        the dtype the loop computes in (float32 for float16)."""
        nodes = self.g.nodes
        phase: dict[str, int] = {}
        for name, node in nodes.items():
            p = max((phase[d] for d in node.deps), default=0)
            phase[name] = p + 1 if node.reduce else p
        reduces = [n for n, node in nodes.items() if node.reduce]
        scratch = {
            nodes[r].deps[0]
            for r in reduces
            if nodes[r].reduce == "sum"
            and nodes[nodes[r].deps[0]].level == FULL
            and any(call in nodes[nodes[r].deps[0]].expr for call in _LIBRARY_CALLS)
        }
        return phase, reduces, scratch

    def source(self, stored: list[int]) -> str | None:
        nodes = self.g.nodes
        rank = len(self.full)
        kept = [d for d in range(rank) if d not in self.dims]
        params, store_of = self._parameters(stored, kept)
        extents = [self._extent(d, params) for d in range(rank)]
        if any(e is None for e in extents):
            return None
        phase, reduces, scratch = self._phases()
        n_phases = max((phase[r] for r in reduces), default=0)
        half = bool(self.half_params) or any(self.m.capacity[j].dtype == HALF for j in self.inputs)
        lines = loop_header(self.dtype, [p[0] for p in params], half)
        for d in range(rank):
            lines.append(f"    n{d} = {extents[d]}")
        row_index = ", ".join(f"i{d}" for d in self.dims)
        row_shape = "".join(f"n{d}, " for d in self.dims)
        for name in sorted(scratch):
            lines.append(f"    w_{name} = np.empty(({row_shape}), C)")
        stored: set[str] = set()  # scratch rows filled in the current row
        indent = "    "
        for d in kept:
            lines.append(f"{indent}for i{d} in range(n{d}):")
            indent += "    "
        done: set[str] = set()

        def emit_row(limit: int) -> None:
            # row-level steps available once the reductions before phase ``limit`` are done
            for name, node in nodes.items():
                if name in done or node.level != ROW or node.reduce or phase[name] > limit:
                    continue
                if all(d in done for d in node.deps):
                    lines.append(indent + self._line(name, row=True))
                    done.add(name)

        def emit_full(name: str, seen: set[str], body: list[str], inner: str) -> None:
            if name in done or name in seen:
                return
            if name in stored:
                seen.add(name)
                body.append(f"{inner}{name} = w_{name}[{row_index}]")
                return
            node = nodes[name]
            for d in node.deps:
                emit_full(d, seen, body, inner)
            seen.add(name)
            body.append(inner + self._line(name, row=False))

        emit_row(0)
        full_stores = [s for s in store_of if nodes[s[0]].level == FULL]
        # One reduction pass, and every full-size store needs no reduction (a mean of a SiLU
        # that is also stored): the pass stores them too, instead of a second pass that
        # recomputes them (a later pass could read an input the store has overwritten).
        # (Not into float16 outputs: folding from memory would read their bits.)
        early = (
            n_phases == 1
            and full_stores
            and all(phase[s[0]] == 0 and s[1] not in self.half_params for s in full_stores)
        )
        for p in range(1, n_phases + 1):
            here = [r for r in reduces if phase[r] == p]
            for r in here:
                start = {"max": "-math.inf", "sum": "0.0", "any": "False"}[nodes[r].reduce]
                lines.append(f"{indent}{r} = {start}")
            for x in sorted({nodes[r].deps[0] for r in here} & scratch - stored):
                loops, inner = self._row_loops(indent)
                lines += loops
                emit_full(x, set(), lines, inner)
                lines.append(f"{inner}w_{x}[{row_index}] = {x}")
                stored.add(x)
            loops, inner = self._row_loops(indent)
            seen: set[str] = set()
            body: list[str] = []
            folded = {r: nodes[r].deps[0] for r in here}
            for x in folded.values():
                emit_full(x, seen, body, inner)
            if early:
                for node, param, index in full_stores:
                    emit_full(node, seen, body, inner)
                    body.append(f"{inner}{param}[{index}] = {self._encoded(param, node)}")
                stored_as = {node: f"{param}[{index}]" for node, param, index in full_stores}
                if all(x in stored_as for x in folded.values()):
                    # Every reduction reads a stored value: the elements are computed in a
                    # loop of their own (which vectorizes) and folded from memory after.
                    lines += loops + body
                    body = []
                    folded = {r: stored_as[x] for r, x in folded.items()}
                full_stores = []
            if _laned(self.dims, [nodes[r].reduce for r in here], body):
                lines += _summed_in_lanes(self.dims[-1], loops, body, folded, indent)
                folded = {}
            else:
                lines += loops + body
            for r, x in folded.items():
                if nodes[r].reduce == "max":  # NaN sticks, as np.max propagates it
                    lines.append(f"{inner}if {x} > {r} or {x} != {x}:")
                    lines.append(f"{inner}    {r} = {x}")
                elif nodes[r].reduce == "any":
                    lines.append(f"{inner}if {x}:")
                    lines.append(f"{inner}    {r} = True")
                else:
                    lines.append(f"{inner}{r} += {x}")
            for r in here:
                if nodes[r].reduce != "any":
                    lines.append(f"{indent}{r} = C({r})")
                done.add(r)
            emit_row(p)
        for node, param, index in store_of:
            if nodes[node].level == ROW:
                lines.append(f"{indent}{param}[{index}] = {self._encoded(param, node)}")
        if full_stores:
            loops, inner = self._row_loops(indent)
            lines += loops
            seen = set()
            for node, param, index in full_stores:
                emit_full(node, seen, lines, inner)
                lines.append(f"{inner}{param}[{index}] = {self._encoded(param, node)}")
        return "\n".join(lines) + "\n"

    def _row_loops(self, indent: str) -> tuple[list[str], str]:
        """The loops over the reduced dims at ``indent``, and the indent inside them."""
        loops = []
        for d in self.dims:
            loops.append(f"{indent}for i{d} in range(n{d}):")
            indent += "    "
        return loops, indent

    def _encoded(self, param: str, node: str) -> str:
        """What output ``param`` stores of ``node``: a float16 output, its bits."""
        return f"half_bits({node})" if param in self.half_params else node

    def _line(self, name: str, row: bool) -> str:
        node = self.g.nodes[name]
        if node.load:
            j = self.inputs[int(node.expr[2:])]
            element = f"{node.expr}[{self._index(j, row)}]"
            return f"{name} = {decoded(element, self.m.capacity[j].dtype == HALF)}"
        return f"{name} = {node.expr.format(*node.deps)}"


# Sums run in this many independent float64 partial sums along the last reduced dimension:
# one running sum waits ~4 cycles on each add (no reassociation without fastmath), eight
# keep the adders busy. Each lane sums every eighth element in order, and the lanes are
# added pairwise at the end: a fixed order, at least as accurate as the one running sum.
_LANES = 8


def _laned(dims: tuple[int, ...], kinds: list[str | None], body: list[str]) -> bool:
    """Whether one phase's reductions are sums worth splitting into lanes: its elements are
    arithmetic or loads (a library call per element costs more than the adds it waits on,
    and would be repeated in source once per lane)."""
    if not dims or any(kind != "sum" for kind in kinds):
        return False
    return not any(call in line for line in body for call in _LIBRARY_CALLS)


_ASSIGNED = re.compile(r"\s*(\w+) = ")


def _at_names(names: list[str], texts: list[str]) -> list[list[str]]:
    """Each of ``texts`` split at the whole-word occurrences of ``names``: literal text at
    even positions, a name at odd ones."""
    if not names:
        return [[text] for text in texts]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return [pattern.split(text) for text in texts]


def _braced(text: str) -> str:
    """``text`` as literal text of a format string."""
    return text.replace("{", "{{").replace("}", "}}")


def _summed_in_lanes(
    last: int, loops: list[str], body: list[str], folded: dict[str, str], indent: str
) -> list[str]:
    """The loops of one phase of sums (``folded``: sum -> summed value, computed by
    ``body`` inside ``loops``) with the last reduced dimension split into lanes."""
    inner = indent + "    " * len(loops)
    block = inner[:-4]
    defined = [m.group(1) for line in body if (m := _ASSIGNED.match(line))]
    # One lane's lines as a template, each name the body defines followed by its lane
    # suffix ("_{0}"): one split at the names a line, one format a lane (not one
    # substitution per name, line and lane).
    pieces = _at_names(defined, [*body, *folded.values()])
    marked = [
        "".join(_braced(p) + "_{0}" if k % 2 else _braced(p) for k, p in enumerate(line))
        for line in pieces
    ]
    sums = [f"{inner}{r}_{{0}} += {x}" for r, x in zip(folded, marked[len(body) :], strict=True)]
    lane_text = "\n".join([f"{inner}i{last} = b{last} + {{0}}", *marked[: len(body)], *sums])
    out = [f"{indent}{r}_{lane} = 0.0" for r in folded for lane in range(_LANES)]
    out += loops[:-1]
    out.append(f"{block}for b{last} in range(0, n{last} - n{last} % {_LANES}, {_LANES}):")
    for lane in range(_LANES):
        out += lane_text.format(lane).split("\n")
    out.append(f"{block}for i{last} in range(n{last} - n{last} % {_LANES}, n{last}):")
    out += body
    out += [f"{inner}{r} += {x}" for r, x in folded.items()]
    for r in folded:
        partial = [f"{r}_{lane}" for lane in range(_LANES)]
        while len(partial) > 1:
            partial = [f"({a} + {b})" for a, b in zip(partial[::2], partial[1::2], strict=True)]
        out.append(f"{indent}{r} += {partial[0]}")
    return out


def build_group(fuser: Fuser, group: list[Any]) -> ReducedCall | None:
    """The fused loop of ``group`` (consecutive members, one or more reductions), or None."""
    b = _Builder(fuser, group)
    for n, mem in enumerate(group):
        if not b.add_member(mem):
            # cut the group before the member that does not fit, if a chain is left
            first = next(i for i, g in enumerate(group) if isinstance(g, _ReductionMember))
            if n <= first or n == 1:
                return None
            return build_group(fuser, group[:n])
    # what the elementwise machinery stores: outputs read outside the group
    pcs = {mem.pc for mem in group}
    stored = [j for mem in group for j in _outs(mem) if fuser.must_store(pcs, mem.pc, j)]
    if not stored or not _safe(fuser, b, stored):
        return None
    source = b.source(stored)
    if source is None:
        return None
    return ReducedCall(sorted(pcs), b.inputs, stored, b.dtype, source)


def _safe(fuser: Fuser, b: _Builder, stored: list[int]) -> bool:
    """No stored output overlaps another or an input, except a full-shape output on a
    full-shape input's very elements (it is written after that element's last read)."""
    m = fuser.facts
    bounds = fuser.flow.bounds
    regions = []
    for x in b.inputs:
        exact = x not in fuser.view_region
        region = fuser.view_region[x] if not exact else bounds.get(x)
        if region is not None:
            regions.append((x, region, exact))
    for n, o in enumerate(stored):
        lo, hi = bounds.get(o, (0, 0))
        full_out = b.g.nodes[b.produced[o]].level == FULL
        for x, region, exact in regions:
            if hi <= region[0] or lo >= region[1]:
                continue
            if not (exact and full_out and same_elements(m.capacity[x], m.capacity[o])):
                return False
        for o2 in stored[n + 1 :]:
            lo2, hi2 = bounds.get(o2, (0, 0))
            if not (hi <= lo2 or lo >= hi2):
                return False
    return True


def _outs(mem: Any) -> list[int]:
    return mem.outs if isinstance(mem, _ReductionMember) else [mem.out]


def _stored_before(fuser: Fuser, group: list[Any], red: _ReductionMember, dtype: Any) -> bool:
    """Whether ``red``'s prologue is better left to an elementwise loop of its own: the
    reduced input is stored anyway (a squeeze-excite's SiLU, read again by its scaling),
    so fusing saves one read of it, while the fused loop computes the prologue row by
    row, which does not vectorize on short rows (2x2 pixels), and the flat loop does."""
    if len(group) < 2 or dtype == HALF or not red.op.standalone:
        return False
    from pyexecutorch.kernels.reduce.compiled import axis_run  # noqa: PLC0415 - needs numba

    if axis_run(red.full, red.dims) is None:
        return False
    last = group[-2]
    pcs = {g.pc for g in group}
    return last.out == red.x and fuser.must_store(pcs, last.pc, red.x)


def groups(fuser: Fuser, candidates: dict[int, Any], reductions: dict[int, Any]) -> list[list]:
    """Each reduction with its prologue and epilogue of consecutive elementwise candidates.

    A group needs at least one elementwise member: a reduction alone is the
    standalone kernel's business (except in float16, which no compiled kernel takes).
    """
    cap = fuser.facts.capacity
    taken: set[int] = set()
    found = []
    for pc in sorted(reductions):
        if pc in taken:
            continue
        red = reductions[pc]
        if red.op.tests:
            continue  # a test's reduction joins the group of a float reduction before it
        dtype = cap[red.x].dtype
        row = tuple(1 if d in red.dims else n for d, n in enumerate(red.full))
        group = [red]
        needed = {red.x, *red.tensors.values()}  # what the prologue must compute
        p = pc - 1
        while p in candidates and p not in taken:
            mem = candidates[p]
            if cap[mem.out].shape != red.full or mem.dtype not in (None, dtype):
                break
            if mem.out not in needed:
                break  # computes nothing the reduction reads: its own chain's business
            group.insert(0, mem)
            needed.update(mem.tensors.values())
            p -= 1
        if _stored_before(fuser, group, red, dtype):
            group = [red]
        # the values an epilogue member may build on: the group's, and what it reduces
        produced = {o for g in group for o in _outs(g)} | {red.x}
        p = pc + 1
        while p not in taken:
            mem = candidates.get(p) or reductions.get(p)
            if mem is None:
                break
            if isinstance(mem, _ReductionMember):
                if mem.full != red.full or mem.dims != red.dims or mem.x not in produced:
                    break
            elif (
                cap[mem.out].shape not in (red.full, row)
                or mem.dtype not in (None, dtype)
                # a member on none of the group's values starts a chain of its own
                or not produced.intersection((*mem.tensors.values(), *mem.shape_refs))
            ):
                break
            group.append(mem)
            produced.update(_outs(mem))
            p += 1
        # build_group cuts the span before a member that does not fit the loop nest
        if len(group) > 1 or dtype == HALF:
            found.append(group)
            taken.update(g.pc for g in group)
    return found
