"""The two-tier fuzz campaign: each mutant of a seed is loaded and run with the numpy tier
and with the compiled tier, and the two are compared.

A mutant is a pure function of (campaign seed, index): :func:`mutant` draws its seed
program, its mutation kind and the kind's choices from ``random.Random`` seeded with both,
so any finding is reproduced from its index alone. :func:`judge` classifies it:

- ``hang``: no result within 20 s of the process's CPU time (the time numba spends
  compiling the compiled tier's loops not counted: ``harness.time_limit``);
- ``slow``: a tier had not used that budget when its wall-clock cap (300 s) ran out: it was
  compiling, or waiting for a loaded machine's CPU (reported, not a finding);
- ``imprecise``: an exception outside the runtime's families (see ``harness.py``), or an
  ``ExecutionError`` caused by an ``IndexError``/``KeyError``/... inside the runtime;
- ``tier``: the tiers disagree: one runs and the other refuses, they refuse with
  different exception types, or their outputs differ in shape, dtype or value (beyond
  float rounding: ``|a - b| <= 1e-4 + 1e-3 |b|``, NaN equal to NaN);
- ``rounding``: the outputs differ only where both tiers give a non-finite value (inf on
  one, NaN or the other inf on the other): float rounding upstream of an overflow or a
  division, not a defect. A sum of values that cancel is 0 on one tier and a rounding
  residue on the other, and x / 0 is then NaN on one and inf on the other; inf - inf
  inside a product of overflowing weights is NaN or inf by the order of its terms
  (``tiers_mutable_buffer_add_alpha0.pte``, ``tiers_mlp_splice.pte``);
- ``ok`` (both run and agree) or ``refused`` (both refuse, with the same type).

A crash (the interpreter dies) can only be seen from outside: ``benchmarks/fuzz.py --tiers``
runs judges in worker processes and counts a worker's death as the mutant's ``crash``.

Torch-free, like the harness.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyexecutorch.runtime import Runtime, Verification

from .harness import (
    ALLOWED,
    MAX_ARENA_BYTES,
    MAX_INSTRUCTIONS,
    SUSPICIOUS_CAUSES,
    Finding,
    Seed,
    SlowCompile,
    inputs_for,
    time_limit,
)
from .mutations import (
    STRUCTURAL,
    field_mutation,
    raw_mutation,
    structural_mutation,
    swap_offsets,
)

RAW_KINDS = ("bitflip", "run", "truncate", "splice", "word", "dup_or_delete")
TIME_LIMIT = 20.0  # CPU seconds of running, compilation excluded
COMPILE_CAP = 300.0  # wall seconds of one tier on one mutant, compilation included
CALLS = 2  # each method runs twice: what load decided must hold on the second call


def _raw(k: int) -> Callable[[Seed, Seed, random.Random], tuple[bytes, tuple[bytes, ...]]]:
    def make(s: Seed, other: Seed, rng: random.Random) -> tuple[bytes, tuple[bytes, ...]]:
        a, b = rng.randrange(1 << 31), rng.randrange(1 << 31)
        return raw_mutation(s.pte, k, a, b, other.pte), s.data_files

    return make


def _structural(k: int) -> Callable[[Seed, Seed, random.Random], tuple[bytes | None, tuple]]:
    def make(s: Seed, other: Seed, rng: random.Random) -> tuple[bytes | None, tuple]:
        a, b = rng.randrange(1 << 31), rng.randrange(1 << 31)
        return structural_mutation(s.pte, k, a, b), s.data_files

    return make


def _field(s: Seed, other: Seed, rng: random.Random) -> tuple[bytes, tuple]:
    return field_mutation(s.pte, rng.randrange(1 << 31), rng.randrange(48)), s.data_files


def _swap(s: Seed, other: Seed, rng: random.Random) -> tuple[bytes, tuple]:
    return swap_offsets(s.pte, rng.randrange(1 << 31), rng.randrange(1 << 31)), s.data_files


def _double(s: Seed, other: Seed, rng: random.Random) -> tuple[bytes, tuple]:
    a, b = rng.randrange(1 << 31), rng.randrange(1 << 31)
    return raw_mutation(field_mutation(s.pte, b, a), rng.randrange(6), a, b), s.data_files


def _data_file(s: Seed, other: Seed, rng: random.Random) -> tuple[bytes, tuple]:
    if not s.data_files:
        return _field(s, other, rng)
    a, b = rng.randrange(1 << 31), rng.randrange(1 << 31)
    return s.pte, (raw_mutation(s.data_files[0], rng.randrange(6), a, b), *s.data_files[1:])


# name -> (weight, make): structure-aware kinds weigh more (byte-level ones mostly stop at
# the decoder).
KINDS: dict[str, tuple[int, Callable]] = {
    **{f"raw:{name}": (1, _raw(k)) for k, name in enumerate(RAW_KINDS)},
    "field": (6, _field),
    "swap_offsets": (2, _swap),
    "field+raw": (2, _double),
    "data_file": (1, _data_file),
    **{
        f"structure:{fn.__name__.lstrip('_')}": (2, _structural(k))
        for k, fn in enumerate(STRUCTURAL)
    },
}
_NAMES = list(KINDS)
_WEIGHTS = [KINDS[k][0] for k in _NAMES]


@dataclass
class Mutant:
    index: int
    seed: str
    kind: str
    pte: bytes | None
    data_files: tuple[bytes, ...]
    verification: Verification


def mutant(corpus: list[Seed], index: int, campaign_seed: int = 0) -> Mutant:
    """The ``index``-th mutant of a campaign (None bytes: the encoder refused the edit)."""
    rng = random.Random(f"{campaign_seed}:{index}")
    s = corpus[rng.randrange(len(corpus))]
    other = corpus[rng.randrange(len(corpus))]
    kind = rng.choices(_NAMES, _WEIGHTS)[0]
    pte, data_files = KINDS[kind][1](s, other, rng)
    verification = rng.choice(list(Verification))
    return Mutant(index, s.name, kind, pte, tuple(data_files), verification)


@dataclass
class TierRun:
    phase: str  # "ok", "load", "method", "execute", "hang" or "slow"
    error: str = ""
    message: str = ""
    imprecise: bool = False
    outputs: list[Any] = field(default_factory=list)


def run_tier(m: Mutant, jit: bool) -> TierRun:
    """Load ``m`` with one tier, load every method, run each CALLS times on the same inputs."""
    phase = "load"
    outputs: list[Any] = []
    try:
        with time_limit(TIME_LIMIT, COMPILE_CAP):
            program = Runtime.get().load_program(
                m.pte,
                verification=m.verification,
                data_files=list(m.data_files),
                jit=jit,
                max_arena_bytes=MAX_ARENA_BYTES,
                max_instructions=MAX_INSTRUCTIONS,
            )
            plans = {p.name: p for p in program.pte_file.program.execution_plan}
            for name in sorted(program.method_names):
                phase = "method"
                method = program.load_method(name)
                inputs = inputs_for(plans[name], np.random.default_rng(m.index))
                if inputs is None:
                    continue
                phase = "execute"
                for _ in range(CALLS):
                    outputs.append((name, method.execute(inputs, clone_outputs=True)))
    except SlowCompile as e:
        return TierRun("slow", "SlowCompile", str(e))
    except Finding as e:  # the time limit
        return TierRun("hang", "Timeout", str(e))
    except ALLOWED as e:
        cause = e.__cause__
        suspicious = cause is not None and isinstance(cause, SUSPICIOUS_CAUSES)
        return TierRun(phase, type(e).__name__, str(e)[:300], suspicious)
    except (ValueError, TypeError, RuntimeError) as e:
        # The input checks name the input: the harness's inputs met a corrupt declaration.
        precise = phase == "execute" and "input" in str(e)
        return TierRun(phase, type(e).__name__, str(e)[:300], not precise)
    except Exception as e:  # noqa: BLE001 - everything else is imprecise
        return TierRun(phase, type(e).__name__, str(e)[:300], True)
    return TierRun("ok", outputs=outputs)


def _same_value(a: Any, b: Any, nonfinite: bool = False) -> str:
    """ "" when two outputs agree (floats to rounding; with ``nonfinite``, also where both
    are inf or NaN), else what differs."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{len(a)} vs {len(b)} items"
        return next(
            (d for x, y in zip(a, b, strict=True) if (d := _same_value(x, y, nonfinite))), ""
        )
    if hasattr(a, "shape") or hasattr(b, "shape"):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
        if x.dtype.kind in "fc":
            x64, y64 = x.astype(np.complex128), y.astype(np.complex128)
            same = (x64 == y64) | (np.isnan(x64) & np.isnan(y64))
            with np.errstate(invalid="ignore"):  # (inf - inf: NaN, not close)
                close = np.abs(x64 - y64) <= 1e-4 + 1e-3 * np.abs(y64)
            if nonfinite:
                close |= ~np.isfinite(x64) & ~np.isfinite(y64)
            bad = ~(same | close)
            return f"{int(bad.sum())} of {x.size} values differ" if bad.any() else ""
        return "" if np.array_equal(x, y) else f"{int((x != y).sum())} of {x.size} values differ"
    floats = isinstance(a, float) and isinstance(b, float)
    same = a == b or (floats and a != a and b != b)
    same |= nonfinite and floats and not (np.isfinite(a) or np.isfinite(b))
    return "" if same else f"{a!r} vs {b!r}"


