"""The model suite checked against the official package: what the official exporter
and runtime compute equals torch eager. This validates the suite (cases are
deterministic, exportable, stateful where they claim to be) and the oracle helpers
that the compiler, runtime and benchmark tests rely on.

Cases the official package gets wrong carry a flag (official_exportable=False,
official_mismatch) and a test here checks that the flag still holds."""

import threading
import time

import numpy as np
import pytest
import torch

from tests import build_log, models, official
from tests.build_log import BUILD_LOG
from tests.models import CASES, ModelCase
from tests.official import (
    OfficialRunner,
    assert_close,
    eager_call_outputs,
    eager_outputs,
    official_arena_sizes_all,
    official_export,
)


def _ids(cases):
    return [c.name for c in cases]


ORACLE = [c for c in CASES if c.official_exportable and not c.official_mismatch]
MISMATCH = [c for c in CASES if c.official_exportable and c.official_mismatch]
UNEXPORTABLE = [c for c in CASES if not c.official_exportable]


def _tol(case: ModelCase) -> dict:
    rtol, atol = case.official_tol or (case.rtol, case.atol)
    return {"rtol": rtol, "atol": atol}


def _check_against_eager(case: ModelCase, runner: OfficialRunner) -> None:
    if case.stateful:
        expected = eager_call_outputs(case)
        for i, inputs in enumerate(case.call_sequence()):
            assert_close(case, runner.run(inputs), expected[i], what=f"call {i}", **_tol(case))
    else:
        for j, inputs in enumerate(case.all_inputs()):
            got = runner.run(inputs)
            assert_close(case, got, eager_outputs(case, inputs), what=f"inputs #{j}", **_tol(case))
    for meth, (_, inputs, _) in case.programs().items():
        if meth != "forward":
            got = runner.run(inputs, meth)
            assert_close(case, got, eager_outputs(case, method=meth), what=meth, **_tol(case))


# --------------------------------------------------------------------------------------
# The suite itself


def test_suite_size_and_names():
    assert len(CASES) >= 22
    assert len({c.name for c in CASES}) == len(CASES)
    for tag in ("conv", "transformer", "rnn", "int", "bool", "float16", "dynamic"):
        assert models.cases(tag), tag
    assert {"stateful", "control_flow", "multi_method", "scalar", "pytree"} <= set().union(
        *(c.tags for c in CASES)
    )


def _flat_state(m: torch.nn.Module) -> list[np.ndarray]:
    return [v.detach().numpy().copy() for v in m.state_dict().values()]


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_case_is_deterministic_and_small(case: ModelCase):
    for meth, (module, _inputs, _) in case.programs().items():
        assert not any(m.training for m in module.modules()), f"{case.name}.{meth} not eval"
        nbytes = sum(v.numel() * v.element_size() for v in module.state_dict().values())
        assert nbytes < 1 << 20, f"{case.name}.{meth}: {nbytes} bytes of weights"
    again = case.programs()
    for meth, (module, inputs, _) in case.programs().items():
        for a, b in zip(_flat_state(module), _flat_state(again[meth][0]), strict=True):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(inputs, again[meth][1], strict=True):
            assert type(a) is type(b)
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b)
            else:
                assert a == b
    if case.stateful:
        first, second = eager_call_outputs(case), eager_call_outputs(case)
        for i, (a, b) in enumerate(zip(first, second, strict=True)):
            assert_close(case, a, b, rtol=0, atol=0, what=f"call {i}")
    else:
        assert_close(case, eager_outputs(case), eager_outputs(case), rtol=0, atol=0)


@pytest.mark.parametrize("case", models.cases("stateful"), ids=_ids(models.cases("stateful")))
def test_stateful_outputs_depend_on_state(case: ModelCase):
    """The last call's outputs after the earlier calls differ from its outputs on a
    fresh module: the earlier calls left state behind."""
    assert case.calls >= 3
    after_sequence = eager_call_outputs(case)[-1]
    fresh = eager_outputs(case, case.call_sequence()[-1])
    assert any(not np.array_equal(x, y) for x, y in zip(after_sequence, fresh, strict=True))


@pytest.mark.parametrize("case", models.cases("dynamic"), ids=_ids(models.cases("dynamic")))
def test_dynamic_cases_cover_sizes(case: ModelCase):
    sizes = {tuple(x.shape) for inp in case.all_inputs() for x in inp[:1]}
    assert len(sizes) >= 3, sizes


