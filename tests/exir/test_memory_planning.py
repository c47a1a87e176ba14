"""Memory planning: the algorithms, the plan of every suite model (checked by an
independent execution simulation), and the arena sizes against the official
exporter's."""

from __future__ import annotations

import random

import pytest
import torch

from pyexecutorch.exir.memory_planning import (
    PlanItem,
    best_fit,
    greedy,
    live_peak,
    naive,
    verify_memory_plan,
)
from pyexecutorch.exir.tensor_spec import TensorSpec
from tests import models, official
from tests.exir._compile_support import compile_case
from tests.exir._plan_check import PlanViolation, check_plan


def _items(rng: random.Random, n: int) -> list[PlanItem]:
    items = []
    for i in range(n):
        start = rng.randrange(0, 60)
        end = start + rng.randrange(0, 15)
        size = 16 * rng.randrange(1, 40)
        spec = TensorSpec(torch.uint8, (size,))
        items.append(PlanItem(spec, size, start, end, i))
    return items


def _assert_valid(items: list[PlanItem], offsets: list[int], size: int) -> None:
    for i, a in enumerate(items):
        assert 0 <= offsets[i] and offsets[i] + a.size <= size
        assert offsets[i] % 16 == 0
        for j in range(i):
            b = items[j]
            if a.end < b.start or b.end < a.start:
                continue
            assert offsets[i] + a.size <= offsets[j] or offsets[j] + b.size <= offsets[i], (a, b)


@pytest.mark.parametrize("seed", range(20))
def test_algorithms_produce_valid_plans(seed):
    items = _items(random.Random(seed), 40)
    plans = [algo(items) for algo in (naive, greedy, best_fit)]
    for plan in plans:
        _assert_valid(items, plan.offsets, plan.size)
    bound = live_peak(items)
    assert plans[0].size == sum(it.size for it in items)
    assert bound <= plans[2].size <= plans[0].size
    assert bound <= plans[1].size <= plans[0].size


def test_best_fit_usually_beats_greedy():
    wins = losses = 0
    for seed in range(40):
        items = _items(random.Random(1000 + seed), 40)
        g, b = greedy(items).size, best_fit(items).size
        wins += b < g
        losses += b > g
    assert wins >= 30 and losses <= 3


def test_best_fit_beats_greedy_on_a_known_case():
    # Three tensors: a small long-lived one between two large short-lived ones.
    # Greedy by size stacks shared objects; best fit reuses the gap.
    sizes_lifetimes = [(64, 0, 1), (16, 1, 4), (64, 3, 4), (48, 2, 2)]
    items = [
        PlanItem(TensorSpec(torch.uint8, (s,)), s, a, b, i)
        for i, (s, a, b) in enumerate(sizes_lifetimes)
    ]
    assert best_fit(items).size <= greedy(items).size
    assert best_fit(items).size == live_peak(items)


@pytest.mark.parametrize("case", models.CASES, ids=lambda c: c.name)
def test_plan_is_valid(case: models.ModelCase):
    et, _ = compile_case(case.name)
    for method in et.methods:
        gm = et.exported_program(method).graph_module
        verify_memory_plan(gm)
        try:
            check_plan(gm)
        except PlanViolation as e:
            raise AssertionError(f"{case.name}.{method}: {e}") from None
        report = et.memory_plans[method]
        assert report["chosen"] == gm.meta["non_const_buffer_sizes"][1]
        assert report["chosen"] <= min(report["greedy"], report["naive"])
        assert report["chosen"] >= report["lower_bound"]


def _arena_rows():
    rows = []
    for case in models.cases(official_exportable=True):
        et, pte = compile_case(case.name)
        theirs = official.official_arena_sizes_all(official.official_export(case))
        from pyexecutorch.schema import decode_pte

        ours = {
            p.name: list(p.non_const_buffer_sizes) for p in decode_pte(pte).program.execution_plan
        }
        for method in et.methods:
            rows.append((case.name, method, sum(ours[method]), sum(theirs[method])))
    return rows


def test_arena_sizes_against_official(capsys):
    rows = _arena_rows()
    worse = [(n, m, o, t) for n, m, o, t in rows if o > t]
    total_ours = sum(r[2] for r in rows)
    total_theirs = sum(r[3] for r in rows)
    with capsys.disabled():
        print(f"\n{'model':26s} {'method':8s} {'official':>9s} {'ours':>9s} {'ratio':>6s}")
        for name, method, o, t in rows:
            print(f"{name:26s} {method:8s} {t:9d} {o:9d} {o / t if t else 1:6.2f}")
        print(f"{'total':35s} {total_theirs:9d} {total_ours:9d} {total_ours / total_theirs:6.2f}")
    assert not worse, f"arena larger than the official exporter's: {worse}"
    assert total_ours <= 0.9 * total_theirs


class _TwoMaps(torch.nn.Module):
    """Two maps (one with an operand) and a tensor alive across both."""

    def forward(self, xs, y):
        from torch._higher_order_ops.map import map as torch_map

        kept = xs.sum(0)
        a = torch_map(lambda x, y: (x * y).relu(), xs, y)
        b = torch_map(lambda x: x.exp() + 1, a)
        return b + kept


def test_map_bodies_are_planned_on_their_own_before_the_method():
    from pyexecutorch.exir import to_edge
    from pyexecutorch.exir.graph_utils import HOP_MAP
    from pyexecutorch.portable_lib import _load_for_executorch_from_buffer

    model = _TwoMaps()
    xs, y = torch.randn(4, 3), torch.randn(3)
    et = to_edge(torch.export.export(model, (xs, y))).to_executorch()
    gm = et.exported_program().graph_module
    verify_memory_plan(gm)
    maps = [n for n in gm.graph.nodes if n.target is HOP_MAP]
    bodies = [getattr(gm, n.args[0].target) for n in maps]
    # 16 bytes a row; body 1: the slice x and the operand y (its memory unused, as the
    # official's), x * y and relu written over x; body 2: x, exp and + 1 over it
    assert [b.meta["non_const_buffer_sizes"] for b in bodies] == [[0, 32], [0, 16]]
    region = 32
    for body in bodies:
        for n in body.graph.nodes:
            spec = n.meta.get("spec")
            if isinstance(spec, TensorSpec) and spec.mem_offset is not None:
                assert spec.mem_offset + spec.allocated_memory <= region, n.format_node()
    outer = [
        n.meta["spec"]
        for n in gm.graph.nodes
        if isinstance(n.meta.get("spec"), TensorSpec) and n.meta["spec"].mem_offset is not None
    ]
    assert outer and all(s.mem_offset >= region for s in outer)
    assert gm.meta["non_const_buffer_sizes"][1] > region
    ours = _load_for_executorch_from_buffer(et.buffer)
    theirs = official.OfficialRunner(et.buffer)
    for _ in range(3):  # new values each call
        xs, y = torch.randn(4, 3), torch.randn(3)
        expected = model(xs, y)
        torch.testing.assert_close(ours.forward((xs, y))[0], expected)
        torch.testing.assert_close(torch.from_numpy(theirs.run((xs, y))[0]), expected)
