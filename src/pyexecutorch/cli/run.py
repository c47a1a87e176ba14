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
        "--output", metavar="NPZ", help="save the outputs to this .npz (output_0, output_1, ...)"
    )


def run(args: argparse.Namespace) -> int:
    import numpy as np  # noqa: PLC0415

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
