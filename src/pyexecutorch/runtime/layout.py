"""Channels-last activations for CNNs compiled whole (the compiled tier).

A program stores its 4-D activations NCHW. A convolution over them vectorizes
badly late in a CNN: a 3x3 depthwise filter over 4x4 planes runs rows of four
elements, and a 1x1 convolution over 2x2 pixels is a product with four columns.
Stored channels-last (NHWC), the same layers vectorize over channels, which
mobile CNNs keep at multiples of 8, as XNNPACK does.

At load, :func:`channels_last_values` picks the activations to store
channels-last: those every instruction touching them can take that way
(convolutions, elementwise runs, spatial means, pooling, channel cat/split: the
access rule each operator's family declares, see :data:`ACCESS_RULES`), coupled where
an instruction needs its operands in one layout (an elementwise run's same-shape
operands), next to at least one
convolution, and private to the method (planned, static, written once, no
other value on their bytes while they live, neither input nor output). The
rest of the program is unchanged: :func:`store_channels_last` rebinds each
chosen value to a channels-last view of its own planned bytes (logical shape
NCHW, memory NHWC; see ``jit.arrays.channels_last``), and the
compiled steps built from those arrays take the layout from their strides.

The layout exists only inside a method compiled whole: the numpy kernels never
see such arrays at run time. A method that does not become whole is compiled
again without it (see :meth:`pyexecutorch.runtime.lowering.Lowering.lower`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pyexecutorch.kernels.registry import facts_of, offer
from pyexecutorch.runtime.dataflow import Flow
from pyexecutorch.schema.program import (
    ExecutionPlan,
    KernelCall,
    OptionalTensorList,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)

if TYPE_CHECKING:
    from pyexecutorch.runtime.method_facts import MethodFacts


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# What an instruction does with the 4-D tensors it touches: groups of value indices that
# may be stored channels-last, each group in one layout; every other tensor it touches
# stays NCHW. None: it takes none channels-last.
Groups = list[list[int]]
Access = Callable[["Scan", list[int], list[int]], Groups | None]


@dataclass(frozen=True)
class Scan:
    """What an access function reads of a method: its values, planned storage and plan,
    and the values something reads (a pooling's indices, when read, keep it NCHW)."""

    values: list[Any]
    capacity: dict[int, np.ndarray]
    plan: ExecutionPlan
    read: set[int]


def _shape(scan: Scan, j: int) -> tuple[int, ...] | None:
    arr = scan.capacity.get(j)
    return None if arr is None else arr.shape


def _pixels_once(shape: tuple[int, ...] | None) -> bool:
    """A shape whose layouts are the same memory: fewer than two dims that are not 1
    among C, H, W (a squeeze-excite gate (N, C, 1, 1), a scalar)."""
    return shape is not None and (len(shape) < 4 or shape[2] * shape[3] == 1 or shape[1] == 1)


def _convolution(scan: Scan, args: list[int], outs: list[int]) -> Groups | None:
    """A float 2-D convolution, not transposed, dense or depthwise, constant weights: its
    input and its output, each in either layout."""
    v = scan.values
    x, w, b, out = v[args[0]], v[args[1]], v[args[2]], scan.capacity.get(outs[0])
    transposed, groups = v[args[6]], v[args[8]]
    if transposed is not False or isinstance(groups, bool) or not isinstance(groups, int):
        return None
    arrays = [a for a in (x, w, out) if isinstance(a, np.ndarray)]
    if len(arrays) != 3 or any(a.ndim != 4 or a.dtype not in _FLOATS for a in arrays):
        return None
    if w.flags.writeable or (
        b is not None and (not isinstance(b, np.ndarray) or b.flags.writeable)
    ):
        return None  # weights are packed once, at load
    channels = x.shape[1]
    depthwise = groups == channels and w.shape[:2] == (channels, 1) and out.shape[1] == channels
    if groups != 1 and not depthwise:
        return None
    return [[args[0]], [outs[0]]]


def _elementwise(scan: Scan, args: list[int], outs: list[int]) -> Groups | None:
    """The output and its same-shape operands in one layout; an operand that broadcasts
    must be the same memory in both (a squeeze-excite gate (N, C, 1, 1), a scalar)."""
    out = outs[0]
    shape = _shape(scan, out)
    if shape is None or len(shape) != 4:
        return None
    group = [out]
    for j in args[: len(args) - len(outs)]:
        if not isinstance(scan.plan.values[j].val, Tensor):
            continue
        s = _shape(scan, j)
        if s == shape:
            group.append(j)
        elif s is None or len(s) > 4 or not _pixels_once(s):
            return None
    return [group]


def _spatial_mean(scan: Scan, args: list[int], outs: list[int]) -> Groups | None:
    """A mean over H and W of a 4-D tensor: its input (the output is one pixel)."""
    shape = _shape(scan, args[0])
    dims = scan.values[args[1]]
    if shape is None or len(shape) != 4 or not isinstance(dims, (tuple, list)) or not dims:
        return None
    if any(isinstance(d, bool) or not isinstance(d, int) for d in dims):
        return None
    if sorted(d % 4 for d in dims) != [2, 3]:
        return None
    return [[args[0]]]


def _pooling(scan: Scan, args: list[int], outs: list[int]) -> Groups | None:
    """A 2-D pooling: its input and values output in one layout (indices unread)."""
    shape = _shape(scan, args[0])
    if shape is None or len(shape) != 4:
        return None
    if any(j in scan.read for j in outs[1:]):
        return None  # max pooling's indices are read
    return [[args[0], outs[0]]]


def _channel_pieces(scan: Scan, args: list[int], outs: list[int]) -> Groups | None:
    """cat / split of 4-D tensors along dim 1: every piece and the whole in one layout."""
    evalues = scan.plan.values
    dims = [scan.values[j] for j in args[1:] if type(scan.values[j]) is int]
    if not dims or dims[-1] % 4 != 1:
        return None
    members: list[int] = []
    for j in [*args, *outs]:
        val = evalues[j].val
        if isinstance(val, (TensorList, OptionalTensorList)):
            members.extend(i for i in val.items if i >= 0)
        elif isinstance(val, Tensor):
            members.append(j)
    if any((s := _shape(scan, j)) is None or len(s) != 4 for j in members):
        return None
    return [sorted(set(members))]


# Each access rule an operator's family may declare (OperatorFacts.layout; every one of
# kernels.registry.LAYOUT_RULES).
ACCESS_RULES: dict[str, Access] = {
    "convolution": _convolution,
    "elementwise": _elementwise,
    "spatial_mean": _spatial_mean,
    "pooling": _pooling,
    "channel_pieces": _channel_pieces,
}


def _private(method: MethodFacts, flow: Flow, j: int) -> bool:
    """Whether value ``j`` may change layout: a static planned float activation of the
    method, written once before it is read, with no other value on its bytes while it
    lives."""
    val = method.plan.values[j].val
    arr = method.capacity.get(j)
    if (
        not isinstance(val, Tensor)
        or val.shape_dynamism != TensorShapeDynamism.STATIC
        or val.allocation_info is None
        or arr is None
        or j in method.constant_values
        or method.values[j] is not arr
        or arr.ndim != 4
        or arr.dtype not in _FLOATS
        or not arr.flags.c_contiguous
        or _pixels_once(arr.shape)
        or j in flow.delegate_reads
        or j in flow.rebound
        or flow.write_count[j] != 1
    ):
        return False
    writer = next((pc for pc, w in enumerate(flow.writes) if j in w), None)
    if writer is None or flow.first_read.get(j, writer + 1) <= writer:
        return False
    if flow.aliases_reading(writer, j):
        return False
    region = flow.bounds.get(j)
    last = flow.last_read.get(j, writer)
    return region is not None and not any(
        any(i != j for i in flow.writes[q]) and flow.writes_to(q, region)
        for q in range(writer + 1, min(last, len(flow.writes)))
    )


def channels_last_values(method: MethodFacts, flow: Flow | None, read: set[int]) -> set[int]:
    """The values of ``method`` (its MethodFacts) to store channels-last (see the module
    docstring); empty when the method has no convolution that would take one."""
    if flow is None:
        return set()
    boundary = set(method.plan.inputs) | set(method.plan.outputs)
    scan = Scan(method.values, method.capacity, method.plan, read)
    parent: dict[int, int] = {}

    def find(j: int) -> int:
        while parent.setdefault(j, j) != j:
            parent[j] = parent[parent[j]]
            j = parent[j]
        return j

    pinned: set[int] = set()
    next_to_convolution: set[int] = set()
    for pc, a in enumerate(flow.instructions):
        touched = {
            j
            for j in (*flow.reads[pc], *flow.writes[pc])
            if j in method.capacity and not _pixels_once(method.capacity[j].shape)
        }
        groups = None
        if isinstance(a, KernelCall):
            k = method.kernels[a.op_index]
            rule = facts_of(k.name).layout
            access = ACCESS_RULES.get(rule) if rule is not None else None
            if access is not None:
                args, outs = method.kernel_layout(k, a)
                try:
                    groups = access(scan, args, outs)
                except (IndexError, TypeError, ValueError, AttributeError):
                    groups = None
                if groups is not None and rule == "convolution":
                    next_to_convolution.update(j for g in groups for j in g)
        grouped: set[int] = set()
        for group in groups or []:
            members = [j for j in group if j in touched]
            for j in members:
                parent[find(j)] = find(members[0])
            grouped.update(members)
        pinned |= touched - grouped
    components: dict[int, set[int]] = {}
    for j in list(parent):
        components.setdefault(find(j), set()).add(j)
    chosen: set[int] = set()
    for members in components.values():
        if members & pinned or members & boundary or not members & next_to_convolution:
            continue
        if all(_private(method, flow, j) for j in members):
            chosen |= members
    return chosen


def store_channels_last(method: MethodFacts, chosen: set[int]) -> Callable[[], None]:
    """Rebind each chosen value (and the lists holding it) to a channels-last view of its
    planned bytes; returns the function that restores the NCHW arrays."""
    before = {j: method.values[j] for j in chosen}
    lists = {}
    for i, ev in enumerate(method.plan.values):
        val = ev.val
        if isinstance(val, (TensorList, OptionalTensorList)) and chosen & set(val.items):
            lists[i] = method.values[i]
    for j, arr in before.items():
        n, c, h, w = arr.shape
        view = arr.reshape(n, h, w, c).transpose(0, 3, 1, 2)
        method.values[j] = method.capacity[j] = view
    for i in lists:
        items = method.plan.values[i].val.items
        method.values[i] = [None if j < 0 else method.values[j] for j in items]

    def restore() -> None:
        for j, arr in before.items():
            method.values[j] = method.capacity[j] = arr
        for i, held in lists.items():
            method.values[i] = held

    return restore


# ---------------------------------------------------------------------------------------
# Compiled steps of the operators other than convolutions (whose compiled form takes
# channels-last arrays itself) on channels-last arrays.


class PlannedStep:
    """A kernel call on channels-last planned arrays as a compiled step: ``step`` is the
    call a whole-method function makes; called as the kernel is (which only a method that
    did not compile whole would do), it runs the reference kernel."""

    def __init__(self, step: tuple[Any, tuple[Any, ...]], reference: Any) -> None:
        self._reference = reference
        # (its outputs stay their planned arrays: see runtime.lowering)
        offer(self, step=step, fills_outputs=True)

    def __call__(self, *args: Any) -> Any:
        return self._reference(*args)


def channels_last_form(name: str, reference: Any, values: list[Any]) -> PlannedStep | None:
    """The compiled step of kernel ``name`` on load-time ``values`` of which some array is
    channels-last (and not also C-contiguous), or None: the step its family declares
    (OperatorFacts.channels_last_step)."""
    build = facts_of(name).channels_last_step
    if build is None:
        return None
    arrays = [a for v in values for a in (v if isinstance(v, list) else [v])]
    if not any(isinstance(a, np.ndarray) and not a.flags.c_contiguous for a in arrays):
        return None
    try:
        step = build(*values)
    except (TypeError, ValueError, IndexError):
        return None
    return None if step is None else PlannedStep(step, reference)
