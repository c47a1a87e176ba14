"""``pyexecutorch demo``: export a GPT-style model with a KV cache, generate with it in
the runtime (in a process where torch cannot be imported), and check the tokens
against torch eager; then export a small Hugging Face Llama with ``export_llm`` and
stream text from it with ``pyexecutorch generate``, checked against HF ``generate``."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from pyexecutorch.cli import common

HELP = "export a small GPT with a KV cache, generate without torch, compare with eager"
DESCRIPTION = """\
The whole path in one command:
  1. build the built-in example, a small GPT-style language model whose KV cache is a
     mutable buffer (random weights, fixed seed; pyexecutorch.examples.gpt),
  2. export it with torch.export and the pyexecutorch compiler to a .pte,
  3. load the .pte in the pyexecutorch runtime in a separate process in which torch
     is blocked, and generate tokens greedily, one call per token,
  4. check that the tokens equal torch eager's, and print the export time, the file
     size, the planned arena size and the per-token latency next to eager's;
  5. text: train a small tokenizer, export a random-weight Hugging Face Llama with
     pyexecutorch.extension.llm.export (XNNPACK, KV cache, dynamic length), run
     `pyexecutorch generate` on it with torch blocked, and check its greedy text
     against Hugging Face generate (needs the llm extra and transformers).
Exit status 1 when the tokens or the text differ."""
EXAMPLES = """\
examples:
  pyexecutorch demo
  pyexecutorch demo -n 48 --prompt 5,17,3
  pyexecutorch demo --out gpt.pte     # keep the program (then: pyexecutorch inspect gpt.pte)
  pyexecutorch demo --no-text         # only the GPT part
