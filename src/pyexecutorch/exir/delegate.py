"""``executorch_call_delegate``, the higher-order operator a delegated graph calls,
under the official ``executorch.exir.delegate`` path (PyTorch defines it)."""

from torch._higher_order_ops.executorch_call_delegate import (
    executorch_call_delegate,
    get_lowered_module_name,
    is_lowered_module,
)

__all__ = ["executorch_call_delegate", "get_lowered_module_name", "is_lowered_module"]
