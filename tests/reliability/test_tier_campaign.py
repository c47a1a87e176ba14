"""A fixed-seed slice of the two-tier fuzz campaign (``campaign.py``; the full campaign is
``benchmarks/fuzz.py --tiers``): every seed, and every mutant of the slice, runs alike on
the numpy and the compiled tier or is refused alike, with a precise exception, in time.
The campaign's findings, kept under ``tests/data/fuzz_regressions/tiers_*.pte``, too.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from pyexecutorch.runtime import ExecutionError, Runtime, Verification
from pyexecutorch.runtime.io import OUTPUT_ENV

from .campaign import FINDINGS, KINDS, Mutant, _same_value, judge, mutant
from .harness import CORPUS, Finding, SlowCompile, inputs_for, seeds, time_limit

SEEDS = seeds(campaign=True)


@pytest.fixture(autouse=True)
def numpy_outputs(monkeypatch):
    """The campaign compares numpy outputs (its workers never import torch; a test process
    may have, and outputs would then be torch tensors, a float8 one with no numpy view)."""
    monkeypatch.setenv(OUTPUT_ENV, "numpy")


# The CI slice draws from seeds whose compiled forms build fast in a cold cache (the
# convolutions' take minutes): both exporters' portable, XNNPACK and quantized MLPs.
CHEAP = [s for s in SEEDS if s.name.endswith("mlp.pte")]
SLICE = range(30)  # mutants 0..29 of campaign seed 0 over CHEAP
# (the findings with a test of their own below are left out: cold CI time)
OWN_TEST = {
    "tiers_conv_relu_float8_bias.pte",  # (test_tier_findings.py)
    "tiers_conv_relu_float8_weight.pte",
    "tiers_mlp_addmm_misaligned_output.pte",
    "tiers_mutable_buffer_misaligned_output.pte",
    "tiers_quant_xnnpack_fc_bias_int32_min.pte",
    "tiers_float8_retype_compiled_load.pte",
    "tiers_int_arith_view_of_fused_value.pte",
    "tiers_mlp_splice_rounding.pte",
    "tiers_mutable_buffer_add_alpha0_rounding.pte",
    "tiers_official_mutable_buffer_sum_dtype_bool.pte",
    "tiers_scalar_input_sum_dtype_bool.pte",
}
REGRESSIONS = [
    p
    for p in sorted((CORPUS.parent / "fuzz_regressions").glob("tiers_*.pte"))
    if p.name not in OWN_TEST
]


def test_corpus_has_both_exporters_portable_xnnpack_and_quantized_programs():
    names = {s.name for s in SEEDS}
    for who in ("ours", "official"):
        for flavor in ("xnnpack_mlp", "quant_portable_cnn", "quant_xnnpack_cnn", "mlp"):
            assert f"{who}_{flavor}.pte" in names


# Both exporters' portable, XNNPACK and quantized XNNPACK programs (the slice below also
# draws from the portable quantized ones and the example backend's).
ALIKE = [s for s in CHEAP if "portable" not in s.name and "example" not in s.name]


@pytest.mark.parametrize("seed", ALIKE, ids=lambda s: s.name)
def test_every_seed_runs_alike_on_both_tiers(seed):
    m = Mutant(0, seed.name, "none", seed.pte, seed.data_files, Verification.InternalConsistency)
    verdict = judge(m)
    assert verdict.label == "ok", verdict


def test_campaign_slice():
    verdicts = [judge(mutant(CHEAP, i, 0)) for i in SLICE]
    found = [v for v in verdicts if v.label in FINDINGS]
    assert not found, found
    assert {v.kind for v in verdicts} <= set(KINDS)
    assert sum(v.label == "ok" for v in verdicts) >= 10  # mutants that still run, compared


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.name)
def test_campaign_findings_stay_fixed(path):
    for verification in Verification:
        m = Mutant(0, path.name, "regression", path.read_bytes(), (), verification)
        verdict = judge(m)
        assert verdict.label not in FINDINGS, verdict


def _regression(name: str, index: int = 0) -> Mutant:
    data = (CORPUS.parent / "fuzz_regressions" / name).read_bytes()
    return Mutant(index, name, "regression", data, (), Verification.InternalConsistency)


def test_a_float8_output_is_left_to_its_numpy_kernel():
    """A logical_not whose output was retyped float8_e4m3fnuz: the compiled tier's single
    loop for it stored into an array numba cannot type, and load_method raised a bare
    AttributeError from numba's typing. Such an output keeps its numpy kernel; both tiers
    run and agree."""
    assert judge(_regression("tiers_float8_retype_compiled_load.pte")).label == "ok"


def test_a_static_view_of_a_fused_value_reads_it():
    """int_arith with an instruction deleted: a sub reads a value no instruction writes, a
    static view of a mul's output (the same bytes). The fused loop of mul, add and sub loaded
    the view before storing the mul, so it read the previous call's bytes: 20 of 20 values
    differed. A run where a member reads what an earlier member writes is not fused; the
    tiers agree call after call."""
    m = _regression("tiers_int_arith_view_of_fused_value.pte")
    plan = Runtime.get().load_program(m.pte).pte_file.program.execution_plan[0]
    methods = [
        Runtime.get().load_program(m.pte, jit=jit).load_method("forward") for jit in (False, True)
    ]
    assert methods[1].plan.fused_runs  # (what remains of the run is still fused)
    for seed in range(3):
        x = inputs_for(plan, np.random.default_rng(seed))
        got = [[np.array(o) for o in method.execute(x)] for method in methods]
        assert not _same_value(*got), _same_value(*got)


@pytest.mark.parametrize(
    "name",
    ["tiers_official_mutable_buffer_sum_dtype_bool.pte", "tiers_scalar_input_sum_dtype_bool.pte"],
)
def test_sums_dtype_must_be_a_scalar_type_of_its_out(name):
    """sum's dtype replaced by Bool(True): the numpy tier read it as ScalarType 1 (int8) and
    summed in int8 into a float32 out, the compiled tier ignored it. A Bool is no dtype,
    and an explicit dtype must be the out's (as in torch): both tiers refuse, alike."""
    data = _regression(name).pte
    plan = Runtime.get().load_program(data).pte_file.program.execution_plan[0]
    for jit in (False, True):
        method = Runtime.get().load_program(data, jit=jit).load_method("forward")
        for seed in range(2):
            with pytest.raises(ExecutionError, match="sum: dtype must be a scalar type code"):
                method.execute(inputs_for(plan, np.random.default_rng(seed)))


