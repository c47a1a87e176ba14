"""Kernels of the official LLM custom-operator library (``llama::`` and ``preprocess::``).

Programs exported by ``export_llama``/``export_llm`` and optimum-executorch keep
their KV caches as mutable buffers in ``[batch, seq, heads, head_dim]`` layout and
call these operators on them:

- :mod:`.cache`: ``update_cache`` and ``update_cache_with_indices`` write new
  tokens into a cache in place (their ``out`` is a placeholder nobody reads).
- :mod:`.attention`: ``custom_sdpa``, ``sdpa_with_kv_cache`` and
  ``custom_quantized_sdpa``: attention over the filled prefix of a cache, with a
  causal mask offset by the start position and grouped-query heads.
- :mod:`.delta_rule`: ``gated_delta_rule``, the recurrent state update of gated
  DeltaNet (linear attention) layers.
- :mod:`.hadamard`: ``fast_hadamard_transform`` (SpinQuant rotations).
- :mod:`.fallback`: ``fallback``, a plain copy.
- :mod:`.tile_crop`: ``preprocess::tile_crop``, image tiles for multimodal models.
"""

from pyexecutorch.kernels.llm import attention, cache, delta_rule, fallback, hadamard, tile_crop

__all__ = ["attention", "cache", "delta_rule", "fallback", "hadamard", "tile_crop"]
