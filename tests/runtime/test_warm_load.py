"""What a warm load of the compiled tier does not redo: a whole-method function read from its
record (keyed by what it was made from), lane sums generated without one substitution per
name, memory aliases looked up in an index, and an epilogue's convolution fast path made
only for a method that keeps its lines. Each against the behaviour it replaces."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import types
import warnings
from bisect import bisect_right
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

from pyexecutorch.exir import to_edge  # noqa: E402
from pyexecutorch.jit import (  # noqa: E402
    deferral,
    entry_points,
    function_records,
    generated,
    numba_env,
)
from pyexecutorch.runtime import Runtime, tiers  # noqa: E402
from pyexecutorch.runtime.dataflow import Flow  # noqa: E402
from pyexecutorch.runtime.fusion_reductions import _LANES, _summed_in_lanes  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")

# ----------------------------------------------------------------- function records

# A plain function of a generated module compiled by plain_entry_point (as a method compiled
# whole is); argv: the cache's use ("writable" or "readonly" input), and the scale.
RECORD_CHILD = """
import json, sys
import numpy as np
from pyexecutorch.jit import entry_points, generated
from pyexecutorch.runtime import tiers
tiers.enabled(True)
source = '''
def whole(a0, a1):
    for i in range(a0.size):
        a1[i] = a0[i] * SCALE + 1.0
    return -1
'''.replace("SCALE", sys.argv[2])
function = generated.GeneratedFunction(source, "test_record", "whole")
x = np.linspace(-2, 2, 7, dtype=np.float32)
if sys.argv[1] == "readonly":
    x.flags.writeable = False
out = np.zeros(7, np.float32)
entry = entry_points.plain_entry_point(function, (x, out))
assert entry(x, out) == -1
module = sys.modules.get(function.module_name)
print(json.dumps({
    "hits": entry_points.plain_stats["cache_hits"],
    "compilations": entry_points.plain_stats["compilations"],
    "imported": module is not None and getattr(module, "__spec__", None) is not None,
    "out": out.tolist(),
}))
"""


def _record_child(cache: Path, use: str = "writable", scale: str = "3.0") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    proc = subprocess.run(
        [sys.executable, "-c", RECORD_CHILD, use, scale],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": SRC, "PYEXECUTORCH_CACHE_DIR": str(cache)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _want(scale: float) -> list[float]:
    x = np.linspace(-2, 2, 7, dtype=np.float32)
    return (x * np.float32(scale) + np.float32(1.0)).tolist()


def test_a_record_is_read_back_without_importing_the_module_or_compiling(tmp_path):
    cold = _record_child(tmp_path)
    assert cold["compilations"] == 1 and cold["hits"] == 0 and cold["imported"]
    records = list((tmp_path / "functions").glob("test_record_*.whole.*.nbr"))
    assert len(records) == 1
    warm = _record_child(tmp_path)
    assert warm["compilations"] == 0 and warm["hits"] == 1
    assert not warm["imported"]  # the machine code alone: no module, no dispatcher
    assert warm["out"] == cold["out"] == _want(3.0)


def test_a_record_is_kept_per_source_and_argument_types(tmp_path):
    _record_child(tmp_path)
    # a read-only input is another numba type: its own record, compiled once
    readonly = _record_child(tmp_path, "readonly")
    assert readonly["compilations"] == 1 and readonly["out"] == _want(3.0)
    assert len(list((tmp_path / "functions").glob("*.nbr"))) == 2
    assert _record_child(tmp_path, "readonly")["hits"] == 1
    # another source (a changed generator, or build key) never reads the first's code
    other = _record_child(tmp_path, scale="0.5")
    assert other["compilations"] == 1 and other["hits"] == 0
    assert other["out"] == _want(0.5)
    assert len(list((tmp_path / "functions").glob("*.nbr"))) == 3


def test_an_unreadable_record_is_compiled_again_and_rewritten(tmp_path):
    _record_child(tmp_path)
    (record,) = (tmp_path / "functions").glob("*.nbr")
    record.write_bytes(b"not a record")
    again = _record_child(tmp_path)
    assert again["compilations"] == 1 and again["out"] == _want(3.0)
    assert _record_child(tmp_path)["hits"] == 1


DYNAMIC_SOURCE = """
import ctypes

_labs = ctypes.CDLL(None).labs
_labs.restype = ctypes.c_long
_labs.argtypes = [ctypes.c_long]


def whole(a0):
    a0[0] = _labs(-7)
    return -1