@pytest.mark.parametrize(
    "name, index",
    [("tiers_mutable_buffer_add_alpha0_rounding.pte", 0), ("tiers_mlp_splice_rounding.pte", 2)],
)
def test_outputs_that_differ_only_where_both_are_not_finite_are_rounding(name, index):
    """Two campaign findings that are float rounding: a buffer whose values cancel sums to
    0 on one tier and to a rounding residue on the other, and x / sum is NaN on one, inf on
    the other; a spliced MLP's overflowing weights give inf - inf (NaN) or -inf by the order
    of a dot product's terms. The judge calls that ``rounding``, not a tier difference."""
    assert judge(_regression(name, index)).label == "rounding"


def test_rounding_is_only_where_both_tiers_are_not_finite():
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    a = np.array([1.0, inf, nan, -inf], np.float32)
    assert _same_value([a], [np.array([1.0, nan, inf, nan], np.float32)])  # a tier difference
    assert not _same_value([a], [np.array([1.0, nan, inf, nan], np.float32)], nonfinite=True)
    for b in ([2.0, inf, nan, -inf], [1.0, 3.0, nan, -inf]):  # a finite value differs
        assert _same_value([a], [np.array(b, np.float32)], nonfinite=True)


def test_the_time_limit_tells_a_compilation_from_a_hang():
    """The campaign's 13 "hangs" of the last run were compilations over the limit and
    delegate loops the harness stopped: its budget now counts CPU time outside numba's
    compilations, so a compilation longer than the budget completes, a loop that spends it
    is a hang, and a block that never got to spend it by the wall-clock cap is slow."""
    import numba  # noqa: PLC0415

    numba.njit(lambda a: a + 1)(1.0)  # numba's one-time start, not a compilation

    @numba.njit(cache=False)
    def busy(a):  # noqa: ANN001, ANN202
        total = 0.0
        for i in range(a.shape[0]):
            total += np.sin(a[i]) * np.cos(a[i]) + np.tanh(a[i])
        return total

    with time_limit(0.02, cap=120.0):  # compiles for far more than 0.02 s of CPU
        assert busy(np.ones(4)) > 0
    with pytest.raises(Finding, match="a hang") as hang:
        with time_limit(0.2, cap=120.0):
            while True:
                pass
    assert not isinstance(hang.value, SlowCompile)
    with pytest.raises(SlowCompile):
        with time_limit(5.0, cap=0.2):
            time.sleep(1.0)  # (waits, as for a loaded machine's CPU, without running)
