"""Data loaders: programs (and .ptd files) read through FileDataLoader, MmapDataLoader,
BufferDataLoader or a user's own loader; segments are read when a method needs them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.exir import ExecutorchBackendConfig, to_edge
from pyexecutorch.runtime import (
    BufferDataLoader,
    DataLoader,
    FileDataLoader,
    MmapDataLoader,
    Runtime,
)
from pyexecutorch.schema.errors import FormatError
from pyexecutorch.schema.flat_tensor import encode_ptd
from pyexecutorch.schema.pte import ExtendedHeader, decode_pte


class _Two(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 32)
        self.b = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.b(self.a(x).relu())


def _model():
    torch.manual_seed(0)
    return _Two().eval(), torch.randn(2, 32)


class Recording:
    """A user loader: the protocol is just ``size`` and ``load(offset, size)``."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reads: list[tuple[int, int]] = []

    def size(self) -> int:
        return len(self.data)

    def load(self, offset: int, size: int) -> bytes:
        self.reads.append((offset, size))
        return self.data[offset : offset + size]


@pytest.fixture(scope="module")
def delegated():
    from pyexecutorch.backends.example.aot import ExamplePartitioner

    m, x = _model()
    et = to_edge(torch.export.export(m, (x,))).to_backend(ExamplePartitioner()).to_executorch()
    with torch.no_grad():
        return et.buffer, x, m(x).numpy()


def test_segments_are_read_when_a_method_loads(delegated):
    pte, x, expected = delegated
    loader = Recording(pte)
    assert isinstance(loader, DataLoader)
    program = Runtime.get().load_program(loader)
    tables = ExtendedHeader.read(memoryview(pte)).program_size
    assert all(off + n <= tables for off, n in loader.reads), loader.reads
    spans = decode_pte(pte).segment_map.spans
    assert spans, "the program has segments"
    assert not any(off >= tables for off, _ in loader.reads)
    method = program.load_method("forward")
    later = [r for r in loader.reads if r[0] >= tables]
    assert sorted(later) == sorted(s for s in spans if s[1])  # each segment it uses, once
    (got,) = method.execute([x.numpy()])
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6)
    program.load_method("forward")
    assert len(loader.reads) == len(later) + sum(1 for r in loader.reads if r[0] < tables)


@pytest.mark.parametrize("kind", ["file", "mmap", "buffer"])
def test_builtin_loaders(delegated, tmp_path, kind):
    pte, x, expected = delegated
    path = tmp_path / "m.pte"
    path.write_bytes(pte)
    loader = {
        "file": lambda: FileDataLoader(path),
        "mmap": lambda: MmapDataLoader(path),
        "buffer": lambda: BufferDataLoader(pte),
    }[kind]()
    assert loader.size() == len(pte)
    assert bytes(loader.load(4, 4)) == b"ET12"
    module = pl._load_for_executorch_from_data_loader(loader)
    (got,) = module.forward([x])
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6)


def test_external_data_through_loaders(tmp_path):
    m, x = _model()
    et = to_edge(torch.export.export(m, (x,))).to_executorch(
        ExecutorchBackendConfig(external_constants=True)
    )
    (ptd_file,) = et.data_files.values()
    ptd = encode_ptd(ptd_file)
    (tmp_path / "w.ptd").write_bytes(ptd)
    with torch.no_grad():
        expected = m(x).numpy()
    program = Runtime.get().load_program(Recording(et.buffer), data_files=[BufferDataLoader(ptd)])
    (got,) = program.load_method("forward").execute([x.numpy()])
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6)
    module = pl._load_for_executorch_from_data_loader(
        Recording(et.buffer), data_path=str(tmp_path / "w.ptd")
    )
    np.testing.assert_allclose(np.asarray(module.forward([x])[0]), expected, rtol=1e-5)


class _Short(Recording):
    def load(self, offset, size):
        return self.data[offset : offset + max(size - 1, 0)]


def test_bad_loaders(delegated):
    pte, _, _ = delegated
    with pytest.raises(FormatError, match=r"load\(0, 64\) returned 63 bytes"):
        Runtime.get().load_program(_Short(pte))

    class Negative(Recording):
        def size(self):
            return -1

    with pytest.raises(TypeError, match="size must be a non-negative int"):
        Runtime.get().load_program(Negative(pte))

    class NotBytes(Recording):
        def load(self, offset, size):
            return 42

    with pytest.raises(TypeError, match="load\\(\\) must return a bytes-like object"):
        Runtime.get().load_program(NotBytes(pte))
    with pytest.raises(TypeError, match="loader must be a data loader"):
        pl._load_for_executorch_from_data_loader(object())
    with pytest.raises(FileNotFoundError, match="file not found"):
        FileDataLoader("/nonexistent/m.pte")
