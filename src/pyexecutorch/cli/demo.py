"""``pyexecutorch demo``: export a GPT-style model with a KV cache, generate with it in
the runtime (in a process where torch cannot be imported), and check the tokens
against torch eager."""

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
     size, the planned arena size and the per-token latency next to eager's.
Exit status 1 when the tokens differ."""
EXAMPLES = """\
examples:
  pyexecutorch demo
  pyexecutorch demo -n 48 --prompt 5,17,3
  pyexecutorch demo --out gpt.pte     # keep the program (then: pyexecutorch inspect gpt.pte)
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


def run_worker(
    pte: Path, prompt: list[int], n: int, jit: bool = False, timeout: float = 600
) -> dict[str, Any]:
    """Generate in a subprocess where torch is blocked (numpy tier, or ``jit``: compiled tier)."""
    import pyexecutorch  # noqa: PLC0415

    env = dict(os.environ)
    src = str(Path(pyexecutorch.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
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

    from pyexecutorch.runtime.compiled import JIT_ENV  # noqa: PLC0415

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
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # like the runtime; small ops only lose from more threads
        try:
            eager_tokens, eager_times, eager_logits = greedy(
                eager_step(eager_model), prompt, args.tokens
            )
        finally:
            torch.set_num_threads(threads)
        result = run_worker(pte, prompt, args.tokens)
        jit_result = run_worker(pte, prompt, args.tokens, jit=True) if _jit_available() else None
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
        pairs = list(zip(ours_tokens, eager_tokens, strict=False))
        first = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
        raise common.CLIError(
            f"tokens differ from torch eager from generated token {first} on "
            f"(pyexecutorch {ours_tokens[first : first + 1]}, eager {eager_tokens[first : first + 1]})"
        )
    return 0
