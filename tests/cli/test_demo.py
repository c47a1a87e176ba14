"""``pyexecutorch demo`` and the built-in example model."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from pyexecutorch.cli import demo
from pyexecutorch.cli.common import CLIError
from pyexecutorch.examples.generate import greedy
from pyexecutorch.examples.gpt import eager_step, make_model


def test_example_model_is_deterministic_and_stateful():
    a, b = make_model(0), make_model(0)
    for (name, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, q), name
    assert not torch.equal(make_model(1).head.weight, a.head.weight)
    token, pos = a.example_inputs()
    assert token.shape == (1, 1) and token.dtype == torch.int64
    assert pos.shape == (1,) and pos.dtype == torch.int64
    with torch.no_grad():
        logits = a(torch.tensor([[5]]), torch.tensor([0]))
    assert logits.shape == (1, a.cfg.vocab)
    cache = a.blocks[0].attn.k_cache
    assert cache[:, :, 0].abs().sum() > 0  # the KV cache buffer was written
    assert cache[:, :, 1:].abs().sum() == 0


def test_greedy_feeds_the_prompt_then_its_own_tokens():
    calls = []

    def step(token, pos):
        calls.append((token, pos))
        logits = np.zeros(10)
        logits[(token + 1) % 10] = 1.0
        return logits

    tokens, times, last = greedy(step, [4, 7], 3)
    assert tokens == [8, 9, 0]
    assert calls == [(4, 0), (7, 1), (8, 2), (9, 3)]
    assert len(times) == 4
    assert int(np.argmax(last)) == 0
    with pytest.raises(ValueError, match="at least one token"):
        greedy(step, [], 3)


def test_eager_generation_is_reproducible():
    t1, _, _ = greedy(eager_step(make_model(0)), [1, 2, 3], 5)
    t2, _, _ = greedy(eager_step(make_model(0)), [1, 2, 3], 5)
    assert t1 == t2 and len(t1) == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt", "1,x"], "bad --prompt '1,x': expected comma-separated token ids like 1,2,3"),
        (["--prompt", "1,999"], "--prompt token(s) [999] outside the vocabulary [0, 256)"),
        (["--prompt", ","], "--prompt needs at least one token"),
        (["-n", "0"], "-n must be at least 1, got 0"),
        (["-n", "70"], "prompt (3) + tokens (70) exceed the model's context of 64 positions"),
    ],
)
def test_demo_bad_arguments(cli, args, message):
    r = cli("demo", *args)
    assert r.rc == 2
    assert r.err == f"pyexecutorch demo: error: {message}\n"


def test_demo_reports_a_mismatch(cli, tmp_path, monkeypatch):
    """The comparison itself, with the export and the runtime process faked."""

    def fake_export(model, path):
        path.write_bytes(b"x" * 100)
        return {"torch.export": 0.1, "to_edge": 0.1, "to_executorch": 0.1}

    def fake_worker(pte, prompt, n, jit=False):
        tokens, times, logits = greedy(eager_step(make_model(0)), prompt, n)
        tokens[2] = (tokens[2] + 1) % 256
        return {
            "tokens": tokens,
            "step_seconds": times,
            "load_seconds": 0.01,
            "arena_bytes": [1024],
            "last_logits": logits.tolist(),
            "torch_loaded": False,
        }

    monkeypatch.setattr(demo, "export_example", fake_export)
    monkeypatch.setattr(demo, "run_worker", fake_worker)
    r = cli("demo", "-n", "4")
    assert r.rc == 1
    assert r.err.startswith(
        "pyexecutorch demo: error: tokens differ from torch eager from generated token 2 on "
    )
    assert "planned arena 1.0 KB" in r.out


def test_demo_end_to_end(cli, tmp_path, monkeypatch):
    """Our exporter, then our runtime in a process without torch (numpy tier, then the
    compiled tier where numba is installed); tokens equal eager's."""
    monkeypatch.setenv("PYEXECUTORCH_JIT", "1")
    out = tmp_path / "gpt.pte"
    r = cli("demo", "-n", "8", "--out", out, "--no-text")
    assert r.rc == 0, r.err + r.out
    lines = r.out.splitlines()
    assert lines[0].startswith("pyexecutorch demo: ")
    assert any(ln.startswith("export     torch.export ") for ln in lines)
    assert f"program    {out}: " in r.out
    assert "           torch blocked in the runtime process: yes" in lines
    assert "  match: all 8 tokens equal" in r.out
    assert any(ln.startswith("  pyexecutorch runtime ") for ln in lines)
    if importlib.util.find_spec("numba") is not None:
        assert any(ln.startswith("  compiled tier (numba) ") for ln in lines), r.out
    assert out.stat().st_size > 100_000
    # The kept program works with the other commands.
    r = cli("inspect", out)
    assert r.rc == 0, r.err
    assert "aten::index_put.out" in r.out or "aten::index_copy.out" in r.out


def test_demo_text_part_streams_hugging_face_greedy_text(capsys, monkeypatch):
    """export_llm on the text example, `pyexecutorch generate` with torch blocked (numpy
    tier: no compile time), its streamed text equal to HF generate's."""
    monkeypatch.setenv("PYEXECUTORCH_JIT", "0")
    demo.text_demo(seed=0, new_tokens=8)
    out = capsys.readouterr().out
    assert "export     export_llm (XNNPACK, KV cache, dynamic length) " in out
    assert "  match: the same text as Hugging Face generate (greedy, 8 tokens at most)" in out
    assert "decode: " in out and "tokens/s" in out


def test_demo_text_part_reports_a_difference(monkeypatch, capsys):
    """The comparison itself: the export and the generate process faked."""
    import pyexecutorch.extension.llm.export as llm_export

    monkeypatch.setattr(
        llm_export, "export_llm", lambda model, output, **_: output.write_bytes(b"x")
    )
    monkeypatch.setattr(demo, "_stream_command", lambda argv, path: ("not the text", "rates"))
    with pytest.raises(CLIError, match="the generated text differs from Hugging Face generate"):
        demo.text_demo(seed=0, new_tokens=4)
