"""The runner's own exceptions, each naming what was expected and what was found."""

from __future__ import annotations


class ContextLengthError(ValueError):
    """The tokens to prefill do not fit in the model's context."""

    def __init__(
        self, num_tokens: int, occupied: int, max_context_len: int, generating: bool = True
    ) -> None:
        already = f" after the {occupied} already in the context" if occupied else ""
        need = " and a free position to generate" if generating else ""
        super().__init__(
            f"the prompt has {num_tokens} token{'' if num_tokens == 1 else 's'}{already}, but the model's context holds "
            f"{max_context_len} tokens (max_context_len){need}; shorten the prompt or reset() "
            "the runner"
        )
        self.num_tokens = num_tokens
        self.occupied = occupied
        self.max_context_len = max_context_len


class UnsupportedProgramError(ValueError):
    """The program is not a text decoder this runner can drive (no forward method,
    inputs or outputs of another layout)."""


class TokenizerError(RuntimeError):
    """A tokenizer file that no tokenizer kind could load."""
