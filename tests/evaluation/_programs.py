"""The evaluation tests' data and programs: a small CNN over a generated image folder,
and a tiny LLM (tests.llm._programs) over a generated text."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

from pyexecutorch.exir import to_edge
from tests.llm import _programs as llm

CLASSES = 3
IMAGE = 24  # the CNN's input side
BATCH = 4  # its static batch


@contextlib.contextmanager
def ray_at_normal_priority() -> Iterator[None]:
    """Ray's workers, started inside, at niceness 0. Ray starts them at 15
    (RAY_worker_niceness): beside the suite's busy test workers they then got almost no
    CPU, and one Ray test took 279 s instead of 28 (a cold suite, three workers)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_worker_niceness", "0")
        yield


class SmallCNN(nn.Module):
    def __init__(self, classes: int = CLASSES) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.mean((2, 3)))


def make_cnn(seed: int = 0) -> SmallCNN:
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return SmallCNN().eval()
    finally:
        torch.random.set_rng_state(state)


def export_cnn(model: nn.Module, dynamic_batch: int | None = None) -> bytes:
    """Static batch ``BATCH``, or a dynamic batch up to ``dynamic_batch``."""
    x = torch.randn(BATCH, 3, IMAGE, IMAGE)
    shapes = None
    if dynamic_batch:
        shapes = ({0: Dim("batch", min=1, max=dynamic_batch)},)
    with torch.no_grad():
        ep = torch.export.export(model, (x,), dynamic_shapes=shapes)
    return to_edge(ep).to_executorch().buffer


def write_images(root: Path, per_class: int, seed: int = 0) -> list[Path]:
    """``root/c<k>/<i>.png`` of random sizes (each at least the crop after resizing),
    brighter in one channel per class so a trained model could tell them apart."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    for k in range(CLASSES):
        (root / f"c{k}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            h, w = int(rng.integers(26, 40)), int(rng.integers(26, 40))
            pixels = rng.integers(0, 200, (h, w, 3), dtype=np.uint8)
            pixels[..., k] += 55
            path = root / f"c{k}" / f"{i}.png"
            Image.fromarray(pixels).save(path)
            paths.append(path)
    return paths


def write_corpus(path: Path, words: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    path.write_text(" ".join(rng.choice(llm.WORDS) for _ in range(words)), encoding="utf-8")
    return path


def eager_window_nll(
    model: nn.Module, layout: str, tokens: list[int], score_from: int
) -> tuple[float, int]:
    """The plain loop: ``(sum of -log p(token j | tokens before it), count)`` for
    ``j >= score_from``, from the eager module at positions from 0: export_llama's
    layout one token per call, optimum's whole window in one call."""
    with torch.no_grad():
        if layout == "llama":
            rows = [
                model(torch.tensor([[tokens[p]]]), torch.tensor([p])).reshape(-1)
                for p in range(len(tokens) - 1)
            ]
            logits = torch.stack(rows)
        else:
            logits = model(torch.tensor([tokens[:-1]]), torch.arange(len(tokens) - 1))[0]
        logp = torch.log_softmax(logits.double(), -1)
    targets = torch.tensor(tokens[1:])
    picked = -logp[torch.arange(len(targets)), targets]
    keep = torch.arange(1, len(tokens)) >= score_from
    return float(picked[keep].sum()), int(keep.sum())
