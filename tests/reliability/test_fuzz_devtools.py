"""A bounded fuzz campaign over the bundled program and ETDump seeds: a mutated ``.bpte``
loads and its test cases run and verify, or fail with the loader's, the runtime's or a
verification error; a mutated ETDump reads into tables or fails with a ``FormatError``
(see ``harness.py``). The longer campaigns are ``benchmarks/fuzz.py --target``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import bundled_seeds, check_bundled, check_etdump, etdump_seeds
from .mutations import bundled_fields, etdump_fields, field_mutation, raw_mutation, swap_offsets

BUNDLED = bundled_seeds()
TRACES = {s.name: s for s in etdump_seeds()}
CAMPAIGN = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
words = st.integers(0, (1 << 31) - 1)
bundled_names = st.sampled_from(sorted(BUNDLED))
trace_names = st.sampled_from(sorted(TRACES))


def test_seeds_cover_both_sides_debug_buffers_and_delegates():
    assert {n.split("_")[0] for n in BUNDLED} == {"ours", "official"}
    assert {n.split("_")[0] for n in TRACES} == {"ours", "official"}
    assert {s.debug_buffer is None for s in TRACES.values()} == {True, False}
    assert any("xnnpack" in n for n in TRACES)


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_every_bundled_seed_verifies(name):
    assert check_bundled(BUNDLED[name]).phase == "ok"


@pytest.mark.parametrize("name", sorted(TRACES))
def test_every_etdump_seed_reads(name):
    seed = TRACES[name]
    assert check_etdump(seed.etdump, seed.debug_buffer).phase == "ok"


def test_field_walks_reach_test_cases_events_and_the_embedded_program():
    paths = [f.path for f in bundled_fields(BUNDLED["ours_mlp.bpte"])]
    assert any(".test_cases[" in p and ".sizes[" in p for p in paths)
    assert any(p.startswith("program:") and ".instr_args" in p for p in paths)
    paths = [f.path for f in etdump_fields(TRACES["ours_mlp.etdp"].etdump)]
    assert any(p.endswith(".debug_event.debug_entry.tensor.offset") for p in paths)
    assert any(p.endswith(".profile_event.start_time") for p in paths)


@CAMPAIGN
@given(bundled_names, st.integers(0, 5), words, words)
def test_raw_mutations_of_bundled_programs(name, kind, position, value):
    check_bundled(raw_mutation(BUNDLED[name], kind, position, value))


@CAMPAIGN
@given(bundled_names, words, st.integers(0, 40), st.booleans(), words)
def test_field_mutations_of_bundled_programs(name, index, choice, swap, other):
    data = BUNDLED[name]
    if swap:
        check_bundled(swap_offsets(data, index, other, bundled_fields))
    else:
        check_bundled(field_mutation(data, index, choice, bundled_fields))


@CAMPAIGN
@given(trace_names, st.integers(0, 5), words, words, st.booleans())
def test_raw_mutations_of_etdumps(name, kind, position, value, of_debug_buffer):
    seed = TRACES[name]
    if of_debug_buffer and seed.debug_buffer is not None:
        check_etdump(seed.etdump, raw_mutation(seed.debug_buffer, kind, position, value))
    else:
        check_etdump(raw_mutation(seed.etdump, kind, position, value), seed.debug_buffer)


@CAMPAIGN
@given(trace_names, words, st.integers(0, 40), st.booleans(), words)
def test_field_mutations_of_etdumps(name, index, choice, swap, other):
    seed = TRACES[name]
    if swap:
        data = swap_offsets(seed.etdump, index, other, etdump_fields)
    else:
        data = field_mutation(seed.etdump, index, choice, etdump_fields)
    check_etdump(data, seed.debug_buffer)
