"""How rows become method calls: the batch size comes from the program.

A method whose inputs have a static leading dimension ``B`` takes exactly ``B`` rows a
call; a short last batch is padded (with copies of its last row) and the padding's
outputs are dropped. A method whose inputs are dynamic takes up to their bound
(``sizes()[0]`` of the input's upper-bound shape), and a short batch runs as it is.
Every tensor input's dimension 0 is the batch dimension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pyexecutorch.runtime.meta import Tag

# ScalarType codes of the tensors rows feed and outputs hold (the runtime's numbering).
DTYPES = {
    0: np.uint8,
    1: np.int8,
    2: np.int16,
    3: np.int32,
    4: np.int64,
    5: np.float16,
    6: np.float32,
    7: np.float64,
    11: np.bool_,
}


@dataclass(frozen=True)
class InputDecl:
    """One tensor input: its per-row shape (without the batch dimension) and dtype."""

    index: int
    row_shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class BatchPlan:
    """Rows per call (``size``), whether a short batch is padded, the inputs' facts."""

    method: str
    size: int
    padded: bool
    inputs: tuple[InputDecl, ...]

    def row_inputs(self, arrays: list[Any], where: str) -> list[np.ndarray]:
        """One row's input arrays, checked and cast to the method's dtypes."""
        if len(arrays) != len(self.inputs):
            raise ValueError(
                f"{where}: method '{self.method}' takes {len(self.inputs)} inputs, "
                f"but the row gives {len(arrays)}"
            )
        out = []
        for decl, value in zip(self.inputs, arrays, strict=True):
            a = np.asarray(value)
            if a.shape != decl.row_shape:
                raise ValueError(
                    f"{where}: input {decl.index} of '{self.method}' takes rows of shape "
                    f"{list(decl.row_shape)}, but the row has {list(a.shape)}"
                )
            if a.dtype != decl.dtype:
                if not np.can_cast(a.dtype, decl.dtype, casting="same_kind"):
                    raise TypeError(
                        f"{where}: input {decl.index} of '{self.method}' is {decl.dtype}, "
                        f"but the row holds {a.dtype}"
                    )
                a = a.astype(decl.dtype)
            out.append(a)
        return out

    def stack(self, rows: list[list[np.ndarray]]) -> list[np.ndarray]:
        """The method's inputs for up to ``size`` rows; a static batch padded to ``size``."""
        n = len(rows)
        if not 0 < n <= self.size:
            raise ValueError(f"a batch of '{self.method}' holds 1 to {self.size} rows, got {n}")
        total = self.size if self.padded else n
        stacked = []
        for i, decl in enumerate(self.inputs):
            batch = np.empty((total, *decl.row_shape), dtype=decl.dtype)
            for r, row in enumerate(rows):
                batch[r] = row[i]
            batch[n:] = rows[-1][i]  # padding: a real row, so no kernel sees odd values
            stacked.append(batch)
        return stacked


def _input_is_dynamic(program: Any, method: str, index: int) -> bool:
    plan = next(p for p in program.pte_file.program.execution_plan if p.name == method)
    value = plan.values[plan.inputs[index]].val
    return int(getattr(value, "shape_dynamism", 0)) != 0


def plan_batches(program: Any, method: str, requested: int | None = None) -> BatchPlan:
    """The batch plan of ``method``: its static batch, or ``requested`` rows up to its
    dynamic bound (the bound when nothing is requested)."""
    meta = program.metadata(method)
    decls, dynamic, batch = [], [], set()
    for i in range(meta.num_inputs()):
        if meta.input_tag(i) != Tag.Tensor:
            raise ValueError(
                f"input {i} of '{method}' is a {meta.input_tag(i)}: dataset rows feed "
                "tensor inputs only"
            )
        info = meta.input_tensor_meta(i)
        sizes = tuple(info.sizes())
        dtype = DTYPES.get(info.dtype())
        if not sizes or dtype is None:
            raise ValueError(
                f"input {i} of '{method}' ({info.dtype_name()} {list(sizes)}) has no batch "
                "dimension or a dtype no reader produces"
            )
        decls.append(InputDecl(i, sizes[1:], np.dtype(dtype)))
        dynamic.append(_input_is_dynamic(program, method, i))
        batch.add(sizes[0])
    if not decls:
        raise ValueError(f"method '{method}' takes no inputs: there is nothing to feed rows to")
    if len(batch) != 1 or len(set(dynamic)) != 1:
        raise ValueError(
            f"the inputs of '{method}' disagree on the batch dimension (sizes {sorted(batch)}, "
            f"dynamic {dynamic}): rows cannot be grouped"
        )
    bound = batch.pop()
    if requested is not None and requested < 1:
        raise ValueError(f"the batch size must be at least 1, got {requested}")
    if dynamic[0]:
        size = bound if requested is None else min(requested, bound)
        return BatchPlan(method, size, False, tuple(decls))
    if requested is not None and requested != bound:
        raise ValueError(
            f"method '{method}' has a static batch of {bound}; a batch size of {requested} "
            "needs a program exported with a dynamic batch dimension"
        )
    return BatchPlan(method, bound, True, tuple(decls))


def split_outputs(outputs: list[np.ndarray], n: int, total: int, method: str) -> list[np.ndarray]:
    """The first ``n`` rows of each output of a call that took ``total`` rows."""
    out = []
    for i, o in enumerate(outputs):
        if o.ndim == 0 or o.shape[0] != total:
            raise ValueError(
                f"output {i} of '{method}' has shape {list(o.shape)}: it has no batch "
                f"dimension of {total} rows to split"
            )
        out.append(o[:n])
    return out
