"""Operator facts: what each kernel family declares to the registry for the runtime's
compiled lowering (kernels/<family>/facts.py), and the runtime naming no operator."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from pyexecutorch.kernels import registry
from pyexecutorch.kernels.registry import (
    FAST_PATH_OPTIONS,
    LAYOUT_RULES,
    NO_FACTS,
    FastPath,
    OperatorFacts,
    Product,
    declare,
    declared,
    facts_of,
    fast_path_of,
    get_kernel,
    get_specializer,
    operator_names,
    options_of,
)
from pyexecutorch.runtime.layout import ACCESS_RULES

RUNTIME = Path(__file__).resolve().parents[2] / "src" / "pyexecutorch" / "runtime"


def test_every_declared_operator_has_a_kernel():
    names = {
        n for field in ("layout", "copy_source", "product", "stack_style") for n in declared(field)
    }
    names |= set(declared("traced_as_whole")) | set(declared("step_only_when_whole"))
    assert names and all(get_kernel(n) is not None for n in sorted(names))


def test_every_layout_rule_has_its_access_in_the_runtime():
    assert set(ACCESS_RULES) == LAYOUT_RULES
    assert set(declared("layout").values()) == LAYOUT_RULES


def test_channels_last_steps_come_with_a_layout_rule():
    steps = declared("channels_last_step")
    assert steps and all(facts_of(n).layout is not None for n in steps)


def test_products_name_their_operands_within_the_kernel_arguments():
    for name, product in declared("product").items():
        assert isinstance(product, Product)
        used = [product.a, product.b, *product.unit_scales]
        used += [] if product.bias is None else [product.bias]
        assert len(set(used)) == len(used), name


def test_an_undeclared_operator_has_no_facts():
    assert facts_of("aten::no_such_operator.out") is NO_FACTS
    assert NO_FACTS == OperatorFacts()


def test_a_fact_is_declared_once(monkeypatch):
    monkeypatch.setattr(registry, "_FACTS", {})
    declare("test::op.out", traced_as_whole=True)
    declare("test::op.out", copy_source=0)  # another fact of the same operator
    assert facts_of("test::op.out") == OperatorFacts(traced_as_whole=True, copy_source=0)
    with pytest.raises(
        ValueError, match=r"^fact 'copy_source' of 'test::op.out' is declared twice$"
    ):
        declare("test::op.out", copy_source=1)
    with pytest.raises(TypeError, match=r"unknown operator facts \['fast'\] declared"):
        declare("test::other.out", fast=True)
    with pytest.raises(ValueError, match=r"^unknown layout rule 'diagonal'"):
        declare("test::other.out", layout="diagonal")
    assert facts_of("test::other.out") is NO_FACTS  # (nothing half-declared)


# Runtime modules that still name operators (issue 26: each moves its table to the
# families' facts as its owner splits it; fast_paths, resolution and writer are where
# method.py's split puts its tables). No other runtime module may start naming one.
STILL_NAMING_OPERATORS = {
    "epilogue.py",
    "etdump.py",
    "fast_paths.py",
    "fold.py",
    "fusion.py",
    "fusion_reductions.py",
    "method.py",
    "resolution.py",
    "shape_plans.py",
    "signatures.py",
    "verify.py",
    "writer.py",
}


def test_the_runtime_names_no_operator_outside_the_listed_modules():
    naming = {p.name for p in RUNTIME.glob("*.py") if re.search(r"aten::", p.read_text())}
    assert naming and naming <= STILL_NAMING_OPERATORS
    assert "layout.py" not in naming and "whole_method.py" not in naming


# ------------------------------------------------------------------ the fast-path contract


def test_a_callable_offers_what_its_attributes_say():
    assert fast_path_of(None) == FastPath() == fast_path_of(lambda *a: None)

    def fast(*args):
        return args[-1]

    fast.step, fast.fills_outputs = (print, (1, 2)), True
    assert fast_path_of(fast) == FastPath(step=(print, (1, 2)), fills_outputs=True)


def test_a_split_fast_path_offers_its_pieces():
    a = np.arange(24, dtype=np.float32).reshape(6, 4)
    outs = [np.empty((2, 4), np.float32), np.empty((4, 4), np.float32)]
    special = get_specializer("aten::split_with_sizes_copy.out")
    fast = special(a, (2, 4), 0, outs)
    offered = fast_path_of(fast)
    assert offered.fills_outputs and offered.step is None
    assert [i for i, _ in offered.pieces] == [0, 1]
    for i, key in offered.pieces:  # each output is the copy of its key into the input
        np.testing.assert_array_equal(fast(a, (2, 4), 0, outs)[i], a[key])


def test_every_specializer_takes_only_options_the_runtime_passes():
    for name in operator_names():
        special = get_specializer(name)
        if special is None:
            continue
        parameters = inspect.signature(special).parameters.values()
        keyword = {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
        assert keyword <= FAST_PATH_OPTIONS.keys(), (name, keyword)
        # (the runtime passes an option only when it applies: each has a default)
        taken = {p.name: p.default for p in parameters if p.name in options_of(special)}
        assert inspect.Parameter.empty not in taken.values(), (name, taken)
