"""Times ``load_method`` as a fresh process would see it: a helper process for run.py.

A warm load of the compiled tier reads generated modules and numba's machine
code from the disk cache; timed in the process that compiled them it would find
much of that already in memory. This helper starts once, pays the one-time
costs a fresh process pays before its first load (imports, numba's start-up,
the kernels' compiled forms) on a warm-up program of its own, and then times
each load in a child forked from that state, so every sample starts from the
same fresh-process memory and none sees another's imports. It never imports
torch, like the runtime.

Protocol: one JSON object a line on stdin, one answer a line on stdout.
  {"warm_up": PTE_PATH, "threads": N}                       -> {"ok": true}
  {"pte": PTE_PATH, "jit": BOOL, "samples": K, "cache": DIR} -> {"seconds": [...]}
(``cache``: the compiled tier's cache directory for that load, or null for the default.)
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from pyexecutorch.jit import numba_env
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.threads import set_threads


def _load_seconds(pte: bytes, jit: bool) -> float:
    start = time.perf_counter()
    Runtime.get().load_program(pte, jit=jit).load_method("forward")
    return time.perf_counter() - start


def _in_child(pte: bytes, jit: bool, cache: str | None) -> float:
    """One load timed in a child forked from this process's state."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: time one load, write it back, leave without cleanup
        os.close(read)
        code = 0
        try:
            if cache is not None:
                os.environ[numba_env.CACHE_ENV] = cache
            answer = repr(_load_seconds(pte, jit))
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
            answer = "error: " + traceback.format_exc()
            code = 1
        os.write(write, answer.encode())
        os.close(write)
        os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    if not text or text.startswith("error"):
        raise RuntimeError(f"the timed load failed in its child process: {text}")
    return float(text)


def _answer(request: dict) -> dict:
    if "warm_up" in request:
        set_threads(int(request["threads"]))
        pte = Path(request["warm_up"]).read_bytes()
        for jit in (False, True):
            _load_seconds(pte, jit)
        return {"ok": True}
    pte = Path(request["pte"]).read_bytes()
    jit = bool(request["jit"])
    samples = [
        _in_child(pte, jit, request.get("cache")) for _ in range(int(request.get("samples", 3)))
    ]
    return {"seconds": samples}


def main() -> int:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = _answer(json.loads(line))
        except Exception as e:  # noqa: BLE001 - the caller reports it for that model
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
