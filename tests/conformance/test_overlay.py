"""The harness's overlay (scripts/conformance_overlay.py) serves copied official
helpers as ``pyexecutorch.*`` modules, and torch treats them as it treats the wheel's
originals: an ``ExportedProgram.module()`` made there carries no shape guards, so
the official XNNPACK tester can quantize at the example's size and re-export the
result with a dynamic batch."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import conformance_overlay  # noqa: E402

PROBE = "zz_overlay_probe"
PROBE_SOURCE = """
import torch


def captured(module, inputs):
    # the official harness's Quantize stage captures the same way
    return torch.export.export(module, inputs, strict=True).module()
"""


def test_a_served_module_gets_an_unguarded_module_that_re_exports_with_a_dynamic_batch(tmp_path):
    scratch = tmp_path / "ours"
    scratch.mkdir()
    (scratch / f"{PROBE}.py").write_text(PROBE_SOURCE)
    finder = conformance_overlay.OverlayFinder(conformance_overlay.package_named_root(scratch))
    sys.meta_path.insert(0, finder)
    try:
        probe = importlib.import_module(f"pyexecutorch.{PROBE}")
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop(f"pyexecutorch.{PROBE}", None)
    assert "pyexecutorch" in probe.__file__
    assert Path(probe.__file__).resolve() == (scratch / f"{PROBE}.py").resolve()

    linear = torch.nn.Linear(5, 3).eval()
    x = torch.randn(1, 4, 5)
    gm = probe.captured(linear, (x,))
    assert not hasattr(gm, "_guards_fn")
    batch = torch.export.Dim("batch", max=100)
    ep = torch.export.export(gm, (x,), dynamic_shapes=({1: batch},), strict=True)
    y = torch.randn(1, 9, 5)
    torch.testing.assert_close(ep.module()(y), linear(y))

    # a second call finds the link in place; a stale one is pointed back at the scratch
    assert conformance_overlay.package_named_root(scratch) == finder.root
    finder.root.unlink()
    finder.root.symlink_to(tmp_path, target_is_directory=True)
    assert conformance_overlay.package_named_root(scratch).resolve() == scratch.resolve()
