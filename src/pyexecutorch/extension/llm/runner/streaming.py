"""Token ids to text pieces that never split a UTF-8 character.

A byte-level BPE may spread one character over several tokens (``🙂`` is four
bytes, often three tokens); a piece ending inside a character is held back
until the character is complete, so every piece handed to a callback is valid
text.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable


class TextStreamer:
    """``push(token)`` returns the text completed by that token ("" while a character
    is still incomplete); ``flush()`` the rest at the end."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        # An incremental decoder keeps an incomplete trailing sequence for the next
        # call; bytes that can never be valid become U+FFFD, as a whole decode would.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._decoder.decode(self._token_bytes(token))

    def flush(self) -> str:
        """What is left at the end (an incomplete character becomes U+FFFD)."""
        return self._decoder.decode(b"", final=True)
