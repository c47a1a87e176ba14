"""Fuzz the loader and executor over the seed corpus for a time budget; print statistics.

    python benchmarks/fuzz.py --seconds 600                  # seeded structured mutations
    python benchmarks/fuzz.py --engine atheris --seconds 600 # coverage-guided (libFuzzer)
    python benchmarks/fuzz.py --target bundled --seconds 300 # bundled programs (.bpte)
    python benchmarks/fuzz.py --target etdump --seconds 300  # ETDumps read by the Inspector
    nice -n 19 python benchmarks/fuzz.py --tiers --count 20000 --workers 2  # both tiers
    python benchmarks/fuzz.py --tiers --indices 4101,4661  # those mutants of the campaign

``--target``: ``program`` (``.pte``/``.ptd``, the default), ``bundled`` (loaded
with the bundled loader, every test case run and verified) or ``etdump`` (read
by the Inspector with its debug buffer, turned into tables).

``random``: the mutations of ``tests/reliability/mutations.py`` (raw bytes, every
flatbuffer field at boundary values, swapped offsets, structural edits), drawn
from a seeded generator, each judged by ``tests/reliability/harness.py``.
``atheris``: libFuzzer mutates the corpus files themselves, guided by the
coverage of ``pyexecutorch``. Both print executions, distinct outcomes and
findings; a finding's file is written to ``--out`` (default ``.cache/fuzz``) so
that it can become a regression test. Exit status 1 when anything was found.

``--tiers``: ``--count`` mutants of ``tests/reliability/campaign.py`` (every kind, byte-level
and structure-aware), each run on the numpy and the compiled tier and compared, in
``--workers`` worker processes (a worker that dies is a ``crash`` of its mutant; one that
gives no answer in ``--timeout`` seconds a ``hang``). A tier's budget is 20 s of CPU time,
numba's compile time not counted, within 300 s of wall time: a mutant that has not used it
by then (compiling, or starved of the CPU) is ``slow``, not a ``hang``
(``harness.time_limit``). Prints per mutation kind: mutants,
ok, refused, float rounding (outputs that differ only where both are inf or NaN), slow
compilations, crashes, hangs, imprecise exceptions, tier differences; findings' files go
to ``--out``.
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
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))


SUFFIX = {"program": ".pte", "bundled": ".bpte", "etdump": ".etdp"}


def _save(out: Path, data: bytes, what: str, findings: list[dict], suffix: str = ".pte") -> None:
    out.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(data).hexdigest()[:16] + suffix
    (out / name).write_bytes(data)
    findings.append({"file": str(out / name), "finding": what[:500]})


def _report(
    engine: str, executions: int, seconds: float, outcomes, findings, target: str = "program"
) -> None:
    phases = collections.Counter()
    for key, n in outcomes.items():
        phases[f"{key[0]}:{key[1] or 'ok'}"] += n
    print(
        json.dumps(
            {
                "engine": engine,
                "target": target,
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
    from tests.reliability.harness import Finding, check, seeds
    from tests.reliability.mutations import (
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


def _devtools_cases(target: str, rng: random.Random):
    """Endless (data, judge) pairs: mutations of the bundled or ETDump seeds."""
    from tests.reliability.harness import bundled_seeds, check_bundled, check_etdump, etdump_seeds
    from tests.reliability.mutations import (
        bundled_fields,
        etdump_fields,
        field_mutation,
        raw_mutation,
        swap_offsets,
    )

    if target == "bundled":
        corpus = list(bundled_seeds().values())
        walk, judge = bundled_fields, check_bundled
    else:
        traces = etdump_seeds()
        walk, judge = etdump_fields, check_etdump
    while True:
        a, b = rng.randrange(1 << 31), rng.randrange(1 << 31)
        family = rng.randrange(5)
        if target == "bundled":
            data, extra = rng.choice(corpus), ()
        else:
            seed = rng.choice(traces)
            data, extra = seed.etdump, (seed.debug_buffer,)
        if family == 0:
            data = raw_mutation(data, rng.randrange(6), a, b)
        elif family == 1:
            data = field_mutation(data, a, rng.randrange(48), walk)
        elif family == 2:
            data = swap_offsets(data, a, b, walk)
        elif family == 3:  # two edits in a row
            data = raw_mutation(field_mutation(data, b, a, walk), rng.randrange(6), a, b)
        elif extra and extra[0] is not None:  # the debug buffer
            extra = (raw_mutation(extra[0], rng.randrange(6), a, b),)
        else:
            # Two fields of the seed (a walk of the once-edited file may go astray).
            data = field_mutation(field_mutation(data, a, b, walk), b, a, lambda _, d=data: walk(d))
        yield data, lambda data=data, extra=extra: judge(data, *extra)


def run_devtools(target: str, seconds: float, seed: int, out: Path) -> int:
    from tests.reliability.harness import Finding

    rng = random.Random(seed)
    outcomes: collections.Counter = collections.Counter()
    findings: list[dict] = []
    start = time.monotonic()
    n = 0
    for data, judge in _devtools_cases(target, rng):
        if time.monotonic() - start >= seconds:
            break
        n += 1
        try:
            outcomes[judge().key] += 1
        except Finding as e:
            _save(out, data, f"{target}: {e}", findings, SUFFIX[target])
    _report("random", n, time.monotonic() - start, outcomes, findings, target)
    return 1 if findings else 0


def run_atheris(seconds: float, out: Path, target: str = "program") -> int:
    import atheris

    with atheris.instrument_imports(include=["pyexecutorch"]):
        import pyexecutorch.backends.example.runtime  # noqa: F401
        import pyexecutorch.backends.xnnpack.runtime  # noqa: F401
        import pyexecutorch.devtools.bundled_program.runtime  # noqa: F401
        import pyexecutorch.devtools.inspector  # noqa: F401
        import pyexecutorch.kernels  # noqa: F401
        import pyexecutorch.runtime  # noqa: F401
        from tests.reliability.harness import (
            CORPUS,
            attempt,
            attempt_bundled,
            attempt_etdump,
            bundled_seeds,
            etdump_seeds,
        )

    if target == "bundled":
        seeds = bundled_seeds()
        judge = attempt_bundled
    elif target == "etdump":
        traces = etdump_seeds()
        seeds = {s.name: s.etdump for s in traces}
        # One debug buffer for every input: offsets outside it are among the outcomes.
        buffer = next(s.debug_buffer for s in traces if s.debug_buffer is not None)

        def judge(data: bytes):
            return attempt_etdump(data, buffer)
    else:
        seeds, judge = None, attempt
    outcomes: collections.Counter = collections.Counter()
    state = {"n": 0, "start": time.monotonic()}

    def one_input(data: bytes) -> None:
        state["n"] += 1
        outcomes[judge(data).key] += 1  # a Finding propagates: libFuzzer saves the input
        if state["n"] % 10_000 == 0:  # libFuzzer ends the process without running atexit
            elapsed = time.monotonic() - state["start"]
            _report("atheris", state["n"], elapsed, outcomes, [], target)

    out.mkdir(parents=True, exist_ok=True)
    work = out / f"atheris_{target}_corpus"
    work.mkdir(exist_ok=True)
    seed_dir = CORPUS
    if seeds is not None:
        seed_dir = out / f"atheris_{target}_seeds"
        seed_dir.mkdir(exist_ok=True)
        for name, data in seeds.items():
            (seed_dir / name).write_bytes(data)
    args = [
        sys.argv[0],
        str(work),
        str(seed_dir),
        f"-max_total_time={int(seconds)}",
        "-timeout=20",
        "-rss_limit_mb=4096",
        f"-artifact_prefix={out}/",
        "-print_final_stats=1",
    ]
    atheris.Setup(args, one_input)
    atheris.Fuzz()
    return 0


def _tier_worker(conn, campaign_seed: int) -> None:  # noqa: ANN001
    """Judge the mutants whose indices arrive on ``conn``; send back each verdict."""
    import dataclasses
    import warnings

    warnings.simplefilter("ignore")
    from tests.reliability.campaign import judge, mutant
    from tests.reliability.harness import seeds

    corpus = seeds(campaign=True)
    while True:
        index = conn.recv()
        if index is None:
            return
        conn.send(dataclasses.asdict(judge(mutant(corpus, index, campaign_seed))))


def run_tiers(
    count: int,
    workers: int,
    seed: int,
    out: Path,
    timeout: float,
    start: int = 0,
    indices: list[int] | None = None,
) -> int:
    """Judge mutants ``start .. start + count - 1`` (or the listed ``indices``) of campaign
    ``seed``; print and write the report, findings' files under ``out``."""
    import multiprocessing as mp

    from tests.reliability.campaign import FINDINGS, KINDS, mutant
    from tests.reliability.harness import seeds

    corpus = seeds(campaign=True)
    ctx = mp.get_context("spawn")
    chosen = list(range(start, start + count)) if indices is None else indices
    pending = chosen[::-1]
    per_kind: dict[str, collections.Counter] = {k: collections.Counter() for k in KINDS}
    per_seed: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    findings: list[dict] = []
    began = time.monotonic()
    done = 0

    def spawn():  # noqa: ANN202
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_tier_worker, args=(child, seed), daemon=True)
        proc.start()
        return {"proc": proc, "conn": parent, "index": None, "since": 0.0}

    def record(v: dict) -> None:
        nonlocal done
        done += 1
        per_kind[v["kind"]][v["label"]] += 1
        per_seed[v["seed"]][v["label"]] += 1
        if v["label"] in FINDINGS:
            m = mutant(corpus, v["index"], seed)
            if m.pte is not None:
                _save(
                    out,
                    m.pte,
                    f"{v['label']}: #{v['index']} {v['seed']} {v['kind']} "
                    f"{m.verification.name}: {v['detail']}",
                    findings,
                )

    def report() -> str:
        return _tier_report(
            seed, chosen, time.monotonic() - began, done, per_kind, per_seed, findings
        )

    reported, last_report = 0, time.monotonic()
    pool = [spawn() for _ in range(workers)]
    while pending or any(w["index"] is not None for w in pool):
        for w in pool:
            if w["index"] is None and pending:
                w["index"], w["since"] = pending.pop(), time.monotonic()
                w["conn"].send(w["index"])
        for w in pool:
            if w["index"] is None:
                continue
            index = w["index"]
            try:
                ready = w["conn"].poll(0.05)
                reply = w["conn"].recv() if ready else None
            except (EOFError, OSError):
                reply = "crash"
            if reply is None and not w["proc"].is_alive():
                reply = "crash"
            if reply is None and time.monotonic() - w["since"] > timeout:
                w["proc"].kill()
                reply = "hang"
            if reply is None:
                continue
            if isinstance(reply, str):  # the worker is gone: start another
                m = mutant(corpus, index, seed)
                code = w["proc"].exitcode
                record(
                    {
                        "index": index,
                        "seed": m.seed,
                        "kind": m.kind,
                        "label": reply,
                        "detail": f"worker exit code {code}",
                    }
                )
                w.update(spawn())
            else:
                record(reply)
                if reply["label"] in ("hang", "slow"):
                    # The time limit may have interrupted a compilation: numba's state in
                    # that process is not to be trusted for the next mutant.
                    w["proc"].kill()
                    w.update(spawn())
            w["index"] = None
        if done != reported and (done % 250 == 0 or time.monotonic() - last_report > 60):
            reported, last_report = done, time.monotonic()
            print(f"{done} mutants, {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
            out.mkdir(parents=True, exist_ok=True)
            (out / "report.json").write_text(report())  # what a killed run leaves
    for w in pool:
        w["conn"].send(None)
        w["proc"].join(10)
    text = report()
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(text)
    print(text)
    return 1 if findings else 0


def _tier_report(
    seed: int, chosen: list[int], seconds: float, done: int, per_kind, per_seed, findings
) -> str:
    from tests.reliability.campaign import FINDINGS

    labels = ("ok", "refused", "skipped", "rounding", "slow", *FINDINGS)
    table = {
        k: {label: c[label] for label in labels} | {"mutants": sum(c.values())}
        for k, c in per_kind.items()
    }
    total = collections.Counter()
    for c in per_kind.values():
        total.update(c)
    return json.dumps(
        {
            "engine": "tiers",
            "campaign_seed": seed,
            # (a range as [first, end), a list of chosen ones as it is)
            "indices": [chosen[0], chosen[-1] + 1]
            if chosen and chosen == list(range(chosen[0], chosen[-1] + 1))
            else chosen,
            "seconds": round(seconds, 1),
            "mutants": done,
            "total": {label: total[label] for label in labels},
            "per_kind": table,
            "per_seed": {s: dict(c) for s, c in sorted(per_seed.items())},
            "findings": findings,
        },
        indent=1,
    )


SUSPICIOUS = {"IndexError", "KeyError", "AttributeError", "MemoryError", "RecursionError"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=("random", "atheris"), default="random")
    p.add_argument("--target", choices=tuple(SUFFIX), default="program")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / ".cache" / "fuzz")
    p.add_argument("--tiers", action="store_true", help="both tiers on --count mutants")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--start", type=int, default=0, help="first mutant index (--tiers)")
    p.add_argument(
        "--indices",
        type=lambda s: [int(i) for i in s.split(",")],
        help="comma-separated mutant indices, instead of --start/--count (--tiers)",
    )
    p.add_argument("--workers", type=int, default=2)
    # (above both tiers' caps: campaign.TIME_LIMIT + campaign.COMPILE_CAP, and loading)
    p.add_argument("--timeout", type=float, default=700.0, help="per mutant (--tiers)")
    args = p.parse_args()
    if args.tiers:
        sys.exit(
            run_tiers(
                args.count,
                args.workers,
                args.seed,
                args.out,
                args.timeout,
                args.start,
                args.indices,
            )
        )
    if args.engine == "atheris":
        sys.exit(run_atheris(args.seconds, args.out, args.target))
    if args.target != "program":
        sys.exit(run_devtools(args.target, args.seconds, args.seed, args.out))
    sys.exit(run_random(args.seconds, args.seed, args.out))


if __name__ == "__main__":
    main()
