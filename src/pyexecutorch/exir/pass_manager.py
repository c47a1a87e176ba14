"""``PassManager``: runs a list of graph passes in order, as ``executorch.exir.pass_manager``.

A torch.fx ``PassManager`` whose passes may be given as nested lists; each pass
takes a ``GraphModule`` and returns a ``PassResult`` (or None, or the graph module).
``EdgeProgramManager.transform`` accepts one in place of a list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.fx.passes.infra.pass_base import PassResult
from torch.fx.passes.infra.pass_manager import PassManager as _FxPassManager
from torch.fx.passes.infra.pass_manager import pass_result_wrapper
from torch.utils import _pytree as pytree

PassType = Callable[..., PassResult | None]


class PassManager(_FxPassManager):
    def __init__(
        self,
        passes: Sequence[Any] | None = None,
        run_checks_after_each_pass: bool = False,
        suppress_check_failures: bool = False,
        steps: int = 1,
    ) -> None:
        flat = [pass_result_wrapper(p) for p in pytree.tree_flatten(list(passes or []))[0]]
        super().__init__(
            flat,
            run_checks_after_each_pass=run_checks_after_each_pass,
            suppress_check_failures=suppress_check_failures,
            steps=steps,
        )


__all__ = ["PassManager", "PassType"]
