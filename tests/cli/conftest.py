"""Fixtures of the command-line tests: real .pte files (made by the official exporter,
cached), a small model file to export, and ``cli(...)`` to run a command in-process."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pyexecutorch.cli.main import main
from tests import models, official

MODEL_FILE = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.fc = nn.Linear(16, 8)
        with torch.no_grad():
            self.fc.weight.copy_(torch.randn(8, 16, generator=g))
            self.fc.bias.copy_(torch.randn(8, generator=g))

    def forward(self, x):
        return torch.relu(self.fc(x))

    def double(self, x):
        return self.fc(x) * 2


def make():
    return Net()


def make_with_inputs():
    return Net(), (torch.randn(2, 16),)


def broken():
    raise RuntimeError("no weights here")


NOT_A_MODULE = 3
"""


@dataclass
class Result:
    rc: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run ``pyexecutorch ARGS`` in this process; its exit status and output."""

    def run(*args: str) -> Result:
        capsys.readouterr()
        rc = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(rc, captured.out, captured.err)

    return run


def run_blocked_torch(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``pyexecutorch ARGS`` in a subprocess in which importing torch fails."""
    code = (
        "import sys; sys.modules['torch'] = None; "
        "from pyexecutorch.cli.main import main; rc = main(sys.argv[1:]); "
        "assert 'torch' not in {m.split('.')[0] for m, v in sys.modules.items() if v is not None}; "
        "sys.exit(rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def ptes(tmp_path_factory) -> dict[str, Path]:
    """Official portable programs of a few suite models (and mlp with XNNPACK)."""
    d = tmp_path_factory.mktemp("ptes")
    out = {}
    for name in ("mlp", "multi_method", "scalar_input", "kv_cache"):
        path = d / f"{name}.pte"
        path.write_bytes(official.official_export(models.get_case(name)))
        out[name] = path
    xnn = official.official_export_xnnpack(models.get_case("mlp"))
    if xnn is not None:
        out["mlp_xnnpack"] = d / "mlp_xnnpack.pte"
        out["mlp_xnnpack"].write_bytes(xnn)
    return out


@pytest.fixture(scope="session")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "net.py"
    path.write_text(MODEL_FILE)
    return path