"""


def test_a_function_holding_this_process_addresses_is_not_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv(numba_env.CACHE_ENV, str(tmp_path))
    tiers.enabled(True)
    function = generated.GeneratedFunction(DYNAMIC_SOURCE, "test_dynamic", "whole")
    out = np.zeros(1, np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entry = entry_points.plain_entry_point(function, (out,))
    assert entry(out) == -1 and out[0] == 7
    # (a ctypes function's address is this process's: numba would not cache it either)
    assert not list(tmp_path.rglob("*.nbr"))


# A loop of a generated module read through its dispatcher (as a method that keeps its lines
# reads its fused loops and compiled forms), with a scalar argument.
LOOP_CHILD = """
import json, sys
import numpy as np
from pyexecutorch.jit import entry_points, generated
from pyexecutorch.runtime import tiers
tiers.enabled(True)
loop = generated.generated_module('''
from numba import njit


@njit(cache=True)
def scale(x, out, by):
    for i in range(x.size):
        out[i] = x[i] * by - 1.0
''', "test_loop")
x, out = np.linspace(-2, 2, 9), np.empty(9)
entry_points.entry_point(loop.scale, (x, out, 2.5))(x, out, 2.5)
print(json.dumps({
    "hits": sum(loop.scale.stats.cache_hits.values()),
    "misses": sum(loop.scale.stats.cache_misses.values()),
    "out": out.tolist(),
}))
"""


def test_a_dispatcher_loop_is_read_from_its_record(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(PYTHONPATH=SRC, PYEXECUTORCH_CACHE_DIR=str(tmp_path))

    def child() -> dict:
        proc = subprocess.run(
            [sys.executable, "-c", LOOP_CHILD], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    cold = child()
    assert cold["misses"] == 1 and cold["hits"] == 0
    assert len(list((tmp_path / "functions").glob("test_loop_*.scale.*.nbr"))) == 1
    # numba's own cache gone: the record alone serves the second process
    shutil.rmtree(tmp_path / "numba")
    warm = child()
    assert warm["hits"] == 1 and warm["misses"] == 0
    want = (np.linspace(-2, 2, 9) * 2.5 - 1.0).tolist()
    assert warm["out"] == cold["out"] == want


def test_a_dispatcher_record_is_keyed_by_its_source_file_and_options(tmp_path, monkeypatch):
    import importlib.util  # noqa: PLC0415

    import numba  # noqa: PLC0415

    monkeypatch.setenv(numba_env.CACHE_ENV, str(tmp_path / "cache"))
    source = tmp_path / "compiled_form.py"
    source.write_text("def scale(x, out):\n    out[:] = x * 2.0\n")
    spec = importlib.util.spec_from_file_location("test_record_form", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    types_ = function_records.types_key((np.zeros(3), np.zeros(3)))
    serial = numba.njit(cache=True)(module.scale)
    first = function_records.dispatcher_path(serial, types_)
    assert first is not None and function_records.dispatcher_path(serial, types_) == first
    # other compile options: another record
    options = numba.njit(cache=True, error_model="numpy")(module.scale)
    assert function_records.dispatcher_path(options, types_) != first
    # other argument types: another record
    assert function_records.dispatcher_path(serial, types_.replace("<f8", "<f4")) != first
    # its source file changed (a later stamp): another record, as numba's index would
    stamp = source.stat()
    os.utime(source, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 10**9))
    assert function_records.dispatcher_path(serial, types_) != first
    # a function numba does not cache has no record
    assert function_records.dispatcher_path(numba.njit(module.scale), types_) is None


def test_the_types_key_tells_apart_every_numba_type():
    import numba  # noqa: PLC0415

    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    readonly = base.copy()
    readonly.flags.writeable = False
    arrays = [
        base,
        base.T,  # F
        base[:, ::2],  # A
        base.reshape(-1),
        base.reshape(-1)[::2],
        base.reshape(2, 3, 4),
        base.astype(np.float64),
        base.astype(np.int64),
        base > 3,
        readonly,
        np.asfortranarray(base),
        np.zeros((1, 5), np.float32),  # both C and F contiguous: numba says C
        np.zeros((), np.float32),
    ]
    for a in arrays:
        for b in arrays:
            same_key = function_records.types_key((a,)) == function_records.types_key((b,))
            assert same_key == (numba.typeof(a) == numba.typeof(b)), (a.shape, b.shape)
    # scalars: one key, one numba type (some numba types have two keys: True, np.True_)
    scalars = [1, -(2**40), True, 1.5, np.float32(1), np.float64(1), np.int64(3), np.int32(3)]
    scalars += [np.bool_(True), np.uint8(1), *arrays[:3]]
    for a in scalars:
        for b in scalars:
            if function_records.types_key((a,)) == function_records.types_key((b,)):
                assert numba.typeof(a) == numba.typeof(b), (a, b)
    assert function_records.types_key((2**63,)) is None  # numba types it uint64
    assert function_records.types_key(("text",)) is None
    # a subclass is not typed from its flags here
    assert function_records.types_key((base.view(_Subclass),)) is None


class _Subclass(np.ndarray):
    pass


class HalfChain(nn.Module):
    """float16 loops around a transposing copy: a method compiled whole."""

    def forward(self, x):
        y = (x * 2.0 + 1.0).transpose(0, 1).contiguous()
        return torch.softmax(y, dim=-1) * 3.0


def test_a_float16_copy_is_a_step_of_a_whole_method(tmp_path, monkeypatch):
    # (numba has no float16: the copy moves the values' bits; it failed the load before)
    monkeypatch.setenv(numba_env.CACHE_ENV, str(tmp_path))
    x = torch.randn(4, 24, generator=torch.Generator().manual_seed(0)).to(torch.float16)
    model = HalfChain().eval()
    method = Runtime.get().load_program(_program(model, x), jit=True).load_method("forward")
    assert method.plan.whole_source is not None
    got = method.execute([x.numpy()])[0]
    want = Runtime.get().load_program(_program(model, x), jit=False).load_method("forward")
    # (the compiled softmax sums in float64: within a float16 rounding of numpy's)
    want = want.execute([x.numpy()])[0]
    got, want = (np.asarray(a, dtype=np.float32) for a in (got, want))
    np.testing.assert_allclose(got, want, rtol=2e-3)


# ----------------------------------------------------------------- lane sums


def _lanes_by_substitution(last, loops, body, folded, indent):  # noqa: ANN001, ANN202
    """The lane sums as they were generated before: one re.sub per name, line and lane."""
    inner = indent + "    " * len(loops)
    block = inner[:-4]
    defined = [m.group(1) for line in body if (m := re.match(r"\s*(\w+) = ", line))]
    out = [f"{indent}{r}_{lane} = 0.0" for r in folded for lane in range(_LANES)]
    out += loops[:-1]
    out.append(f"{block}for b{last} in range(0, n{last} - n{last} % {_LANES}, {_LANES}):")
    for lane in range(_LANES):

        def renamed(text: str, lane: int = lane) -> str:
            for name in defined:
                text = re.sub(rf"\b{name}\b", f"{name}_{lane}", text)
            return text

        out.append(f"{inner}i{last} = b{last} + {lane}")
        out += [renamed(line) for line in body]
        out += [f"{inner}{r}_{lane} += {renamed(x)}" for r, x in folded.items()]
    out.append(f"{block}for i{last} in range(n{last} - n{last} % {_LANES}, n{last}):")
    out += body
    out += [f"{inner}{r} += {x}" for r, x in folded.items()]
    for r in folded:
        partial = [f"{r}_{lane}" for lane in range(_LANES)]
        while len(partial) > 1:
            partial = [f"({a} + {b})" for a, b in zip(partial[::2], partial[1::2], strict=True)]
        out.append(f"{indent}{r} += {partial[0]}")
    return out


@pytest.mark.parametrize(
    "body, folded",
    [
        (["            t1 = C(in0[i0, i1])", "            t10 = C(t1 * t1)"], {"t3": "t10"}),
        (
            [
                "            t2 = C(in0[i0, i1] - t1)",
                "            t4 = C(t2 * t2 + in1[i1])",
                "            t12 = C(t4 * t2 + t41)",  # t41: not defined here, kept
            ],
            {"t5": "t4", "t13": "(t12 + t2)"},
        ),
        ([], {"t7": "in0[i0, i1]"}),  # nothing defined: a load folded directly
        (["            t1 = C({2: in0[i0, i1] % 3}[2])"], {"t2": "t1"}),  # braces, a modulo
    ],
)
def test_lane_sums_are_the_source_the_substitutions_made(body, folded):
    loops = ["        for i1 in range(n1):"]
    args = (1, loops, body, folded, "        ")
    assert _summed_in_lanes(*args) == _lanes_by_substitution(*args)


# ----------------------------------------------------------------- aliases


def _aliases_by_scan(flow: Flow, pc: int, j: int) -> list[int]:
    """Flow.aliases_reading as it was: every value's range and every write between scanned."""
    region = flow.bounds.get(j)
    if region is None:
        return []
    lo, hi = region
    found = []
    covering = flow._covering_writes()
    for i, (a, b) in flow.bounds.items():
        if i == j or b <= lo or a >= hi:
            continue
        reads = flow.read_at.get(i)
        if not reads:
            continue
        at = bisect_right(reads, pc)
        if at == len(reads):
            continue
        if not any(c <= a and b <= d for q in range(pc + 1, reads[at]) for c, d in covering[q]):
            found.append(i)
    return found


