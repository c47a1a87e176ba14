"""pyexecutorch.export: the official one-call export over exir's stages."""

from __future__ import annotations

import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.export import ExportRecipe, StageType, export


class Net(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + 1


def test_export_runs_the_recipe_stages_and_the_program_matches_eager(tmp_path):
    x = torch.randn(2, 3)
    recipe = ExportRecipe(
        pipeline_stages=[StageType.TORCH_EXPORT, StageType.TO_EDGE, StageType.TO_EXECUTORCH]
    )
    session = export(Net(), [(x,)], recipe, artifact_dir=str(tmp_path), generate_etrecord=True)
    assert list(session.get_stage_artifacts()) == recipe.pipeline_stages
    module = pl._load_for_executorch_from_buffer(session.get_pte_buffer())
    for _ in range(3):  # the loaded method, over changing inputs
        x = torch.randn(2, 3)
        torch.testing.assert_close(module.forward((x,))[0], Net()(x))
    record = session.get_etrecord()
    assert record._debug_handle_map == session.get_executorch_program_manager().debug_handle_map
    path = session.save_to_pte("net")
    assert path == str(tmp_path / "net.pte") and (tmp_path / "net.pte").stat().st_size > 0


def test_export_refuses_what_it_does_not_provide():
    with pytest.raises(ValueError, match="quantize the model first"):
        export(Net(), [(torch.randn(2),)], ExportRecipe(pipeline_stages=[StageType.QUANTIZE]))
    with pytest.raises(ValueError, match="a pipeline has one of"):
        export(Net(), [(torch.randn(2),)], ExportRecipe(pipeline_stages=[StageType.TORCH_EXPORT]))
    with pytest.raises(RuntimeError, match="ETRecord was not generated"):
        export(Net(), [(torch.randn(2),)]).get_etrecord()
