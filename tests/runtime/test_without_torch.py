"""The runtime side never imports torch: a program loads and runs with torch blocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

from tests import models, official


def test_runs_with_torch_blocked(tmp_path):
    case = models.CASES_BY_NAME["mlp"]
    pte = tmp_path / "mlp.pte"
    pte.write_bytes(official.official_export(case))
    (x,) = case.inputs()
    np.save(tmp_path / "x.npy", x.numpy())
    expected = official.eager_outputs(case, (x,))[0]
    np.save(tmp_path / "expected.npy", expected)
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None  # any import of torch now raises ImportError
        import numpy as np
        from pyexecutorch.runtime import Runtime
        import pyexecutorch.portable_lib
        program = Runtime.get().load_program({str(pte)!r})
        (out,) = program.load_method("forward").execute([np.load({str(tmp_path / "x.npy")!r})])
        assert isinstance(out, np.ndarray), type(out)
        np.testing.assert_allclose(out, np.load({str(tmp_path / "expected.npy")!r}), rtol=1e-4, atol=1e-5)
        assert not any(name == "torch" or name.startswith("torch.") for name, m in sys.modules.items() if m is not None)
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
