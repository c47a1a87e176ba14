"""Hand-built programs calling the example backend (numpy and the schema only)."""

from __future__ import annotations

import numpy as np

from pyexecutorch.backends.example.format import ALIGNMENT, pack, pad
from pyexecutorch.schema import (
    AllocationDetails,
    BackendDelegate,
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Chain,
    CompileSpec,
    ContainerMetadata,
    DataLocation,
    DelegateCall,
    EValue,
    ExecutionPlan,
    Instruction,
    Program,
    PteFile,
    ScalarType,
    Tensor,
    encode_pte,
)

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5
B = np.array([0.5, -1.0, 0.25, 0.0], dtype=np.float32)


def linear_relu_bytes(named_key: str | None = None) -> bytes:
    """``y = relu(x @ W.T + B)`` for ``x: [2, 3]`` in the example backend's format; ``W``
    as named data under ``named_key`` when given, else inline."""
    values = [
        {"dtype": "float32", "shape": [2, 3]},  # 0: x
        {"dtype": "float32", "shape": [4, 3]},  # 1: W
        {"dtype": "float32", "shape": [4]},  # 2: B
        {"dtype": "float32", "shape": [2, 4]},  # 3: linear
        {"dtype": "float32", "shape": [2, 4]},  # 4: relu
    ]
    blob = bytearray()
    constants = []
    if named_key is None:
        constants.append({"value": 1, "offset": 0, "nbytes": W.nbytes})
        blob += W.tobytes()
    else:
        constants.append({"value": 1, "key": named_key})
    blob += bytes(pad(len(blob)))
    constants.append({"value": 2, "offset": len(blob), "nbytes": B.nbytes})
    blob += B.tobytes()
    header = {
        "values": values,
        "inputs": [0],
        "outputs": [4],
        "constants": constants,
        "ops": [
            {"op": "linear", "args": [0, 1, 2], "out": 3},
            {"op": "relu", "args": [3], "out": 4},
        ],
    }
    return pack(header, bytes(blob))


def expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ W.T + B, 0)


def _tensor(sizes: list[int], offset: int) -> EValue:
    return EValue(
        Tensor(
            scalar_type=ScalarType.FLOAT,
            sizes=sizes,
            dim_order=list(range(len(sizes))),
            allocation_info=AllocationDetails.at(1, offset),
        )
    )


def delegate_program(
    processed: bytes,
    backend_id: str = "ExampleBackend",
    n_delegates: int = 1,
    named_data: dict | None = None,
) -> bytes:
    """A ``forward(x: f32[2, 3]) -> f32[2, 4]`` that calls the delegate ``n_delegates``
    times (each its own ``BackendDelegate`` entry) on the same input."""
    values = [_tensor([2, 3], 0)]
    instructions = []
    delegates = []
    outputs = []
    for d in range(n_delegates):
        values.append(_tensor([2, 4], 32 + 32 * d))
        outputs.append(len(values) - 1)
        delegates.append(
            BackendDelegate(
                id=backend_id,
                processed=BackendDelegateDataReference(DataLocation.INLINE, 0),
                compile_specs=[CompileSpec("note", b"hand-built")],
            )
        )
        instructions.append(Instruction(DelegateCall(delegate_index=d, args=[0, len(values) - 1])))
    plan = ExecutionPlan(
        name="forward",
        container_meta_type=ContainerMetadata("", ""),
        values=values,
        inputs=[0],
        outputs=outputs,
        chains=[Chain(inputs=[0], outputs=outputs, instructions=instructions)],
        operators=[],
        delegates=delegates,
        non_const_buffer_sizes=[0, 32 + 32 * n_delegates],
    )
    program = Program(
        version=0,
        execution_plan=[plan],
        constant_buffer=[],
        backend_delegate_data=[BackendDelegateInlineData(processed)],
        segments=[],
    )
    return encode_pte(PteFile(program=program, named_data=named_data or {}))


__all__ = ["ALIGNMENT", "B", "W", "delegate_program", "expected", "linear_relu_bytes"]
