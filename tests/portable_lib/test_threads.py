"""One object used from many threads gives correct results; different objects run side by side."""

from __future__ import annotations

import threading

import numpy as np
import torch

from pyexecutorch import portable_lib as pl
from tests import models, official

THREADS = 8
CALLS = 200


def _inputs_and_expected():
    case = models.CASES_BY_NAME["mlp"]
    (x,) = case.inputs()
    inputs = [(x * (k + 1) - k).contiguous() for k in range(THREADS)]
    expected = [official.eager_outputs(case, (t,))[0] for t in inputs]
    return inputs, expected


def _hammer(call, inputs, expected) -> list[str]:
    errors: list[str] = []
    start = threading.Barrier(THREADS)

    def worker(k: int) -> None:
        start.wait()
        x = inputs[k].numpy() if k % 2 else inputs[k]  # numpy and torch inputs mixed
        try:
            for n in range(CALLS):
                out = call(x)
                got = out.numpy() if isinstance(out, torch.Tensor) else out
                if not np.allclose(got, expected[k], rtol=1e-5, atol=1e-6):
                    errors.append(f"thread {k} call {n}: wrong result")
                    return
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_one_module_many_threads(mlp_pte):
    inputs, expected = _inputs_and_expected()
    module = pl._load_for_executorch_from_buffer(mlp_pte)
    assert _hammer(lambda x: module.forward([x])[0], inputs, expected) == []


def test_one_method_many_threads(mlp_pte):
    inputs, expected = _inputs_and_expected()
    method = pl._load_program_from_buffer(mlp_pte).load_method("forward")
    assert _hammer(lambda x: method([x])[0], inputs, expected) == []


def test_different_modules_concurrently(mlp_pte):
    inputs, expected = _inputs_and_expected()
    modules = [pl._load_for_executorch_from_buffer(mlp_pte) for _ in range(THREADS)]
    counter = iter(range(THREADS))
    lock = threading.Lock()
    local = threading.local()

    def call(x):
        if not hasattr(local, "module"):
            with lock:
                local.module = modules[next(counter)]
        return local.module.forward([x])[0]

    assert _hammer(call, inputs, expected) == []
