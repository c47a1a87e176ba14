"""Programs written by the official LLM tooling (export_llama, export_llm, optimum-executorch;
see ``_official_llm``) through our runtime and runner, against the official ones.

For each variant and tier of ours (numpy, compiled): the logits of a prefill and
several decode steps in our runtime against the official pybindings, and 64 greedy
tokens from our ``TextLLMRunner`` against the official ``TextLLMRunner``. The decode time per
token of each is measured and printed at the end of the module, not asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pyexecutorch.extension.llm.runner import GenerationConfig, TextLLMRunner
from pyexecutorch.runtime import Runtime
from tests import official
from tests.llm import _official_llm as O
from tests.llm import _programs as P
from tests.llm._official_blas import PREAMBLE

PROMPT = "hello 日本 café"
NEW_TOKENS = 64
DECODE_STEPS = 8  # decode calls compared after the prefill
FP32_ATOL = 1e-5
TIERS = {"numpy": False, "compiled": True}
VARIANTS = list(O.VARIANTS)

# Failures of ours found by these tests and not fixed yet, by (test, variant, tier): each
# an xfail that fails the run once it passes (strict), so that it leaves this table.
KNOWN_FAILURES: dict[tuple[str, str, str], str] = {}

# name -> what was measured, printed by the module's report fixture.
REPORT: dict[str, dict[str, Any]] = defaultdict(dict)


def _cases(test: str) -> list[Any]:
    """(variant, tier) pairs of ``test`` ("logits" or "runner"), the known failures marked."""
    cases = []
    for name in VARIANTS:
        for tier in TIERS:
            reason = KNOWN_FAILURES.get((test, name, tier))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(name, tier, marks=marks, id=f"{name}-{tier}"))
    return cases


def _config() -> GenerationConfig:
    return GenerationConfig(echo=False, temperature=0.0, max_new_tokens=NEW_TOKENS, num_bos=1)


def make_tokenizer(path: Path) -> Path:
    """The runner tests' tokenizer (vocabulary 300), which also puts BOS before a prompt
    when asked for special tokens, as Llama 3's does: the official runner's HF tokenizer
    adds BOS only through such a post-processor, whatever ``num_bos`` says."""
    from tokenizers import Tokenizer, processors

    P.make_tokenizer(path)
    tok = Tokenizer.from_file(str(path))
    bos = tok.id_to_token(P.BOS_ID)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, P.BOS_ID)]
    )
    tok.save(str(path))
    return path


class Store:
    """The tokenizer and the programs, each exported (or read from the cache) on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tokenizer = make_tokenizer(root / "tokenizer.json")
        # Never chosen by the programs (see _official_llm): special and partial tokens.
        self.banned = sorted({P.BOS_ID, P.EOS_ID, *P.partial_tokens(self.tokenizer)})
        self._paths: dict[str, Path] = {}

    def path(self, name: str) -> Path:
        variant = O.VARIANTS[name]
        if variant.tool == "optimum" and not O.optimum_available():
            pytest.fail(
                "optimum-executorch is not installed: `make venv` installs it from the lock "
                "without its requirements (it pins transformers==5.0.0rc1, and its export "
                "runs on the project's later transformers)"
            )
        if name not in self._paths:
            path = self.root / f"{name}.pte"
            path.write_bytes(O.export(variant, self.banned))
            self._paths[name] = path
        return self._paths[name]

    def prompt_ids(self) -> list[int]:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(self.tokenizer)).encode(PROMPT).ids  # BOS first


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("official_llm"))


def _official_ops() -> None:
    """Register the llama:: and quantized kernels with the official runtime."""
    official.silence_noise()
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401


# --------------------------------------------------------------------------------------
# Logits, call by call


def _calls(variant: O.Variant, prompt: list[int]) -> Iterator[tuple[list[int], int]]:
    """The prompt's calls as the runners make them: in one call, or one token per call."""
    if variant.dynamic:
        yield prompt, 0
    else:
        yield from (([token], i) for i, token in enumerate(prompt))


def _inputs(variant: O.Variant, tokens: list[int], start: int) -> list[np.ndarray]:
    ids = np.array([tokens], dtype=np.int64)
    if variant.tool == "optimum":  # cache_position: every token's position
        return [ids, np.arange(start, start + len(tokens), dtype=np.int64)]
    return [ids, np.array([start], dtype=np.int64)]  # input_pos: the first token's


