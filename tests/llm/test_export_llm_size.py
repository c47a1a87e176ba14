"""``pyexecutorch export-llm`` files against optimum-executorch's for the same model and recipe.

The model is the suite's optimum one (``_official_llm``: the seeded checkpoint as a
Hugging Face Llama or Qwen2, Qwen2's q/k/v biases seeded apart), saved as a model
folder and exported with our command line (``--recipe xnnpack``, float32 and
``--quantize 8da4w``); optimum's programs are the suite's cached official builds of
that model. Checked: the two float32 files hold the same weight bytes (so the sizes
compare one model), ours is no larger for each model and recipe, and our file's
greedy tokens in our runtime are the eager model's.

Measured when this was written (bytes, ours / optimum's): Llama fp32 482816 / 495232,
8da4w 169856 / 181936; Qwen2 fp32 485376 / 497792, 8da4w 172800 / 184624. The weights
(constant segment and the delegates' named data) are the same sizes byte for byte;
the difference is the program's flatbuffer (16 KB against 25 KB: optimum's forward has
265 values and 81 instructions, ours 115 and 57) and the delegates' graphs (12 against
15 delegates).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests import official

official.silence_noise()
# The official llama:: and quantized kernels (for the official runtime), loaded before our
# exporter registers its out variants (the other order aborts the process).
import executorch.extension.llm.custom_ops.custom_ops  # noqa: E402, F401
import executorch.kernels.quantized  # noqa: E402, F401

from pyexecutorch.cli.main import main  # noqa: E402
from pyexecutorch.runtime import Runtime  # noqa: E402
from pyexecutorch.schema.pte import decode_pte  # noqa: E402
from tests.llm import _official_llm as O  # noqa: E402
from tests.llm import _programs as P  # noqa: E402
from tests.llm.test_official_llm_programs import make_tokenizer  # noqa: E402

ARCHS = ("llama", "qwen2")
RECIPES = {"fp32": [], "8da4w": ["--quantize", "8da4w", "--group-size", str(O.GROUP_SIZE)]}
# (arch, recipe) -> optimum's variant of the same model and recipe (tests/llm/_official_llm)
OPTIMUM = {
    ("llama", "fp32"): "optimum_xnnpack_fp32",
    ("llama", "8da4w"): "optimum_xnnpack_8da4w",
    ("qwen2", "fp32"): "optimum_qwen2_xnnpack_fp32",
    ("qwen2", "8da4w"): "optimum_qwen2_xnnpack_8da4w",
}
GREEDY_TOKENS = 8


def hf_model(arch: str, banned: list[int]) -> torch.nn.Module:
    """The Hugging Face model _official_llm's optimum batch builds and exports (its
    _OPTIMUM_BATCH, in this process; test_same_weights_as_optimum checks it is the same)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    p = O.PARAMS
    state = {}
    for key, value in O.checkpoint(banned).items():
        parts = key.split(".")
        if parts[0] == "layers":
            module = O._HF_NAMES[".".join(parts[2:-1])]
            state[f"model.layers.{parts[1]}.{module}.weight"] = value
        else:
            state[O._HF_NAMES[parts[0]] + ".weight"] = value
    config_class, model_class = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }[arch]
    config = config_class(
        vocab_size=p["vocab_size"],
        hidden_size=p["dim"],
        intermediate_size=p["hidden_dim"],
        num_hidden_layers=p["n_layers"],
        num_attention_heads=p["n_heads"],
        num_key_value_heads=p["n_kv_heads"],
        rms_norm_eps=p["norm_eps"],
        max_position_embeddings=O.MAX_SEQ_LEN,
        bos_token_id=O.BOS_ID,
        eos_token_id=O.EOS_ID,
        tie_word_embeddings=False,
    )
    model = model_class(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("_proj.bias") for k in missing), missing
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for key in missing:
            bias = model.get_parameter(key)
            bias.copy_(0.1 * torch.randn(bias.shape, generator=gen))
    return model.eval()


