"""What the runtime may rely on about the LLM custom operators (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from pyexecutorch.kernels.registry import declare

# A start position read from data (``item()`` of input_pos) does not change their output
# shapes: a static plan of a dynamic-shape decoder keeps it live.
declare(
    "llama::update_cache.out",
    "llama::update_cache_with_indices.out",
    "llama::custom_sdpa.out",
    "llama::sdpa_with_kv_cache.out",
    "llama::custom_quantized_sdpa.out",
    shape_ignores_scalars=True,
)