def _quantization_step(variant: O.Variant, banned: list[int]) -> float:
    """One step of the 8da4w output layer's integer product: its smallest weight scale
    (max |w| / 7.5 per group of 32: torchao's symmetric int4) times the activation scale
    of a row spanning 1 ((max - min) / 255: per-token asymmetric int8; the
    RMS-normalised rows it takes span more)."""
    weight = O.checkpoint(banned, O.params_of(variant))["output.weight"].numpy()
    allowed = np.setdiff1d(np.arange(weight.shape[0]), banned)
    groups = weight[allowed].reshape(len(allowed), -1, O.GROUP_SIZE)
    return float(np.abs(groups).max(axis=-1).min() / 7.5 / 255)


@pytest.mark.parametrize(("name", "tier"), _cases("logits"))
def test_logits_match_official(store, name, tier):
    variant = O.VARIANTS[name]
    pte = store.path(name).read_bytes()
    _official_ops()
    theirs = official.OfficialRunner(pte)
    ours = Runtime.get().load_program(pte, jit=TIERS[tier]).load_method("forward")
    tol = _quantization_step(variant, store.banned) if variant.quantized else FP32_ATOL
    row = REPORT[name]
    row["tolerance"] = tol

    def compare(tokens: list[int], start: int) -> int:
        """Run one call on both sides; the official greedy token after it."""
        inputs = _inputs(variant, tokens, start)
        (expected,) = theirs.run(inputs)
        got = np.asarray(ours.execute(inputs)[0])
        assert (got.shape, got.dtype) == (expected.shape, expected.dtype)
        diff = float(np.abs(got - expected).max())
        row[f"{tier}_diff"] = max(row.get(f"{tier}_diff", 0.0), diff)
        assert diff <= tol, f"tokens {tokens} at {start}: {diff} > {tol}"
        return int(expected.reshape(-1, expected.shape[-1])[-1].argmax())

    prompt = store.prompt_ids()
    for tokens, start in _calls(variant, prompt):
        token = compare(tokens, start)
    for k in range(DECODE_STEPS):
        token = compare([token], len(prompt) + k)
    if variant.dynamic and TIERS[tier]:
        # the compiled tier runs a dynamic program through a static plan per input length
        # (its start position read live, its delegates shared): one for the decode steps
        plan = ours.plan
        assert plan.shape_plans
        decode = [p for key, p in plan.static_plans.items() if key[0][-1] == 1]
        assert decode, plan.static_plan_failures
        if variant.tool == "optimum" or (
            variant.tool == "export_llama" and variant.name.startswith("xnnpack")
        ):
            # export_llama's XNNPACK programs (bench_llm's) and optimum's decode in one
            # compiled call, the start position in a cell read per call
            # (kernels/prim/compiled_cells), over the changing positions above; optimum's
            # cache_position arithmetic (scalar_tensor, arange, copy, add, the cast to float)
            # folded at load or compiled steps
            assert decode[0].whole, "the decode step's static plan does not compile whole"


# --------------------------------------------------------------------------------------
# Greedy generation through the runners

OFFICIAL_SCRIPT = """
import json, sys, time
import executorch.extension.llm.custom_ops.custom_ops
import executorch.kernels.quantized
from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
tokenizer, prompt, new_tokens, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
results = {}
for pte in sys.argv[5:]:
    try:
        runner = TextLLMRunner(pte, tokenizer)
        for _ in range(2):  # a warm-up, then the run that is kept
            runner.reset()
            pieces, stamps, stats = [], [], []
            def callback(piece):
                stamps.append(time.perf_counter())
                pieces.append(piece)
            config = GenerationConfig(echo=False, temperature=0.0, max_new_tokens=new_tokens,
                                      num_bos=1)
            runner.generate(prompt, config, callback, stats.append)
        ms = (stamps[-1] - stamps[0]) * 1000 / (len(stamps) - 1)
        results[pte] = {"pieces": pieces, "prompt_tokens": stats[0].num_prompt_tokens,
                        "decode_ms": ms}
    except Exception as e:
        results[pte] = {"error": repr(e)}
with open(out, "w") as f:
    json.dump(results, f)
"""


