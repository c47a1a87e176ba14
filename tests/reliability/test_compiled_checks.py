"""The compiled tier checks what the numpy tier checks (issue 29, defects 1-4).

Every kernel family with an argument check (:mod:`pyexecutorch.kernels.checks`)
refuses the same arguments on both tiers: small programs from our exporter, each
with one argument changed to a hostile value (decoded, changed, encoded again, as
the fuzz campaign's structural mutations do), load on the numpy tier and on the
compiled tier and fail the same way, call after call with changing inputs: an
``ExecutionError`` caused by the kernel's ``KernelError``, with the same message.
On the compiled tier the instruction is refused at load (``refused``), so no
fused loop, compiled form or whole-method step ever sees those arguments.

Each case is also the regression test of a defect the campaign found: the
compiled tier read past a 0-d layer-norm bias (1), raised a bare ``TypeError`` or
``IndexError`` from ``load_method`` (2), ignored split sizes, ``keepdim`` or a too
small output (3), and a static planned tensor changed size on one tier only (4).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pyexecutorch.exir import to_edge
from pyexecutorch.kernels.checks import checked_names, get_argument_check, refusal
from pyexecutorch.kernels.common import fit, keep_size
from pyexecutorch.kernels.registry import KernelError, get_kernel
from pyexecutorch.runtime import ExecutionError, Runtime
from pyexecutorch.schema import decode_pte, encode_pte
from pyexecutorch.schema.program import Bool, ExecutionPlan, Int, KernelCall, Null, String

pytestmark = pytest.mark.filterwarnings("ignore")


class _Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any], *mods: nn.Module) -> None:
        super().__init__()
        self.fn = fn
        self.mods = nn.ModuleList(mods)

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(self.mods, x)


# name -> (module, input shape): each small, so that a refused instruction leaves little else
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "layer_norm": (lambda: _Fn(lambda m, x: m[0](x) * 2.0 + 1.0, nn.LayerNorm(128)), (2, 4, 128)),
    "elu": (lambda: _Fn(lambda m, x: F.elu(x * 2.0) + 1.0), (4, 8)),
    "conv_elu": (lambda: _Fn(lambda m, x: F.elu(m[0](x)), nn.Conv2d(3, 4, 3)), (1, 3, 10, 10)),
    "conv_relu": (
        lambda: _Fn(lambda m, x: torch.relu(m[0](x)), nn.Conv2d(3, 4, 3)),
        (1, 3, 10, 10),
    ),
    "mean": (lambda: _Fn(lambda m, x: (x.mean(-1, keepdim=True) - x) * 2.0), (4, 8)),
    "argmax": (lambda: _Fn(lambda m, x: torch.argmax(x, dim=1, keepdim=True)), (6, 5)),
    "split": (
        lambda: _Fn(lambda m, x: (lambda a, b: a * 2.0 + b)(*torch.split(x, [4, 4], 1))),
        (2, 8),
    ),
    "max_pool": (lambda: _Fn(lambda m, x: F.max_pool2d(x, 2)), (1, 2, 8, 8)),
    "linear": (lambda: _Fn(lambda m, x: m[0](x), nn.Linear(8, 8)), (4, 8)),
    "softmax": (lambda: _Fn(lambda m, x: F.softmax(x, -1)), (4, 8)),
    "cat": (lambda: _Fn(lambda m, x: torch.cat([x, x * 2.0], 1) + 1.0), (4, 8)),
    "div_floor": (
        lambda: _Fn(lambda m, x: torch.div(x, x.abs() + 3.0, rounding_mode="floor")),
        (4, 8),
    ),
    "dilated_conv": (
        lambda: _Fn(lambda m, x: m[0](x), nn.Conv2d(3, 4, 3, dilation=2)),
        (1, 3, 12, 12),
    ),
}


@functools.cache
def program(name: str) -> bytes:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    ep = torch.export.export(module, (torch.randn(shape),))
    return to_edge(ep).to_executorch().buffer


def _call(plan: ExecutionPlan, op: str) -> tuple[int, KernelCall]:
    """The first call of operator ``op`` (``aten::elu``): its instruction index and args."""
    for pc, instr in enumerate(plan.chains[0].instructions):
        a = instr.instr_args
        if isinstance(a, KernelCall) and plan.operators[a.op_index].name == op:
            return pc, a
    raise LookupError(op)


def _tensor_0d(plan: ExecutionPlan, j: int) -> None:
    t = plan.values[j].val
    t.sizes, t.dim_order = [], []


def _set(plan: ExecutionPlan, j: int, val: Any) -> None:
    plan.values[j].val = val


def _sizes(sizes: list[int]) -> Callable[[ExecutionPlan, int], None]:
    return lambda plan, j: setattr(plan.values[j].val, "sizes", sizes)


def _items(items_of: Callable[[ExecutionPlan], list[int]]) -> Callable[[ExecutionPlan, int], None]:
    return lambda plan, j: setattr(plan.values[j].val, "items", items_of(plan))


def _new_int(plan: ExecutionPlan, n: int) -> int:
    from pyexecutorch.schema.program import EValue  # noqa: PLC0415

    plan.values.append(EValue(Int(n)))
    return len(plan.values) - 1


# (family, model, operator, its argument changed, the change, the kernel's message)
CASES = [
    # 1: the fused layer norm read 128 floats past a 0-d bias
    (
        "norm",
        "layer_norm",
        "aten::native_layer_norm",
        3,
        _tensor_0d,
        r"bias must have shape \(128,\), got \(\)",
    ),
    (
        "norm",
        "layer_norm",
        "aten::native_layer_norm",
        4,
        lambda p, j: _set(p, j, Null()),
        "eps must be a number",
    ),
    # 3: a layer norm's output smaller than its result
    (
        "norm",
        "layer_norm",
        "aten::native_layer_norm",
        5,
        _sizes([2, 2, 128]),
        r"result of shape \(2, 4, 128\)",
    ),
    # 2: TypeError from formulas.py through the fusion (ELU with a null scalar)
    (
        "elementwise",
        "elu",
        "aten::elu",
        1,
        lambda p, j: _set(p, j, Null()),
        "elu: alpha must be a number, got None",
    ),
    # 2: the same through a convolution's epilogue
    (
        "elementwise",
        "conv_elu",
        "aten::elu",
        1,
        lambda p, j: _set(p, j, Null()),
        "elu: alpha must be a number",
    ),
    # 2: IndexError from fusion.py for a 0-d output (of a convolution's epilogue)
    (
        "elementwise",
        "conv_relu",
        "aten::relu",
        1,
        _tensor_0d,
        r"result of shape \(1, 4, 8, 8\) does not fit",
    ),
    # 3: an elementwise output declared smaller than its result
    (
        "elementwise",
        "elu",
        "aten::mul",
        2,
        _sizes([2, 8]),
        r"result of shape \(4, 8\) does not fit",
    ),
    # 3: mean's keepdim ignored (a wrong value, a wrong kind)
    (
        "reduce",
        "mean",
        "aten::mean",
        2,
        lambda p, j: _set(p, j, Bool(False)),
        r"result of shape \(4,\)",
    ),
    (
        "reduce",
        "mean",
        "aten::mean",
        2,
        lambda p, j: _set(p, j, Int(1)),
        "keepdim must be a bool, got 1",
    ),
    # 4: argmax's output (6, 1) on one tier, (6,) on the other
    (
        "reduce",
        "argmax",
        "aten::argmax",
        2,
        lambda p, j: _set(p, j, Bool(False)),
        r"result of shape \(6,\)",
    ),
    # 3: split sizes never read
    (
        "shape",
        "split",
        "aten::split_with_sizes_copy",
        1,
        _items(lambda p: [_new_int(p, 3)] * 2),
        "must sum to",
    ),
    # 4: a max pool that ran on one tier and failed on the other
    (
        "pool",
        "max_pool",
        "aten::max_pool2d_with_indices",
        4,
        _items(lambda p: [_new_int(p, 3)] * 2),
        r"\(1, 2, 3, 3\)",
    ),
    (
        "norm",
        "softmax",
        "aten::_softmax",
        1,
        lambda p, j: _set(p, j, Int(5)),
        "out of range",
    ),
    ("linalg", "linear", "aten::addmm", 3, lambda p, j: _set(p, j, Null()), "beta must be"),
    ("shape", "cat", "aten::cat", 1, lambda p, j: _set(p, j, Int(0)), r"result of shape \(8, 8\)"),
    (
        "elementwise",
        "div_floor",
        "aten::div",
        2,
        lambda p, j: _set(p, j, String("round")),
        "rounding_mode must be",
    ),
    # 4: a dilated convolution read the previous call's stale data
    (
        "conv",
        "dilated_conv",
        "aten::convolution",
        5,
        _items(lambda p: [_new_int(p, 3)] * 2),
        r"\(1, 4, 6, 6\)",
    ),
]
IDS = [f"{c[0]}-{c[1]}-{c[2].split('::')[1]}-{c[3]}-{n}" for n, c in enumerate(CASES)]


def mutated(model: str, op: str, position: int, edit: Callable) -> tuple[bytes, int]:
    """``model``'s program with argument ``position`` of its first ``op`` changed; and that
    instruction's index."""
    f = decode_pte(program(model))
    plan = f.program.execution_plan[0]
    pc, call = _call(plan, op)
    edit(plan, call.args[position])
    return encode_pte(f), pc


