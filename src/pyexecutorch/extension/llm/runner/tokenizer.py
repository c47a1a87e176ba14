"""Tokenizers for the runner, through ``pytorch_tokenizers`` (the library the official
runner uses): a HuggingFace ``tokenizer.json``, a tiktoken file, a SentencePiece
``.model`` or a llama2.c ``tokenizer.bin``.

:class:`Tokenizer` gives the runner one interface over them: ``encode`` of text to
ids, and each token's *bytes*, so that streaming can hold back a character split
over several tokens.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pyexecutorch.extension.llm.runner.errors import TokenizerError

_SENTENCEPIECE_KINDS = ("SentencePiece", "llama2.c")
_BYTE_PIECE = re.compile(rb"<0x([0-9A-Fa-f]{2})>")
_INSTALL_HINT = (
    "the LLM runner reads tokenizers with the 'pytorch-tokenizers' package: "
    "pip install 'pyexecutorch[llm]' (or pip install pytorch-tokenizers)"
)


def _tokenizers_module() -> Any:
    # Imported here: the package is an optional dependency (the 'llm' extra).
    try:
        import pytorch_tokenizers  # noqa: PLC0415
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    return pytorch_tokenizers


def _candidates(path: Path) -> list[tuple[str, str]]:
    """``(kind, class name)`` to try, in the order the official runner tries them."""
    if path.is_dir() or path.suffix == ".json":
        return [("HuggingFace", "CppHFTokenizer")]
    return [
        ("tiktoken", "CppTiktoken"),
        ("SentencePiece", "CppSPTokenizer"),
        ("llama2.c", "CppLlama2cTokenizer"),
    ]


class Tokenizer:
    """One loaded tokenizer: ``encode``, ``token_bytes``, ``decode`` and its special ids."""

    def __init__(self, impl: Any, kind: str, path: str) -> None:
        self._impl = impl
        self.kind = kind
        self.path = path
        self._bytes: dict[int, bytes] = {}

    @property
    def bos_id(self) -> int:
        return int(self._impl.bos_tok())

    @property
    def eos_id(self) -> int:
        return int(self._impl.eos_tok())

    @property
    def vocab_size(self) -> int:
        return int(self._impl.vocab_size())

    def encode(
        self,
        text: str,
        num_bos: int = 0,
        num_eos: int = 0,
        *,
        bos_id: int | None = None,
        eos_id: int | None = None,
    ) -> list[int]:
        """The ids of ``text`` after ``num_bos`` BOS and before ``num_eos`` EOS ids
        (the tokenizer's own unless ``bos_id``/``eos_id`` are given)."""
        if not isinstance(text, str):
            raise TypeError(f"the prompt is a str, got {type(text).__name__}")
        # The special ids are added here rather than by the library, whose tokenizer
        # kinds do not all honour its bos/eos arguments.
        ids = [int(i) for i in self._impl.encode(text, 0, 0)] if text else []
        bos = self.bos_id if bos_id is None else bos_id
        eos = self.eos_id if eos_id is None else eos_id
        return [bos] * num_bos + ids + [eos] * num_eos

    def token_bytes(self, token: int) -> bytes:
        """The bytes token ``token`` stands for (possibly part of a UTF-8 character);
        nothing for a special token such as BOS or EOS."""
        cached = self._bytes.get(token)
        if cached is None:
            cached = self._read_bytes(token)
            self._bytes[token] = cached
        return cached

    def _read_bytes(self, token: int) -> bytes:
        try:
            raw = self._impl.decode(token, True).encode("utf-8")  # special tokens skipped
        except UnicodeDecodeError as e:
            # The library returns each token's bytes as a str; a token holding part of a
            # multi-byte character fails that conversion, and the error carries the bytes
            # it could not convert: exactly the token's bytes.
            return bytes(e.object)
        except Exception as e:  # noqa: BLE001 - the bindings raise plain RuntimeError
            raise ValueError(
                f"token id {token} is not in the tokenizer's vocabulary "
                f"({self.vocab_size} tokens): {e}"
            ) from e
        if self.kind in _SENTENCEPIECE_KINDS:
            # The library leaves SentencePiece's byte-fallback pieces as their names
            # ("<0xE6>") and gives BOS/EOS as a space.
            match = _BYTE_PIECE.fullmatch(raw)
            if match:
                return bytes([int(match.group(1), 16)])
            if token in (self.bos_id, self.eos_id):
                return b""
        return raw

    def decode(self, tokens: list[int]) -> str:
        """The text of ``tokens`` (special tokens left out); invalid UTF-8 becomes U+FFFD."""
        text = b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")
        if self.kind in _SENTENCEPIECE_KINDS and text.startswith(" "):
            text = text[1:]  # the space SentencePiece puts before the first word
        return text

    def __repr__(self) -> str:
        return f"Tokenizer({self.kind}, {self.path!r}, vocab_size={self.vocab_size})"


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Load the tokenizer at ``path``: a ``.json`` file or a directory holding
    ``tokenizer.json`` is a HuggingFace tokenizer; any other file is tried as
    tiktoken, SentencePiece, then llama2.c."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    lib = _tokenizers_module()
    failures = []
    for kind, name in _candidates(p):
        impl = getattr(lib, name)()
        try:
            impl.load(str(p))
        except Exception as e:  # noqa: BLE001 - each kind fails with its own RuntimeError
            failures.append(f"{kind}: {str(e).strip().splitlines()[0] if str(e).strip() else e!r}")
            continue
        return Tokenizer(impl, kind, str(p))
    raise TokenizerError(f"cannot load the tokenizer {path}: " + "; ".join(failures))
