"""Our XNNPACK exporter on the model suite and the real architectures, against the
official exporter on the same ``ExportedProgram``.

For every model that the official XNNPACK exporter handles (``tests/models.py``) and
every architecture of ``tests/architectures.py``:

- our ``to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])`` splits the
  program into as many XNNPACK delegates, holding as many operators, as the official
  partitioner does (``EXPECTED_DIFFERENCES`` lists each accepted difference and why);
- our ``.pte`` runs in the official runtime and matches torch eager;
- it runs in our runtime and matches torch eager.

The official side (its delegation summary) is cached on disk with the official
exports (``tests/official.py``). A table of both sides is printed at the end of the
module's tests.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from tests import architectures, models, official
from tests.backends._partition_summary import Summary, summarize

# The official XNNPACK exporter fails on these (tests/backends/test_xnnpack_runtime.py
# keeps that true), so there is nothing to compare with.
OFFICIAL_XNNPACK_FAILS = {"cond"}

# case -> (why our partition differs from the official one, the operators only the
# official partitioner delegates, those only ours delegates).
EXPECTED_DIFFERENCES: dict[str, tuple[str, dict[str, int], dict[str, int]]] = {
    # The official partitioner lowers gelu(approximate="tanh") to XNNGelu, which is the
    # erf form: its program computes the wrong function. Ours leaves it to the portable
    # gelu, so our program matches eager.
    "activations": (
        "gelu(approximate='tanh') stays portable (XNNGelu is the erf form)",
        {"aten.gelu.default": 1},
        {},
    ),
}

SUITE = [c for c in models.CASES if c.official_exportable and c.name not in OFFICIAL_XNNPACK_FAILS]
CASES = SUITE + architectures.ARCH_CASES


def official_summary(case: models.ModelCase) -> Summary:
    """How the official XNNPACK partitioner splits ``case`` (cached on disk; recorded by
    ``official.official_export_xnnpack`` when it exports the case)."""

    def build() -> bytes:
        exir = official._exir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            edge = exir.to_edge_transform_and_lower(
                models.export(case),
                partitioner=official._xnnpack_partitioner(),
                constant_methods=case.constant_methods or None,
            )
        return summarize(edge).to_json()

    return Summary.from_json(official._cached(case, "xnnpack-partition", build, True))


# --------------------------------------------------------------------------------------
# Our side


def our_lowering(case: models.ModelCase):
    """Our edge program manager of ``case`` lowered with our XnnpackPartitioner."""
    from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import (  # noqa: PLC0415
        XnnpackPartitioner,
    )
    from pyexecutorch.exir import to_edge_transform_and_lower  # noqa: PLC0415

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_edge_transform_and_lower(
            models.export(case),
            partitioner=[XnnpackPartitioner()],
            constant_methods=case.constant_methods or None,
        )


def _calls(case: models.ModelCase) -> list[tuple[str, list, Any]]:
    """(method, inputs, eager outputs) of each call to check, in order; a stateful case's
    calls follow each other on one loaded method."""
    if case.stateful:
        return [
            ("forward", list(inp), exp)
            for inp, exp in zip(
                case.call_sequence(), official.eager_call_outputs(case), strict=True
            )
        ]
    out = []
    for name, (module, inputs, _) in case.programs().items():
        alt = case.alt_inputs() if case.alt_inputs and name == "forward" else []
        for call in [inputs, *alt]:
            out.append((name, list(call), official.eager_outputs(case, call, name, module)))
    return out


def _official_outputs(case, calls) -> list:
    """The official runtime's outputs of each call on the official XNNPACK program."""
    runner = official.official_runner(official.official_export_xnnpack(case))
    return [runner.run(inputs, method) for method, inputs, _ in calls]


# --------------------------------------------------------------------------------------
# The table


@dataclass
class Row:
    case: str
    official: Summary
    ours: Summary | None = None
    official_runtime: str = "-"
    our_runtime: str = "-"


ROWS: dict[str, Row] = {}


def _cell(s: Summary | None) -> str:
    return "-" if s is None else f"{s.delegates} / {s.delegated_ops} / {s.portable_ops}"


def format_table(rows: list[Row]) -> str:
    header = (
        "model",
        "official deleg/ops/portable",
        "ours deleg/ops/portable",
        "same",
        "official rt",
        "our rt",
    )
    lines = [header]
    for r in rows:
        same = "-" if r.ours is None else _same_split(r)
        lines.append(
            (r.case, _cell(r.official), _cell(r.ours), same, r.official_runtime, r.our_runtime)
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines
    )