class Store:
    """The models, our files (made on first use) and optimum's (from the suite's cache)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        tokenizer = make_tokenizer(root / "tokenizer.json")
        self.banned = sorted({P.BOS_ID, P.EOS_ID, *P.partial_tokens(tokenizer)})
        self._models: dict[str, torch.nn.Module] = {}
        self._ours: dict[tuple[str, str], bytes] = {}

    def model(self, arch: str) -> torch.nn.Module:
        if arch not in self._models:
            self._models[arch] = hf_model(arch, self.banned)
        return self._models[arch]

    def ours(self, arch: str, recipe: str) -> bytes:
        key = (arch, recipe)
        if key not in self._ours:
            folder = self.root / arch
            if not folder.exists():
                self.model(arch).save_pretrained(folder)
            out = self.root / f"{arch}_{recipe}.pte"
            argv = ["export-llm", "--model", str(folder), "--recipe", "xnnpack", *RECIPES[recipe]]
            argv += ["--max-seq-length", str(O.MAX_SEQ_LEN), "-o", str(out)]
            assert main(argv) == 0
            self._ours[key] = out.read_bytes()
        return self._ours[key]

    def optimum(self, arch: str, recipe: str) -> bytes:
        if not O.optimum_available():
            pytest.fail("optimum-executorch is not installed (`make venv` installs it)")
        return O.export(O.VARIANTS[OPTIMUM[arch, recipe]], self.banned)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return Store(tmp_path_factory.mktemp("export_llm_size"))


def _weights(pte: bytes) -> tuple[list[bytes], dict[str, bytes]]:
    """The constant tensors' bytes (sorted) and the delegates' named data of a file."""
    decoded = decode_pte(pte)
    constants = sorted(bytes(b.storage) for b in decoded.program.constant_buffer)
    return constants, {k: bytes(v.data) for k, v in decoded.named_data.items()}


@pytest.mark.parametrize("arch", ARCHS)
def test_same_weights_as_optimum(store, arch):
    """Both float32 files hold the same weights, byte for byte: one model on both sides."""
    ours_constants, ours_named = _weights(store.ours(arch, "fp32"))
    theirs_constants, theirs_named = _weights(store.optimum(arch, "fp32"))
    assert ours_constants == theirs_constants
    assert ours_named.keys() == theirs_named.keys()
    assert ours_named == theirs_named


@pytest.mark.parametrize("recipe", list(RECIPES))
@pytest.mark.parametrize("arch", ARCHS)
def test_no_larger_than_optimum(store, arch, recipe, capsys):
    ours, theirs = store.ours(arch, recipe), store.optimum(arch, recipe)
    with capsys.disabled():
        print(
            f"\n{arch} {recipe}: ours {len(ours)} B, optimum {len(theirs)} B "
            f"({len(ours) / len(theirs):.3f})"
        )
    assert len(ours) <= len(theirs)
    # the same recipe: the delegates' weight blobs of the same sizes on both sides
    ours_named = sorted(len(v) for v in _weights(ours)[1].values())
    theirs_named = sorted(len(v) for v in _weights(theirs)[1].values())
    assert ours_named == theirs_named


def _eager_greedy(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=O.EOS_ID
        )
    return out[0, len(prompt) :].tolist()


def _forward(pte: bytes, runtime: str):  # noqa: ANN202
    if runtime == "official":
        return official.OfficialRunner(pte).run
    return Runtime.get().load_program(pte, jit=False).load_method("forward").execute


@pytest.mark.parametrize("runtime", ["ours", "official"])
@pytest.mark.parametrize("arch", ARCHS)
def test_our_file_generates_the_eager_tokens(store, arch, runtime):
    """Our float32 file, the prompt in one call then one token a call (forward(tokens,
    input_pos)), gives the eager model's greedy tokens in both runtimes."""
    run = _forward(store.ours(arch, "fp32"), runtime)
    prompt = [O.BOS_ID, 17, 42, 99, 150, 7]
    logits = np.asarray(run([torch.tensor([prompt]), torch.tensor([0])])[0])
    tokens = [int(logits[0].argmax())]
    while len(tokens) < GREEDY_TOKENS:
        pos = len(prompt) + len(tokens) - 1
        logits = np.asarray(run([torch.tensor([tokens[-1:]]), torch.tensor([pos])])[0])
        tokens.append(int(logits[0].argmax()))
    assert tokens == _eager_greedy(store.model(arch), prompt, GREEDY_TOKENS)
