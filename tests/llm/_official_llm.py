"""Tiny random-weight Llama programs written by the official LLM tooling (``export_llama``,
``export_llm`` and, where it is importable, optimum-executorch), cached on disk, for
running through our runtime and runner.

Each variant is one export: a seeded checkpoint of the official ``Transformer``'s
weights, a params json and the tool's flags. The export runs in a subprocess (the
tools seed torch, configure logging and, for ``export_llm``, start Hydra).

The checkpoint keeps the special tokens and the tokens that are only part of a UTF-8
character from ever winning greedy decoding (the official runner's Python callback
cannot take a partial character). The official model has no output bias, so residual
dimension 0 stands in for one: every embedding holds 1 there and no layer writes to
it, so after the final RMSNorm it is positive; the banned tokens' output rows are zero
but for a negative weight on it, which puts their logits below zero, under the best
of the others.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tests import official

# (n_layers: each variant's own, Variant.layers; see params_of)
PARAMS = {
    "dim": 64,
    "n_layers": 1,
    "n_heads": 4,
    "n_kv_heads": 2,  # grouped-query attention: two query heads per KV head
    "vocab_size": 300,  # the test tokenizer's (tests/llm/_programs.make_tokenizer)
    "hidden_dim": 128,
    "norm_eps": 1e-5,
}
MAX_SEQ_LEN = 128  # a flag of the tools (--max_seq_length), not a params key
BOS_ID, EOS_ID = 0, 1
SEED = 0
# The banned rows' weight on the positive dimension 0; small, so that every logit
# stays about as large as the others (fp32 rounding differences grow with them).
BANNED_WEIGHT = -10.0
GROUP_SIZE = 32

_COMMON = [
    "--model", "llama3",
    "-kv", "--use_sdpa_with_kv_cache",
    "--max_seq_length", str(MAX_SEQ_LEN), "--max_context_length", str(MAX_SEQ_LEN),
    "-m", json.dumps({"get_bos_id": BOS_ID, "get_eos_ids": [EOS_ID]}),
]  # fmt: skip
_STATIC = ["--disable_dynamic_shape"]  # export_llama's shapes are dynamic by default
_8DA4W = ["-X", "-qmode", "8da4w", "-G", str(GROUP_SIZE)]

# The export_llm config (Hydra/OmegaConf yaml as JSON, which yaml reads): XNNPACK with
# the extended operators and 8da4w, as in export_llm's own usage example.
_EXPORT_LLM = {
    "base": {"model_class": "llama3", "metadata": json.dumps({"get_bos_id": BOS_ID, "get_eos_ids": [EOS_ID]})},
    "model": {"use_kv_cache": True, "use_sdpa_with_kv_cache": True, "enable_dynamic_shape": True},
    "export": {"max_seq_length": MAX_SEQ_LEN, "max_context_length": MAX_SEQ_LEN},
    "backend": {"xnnpack": {"enabled": True, "extended_ops": True}},
    "quantization": {"qmode": "8da4w", "group_size": GROUP_SIZE},
}  # fmt: skip


@dataclass(frozen=True)
class Variant:
    name: str
    tool: str  # "export_llama", "export_llm" or "optimum"
    flags: tuple[str, ...]  # export_llama's flags, after the common ones
    quantized: bool
    dynamic: bool
    # Layers: one mostly, two where a program's per-layer caches and delegates repeat (the
    # exports' time grows with them: the export_llama batch took 76 s of CPU at one layer
    # each, 137 s at two).
    layers: int = 1


VARIANTS = {
    v.name: v
    for v in (
        Variant("fp32_static", "export_llama", (*_STATIC,), False, False),
        Variant("fp32_dynamic", "export_llama", (), False, True),
        Variant("xnnpack_fp32_static", "export_llama", ("-X", *_STATIC), False, False),
        Variant("xnnpack_fp32_dynamic", "export_llama", ("-X",), False, True),
        Variant("xnnpack_8da4w_static", "export_llama", (*_8DA4W, *_STATIC), True, False),
        Variant("xnnpack_8da4w_dynamic", "export_llama", (*_8DA4W,), True, True),
        Variant("export_llm_xnnpack_8da4w", "export_llm", (), True, True, layers=2),
        # optimum-executorch's flags: which Hugging Face model, and its main_export options.
        Variant("optimum_xnnpack_fp32", "optimum", ("arch=llama",), False, True),
        Variant("optimum_xnnpack_8da4w", "optimum", ("arch=llama", "qlinear=8da4w"), True, True),
        Variant("optimum_qwen2_xnnpack_fp32", "optimum", ("arch=qwen2",), False, True),
        Variant(
            "optimum_qwen2_xnnpack_8da4w", "optimum", ("arch=qwen2", "qlinear=8da4w"), True, True
        ),
    )
}


def optimum_available() -> bool:
    """Whether optimum-executorch can be imported (a test oracle that ``make venv`` installs
    without its requirements, not a dependency of the project)."""
    import importlib.util

    try:
        return importlib.util.find_spec("optimum.exporters.executorch") is not None
    except ModuleNotFoundError:
        return False


def params_of(variant: Variant) -> dict[str, Any]:
    """The official ``params.json`` fields ``variant`` is exported with."""
    return {**PARAMS, "n_layers": variant.layers}


def checkpoint(
    banned: Sequence[int], params: dict[str, Any] | None = None, seed: int = SEED
) -> dict[str, torch.Tensor]:
    """The seeded weights, in the official ``Transformer``'s names, for ``params`` (an
    official ``params.json``'s fields; default: the tests' ``PARAMS``)."""
    params = PARAMS if params is None else params
    dim, hidden, vocab = params["dim"], params["hidden_dim"], params["vocab_size"]
    head_dim = dim // params["n_heads"]
    kv_dim = params["n_kv_heads"] * head_dim
    gen = torch.Generator().manual_seed(seed)

    def linear(out: int, inp: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(out, inp, generator=gen) * (scale / inp**0.5)

    def norm() -> torch.Tensor:  # not all ones, so that a weight left out would show
        return 1.0 + 0.2 * torch.randn(dim, generator=gen)

    state = {"tok_embeddings.weight": torch.randn(vocab, dim, generator=gen)}
    state["tok_embeddings.weight"][:, 0] = 1.0
    for i in range(params["n_layers"]):
        p = f"layers.{i}."
        state |= {
            p + "attention.wq.weight": linear(dim, dim),
            p + "attention.wk.weight": linear(kv_dim, dim),
            p + "attention.wv.weight": linear(kv_dim, dim),
            p + "attention.wo.weight": linear(dim, dim),
            p + "feed_forward.w1.weight": linear(hidden, dim),
            p + "feed_forward.w2.weight": linear(dim, hidden),
            p + "feed_forward.w3.weight": linear(hidden, dim),
            p + "attention_norm.weight": norm(),
            p + "ffn_norm.weight": norm(),
        }
        # Nothing writes residual dimension 0: it stays the embeddings' 1.
        state[p + "attention.wo.weight"][0] = 0.0
        state[p + "feed_forward.w2.weight"][0] = 0.0
    state["norm.weight"] = norm()
    state["norm.weight"][0] = 1.0
    # A larger scale than the layers': clear-cut greedy choices.
    output = linear(vocab, dim, scale=4.0)
    output[:, 0] = 0.0
    output[list(banned)] = 0.0
    output[list(banned), 0] = BANNED_WEIGHT
    state["output.weight"] = output
    return state


# The same weights as a HuggingFace ``LlamaForCausalLM`` (which rotates by halves where
# the official model rotates pairs: another model, as good for the test).
_HF_NAMES = {
    "tok_embeddings": "model.embed_tokens",
    "norm": "model.norm",
    "output": "lm_head",
    "attention.wq": "self_attn.q_proj",
    "attention.wk": "self_attn.k_proj",
    "attention.wv": "self_attn.v_proj",
    "attention.wo": "self_attn.o_proj",
    "feed_forward.w1": "mlp.gate_proj",
    "feed_forward.w2": "mlp.down_proj",
    "feed_forward.w3": "mlp.up_proj",
    "attention_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
# Every batch process shares torch's node provenance records instead of deep-copying them:
# the same programs for less CPU (see tests.official.shared_provenance, which tests it).
_SHARE_PROVENANCE = """
import torch.fx.traceback
torch.fx.traceback.NodeSource.__deepcopy__ = lambda self, memo: self
"""

# One process exports every optimum job (its imports paid once). The checkpoint's weights
# become a Hugging Face Llama or Qwen2; Qwen2's q/k/v biases, which the checkpoint has
# not, get small seeded values so that their adds are in the program.
_OPTIMUM_BATCH = (
    _SHARE_PROVENANCE
    + """
