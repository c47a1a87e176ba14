"""Helpers around the official ``executorch`` package: the oracle that the compiler,
runtime and benchmark tests compare pyexecutorch against.

Imported only by tests and benchmarks. The official package is imported lazily (it
takes seconds), so ``eager_outputs`` / ``assert_close`` are cheap to use on their own.

- ``official_export(case)``: ``.pte`` bytes from the official exporter (portable
  kernels, no delegate), cached on disk; ``official_export_xnnpack(case)`` the same
  with the XNNPACK partitioner, or None where that fails.
- ``OfficialRunner(pte)`` / ``official_run(pte, inputs)``: the official runtime.
- ``official_arena_sizes(pte)``: the planned ``non_const_buffer_sizes`` of a method.
- ``eager_outputs(case, inputs)`` / ``eager_call_outputs(case)``: torch eager results,
  flattened to numpy; ``assert_close(case, got, expected)`` compares with the case's
  tolerances.

Cache: ``$PYEXECUTORCH_TEST_CACHE`` or ``<repo>/.cache/official``; one file per case
and flavour, keyed by a hash of the case (module sources, weights, inputs, dynamic
shapes, constant methods), the torch, executorch and torchao versions and
``RECIPE_VERSION``. ``cached_file`` is the one way in: the suite's other caches of
official results (quantizations, lowered programs) use it too, and a worker that needs
an entry another worker is making waits for it instead of making it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import logging
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten

from tests import models
from tests.build_log import cache_dir, log_build
from tests.models import ModelCase

# Bump when the export recipe below changes.
RECIPE_VERSION = 1


# --------------------------------------------------------------------------------------
# Quiet imports of the official package


def silence_noise() -> None:
    """Mute the warnings that importing executorch/torchao prints on every run."""
    logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*is an Enum subclass.*")


def load_official_quantized_kernels() -> None:
    """Load the official package's quantized kernels (its C++ library) into torch.

    Our exporter defines the ``quantized_decomposed`` out variants it needs when they are
    missing; the official C++ library, loaded after that, finds them defined and aborts
    the process. So a test process loads it first: this module is imported while pytest
    collects, before any test exports anything (a test module importing it later took a
    worker down). It imports no ``executorch.exir``, whose dialect registry would then
    come before ours."""
    with contextlib.suppress(ImportError):
        import executorch.kernels.quantized  # noqa: F401


load_official_quantized_kernels()


def _exir():
    silence_noise()
    import executorch.exir as exir

    return exir


def _portable_lib():
    silence_noise()
    from executorch.extension.pybindings import portable_lib

    return portable_lib


def executorch_version() -> str:
    from importlib.metadata import version

    return version("executorch")


def versions() -> str:
    """The package versions every cached official result depends on."""
    from importlib.metadata import version

    return (
        f"torch {torch.__version__}|executorch {executorch_version()}|torchao {version('torchao')}"
    )


def _share_node_source(self, memo):  # noqa: ANN001, ANN202 - the __deepcopy__ protocol
    return self


@contextlib.contextmanager
def shared_provenance() -> Iterator[None]:
    """Inside: torch's node provenance records (``NodeSource``) are shared, not deep-copied.

    Every node an FX pass makes deep-copies its origin's chain of ``NodeSource`` records, and
    the chains grow with each pass. Sharing them saved about 4% of the official exporter's
    CPU on four architectures' XNNPACK exports (52.7 s -> 50.7 s, separate processes; less
    than the noise on small portable programs). A record is never changed once made (its
    fields are set in its constructor; equality compares values), so sharing it gives the
    same graphs and the same ``.pte`` bytes (test_official_oracle checks). Used only around
    the official tools' work: our exporter, under test, runs with torch as it is.
    """
    from torch.fx.traceback import NodeSource

    before = NodeSource.__dict__.get("__deepcopy__")
    NodeSource.__deepcopy__ = _share_node_source
    try:
        yield
    finally:
        if before is None:
            del NodeSource.__deepcopy__
        else:
            NodeSource.__deepcopy__ = before


# --------------------------------------------------------------------------------------
# Export


def mutated_buffers(programs: dict[str, torch.export.ExportedProgram]) -> list[str]:
    """Names of the buffers that any of ``programs`` mutates (known only once the
    programs are functional: after ``run_decompositions`` / ``to_edge``)."""
    names = set()
    for ep in programs.values():
        names.update(ep.graph_signature.buffers_to_mutate.values())
    return sorted(names)


def edge_compile_config(verify: bool = False):  # noqa: ANN201 - the official class
    """The official ``EdgeCompileConfig`` of the suite's official builds: the exporter's own
    IR checks off unless ``verify``.

    The checks verify the whole graph again (operator sets, and dtypes by a fake-tensor run)
    each time a pass makes a new program; they change nothing, so the program is the same
    byte for byte (test_official_oracle checks), for about a fifth less CPU (a quantized
    SqueezeNet's XNNPACK program: 16.4 -> 12.8 s)."""
    from executorch.exir import EdgeCompileConfig

    return EdgeCompileConfig(_check_ir_validity=verify)


def export_programs(
    programs: dict[str, torch.export.ExportedProgram],
    constant_methods: dict[str, Any] | None = None,
    partitioner: list | None = None,
    init_mutable_buffers: bool = True,
    on_edge: Callable[[Any], None] | None = None,
    share_provenance: bool = True,
    verify: bool = False,
) -> bytes:
    """The official pipeline, uncached: to_edge_transform_and_lower -> to_executorch.

    ``on_edge`` sees the lowered edge program manager before ``to_executorch``.
    ``share_provenance``: under :func:`shared_provenance` (the same bytes, less CPU).
    ``verify``: with the exporter's own IR checks (see :func:`edge_compile_config`).

    By default the official emitter stores only the shape of a mutated buffer and
    leaves its initial contents undefined; with ``init_mutable_buffers`` (the
    default here) ``InitializedMutableBufferPass`` makes it store the initial values,
    so that the program computes what eager does.
    """
    exir = _exir()
    with shared_provenance() if share_provenance else contextlib.nullcontext():
        edge = exir.to_edge_transform_and_lower(
            programs,
            partitioner=partitioner,
            constant_methods=constant_methods or None,
            compile_config=edge_compile_config(verify),
        )
        if on_edge is not None:
            on_edge(edge)
        passes = []
        mutated = mutated_buffers({m: edge.exported_program(m) for m in programs})
        if init_mutable_buffers and mutated:
            from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

            passes.append(InitializedMutableBufferPass(mutated))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Mutation on a buffer in the model")
            return edge.to_executorch(exir.ExecutorchBackendConfig(passes=passes)).buffer


def _xnnpack_partitioner():
    silence_noise()
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


def _source(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return repr(obj)
    except SystemError:
        # CPython 3.11's ast.parse (which getsource runs for a class) failed once in a
        # long-lived test worker with "AST constructor recursion depth mismatch" (its
        # recursion bookkeeping, not the source): key on the defining module's whole text.
        return Path(inspect.getsourcefile(obj)).read_text()


def _function_sources(fn, seen) -> list[str]:
    """Source of ``fn`` and of the functions/classes its closure refers to."""
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    out = [_source(fn)]
    for cell in getattr(fn, "__closure__", None) or ():
        v = cell.cell_contents
        if inspect.isfunction(v):
            out += _function_sources(v, seen)
        elif inspect.isclass(v):
            out.append(_source(v))
        else:
            out.append(repr(v))
    return out


def _hash_value(h, v) -> None:
    if isinstance(v, torch.Tensor):
        t = v.detach().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)
        h.update(t.numpy().tobytes())
    else:
        h.update(repr(v).encode())


def case_key(case: ModelCase, flavor: str) -> str:
    """A hash of everything the official export of ``case`` depends on."""
    h = hashlib.sha256()
    for part in (
        models.SUITE_VERSION,
        RECIPE_VERSION,
        flavor,
        versions(),
        case.name,
        repr(case.dynamic_shapes),
        repr(sorted(case.constant_methods.items())),
    ):
        h.update(repr(part).encode())
    seen: set[int] = set()
    for fn in (case.make, case.inputs, case.methods):
        if fn is not None:
            for s in _function_sources(fn, seen):
                h.update(s.encode())
    for meth, (module, inputs, _) in case.programs().items():
        h.update(meth.encode())
        classes = sorted({type(m) for m in module.modules()}, key=lambda c: c.__qualname__)
        for cls in classes:
            if cls.__module__ == models.__name__:
                h.update(_source(cls).encode())
        for k, v in module.state_dict().items():
            h.update(k.encode())
            _hash_value(h, v)
        for x in tree_flatten(inputs)[0]:
            _hash_value(h, x)
    return h.hexdigest()[:20]


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold the lock of cache entry ``path`` (a ``.lock`` file beside it).

    The suite runs on several workers: a second worker that needs an official
    program being made by the first waits here, then reads the first one's file,
    instead of running the official exporter again.
    """
    with open(path.with_name(path.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached_file(
    path: Path, build: Callable[[], bytes | None], fail: Path | None = None
) -> bytes | None:
    """The bytes at ``path``, made once by ``build`` (under :func:`exclusive`) when absent.

    ``build`` returning None (the official exporter refused the model) is remembered
    as an empty ``fail`` file, and None is returned from then on.
    """

    def stored() -> tuple[bool, bytes | None]:
        if path.exists():
            return True, path.read_bytes()
        return (fail is not None and fail.exists()), None

    found, data = stored()
    if found:
        return data
    asked = time.perf_counter()
    with exclusive(path):
        found, data = stored()  # made by another worker while this one waited
        if found:
            log_build(path.name, time.perf_counter() - asked, waited=True)
            return data
        started = time.perf_counter()
        with shared_provenance():  # every build is the official tools' work
            data = build()
        log_build(path.name, time.perf_counter() - started)
        if data is None:
            if fail is None:
                raise ValueError(f"building {path.name} gave nothing, and it has no fail file")
            _write_atomic(fail, b"")
        else:
            _write_atomic(path, data)
        return data


def module_xnnpack_pte(
    stem: str, key: str, make_module: Callable[[], torch.nn.Module], inputs: tuple
) -> bytes:
    """The official exporter's XNNPACK ``.pte`` of ``make_module()`` on ``inputs``, made
    once and cached as ``<stem>.<hash of the versions and key>.pte``."""

    def build() -> bytes:
        from executorch.exir import to_edge_transform_and_lower

        exported = torch.export.export(make_module(), inputs)
        edge = to_edge_transform_and_lower(exported, partitioner=_xnnpack_partitioner())
        return edge.to_executorch().buffer

    name = hashlib.sha256((versions() + key).encode()).hexdigest()[:16]
    return cached_file(cache_dir() / f"{stem}.{name}.pte", build)


def _entry(case: ModelCase, flavor: str) -> tuple[Path, Path]:
    """The cache files of ``case`` in ``flavor``: the result, and the mark of a failure.
    The key is part of the name so that a changed model is exported again."""
    stem = cache_dir() / f"{case.name}.{flavor}.{case_key(case, flavor)}"
    return stem.with_name(stem.name + ".pte"), stem.with_name(stem.name + ".fail")


def _cached(case: ModelCase, flavor: str, build, use_cache: bool) -> bytes | None:
    if not use_cache:
        return build()
    result, fail = _entry(case, flavor)
    return cached_file(result, build, fail)


def official_export(case: ModelCase, *, use_cache: bool = True) -> bytes:
    """The official ``.pte`` of ``case`` (portable kernels, no delegate).

    Raises whatever the official exporter raises (``official_exportable=False``
    cases); failures are not cached.
    """

    def build():
        return export_programs(models.export(case), case.constant_methods)

    return _cached(case, "portable", build, use_cache)


def official_export_xnnpack(case: ModelCase, *, use_cache: bool = True) -> bytes | None:
    """The official ``.pte`` with the XNNPACK partitioner, or None where that fails."""

    def record_partition(edge) -> None:  # noqa: ANN001
        # The XNNPACK export tests compare the official partition with ours: keep it,
        # rather than partitioning the case a second time for them.
        from tests.backends._partition_summary import summarize

        _write_atomic(_entry(case, "xnnpack-partition")[0], summarize(edge).to_json())

    def build():
        try:
            return export_programs(
                models.export(case),
                case.constant_methods,
                _xnnpack_partitioner(),
                on_edge=record_partition if use_cache else None,
            )
        except Exception as e:  # the official exporter raises many types
            print(f"official XNNPACK export of {case.name} failed: {e!r}"[:500], file=sys.stderr)
            return None

    return _cached(case, "xnnpack", build, use_cache)


# --------------------------------------------------------------------------------------
# Running and inspecting official programs


def _to_torch(x):
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x).copy())
    if isinstance(x, torch.Tensor):
        return x.detach().contiguous()
    return x  # Python scalars go through as they are


def to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().copy()
    return np.asarray(x)


class OfficialRunner:
    """One program loaded in the official runtime; methods keep their state
    (mutable buffers) across calls for as long as the runner lives."""

    def __init__(self, pte: bytes):
        # The official loader keeps pointing into the buffer it was given (it does
        # not copy): hold on to it for as long as the module lives.
        self.pte = bytes(pte)
        self.module = _portable_lib()._load_for_executorch_from_buffer(self.pte)

    def method_names(self) -> set[str]:
        return set(self.module.method_names())

    def run(self, inputs: Sequence[Any], method: str = "forward") -> list[np.ndarray]:
        outs = self.module.run_method(method, tuple(_to_torch(x) for x in inputs))
        # Copy: outputs may alias the method's planned memory.
        return [to_numpy(o) for o in outs]


def official_runner(pte: bytes) -> OfficialRunner:
    return OfficialRunner(pte)


def official_run(pte: bytes, inputs: Sequence[Any], method: str = "forward") -> list[np.ndarray]:
    """Load ``pte`` and run one call of ``method``."""
    return OfficialRunner(pte).run(inputs, method)


def official_arena_sizes_all(pte: bytes) -> dict[str, list[int]]:
    """``non_const_buffer_sizes`` of every method, as the official deserializer reads
    them (index 0 is the reserved constant-buffer slot, always 0)."""
    silence_noise()
    from executorch.exir._serialize._program import deserialize_pte_binary

    prog = deserialize_pte_binary(pte).program
    return {p.name: list(p.non_const_buffer_sizes) for p in prog.execution_plan}


def official_arena_sizes(pte: bytes, method: str = "forward") -> list[int]:
    return official_arena_sizes_all(pte)[method]


# --------------------------------------------------------------------------------------
# Eager reference and comparison


def flatten_outputs(out) -> list[np.ndarray]:
    return [to_numpy(x) for x in tree_flatten(out)[0]]


def _clone(inputs):
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)


def eager_outputs(
    case: ModelCase,
    inputs: Sequence[Any] | None = None,
    method: str = "forward",
    module: torch.nn.Module | None = None,
) -> list[np.ndarray]:
    """Torch eager outputs of one call, flattened as the program returns them.

    A fresh module is built unless ``module`` is given (pass one to chain stateful
    calls)."""
    if module is None or inputs is None:
        fresh, default_inputs, _ = case.programs()[method]
        module = module if module is not None else fresh
        inputs = inputs if inputs is not None else default_inputs
    with torch.no_grad():
        return flatten_outputs(module(*_clone(inputs)))


def eager_call_outputs(case: ModelCase) -> list[list[np.ndarray]]:
    """Eager outputs of each call of ``case.call_sequence()`` on one module."""
    module = case.make()
    return [eager_outputs(case, inp, module=module) for inp in case.call_sequence()]


def assert_close(
    case: ModelCase | str,
    got: Sequence[Any],
    expected: Sequence[Any],
    *,
    rtol: float | None = None,
    atol: float | None = None,
    what: str = "",
) -> None:
    """Compare output lists: floats within the case's tolerances, ints and bools
    exactly, dtypes and shapes equal. ``what`` is added to the message."""
    name = case if isinstance(case, str) else case.name
    if not isinstance(case, str):
        rtol = case.rtol if rtol is None else rtol
        atol = case.atol if atol is None else atol
    rtol = 1e-4 if rtol is None else rtol
    atol = 1e-5 if atol is None else atol
    where = f"{name}{' ' + what if what else ''}"
    if len(got) != len(expected):
        raise AssertionError(f"{where}: {len(got)} outputs, expected {len(expected)}")
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        g, e = np.asarray(g), np.asarray(e)
        if g.dtype != e.dtype or g.shape != e.shape:
            raise AssertionError(
                f"{where}: output {i}: got {g.dtype}{list(g.shape)}, "
                f"expected {e.dtype}{list(e.shape)}"
            )
        if np.issubdtype(e.dtype, np.floating) or np.issubdtype(e.dtype, np.complexfloating):
            np.testing.assert_allclose(
                g.astype(np.float64) if e.dtype == np.float16 else g,
                e.astype(np.float64) if e.dtype == np.float16 else e,
                rtol=rtol,
                atol=atol,
                equal_nan=True,
                err_msg=f"{where}: output {i}",
            )
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"{where}: output {i} (exact)")


# --------------------------------------------------------------------------------------
# Report: `python tests/official.py [--large]` prints the official arena sizes per case.


def arena_table(cases: Sequence[ModelCase]) -> str:
    rows = [("case", "method", "non_const_buffer_sizes", ".pte bytes")]
    for case in cases:
        if not case.official_exportable:
            rows.append((case.name, "-", f"not exportable: {case.official_failure}", "-"))
            continue
        pte = official_export(case)
        for meth, sizes in official_arena_sizes_all(pte).items():
            if meth in case.programs():
                rows.append((case.name, meth, str(sizes), str(len(pte))))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows)


if __name__ == "__main__":
    silence_noise()
    warnings.filterwarnings("ignore")
    suite = list(models.CASES)
    if "--large" in sys.argv:
        from benchmarks.models_large import LARGE_CASES

        suite += LARGE_CASES
    print(arena_table(suite))
