"""A one-line progress bar on a terminal stream: rows done, rows/s, ETA, failed rows."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``update(rows, failed)`` as results arrive; ``close()`` ends the line.

    Drawn at most every ``interval`` seconds, and only when ``enabled``."""

    def __init__(
        self,
        total: int,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        interval: float = 0.2,
        label: str = "eval",
    ) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interval = interval
        self.label = label
        self.done = 0
        self.failed = 0
        self.start = time.perf_counter()
        self._drawn = 0.0

    def update(self, rows: int, failed: int = 0) -> None:
        self.done += rows
        self.failed += failed
        now = time.perf_counter()
        if self.enabled and (now - self._drawn >= self.interval or self.done >= self.total):
            self._drawn = now
            self.stream.write("\r" + self.line(now))
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.perf_counter()) - self.start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        width = 24
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        eta = f"{left:5.0f} s" if left != float("inf") else "    ? s"
        failed = f"  failed {self.failed}" if self.failed else ""
        return (
            f"{self.label} [{bar}] {self.done}/{self.total} rows  {rate:8.1f} rows/s  "
            f"ETA {eta}{failed}"
        )

    def close(self) -> None:
        """End the line (drawn once more unless the last draw showed every row)."""
        if self.enabled:
            last = "" if self._drawn and self.done >= self.total else "\r" + self.line()
            self.stream.write(last + "\n")
            self.stream.flush()
