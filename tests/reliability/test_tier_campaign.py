"""A fixed-seed slice of the two-tier fuzz campaign (``campaign.py``; the full campaign is
``benchmarks/fuzz.py --tiers``): every seed, and every mutant of the slice, runs alike on
the numpy and the compiled tier or is refused alike, with a precise exception, in time.
The campaign's findings, kept under ``tests/data/fuzz_regressions/tiers_*.pte``, too.
"""

from __future__ import annotations

import pytest

from pyexecutorch.runtime import Verification

from .campaign import FINDINGS, KINDS, Mutant, judge, mutant
from .harness import CORPUS, seeds

SEEDS = seeds(campaign=True)
# The CI slice draws from seeds whose compiled forms build fast in a cold cache (the
# convolutions' take minutes): both exporters' portable, XNNPACK and quantized MLPs.
CHEAP = [s for s in SEEDS if s.name.endswith("mlp.pte")]
SLICE = range(30)  # mutants 0..29 of campaign seed 0 over CHEAP
REGRESSIONS = sorted((CORPUS.parent / "fuzz_regressions").glob("tiers_*.pte"))


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
