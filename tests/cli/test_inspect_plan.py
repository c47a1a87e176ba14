"""``pyexecutorch inspect --plan``: each method loaded and what loading decided."""

from __future__ import annotations

import pytest

from pyexecutorch.runtime import Runtime


def test_plan_prints_each_method_as_method_plan_describes_it(cli, ptes):
    pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")
    r = cli("inspect", ptes["multi_method"], "--plan", "--tier", "compiled")
    assert r.rc == 0, r.err
    program = Runtime.get().load_program(ptes["multi_method"].read_bytes(), jit=True)
    want = [program.load_method(n).plan.describe() for n in sorted(program.method_names)]
    assert r.out == "\n".join(want) + "\n"
    assert r.out.startswith("method 'decode': compiled tier")


def test_plan_on_the_numpy_tier_for_one_method(cli, ptes):
    r = cli("inspect", ptes["multi_method"], "--plan", "--tier", "numpy", "--method", "forward")
    assert r.rc == 0, r.err
    assert r.out.startswith("method 'forward': numpy tier\n")
    assert "method 'decode'" not in r.out
    verbose = cli("inspect", ptes["mlp"], "--plan", "--tier", "numpy", "--verbose")
    assert "chain 0 source:" in verbose.out and "def run(v):" in verbose.out


def test_plan_options_errors(cli, ptes):
    r = cli("inspect", ptes["mlp"], "--plan", "--method", "nope")
    assert r.rc == 1
    assert r.err == (
        f"pyexecutorch inspect: error: {ptes['mlp']} has no method 'nope' (methods: ['forward'])\n"
    )
    r = cli("inspect", ptes["mlp"], "--tier", "numpy")
    assert r.rc == 1
    assert "--tier and --method choose what --plan loads: use them with --plan" in r.err
    r = cli("inspect", ptes["mlp"], "--plan", "--sizes")
    assert r.rc == 1
    assert "--plan and --sizes print different things: choose one" in r.err
