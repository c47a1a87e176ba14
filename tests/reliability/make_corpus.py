"""Write the fuzz seed corpus: small programs of both exporters, with and without delegates.

Run from the repository root (needs torch and the official package)::

    PYTHONPATH=src:tests python -m tests.reliability.make_corpus

The files land in ``tests/data/fuzz_corpus/`` and are committed: the fuzz tests read
them without torch. Each ``.pte`` named ``<stem>.pte`` may have data files
``<stem>.<n>.ptd``; ``manifest.json`` lists them with what made them.
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "fuzz_corpus"
sys.path.insert(0, str(REPO / "tests"))

import models  # noqa: E402
import official  # noqa: E402

# Small suite cases: straight-line, several methods, mutable state, dynamic shapes,
# control flow (cond's jumps, a while loop), scalar inputs, integer and bool ops.
PORTABLE_CASES = (
    "mlp",
    "multi_method",
    "mutable_buffer",
    "dynamic_batch",
    "cond",
    "while_loop",
    "scalar_input",
    "int_arith",
    "bool_ops",
    "shape_ops",
    "indexing",
)
XNNPACK_CASES = ("mlp", "depthwise_conv")


def _ours(case: models.ModelCase, partitioner: list | None = None) -> bytes:
    from pyexecutorch.exir import to_edge, to_edge_transform_and_lower

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        programs = models.export(case)
        if partitioner:
            edge = to_edge_transform_and_lower(programs, partitioner=partitioner)
        else:
            edge = to_edge(programs, constant_methods=case.constant_methods or None)
        return edge.to_executorch().buffer


def _external(ours: bool) -> tuple[bytes, list[bytes]]:
    """A linear layer whose weights live in a .ptd file."""
    module = nn.Linear(6, 3).eval()
    torch.manual_seed(0)
    ep = torch.export.export(module, (torch.randn(2, 6),))
    with tempfile.TemporaryDirectory() as d:
        if ours:
            from pyexecutorch.exir import ExecutorchBackendConfig, to_edge
        else:
            from executorch.exir import ExecutorchBackendConfig, to_edge
        et = to_edge(ep).to_executorch(ExecutorchBackendConfig(external_constants=True))
        et.write_tensor_data_to_file(d)
        return et.buffer, [p.read_bytes() for p in sorted(Path(d).glob("*.ptd"))]


def main() -> None:
    CORPUS.mkdir(parents=True, exist_ok=True)
    for old in CORPUS.iterdir():
        old.unlink()
    manifest: dict[str, dict] = {}

    def save(stem: str, pte: bytes | None, source: str, ptds: list[bytes] = ()) -> None:
        if pte is None:
            print(f"skipped {stem}: export failed", file=sys.stderr)
            return
        (CORPUS / f"{stem}.pte").write_bytes(pte)
        names = []
        for n, blob in enumerate(ptds):
            names.append(f"{stem}.{n}.ptd")
            (CORPUS / names[-1]).write_bytes(blob)
        manifest[f"{stem}.pte"] = {"source": source, "data_files": names}
        print(f"{stem}: {len(pte)} bytes", file=sys.stderr)

    for name in PORTABLE_CASES:
        case = models.CASES_BY_NAME[name]
        save(f"ours_{name}", _ours(case), f"pyexecutorch exporter, suite case {name}")
        if case.official_exportable:
            save(
                f"official_{name}",
                official.official_export(case, use_cache=False),
                f"executorch 1.5.1 exporter, suite case {name}",
            )
    for name in XNNPACK_CASES:
        case = models.CASES_BY_NAME[name]
        save(
            f"official_xnnpack_{name}",
            official.official_export_xnnpack(case, use_cache=False),
            f"executorch 1.5.1 exporter with the XNNPACK partitioner, suite case {name}",
        )
    from pyexecutorch.backends.example.aot import ExamplePartitioner

    for name in ("mlp", "cond"):
        case = models.CASES_BY_NAME[name]
        save(
            f"ours_example_{name}",
            _ours(case, [ExamplePartitioner()]),
            f"pyexecutorch exporter with the example backend, suite case {name}",
        )
    for ours in (True, False):
        who = "ours" if ours else "official"
        pte, ptds = _external(ours)
        save(f"{who}_external", pte, f"{who} exporter, linear with external constants", ptds)
    (CORPUS / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
