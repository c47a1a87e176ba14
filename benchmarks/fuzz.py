"""Fuzz the loader and executor over the seed corpus for a time budget; print statistics.

    python benchmarks/fuzz.py --seconds 600                  # seeded structured mutations
    python benchmarks/fuzz.py --engine atheris --seconds 600 # coverage-guided (libFuzzer)

``random``: the mutations of ``tests/reliability/mutations.py`` (raw bytes, every
flatbuffer field at boundary values, swapped offsets, structural edits), drawn
from a seeded generator, each judged by ``tests/reliability/harness.py``.
``atheris``: libFuzzer mutates the corpus files themselves, guided by the
coverage of ``pyexecutorch``. Both print executions, distinct outcomes and
findings; a finding's file is written to ``--out`` (default ``.cache/fuzz``) so
that it can become a regression test. Exit status 1 when anything was found.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "src"))


def _save(out: Path, data: bytes, what: str, findings: list[dict]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(data).hexdigest()[:16] + ".pte"
    (out / name).write_bytes(data)
    findings.append({"file": str(out / name), "finding": what[:500]})


def _report(engine: str, executions: int, seconds: float, outcomes, findings) -> None:
    phases = collections.Counter()
    for key, n in outcomes.items():
        phases[f"{key[0]}:{key[1] or 'ok'}"] += n
    print(
        json.dumps(
            {
                "engine": engine,
                "executions": executions,
                "seconds": round(seconds, 1),
                "executions_per_s": round(executions / max(seconds, 1e-9), 1),
                "distinct_outcomes": len(outcomes),
                "outcomes_by_phase_and_type": dict(phases.most_common()),
                "suspicious": sum(n for k, n in outcomes.items() if k[2] in SUSPICIOUS),
                "findings": findings,
            },
            indent=1,
        )
    )


def run_random(seconds: float, seed: int, out: Path) -> int:
    from pyexecutorch.runtime import Verification
    from reliability.harness import Finding, check, seeds
    from reliability.mutations import (
        STRUCTURAL,
        field_mutation,
        raw_mutation,
        structural_mutation,
        swap_offsets,
    )

    corpus = seeds()
    rng = random.Random(seed)
    outcomes: collections.Counter = collections.Counter()
    findings: list[dict] = []
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        s = rng.choice(corpus)
        family = rng.randrange(5)
        a, b = rng.randrange(1 << 31), rng.randrange(1 << 31)
        data_files = s.data_files
        if family == 0:
            other = rng.choice(corpus).pte
            data = raw_mutation(s.pte, rng.randrange(6), a, b, other)
        elif family == 1:
            data = field_mutation(s.pte, a, rng.randrange(48))
        elif family == 2:
            data = swap_offsets(s.pte, a, b)
        elif family == 3:
            data = structural_mutation(s.pte, rng.randrange(len(STRUCTURAL)), a, b)
            if data is None:
                continue
        else:
            data = s.pte
            if data_files:
                data_files = (raw_mutation(data_files[0], rng.randrange(6), a, b),)
            else:  # two edits in a row
                data = raw_mutation(field_mutation(s.pte, b, a), rng.randrange(6), a, b)
        n += 1
        try:
            outcome = check(data, data_files, verification=rng.choice(list(Verification)))
            outcomes[outcome.key] += 1
        except Finding as e:
            _save(out, data, f"{s.name}: {e}", findings)
    _report("random", n, time.monotonic() - start, outcomes, findings)
    return 1 if findings else 0


def run_atheris(seconds: float, out: Path) -> int:
    import atheris

    with atheris.instrument_imports(include=["pyexecutorch"]):
        import pyexecutorch.backends.example.runtime  # noqa: F401
        import pyexecutorch.backends.xnnpack.runtime  # noqa: F401
        import pyexecutorch.kernels  # noqa: F401
        import pyexecutorch.runtime  # noqa: F401
        from reliability.harness import CORPUS, attempt

    outcomes: collections.Counter = collections.Counter()
    state = {"n": 0, "start": time.monotonic()}

    def one_input(data: bytes) -> None:
        state["n"] += 1
        outcomes[attempt(data).key] += 1  # a Finding propagates: libFuzzer saves the input
        if state["n"] % 10_000 == 0:  # libFuzzer ends the process without running atexit
            _report("atheris", state["n"], time.monotonic() - state["start"], outcomes, [])

    out.mkdir(parents=True, exist_ok=True)
    work = out / "atheris_corpus"
    work.mkdir(exist_ok=True)
    args = [
        sys.argv[0],
        str(work),
        str(CORPUS),
        f"-max_total_time={int(seconds)}",
        "-timeout=20",
        "-rss_limit_mb=4096",
        f"-artifact_prefix={out}/",
        "-print_final_stats=1",
    ]
    atheris.Setup(args, one_input)
    atheris.Fuzz()
    return 0


SUSPICIOUS = {"IndexError", "KeyError", "AttributeError", "MemoryError", "RecursionError"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("random", "atheris"), default="random")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / ".cache" / "fuzz")
    args = p.parse_args()
    if args.engine == "random":
        sys.exit(run_random(args.seconds, args.seed, args.out))
    sys.exit(run_atheris(args.seconds, args.out))


if __name__ == "__main__":
    main()
