"""Operator facts: what each kernel family declares to the registry for the runtime's
compiled lowering (kernels/<family>/facts.py), and the runtime naming no operator."""

from __future__ import annotations

import dataclasses
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
    offer,
    operator_names,
    options_of,
)
from pyexecutorch.runtime.layout import ACCESS_RULES

RUNTIME = Path(__file__).resolve().parents[2] / "src" / "pyexecutorch" / "runtime"


def test_every_declared_operator_has_a_kernel():
    fields = [f.name for f in dataclasses.fields(OperatorFacts)]
    names = {n for field in fields for n in declared(field)}
    assert names and [n for n in sorted(names) if get_kernel(n) is None] == []
    # (a run-time view names the copy that stands for it: a registered kernel too)
    copies = set(declared("run_time_view").values())
    assert copies and all(get_kernel(n) is not None for n in copies)


def test_every_executorch_prim_kernel_is_stack_style():
    # (the runtime used to know them by their namespace; now each is declared)
    prim = [n for n in operator_names() if n.startswith("executorch_prim::")]
    assert prim and [n for n in prim if not facts_of(n).stack_style] == []
    assert facts_of("aten::sym_size.int").stack_style and not facts_of("aten::add.out").stack_style


def test_a_fact_has_its_declared_kind():
    with pytest.raises(TypeError, match=r"^operator fact 'impure' must be bool$"):
        OperatorFacts(impure=1)
    with pytest.raises(TypeError, match=r"^operator fact 'copy_source' must be int$"):
        OperatorFacts(copy_source=True)
    with pytest.raises(TypeError, match=r"^operator fact 'channels_last_step' must be a function"):
        OperatorFacts(channels_last_step=3)
    with pytest.raises(ValueError, match=r"^unknown shape_from_data 'sometimes'"):
        OperatorFacts(shape_from_data="sometimes")
    with pytest.raises(ValueError, match=r"^run_time_view 'view_copy' is not an operator name$"):
        OperatorFacts(run_time_view="view_copy")


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


# An operator's program name (``aten::add.out``, ``llama::custom_sdpa.out``,
# ``executorch_prim::et_view.default``); the runtime's own C++ names (``Method::init``)
# start with a capital and are not operators.
OPERATOR_NAME = re.compile(r"\b[a-z_]+::[a-z_0-9]+")


def test_the_runtime_names_no_operator():
    # Every operator table lives with its family's kernels (kernels/<family>/facts.py),
    # which the runtime reads through facts_of (issue 26).
    naming = {
        p.name: OPERATOR_NAME.findall(p.read_text())
        for p in RUNTIME.glob("*.py")
        if OPERATOR_NAME.search(p.read_text())
    }
    assert naming == {}
    assert OPERATOR_NAME.search('"aten::add.out", "llama::update_cache.out"')
    assert not OPERATOR_NAME.search("Method::init, Program::load_method")


# ------------------------------------------------------------------ the fast-path contract


def test_a_callable_offers_what_it_is_given():
    assert fast_path_of(None) == FastPath() == fast_path_of(lambda *a: None)

    def fast(*args):
        return args[-1]

    assert offer(fast, step=(print, (1, 2)), fills_outputs=True) is fast
    assert fast_path_of(fast) == FastPath(step=(print, (1, 2)), fills_outputs=True)

    class Step:  # a class offers for all its instances
        def __call__(self, *args):
            return args[-1]

    offer(Step, fills_outputs=True)
    assert fast_path_of(Step()) == FastPath(fills_outputs=True)


def test_a_fast_path_is_refused_a_bare_attribute():
    def fast(*args):
        return args[-1]

    fast.step, fast.fills_outputs = (print, (1, 2)), True
    with pytest.raises(TypeError, match=r"offers \['fills_outputs', 'step'\] as bare attributes"):
        fast_path_of(fast)

    class Filling:
        fills_outputs = True

    with pytest.raises(TypeError, match=r"offers \['fills_outputs'\] as bare attributes"):
        fast_path_of(Filling())


def test_an_offer_is_validated():
    def fast(*args):
        return args[-1]

    with pytest.raises(TypeError, match=r"^unknown fast path facts \['fills'\] offered$"):
        offer(fast, fills=True)
    with pytest.raises(TypeError, match=r"^fast path fact 'fills_outputs' must be a bool$"):
        offer(fast, fills_outputs=1)
    with pytest.raises(TypeError, match=r"^fast path fact 'step' must be \(function, arguments"):
        offer(fast, step=(print,))
    with pytest.raises(TypeError, match=r"^fast path fact 'step' must be"):
        offer(fast, step=[(print, (1,), True)])  # (a list of calls is unchecked)
    with pytest.raises(TypeError, match=r"^fast path fact 'pieces' must be a tuple of"):
        offer(fast, pieces=[(0, slice(None))])
    with pytest.raises(TypeError, match=r"^fast path fact 'view_of_input' must be a function"):
        offer(fast, view_of_input=3)
    assert fast_path_of(fast) == FastPath()  # (nothing half-offered)
    offer(fast, step=[(print, (1,)), (print, [2])], pieces=((0, slice(None)),))
    assert fast_path_of(fast).step == [(print, (1,)), (print, [2])]


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


@pytest.mark.parametrize(
    ("module", "decorator", "table", "what"),
    [
        ("registry", "specializer", "_SPECIALIZERS", "specializer"),
        ("registry", "compiled_form", "_COMPILED_FORMS", "compiled form"),
        ("registry", "cell_step", "_CELL_STEPS", "cell step"),
        ("checks", "argument_check", "_CHECKS", "argument check"),
    ],
)
def test_a_name_registered_twice_is_refused(module, decorator, table, what):
    import importlib

    owner = importlib.import_module(f"pyexecutorch.kernels.{module}")
    register, entries = getattr(owner, decorator), getattr(owner, table)
    register("test::twice.out")(len)
    try:
        with pytest.raises(ValueError, match=rf"^{what} 'test::twice.out' is registered twice$"):
            register("test::twice.out")(abs)
        assert entries["test::twice.out"] is len
    finally:
        del entries["test::twice.out"]
