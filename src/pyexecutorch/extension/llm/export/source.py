"""The model to export: a Hugging Face causal LM, loaded or built, checked, in float32.

:func:`load_causal_lm` takes a ``transformers`` model (copied: the export installs
caches and quantizes in place), a configuration object, a configuration ``.json``,
or a folder (its weights when it has them, else random weights from its
``config.json``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

# model_type -> what the architecture is; each is tested end to end.
SUPPORTED: dict[str, str] = {
    "llama": "Llama 2/3",
    "qwen2": "Qwen2 / Qwen2.5",
    "qwen3": "Qwen3",
    "mistral": "Mistral",
}

_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model*.bin")


class UnsupportedArchitectureError(ValueError):
    """The model is not one of the architectures the LLM exporter supports."""


class ModelSourceError(ValueError):
    """The model source cannot be read (missing file, bad configuration)."""


def _supported_list() -> str:
    return ", ".join(f"{k} ({v})" for k, v in SUPPORTED.items())


def _config_from_json(path: Path) -> Any:
    from transformers import AutoConfig

    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelSourceError(f"cannot read the model configuration {path}: {e}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise ModelSourceError(
            f"{path} is not a Hugging Face model configuration (no 'model_type' key)"
        )
    model_type = data.pop("model_type")
    check_model_type(model_type, str(path))
    return AutoConfig.for_model(model_type, **data)


def _from_config(config: Any, seed: int) -> nn.Module:
    from transformers import AutoModelForCausalLM

    check_model_type(getattr(config, "model_type", None), type(config).__name__)
    with torch.random.fork_rng(devices=[]):  # random weights without touching the caller's RNG
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def _from_folder(path: Path, seed: int) -> nn.Module:
    from transformers import AutoModelForCausalLM

    if not (path / "config.json").is_file():
        raise ModelSourceError(f"{path} has no config.json: not a Hugging Face model folder")
    if any(any(path.glob(p)) for p in _WEIGHT_PATTERNS):
        config = _config_from_json(path / "config.json")  # checks the architecture first
        return AutoModelForCausalLM.from_pretrained(path, config=config, dtype=torch.float32)
    return _from_config(_config_from_json(path / "config.json"), seed)


def check_model_type(model_type: Any, what: str) -> None:
    """Raise :class:`UnsupportedArchitectureError` unless ``model_type`` is supported."""
    if model_type not in SUPPORTED:
        raise UnsupportedArchitectureError(
            f"{what}: architecture {model_type!r} is not supported by the LLM exporter; "
            f"supported: {_supported_list()}"
        )


def load_causal_lm(source: Any, seed: int = 0) -> nn.Module:
    """A float32, eval-mode copy of the causal LM that ``source`` describes.

    ``source``: a ``transformers`` causal LM, a ``PretrainedConfig``, a path to a
    configuration ``.json`` or to a model folder.
    """
    from transformers import PretrainedConfig, PreTrainedModel

    if isinstance(source, PreTrainedModel):
        check_model_type(getattr(source.config, "model_type", None), type(source).__name__)
        model = copy.deepcopy(source)
    elif isinstance(source, PretrainedConfig):
        model = _from_config(copy.deepcopy(source), seed)
    elif isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            model = _from_folder(path, seed)
        elif path.is_file():
            model = _from_config(_config_from_json(path), seed)
        else:
            raise ModelSourceError(f"model not found: {path} is neither a folder nor a file")
    else:
        raise TypeError(
            "the model must be a transformers model, a PretrainedConfig, or a path to a model "
            f"folder or config.json, got {type(source).__name__}"
        )
    check_structure(model)
    return model.float().eval()


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers (``model.model.layers``) of a causal LM."""
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise UnsupportedArchitectureError(
            f"{type(model).__name__} is not a causal LM with decoder layers at model.layers "
            f"(pass the *ForCausalLM model); supported: {_supported_list()}"
        )
    return list(layers)


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """Each decoder layer's self-attention module."""
    found = []
    for i, layer in enumerate(decoder_layers(model)):
        attn = getattr(layer, "self_attn", None)
        if attn is None or not hasattr(attn, "head_dim"):
            raise UnsupportedArchitectureError(
                f"{type(model).__name__}: decoder layer {i} has no self_attn module with a head_dim"
            )
        found.append(attn)
    return found


def check_structure(model: nn.Module) -> None:
    """Every layer attends to the whole context (no sliding windows, no linear attention)."""
    attention_modules(model)
    config = model.config
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"}:
        raise UnsupportedArchitectureError(
            f"{type(model).__name__}: layer types {sorted(kinds)} are not supported; the exporter "
            "supports models whose layers all use full attention"
        )
    if not hasattr(model, "lm_head"):
        raise UnsupportedArchitectureError(
            f"{type(model).__name__} has no lm_head: pass the *ForCausalLM model"
        )


def kv_heads(model: nn.Module) -> int:
    """The number of key/value heads (grouped-query attention) of the model's attention."""
    config = model.config
    return int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
