"""Copies whose source stays intact while they are read become numpy views."""

from __future__ import annotations

import re

import numpy as np
import torch

from pyexecutorch.runtime import Runtime
from tests import models, official


def _view_lines(method) -> list[str]:  # noqa: ANN001
    """Generated lines that bind a view instead of calling a copy kernel."""
    source = "".join(method.plan.sources)
    return re.findall(r"^\s+v\[\d+\] = (?:w\d+\()?(?:v\[\d+\]|C\d+)\)?$", source, flags=re.M)


def _views(method) -> list[int]:  # noqa: ANN001
    """Instructions that became views: a generated line each, or made once at load."""
    plan = method.plan
    assert len(_view_lines(method)) + len(plan.load_time_views) == len(plan.view_instructions)
    return list(plan.view_instructions)


def _run_twice_against_eager(case, method) -> None:  # noqa: ANN001
    # Two different inputs: a stale view would show the first call's data.
    for seed in (1, 2):
        inputs = [
            torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
            for x in case.inputs()
        ]
        got = method.execute([x.numpy() for x in inputs])
        with torch.no_grad():
            want = case.make()(*inputs)
        want = want if isinstance(want, (list, tuple)) else [want]
        want = [w for w in torch.utils._pytree.tree_leaves(want)]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w.numpy(), rtol=1e-4, atol=1e-5)


def test_official_lstm_slices_and_permutes_are_views():
    case = models.CASES_BY_NAME["lstm"]
    method = Runtime.get().load_program(official.official_export(case)).load_method("forward")
    assert len(_views(method)) >= 4
    _run_twice_against_eager(case, method)


def test_a_copy_whose_source_is_reused_stays_a_copy():
    # Our planner hands a dying source's memory to the next instruction at once:
    # the permutes of `matmuls` must stay copies, and the results right.
    case = models.CASES_BY_NAME["matmuls"]
    from pyexecutorch.exir import to_edge  # noqa: PLC0415

    pte = to_edge(models.export(case)).to_executorch().buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    assert _views(method) == []
    _run_twice_against_eager(case, method)


def test_views_of_planned_inputs_are_made_once_at_load():
    # shape_ops slices its planned input: those views are the same arrays every run,
    # made at load (no instruction left), and still follow each call's input.
    case = models.CASES_BY_NAME["shape_ops"]
    from pyexecutorch.exir import to_edge  # noqa: PLC0415

    pte = to_edge(models.export(case)).to_executorch().buffer
    method = Runtime.get().load_program(pte, jit=False).load_method("forward")
    plan = method.plan
    assert plan.load_time_views and set(plan.load_time_views) <= set(_views(method))
    _run_twice_against_eager(case, method)