class Block(nn.Module):
    """A small transformer block: memory the planner reuses many times over."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.qkv = nn.Linear(16, 48)
        self.out = nn.Linear(16, 16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v
        x = x + self.out(a)
        return x + self.mlp(self.norm(x)).reshape(x.shape)


def _program(model: nn.Module, example: torch.Tensor) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_edge(torch.export.export(model.eval(), (example,))).to_executorch().buffer


def test_aliases_found_through_the_index_are_those_a_scan_finds():
    pte = _program(Block(), torch.randn(2, 8, 16))
    method = Runtime.get().load_program(pte, jit=False).load_method("forward")
    flow = Flow.of(method._loaded.facts)
    found = 0
    for pc in range(len(flow.instructions)):
        for j in flow.bounds:
            want = _aliases_by_scan(flow, pc, j)
            assert flow.aliases_reading(pc, j) == want, (pc, j)
            found += bool(want)
    assert found  # the planner shares memory here: the comparison covers real aliases


# ----------------------------------------------------------------- epilogues


class ConvThenUnfused(nn.Module):
    """Convolutions with epilogues (one into the run's output, one over a skip tensor's
    memory) and one without (its output read twice by one call), then atan, which has no
    compiled step, or not: the method keeps one line per call, or compiles whole."""

    def __init__(self, whole: bool) -> None:
        super().__init__()
        self.a = nn.Conv2d(4, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=1)
        self.c = nn.Conv2d(8, 4, 1)
        self.whole = whole

    def forward(self, x):
        h = torch.relu(self.a(x))
        z = self.c(torch.relu(self.b(h) + h) * 2.0)
        y = z * z
        return y if self.whole else torch.atan(y)


def _closure_values(functions) -> list:  # noqa: ANN001
    held, stack, seen = [], [f for f in functions if isinstance(f, types.FunctionType)], set()
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        for cell in f.__closure__ or ():
            held.append(cell.cell_contents)
            if isinstance(cell.cell_contents, types.FunctionType):
                stack.append(cell.cell_contents)
    return held


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "lines"])
def test_convolution_fast_paths_are_made_only_for_lines(whole, monkeypatch):
    from pyexecutorch.kernels.registry import get_specializer  # noqa: PLC0415
    from pyexecutorch.runtime.fast_paths import FastPaths  # noqa: PLC0415

    numpy_convolution = get_specializer("aten::convolution.out")
    specialized, made = [], []
    original_specialized, original_fast_path = FastPaths.specialized, FastPaths._fast_path

    def counting_specialized(self, k, args, written, read):  # noqa: ANN001, ANN202
        specialized.append(k.name)
        return original_specialized(self, k, args, written, read)

    def counting_fast_path(self, candidates, *rest):  # noqa: ANN001, ANN202
        made.extend(c for c in candidates if c is numpy_convolution)
        return original_fast_path(self, candidates, *rest)

    monkeypatch.setattr(FastPaths, "specialized", counting_specialized)
    monkeypatch.setattr(FastPaths, "_fast_path", counting_fast_path)
    torch.manual_seed(0)
    model = ConvThenUnfused(whole).eval()
    pte = _program(model, torch.randn(1, 4, 6, 6))
    method = Runtime.get().load_program(pte, jit=True).load_method("forward")
    plan = method.plan
    assert len(plan.conv_epilogues) == 2
    assert plan.whole == whole
    # each convolution asked once, and again on its epilogue's arrays only for a line; a
    # method of lines first tried its activations channels-last (runtime.layout), which
    # asked each convolution once more and made no numpy fast path
    assert bool(plan.channels_last) == whole
    assert specialized.count("aten::convolution.out") == (3 if whole else 3 + 5)
    # numpy fast paths: none inside a whole-method function; for lines, the three called
    assert len(made) == (0 if whole else 3)
    if not whole:
        bound = list(method._loaded.chains[0].run.__globals__.values())
        held = bound + _closure_values(bound)
        assert not any(isinstance(h, deferral.PendingEntryPoint) for h in held)
    for scale in (1.0, 3.0):
        x = torch.randn(1, 4, 6, 6) * scale
        got = method.execute([x.numpy()])[0]
        np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


class Volume(nn.Module):
    """A 3-D convolution (no fast path takes it: its reference kernel runs), without an
    epilogue (its output read twice by one call)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(2, 3, 3, padding=1)

    def forward(self, x):
        z = self.conv(x)
        return z * z


def test_a_convolution_without_fast_path_runs_its_kernel_into_its_planned_output():
    torch.manual_seed(0)
    model = Volume().eval()
    pte = _program(model, torch.randn(1, 2, 4, 5, 5))
    method = Runtime.get().load_program(pte, jit=True).load_method("forward")
    for scale in (1.0, 3.0):
        x = torch.randn(1, 2, 4, 5, 5) * scale
        got = method.execute([x.numpy()])[0]
        np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
