"""A program's weights in a ``.ptd`` beside it: the Module API reads a malformed data
file lazily, as the official ``Module`` does (its first method load fails, not the
load), while ``Runtime.load_program`` and the Program API check it at load."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.exir import ExecutorchBackendConfig, to_edge
from pyexecutorch.runtime import DataFileError, Runtime
from pyexecutorch.schema.errors import FormatError
from tests import official

BAD = b"invalid bytes"
BAD_MESSAGE = (
    "Failed to load method forward, error: 0x24: data file 0: not an ExecuTorch data file: "
    "file identifier b'lid ' at offset 4, expected b'FT01'"
)


@pytest.fixture(scope="module")
def linear():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).eval()
    ep = torch.export.export(model, (torch.randn(2, 4),))
    et = to_edge(ep).to_executorch(ExecutorchBackendConfig(external_constants=True))
    (data,) = et._tensor_data.values()
    return model, bytes(et.buffer), bytes(data)


def _inputs(seed: int) -> torch.Tensor:
    return torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))


def test_a_good_data_file_runs_over_several_calls(linear):
    model, pte, data = linear
    module = pl._load_for_executorch_from_buffer(pte, data)
    for seed in range(3):
        x = _inputs(seed)
        (got,) = module.forward((x,))
        np.testing.assert_allclose(np.asarray(got), model(x).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_a_malformed_data_file_fails_each_call_not_the_load(linear, tmp_path):
    _, pte, _ = linear
    bad_path = tmp_path / "bad.ptd"
    bad_path.write_bytes(BAD)
    pte_path = tmp_path / "m.pte"
    pte_path.write_bytes(pte)
    for module in (
        pl._load_for_executorch_from_buffer(pte, BAD),
        pl._load_for_executorch(pte_path, bad_path),
    ):
        assert module.method_names() == ["forward"]
        for seed in range(2):  # the error stays: nothing half-loaded runs
            with pytest.raises(RuntimeError) as info:
                module.forward((_inputs(seed),))
            assert str(info.value) == BAD_MESSAGE


def test_the_official_module_also_fails_at_the_call(linear):
    _, pte, _ = linear
    module = official._portable_lib()._load_for_executorch_from_buffer(pte, BAD)
    with pytest.raises(RuntimeError):
        module.forward((_inputs(0),))


def test_the_runtime_and_the_program_api_check_the_data_file_at_load(linear, tmp_path):
    _, pte, _ = linear
    with pytest.raises(DataFileError) as info:
        Runtime.get().load_program(pte, data_files=[BAD])
    assert isinstance(info.value, FormatError)
    assert str(info.value).startswith("data file 0: not an ExecuTorch data file")
    bad_path = tmp_path / "bad.ptd"
    bad_path.write_bytes(BAD)
    with pytest.raises(RuntimeError, match=r"^Failed to load program, error: 0x23: data file 0"):
        pl._load_program_from_buffer(pte, data_path=str(bad_path))
