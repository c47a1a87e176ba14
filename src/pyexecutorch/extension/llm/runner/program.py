"""What a text-decoder program says about itself: its constant methods (the metadata
the official export tools write) and the layout of its ``forward`` method.

A constant method takes no inputs and returns its value (``get_max_seq_len`` returns
an int, ``get_eos_ids`` one output per id). Where one is absent the value comes from
the tokenizer, the method's input bounds or the official runner's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pyexecutorch.extension.llm.runner.errors import UnsupportedProgramError

FORWARD = "forward"
DEFAULT_MAX_SEQ_LEN = 128  # the official runner's value for a program without metadata
CONSTANT_METHODS = (
    "get_max_seq_len",
    "get_max_context_len",
    "get_bos_id",
    "get_eos_ids",
    "get_vocab_size",
    "get_n_layers",
    "use_kv_cache",
    "use_sdpa_with_kv_cache",
    "enable_dynamic_shape",
)
_INT_DTYPES = {3: np.dtype(np.int32), 4: np.dtype(np.int64)}  # ScalarType Int, Long
_FLOAT_DTYPES = {5, 6, 7, 15}  # Half, Float, Double, BFloat16


@dataclass(frozen=True)
class ModelMetadata:
    """The model's facts, from its constant methods or their fallbacks."""

    max_seq_len: int  # the most tokens one prefill call takes
    max_context_len: int  # the positions the KV cache holds
    bos_id: int
    eos_ids: frozenset[int]
    vocab_size: int
    use_kv_cache: bool
    use_sdpa_with_kv_cache: bool
    enable_dynamic_shape: bool
    n_layers: int | None
    found: frozenset[str]  # the constant methods the program has


@dataclass(frozen=True)
class ForwardLayout:
    """How ``forward`` takes tokens and positions and returns logits.

    ``positions``: ``"start"`` (export_llama's ``input_pos [1]``: the first
    token's position), ``"range"`` (optimum's ``cache_position [seq]``: every
    token's position) or ``"none"`` (no KV cache: the whole sequence each call).
    ``max_chunk``: the most tokens one call takes (1 for a static program).
    """

    token_dtype: np.dtype
    position_dtype: np.dtype | None
    positions: str
    dynamic: bool
    max_chunk: int
    logits_rank: int


def _plain(value: Any) -> Any:
    """A constant method's output as a Python value (it may come back as an array)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    return value


def read_constants(program: Any) -> dict[str, list[Any]]:
    """The outputs of each known constant method the program has (a method without inputs)."""
    out: dict[str, list[Any]] = {}
    for name in CONSTANT_METHODS:
        if name not in program.method_names or program.metadata(name).num_inputs() != 0:
            continue
        out[name] = [_plain(v) for v in program.load_method(name).execute([])]
    return out


def _input_is_dynamic(meta: Any, index: int) -> bool | None:
    """Whether input ``index`` has a dynamic shape; None when its TensorInfo cannot say
    (the official one has no ``is_dynamic``)."""
    is_dynamic = getattr(meta.input_tensor_meta(index), "is_dynamic", None)
    return None if is_dynamic is None else bool(is_dynamic())


def _int_input(meta: Any, index: int, what: str) -> tuple[tuple[int, ...], np.dtype]:
    info = meta.input_tensor_meta(index)
    dtype = _INT_DTYPES.get(info.dtype())
    if dtype is None:
        raise UnsupportedProgramError(
            f"input {index} of '{FORWARD}' ({what}) should be int64 or int32, "
            f"but is {info.dtype_name()}"
        )
    return info.sizes(), dtype


def read_layout(program: Any, constants: dict[str, list[Any]]) -> ForwardLayout:
    """The layout of ``forward``, from its input and output metadata."""
    if FORWARD not in program.method_names:
        raise UnsupportedProgramError(
            f"the program has no '{FORWARD}' method to decode with; "
            f"its methods: {', '.join(sorted(program.method_names)) or 'none'}"
        )
    meta = program.metadata(FORWARD)
    n = meta.num_inputs()
    if n not in (1, 2):
        raise UnsupportedProgramError(
            f"'{FORWARD}' takes {n} inputs; a text decoder takes tokens [1, seq] and, "
            "with a KV cache, their positions"
        )
    token_sizes, token_dtype = _int_input(meta, 0, "tokens")
    if len(token_sizes) != 2 or token_sizes[0] != 1:
        raise UnsupportedProgramError(
            f"input 0 of '{FORWARD}' (tokens) should have shape [1, seq], "
            f"but has {list(token_sizes)}"
        )
    dynamic = _input_is_dynamic(meta, 0)
    if dynamic is None:
        dynamic = bool(constants.get("enable_dynamic_shape", [False])[0])
    max_chunk = token_sizes[1] if dynamic else 1
    positions, position_dtype = "none", None
    if n == 2:
        pos_sizes, position_dtype = _int_input(meta, 1, "positions")
        if len(pos_sizes) != 1:
            raise UnsupportedProgramError(
                f"input 1 of '{FORWARD}' (positions) should have shape [1] or [seq], "
                f"but has {list(pos_sizes)}"
            )
        # A single start position, unless the input holds one position per token.
        pos_dynamic = _input_is_dynamic(meta, 1)
        positions = "range" if pos_sizes[0] > 1 or pos_dynamic else "start"
        if positions == "range":
            max_chunk = min(max_chunk, pos_sizes[0])
    elif not dynamic:
        raise UnsupportedProgramError(
            f"'{FORWARD}' has no KV cache (one input) and a static token shape "
            f"{list(token_sizes)}: it cannot take a growing sequence"
        )
    out = meta.output_tensor_meta(0)
    if out.dtype() not in _FLOAT_DTYPES or len(out.sizes()) not in (2, 3):
        raise UnsupportedProgramError(
            f"output 0 of '{FORWARD}' should be float logits [1, vocab] or [1, seq, vocab], "
            f"but is {out.dtype_name()} {list(out.sizes())}"
        )
    return ForwardLayout(
        token_dtype, position_dtype, positions, bool(dynamic), max_chunk, len(out.sizes())
    )


def read_metadata(
    constants: dict[str, list[Any]], layout: ForwardLayout, tokenizer: Any, logits_vocab: int
) -> ModelMetadata:
    """The metadata, each value from its constant method or a fallback."""

    def first(name: str, default: Any) -> Any:
        values = constants.get(name)
        return values[0] if values else default

    max_seq_len = int(first("get_max_seq_len", DEFAULT_MAX_SEQ_LEN))
    eos = constants.get("get_eos_ids") or [tokenizer.eos_id]
    vocab = int(first("get_vocab_size", logits_vocab or tokenizer.vocab_size))
    n_layers = first("get_n_layers", None)
    return ModelMetadata(
        max_seq_len=max_seq_len,
        max_context_len=int(first("get_max_context_len", max_seq_len)),
        bos_id=int(first("get_bos_id", tokenizer.bos_id)),
        eos_ids=frozenset(int(e) for e in eos),
        vocab_size=vocab,
        use_kv_cache=bool(first("use_kv_cache", layout.positions != "none")),
        use_sdpa_with_kv_cache=bool(first("use_sdpa_with_kv_cache", False)),
        enable_dynamic_shape=bool(first("enable_dynamic_shape", layout.dynamic)),
        n_layers=None if n_layers is None else int(n_layers),
        found=frozenset(constants),
    )
