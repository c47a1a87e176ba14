"""One line per export stage: ``[3/6] export        forward(1xseq, 1)  1.52 s``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TextIO


def _seconds(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s"


class Stages:
    """Prints each stage's name and detail, then its time or ``failed``; silent without ``out``."""

    def __init__(self, names: tuple[str, ...], out: TextIO | None) -> None:
        self.names = names
        self.out = out
        self.times: dict[str, float] = {}

    def _head(self, name: str, detail: str) -> str:
        n = self.names.index(name) + 1
        return f"[{n}/{len(self.names)}] {name:<14}{detail + '  ' if detail else ''}"

    def _print(self, text: str, end: str = "\n") -> None:
        if self.out is not None:
            print(text, end=end, file=self.out, flush=True)

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        self._print(self._head(name, detail), end="")
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self._print("failed")
            raise
        self.times[name] = time.perf_counter() - start
        self._print(_seconds(self.times[name]))

    def skip(self, name: str, why: str) -> None:
        self._print(self._head(name, "") + f"skipped ({why})")
