"""``pyexecutorch``: the command line.

Each command lives in its own module with ``add_parser(subparsers)`` and
``run(args) -> int``; modules import their heavy dependencies (torch, the
compiler) inside ``run``, so ``run``, ``inspect`` and ``bench`` never import torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from pyexecutorch.cli.common import CLIError, UsageError, first_line

COMMANDS = (
    "export",
    "export-llm",
    "run",
    "inspect",
    "bench",
    "profile",
    "debug",
    "demo",
    "generate",
    "eval",
)

EPILOG = """\
examples:
  pyexecutorch demo
  pyexecutorch export pyexecutorch.examples.gpt:make_model --inputs 1x1:int64,1:int64 -o gpt.pte
  pyexecutorch inspect gpt.pte
  pyexecutorch run gpt.pte --random
  pyexecutorch bench gpt.pte -n 200

exit status: 0 success, 1 failure, 2 bad arguments.
Run 'pyexecutorch COMMAND --help' for a command's options.
"""


class _Parser(argparse.ArgumentParser):
    """argparse with errors as one line (and exit status 2)."""

    def error(self, message: str):  # noqa: ANN201 - argparse's signature
        err = UsageError(f"{message} (see '{self.prog} --help')")
        err.command = self.prog
        raise err


def _command_module(name: str):  # noqa: ANN202
    # "inspect" would shadow the standard library module inside the package.
    module = {"inspect": "inspect_cmd"}.get(name, name).replace("-", "_")
    return importlib.import_module(f"pyexecutorch.cli.{module}")


def build_parser() -> argparse.ArgumentParser:
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the full traceback of an error",
    )
    parser = _Parser(
        prog="pyexecutorch",
        description="ExecuTorch in Python: export PyTorch models to .pte programs and run them with numpy.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    parser.add_argument("--version", action="version", version=f"pyexecutorch {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        mod = _command_module(name)
        p = sub.add_parser(
            name,
            help=mod.HELP,
            description=mod.DESCRIPTION,
            epilog=mod.EXAMPLES,
            parents=[debug],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        mod.add_arguments(p)
        p.set_defaults(handler=mod.run)
    return parser


def _version() -> str:
    from pyexecutorch import __version__  # noqa: PLC0415

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    command = "pyexecutorch"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        debug = bool(getattr(args, "debug", False))
        if args.command is None:
            parser.print_help()
            return 2
        command = f"pyexecutorch {args.command}"
        return int(args.handler(args) or 0)
    except CLIError as e:
        if debug:
            raise
        print(f"{getattr(e, 'command', command)}: error: {e}", file=sys.stderr)
        return e.code
    except SystemExit as e:  # --help and --version
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as e:  # noqa: BLE001 - every failure is one line unless --debug
        if debug:
            raise
        name = type(e).__name__
        print(f"{command}: error: {name}: {first_line(e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
