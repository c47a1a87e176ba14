"""A compiled XNNPACK plan's internal values reuse memory across lifetimes
(``backends/xnnpack/value_memory.py``): which values share memory, which keep their own
(delegate inputs and outputs, a pad's border written at load), how free intervals are
chosen and merged, and the outputs over several calls with changing inputs against the
numpy interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.compiled import StepBuilder
from pyexecutorch.backends.xnnpack.value_memory import SEGMENT_BYTES, ValueMemory

from .test_xnnpack_compiled import _init, _same
from .test_xnnpack_runtime import NODE, GraphBuilder, _rand

pytest.importorskip("numba")


def _chain() -> tuple[GraphBuilder, list[int]]:
    """FC -> abs -> FC -> sigmoid -> FC -> pad -> negate: each value read only by the
    next node (t[0] .. t[5] internal), the last the output."""
    g = GraphBuilder()
    xi = g.input((5, 24))
    t = [g.tensor(d) for d in ((5, 40), (5, 40), (5, 40), (5, 40), (5, 24), (5, 26))]
    out = g.tensor((5, 26))
    w1, w2, w3 = _rand(40, 24, seed=1), _rand(40, 40, seed=2), _rand(24, 40, seed=3)
    g.node(S.XNNFullyConnected(xi, g.const(w1), g.const(_rand(40, seed=4)), t[0], 0))
    g.node(NODE["XNNAbs"](t[0], t[1], 0))
    g.node(S.XNNFullyConnected(t[1], g.const(w2), S.INVALID_ID, t[2], 0))
    g.node(NODE["XNNSigmoid"](t[2], t[3], 0))
    g.node(S.XNNFullyConnected(t[3], g.const(w3), S.INVALID_ID, t[4], 0))
    g.node(NODE["XNNStaticConstantPad"]([0, 1], [0, 1], -3.0, t[4], t[5], 0))
    g.node(NODE["XNNNegate"](t[5], out, 0))
    g.output_all(out)
    return g, [*t, out]


def test_dead_values_memory_is_reused_and_outputs_hold_over_calls(monkeypatch):
    g, vids = _chain()
    backend, handle = _init(g, True)
    b = StepBuilder(handle.graph, ((5, 24),))
    b.build()
    env = b.env
    # t[2] is made at node 2, when t[0] (last read at node 1) is dead: its memory
    assert env[vids[2]].ctypes.data == env[vids[0]].ctypes.data
    # at most two internal values live at once, each of at most 5 x 40 float32 (800 bytes,
    # 832 with its cache-line padding): committing a value allocates nothing more
    assert b.memory.touched <= 2 * 832
    # t[1] is read by node 2, which writes t[2]: never one block
    assert not np.shares_memory(env[vids[1]], env[vids[2]])
    # the pad's border is written once at load: its output keeps memory of its own
    internal = [env[v] for v in vids[:5]]
    assert not any(np.shares_memory(env[vids[5]], a) for a in internal)
    # the delegate's output is never in a block
    assert not any(np.shares_memory(env[vids[6]], a) for a in internal + [env[vids[5]]])
    assert all(a.ctypes.data % 64 == 0 for a in internal)

    # the same compiled plan with an array of its own per value, and the numpy interpreter
    _, own = _init(g, True)
    _, ref = _init(g, False)
    for seed in range(3):  # (changing inputs: no value is read after its block is reused)
        x = _rand(5, 24, seed=10 + seed)
        results = []
        for h in (handle, own, ref):
            args = [x, np.full((5, 26), np.nan, np.float32)]
            with monkeypatch.context() as m:
                if h is own:
                    m.setattr(
                        ValueMemory, "array", lambda self, shape, dtype: np.empty(shape, dtype)
                    )
                results.append((backend.execute(h, args) or args)[1])
        assert (
            next(iter(handle.plans.values())).compiled and next(iter(own.plans.values())).compiled
        )
        np.testing.assert_array_equal(results[0], results[1])
        _same([results[0]], [results[2]], rtol=1e-5, atol=1e-5)  # (sums in another order)
        assert np.all(results[0][:, 0] == 3.0) and np.all(results[0][:, -1] == 3.0)


def test_value_memory_intervals():
    memory = ValueMemory({1: 2, 2: 3, 3: 5})
    a = memory.array((4, 10), np.float32)  # value 1: 160 bytes (192 with padding)
    b = memory.array((2, 3), np.float64)  # value 2: 48 bytes (64)
    assert a.ctypes.data % 64 == 0 and b.ctypes.data == a.ctypes.data + 192
    env = [None, a, b[:, 1:], None]  # (value 2 as a view of its array)
    memory.reclaim(2, env)  # value 1 read by node 2: kept
    assert memory.holes == [[(256, SEGMENT_BYTES)]]
    # a value's bytes, all of them (not its padding, nor a part): an output external's
    # memory that arrays overlapping it in part belong to other times
    assert memory.whole_block(a.ctypes.data, a.ctypes.data + 160)
    assert not memory.whole_block(a.ctypes.data, a.ctypes.data + 80)
    assert not memory.whole_block(a.ctypes.data, a.ctypes.data + 192)
    memory.reclaim(3, env)  # value 1 dead, value 2 read by node 3
    assert memory.holes == [[(0, 192), (256, SEGMENT_BYTES)]]
    c = memory.array((3,), np.int32)  # the smallest free interval that holds it
    assert c.ctypes.data == a.ctypes.data and memory.holes == [[(64, 192), (256, SEGMENT_BYTES)]]
    env[3] = c
    memory.reclaim(4, env)  # value 2 dead (merged with both neighbours); value 3 live
    assert memory.holes == [[(64, SEGMENT_BYTES)]]
    memory.reclaim(6, env)  # all dead: one interval again
    assert memory.holes == [[(0, SEGMENT_BYTES)]]
    assert not memory.whole_block(a.ctypes.data, a.ctypes.data + 160)  # (freed)
    assert memory.array((100,), np.float32).ctypes.data == a.ctypes.data
    assert memory.touched == 448  # (its 400 bytes padded to 448, past the first 256)
    memory.read_until(3, 9)
    assert memory.last_read(3) == 9 and memory.last_read(7) == -1


def test_value_memory_segments():
    memory = ValueMemory({1: 1, 2: 1, 3: 1}, reserve=1024)
    a = memory.array((200,), np.float32)  # 800 bytes of the first segment's 1024
    b = memory.array((100,), np.float32)  # does not fit the 224 left: a second segment
    c = memory.array((1000,), np.float32)  # larger than a segment: one of its own size
    assert len(memory.segments) == 3 and memory.segments[2].size == 4032
    assert all(x.ctypes.data % 64 == 0 for x in (a, b, c))
    memory.reclaim(2, [None, a, b, c])  # all dead: each segment whole again
    assert memory.holes == [[(0, 1024)], [(0, 1024)], [(0, 4032)]]
    assert memory.array((56,), np.float32).ctypes.data == a.ctypes.data