def outcomes(data: bytes, shape: tuple[int, ...], jit: bool, calls: int = 3) -> tuple[list, Any]:
    """Each call's outcome (outputs, or the error's cause and message) and the method."""
    method = Runtime.get().load_program(data, jit=jit).load_method("forward")
    rng = np.random.default_rng(len(data))
    seen: list[Any] = []
    for _ in range(calls):
        x = rng.standard_normal(shape).astype(np.float32)
        try:
            seen.append([np.array(o) for o in method.execute([x])])
        except ExecutionError as e:
            seen.append((type(e.__cause__).__name__, str(e)))
    return seen, method


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_both_tiers_refuse_alike(case):
    family, model, op, position, edit, message = case
    data, pc = mutated(model, op, position, edit)
    shape = MODELS[model][1]
    reference, _ = outcomes(data, shape, jit=False)
    compiled, method = outcomes(data, shape, jit=True)
    assert reference == compiled
    for cause, text in compiled:  # every call fails, at that instruction, with the kernel's error
        assert cause == "KernelError"
        assert f"instruction {pc} ({op}" in text
        assert re.search(message, text), text
    assert (0, pc) in method.plan.refused  # refused at load: nothing compiled ran


# (the others' compiled forms are tested against torch elsewhere, and cost seconds to compile)
LOWERED = ["layer_norm", "elu", "mean", "split", "conv_elu", "conv_relu"]


