"""Official exports shared by the schema tests, made once per session.

``official`` maps a case name to an ``Exported``: the ``.pte`` (and ``.ptd``)
written by the official ``executorch`` package, the eager module, its example
inputs and the expected method and operator names. Files live in a
session-scoped temp directory.
"""

from __future__ import annotations

import logging
import signal
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass
class Exported:
    name: str
    pte: Path
    module: Any  # the eager module of "forward"
    inputs: dict[str, tuple]  # method -> example inputs
    operators: set[str]  # operator names the program must contain
    ptd: Path | None = None
    calls: int = 1  # >1: stateful, compare consecutive calls
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> bytes:
        return self.pte.read_bytes()


def _quiet() -> None:
    logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")


def _export_all(out: Path) -> dict[str, Exported]:
    _quiet()
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
    from torch import nn

    torch.manual_seed(0)

    class Accumulate(nn.Module):
        """A mutable buffer with a non-zero initial value, updated in forward."""

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("acc", torch.arange(3.0) + 1)

        def forward(self, x):
            self.acc.add_(x)
            return x * self.acc

    class Cat(nn.Module):
        def forward(self, x, y):
            return torch.cat([x * 2, y], 0)

    def save(name: str, et: Any) -> Path:
        path = out / f"{name}.pte"
        path.write_bytes(et.buffer)
        return path

    def plain(name: str, module: Any, inputs: tuple, operators: set[str], **kw: Any) -> Exported:
        module = module.eval()
        ep = torch.export.export(module, inputs)
        et = to_edge(ep).to_executorch(kw.pop("config", None))
        return Exported(name, save(name, et), module, {"forward": inputs}, operators, **kw)

    cases: dict[str, Exported] = {}

    def add(case: Exported) -> None:
        cases[case.name] = case

    add(plain("linear", nn.Linear(8, 5), (torch.randn(3, 8),), {"aten::addmm.out"}))
    add(
        plain(
            "conv",
            nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1)),
            (torch.randn(1, 3, 8, 8),),
            {"aten::convolution.out", "aten::relu.out"},
        )
    )
    add(
        plain(
            "transformer",
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            (torch.randn(1, 5, 16),),
            {
                "aten::native_layer_norm.out",
                "aten::bmm.out",
                "aten::_softmax.out",
                "aten::addmm.out",
            },
        )
    )
    add(
        plain(
            "mutable",
            Accumulate(),
            (torch.ones(3),),
            {"aten::add.out", "aten::mul.out", "aten::copy_"},
            calls=3,
            config=ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["acc"])]),
        )
    )

    # Two methods.
    fwd = nn.Linear(4, 4).eval()
    fwd_in = (torch.randn(2, 4),)
    other_in = (torch.randn(2, 3), torch.randn(1, 3))
    et = to_edge(
        {
            "forward": torch.export.export(fwd, fwd_in),
            "other": torch.export.export(Cat(), other_in),
        }
    ).to_executorch()
    add(
        Exported(
            "two_methods",
            save("two_methods", et),
            fwd,
            {"forward": fwd_in, "other": other_in},
            {"aten::addmm.out", "aten::cat.out"},
            extra={"other": Cat()},
        )
    )

    # External constants: the weights go to a .ptd next to the .pte.
    ext = nn.Linear(6, 3).eval()
    ext_in = (torch.randn(2, 6),)
    et = to_edge(torch.export.export(ext, ext_in)).to_executorch(
        ExecutorchBackendConfig(external_constants=True)
    )
    pte = save("external", et)
    ptd_dir = out / "external_ptd"
    ptd_dir.mkdir()
    et.write_tensor_data_to_file(str(ptd_dir))
    (ptd,) = ptd_dir.glob("*.ptd")
    add(Exported("external", pte, ext, {"forward": ext_in}, {"aten::addmm.out"}, ptd=ptd))

    # A delegate (XNNPACK): a delegate segment and named data in the .pte.
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    except ImportError:  # pragma: no cover - the official wheel ships it
        XnnpackPartitioner = None
    if XnnpackPartitioner is not None:
        xnn = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval()
        xnn_in = (torch.randn(2, 8),)
        et = to_edge_transform_and_lower(
            torch.export.export(xnn, xnn_in), partitioner=[XnnpackPartitioner()]
        ).to_executorch()
        add(Exported("xnnpack", save("xnnpack", et), xnn, {"forward": xnn_in}, set()))
    return cases


@pytest.fixture(scope="session")
def official(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Exported]:
    """Official exports of the schema test models, made once per session."""
    # The official package is a dev dependency: its absence is a failure, not a skip.
    import executorch.exir  # noqa: F401

    return _export_all(tmp_path_factory.mktemp("official_schema"))


@pytest.fixture(scope="session")
def official_runtime() -> Any:
    _quiet()
    from executorch.extension.pybindings import portable_lib

    return portable_lib


@contextmanager
def time_limit(seconds: float, what: str = "case") -> Iterator[None]:
    """Fail (instead of hanging) when the block takes longer than ``seconds``."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{what} took more than {seconds} s")

    previous: Callable[..., Any] | int | None = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def limit() -> Callable[..., Any]:
    return time_limit
