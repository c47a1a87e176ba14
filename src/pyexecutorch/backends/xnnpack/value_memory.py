"""Memory for the internal values of a compiled XNNPACK plan, reused across lifetimes.

A value's array takes the memory of values that no node reads any more, as the official
runtime plans its workspace. With an array of its own per value, a full-size network's
activations (MobileNetV2 at 224x224: 53 MB) exceed the caches, so
every layer wrote into memory untouched since the previous call (read for ownership from
DRAM); reused memory was written a few layers before and is still cached.

Values lie in segments of address space, each value's array at an offset of its own (a
multiple of a cache line) that no value live at the same time overlaps, as the official
runtime plans its workspace, but while the graph is built: a value takes the smallest free
interval that holds it (the lowest of equal ones), often the bytes a value just dead freed;
free neighbours merge. A segment's pages are mapped only when first written, so it
reserves generously and costs the bytes up to its highest offset used.

Whole blocks, one value's at a time and reused whole, took 15.5 MB for MobileNetV2 at
224x224 (and EfficientNet-B0), offsets take 6.5. On a host whose last-level cache is 32 MB
and shared (AMD EPYC, Zen 4), the larger set was written through to memory and read back:
one thread, in one process, MobileNetV2 9.11 -> 8.31 ms a call, EfficientNet-B0 15.7 ->
14.1, SqueezeNet 1.1 9.22 -> 8.77, MobileNetV3-Small 4.47 -> 4.25, ResNet-18 unchanged.

A value's memory is free once every value whose array lies in it has had its last reader
built: the builder asks :meth:`ValueMemory.reclaim` at the start of each node's (or fused
group of nodes') steps, so a value read by any node of the group being built keeps its
memory. Delegate inputs and outputs never come from here (they are bound to the caller's
arrays).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

# Cache-line alignment of every value's memory (a vector load across two lines costs two).
_ALIGN = 64
# Address space a segment reserves unless told (more when one value needs it).
SEGMENT_BYTES = 64 << 20


class _Block(NamedTuple):
    """Memory handed out: ``span`` bytes (whole cache lines) at ``start`` of segment
    ``segment``, whose first address is ``address``; the array holds the first ``size``."""

    address: int
    segment: int
    start: int
    span: int
    size: int


class ValueMemory:
    """Memory for a plan's internal values, each value's free again after its last read."""

    def __init__(self, last_reads: dict[int, int], reserve: int = SEGMENT_BYTES) -> None:
        self.last = dict(last_reads)  # value -> the last node that reads it (-1: none)
        self.reserve = reserve  # bytes a segment reserves
        self.segments: list[np.ndarray] = []  # (uint8, aligned)
        self.holes: list[list[tuple[int, int]]] = []  # a segment's free (start, end), in order
        self.blocks: list[_Block] = []  # memory handed out, in order
        self.used: list[int] = []  # blocks not yet freed
        # values not yet seen with an array (None until the first reclaim), and the live
        # values whose array lies in a block, by the block's index (each value's array is
        # looked up once: a load stays linear in the values)
        self.unseen: set[int] | None = None
        self.live: dict[int, int] = {}

    def read_until(self, vid: int, node: int) -> None:
        """Keep ``vid``'s memory until node ``node`` at least (a value read through another,
        such as the NCHW source of a deferred transpose)."""
        self.last[vid] = max(self.last.get(vid, -1), node)

    def last_read(self, vid: int) -> int:
        return self.last.get(vid, -1)

    @property
    def touched(self) -> int:
        """Bytes of the segments below their highest offset ever handed out."""
        ends = [0] * len(self.segments)
        for b in self.blocks:
            ends[b.segment] = max(ends[b.segment], b.start + b.span)
        return sum(ends)

    def array(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An array of ``shape`` at the start of the smallest free interval that holds it
        (the lowest of equal ones; a new segment when none does)."""
        dtype = np.dtype(dtype)
        size = math.prod(shape) * dtype.itemsize
        span = max(_ALIGN, -(-size // _ALIGN) * _ALIGN)
        fits = [
            (end - start, seg, k)
            for seg, holes in enumerate(self.holes)
            for k, (start, end) in enumerate(holes)
            if end - start >= span
        ]
        if fits:
            _, seg, k = min(fits)
        else:
            size_of_segment = max(self.reserve, span)
            raw = np.empty(size_of_segment + _ALIGN, np.uint8)
            first = -raw.ctypes.data % _ALIGN
            self.segments.append(raw[first : first + size_of_segment])
            self.holes.append([(0, self.segments[-1].size)])
            seg, k = len(self.segments) - 1, 0
        holes = self.holes[seg]
        start, end = holes[k]
        if end - start > span:
            holes[k] = (start + span, end)
        else:
            del holes[k]
        memory = self.segments[seg][start : start + size]
        self.used.append(len(self.blocks))
        self.blocks.append(_Block(memory.ctypes.data, seg, start, span, size))
        return memory.view(dtype).reshape(shape)

    def _free(self, block: int) -> None:
        """Give a block's interval back to its segment, merged with free neighbours."""
        _, seg, start, span, _ = self.blocks[block]
        end = start + span
        holes = self.holes[seg]
        at = bisect.bisect(holes, (start, end))
        if at < len(holes) and holes[at][0] == end:
            end = holes.pop(at)[1]
        if at > 0 and holes[at - 1][1] == start:
            start = holes.pop(at - 1)[0]
            at -= 1
        holes.insert(at, (start, end))

    def whole_block(self, lo: int, hi: int) -> bool:
        """Whether the bytes [lo, hi) are all that one value's memory handed out holds
        (where it is still held: the latest handed out at ``lo``). Memory overlapping them
        only in part is then another value's, never live at the same time."""
        k = self._held_at(lo)
        if k is None:
            return False
        b = self.blocks[k]
        return lo == b.address and hi == b.address + b.size

    def _held_at(self, address: int) -> int | None:
        """The block not yet freed whose span holds ``address``: the latest handed out
        there (earlier ones at it were freed before it was handed out)."""
        for k in reversed(self.used):
            b = self.blocks[k]
            if b.address <= address < b.address + b.span:
                return k
        return None

    def reclaim(self, node: int, env: Sequence[Any]) -> None:
        """Free the memory in which no value of ``env`` lies that a node from ``node`` on
        still reads."""
        if self.unseen is None:
            self.unseen = set(range(len(env)))
        for vid in list(self.unseen):
            if self.last_read(vid) < node:
                self.unseen.discard(vid)  # (dead before it had an array in a block)
            elif isinstance(env[vid], np.ndarray):
                self.unseen.discard(vid)
                k = self._held_at(env[vid].ctypes.data) if env[vid].size else None
                if k is not None:
                    self.live[vid] = k
        self.live = {vid: k for vid, k in self.live.items() if self.last_read(vid) >= node}
        held = set(self.live.values())
        for k in self.used:
            if k not in held:
                self._free(k)
        self.used = [k for k in self.used if k in held]
