"""Write the fuzz seed corpus: small programs of both exporters, with and without delegates.

Run from the repository root (needs torch and the official package)::

    PYTHONPATH=src python -m tests.reliability.make_corpus

The files land in ``tests/data/fuzz_corpus/`` and are committed: the fuzz tests read
them without torch. Each ``.pte`` named ``<stem>.pte`` may have data files
``<stem>.<n>.ptd``; ``manifest.json`` lists them with what made them.

Bundled programs (``.bpte``) and ETDump traces (``.etdp``, with an optional debug
buffer ``<stem>.debug.bin``) are made from those programs; ``devtools.json`` lists
them. ``--devtools`` writes only these, from the committed programs.
``--add-delegated`` adds (without rewriting the others) our exporter's XNNPACK
programs and both exporters' static-int8 programs, portable and XNNPACK-lowered. Every profile
event's timestamps are rewritten in place to fixed values, so the bytes are the
same on every run.
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
sys.path.insert(0, str(REPO))

from tests import models, official  # noqa: E402

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
    from pyexecutorch.exir import ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        programs = models.export(case)
        if partitioner:
            edge = to_edge_transform_and_lower(programs, partitioner=partitioner)
        else:
            edge = to_edge(programs, constant_methods=case.constant_methods or None)
        return edge.to_executorch(ExecutorchBackendConfig(**case.backend_options)).buffer


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


# Bundled seeds: (stem, program, serializer, test cases per method).
BUNDLED = (
    ("ours_mlp", "ours_mlp.pte", "ours", 2),
    ("ours_scalar_input", "ours_scalar_input.pte", "ours", 1),
    ("official_cond", "official_cond.pte", "official", 1),
)
# ETDump seeds: (stem, program, runtime, with a debug buffer).
ETDUMPS = (
    ("ours_mlp", "ours_mlp.pte", "ours", True),
    ("ours_cond", "ours_cond.pte", "ours", False),
    ("official_multi_method", "official_multi_method.pte", "official", True),
    ("official_xnnpack_mlp", "official_xnnpack_mlp.pte", "official", False),
)
DEBUG_BUFFER_SIZE = 8 << 10


def _test_inputs(pte: bytes, method: str, seed: int) -> list:
    """Inputs for ``method`` of ``pte`` at its declared shapes, drawn from ``seed``."""
    import numpy as np

    from pyexecutorch.runtime import Runtime
    from tests.reliability.harness import inputs_for

    program = Runtime.get().load_program(pte)
    plans = {p.name: p for p in program.pte_file.program.execution_plan}
    return inputs_for(plans[method], np.random.default_rng(seed))


def _bundled(pte: bytes, serializer: str, cases: int) -> bytes:
    """A bundled program of ``pte``: ``cases`` test cases per method, expected outputs from
    the runtime of the same side as the serializer."""
    from pyexecutorch.runtime import Runtime

    program = Runtime.get().load_program(pte)
    suites = {}
    for method in sorted(program.method_names):
        runs = []
        for c in range(cases):
            inputs = _test_inputs(pte, method, c)
            runs.append((inputs, list(program.load_method(method).execute(inputs))))
        suites[method] = runs
    if serializer == "ours":
        from pyexecutorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
        from pyexecutorch.devtools.bundled_program.core import BundledProgram
        from pyexecutorch.devtools.bundled_program.serialize import (
            serialize_from_bundled_program_to_flatbuffer,
        )

        return serialize_from_bundled_program_to_flatbuffer(
            BundledProgram(
                pte,
                [
                    MethodTestSuite(m, [MethodTestCase(i, o) for i, o in runs])
                    for m, runs in suites.items()
                ],
            )
        )
    from executorch.devtools import BundledProgram as OfficialBundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase as Case
    from executorch.devtools.bundled_program.config import MethodTestSuite as Suite
    from executorch.devtools.bundled_program.serialize import (
        serialize_from_bundled_program_to_flatbuffer as serialize,
    )

    def tensor(x):
        return x if isinstance(x, (torch.Tensor, int, float, bool)) else torch.from_numpy(x.copy())

    with tempfile.NamedTemporaryFile(suffix=".pte") as f:
        f.write(pte)
        f.flush()
        return serialize(
            OfficialBundledProgram(
                None,
                [
                    Suite(
                        m, [Case([tensor(x) for x in i], [tensor(y) for y in o]) for i, o in runs]
                    )
                    for m, runs in suites.items()
                ],
                pte_file_path=f.name,
            )
        )


def _fixed_times(etdump: bytes) -> bytes:
    """``etdump`` with every profile event's start and end times set to fixed values."""
    import struct

    from tests.reliability.mutations import etdump_fields

    out = bytearray(etdump)
    clock = 1000
    for f in etdump_fields(etdump):
        if f.path.endswith(".start_time") or f.path.endswith(".end_time"):
            clock += 250
            struct.pack_into(f.fmt, out, f.offset, clock)
    return bytes(out)


