"""``export_llm``: a Hugging Face causal LM to a ``.pte`` the LLM runners drive.

load (copy, float32) -> quantize (torchao) -> export (torch.export, KV caches as
mutable buffers) -> lower (edge dialect, XNNPACK) -> to_executorch -> write.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, TextIO

import torch

from pyexecutorch.extension.llm.export import program, quantize, source
from pyexecutorch.extension.llm.export.config import ExportLlmConfig
from pyexecutorch.extension.llm.export.progress import Stages

STAGES = ("load", "quantize", "export", "lower", "to_executorch", "write")


def _describe(config: ExportLlmConfig) -> str:
    seq = f"1..{config.max_seq_length}" if config.enable_dynamic_shape else "1"
    args = f"tokens[1, {seq}]" + (", input_pos[1]" if config.use_kv_cache else "")
    cache = f", KV cache {config.context_length}" if config.use_kv_cache else ", no KV cache"
    return f"forward({args}){cache}"


def _quantization_label(config: ExportLlmConfig) -> str:
    parts = [config.qmode or ""]
    if config.embedding_quantize:
        parts.append(f"embeddings {config.embedding_quantize}")
    return ", ".join(p for p in parts if p)


def export_llm(
    model: Any,
    *,
    max_seq_length: int = 128,
    max_context_length: int | None = None,
    use_kv_cache: bool = True,
    use_sdpa_with_kv_cache: bool = True,
    enable_dynamic_shape: bool = True,
    qmode: str | None = None,
    group_size: int = 32,
    embedding_quantize: str | None = None,
    xnnpack: bool = True,
    metadata: dict[str, Any] | str | None = None,
    seed: int = 0,
    config: ExportLlmConfig | None = None,
    output: str | Path | None = None,
    progress: bool = True,
    log: TextIO | None = None,
) -> Any:
    """Export a causal LM to an ExecuTorch program; returns its ``ExecutorchProgramManager``.

    ``model``: a ``transformers`` causal LM (left unchanged), a ``PretrainedConfig``,
    or a path to a model folder or configuration ``.json`` (random weights drawn from
    ``seed`` when there are no weights). The options are those of
    :class:`ExportLlmConfig`, which documents them; ``config`` gives them all at once
    instead. ``output``: also write the ``.pte`` there. ``progress``: report each
    stage on ``log`` (default ``sys.stdout``).

    The program has ``forward(tokens [1, seq] int64, input_pos [1] int64) -> logits
    [1, vocab]`` (``forward(tokens)`` without a KV cache) and the constant methods
    the runners read (``get_max_seq_len``, ``get_bos_id``, ``get_eos_ids``...).
    """
    if config is None:
        config = ExportLlmConfig(
            max_seq_length=max_seq_length,
            max_context_length=max_context_length,
            use_kv_cache=use_kv_cache,
            use_sdpa_with_kv_cache=use_sdpa_with_kv_cache,
            enable_dynamic_shape=enable_dynamic_shape,
            qmode=qmode,
            group_size=group_size,
            embedding_quantize=embedding_quantize,
            xnnpack=xnnpack,
            metadata=metadata,
            seed=seed,
        )
    stages = Stages(STAGES, (log or sys.stdout) if progress else None)

    with stages.stage(
        "load", type(model).__name__ if not isinstance(model, (str, Path)) else str(model)
    ):
        lm = source.load_causal_lm(model, seed=config.seed)
    if config.qmode or config.embedding_quantize:
        with stages.stage("quantize", _quantization_label(config)):
            quantize.quantize(lm, config)
    else:
        stages.skip("quantize", "float32")
    methods = program.constant_methods(lm, config)
    wrapped = program.wrap(lm, config)
    inputs, dynamic_shapes = program.example_inputs(config)
    with stages.stage("export", _describe(config)), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecations inside torch/transformers tracing
        with torch.no_grad():
            ep = torch.export.export(wrapped, inputs, dynamic_shapes=dynamic_shapes, strict=False)
    et = _lower(ep, methods, config, stages)
    if output is not None:
        out = Path(output)
        with stages.stage("write", str(out)):
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(et.buffer)
    else:
        stages.skip("write", "no output file")
    return et


def _lower(ep: Any, methods: dict[str, Any], config: ExportLlmConfig, stages: Stages) -> Any:
    from pyexecutorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    partitioner = None
    if config.xnnpack:
        from pyexecutorch.backends.xnnpack import XnnpackPartitioner

        partitioner = [XnnpackPartitioner()]
    with (
        stages.stage("lower", "xnnpack" if config.xnnpack else "portable"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        edge = to_edge_transform_and_lower(ep, partitioner=partitioner, constant_methods=methods)
    backend_config = ExecutorchBackendConfig(
        # An operator our runtime has no kernel for is an error here, not at load time.
        check_kernels=True,
        # Quantized embeddings become the fused embedding_byte/embedding_4bit operators.
        do_quant_fusion_and_const_prop=config.embedding_quantize is not None,
    )
    with stages.stage("to_executorch"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        et = edge.to_executorch(backend_config)
        et.buffer  # noqa: B018 - serialize inside the stage, so its time is counted there
    return et
