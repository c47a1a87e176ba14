"""A bounded fuzz campaign over the seed corpus: every mutated file loads and runs, or fails
with an exception of the runtime's families (see ``harness.py``); never anything else.

The longer campaigns (seeded random, or coverage-guided with atheris) are
``benchmarks/fuzz.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyexecutorch.runtime import Verification

from .harness import check, seeds
from .mutations import (
    STRUCTURAL,
    field_mutation,
    fields,
    raw_mutation,
    structural_mutation,
    swap_offsets,
)

SEEDS = seeds()
NAMES = [s.name for s in SEEDS]
BY_NAME = {s.name: s for s in SEEDS}
CAMPAIGN = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
words = st.integers(0, (1 << 31) - 1)
seed_names = st.sampled_from(NAMES)
verifications = st.sampled_from(list(Verification))


def test_corpus_covers_both_exporters_delegates_and_data_files():
    sources = {name.split("_")[0] for name in NAMES}
    assert sources == {"ours", "official"}
    assert any("xnnpack" in n for n in NAMES) and any("example" in n for n in NAMES)
    assert any(s.data_files for s in SEEDS)


@pytest.mark.parametrize("name", NAMES)
def test_every_seed_loads_and_runs(name):
    seed = BY_NAME[name]
    assert check(seed.pte, seed.data_files).phase == "ok"
    assert check(seed.pte, seed.data_files, verification=Verification.Minimal).phase == "ok"


@CAMPAIGN
@given(seed_names, st.integers(0, 5), words, words, verifications)
def test_raw_mutations(name, kind, position, value, verification):
    seed = BY_NAME[name]
    other = BY_NAME[NAMES[value % len(NAMES)]].pte
    check(
        raw_mutation(seed.pte, kind, position, value, other),
        seed.data_files,
        verification=verification,
    )


@CAMPAIGN
@given(seed_names, words, st.integers(0, 40), verifications)
def test_every_field_at_boundary_values(name, index, choice, verification):
    seed = BY_NAME[name]
    check(field_mutation(seed.pte, index, choice), seed.data_files, verification=verification)


@CAMPAIGN
@given(seed_names, words, words)
def test_swapped_offsets(name, a, b):
    seed = BY_NAME[name]
    check(swap_offsets(seed.pte, a, b), seed.data_files)


@CAMPAIGN
@given(seed_names, st.integers(0, len(STRUCTURAL) - 1), words, words, verifications)
def test_structural_mutations(name, kind, a, b, verification):
    seed = BY_NAME[name]
    data = structural_mutation(seed.pte, kind, a, b)
    if data is not None:
        check(data, seed.data_files, verification=verification)


@CAMPAIGN
@given(st.sampled_from([s for s in SEEDS if s.data_files]), st.integers(0, 5), words, words)
def test_mutated_data_files(seed, kind, position, value):
    ptd = raw_mutation(seed.data_files[0], kind, position, value)
    check(seed.pte, (ptd, *seed.data_files[1:]))


def test_field_walk_finds_every_table():
    # The walk reaches the deepest fields: instruction arguments and tensor sizes.
    paths = [f.path for f in fields(BY_NAME["official_mlp.pte"].pte)]
    assert any(".instr_args" in p and ".args[" in p for p in paths)
    assert any(".sizes[" in p for p in paths)
    assert any("non_const_buffer_sizes[" in p for p in paths)
    assert "header.segment_base_offset" in paths
