"""``pyexecutorch generate``: stream text from a ``.pte`` LLM (numpy runtime, no torch)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pyexecutorch.cli import common

HELP = "generate text with a .pte language model and a tokenizer"
DESCRIPTION = """\
Load a text-decoder .pte (export_llama's or optimum-executorch's layout, or ours) in
the pyexecutorch runtime (numpy only, no torch), tokenize the prompt with the
tokenizer file (HuggingFace tokenizer.json, tiktoken, SentencePiece .model; read
with the pytorch-tokenizers package) and stream the generated text to stdout. A
line giving prefill and decode tokens/s goes to stderr; on the compiled tier a first
run compiles the program's plans (announced on stderr, cached on disk for later runs),
and that time is reported beside the rates, not in them.

With --chat, each line read from stdin is a user turn (fed as typed); the model
keeps the conversation, so a turn only prefills its own tokens."""
EXAMPLES = """\
examples:
  pyexecutorch generate llama.pte --tokenizer tokenizer.json --prompt "Once upon a time"
  pyexecutorch generate llama.pte --tokenizer tokenizer.model --prompt "Hi" --temperature 0
  pyexecutorch generate llama.pte --tokenizer tokenizer.json --top-k 40 --top-p 0.9 --seed 1 --prompt "Hi"
  pyexecutorch generate llama.pte --tokenizer tokenizer.json --chat < turns.txt
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .pte file")
    p.add_argument("--tokenizer", required=True, help="the tokenizer file")
    p.add_argument("--prompt", help="the prompt (with --chat: the first turn)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=128,
        metavar="N",
        help="tokens to generate at most per turn (default 128; -1: until the context is full)",
    )
    p.add_argument(
        "--temperature", type=float, default=0.8, help="0 is greedy (default 0.8, as official)"
    )
    p.add_argument(
        "--top-k", type=int, default=0, metavar="K", help="keep the K likeliest (0: all)"
    )
    p.add_argument(
        "--top-p", type=float, default=1.0, metavar="P", help="nucleus sampling (1: all)"
    )
    p.add_argument("--seed", type=int, help="seed of the sampler (default: a fresh one)")
    p.add_argument("--bos", type=int, default=0, metavar="N", help="BOS tokens before the prompt")
    p.add_argument("--chat", action="store_true", help="read user turns from stdin")
    p.add_argument("--no-echo", action="store_true", help="do not print the prompt first")
    p.add_argument("--data", metavar="PTD", help="the .ptd file holding the program's weights")
    p.add_argument(
        "--jit",
        choices=("0", "1"),
        help="1: the compiled tier, 0: numpy only (default: the compiled tier where numba is "
        "installed; it is the faster on every program kind, dynamic lengths included)",
    )


def _print(piece: str) -> None:
    sys.stdout.write(piece)
    sys.stdout.flush()


def _turn(runner: Any, prompt: str, config: Any) -> None:
    """Generate after ``prompt``, streaming to stdout; the rates to stderr."""
    stats = []
    with common.compile_progress():  # a first run compiles its plans: say so, not hang
        runner.generate(prompt, config, _print, stats.append)
    _print("\n")
    print(stats[0].summary(), file=sys.stderr)


def _chat_turns(first: str | None) -> Any:
    if first:
        yield first
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            return
        line = line.rstrip("\n")
        if line.strip():
            yield line


def run(args: argparse.Namespace) -> int:
    from pyexecutorch.extension.llm.runner import (  # noqa: PLC0415 - loaded on use
        GenerationConfig,
        TextLLMRunner,
        TokenizerError,
    )

    if not args.chat and args.prompt is None:
        raise common.UsageError("--prompt is required (or --chat to read turns from stdin)")
    config = GenerationConfig(
        echo=not args.no_echo and not args.chat,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        num_bos=args.bos,
    )
    try:
        config.validate()
        jit = None if args.jit is None else args.jit == "1"
        runner = TextLLMRunner(args.model, args.tokenizer, args.data, jit=jit)
        runner.load()
        if not args.chat:
            _turn(runner, args.prompt, config)
            return 0
        for i, turn in enumerate(_chat_turns(args.prompt)):
            if i == 1:
                config.num_bos = 0  # BOS only opens the conversation
            _turn(runner, turn, config)
    # Missing files, the missing package, a program or prompt the runner cannot take
    # (ContextLengthError and UnsupportedProgramError are ValueErrors): one line each.
    except (FileNotFoundError, ImportError, ValueError, TokenizerError) as e:
        raise common.CLIError(common.first_line(e)) from e
    return 0
