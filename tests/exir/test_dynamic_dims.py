"""Dynamic dimensions through pyexecutorch.exir, run in our runtime and in the official
one at several sizes (the bounds included) and compared with torch eager.

Each case slices, selects, views, expands, concatenates, splits or reduces along or
across a dynamic dimension; some have two dynamic dims, a derived dim (``2 * b``) or a
dynamic sequence length in attention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim, export

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from tests import official

B = Dim("b", min=1, max=32)
B3 = Dim("b3", min=3, max=16)  # x[1:] and x[::2] must not have size 1 (export's guard)
S = Dim("s", min=1, max=24)
S3 = Dim("s3", min=3, max=24)


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable, linear: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.fn = fn
        self.lin = torch.nn.Linear(*linear) if linear else None

    def forward(self, *xs):
        return self.fn(self, *xs)


@dataclass
class Case:
    name: str
    fn: Callable
    shapes: Callable[[int], list[tuple[int, ...]]]  # example shapes for a size
    dynamic: tuple
    sizes: tuple[int, ...]
    linear: tuple[int, int] | None = None


def _attn(m, q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def _manual_attn(m, q, k, v):
    w = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
    return w @ v, w.sum(-1)


CASES = [
    # The reported bug: a slice of a dynamic-batch input added to another dynamic result.
    Case(
        "slice_plus_linear",
        lambda m, x: x[:, :8] + m.lin(x),
        lambda b: [(b, 16)],
        ({0: B},),
        (1, 5, 32),
        (16, 8),
    ),
    Case(
        "slice_along", lambda m, x: x[1:] * 2 - x[:-1], lambda b: [(b, 6)], ({0: B3},), (3, 7, 16)
    ),
    Case(
        "slice_step",
        lambda m, x: x[::2, 1::3] + 1,
        lambda b: [(b, 9)],
        ({0: B3},),
        (3, 4, 16),
    ),
    Case(
        "select",
        lambda m, x: (x[:, 0] + x[:, -1], x[0] * x[-1]),
        lambda b: [(b, 5)],
        ({0: B},),
        (1, 3, 32),
    ),
    Case(
        "views",
        lambda m, x: (
            x.view(x.shape[0], 2, 8).transpose(1, 2).reshape(x.shape[0], 16).flatten() + 0.5
        ),
        lambda b: [(b, 16)],
        ({0: B},),
        (1, 6, 32),
    ),
    Case(
        "expand",
        lambda m, x, y: y.expand(x.shape[0], 16) * x + x.unsqueeze(1).expand(-1, 3, -1).sum(1),
        lambda b: [(b, 16), (1, 16)],
        ({0: B}, None),
        (1, 9, 32),
    ),
    Case(
        "cat_along_and_across",
        lambda m, x: (torch.cat([x, x * 2], 0), torch.cat([x, -x, x + 1], 1)),
        lambda b: [(b, 4)],
        ({0: B},),
        (1, 10, 32),
    ),
    Case(
        "split_across",
        lambda m, x: tuple(t * (i + 1) for i, t in enumerate(x.split(3, dim=1))),
        lambda b: [(b, 8)],
        ({0: B},),
        (1, 11, 32),
    ),
    Case(
        "halves_along_derived",
        lambda m, x, y: (x[: y.shape[0]] + y, x[y.shape[0] :] * y, x.sum(0)),
        lambda b: [(2 * b, 4), (b, 4)],
        ({0: 2 * B}, {0: B}),
        (1, 6, 32),
    ),
    Case(
        "derived_view",
        lambda m, x, y: x.view(y.shape[0], 2, 4) + y.unsqueeze(1),
        lambda b: [(2 * b, 4), (b, 4)],
        ({0: 2 * B}, {0: B}),
        (1, 7, 32),
    ),
    Case(
        "reductions",
        lambda m, x: (
            x.sum(0),
            x.mean(0, keepdim=True),
            x.amax(0),
            x.sum(1),
            torch.softmax(x, 0),
            x.argmax(0),
            x.var(0, unbiased=False),
        ),
        lambda b: [(b, 6)],
        ({0: B},),
        (1, 8, 32),
    ),
    Case(
        "two_dims",
        lambda m, x, y: ((x + y).sum(1), (x * y)[:, 1:].mean(0), torch.cat([x, y], 1)),
        lambda b: [(b, b + 2), (b, b + 2)],
        ({0: B, 1: S3}, {0: B, 1: S3}),
        (1, 5, 32),
    ),
    Case(
        "sdpa_seq",
        _attn,
        lambda s: [(1, 2, s, 8)] * 3,
        ({2: S}, {2: S}, {2: S}),
        (1, 9, 24),
    ),
    Case(
        "manual_attn_seq",
        _manual_attn,
        lambda s: [(2, s, 16)] * 3,
        ({1: S}, {1: S}, {1: S}),
        (1, 13, 24),
    ),
]


def _shapes_at(case: Case, size: int) -> list[tuple[int, ...]]:
    if case.name == "two_dims":
        return [(size, min(size + 2, 24))] * 2
    return case.shapes(size)


def _inputs(case: Case, size: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=g) for s in _shapes_at(case, size))


_PROGRAMS: dict[str, tuple[torch.nn.Module, bytes]] = {}


def _compiled(case: Case) -> tuple[torch.nn.Module, bytes]:
    if case.name not in _PROGRAMS:
        torch.manual_seed(0)
        module = Fn(case.fn, case.linear).eval()
        # Example inputs away from the bounds (torch.export specializes 0 and 1).
        example = _inputs(case, 5, 0)
        ep = export(module, example, dynamic_shapes={"xs": case.dynamic})
        _PROGRAMS[case.name] = (module, to_edge(ep).to_executorch().buffer)
    return _PROGRAMS[case.name]


def _eager(module: torch.nn.Module, inputs) -> list[np.ndarray]:
    with torch.no_grad():
        return official.flatten_outputs(module(*[x.clone() for x in inputs]))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_dynamic_dims_both_runtimes(case: Case):
    module, pte = _compiled(case)
    ours = Runtime.get().load_program(pte).load_method("forward")
    theirs = official.OfficialRunner(pte)
    for size in case.sizes:
        inputs = _inputs(case, size, seed=size)
        expected = _eager(module, inputs)
        got = [np.asarray(o) for o in ours.execute([x.numpy() for x in inputs])]
        official.assert_close(case.name, got, expected, rtol=1e-4, atol=1e-5, what=f"ours {size}")
        official.assert_close(
            case.name, theirs.run(inputs), expected, rtol=1e-4, atol=1e-5, what=f"official {size}"
        )


def test_size_beyond_the_bound_is_refused():
    _, pte = _compiled(CASES[0])
    method = Runtime.get().load_program(pte).load_method("forward")
    with pytest.raises(RuntimeError, match="above its upper bound 32"):
        method.execute([np.zeros((33, 16), np.float32)])