# --------------------------------------------------------------------------------------
# Official export + runtime against eager


@pytest.mark.parametrize("case", ORACLE, ids=_ids(ORACLE))
def test_official_matches_eager(case: ModelCase):
    pte = official_export(case)
    runner = OfficialRunner(pte)
    assert runner.method_names() == set(case.programs()) | set(case.constant_methods)
    _check_against_eager(case, runner)
    for name, value in case.constant_methods.items():
        (got,) = runner.run((), name)
        assert got.item() == value and type(got.item()) is type(value), name
    sizes = official_arena_sizes_all(pte)
    assert set(sizes) == runner.method_names()
    for meth in case.programs():
        assert sizes[meth][0] == 0 and len(sizes[meth]) >= 1, sizes


@pytest.mark.parametrize("case", MISMATCH, ids=_ids(MISMATCH))
def test_official_mismatch_still_differs(case: ModelCase):
    """official_mismatch documents an official kernel bug: it must still be there."""
    runner = OfficialRunner(official_export(case))
    with pytest.raises(AssertionError):
        _check_against_eager(case, runner)


@pytest.mark.parametrize("case", UNEXPORTABLE, ids=_ids(UNEXPORTABLE))
def test_official_export_still_fails(case: ModelCase):
    """official_exportable=False must stay true: eager and torch.export work, the
    official lowering does not."""
    eager_outputs(case)
    programs = models.export(case)
    with pytest.raises(Exception) as err:
        official.export_programs(programs, case.constant_methods, verify=True)
    assert not isinstance(err.value, AssertionError | KeyboardInterrupt), err.value


def test_dynamic_bounds_enforced_by_official_runtime():
    case = models.get_case("dynamic_batch")
    runner = OfficialRunner(official_export(case))
    with pytest.raises(RuntimeError):
        runner.run((models.randn(9, 16),))


def test_scalar_inputs_are_specialised_by_official_runtime():
    case = models.get_case("scalar_input")
    runner = OfficialRunner(official_export(case))
    x, alpha, n = case.inputs()
    assert_close(case, runner.run((x, alpha, n)), eager_outputs(case))
    with pytest.raises(RuntimeError):
        runner.run((x, alpha + 1.0, n))


def test_official_run_one_shot():
    case = models.get_case("mlp")
    assert_close(
        case, official.official_run(official_export(case), case.inputs()), eager_outputs(case)
    )


@pytest.mark.parametrize("name", ["mlp", "small_cnn"])
def test_official_xnnpack(name):
    case = models.get_case(name)
    pte = official.official_export_xnnpack(case)
    assert pte is not None
    runner = OfficialRunner(pte)
    assert_close(case, runner.run(case.inputs()), eager_outputs(case), rtol=1e-3, atol=1e-4)


def test_export_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYEXECUTORCH_TEST_CACHE", str(tmp_path))
    case = models.get_case("mlp")
    first = official_export(case)
    files = [f for f in tmp_path.iterdir() if f.suffix != ".lock" and f.name != BUILD_LOG]
    assert len(files) == 1 and files[0].read_bytes() == first
    assert official_export(case) == first
    # A different model (weights) gets a different key.
    other = case.replace(make=lambda: torch.nn.Linear(16, 8).eval())
    assert official.case_key(other, "portable") != official.case_key(case, "portable")
    assert official.case_key(case, "portable") == official.case_key(case, "portable")


def test_cached_file_is_made_once_for_workers_that_need_it_together(tmp_path, monkeypatch):
    """Workers needing the same official program wait for the one making it; the build log
    counts the build and the wait apart (the session's summary reports both)."""
    monkeypatch.setenv("PYEXECUTORCH_TEST_CACHE", str(tmp_path / "log"))
    start = time.time()
    path = tmp_path / "entry.pte"
    builds = []
    started = threading.Event()

    def build() -> bytes:
        builds.append(threading.get_ident())
        started.set()
        time.sleep(0.3)  # the second caller arrives while this one builds
        return b"program"

    results = []
    first = threading.Thread(target=lambda: results.append(official.cached_file(path, build)))
    first.start()
    started.wait(5)
    results.append(official.cached_file(path, build))
    first.join()
    assert results == [b"program", b"program"] and len(builds) == 1
    logged = build_log.builds_since(start)
    assert [(r["name"], r.get("waited", False)) for r in logged] == [
        ("entry.pte", False),
        ("entry.pte", True),
    ]
    assert logged[0]["seconds"] >= 0.3  # the build's sleep
    summary = build_log.summary_lines(start)
    assert summary[0].startswith("official work built this run: 1 entries")
    assert summary[-1].startswith("waited for another worker's official build: 1 times")
    # A refused build is remembered in its fail file: not tried again.
    refused, fail = tmp_path / "refused.pte", tmp_path / "refused.fail"
    assert official.cached_file(refused, lambda: None, fail) is None
    assert official.cached_file(refused, lambda: b"never built", fail) is None
    with pytest.raises(ValueError, match="no fail file"):
        official.cached_file(tmp_path / "other.pte", lambda: None)


