"""``pyexecutorch profile``: per-operator timings (needs ETDump support, not there yet)."""

from __future__ import annotations

import argparse

from pyexecutorch.cli import common

HELP = "per-operator timings with ETDump (not available yet)"
DESCRIPTION = """\
Run a method with ETDump event tracing and print the Inspector's table of
per-operator timings. Not available yet: it needs ETDump support in
pyexecutorch.devtools. Use 'pyexecutorch bench' for whole-method latency."""
EXAMPLES = """\
examples:
  pyexecutorch profile model.pte
"""

MESSAGE = "not available yet: needs ETDump support (use 'pyexecutorch bench' for method latency)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .pte file")
    p.add_argument("--method", help="the method to profile (default: forward)")


def run(args: argparse.Namespace) -> int:
    raise common.CLIError(MESSAGE)