def _etdump(pte: bytes, runtime: str, debug: bool) -> tuple[bytes, bytes | None]:
    """The ETDump (and debug buffer) of two runs of every method of ``pte``."""
    size = DEBUG_BUFFER_SIZE if debug else 0
    with tempfile.TemporaryDirectory() as d:
        trace, buffer = Path(d) / "trace.etdp", Path(d) / "debug.bin"
        if runtime == "ours":
            from pyexecutorch.runtime import Runtime

            program = Runtime.get().load_program(pte, enable_etdump=True, debug_buffer_size=size)
            for method in sorted(program.method_names):
                for seed in range(2):
                    program.load_method(method).execute(_test_inputs(pte, method, seed))
            program.write_etdump_result_to_file(trace, buffer if debug else None)
        else:
            from executorch.extension.pybindings import portable_lib as official_pl

            module = official_pl._load_for_executorch_from_buffer(
                pte, enable_etdump=True, debug_buffer_size=size
            )
            for method in sorted(module.method_names()):
                for seed in range(2):
                    inputs = [
                        torch.from_numpy(x.copy()) if hasattr(x, "dtype") else x
                        for x in _test_inputs(pte, method, seed)
                    ]
                    module.run_method(method, inputs)
            module.write_etdump_result_to_file(str(trace), str(buffer) if debug else None)
        return _fixed_times(trace.read_bytes()), buffer.read_bytes() if debug else None


def write_devtools_seeds() -> None:
    """The bundled program and ETDump seeds, from the committed programs."""
    listing: dict[str, dict] = {"bundled": {}, "etdump": {}}
    for old in [*CORPUS.glob("*.bpte"), *CORPUS.glob("*.etdp"), *CORPUS.glob("*.debug.bin")]:
        old.unlink()
    for stem, program, serializer, cases in BUNDLED:
        data = _bundled((CORPUS / program).read_bytes(), serializer, cases)
        (CORPUS / f"{stem}.bpte").write_bytes(data)
        listing["bundled"][f"{stem}.bpte"] = {
            "source": f"{serializer} serializer, {program}, {cases} test case(s) per method"
        }
        print(f"{stem}.bpte: {len(data)} bytes", file=sys.stderr)
    for stem, program, runtime, debug in ETDUMPS:
        trace, buffer = _etdump((CORPUS / program).read_bytes(), runtime, debug)
        (CORPUS / f"{stem}.etdp").write_bytes(trace)
        entry = {"source": f"{runtime} runtime, {program}, two runs of each method"}
        entry["debug_buffer"] = None
        if buffer is not None:
            entry["debug_buffer"] = f"{stem}.debug.bin"
            (CORPUS / entry["debug_buffer"]).write_bytes(buffer)
        listing["etdump"][f"{stem}.etdp"] = entry
        print(
            f"{stem}.etdp: {len(trace)} bytes, debug buffer {buffer and len(buffer)}",
            file=sys.stderr,
        )
    (CORPUS / "devtools.json").write_text(json.dumps(listing, indent=1, sort_keys=True) + "\n")


def _quantized_seeds() -> dict[str, tuple[bytes, str]]:
    """Static int8 (per-channel weights) programs of a small CNN and MLP, quantized by the
    official XNNPACKQuantizer: both exporters, portable and XNNPACK-lowered."""
    import copy

    import executorch.exir  # noqa: F401 - before ours define the quantized operators
    import executorch.kernels.quantized  # noqa: F401

    from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackPartitioner,
    )
    from pyexecutorch.exir import to_edge, to_edge_transform_and_lower
    from tests.backends import _quantized_programs as qp

    out = {}
    for model in ("cnn", "mlp"):
        q = qp.quantize(model, "static")
        what = f"{model} quantized static int8 (official XNNPACKQuantizer)"
        for flavor in ("portable", "xnnpack"):
            pte = qp.official_pte(q, flavor)
            out[f"official_quant_{flavor}_{model}"] = (pte, f"executorch 1.5.1 exporter, {what}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lowered = to_edge_transform_and_lower(
                copy.deepcopy(q.program), partitioner=[XnnpackPartitioner()]
            )
            out[f"ours_quant_xnnpack_{model}"] = (
                lowered.to_executorch().buffer,
                f"pyexecutorch exporter with the XNNPACK partitioner, {what}",
            )
            out[f"ours_quant_portable_{model}"] = (
                to_edge(copy.deepcopy(q.program)).to_executorch().buffer,
                f"pyexecutorch exporter, {what}",
            )
    return out


def add_delegated_seeds() -> None:
    """Add our XNNPACK programs and the quantized ones to the committed corpus."""
    # The official package defines the quantized out variants (and refuses to once ours
    # exist): import it first.
    import executorch.exir  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401

    from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackPartitioner,
    )

    manifest = json.loads((CORPUS / "manifest.json").read_text())
    seeds = {
        f"ours_xnnpack_{name}": (
            _ours(models.CASES_BY_NAME[name], [XnnpackPartitioner()]),
            f"pyexecutorch exporter with the XNNPACK partitioner, suite case {name}",
        )
        for name in XNNPACK_CASES
    }
    seeds.update(_quantized_seeds())
    for stem, (pte, source) in seeds.items():
        (CORPUS / f"{stem}.pte").write_bytes(pte)
        manifest[f"{stem}.pte"] = {"source": source, "data_files": [], "campaign_only": True}
        print(f"{stem}: {len(pte)} bytes", file=sys.stderr)
    (CORPUS / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def main() -> None:
    if "--devtools" in sys.argv[1:]:
        write_devtools_seeds()
        return
    if "--add-delegated" in sys.argv[1:]:
        add_delegated_seeds()
        return
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
    write_devtools_seeds()


if __name__ == "__main__":
    main()
