"""The compiled tier's machine code goes under ``$PYEXECUTORCH_CACHE_DIR`` also when the
caller imported numba before pyexecutorch (as pytest's ``importorskip("numba")`` does), and
a cache folder the caller chose stays chosen."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

_SCRIPT = textwrap.dedent(
    """
    import sys
    import numba
    if sys.argv[2] == "config":
        numba.config.CACHE_DIR = sys.argv[3]
    from pyexecutorch.jit import numba_env
    numba_env.numba_module()
    sys.path.insert(0, sys.argv[1])
    import cached_kernel  # decorated now, after pyexecutorch set the folder
    import numpy as np
    assert cached_kernel.twice(np.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
    print(numba.config.CACHE_DIR)
    """
)


def _run(tmp_path: Path, mode: str, chosen: str = "") -> str:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "cached_kernel.py").write_text(
        "import numba\n\n@numba.njit(cache=True)\ndef twice(x):\n    return x * 2\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYEXECUTORCH_CACHE_DIR"] = str(tmp_path / "ours")
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "src"), mode, chosen],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def _index_files(root: Path) -> list[Path]:
    return list(root.rglob("*.nbi")) if root.exists() else []


def test_numba_imported_first_still_caches_under_our_folder(tmp_path):
    folder = _run(tmp_path, "env")
    assert Path(folder).is_relative_to(tmp_path / "ours")
    assert _index_files(tmp_path / "ours"), "no cache index under $PYEXECUTORCH_CACHE_DIR"
    assert not _index_files(tmp_path / "src"), "cached beside the sources"


def test_a_cache_folder_chosen_in_numbas_config_is_kept(tmp_path):
    chosen = tmp_path / "theirs"
    assert _run(tmp_path, "config", str(chosen)) == str(chosen)
    assert _index_files(chosen)
    assert not _index_files(tmp_path / "ours")
