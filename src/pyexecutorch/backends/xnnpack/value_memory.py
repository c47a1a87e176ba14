"""Memory for the internal values of a compiled XNNPACK plan, reused across lifetimes.

A value's array takes the memory of values that no node reads any more, as the official
runtime plans its workspace. With an array of its own per value, a full-size network's
activations (MobileNetV2 at 224x224: 53 MB; in reused blocks 16 MB) exceed the caches, so
every layer wrote into memory untouched since the previous call (read for ownership from
DRAM); reused memory was written a few layers before and is still cached.

Buffers are whole blocks of bytes, one value's array at a time (plus the views other
values make of it). A block is free once every value whose array lies in it has had its
last reader built: the builder asks :meth:`ValueMemory.reclaim` at the start of each
node's (or fused group of nodes') steps, so a value read by any node of the group being
built keeps its block. Delegate inputs and outputs never come from here (they are bound
to the caller's arrays).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# Cache-line alignment of every block (a vector load across two lines costs two).
_ALIGN = 64


class ValueMemory:
    """Blocks for a plan's internal values, each free again after its values' last reads."""

    def __init__(self, last_reads: dict[int, int]) -> None:
        self.last = dict(last_reads)  # value -> the last node that reads it (-1: none)
        self.free: list[np.ndarray] = []  # blocks (uint8) no live value lies in
        self.used: list[np.ndarray] = []
        # values not yet seen with an array (None until the first reclaim), and the live
        # values whose array lies in a block, by the block's index in ``used``' order of
        # making (each value's array is looked up once: a load stays linear in the values)
        self.unseen: set[int] | None = None
        self.live: dict[int, int] = {}
        self.blocks: list[tuple[int, int, np.ndarray]] = []  # (first byte, end, block)

    def read_until(self, vid: int, node: int) -> None:
        """Keep ``vid``'s memory until node ``node`` at least (a value read through another,
        such as the NCHW source of a deferred transpose)."""
        self.last[vid] = max(self.last.get(vid, -1), node)

    def last_read(self, vid: int) -> int:
        return self.last.get(vid, -1)

    def array(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An array of ``shape`` in the smallest free block that holds it (a new block when
        none does)."""
        dtype = np.dtype(dtype)
        size = math.prod(shape) * dtype.itemsize
        fitting = [blk for blk in self.free if blk.size >= size]
        if fitting:
            block = min(fitting, key=lambda blk: blk.size)
            self.free = [blk for blk in self.free if blk is not block]
        else:
            raw = np.empty(size + _ALIGN, np.uint8)
            start = -raw.ctypes.data % _ALIGN
            block = raw[start : start + size]
            self.blocks.append((block.ctypes.data, block.ctypes.data + size, block))
        self.used.append(block)
        return block[:size].view(dtype).reshape(shape)

    def _block_of(self, a: np.ndarray) -> int | None:
        if a.size == 0:
            return None
        address = a.ctypes.data
        for k, (lo, hi, _) in enumerate(self.blocks):
            if lo <= address < hi:
                return k
        return None

    def reclaim(self, node: int, env: Sequence[Any]) -> None:
        """Free the blocks in which no value of ``env`` lies that a node from ``node`` on
        still reads."""
        if self.unseen is None:
            self.unseen = set(range(len(env)))
        for vid in list(self.unseen):
            if self.last_read(vid) < node:
                self.unseen.discard(vid)  # (dead before it had an array in a block)
            elif isinstance(env[vid], np.ndarray):
                self.unseen.discard(vid)
                k = self._block_of(env[vid])
                if k is not None:
                    self.live[vid] = k
        self.live = {vid: k for vid, k in self.live.items() if self.last_read(vid) >= node}
        held = {id(self.blocks[k][2]) for k in self.live.values()}
        self.free += [blk for blk in self.used if id(blk) not in held]
        self.used = [blk for blk in self.used if id(blk) in held]
