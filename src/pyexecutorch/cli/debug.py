"""``pyexecutorch debug``: where a ``.pte`` starts to give other numbers than PyTorch."""

from __future__ import annotations

import argparse

from pyexecutorch.cli import common

HELP = "compare a .pte with its PyTorch module operator by operator"
DESCRIPTION = """\
Run a method of a .pte in the pyexecutorch runtime with every intermediate
output recorded (inside delegates too), run the PyTorch module it was compiled
from, and match the two through debug handles. Prints each operator in program
order with its largest absolute and relative error and its source line, and
flags the first one beyond the tolerance. The debug handles come from
--etrecord, or else the module is compiled again (lowered with --partitioner)
and must give the same instructions as the .pte.

exit status: 0 every output within tolerance, 1 a divergence (or an error)."""
EXAMPLES = """\
examples:
  pyexecutorch debug model.pte --against my_model.py:Net
  pyexecutorch debug model.pte --against my_model.py:Net --inputs x.npy --atol 1e-4
  pyexecutorch debug model.pte --against my_model.py:Net --etrecord model.etrecord
  pyexecutorch debug model.pte --against my_model.py:Net \\
      --partitioner pyexecutorch.backends.example.aot:ExamplePartitioner
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .pte file")
    p.add_argument(
        "--against",
        required=True,
        metavar="TARGET",
        help="the PyTorch module: FILE.py:NAME or MODULE:NAME (a class, factory or instance)",
    )
    p.add_argument(
        "--inputs",
        nargs="+",
        metavar="FILE",
        help="one .npy per input, or one .npz (default: random)",
    )
    p.add_argument("--etrecord", metavar="PATH", help="the ETRecord saved when the .pte was made")
    p.add_argument(
        "--partitioner",
        metavar="TARGET",
        help="MODULE:NAME of the partitioner the .pte was lowered with",
    )
    p.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance (default 1e-5)")
    p.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance (default 1e-6)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")


def run(args: argparse.Namespace) -> int:
    from pyexecutorch.cli.export import build_module, resolve_target  # noqa: PLC0415
    from pyexecutorch.devtools.numeric import compare  # noqa: PLC0415

    program = common.load_program(args.model)
    method = common.resolve_method(program, None, args.model)
    inputs, origin = common.method_inputs(args, program, method)
    module, _ = build_module(resolve_target(args.against), args.against)
    partitioner = None
    if args.partitioner:
        made = resolve_target(args.partitioner)
        partitioner = [made() if isinstance(made, type) else made]
    try:
        result = compare(
            module,
            args.model,
            inputs,
            rtol=args.rtol,
            atol=args.atol,
            etrecord=args.etrecord,
            partitioner=partitioner,
            method=method,
        )
    except ValueError as e:
        raise common.CLIError(common.first_line(e)) from e
    print(f"{args.model} against {args.against}, inputs {origin}:")
    print(result)
    return 0 if result.first_divergence is None else 1
