"""Run a test in a pytest process of its own.

For tests of behaviour that depends on what else the process has imported: torch keeps
one registry of operators and of dialect verifiers per process, and once the official
package's ``executorch.exir`` is imported (other tests in the same worker do) its
dim-order operators and its ``EDGE`` verifier are the ones torch holds.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

_INSIDE = "PYEXECUTORCH_ISOLATED_TEST"


def in_own_process(test: Callable[..., Any]) -> Callable[..., Any]:
    """``test`` runs in a fresh ``python -m pytest`` of its own node id (its fixtures and
    parameters made there); the outer run passes when that run does."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        if os.environ.get(_INSIDE):
            return test(*args, **kwargs)
        node_id = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        result = subprocess.run(
            [*command, node_id],
            env={**os.environ, _INSIDE: "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        return None

    return run