import json, sys, traceback, torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from optimum.exporters.executorch import main_export
names, max_len, bos, eos, jobs = sys.argv[1:6]
names, max_len = json.loads(names), int(max_len)
models = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
for job in json.loads(jobs):
    try:
        p = json.loads(open(job["params"]).read())
        state = {}
        for key, value in torch.load(job["ckpt"]).items():
            parts = key.split(".")
            if parts[0] == "layers":
                state[f"model.layers.{parts[1]}.{names['.'.join(parts[2:-1])]}.weight"] = value
            else:
                state[names[parts[0]] + ".weight"] = value
        config_class, model_class = models[job["arch"]]
        config = config_class(
            vocab_size=p["vocab_size"], hidden_size=p["dim"], intermediate_size=p["hidden_dim"],
            num_hidden_layers=p["n_layers"], num_attention_heads=p["n_heads"],
            num_key_value_heads=p["n_kv_heads"], rms_norm_eps=p["norm_eps"],
            max_position_embeddings=max_len, bos_token_id=int(bos), eos_token_id=int(eos),
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
        model.save_pretrained(job["model_dir"])
        # use_custom_kv_cache stays off: optimum-executorch 1.1's cache module imports
        # transformers' HybridCache, which transformers 5 after 5.0.0rc1 no longer has.
        main_export(job["model_dir"], task="text-generation", recipe="xnnpack",
                    output_dir=job["out_dir"], use_custom_sdpa=True, max_seq_len=max_len,
                    **job["options"])
    except BaseException:
        open(job["error_file"], "w").write(traceback.format_exc())
"""
)


def _optimum_job(variant: Variant, inputs: tuple[Path, Path], out_dir: Path) -> dict[str, Any]:
    """``variant``'s job for _OPTIMUM_BATCH: its flags are ``key=value`` pairs, ``arch``
    the model and the rest main_export's options; ``inputs`` its params and checkpoint."""
    options = dict(flag.split("=", 1) for flag in variant.flags)
    return {
        "arch": options.pop("arch"),
        "options": options,
        "params": str(inputs[0]),
        "ckpt": str(inputs[1]),
        "model_dir": str(out_dir / "hf"),
        "out_dir": str(out_dir),
        "error_file": str(out_dir / "error.txt"),
    }


def _command(variant: Variant, params: Path, ckpt: Path, out_dir: Path) -> list[str]:
    """The command line of ``variant``'s tool (export_llama or export_llm) as a user runs it."""
    if variant.tool == "export_llama":
        return [
            sys.executable, "-m", "executorch.examples.models.llama.export_llama",
            "-p", str(params), "-c", str(ckpt), *_COMMON, *variant.flags,
            # (a name ending in .pte is taken as a path from the current folder, not -o's)
            "-o", str(out_dir), "-n", str(out_dir / "model.pte"),
        ]  # fmt: skip
    config = json.loads(json.dumps(_EXPORT_LLM))
    config["base"] |= {"params": str(params), "checkpoint": str(ckpt)}
    # (the name, as -n's, is a path from the current folder, which a batch does not set)
    config["export"] |= {"output_dir": str(out_dir), "output_name": str(out_dir / "model.pte")}
    (out_dir / "config.yaml").write_text(json.dumps(config))
    return [
        sys.executable, "-m", "executorch.extension.llm.export.export_llm",
        "--config", str(out_dir / "config.yaml"),
        f"hydra.run.dir={out_dir / 'hydra'}",  # Hydra's logs go here, not into the cwd
    ]  # fmt: skip


def _optimum_command(
    variants: list[Variant], inputs: dict[int, tuple[Path, Path]], out_dirs: dict[str, Path]
) -> list[str]:
    jobs = [_optimum_job(v, inputs[v.layers], out_dirs[v.name]) for v in variants]
    return [
        sys.executable, "-c", _OPTIMUM_BATCH,
        json.dumps(_HF_NAMES), str(MAX_SEQ_LEN), str(BOS_ID), str(EOS_ID), json.dumps(jobs),
    ]  # fmt: skip


def _key(variant: Variant, banned: Sequence[int]) -> str:
    """A hash of everything the export depends on."""
    from importlib.metadata import version

    parts = [
        Path(__file__).read_text(),
        json.dumps(params_of(variant), sort_keys=True),
        repr(variant),
        repr(list(banned)),
        official.versions(),
    ]
    if variant.tool == "optimum":
        parts += [version("optimum-executorch"), version("transformers")]
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
    return h.hexdigest()[:20]


# Runs export_llama's command line once per job in one process: the tool's imports
# (torch, torchao, the XNNPACK partitioner; ~8 s of CPU) are paid once for every
# variant instead of once each. Each job seeds torch as the tool's main does. The
# export_llm jobs come last, through export_llama's own --hydra route (it runs
# export_llm's module in its process): Hydra then configures logging for the process.
_EXPORT_LLAMA_BATCH = (
    _SHARE_PROVENANCE
    + """
import json, sys, traceback
from executorch.examples.models.llama import export_llama as tool
for argv, error_file in json.loads(sys.argv[1]):
    sys.argv = ["export_llama", *argv]
    try:
        tool.main()
    except BaseException:
        open(error_file, "w").write(traceback.format_exc())
"""
)


def _cache_path(variant: Variant, banned: Sequence[int]) -> Path:
    return official.cache_dir() / f"official_llm.{variant.name}.{_key(variant, banned)}.pte"


def _run(command: list[str], cwd: Path, what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stderr[-4000:]}")


def _write_inputs(root: Path, banned: Sequence[int], variant: Variant) -> tuple[Path, Path]:
    """The tools' two inputs for ``variant``'s layer count written under ``root``: the
    params json and the seeded checkpoint."""
    params, ckpt = root / f"params_{variant.layers}.json", root / f"ckpt_{variant.layers}.pth"
    fields = params_of(variant)
    params.write_text(json.dumps(fields))
    torch.save(checkpoint(banned, fields), ckpt)
    return params, ckpt


# The process each tool's variants are made in, all of a batch together (see the batch
# scripts): export_llm's in export_llama's, through its --hydra flag.
BATCH_OF = {"export_llama": "export_llama", "export_llm": "export_llama", "optimum": "optimum"}


def _export_llama_job(variant: Variant, params: Path, ckpt: Path, out_dir: Path) -> list[str]:
    """``variant``'s arguments to export_llama's main (after ``python -m module``)."""
    command = _command(variant, params, ckpt, out_dir)
    if variant.tool == "export_llm":  # export_llama --hydra runs export_llm's main
        return ["--hydra", *command[3:]]
    return command[3:]


def _export_batch(batch: str, variants: list[Variant], banned: Sequence[int]) -> dict[str, bytes]:
    """The ``.pte`` bytes of every variant in ``variants`` (all of ``batch``), from one process."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # (one pair of inputs a layer count, written once)
        by_layers = {v.layers: v for v in variants}
        inputs = {n: _write_inputs(root, banned, v) for n, v in by_layers.items()}
        out_dirs = {v.name: root / v.name for v in variants}
        for out_dir in out_dirs.values():
            out_dir.mkdir()
        if batch == "optimum":
            command = _optimum_command(variants, inputs, out_dirs)
        else:
            jobs = [
                (
                    _export_llama_job(v, *inputs[v.layers], out_dirs[v.name]),
                    str(out_dirs[v.name] / "error.txt"),
                )
                for v in sorted(variants, key=lambda v: v.tool == "export_llm")
            ]
            command = [sys.executable, "-c", _EXPORT_LLAMA_BATCH, json.dumps(jobs)]
        _run(command, root, batch)
        built = {}
        for v in variants:
            error = out_dirs[v.name] / "error.txt"
            if error.exists():
                raise RuntimeError(f"{v.tool} failed on {v.name}:\n{error.read_text()[-4000:]}")
            built[v.name] = (out_dirs[v.name] / "model.pte").read_bytes()
        return built


def export(variant: Variant, banned: Sequence[int]) -> bytes:
    """The ``.pte`` bytes of ``variant`` (made once, then read from the cache).

    The first variant of a batch missing from the cache makes every missing one of that
    batch in one process (see BATCH_OF, _EXPORT_LLAMA_BATCH, _OPTIMUM_BATCH) and caches
    them all."""
    batch = BATCH_OF[variant.tool]

    def build() -> bytes:
        missing = [
            v
            for v in VARIANTS.values()
            if BATCH_OF[v.tool] == batch and v != variant and not _cache_path(v, banned).exists()
        ]
        built = _export_batch(batch, [variant, *missing], banned)
        for v in missing:
            official.cached_file(_cache_path(v, banned), lambda v=v: built[v.name])
        return built[variant.name]

    return official.cached_file(_cache_path(variant, banned), build)