@dataclass
class Verdict:
    index: int
    seed: str
    kind: str
    label: str  # ok, refused, skipped, rounding, slow, hang, imprecise, tier
    detail: str = ""


def judge(m: Mutant) -> Verdict:
    """Both tiers on one mutant, and what that says (see the module docstring)."""
    if m.pte is None:
        return Verdict(m.index, m.seed, m.kind, "skipped")
    numpy, compiled = run_tier(m, False), run_tier(m, True)

    def verdict(label: str, detail: str) -> Verdict:
        return Verdict(m.index, m.seed, m.kind, label, detail[:400])

    for tier, run in (("numpy", numpy), ("compiled", compiled)):
        if run.phase in ("hang", "slow"):
            return verdict(run.phase, f"{tier}: {run.message}")
        if run.imprecise:
            return verdict("imprecise", f"{tier} {run.phase}: {run.error}: {run.message}")
    if numpy.phase == "ok" and compiled.phase == "ok":
        outputs = [o for _, o in numpy.outputs], [o for _, o in compiled.outputs]
        diff = _same_value(*outputs)
        if diff and not _same_value(*outputs, nonfinite=True):
            return verdict("rounding", f"outputs: {diff}, all non-finite on both tiers")
        return verdict("tier", f"outputs: {diff}") if diff else verdict("ok", "")
    if numpy.phase == "ok" or compiled.phase == "ok":
        ran, refused = ("numpy", compiled) if numpy.phase == "ok" else ("compiled", numpy)
        return verdict(
            "tier",
            f"{ran} ran, the other refused at {refused.phase}: {refused.error}: {refused.message}",
        )
    if numpy.error != compiled.error:
        return verdict(
            "tier",
            f"numpy {numpy.phase}: {numpy.error}: {numpy.message} | compiled "
            f"{compiled.phase}: {compiled.error}: {compiled.message}",
        )
    return verdict("refused", f"{numpy.phase}: {numpy.error}")


FINDINGS = ("crash", "hang", "imprecise", "tier")