@pytest.mark.parametrize("model", LOWERED)
def test_the_unchanged_programs_run_compiled_and_match_torch(model):
    """The checks refuse none of the valid programs that the mutations above start from:
    they run fused, and both tiers compute what torch does."""
    make, shape = MODELS[model]
    torch.manual_seed(0)
    module = make().eval()
    x = torch.randn(shape)
    with torch.no_grad():
        want = module(x)
    want = [t.numpy() for t in (want if isinstance(want, tuple) else (want,))]
    for jit in (False, True):
        method = Runtime.get().load_program(program(model), jit=jit).load_method("forward")
        assert not method.plan.refused
        for _ in range(2):
            got = method.execute([x.numpy()])
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-5)
    plan = method.plan
    assert plan.fused_runs or plan.conv_epilogues  # the lowering the cases above test


def test_every_family_that_the_compiled_tier_lowers_has_cases():
    families = {c[0] for c in CASES}
    assert families == {"norm", "elementwise", "reduce", "shape", "pool", "conv", "linalg"}
    ops = {c[2] for c in CASES}
    for name in ops:
        assert any(n.startswith(name + ".") for n in checked_names())


# The check and the numpy kernel refuse the same arguments, kernel by kernel: (kernel,
# inputs, outputs as the runtime plans them).
_F = np.float32


def _z(*shape: int, dtype: Any = _F) -> np.ndarray:
    return np.zeros(shape, dtype)


