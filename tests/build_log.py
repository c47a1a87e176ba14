"""The official work a test run built, for the summary at the end of a session.

Torch-free, so that the session's controller (``tests/conftest.py``) reads it without
importing what the workers import. ``tests.official`` writes one line per cache entry it
builds (an official export, a quantization) into the cache folder, and the summary
counts the lines written since the session started: a cold run's cost of official work.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD_LOG = "builds.jsonl"


def cache_dir() -> Path:
    """The official results' cache (``$PYEXECUTORCH_TEST_CACHE``, default ``.cache/official``)."""
    d = Path(os.environ.get("PYEXECUTORCH_TEST_CACHE") or REPO / ".cache" / "official")
    d.mkdir(parents=True, exist_ok=True)
    return d


def log_build(name: str, seconds: float, waited: bool = False) -> None:
    """Append one built entry (a short line, so appends from several workers stay whole).

    ``waited``: the seconds a worker spent waiting for another worker building the entry
    (a core idle on a 2-core run), not building it."""
    row = {"name": name, "seconds": round(seconds, 2), "at": time.time()}
    line = json.dumps(row | {"waited": True} if waited else row)
    with open(cache_dir() / BUILD_LOG, "a") as log:
        log.write(line + "\n")


def builds_since(start: float) -> list[dict]:
    path = cache_dir() / BUILD_LOG
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [row for row in rows if row["at"] >= start]


def summary_lines(start: float, top: int = 8) -> list[str]:
    """One line of totals and the costliest entries built since ``start``; none if nothing was."""
    rows = builds_since(start)
    waits = [row for row in rows if row.get("waited")]
    rows = [row for row in rows if not row.get("waited")]
    lines = []
    if rows:
        total = sum(row["seconds"] for row in rows)
        lines.append(
            f"official work built this run: {len(rows)} entries, {total:.0f} s (all workers)"
        )
        for row in sorted(rows, key=lambda r: -r["seconds"])[:top]:
            lines.append(f"  {row['seconds']:7.1f} s  {row['name']}")
    if waits:
        total = sum(row["seconds"] for row in waits)
        lines.append(
            f"waited for another worker's official build: {len(waits)} times, {total:.0f} s"
        )
    return lines
