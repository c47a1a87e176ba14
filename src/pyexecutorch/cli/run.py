"""``pyexecutorch run``: execute a method of a ``.pte`` once and print its outputs."""

from __future__ import annotations

import argparse
import time

from pyexecutorch.cli import common

HELP = "run a method of a .pte once and print its outputs"
DESCRIPTION = """\
Load a .pte in the pyexecutorch runtime (numpy only, no torch), run one method and
print each output's dtype, shape and a short summary. Without --inputs the inputs
are random, built from the method's metadata: floats from a standard normal,
integers in [0, 4), booleans at random; dynamic dimensions take their upper bound."""
EXAMPLES = """\
examples:
  pyexecutorch run model.pte                       # random inputs
  pyexecutorch run model.pte --inputs x.npy y.npy  # one .npy per input, in order
  pyexecutorch run model.pte --inputs inputs.npz --output out.npz
  pyexecutorch run model.pte --method decode --data model.ptd
  pyexecutorch run model.bpte --verify             # every bundled test case, pass/fail
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .pte file")
    p.add_argument("--method", help="the method to run (default: forward, or the only method)")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--inputs",
        nargs="+",
        metavar="FILE",
        help="one .npy per input, or one .npz (arrays in order)",
    )
    src.add_argument(
        "--random",
        action="store_true",
        help="random inputs from the method's metadata (the default)",
    )
    common.add_seed_and_data_options(p)
    p.add_argument(
        "--verify",
        action="store_true",
        help="for a bundled program (.bpte): run every test case and check its expected outputs",
    )
    p.add_argument("--rtol", type=float, default=1e-5, help="--verify's relative tolerance")
    p.add_argument("--atol", type=float, default=1e-8, help="--verify's absolute tolerance")
    p.add_argument(
        "--output", metavar="NPZ", help="save the outputs to this .npz (output_0, output_1, ...)"
    )


def verify_bundled(args: argparse.Namespace) -> int:
    """Run every test case of a bundled program; 0 when all pass."""
    from pyexecutorch.devtools.bundled_program.runtime import (  # noqa: PLC0415
        BundledModule,
        BundledVerificationError,
    )

    with open(args.model, "rb") as f:
        module = BundledModule(f.read())
    methods = [args.method] if args.method else module.method_names
    failed = total = 0
    for name in methods:
        try:
            count = module.num_test_cases(name)
        except KeyError as e:
            raise common.CLIError(e.args[0]) from e
        for i in range(count):
            total += 1
            start = time.perf_counter()
            try:
                module.verify_result_with_bundled_expected_output(name, i, args.rtol, args.atol)
            except BundledVerificationError as e:
                failed += 1
                print(f"{name} case {i}: FAIL: {common.first_line(e)}")
                continue
            except Exception as e:
                if not common._ours(e):
                    raise
                failed += 1
                print(f"{name} case {i}: ERROR: {common.first_line(e)}")
                continue
            print(f"{name} case {i}: pass ({common.human_seconds(time.perf_counter() - start)})")
    print(
        f"{total - failed} of {total} test case(s) passed (rtol {args.rtol:g}, atol {args.atol:g})"
    )
    return 1 if failed else 0


def _is_bundled(path: str) -> bool:
    from pyexecutorch.schema.bundled_program import is_bundled_program  # noqa: PLC0415

    try:
        with open(path, "rb") as f:
            return is_bundled_program(f.read(8))
    except OSError:
        return False


def run(args: argparse.Namespace) -> int:
    import numpy as np  # noqa: PLC0415

    if _is_bundled(args.model):
        if not args.verify:
            raise common.CLIError(f"{args.model} is a bundled program: run it with --verify")
        return verify_bundled(args)
    if args.verify:
        raise common.CLIError(f"--verify needs a bundled program (.bpte); {args.model} is not one")
    program = common.load_program(args.model, args.data)
    method_name = common.resolve_method(program, args.method, args.model)
    inputs, origin = common.method_inputs(args, program, method_name)
    start = time.perf_counter()
    method = common.load_method(program, method_name)
    load_s = time.perf_counter() - start
    print(f"method {method_name!r}: {len(inputs)} input(s), {origin}")
    for i, x in enumerate(inputs):
        print(f"  input {i}: {common.describe_value(x)}")
    start = time.perf_counter()
    outputs = common.as_numpy(common.execute(method, inputs))
    run_s = time.perf_counter() - start
    print(
        f"{len(outputs)} output(s) in {common.human_seconds(run_s)} (load {common.human_seconds(load_s)}):"
    )
    for i, y in enumerate(outputs):
        print(f"  output {i}: {common.describe_value(y)}")
    if args.output:
        arrays = {f"output_{i}": np.asarray(y) for i, y in enumerate(outputs)}
        path = (
            args.output if args.output.endswith(".npz") else args.output + ".npz"
        )  # as numpy names it
        np.savez(path, **arrays)
        print(f"saved {len(arrays)} output(s) to {path}")
    return 0