@pytest.fixture(scope="module")
def official_runs(store, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """The official runner on every variant that exports, in one subprocess (it prints
    from C++, and loading the package once saves seconds per program), with the official
    build's own BLAS (see tests/llm/_official_blas.py)."""
    paths: dict[str, str] = {}
    for name, variant in O.VARIANTS.items():
        if variant.tool == "optimum" and not O.optimum_available():
            continue
        try:
            paths[name] = str(store.path(name))
        except RuntimeError:
            continue  # that variant's test reports the exporter's error
    out = tmp_path_factory.mktemp("official_runner") / "runs.json"
    args = [str(store.tokenizer), PROMPT, str(NEW_TOKENS), str(out), *paths.values()]
    result = subprocess.run(
        [sys.executable, "-c", PREAMBLE + OFFICIAL_SCRIPT, *args], capture_output=True, timeout=600
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    runs = json.loads(out.read_text())
    return {name: runs[path] for name, path in paths.items()}


class _Received:
    """A token callback keeping each piece and when it came."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.stamps: list[float] = []

    def __call__(self, piece: str) -> None:
        self.stamps.append(time.perf_counter())
        self.pieces.append(piece)

    def ms_per_piece(self) -> float:
        return (self.stamps[-1] - self.stamps[0]) * 1000 / (len(self.stamps) - 1)


def _timed_generation(runner: TextLLMRunner) -> tuple[list[int], list[str], float]:
    """Greedy tokens, streamed pieces and decode ms per token (between the first and the
    last piece, as for the official runner), after a warm-up generation."""
    for _ in range(2):
        runner.reset()
        received = _Received()
        tokens = runner.generate(PROMPT, _config(), received)
    return tokens, received.pieces, received.ms_per_piece()


@pytest.mark.parametrize(("name", "tier"), _cases("runner"))
def test_runner_matches_official(store, official_runs, name, tier):
    path = store.path(name)
    theirs = official_runs[name]
    assert "error" not in theirs, f"the official runner failed on {name}: {theirs['error']}"
    row = REPORT[name]
    row["official_ms"] = theirs["decode_ms"]
    runner = TextLLMRunner(path, store.tokenizer, jit=TIERS[tier])
    tokens, pieces, row[f"{tier}_ms"] = _timed_generation(runner)
    assert len(tokens) == NEW_TOKENS
    assert runner.stats.num_prompt_tokens == theirs["prompt_tokens"]
    # Each token is whole text (see _official_llm), so each is one piece, and its text
    # names it: the official pieces give back the official tokens.
    allowed = sorted(set(range(O.PARAMS["vocab_size"])) - set(store.banned))
    token_of = {runner.tokenizer.decode([t]): t for t in allowed}
    assert len(token_of) == len(allowed)  # distinct texts
    assert pieces == [runner.tokenizer.decode([t]) for t in tokens]
    official_tokens = [token_of[piece] for piece in theirs["pieces"]]
    row[f"{tier}_same"] = next(
        (i for i, (a, b) in enumerate(zip(tokens, official_tokens, strict=False)) if a != b),
        min(len(tokens), len(official_tokens)),
    )  # how many tokens agree before the first that does not
    assert tokens == official_tokens


# --------------------------------------------------------------------------------------
# The report


def _num(row: dict[str, Any], key: str, fmt: str) -> str:
    return format(row[key], fmt) if key in row else "-"


@pytest.fixture(scope="module", autouse=True)
def report(request) -> Iterator[None]:
    yield
    if not REPORT:
        return
    lines = [
        "official LLM programs: max |logit diff| numpy / compiled (tolerance); leading "
        f"tokens equal to the official's (of {NEW_TOKENS}) numpy / compiled; decode "
        "ms/token numpy / compiled / official",
    ]
    for name in VARIANTS:
        row = REPORT.get(name)
        if row:
            lines.append(
                f"  {name:25} {_num(row, 'numpy_diff', '.1e')} / "
                f"{_num(row, 'compiled_diff', '.1e')} ({_num(row, 'tolerance', '.0e')})  "
                f"{_num(row, 'numpy_same', 'd')} / {_num(row, 'compiled_same', 'd')}  "
                f"{_num(row, 'numpy_ms', '.3f')} / {_num(row, 'compiled_ms', '.3f')} / "
                f"{_num(row, 'official_ms', '.3f')}"
            )
    text = "\n".join(lines)
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(text)
        return
    with capture.global_and_fixture_disabled():  # past the capture of the last test's teardown
        reporter.write_line("")
        reporter.write_line(text)
