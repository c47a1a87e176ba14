"""TensorSpec: the fields the emitter reads."""

import torch

from pyexecutorch.exir.tensor_spec import TensorSpec, aligned, scalar_type_of_torch
from pyexecutorch.schema import ScalarType, TensorShapeDynamism


def test_from_tensor():
    t = torch.zeros(3, 5).t()
    s = TensorSpec.from_tensor(t)
    assert s.shape == (5, 3) and s.dim_order == (1, 0) and s.stride == (1, 5)
    assert s.nbytes() == 60 and s.allocated_memory == 64
    assert s.shape_dynamism == TensorShapeDynamism.STATIC and not s.const and s.storage is None
    assert s.mem_id is None and s.mem_offset is None and s.lifetime == [None, None]


def test_constant_keeps_contiguous_data():
    t = torch.arange(6.0).reshape(2, 3).t()
    s = TensorSpec.from_tensor(t, const=True)
    assert s.const and s.storage.is_contiguous() and torch.equal(s.storage, t)
    assert s.dim_order == (0, 1)


def test_helpers():
    assert aligned(1) == 16 and aligned(32) == 32
    assert scalar_type_of_torch(torch.float16) == ScalarType.HALF
    s = TensorSpec(torch.int64, (2, 3), shape_dynamism=TensorShapeDynamism.DYNAMIC_BOUND)
    assert s.is_upper_bound_tensor and s.scalar_type is torch.int64 and s.numel == 6
