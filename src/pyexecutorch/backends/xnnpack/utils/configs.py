"""The compile configurations an XNNPACK export uses, under the official
``backends.xnnpack.utils.configs`` path."""

from __future__ import annotations

from collections.abc import Sequence

from pyexecutorch.exir.config import EdgeCompileConfig, ExecutorchBackendConfig
from pyexecutorch.exir.pass_manager import PassType


def get_xnnpack_edge_compile_config(skip_dim_order: bool = False) -> EdgeCompileConfig:
    """``to_edge`` settings for XNNPACK: no Core ATen check (the partitioner keeps
    some operators whole), dim-order operators unless ``skip_dim_order``."""
    return EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=skip_dim_order)


def get_transform_passes(additional_passes: Sequence[PassType] | None = None) -> list[PassType]:
    """Edge passes to run before partitioning: ours need none of their own (the
    partitioner removes no-op copies itself), so only ``additional_passes``."""
    return list(additional_passes or ())


def get_xnnpack_executorch_backend_config(
    additional_passes: Sequence[PassType] | None = None,
) -> ExecutorchBackendConfig:
    """``to_executorch`` settings for XNNPACK: delegate payloads in their own segments."""
    return ExecutorchBackendConfig(
        passes=list(additional_passes or ()), extract_delegate_segments=True
    )


__all__ = [
    "get_transform_passes",
    "get_xnnpack_edge_compile_config",
    "get_xnnpack_executorch_backend_config",
]