"""

# Starts the runtime half with torch blocked: any `import torch` raises ImportError.
WORKER_BOOT = (
    "import sys; sys.modules['torch'] = None; "
    "from pyexecutorch.examples.generate import worker; sys.exit(worker(sys.argv[1:]))"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--tokens", type=int, default=32, help="tokens to generate (default 32)")
    p.add_argument(
        "--prompt", default="1,2,3", help="comma-separated prompt token ids (default 1,2,3)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument(
        "--out", metavar="PTE", help="write the program here (default: a temporary directory)"
    )
    p.add_argument("--no-text", action="store_true", help="skip the text part (Llama + generate)")


def _parse_prompt(text: str, vocab: int) -> list[int]:
    try:
        tokens = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise common.UsageError(
            f"bad --prompt {text!r}: expected comma-separated token ids like 1,2,3"
        ) from None
    if not tokens:
        raise common.UsageError("--prompt needs at least one token")
    bad = [t for t in tokens if not 0 <= t < vocab]
    if bad:
        raise common.UsageError(f"--prompt token(s) {bad} outside the vocabulary [0, {vocab})")
    return tokens


def export_example(model: Any, path: Path) -> dict[str, float]:
    """Export ``model`` with torch.export + pyexecutorch.exir to ``path``; stage times."""
    import torch  # noqa: PLC0415

    from pyexecutorch.exir import to_edge  # noqa: PLC0415

    times = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        with torch.no_grad():
            ep = torch.export.export(model, model.example_inputs())
        times["torch.export"] = time.perf_counter() - start
        start = time.perf_counter()
        edge = to_edge(ep)
        times["to_edge"] = time.perf_counter() - start
        start = time.perf_counter()
        data = edge.to_executorch().buffer
        times["to_executorch"] = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return times


# `pyexecutorch <argv>` with torch blocked, as a user without torch runs it.
COMMAND_BOOT = (
    "import sys; sys.modules['torch'] = None; "
    "from pyexecutorch.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


def _runtime_env() -> dict[str, str]:
    """This environment, with this pyexecutorch first on the path of a child process."""
    import pyexecutorch  # noqa: PLC0415

    env = dict(os.environ)
    src = str(Path(pyexecutorch.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_worker(
    pte: Path, prompt: list[int], n: int, jit: bool = False, timeout: float = 600
) -> dict[str, Any]:
    """Generate in a subprocess where torch is blocked (numpy tier, or ``jit``: compiled tier)."""
    env = _runtime_env()
    cmd = [
        sys.executable,
        "-c",
        WORKER_BOOT,
        str(pte),
        "--prompt",
        ",".join(map(str, prompt)),
        "-n",
        str(n),
        "--jit",
        "1" if jit else "0",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        raise common.CLIError(
            f"the runtime process failed: {lines[-1] if lines else f'exit status {proc.returncode}'}"
        )
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise common.CLIError(
            f"the runtime process printed no result: {proc.stdout[-200:]!r}"
        ) from None


def _jit_available() -> bool:
    """Whether the runtime would use the compiled tier (numba installed, not switched off)."""
    import importlib.util  # noqa: PLC0415

    from pyexecutorch.runtime.tiers import JIT_ENV  # noqa: PLC0415

    return (
        os.environ.get(JIT_ENV, "").strip() != "0" and importlib.util.find_spec("numba") is not None
    )


def run(args: argparse.Namespace) -> int:
    if args.tokens < 1:
        raise common.UsageError(f"-n must be at least 1, got {args.tokens}")
    hs = common.human_seconds
    print(
        "pyexecutorch demo: a GPT-style LM with a KV cache, exported by pyexecutorch, run without torch\n"
    )
    import torch  # noqa: PLC0415

    from pyexecutorch.examples.generate import greedy  # noqa: PLC0415
    from pyexecutorch.examples.gpt import eager_step, make_model  # noqa: PLC0415

    model = make_model(args.seed)
    cfg = model.cfg
    prompt = _parse_prompt(args.prompt, cfg.vocab)
    if len(prompt) + args.tokens - 1 > cfg.ctx:
        raise common.UsageError(
            f"prompt ({len(prompt)}) + tokens ({args.tokens}) exceed the model's context of {cfg.ctx} positions"
        )
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model      KVCacheGPT: {cfg.layers} layers, width {cfg.dim}, {cfg.heads} heads, vocab {cfg.vocab}, "
        f"context {cfg.ctx}; {n_params / 1e3:.0f}k parameters (seed {args.seed})"
    )
    with tempfile.TemporaryDirectory(prefix="pyexecutorch-demo-") as tmp:
        pte = Path(args.out) if args.out else Path(tmp) / "gpt_kv.pte"
        print("export     ", end="", flush=True)
        times = export_example(model, pte)
        total = sum(times.values())
        print(" + ".join(f"{k} {hs(v)}" for k, v in times.items()) + f" = {hs(total)}")
        size = pte.stat().st_size
        print(f"program    {pte if args.out else pte.name}: {common.human_bytes(size)}")

        eager_model = make_model(args.seed)  # fresh caches
        # Eager on one thread like the runtime (small ops only lose from more), and kept
        # at one while the runtime processes run: torch's idle OpenMP workers spin after
        # work and would take the cores those processes are timed on.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            eager_tokens, eager_times, eager_logits = greedy(
                eager_step(eager_model), prompt, args.tokens
            )
            result = run_worker(pte, prompt, args.tokens)
            jit_result = (
                run_worker(pte, prompt, args.tokens, jit=True) if _jit_available() else None
            )
        finally:
            torch.set_num_threads(threads)
    ours_tokens = result["tokens"]
    arena = sum(result["arena_bytes"])
    print(
        f"runtime    loaded in {hs(result['load_seconds'])}; planned arena {common.human_bytes(arena)}"
    )
    if result["torch_loaded"]:
        raise common.CLIError("torch was imported in the runtime process")
    print(
        f"           torch blocked in the runtime process: {'yes' if not result['torch_loaded'] else 'NO'}"
    )
    print(f"\ngreedy generation: prompt {prompt} + {args.tokens} tokens")
    print(f"  torch eager   {' '.join(map(str, eager_tokens))}")
    print(f"  pyexecutorch  {' '.join(map(str, ours_tokens))}")
    import numpy as np  # noqa: PLC0415

    diff = float(np.max(np.abs(np.asarray(result["last_logits"]) - eager_logits)))
    same = ours_tokens == eager_tokens
    if same:
        print(
            f"  match: all {len(ours_tokens)} tokens equal (last step's max |logit difference| {diff:.2e})"
        )
    calls = len(eager_times)
    e_med, o_med = statistics.median(eager_times), statistics.median(result["step_seconds"])
    print(f"\nper-token latency, median over {calls} calls (one call per token)")
    print(f"  torch eager (1 thread) {hs(e_med):>10}")
    print(f"  pyexecutorch runtime   {hs(o_med):>10}   ({o_med / e_med:.2f}x eager; numpy tier)")
    if jit_result is None:
        print("  compiled tier          off (numba is not installed, or PYEXECUTORCH_JIT=0)")
    else:
        j_med = statistics.median(jit_result["step_seconds"])
        print(
            f"  compiled tier (numba)  {hs(j_med):>10}   ({j_med / e_med:.2f}x eager, "
            f"{j_med / o_med:.2f}x the numpy tier; loaded in {hs(jit_result['load_seconds'])}"
            ", compiling what the disk cache lacks)"
        )
        if jit_result["tokens"] != eager_tokens:
            raise common.CLIError(
                f"the compiled tier's tokens differ from torch eager: {jit_result['tokens']}"
            )
    print(
        f"\nexport {hs(total)}   .pte {common.human_bytes(size)}   arena {common.human_bytes(arena)}"
    )
    if not same:
        raise _differing_tokens(ours_tokens, eager_tokens)
    if not args.no_text:
        text_demo(args.seed)
    return 0


def _differing_tokens(ours_tokens: list[int], eager_tokens: list[int]) -> common.CLIError:
    pairs = list(zip(ours_tokens, eager_tokens, strict=False))
    first = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
    return common.CLIError(
        f"tokens differ from torch eager from generated token {first} on "
        f"(pyexecutorch {ours_tokens[first : first + 1]}, eager {eager_tokens[first : first + 1]})"
    )


def text_demo(seed: int, new_tokens: int = 32) -> None:
    """Export the text example with export_llm, stream from it with ``pyexecutorch
    generate`` in a process where torch is blocked, check the text against HF generate."""
    import importlib.util  # noqa: PLC0415

    print("\ntext generation: a Hugging Face Llama, export_llm, then `pyexecutorch generate`")
    missing = [m for m in ("transformers", "pytorch_tokenizers") if not importlib.util.find_spec(m)]
    if missing:
        print(f"  skipped: {', '.join(missing)} not installed (pip install 'pyexecutorch[llm]')")
        return
    import logging  # noqa: PLC0415

    import torch  # noqa: PLC0415

    # torchao reports its optional CUDA libraries, and torch a deprecation, at import.
    logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)

    # One torch thread: torch's idle OpenMP workers spin after the export, and on a small
    # machine they take the cores the generate process times its tokens on (40x slower).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _text_demo(seed, new_tokens)
    finally:
        torch.set_num_threads(threads)


def _text_demo(seed: int, new_tokens: int) -> None:
    from pyexecutorch.examples import text_llm  # noqa: PLC0415
    from pyexecutorch.extension.llm.export import export_llm  # noqa: PLC0415

    hs = common.human_seconds
    with tempfile.TemporaryDirectory(prefix="pyexecutorch-demo-text-") as tmp:
        tokenizer = text_llm.make_tokenizer(Path(tmp) / "tokenizer.json")
        model = text_llm.make_llama(seed)
        c = model.config
        params = sum(p.numel() for p in model.parameters())
        print(
            f"model      LlamaForCausalLM: {c.num_hidden_layers} layers, width {c.hidden_size}, "
            f"vocab {c.vocab_size}, context {text_llm.MAX_SEQ}; {params / 1e6:.1f}M parameters "
            f"(random, seed {seed}: the words are noise); tokenizer: byte-level BPE trained here"
        )
        pte = Path(tmp) / "llama.pte"
        start = time.perf_counter()
        export_llm(model, max_seq_length=text_llm.MAX_SEQ, xnnpack=True, output=pte, progress=False)
        print(
            f"export     export_llm (XNNPACK, KV cache, dynamic length) {hs(time.perf_counter() - start)}"
            f"; {pte.name}: {common.human_bytes(pte.stat().st_size)}"
        )
        argv = ["generate", str(pte), "--tokenizer", str(tokenizer), "--prompt", text_llm.PROMPT]
        argv += ["--temperature", "0", "--max-new-tokens", str(new_tokens), "--no-echo"]
        print("\n$ pyexecutorch generate llama.pte --tokenizer tokenizer.json \\")
        print(f"      --prompt {text_llm.PROMPT!r} --temperature 0 --max-new-tokens {new_tokens}")
        print(f"  {text_llm.PROMPT}", end="", flush=True)
        ours, rates = _stream_command(argv, Path(tmp) / "stderr.txt")
        print(f"  {rates}")
        want = text_llm.eager_text(model, tokenizer, text_llm.PROMPT, new_tokens)
    if ours != want:
        raise common.CLIError(
            f"the generated text differs from Hugging Face generate:\n  ours  {ours!r}\n  eager {want!r}"
        )
    print(f"  match: the same text as Hugging Face generate (greedy, {new_tokens} tokens at most)")


def _stream_command(argv: list[str], stderr_path: Path) -> tuple[str, str]:
    """Run ``pyexecutorch <argv>`` with torch blocked, echoing its stdout as it comes;
    (its stdout without the final newline, the last line of its stderr)."""
    with stderr_path.open("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", COMMAND_BOOT, *argv],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=_runtime_env(),
        )
        assert proc.stdout is not None
        pieces = []
        while piece := proc.stdout.read(1):
            pieces.append(piece)
            print(piece, end="", flush=True)
        status = proc.wait()
        err.seek(0)
        lines = [ln for ln in err.read().splitlines() if ln.strip()]
    if status != 0:
        raise common.CLIError(
            f"pyexecutorch generate failed: {lines[-1] if lines else f'exit status {status}'}"
        )
    return "".join(pieces).removesuffix("\n"), lines[-1] if lines else ""
