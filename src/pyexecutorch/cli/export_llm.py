"""``pyexecutorch export-llm``: a Hugging Face causal LM to a ``.pte`` the LLM runners drive."""

from __future__ import annotations

import argparse
from pathlib import Path

from pyexecutorch.cli import common
from pyexecutorch.cli.common import CLIError, UsageError

HELP = "export a Hugging Face causal LM (Llama, Qwen, ...) to a .pte for the LLM runners"
DESCRIPTION = """\
Export a Hugging Face causal language model with a static KV cache:
load -> quantize -> export -> lower -> to_executorch -> write.

--model is a model folder (its weights, or random weights when it has only a
config.json) or a configuration .json (random weights). The program has
forward(tokens [1, seq], input_pos [1]) -> logits [1, vocab] and the constant
methods the runners read (get_max_seq_len, get_bos_id, get_eos_ids, ...): run it
with 'pyexecutorch generate' or the official runners.

--recipe xnnpack delegates the linears (and more) to XNNPACK; portable keeps
every operator on the portable kernels. --quantize 8da4w gives the linears int4
weights in groups of --group-size with int8 dynamic activations; int8 gives them
int8 per-channel weights. --embedding-quantize BITS,GROUP quantizes the embedding
table (8,0: int8 per row; 4,32: int4 in groups of 32)."""
EXAMPLES = """\
examples:
  pyexecutorch export-llm --model ./SmolLM2-135M --recipe xnnpack --quantize 8da4w -o smol.pte
  pyexecutorch export-llm --model config.json --recipe portable --quantize none \\
      --max-seq-length 64 --no-dynamic-shape -o tiny.pte
  pyexecutorch generate smol.pte --tokenizer ./SmolLM2-135M/tokenizer.json --prompt "Once"
"""

RECIPES = ("xnnpack", "portable")
QUANTIZE = ("8da4w", "int8", "none")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", required=True, metavar="DIR_OR_CONFIG", help="model folder or config .json"
    )
    p.add_argument("--recipe", choices=RECIPES, default="xnnpack", help="backend (default xnnpack)")
    p.add_argument(
        "--quantize", choices=QUANTIZE, default="none", help="linear layers (default none)"
    )
    p.add_argument(
        "--group-size", type=int, default=32, metavar="N", help="8da4w group size (default 32)"
    )
    p.add_argument(
        "--embedding-quantize", metavar="BITS,GROUP", help="embedding quantization, e.g. 8,0"
    )
    p.add_argument(
        "--max-seq-length",
        type=int,
        default=128,
        metavar="N",
        help="most tokens per forward call (default 128)",
    )
    p.add_argument(
        "--max-context-length",
        type=int,
        metavar="N",
        help="KV cache length (default: --max-seq-length)",
    )
    p.add_argument(
        "--no-dynamic-shape",
        action="store_true",
        help="forward takes one token per call (prefill token by token)",
    )
    p.add_argument(
        "--no-custom-sdpa",
        action="store_true",
        help="attend with ATen operators instead of llama::custom_sdpa / update_cache",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of random weights (default 0)")
    p.add_argument("-o", "--output", required=True, metavar="PTE", help="the .pte to write")


def run(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if out.is_dir():
        raise UsageError(f"-o {args.output} is a directory; give a file name like model.pte")
    if not Path(args.model).exists():
        raise CLIError(f"model not found: {args.model}")
    try:
        import torch  # noqa: F401, PLC0415
        import transformers  # noqa: F401, PLC0415
    except ImportError as e:
        raise CLIError(
            f"export-llm needs torch and transformers ({e.name} is missing); install them with: "
            "pip install 'pyexecutorch[export]' transformers"
        ) from None
    from pyexecutorch.extension.llm.export import (  # noqa: PLC0415
        ExportLlmConfig,
        ExportLlmConfigError,
        ModelSourceError,
        UnsupportedArchitectureError,
        export_llm,
    )

    try:
        config = ExportLlmConfig(
            max_seq_length=args.max_seq_length,
            max_context_length=args.max_context_length,
            use_sdpa_with_kv_cache=not args.no_custom_sdpa,
            enable_dynamic_shape=not args.no_dynamic_shape,
            qmode=None if args.quantize == "none" else args.quantize,
            group_size=args.group_size,
            embedding_quantize=args.embedding_quantize,
            xnnpack=args.recipe == "xnnpack",
            seed=args.seed,
        )
    except ExportLlmConfigError as e:
        raise UsageError(str(e)) from None
    try:
        et = export_llm(args.model, config=config, output=out)
    except (UnsupportedArchitectureError, ModelSourceError, ExportLlmConfigError) as e:
        raise CLIError(str(e)) from None
    print(f"{out}: {common.human_bytes(len(et.buffer))}")
    return 0