def _same_split(r: Row) -> str:
    a, b = r.official, r.ours
    if (a.delegates, a.delegated) == (b.delegates, b.delegated):
        return "yes"
    return "listed" if r.case in EXPECTED_DIFFERENCES else "NO"


@pytest.fixture(scope="module", autouse=True)
def print_table(request):
    yield
    if not ROWS:
        return
    text = "XNNPACK partitions: delegates / delegated operators / portable operators\n"
    text += format_table(list(ROWS.values()))
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n" + text)


def _difference(official_s: Summary, ours: Summary) -> str:
    """The operators delegated by one partitioner and not the other, for the message."""
    more = ours.delegated - official_s.delegated
    fewer = official_s.delegated - ours.delegated
    return (
        f"official {official_s.delegates} delegate(s) with {official_s.delegated_ops} op(s), "
        f"ours {ours.delegates} with {ours.delegated_ops}; "
        f"delegated only by us: {dict(more)}; only by the official partitioner: {dict(fewer)}"
    )


# --------------------------------------------------------------------------------------
# Tests


def test_summary_counts_what_official_delegation_info_counts():
    """The counting agrees with the official ``get_delegation_info`` (which also counts
    ``getitem`` nodes)."""
    official.silence_noise()
    from executorch.devtools.backend_debug import get_delegation_info  # noqa: PLC0415

    exir = official._exir()
    case = models.get_case("small_cnn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = exir.to_edge_transform_and_lower(
            models.export(case), partitioner=official._xnnpack_partitioner()
        )
    gm = edge.exported_program().graph_module
    info = get_delegation_info(gm)
    getitems = info.delegation_by_operator.get("getitem")
    s = summarize(edge)
    assert s.delegates == info.num_delegated_subgraphs == 1
    assert s.delegated_ops == info.num_delegated_nodes - (getitems.delegated if getitems else 0)
    assert s.portable_ops == info.num_non_delegated_nodes - (
        getitems.non_delegated if getitems else 0
    )
    assert s.delegated["aten.convolution.default"] == 4
    # batch norms are delegated as nodes (preprocess fuses them into the convolutions)
    assert s.delegated["aten._native_batch_norm_legit_no_training.default"] == 2
    assert s.backends == Counter({"XnnpackBackend": 1})
    assert official_summary(case).to_json() == s.to_json()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_our_xnnpack_program(case):
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415

    row = ROWS[case.name] = Row(case.name, official_summary(case))
    edge = our_lowering(case)
    row.ours = summarize(edge)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pte = edge.to_executorch().buffer
    calls = _calls(case)
    expected = [exp for _, _, exp in calls]
    # Where an official portable kernel computes something other than eager
    # (models.ModelCase.official_mismatch), the official runtime on our program must
    # compute what it computes on the official program.
    official_expected = _official_outputs(case, calls) if case.official_mismatch else expected

    def check(run_call, which: str, expected: list) -> str:
        for k, ((method, inputs, _), exp) in enumerate(zip(calls, expected, strict=True)):
            official.assert_close(case, run_call(method, inputs), exp, what=f"{which}, call {k}")
        return "ok"

    runner = official.official_runner(pte)
    # (a failing check leaves FAIL in the table)
    row.official_runtime = "FAIL"
    row.official_runtime = check(
        lambda m, x: runner.run(x, m), "official runtime on our .pte", official_expected
    )
    program = Runtime.get().load_program(pte)
    loaded: dict[str, Any] = {}

    def ours(method, inputs):
        if method not in loaded:
            loaded[method] = program.load_method(method)
        return loaded[method].execute(inputs)

    row.our_runtime = "FAIL"
    row.our_runtime = check(ours, "our runtime on our .pte", expected)
    assert set(row.ours.backends) <= {"XnnpackBackend"}, row.ours.backends
    if case.name in EXPECTED_DIFFERENCES:
        _, only_official, only_ours = EXPECTED_DIFFERENCES[case.name]
        assert (
            row.official.delegated - row.ours.delegated,
            row.ours.delegated - row.official.delegated,
        ) == (Counter(only_official), Counter(only_ours)), (
            f"{case.name}: {_difference(row.official, row.ours)}"
        )
        return
    assert (row.ours.delegates, row.ours.delegated_ops) == (
        row.official.delegates,
        row.official.delegated_ops,
    ), f"{case.name}: {_difference(row.official, row.ours)}"
    # the same operators, not only as many
    assert row.ours.delegated == row.official.delegated, (
        f"{case.name}: {_difference(row.official, row.ours)}"
    )