KERNEL_CASES = [
    (
        "aten::native_layer_norm.out",
        [_z(2, 8), [8], _z(8), _z(), 1e-5],
        [_z(2, 8), _z(2, 1), _z(2, 1)],
    ),
    (
        "aten::native_layer_norm.out",
        [_z(2, 8), [4], None, None, 1e-5],
        [_z(2, 8), _z(2, 1), _z(2, 1)],
    ),
    (
        "aten::native_layer_norm.out",
        [_z(2, 8), [8], None, None, None],
        [_z(2, 8), _z(2, 1), _z(2, 1)],
    ),
    ("aten::elu.out", [_z(3), None, 1, 1], [_z(3)]),
    ("aten::leaky_relu.out", [_z(3), "x"], [_z(3)]),
    ("aten::gelu.out", [_z(3), "fast"], [_z(3)]),
    ("aten::add.out", [_z(3), _z(4), 1], [_z(4)]),
    ("aten::mul.out", [_z(4, 8), _z(4, 8)], [_z(2, 8)]),
    ("aten::relu.out", [_z(1, 4)], [_z()]),
    ("aten::mean.out", [_z(4, 8), [1], False, None], [_z(4, 1)]),
    ("aten::mean.out", [_z(4, 8), [1], 1, None], [_z(4, 1)]),
    ("aten::mean.out", [_z(4, 8), [2], True, None], [_z(4, 1)]),
    ("aten::mean.out", [_z(4, 8, dtype=np.int32), [1], True, None], [_z(4, 1)]),
    ("aten::sum.IntList_out", [_z(4, 8), [1, 1], True, None], [_z(4, 1)]),
    ("aten::argmax.out", [_z(6, 5), 1, False], [_z(6, 1, dtype=np.int64)]),
    ("aten::any.out", [_z(6, 5, dtype=np.bool_), 1.5, False], [_z(6, dtype=np.bool_)]),
    ("aten::split_with_sizes_copy.out", [_z(2, 8), [3, 3], 1], [[_z(2, 3), _z(2, 3)]]),
    ("aten::split_copy.Tensor_out", [_z(2, 8), 3, 1], [[_z(2, 4), _z(2, 4)]]),
    ("aten::split_copy.Tensor_out", [_z(2, 8), 4, 5], [[_z(2, 4), _z(2, 4)]]),
    (
        "aten::max_pool2d_with_indices.out",
        [_z(1, 2, 8, 8), [2, 2], [2, 2], [0, 0], [3, 3], False],
        [_z(1, 2, 4, 4), _z(1, 2, 4, 4, dtype=np.int64)],
    ),
    (
        "aten::max_pool2d_with_indices.out",
        [_z(1, 2, 8, 8), [2, 2], [0, 0], [0, 0], [1, 1], False],
        [_z(1, 2, 4, 4), _z(1, 2, 4, 4, dtype=np.int64)],
    ),
    (
        "aten::avg_pool2d.out",
        [_z(1, 2, 8, 8), [2, 2], [2, 2], [0, 0], False, True, 0],
        [_z(1, 2, 4, 4)],
    ),
    ("aten::div.out_mode", [_z(3), _z(3), "round"], [_z(3)]),
    ("aten::fmod.Scalar_out", [_z(3), None], [_z(3)]),
    ("aten::floor_divide.out", [_z(2, 3), _z(4)], [_z(2, 3)]),
    ("dim_order_ops::_to_dim_order_copy.out", [_z(2, 3), False, [0, 0]], [_z(2, 3)]),
    ("aten::_to_copy.out", [_z(2, 3), False, None], [_z(3, 2)]),
    ("aten::mm.out", [_z(2, 3), _z(4, 5)], [_z(2, 5)]),
    ("aten::bmm.out", [_z(2, 2, 3), _z(2, 3, 5, dtype=np.float64)], [_z(2, 2, 5)]),
    ("aten::addmm.out", [_z(4), _z(2, 3), _z(3, 4), 1, None], [_z(2, 4)]),
    ("aten::_softmax.out", [_z(2, 3), 1.5, False], [_z(2, 3)]),
    ("aten::_log_softmax.out", [_z(2, 3), 1, True], [_z(2, 3)]),
    ("aten::cat.out", [[_z(2, 3), _z()], 0], [_z(2, 3)]),
    ("aten::cat.out", [[_z(2, 3), _z(2, 4)], 0], [_z(4, 3)]),
    ("aten::cat.out", [[_z(2, 3), _z(2, 4)], 1], [_z(2, 3)]),
    (
        "aten::convolution.out",
        [_z(1, 3, 12, 12), _z(4, 3, 3, 3), _z(4), [1, 1], [0, 0], [3, 3], False, [0, 0], 1],
        [_z(1, 4, 8, 8)],
    ),
    (
        "aten::convolution.out",
        [_z(1, 3, 12, 12), _z(4, 3, 3, 3), _z(3), [1, 1], [0, 0], [1, 1], False, [0, 0], 1],
        [_z(1, 4, 10, 10)],
    ),
    (
        "aten::convolution.out",
        [_z(1, 3, 12, 12), _z(4, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 2],
        [_z(1, 4, 10, 10)],
    ),
]


_I = np.int64

# The other compiled forms' families: hostile scalars, dims, dtypes and shapes.
KERNEL_CASES += [
    (
        "aten::_adaptive_avg_pool2d.out",
        [_z(1, 2, 8, 8, dtype=np.int32), [2, 2]],
        [_z(1, 2, 2, 2, dtype=np.int32)],
    ),
    ("aten::_adaptive_avg_pool2d.out", [_z(1, 2, 8, 8), [4, 4]], [_z(1, 2, 2, 2)]),
    (
        "aten::_native_batch_norm_legit_no_training.out",
        [_z(1, 3, 4, 4), _z(3), _z(3), _z(3), _z(3), 0.1, None],
        [_z(1, 3, 4, 4), _z(0), _z(0)],
    ),
    (
        "aten::_native_batch_norm_legit_no_training.out",
        [_z(1, 3, 4, 4), _z(3), _z(3), None, _z(3), 0.1, 1e-5],
        [_z(1, 3, 4, 4), _z(0), _z(0)],
    ),
    (
        "aten::_native_batch_norm_legit_no_training.out",
        [_z(1, 3, 4, 4), _z(4), _z(3), _z(3), _z(3), 0.1, 1e-5],
        [_z(1, 3, 4, 4), _z(0), _z(0)],
    ),
    (
        "aten::native_group_norm.out",
        [_z(2, 4, 3), _z(4), _z(4), 2, 4, 3, 3, 1e-5],
        [_z(2, 4, 3), _z(2, 3), _z(2, 3)],
    ),
    (
        "aten::native_group_norm.out",
        [_z(2, 4, 3), _z(4), _z(4), 2, 4, 3, None, 1e-5],
        [_z(2, 4, 3), _z(2, 2), _z(2, 2)],
    ),
    ("aten::constant_pad_nd.out", [_z(2, 3), [1, 1, 1], 0.0], [_z(2, 5)]),
    ("aten::constant_pad_nd.out", [_z(2, 3), [1, 1], None], [_z(2, 5)]),
    ("aten::constant_pad_nd.out", [_z(2, 3), [1, 1], 0.0], [_z(2, 4)]),
    ("aten::cumsum.out", [_z(2, 3), None, None], [_z(2, 3)]),
    ("aten::cumsum.out", [_z(2, 3), 1, 1], [_z(2, 3)]),
    ("aten::embedding.out", [_z(5, 4), _z(3, dtype=np.float32), -1, False, False], [_z(3, 4)]),
    ("aten::embedding.out", [_z(5), _z(3, dtype=_I), -1, False, False], [_z(3)]),
    ("aten::expand_copy.out", [_z(3, 1), [4], False], [_z(3, 4)]),
    ("aten::expand_copy.out", [_z(3, 2), [3, 4], False], [_z(3, 4)]),
    ("aten::gather.out", [_z(3, 4), 1, _z(3, 2), False], [_z(3, 2)]),
    ("aten::gather.out", [_z(3, 4), None, _z(3, 2, dtype=_I), False], [_z(3, 2)]),
    ("aten::gather.out", [_z(3, 4), 1, _z(3, 2, 1, dtype=_I), False], [_z(3, 2, 1)]),
    ("aten::index.Tensor_out", [_z(3, 4), [_z(2)]], [_z(2, 4)]),
    ("aten::index.Tensor_out", [_z(3, 4), [1]], [_z(2, 4)]),
    ("aten::index.Tensor_out", [_z(3, 4), [_z(2, dtype=_I)]], [_z(3, 4)]),
    ("aten::index_put.out", [_z(3, 4), [_z(2, dtype=_I)], _z(2, 4, dtype=_I), False], [_z(3, 4)]),
    ("aten::index_put.out", [_z(3, 4), [_z(2, dtype=_I)], _z(2, 4), 1], [_z(3, 4)]),
    ("aten::index_put.out", [_z(3, 4), [_z(2, dtype=_I)], 1.0, False], [_z(3, 4)]),
    ("aten::index_select.out", [_z(3, 4), 1.0, _z(2, dtype=_I)], [_z(3, 2)]),
    ("aten::index_select.out", [_z(3, 4), 1, _z(2, 2, dtype=_I)], [_z(3, 4)]),
    ("aten::index_select.out", [_z(3, 4), 1, _z(2, dtype=_I)], [_z(3, 3)]),
    ("aten::prod.int_out", [_z(3, 4), None, False, None], [_z(3)]),
    ("aten::prod.int_out", [_z(3, 4), 1, False, True], [_z(3)]),
    ("aten::prod.int_out", [_z(3, 4), 1, False, 4], [_z(3)]),
    ("aten::repeat.out", [_z(3, 4), [2]], [_z(3, 8)]),
    ("aten::repeat.out", [_z(3, 4), [1, -1]], [_z(3, 4)]),
    ("aten::repeat.out", [_z(3, 4), [1, 2]], [_z(3, 4)]),
    ("aten::topk.values", [_z(3, 4), 5, 1, True, True], [_z(3, 5), _z(3, 5, dtype=_I)]),
    ("aten::topk.values", [_z(3, 4), 2.0, 1, True, True], [_z(3, 2), _z(3, 2, dtype=_I)]),
    ("aten::topk.values", [_z(3, 4), 2, 1, True, True], [_z(3, 3), _z(3, 3, dtype=_I)]),
    (
        "aten::upsample_bilinear2d.vec_out",
        [_z(1, 2, 4, 4), None, False, [float("inf"), 2.0]],
        [_z(1, 2, 8, 8)],
    ),
    (
        "aten::upsample_bilinear2d.vec_out",
        [_z(1, 2, 4, 4, dtype=_I), [8, 8], False, None],
        [_z(1, 2, 8, 8, dtype=_I)],
    ),
    ("aten::upsample_nearest2d.vec_out", [_z(1, 2, 4, 4), [8, 8], [2.0, 2.0]], [_z(1, 2, 8, 8)]),
    ("aten::upsample_nearest2d.vec_out", [_z(1, 2, 4, 4), [8, 8], None], [_z(1, 2, 4, 8)]),
    ("aten::var.correction_out", [_z(3, 4), [1], "one", False], [_z(3)]),
    ("aten::var.correction_out", [_z(3, 4, dtype=_I), [1], 1, False], [_z(3)]),
    ("aten::var.correction_out", [_z(3, 4), [1], 1, True], [_z(3)]),
    # an explicit dtype is the out tensor's (the campaign's scalar_input and mutable buffer
    # tier differences: sum's dtype replaced by a Bool, True read as int8)
    ("aten::sum.IntList_out", [_z(2, 3), [], False, True], [_z()]),
    ("aten::sum.IntList_out", [_z(2, 3), [], False, 1], [_z()]),
    ("aten::mean.out", [_z(2, 3), [1], False, 7], [_z(2)]),
    # a Bool alpha on float operands (the campaign's scalar_input with a value replaced: the
    # compiled tier's fused add ran where the numpy kernel refuses)
    ("aten::add.out", [_z(2, 3), _z(2, 3), True], [_z(2, 3)]),
    ("aten::sub.Scalar_out", [_z(2, 3), 1.0, False], [_z(2, 3)]),
    ("aten::amax.out", [_z(3, 4), [2], False], [_z(3)]),
    ("aten::amin.out", [_z(3, 4), [0, 0], False], [_z(4)]),
    ("aten::any.all_out", [_z(3, 4, dtype=np.bool_)], [_z(1, dtype=np.bool_)]),
    ("aten::any.dims_out", [_z(3, 4, dtype=np.bool_), [1], 1], [_z(3, 1, dtype=np.bool_)]),
    ("aten::argmin.out", [_z(3, 4, dtype=np.bool_), 1, False], [_z(3, dtype=_I)]),
    ("aten::max.dim_max", [_z(3, 4), 2, False], [_z(3), _z(3, dtype=_I)]),
    ("aten::min.dim_min", [_z(3, 0), 1, False], [_z(3), _z(3, dtype=_I)]),
    ("aten::fmod.Tensor_out", [_z(3), _z(4)], [_z(4)]),
    ("aten::remainder.Scalar_out", [_z(3), None], [_z(3)]),
    ("aten::remainder.Tensor_out", [_z(3), _z(4)], [_z(4)]),
    ("dim_order_ops::_clone_dim_order.out", [_z(2, 3), False, [1, 1]], [_z(2, 3)]),
    # the KV-cache operators: a position past the cache, heads that do not group, a value
    # wider than its cache
    (
        "llama::custom_sdpa.out",
        [_z(1, 1, 4, 8), _z(1, 6, 2, 8), _z(1, 6, 2, 8), 6, None, 0.0, True, None],
        [_z(1, 1, 4, 8)],
    ),
    (
        "llama::custom_sdpa.out",
        [_z(1, 1, 3, 8), _z(1, 6, 2, 8), _z(1, 6, 2, 8), 0, None, 0.0, True, None],
        [_z(1, 1, 3, 8)],
    ),
    ("llama::update_cache.out", [_z(1, 2, 2, 8), _z(1, 6, 2, 8), 5], [_z(1)]),
    ("llama::update_cache.out", [_z(1, 1, 2, 4), _z(1, 6, 2, 8), 0], [_z(1)]),
]

# Arguments each check accepts, and the shapes it says the kernel's outputs take: the
# kernel's own outputs (the checks say no more than the kernels compute).
VALID_CASES = [
    (
        "llama::custom_sdpa.out",
        [_z(1, 2, 4, 8), _z(1, 6, 2, 8), _z(1, 6, 2, 8), 3, None, 0.0, True, None],
        [_z(1, 2, 4, 8)],
    ),
    ("aten::_adaptive_avg_pool2d.out", [_z(1, 2, 8, 8), [3, 3]], [_z(1, 2, 9, 9)]),
    (
        "aten::_native_batch_norm_legit_no_training.out",
        [_z(1, 3, 4, 4), None, _z(3), _z(3), _z(3), 0.1, 1e-5],
        [_z(1, 3, 4, 4), _z(3), _z(3)],
    ),
    (
        "aten::native_group_norm.out",
        [_z(2, 4, 3), _z(4), None, 2, 4, 3, 2, 1e-5],
        [_z(2, 4, 3), _z(2, 9), _z(2, 9)],
    ),
    ("aten::constant_pad_nd.out", [_z(2, 3), [1, 2, -1, 0], 1.5], [_z(2, 9)]),
    ("aten::cumsum.out", [_z(2, 3, dtype=_I), -1, None], [_z(2, 3, dtype=_I)]),
    ("aten::embedding.out", [_z(5, 4), _z(2, 3, dtype=_I), -1, False, False], [_z(2, 9, 4)]),
    ("aten::expand_copy.out", [_z(3, 1), [2, -1, 4], False], [_z(2, 3, 9)]),
    ("aten::gather.out", [_z(3, 4), -1, _z(2, 2, dtype=_I), False], [_z(9, 2)]),
    ("aten::index.Tensor_out", [_z(3, 4, 5), [None, _z(2, dtype=_I)]], [_z(3, 9, 5)]),
    ("aten::index.Tensor_out", [_z(3, 4, 5), [_z(2, dtype=_I), None, _z(1, dtype=_I)]], [_z(9, 4)]),
    ("aten::index_put.out", [_z(3, 4), [None, _z(2, dtype=_I)], _z(2), True], [_z(3, 9)]),
    ("aten::index_select.out", [_z(3, 4), 0, _z(5, dtype=np.int32)], [_z(9, 4)]),
    ("aten::prod.int_out", [_z(3, 4), 0, True, None], [_z(3, 9)]),
    ("aten::repeat.out", [_z(3, 4), [2, 1, 3]], [_z(2, 3, 12)]),
    ("aten::topk.values", [_z(3, 4), 2, 0, False, True], [_z(9, 4), _z(9, 4, dtype=_I)]),
    ("aten::upsample_bilinear2d.vec_out", [_z(1, 2, 4, 4), [6, 5], True, None], [_z(1, 2, 9, 9)]),
    ("aten::upsample_nearest2d.vec_out", [_z(1, 2, 4, 4), None, [1.5, 2.0]], [_z(1, 2, 9, 9)]),
    ("aten::var.correction_out", [_z(3, 4), [0], 0.5, True], [_z(9, 4)]),
    ("aten::sum.IntList_out", [_z(2, 3), [0], False, 7], [_z(9, dtype=np.float64)]),
]


@pytest.mark.parametrize("name, inputs, outputs", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
def test_the_check_refuses_what_the_kernel_refuses(name, inputs, outputs):
    for out in outputs:  # planned static tensors, as a method plans them
        for a in out if isinstance(out, list) else [out]:
            keep_size(a)
    why = refusal(get_argument_check(name), inputs, outputs)
    assert why is not None and why.startswith(("KernelError", "output"))
    with pytest.raises(KernelError):  # (the tiers' messages are the kernel's: see above)
        get_kernel(name).fn(*inputs, *outputs)


def test_a_static_planned_array_never_changes_size():
    static, bound = np.zeros((4, 1), _F), np.zeros((4, 1), _F)
    keep_size(static)
    with pytest.raises(KernelError, match=r"a result of shape \(4,\) does not fit the output"):
        fit(static, (4,))
    assert fit(static, (4, 1)) is static
    # a dynamic-bound tensor's storage still holds any result that fits it
    assert fit(bound, (4,)).shape == (4,) and fit(bound, (2, 1)).base is not None


def test_a_fused_run_never_stores_two_outputs_on_overlapping_bytes():
    """The campaign's open tier difference (ours_bool_ops with a round duplicated): two
    outputs the fused loop stored lay on overlapping bytes in different layouts, and a later
    element's store clobbered an earlier one's (3 and 6 of 20 bools differed from the numpy
    tier). Such a run is no longer fused whole; the tiers agree call after call."""
    from tests.reliability.harness import inputs_for  # noqa: PLC0415

    path = Path(__file__).parents[1] / "data/fuzz_regressions/tiers_bool_ops_duplicated_round.pte"
    data = path.read_bytes()
    plan = decode_pte(data).program.execution_plan[0]
    methods = [
        Runtime.get().load_program(data, jit=j).load_method("forward") for j in (False, True)
    ]
    assert methods[1].plan.fused_runs
    for seed in range(3):
        got = [
            [np.array(o) for o in m.execute(inputs_for(plan, np.random.default_rng(seed)))]
            for m in methods
        ]
        for a, b in zip(*got, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name, inputs, outputs", VALID_CASES, ids=[c[0] for c in VALID_CASES])
def test_the_check_gives_the_shapes_the_kernel_computes(name, inputs, outputs):
    """Outputs planned larger than the result (dynamic-bound storage): the kernel sizes its
    outputs as the check says, and the check accepts the arguments."""
    shapes = get_argument_check(name)(*inputs)
    got = get_kernel(name).fn(*inputs, *outputs)
    got = got if isinstance(got, tuple) else (got,)
    assert [tuple(s) for s in shapes] == [g.shape for g in got]
    assert refusal(get_argument_check(name), inputs, [None] * len(outputs)) is None


def test_every_compiled_form_has_an_argument_check_and_cases():
    """By construction: an operator with a compiled form has an argument check, which the
    runtime puts its arguments to at load (runtime.argument_checks), with cases above that
    it refuses and accepts as its numpy kernel does."""
    from pyexecutorch.kernels.registry import _COMPILED_FORMS  # noqa: PLC0415
    from pyexecutorch.runtime import tiers  # noqa: PLC0415

    tiers.load_compiled_forms()
    forms = set(_COMPILED_FORMS)
    assert len(forms) > 40  # (they were loaded)
    assert sorted(forms - set(checked_names())) == []
    tested = {c[0] for c in KERNEL_CASES} | {c[2] + "." for c in CASES}
    untested = [f for f in forms if f not in tested and not any(f.startswith(t) for t in tested)]
    assert sorted(untested) == []