def test_assert_close_messages():
    case = models.get_case("mlp")
    a = [np.ones(3, np.float32), np.arange(3)]
    assert_close(case, a, [np.ones(3, np.float32) + 1e-7, np.arange(3)])
    with pytest.raises(AssertionError, match=r"mlp: output 1"):
        assert_close(case, a, [a[0], np.arange(3) + 1])
    with pytest.raises(AssertionError, match=r"mlp: output 0: got float32\[3\], expected float64"):
        assert_close(case, a, [a[0].astype(np.float64), a[1]])
    with pytest.raises(AssertionError, match=r"2 outputs, expected 1"):
        assert_close(case, a, a[:1])


@pytest.mark.parametrize(
    "name, flavor", [("small_cnn", "xnnpack"), ("kv_cache", "portable")], ids=lambda v: v
)
def test_shared_provenance_gives_the_same_program(name, flavor):
    """The official builds share torch's node provenance records instead of deep-copying
    them (official.shared_provenance) and skip the exporter's own IR checks
    (official.edge_compile_config), for speed: the cached program is byte for byte the one
    the unchanged pipeline makes, and torch copies the records again afterwards (our
    exporter, under test, runs on torch as it is)."""
    import copy

    from torch.fx.traceback import NodeSource

    case = models.get_case(name)
    cached = {"xnnpack": official.official_export_xnnpack, "portable": official_export}[flavor]
    partitioner = official._xnnpack_partitioner() if flavor == "xnnpack" else None
    unchanged = official.export_programs(
        models.export(case),
        case.constant_methods,
        partitioner,
        share_provenance=False,
        verify=True,
    )
    assert cached(case) == unchanged
    record = NodeSource(None, "a pass")
    with official.shared_provenance():
        assert copy.deepcopy(record) is record
    assert copy.deepcopy(record) is not record and "__deepcopy__" not in NodeSource.__dict__


@pytest.mark.parametrize("model, recipe", [("cnn", "static"), ("mlp", "dynamic")])
def test_quantized_builds_without_ir_checks_give_the_same_program(model, recipe):
    """The official quantized programs (XNNPACK-lowered) are built without the exporter's
    IR checks too (official.edge_compile_config): the same bytes as with them, through
    both build paths (tests/backends/_quantized_programs, _quantized_models)."""
    from tests.backends import _quantized_models as qm
    from tests.backends import _quantized_programs as qp

    cached = qp.official_pte(qp.quantize(model, recipe), "xnnpack")
    unchanged = official.export_programs(
        {"forward": qp.quantize(model, recipe).program},
        partitioner=official._xnnpack_partitioner(),
        share_provenance=False,
        verify=True,
    )
    assert cached == unchanged
    small = qp.quantize(model, recipe)  # each build exports the graph afresh
    q = qm.QuantizedCase(small.name, small.float_model, small.graph, small.inputs, [])
    assert qm.official_build(q, "xnnpack") == qm.official_build(q, "xnnpack", verify=True)


def test_cache_keys_survive_a_failing_source_parse(monkeypatch):
    # A class's source comes from ast.parse, which CPython 3.11 once failed in a worker
    # with a SystemError: the key then holds the defining module's whole text.
    import inspect

    def broken(obj):  # noqa: ANN001, ANN202
        raise SystemError("AST constructor recursion depth mismatch (before=183, after=71)")

    monkeypatch.setattr(inspect, "getsource", broken)
    with open(inspect.getsourcefile(ModelCase)) as f:
        assert official._source(ModelCase) == f.read()
