"""Greedy generation with a one-token-per-call language model, without torch.

``greedy(step, prompt, n)`` feeds the prompt one token at a time, then appends the
argmax of each step's logits ``n`` times. ``step(token, pos)`` returns the logits
as a 1-D array; :func:`runtime_step` builds one over a loaded method.

``worker(argv)`` is the runtime half of the demo: it loads a ``.pte`` in our
runtime, generates, and prints one JSON line (tokens, timings, arena sizes). The
demo starts it in a subprocess with torch blocked.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

Step = Callable[[int, int], np.ndarray]


def greedy(step: Step, prompt: Sequence[int], n: int) -> tuple[list[int], list[float], np.ndarray]:
    """``(generated tokens, seconds per call, last logits)``."""
    if not prompt:
        raise ValueError("the prompt needs at least one token")
    times: list[float] = []
    logits = np.zeros(0)
    tokens = list(prompt)
    generated: list[int] = []
    for pos in range(len(prompt) + n - 1):
        start = time.perf_counter()
        logits = step(tokens[pos], pos)
        times.append(time.perf_counter() - start)
        if pos >= len(prompt) - 1:
            token = int(np.argmax(logits))
            tokens.append(token)
            generated.append(token)
    return generated, times, np.asarray(logits)


def runtime_step(method) -> Step:
    """A step function over a loaded :class:`pyexecutorch.runtime.Method`."""

    def step(token: int, pos: int) -> np.ndarray:
        (logits,) = method.execute(
            [np.array([[token]], dtype=np.int64), np.array([pos], dtype=np.int64)],
            clone_outputs=False,
        )
        return np.asarray(logits).reshape(-1)

    return step


def worker(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Generate with a .pte in the pyexecutorch runtime."
    )
    parser.add_argument("model")
    parser.add_argument("--prompt", required=True, help="comma-separated token ids")
    parser.add_argument("-n", type=int, required=True, help="tokens to generate")
    parser.add_argument(
        "--jit", choices=("0", "1"), help="1: the compiled tier, 0: numpy only (default: auto)"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415 - timed as part of loading

    jit = None if args.jit is None else args.jit == "1"
    program = Runtime.get().load_program(args.model, jit=jit)
    method = program.load_method("forward")
    load_s = time.perf_counter() - start
    meta = method.metadata
    arenas = [meta.memory_planned_buffer_size(i) for i in range(meta.num_memory_planned_buffers())]
    prompt = [int(t) for t in args.prompt.split(",")]
    tokens, times, logits = greedy(runtime_step(method), prompt, args.n)
    torch_loaded = any(
        m is not None and (name == "torch" or name.startswith("torch."))
        for name, m in sys.modules.items()
    )
    result = {
        "tokens": tokens,
        "step_seconds": times,
        "load_seconds": load_s,
        "arena_bytes": arenas,
        "last_logits": [float(x) for x in logits],
        "torch_loaded": torch_loaded,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(worker())
