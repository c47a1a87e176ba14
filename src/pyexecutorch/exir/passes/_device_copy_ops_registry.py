"""The ``et_copy`` operators: copies between host and device memory at the boundary of
a delegate that runs on a device (inserted by
:class:`pyexecutorch.exir.passes.propagate_device_pass.PropagateDevicePass`).

When tracing, both sides are host tensors, so each is a clone. The official package
registers ``et_copy`` in torch's dispatcher; where it has, its operators are used, and
otherwise schema-only stand-ins with the same schemas (see
:mod:`pyexecutorch.exir.dialects.schema_only`).
"""

from __future__ import annotations

import torch
from torch._ops import OpOverload, OpOverloadPacket

from pyexecutorch.exir.dialects.schema_only import SchemaOnlyPacket, registered

NAMESPACE = "et_copy"


def _copy(self: torch.Tensor) -> torch.Tensor:
    return self.clone()


def _copy_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(self)


_OVERLOADS = {
    "default": ("(Tensor self) -> Tensor", _copy),
    "out": ("(Tensor self, *, Tensor(a!) out) -> Tensor(a!)", _copy_out),
}


def _packet(name: str) -> OpOverloadPacket:
    return registered(NAMESPACE, name) or SchemaOnlyPacket(
        NAMESPACE, name, _OVERLOADS, torch_names=True
    )


h2d_copy: OpOverloadPacket = _packet("_h2d_copy")
d2h_copy: OpOverloadPacket = _packet("_d2h_copy")
PACKETS: dict[str, OpOverloadPacket] = {"_h2d_copy": h2d_copy, "_d2h_copy": d2h_copy}
H2D_COPY: OpOverload = h2d_copy.default
D2H_COPY: OpOverload = d2h_copy.default

__all__ = ["D2H_COPY", "H2D_COPY", "NAMESPACE", "PACKETS", "d2h_copy", "h2d_copy"]
