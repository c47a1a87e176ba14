"""A method's values over its planned memory: arenas, tensors as views, scalars, lists.

The first step of loading a method, as the C++ runtime's ``Method::parse_values`` with its
``MemoryManager``: the arenas a method plans are allocated once (the state shared between
methods in :class:`SharedArenas`), every tensor becomes a numpy view at its planned offset
(constants over the program's buffers, read-only), and every scalar and list its Python
value. Nothing here knows about kernels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyexecutorch.kernels.common import keep_size
from pyexecutorch.runtime.errors import DeviceMemoryError, InvalidProgramError
from pyexecutorch.runtime.limits import LoadLimits
from pyexecutorch.runtime.tensors import dim_order_of, view_of
from pyexecutorch.schema.program import (
    Bool,
    BoolList,
    DeviceType,
    Double,
    DoubleList,
    ExecutionPlan,
    Int,
    IntList,
    OptionalTensorList,
    String,
    Tensor,
    TensorList,
    TensorShapeDynamism,
)
from pyexecutorch.schema.pte import PteFile
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_NAME, dtype_of


@dataclass
class SharedArenas:
    """The arenas a program's methods share: memory ids 2 and up, where
    ``share_mutable_buffers`` places the state every method reads and writes (sized to
    the largest method's), and which initial states have been written."""

    arenas: dict[int, np.ndarray]
    initialized: set[tuple[int, int]]

    @staticmethod
    def of(plans: Sequence[ExecutionPlan], limits: LoadLimits) -> SharedArenas | None:
        """The shared arenas of ``plans``; ``InvalidProgramError`` when they need more than
        ``limits.max_arena_bytes`` (checked before anything is allocated)."""
        sizes: dict[int, int] = {}
        owners: dict[int, str] = {}
        for plan in plans:
            on_device = device_buffers(plan)  # refused when the method loads; not host state
            for mem_id, size in enumerate(plan.non_const_buffer_sizes):
                if mem_id in on_device:
                    continue
                if mem_id >= SHARED_FROM_MEMORY_ID and max(size, 0) >= sizes.get(mem_id, 0):
                    sizes[mem_id], owners[mem_id] = max(size, 0), plan.name
        if not sizes:
            return None
        limit = limits.arena_bytes
        if sum(sizes.values()) > limit:
            asked = ", ".join(
                f"method '{owners[m]}' {n} bytes in memory id {m}" for m, n in sizes.items() if n
            )
            raise InvalidProgramError(
                f"the program's shared arenas need {sum(sizes.values())} bytes ({asked}), more "
                f"than the limit of {limit} bytes (max_arena_bytes={limits.max_arena_bytes})"
            )
        return SharedArenas({m: arena_bytes(n) for m, n in sizes.items()}, set())


def device_buffers(plan: ExecutionPlan) -> dict[int, tuple[DeviceType, int]]:
    """The memory ids ``plan`` places on a device other than the host, with the device."""
    return {
        int(d.buffer_idx): (DeviceType(int(d.device_type)), int(d.device_index))
        for d in plan.non_const_buffer_device or ()
        if int(d.device_type) != DeviceType.CPU
    }


def refuse_device_buffers(plan: ExecutionPlan) -> None:
    """``DeviceMemoryError`` for the first buffer ``plan`` places on a device: there is
    no device allocator here. The message starts as the official runtime's, which counts
    buffers from the first planned one (memory id 1) and names the device by number."""
    for mem_id, (device, index) in sorted(device_buffers(plan).items()):
        sizes = plan.non_const_buffer_sizes
        size = sizes[mem_id] if mem_id < len(sizes) else 0
        raise DeviceMemoryError(
            f"Failed to allocate {size} bytes for buffer {mem_id - 1} on device "
            f"{int(device)}:{index} (method '{plan.name}' plans memory id {mem_id} in "
            f"{device.name}:{index} memory; pyexecutorch runs on the host and has no "
            "allocator for device memory)"
        )


# Bytes an arena's start is aligned to: a cache line. Planned offsets are multiples of 16
# (the format's alignment) and, for most tensors, of 64; an arena starting on a line keeps
# those tensors' vectors within lines (numpy's own 16-byte start split every 64-byte vector
# access of the compiled kernels in two: up to twice their time).
ARENA_ALIGNMENT = 64


def arena_bytes(size: int) -> np.ndarray:
    """``size`` zeroed bytes starting on an ARENA_ALIGNMENT boundary."""
    raw = np.zeros(size + ARENA_ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ARENA_ALIGNMENT
    return raw[start : start + size]


# Memory id 1 holds each method's own activations; ids from 2 are shared state.
SHARED_FROM_MEMORY_ID = 2


@dataclass
class InputSpec:
    """How one method input is accepted: a tensor of a dtype and (bound) shape, or a scalar."""

    index: int  # value index
    kind: str  # "tensor", "int", "double", "bool", "string", "none"
    dtype: np.dtype | None = None
    scalar_type: int = 0
    sizes: tuple[int, ...] = ()
    dynamic: bool = False
    planned: bool = False


class PlannedValues:
    """The values of one execution plan, over its arenas (see the module docstring).

    ``values[j]`` is value ``j`` as the method starts (a tensor's planned view, a scalar, a
    tuple or list of other values); ``capacity[j]`` a tensor's planned storage (at its
    upper-bound shape for a dynamic one); ``constant_values`` the tensors read from the
    program's constant data or a data file.
    """

    def __init__(
        self,
        pte: PteFile,
        plan: ExecutionPlan,
        *,
        named_data: Mapping[str, Any],
        shared: SharedArenas | None,
        arenas: list[np.ndarray] | None,
    ) -> None:
        """``arenas``: those of a method this one is a static plan of; their state is kept,
        no initial data written."""
        refuse_device_buffers(plan)
        self.name = plan.name
        self.plan = plan
        self._pte = pte
        self._named_data = named_data
        self._shared = shared
        self._reused_arenas = arenas is not None
        self.arenas = arenas or [
            shared.arenas[mem_id]
            if shared is not None and mem_id in shared.arenas
            else arena_bytes(max(size, 0))
            for mem_id, size in enumerate(plan.non_const_buffer_sizes)
        ]
        self.values: list[Any] = [None] * len(plan.values)
        self.capacity: dict[int, np.ndarray] = {}
        self.constant_values: set[int] = set()
        self._build_values()

    def _fail(self, msg: str) -> InvalidProgramError:
        return InvalidProgramError(f"method '{self.name}': {msg}")

    def _tensor(self, i: int, t: Tensor) -> np.ndarray:
        try:
            dtype = dtype_of(t.scalar_type)
        except TypeError:
            name = SCALAR_TYPE_NAME.get(t.scalar_type, str(int(t.scalar_type)))
            raise NotImplementedError(
                f"method '{self.name}': value {i} has scalar type {name}, which the numpy runtime does not support"
            ) from None
        sizes = tuple(t.sizes)
        order = dim_order_of(t)
        alloc = t.allocation_info
        extra = t.extra_tensor_info
        program = self._pte.program
        if alloc is not None:
            if not 0 < alloc.memory_id < len(self.arenas):
                raise self._fail(f"value {i}: memory id {alloc.memory_id} out of range")
            arena = self.arenas[alloc.memory_id]
            nbytes = math.prod(sizes) * dtype.itemsize
            if alloc.memory_offset + nbytes > arena.size:
                raise self._fail(
                    f"value {i}: tensor of {nbytes} bytes at offset {alloc.memory_offset} extends past "
                    f"the end of buffer {alloc.memory_id} ({arena.size} bytes)"
                )
            if alloc.memory_offset % dtype.alignment:
                # (no exporter plans one; a misaligned element is undefined behaviour in the
                # official runtime, and a write through it garbles a neighbour's bytes)
                raise self._fail(
                    f"value {i}: {dtype} tensor at offset {alloc.memory_offset} of buffer "
                    f"{alloc.memory_id} is not aligned to {dtype.alignment} bytes"
                )
            arr = view_of(arena, alloc.memory_offset, sizes, order, dtype)
            initial = self._initial_data(i, t, dtype, sizes, order)
            if initial is not None and self._first_placement(alloc.memory_id, alloc.memory_offset):
                arr[...] = initial
            return arr
        if extra is not None and extra.location == 1:  # TensorDataLocation.EXTERNAL
            key = extra.fully_qualified_name
            blob = self._named_data.get(key) if key is not None else None
            if blob is None:
                raise self._fail(
                    f"value {i}: external tensor {key!r} was not found in the data files "
                    f"(pass the .ptd with data_files=/data_path=)"
                )
            self.constant_values.add(i)
            return self._readonly_view(blob, i, sizes, order, dtype)
        if t.data_buffer_idx:
            if t.data_buffer_idx >= len(program.constant_buffer):
                raise self._fail(f"value {i}: constant buffer {t.data_buffer_idx} out of range")
            self.constant_values.add(i)
            return self._readonly_view(
                program.constant_buffer[t.data_buffer_idx].storage, i, sizes, order, dtype
            )
        if t.shape_dynamism == TensorShapeDynamism.DYNAMIC_UNBOUND:
            return np.empty((0,) * max(len(sizes), 1), dtype=dtype)
        return np.zeros(sizes, dtype=dtype)

    def _first_placement(self, mem_id: int, offset: int) -> bool:
        """Whether a tensor's initial state may be written at (arena, offset): always in
        this method's own arenas; in a shared one only by the first method to load, so
        that loading a method does not reset state another method has written."""
        if self._reused_arenas:
            return False
        shared = self._shared
        if shared is None or mem_id not in shared.arenas:
            return True
        if (mem_id, offset) in shared.initialized:
            return False
        shared.initialized.add((mem_id, offset))
        return True

    def _readonly_view(self, storage: Any, i: int, sizes, order, dtype) -> np.ndarray:  # noqa: ANN001
        view = memoryview(storage).cast("B")
        need = math.prod(sizes) * dtype.itemsize
        if need > len(view):
            raise self._fail(
                f"value {i}: constant tensor needs {need} bytes but its data has {len(view)}"
            )
        arr = view_of(view, 0, sizes, order, dtype)
        arr.flags.writeable = False
        return arr

    def _initial_data(self, i: int, t: Tensor, dtype, sizes, order) -> np.ndarray | None:  # noqa: ANN001
        """Initial contents of a planned tensor: a mutable buffer's starting state,
        stored in the mutable data segment at ``data_buffer_idx``."""
        if not t.data_buffer_idx:
            return None
        mutable = self._pte.mutable_data or []
        if t.data_buffer_idx >= len(mutable):
            raise self._fail(
                f"value {i}: mutable data {t.data_buffer_idx} out of range ({len(mutable)} buffers)"
            )
        return self._readonly_view(mutable[t.data_buffer_idx].storage, i, sizes, order, dtype)

    def _build_values(self) -> None:
        plan = self.plan
        v = self.values
        evalues = plan.values
        # Scalars and tensors first: lists refer to them.
        for i, ev in enumerate(evalues):
            val = ev.val
            if isinstance(val, Tensor):
                arr = self._tensor(i, val)
                v[i] = arr
                self.capacity[i] = arr
                if val.shape_dynamism == TensorShapeDynamism.STATIC:
                    keep_size(arr)  # a kernel may not resize it (see kernels.common.fit)
            elif isinstance(val, Int):
                v[i] = val.int_val
            elif isinstance(val, Double):
                v[i] = val.double_val
            elif isinstance(val, Bool):
                v[i] = val.bool_val
            elif isinstance(val, String):
                v[i] = val.string_val
            elif isinstance(val, (DoubleList, BoolList)):
                v[i] = tuple(val.items)
        n = len(evalues)
        for i, ev in enumerate(evalues):
            val = ev.val
            try:
                if isinstance(val, IntList):
                    v[i] = tuple(v[j] for j in val.items)
                elif isinstance(val, TensorList):
                    v[i] = [v[j] for j in val.items]
                elif isinstance(val, OptionalTensorList):
                    v[i] = [None if j < 0 else v[j] for j in val.items]
            except (IndexError, TypeError):
                raise self._fail(f"value {i}: list refers to a value outside 0..{n - 1}") from None

    def input_spec(self, index: int) -> InputSpec:
        """How method input ``index`` (a value index) is accepted."""
        val = self.plan.values[index].val
        if isinstance(val, Tensor):
            return InputSpec(
                index,
                "tensor",
                dtype=self.capacity[index].dtype,
                scalar_type=int(val.scalar_type),
                sizes=tuple(val.sizes),
                dynamic=val.shape_dynamism != TensorShapeDynamism.STATIC,
                planned=val.allocation_info is not None,
            )
        kind = {Int: "int", Double: "double", Bool: "bool", String: "string"}.get(type(val), "none")
        return InputSpec(index, kind)

    # ----------------------------------------------------------------- kernels
