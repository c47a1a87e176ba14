"""``llama::custom_sdpa`` bit for bit with the official kernel, on both tiers.

A sequence of calls over the same KV caches (prefills and decode steps at changing
positions, causal and not, grouped-query heads, head sizes that take each of Eigen's
special row panels, up to the official key block of 512) runs through the official
kernel in a subprocess that loads the official build's own BLAS first
(``tests/llm/_official_blas.py``), then through our numpy kernel and through our
compiled form, bound once per query shape and called with each position: every output
must be identical (``array_equal``, -0.0 and all).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyexecutorch.kernels.llm.attention import custom_sdpa_out
from pyexecutorch.kernels.registry import get_compiled_form
from tests.llm._official_blas import PREAMBLE

pytest.importorskip("executorch")

F32 = np.float32

# name -> (query heads, kv heads, head size, cache length, [(seq, start, causal), ...])
CASES = {
    "qwen2-tiny": (4, 2, 16, 64, [(5, 0, True)] + [(1, p, True) for p in range(5, 14)]
                   + [(6, 14, True), (3, 40, False), (33, 0, True), (1, 63, True)]),
    "split-dims": (2, 1, 20, 40, [(6, 0, True), (1, 6, True), (1, 7, True), (7, 9, False)]),
    "odd-dims": (2, 2, 18, 40, [(5, 0, True), (1, 5, True), (1, 6, True), (9, 20, True)]),
    "long": (8, 2, 64, 512, [(12, 100, True), (1, 300, True), (1, 500, True), (1, 511, True)]),
    "long-prefill": (8, 2, 64, 512, [(142, 0, True), (1, 142, True), (40, 143, True)]),
    "non-finite": (4, 2, 16, 64, [(8, 0, True), (6, 8, True), (1, 14, True), (9, 15, False)]),
}  # fmt: skip
# (case, "key" or "value", position, kv head, dim) -> value: an infinite or NaN value at a
# position a causal prefill masks for its first rows (0 * inf is NaN there), and a key
NON_FINITE = {
    ("non-finite", "value", 3, 0, 5): np.inf,
    ("non-finite", "value", 10, 1, 2): np.nan,
    ("non-finite", "value", 20, 1, 0): -np.inf,
    ("non-finite", "key", 12, 1, 7): np.inf,
}

OFFICIAL_SCRIPT = """
import sys
import numpy as np
import torch
import executorch.extension.llm.custom_ops.custom_ops
data = dict(np.load(sys.argv[1]))
out = {}
for name in sorted({key.split("/")[0] for key in data if key.endswith("/key")}):
    key, value = torch.from_numpy(data[name + "/key"]), torch.from_numpy(data[name + "/value"])
    for call in range(int(data[name + "/calls"])):
        q = torch.from_numpy(data[f"{name}/{call}/query"])
        start, causal = (int(x) for x in data[f"{name}/{call}/where"])
        result = torch.ops.llama.custom_sdpa(q, key, value, start, None, 0.0, bool(causal), None)
        out[f"{name}/{call}"] = result.numpy()
np.savez(sys.argv[2], **out)
"""


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(27)
    data: dict[str, np.ndarray] = {}
    for name, (hq, hkv, d, length, calls) in CASES.items():
        data[f"{name}/key"] = rng.standard_normal((1, length, hkv, d)).astype(F32)
        data[f"{name}/value"] = rng.standard_normal((1, length, hkv, d)).astype(F32)
        data[f"{name}/calls"] = np.array(len(calls))
        for (case, cache, position, head, dim), x in NON_FINITE.items():
            if case == name:
                data[f"{name}/{cache}"][0, position, head, dim] = x
        for call, (seq, start, causal) in enumerate(calls):
            data[f"{name}/{call}/query"] = rng.standard_normal((1, seq, hq, d)).astype(F32)
            data[f"{name}/{call}/where"] = np.array([start, causal])
    return data


@pytest.fixture(scope="module")
def official(tmp_path_factory) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(the inputs, the official kernel's outputs by ``case/call``)."""
    root: Path = tmp_path_factory.mktemp("custom_sdpa_official_order")
    data = _inputs()
    np.savez(root / "inputs.npz", **data)
    result = subprocess.run(
        [sys.executable, "-c", PREAMBLE + OFFICIAL_SCRIPT, root / "inputs.npz", root / "out.npz"],
        capture_output=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    return data, dict(np.load(root / "out.npz"))


def _calls(data: dict[str, np.ndarray], name: str):
    for call, (_seq, start, causal) in enumerate(CASES[name][4]):
        yield call, data[f"{name}/{call}/query"], start, causal


@pytest.mark.parametrize("name", list(CASES))
def test_numpy_kernel_is_the_official_kernel(official, name):
    data, want = official
    key, value = data[f"{name}/key"], data[f"{name}/value"]
    for call, query, start, causal in _calls(data, name):
        out = np.empty_like(query)
        custom_sdpa_out(query, key, value, start, None, 0.0, causal, None, out)
        np.testing.assert_array_equal(out, want[f"{name}/{call}"], err_msg=f"call {call}")


@pytest.mark.parametrize("name", list(CASES))
def test_compiled_form_is_the_official_kernel(official, name):
    """One form per query shape and causality, bound at its first call's arrays and then
    called at each position (the start position is read per call)."""
    pytest.importorskip("numba")
    import pyexecutorch.kernels.llm.compiled  # noqa: F401 - registers the forms

    data, want = official
    key, value = data[f"{name}/key"], data[f"{name}/value"]
    forms = {}
    for call, query, start, causal in _calls(data, name):
        shape = (query.shape, causal)
        if shape not in forms:
            query_slot, out = np.empty_like(query), np.empty_like(query)
            form = get_compiled_form("llama::custom_sdpa.out")(
                query_slot, key, value, 0, None, 0.0, causal, None, out,
                live_scalars=frozenset({3}),
            )  # fmt: skip
            assert form is not None, f"no compiled form for call {call}"
            forms[shape] = (form, query_slot, out)
        form, query_slot, out = forms[shape]
        query_slot[...] = query
        got = form(query_slot, key, value, start, None, 0.0, causal, None, out)
        np.testing.assert_array_equal(got, want[f"{name}/{call}"], err_msg=f"call {call}")
