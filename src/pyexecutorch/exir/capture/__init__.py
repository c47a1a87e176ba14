"""The official ``executorch.exir.capture`` path: the compile configurations, and
``patch_forward``. The legacy tracer (``capture``, ``CaptureConfig``, ``CallSpec``)
is deliberately absent; importing it raises an ImportError that says what to use."""

from typing import Any

from pyexecutorch.exir.capture._capture import patch_forward
from pyexecutorch.exir.capture._config import EdgeCompileConfig, ExecutorchBackendConfig

_NOT_PROVIDED = {
    name: (
        f"pyexecutorch.exir.capture.{name} is not provided: the legacy capture path is "
        "retired (deprecated in the official package too); export with "
        "torch.export.export(model, args) and lower with pyexecutorch.exir.to_edge"
    )
    for name in ("capture", "capture_multiple", "CaptureConfig", "CallSpec")
}


def __getattr__(name: str) -> Any:
    if name in _NOT_PROVIDED:
        raise ImportError(_NOT_PROVIDED[name], name=name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EdgeCompileConfig", "ExecutorchBackendConfig", "patch_forward"]
