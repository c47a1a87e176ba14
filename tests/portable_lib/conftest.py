"""Programs for the portable_lib tests: suite cases from ``tests/models.py`` and a few
small programs of our own, all made by the official exporter and cached on disk."""

from __future__ import annotations

import hashlib
import inspect
import os
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from pyexecutorch import portable_lib as pl
from tests import models, official

RECIPE_VERSION = 1


# ------------------------------------------------------------- our own programs


class Alias(nn.Module):
    """Output 0 is input 0 itself."""

    def forward(self, x, y):
        return x, x + y


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


class ZeroDim(nn.Module):
    """A 0-dim input and a 0-dim output."""

    def forward(self, s, v):
        w = v * s
        return w, w.sum()


class Dtypes(nn.Module):
    def forward(self, u8, i8, i16, f64, f16, b):
        return u8 + 1, i8 * 2, i16 - 3, f64 * 2, f16 + 1, torch.logical_not(b)


class Counter(nn.Module):
    """A mutable buffer, emitted with its name."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(2, 3))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 1.0


def _alias():
    return Alias(), (torch.rand(2, 3), torch.rand(2, 3)), {"alloc_graph_input": False}


def _conv_channels_last():
    return Conv().eval(), (torch.rand(1, 3, 8, 8).to(memory_format=torch.channels_last),), {}


def _zero_dim():
    return ZeroDim(), (torch.tensor(2.0), torch.rand(3)), {}


def _dtypes():
    g = torch.Generator().manual_seed(0)
    inputs = (
        torch.randint(0, 200, (2, 3), dtype=torch.uint8, generator=g),
        torch.randint(-50, 50, (2, 3), dtype=torch.int8, generator=g),
        torch.randint(-500, 500, (2, 3), dtype=torch.int16, generator=g),
        torch.rand(2, 3, dtype=torch.float64, generator=g),
        torch.rand(2, 3, generator=g).half(),
        torch.rand(2, 3, generator=g) > 0.5,
    )
    return Dtypes(), inputs, {}


def _counter():
    return Counter(), (torch.rand(2, 3),), {"mutable_buffer_names": True}


PROGRAMS = {
    "alias": _alias,
    "conv_channels_last": _conv_channels_last,
    "zero_dim": _zero_dim,
    "dtypes": _dtypes,
    "counter": _counter,
}


def _export(name: str) -> bytes:
    official.silence_noise()
    import executorch.exir as exir
    from executorch.exir.passes import MemoryPlanningPass

    module, inputs, flags = PROGRAMS[name]()
    config = {}
    if "alloc_graph_input" in flags:
        config["memory_planning_pass"] = MemoryPlanningPass(
            alloc_graph_input=flags["alloc_graph_input"]
        )
    if flags.get("mutable_buffer_names"):
        config["emit_mutable_buffer_names"] = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(module, inputs)
        return exir.to_edge(ep).to_executorch(exir.ExecutorchBackendConfig(**config)).buffer


def program_bytes(name: str) -> bytes:
    """The official export of one of ``PROGRAMS``, cached like the suite's exports."""
    h = hashlib.sha256()
    for part in (RECIPE_VERSION, name, torch.__version__, official.executorch_version()):
        h.update(repr(part).encode())
    h.update(inspect.getsource(PROGRAMS[name]).encode())
    for obj in (Alias, Conv, ZeroDim, Dtypes, Counter, _export):
        h.update(inspect.getsource(obj).encode())
    path = official.cache_dir() / f"portable_lib.{name}.{h.hexdigest()[:20]}.pte"
    if not path.exists():
        data = _export(name)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path.read_bytes()


def program_inputs(name: str) -> tuple:
    return PROGRAMS[name]()[1]


# ---------------------------------------------------------------------- fixtures


def case_bytes(name: str) -> bytes:
    return official.official_export(models.CASES_BY_NAME[name])


@pytest.fixture(scope="session")
def mlp_pte() -> bytes:
    return case_bytes("mlp")


@pytest.fixture
def mlp(mlp_pte):
    return pl._load_for_executorch_from_buffer(mlp_pte)


@pytest.fixture
def mlp_input() -> np.ndarray:
    return models.CASES_BY_NAME["mlp"].inputs()[0].numpy()


@pytest.fixture
def mlp_expected(mlp_input) -> np.ndarray:
    return official.eager_outputs(models.CASES_BY_NAME["mlp"], (torch.from_numpy(mlp_input),))[0]


@pytest.fixture
def numpy_outputs(monkeypatch):
    """Outputs as numpy arrays although torch is imported in the tests."""
    monkeypatch.setenv("PYEXECUTORCH_TENSOR_OUTPUT", "numpy")


def to_numpy(x) -> np.ndarray:
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


@pytest.fixture(scope="session")
def program():
    """``program(name)``: the bytes of one of ``PROGRAMS``."""
    return program_bytes


@pytest.fixture(scope="session")
def inputs_of():
    """``inputs_of(name)``: the example inputs of one of ``PROGRAMS``."""
    return program_inputs


@pytest.fixture(scope="session")
def case_pte():
    """``case_pte(name)``: the official export of a suite case."""
    return case_bytes
