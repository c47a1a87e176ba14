"""LLM generation: our ``TextLLMRunner`` against the official one, on the same ``.pte`` files.

One run measures both runtimes at 1 and 2 threads on a realistic-size random-weight
Llama (dim 512, 4 layers, vocabulary 4096, context 512), exported once by the official
``export_llama`` (XNNPACK, dynamic shapes, fp32 and 8da4w) with a seeded checkpoint and
cached under ``.cache/llm_bench/``. Each (runtime, program, threads) runs in its own
subprocess, so that its peak memory is its own and its thread pools start at the count
asked for: a warm-up generation, then the measured one.

Measured per run, the same way on both sides (wall clock, from the token callback):
first-token latency (from the ``generate`` call to the first streamed token), prefill
tokens/s (prompt tokens over that latency), decode tokens/s (tokens after the first over
the time between the first and the last), peak RSS, and the CPU time over wall time of
the decode (the threads a side really keeps busy).

    python benchmarks/bench_llm.py [--new-tokens 128] [--threads 1 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import ROOT  # noqa: E402

CACHE = ROOT / ".cache" / "llm_bench"
PARAMS = {
    "dim": 512,
    "n_layers": 4,
    "n_heads": 8,
    "n_kv_heads": 4,
    "vocab_size": 4096,
    "hidden_dim": 1536,
    "norm_eps": 1e-5,
}
CONTEXT = 512
BOS_ID, EOS_ID = 0, 1
GROUP_SIZE = 32
PROGRAMS = {
    "fp32": ["-X"],
    "8da4w": ["-X", "-qmode", "8da4w", "-G", str(GROUP_SIZE)],
}
PROMPT_WORDS = 60  # about 100 prompt tokens


# ------------------------------------------------------------------------------ files


def _corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [
        " ".join(
            "".join(rng.choice(letters[: rng.randint(6, 26)]) for _ in range(rng.randint(2, 7)))
            for _ in range(12)
        )
        for _ in range(n)
    ]


def tokenizer_path() -> Path:
    """A byte-level BPE tokenizer of exactly ``vocab_size`` tokens (BOS 0, EOS 1), trained on
    random words, putting BOS before a prompt as Llama 3's does."""
    path = CACHE / "tokenizer.json"
    if path.exists():
        return path
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=PARAMS["vocab_size"],
        special_tokens=["<|begin_of_text|>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(20000, 0), trainer)
    if tok.get_vocab_size() != PARAMS["vocab_size"]:
        raise RuntimeError(f"the tokenizer has {tok.get_vocab_size()} tokens, not the model's")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", BOS_ID)]
    )
    CACHE.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def prompt() -> str:
    return " ".join(_corpus(PROMPT_WORDS // 12, 1))


def _banned(tokenizer: Path) -> list[int]:
    """Special tokens and the byte tokens that are only part of a UTF-8 character (the
    official Python callback raises on a partial character): never chosen."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    partial = [i for i in range(tok.get_vocab_size()) if "\ufffd" in tok.decode([i])]
    return sorted({BOS_ID, EOS_ID, *partial})


def _checkpoint(banned: list[int]) -> dict[str, Any]:
    """Seeded weights in the official ``Transformer``'s names at the benchmark's size, made
    as the official-program tests make theirs (banned tokens' logits held below zero)."""
    from tests.llm._official_llm import checkpoint

    return checkpoint(banned, PARAMS)


def program_path(kind: str, tokenizer: Path) -> Path:
    """The ``.pte`` of ``kind`` (fp32 / 8da4w), exported by ``export_llama`` once."""
    flags = PROGRAMS[kind]
    key = hashlib.sha256(json.dumps([PARAMS, CONTEXT, flags, 2]).encode()).hexdigest()[:12]
    path = CACHE / f"llama_{kind}_{key}.pte"
    if path.exists():
        return path
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "params.json").write_text(json.dumps(PARAMS))
        torch.save(_checkpoint(_banned(tokenizer)), root / "ckpt.pth")
        meta = json.dumps({"get_bos_id": BOS_ID, "get_eos_ids": [EOS_ID]})
        command = [
            sys.executable, "-m", "executorch.examples.models.llama.export_llama",
            "-p", str(root / "params.json"), "-c", str(root / "ckpt.pth"),
            "--model", "llama3", "-kv", "--use_sdpa_with_kv_cache",
            "--max_seq_length", str(CONTEXT), "--max_context_length", str(CONTEXT),
            "-m", meta, *flags, "-o", str(root), "-n", "model.pte",
        ]  # fmt: skip
        print(f"exporting {kind} with export_llama ...", flush=True)
        done = subprocess.run(command, capture_output=True, text=True, cwd=root, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"export_llama failed on {kind}:\n{done.stderr[-4000:]}")
        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_bytes((root / "model.pte").read_bytes())
    return path


# ----------------------------------------------------------------------------- worker


def _cpu_s() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _generate(runner: Any, config: Any, text: str) -> dict[str, Any]:
    """One measured generation: the timestamps of the streamed pieces and the CPU time."""
    import time

    stamps: list[float] = []
    cpu: list[float] = []

    def callback(piece: str) -> None:
        stamps.append(time.perf_counter())
        if len(stamps) == 1:
            cpu.append(_cpu_s())

    start_cpu, start = _cpu_s(), time.perf_counter()
    runner.generate(text, config, callback)
    end_cpu = _cpu_s()
    first = stamps[0] - start
    decode = stamps[-1] - stamps[0]
    return {
        "tokens": len(stamps),
        "first_token_ms": first * 1000,
        "first_token_cpu_ms": (cpu[0] - start_cpu) * 1000,
        "decode_tokens_per_s": (len(stamps) - 1) / decode,
        "decode_cpu_ms_per_token": (end_cpu - cpu[0]) * 1000 / (len(stamps) - 1),
        "decode_cpu_per_wall": (end_cpu - cpu[0]) / decode,
    }


def worker(side: str, pte: str, tokenizer: str, threads: int, new_tokens: int) -> dict[str, Any]:
    import resource

    text = prompt()
    if side == "official":
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
        import executorch.kernels.quantized  # noqa: F401
        from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
        from executorch.extension.pybindings import portable_lib

        portable_lib._unsafe_reset_threadpool(threads)
    else:
        from pyexecutorch.extension.llm.runner import GenerationConfig, TextLLMRunner
        from pyexecutorch.runtime.threads import set_threads

        set_threads(threads)
    runner = TextLLMRunner(pte, tokenizer)

    def config(n: int) -> Any:
        return GenerationConfig(echo=False, temperature=0.0, max_new_tokens=n, seq_len=CONTEXT)

    for _ in range(2):  # warm-ups: each shape (the prompt's length, one token) seen twice
        runner.generate(text, config(4), lambda piece: None)
        runner.reset()
    result = _generate(runner, config(new_tokens), text)
    from tokenizers import Tokenizer

    prompt_tokens = len(Tokenizer.from_file(tokenizer).encode(text).ids)
    result["prompt_tokens"] = prompt_tokens
    result["prefill_tokens_per_s"] = prompt_tokens / (result["first_token_ms"] / 1000)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["os_threads"] = len(os.listdir("/proc/self/task"))
    result["load_average"] = os.getloadavg()[0]  # the machine's 1-minute load at the end
    return result


def run_worker(side: str, pte: Path, tokenizer: Path, threads: int, new_tokens: int) -> dict:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = str(threads)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable, __file__, "--worker", side, "--pte", str(pte),
            "--tokenizer", str(tokenizer), "--threads", str(threads),
            "--new-tokens", str(new_tokens), "--out", str(out),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1200)
        if done.returncode != 0:
            return {"error": done.stderr[-2000:]}
        return json.loads(out.read_text())


# ------------------------------------------------------------------------------ table

COLUMNS = (
    ("decode_tokens_per_s", "decode tok/s", ".1f", True),
    ("prefill_tokens_per_s", "prefill tok/s", ".0f", True),
    ("first_token_ms", "first token ms", ".1f", False),
    ("peak_rss_mb", "peak RSS MB", ".0f", False),
    ("decode_cpu_ms_per_token", "decode CPU ms/token", ".2f", False),
    ("first_token_cpu_ms", "first token CPU ms", ".1f", False),
)


def table(results: dict[str, dict[str, Any]]) -> str:
    """A markdown table: each measure, ours / official and the ratio (ours over theirs for
    rates, theirs over ours for times and memory: above 1 means ours is better)."""
    head = "| program | threads | " + " | ".join(
        f"{title} ours / official (ratio)" for _, title, _, _ in COLUMNS
    )
    lines = [head + " | CPU/wall decode ours / official |", "|" + "---|" * (len(COLUMNS) + 3)]
    for key in sorted({k.rsplit("/", 1)[0] for k in results}):
        ours, theirs = results[f"{key}/ours"], results[f"{key}/official"]
        kind, threads = key.split("/")
        cells = [kind, threads]
        for field, _, fmt, higher in COLUMNS:
            if "error" in ours or "error" in theirs:
                cells.append("error")
                continue
            a, b = ours[field], theirs[field]
            r = a / b if higher else b / a
            cells.append(f"{a:{fmt}} / {b:{fmt}} ({r:.2f})")
        if "error" in ours or "error" in theirs:
            cells.append("-")
        else:
            cells.append(f"{ours['decode_cpu_per_wall']:.2f} / {theirs['decode_cpu_per_wall']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--export-only", action="store_true")
    parser.add_argument("--worker", choices=("ours", "official"))
    parser.add_argument("--pte")
    parser.add_argument("--tokenizer")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.worker:
        result = worker(args.worker, args.pte, args.tokenizer, args.threads[0], args.new_tokens)
        args.out.write_text(json.dumps(result))
        return
    tokenizer = tokenizer_path()
    paths = {kind: program_path(kind, tokenizer) for kind in args.programs}
    if args.export_only:
        return
    results: dict[str, dict[str, Any]] = {}
    for kind, path in paths.items():
        for threads in args.threads:
            for side in ("ours", "official"):
                r = run_worker(side, path, tokenizer, threads, args.new_tokens)
                results[f"{kind}/{threads}/{side}"] = r
                print(f"{kind} {threads} thread(s) {side}: {json.dumps(r)[:300]}", flush=True)
    print(table(results))
    loads = [r["load_average"] for r in results.values() if "load_average" in r]
    threads = {k: r["os_threads"] for k, r in results.items() if "os_threads" in r}
    if loads:
        print(f"load average (1 min) at the end of each run: {min(loads):.1f}-{max(loads):.1f}")
    print("threads in each process at the end (/proc/self/task):", threads)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
