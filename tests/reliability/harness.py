"""The fuzz harness: load and run one (possibly corrupt) program, bundled program or
ETDump trace, and judge the outcome.

Every input must end in one of two ways: the program loads and its methods run,
or the runtime raises an exception of the families a caller can handle
(``FormatError`` and its ``InvalidProgramError``, ``MissingOperatorError``,
``MissingBackendError``, ``ExecutionError``; ``NotImplementedError`` for a valid
dtype numpy cannot hold). Anything else (an ``IndexError`` from inside the
runtime, a ``MemoryError``, a hang) is a finding. ``attempt`` returns an
:class:`Outcome`; ``check`` raises :class:`Finding` for a forbidden one.

A bundled program (``attempt_bundled``) is loaded with the bundled loader and
each of its test cases run and verified: it may also fail with the loader's
``RuntimeError`` (caused by a ``FormatError``) or a ``BundledVerificationError``.
An ETDump (``attempt_etdump``) is read by the Inspector, with its debug buffer when
it has one, and turned into tables: it may only fail with a ``FormatError``.

Torch-free: the seeds are files in ``tests/data/fuzz_corpus`` (see
``make_corpus.py``), loaded with numpy inputs made from each method's declarations.
"""

from __future__ import annotations

import io
import json
import math
import re
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyexecutorch import portable_lib
from pyexecutorch.devtools import Inspector
from pyexecutorch.devtools.bundled_program.runtime import BundledModule, BundledVerificationError
from pyexecutorch.runtime import (
    ExecutionError,
    MissingBackendError,
    MissingOperatorError,
    Runtime,
    Verification,
)
from pyexecutorch.schema import FormatError
from pyexecutorch.schema.program import Bool, Double, Int, Null, String, Tensor
from pyexecutorch.schema.scalar_type import SCALAR_TYPE_TO_DTYPE, ScalarType

CORPUS = Path(__file__).resolve().parents[1] / "data" / "fuzz_corpus"

# Runs under these limits: a file may not make a method allocate more, nor loop longer.
MAX_ARENA_BYTES = 64 << 20
MAX_INSTRUCTIONS = 20_000
MAX_INPUT_ELEMENTS = 1 << 20
TIME_LIMIT_S = 20.0

ALLOWED = (
    FormatError,
    MissingOperatorError,
    MissingBackendError,
    ExecutionError,
    NotImplementedError,
)
# An ExecutionError caused by one of these means a kernel met arguments the loader
# should have refused; counted (``suspicious``) so a campaign reports them.
SUSPICIOUS_CAUSES = (IndexError, KeyError, AttributeError, MemoryError, RecursionError, NameError)


@dataclass(frozen=True)
class Seed:
    name: str
    pte: bytes
    data_files: tuple[bytes, ...] = ()


def seeds(campaign: bool = False) -> list[Seed]:
    """The corpus, in name order; with ``campaign`` also the seeds only the two-tier
    campaign uses (XNNPACK and quantized programs whose compiled forms take long to build
    in a cold cache: see ``campaign.py``)."""
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    return [
        Seed(
            name,
            (CORPUS / name).read_bytes(),
            tuple((CORPUS / d).read_bytes() for d in entry["data_files"]),
        )
        for name, entry in sorted(manifest.items())
        if campaign or not entry.get("campaign_only")
    ]


class Finding(AssertionError):
    """An outcome the runtime must never produce."""


@dataclass(frozen=True)
class Outcome:
    phase: str  # "ok", "load", "method", "execute"
    error: str = ""  # exception class name
    message: str = ""
    cause: str = ""  # an ExecutionError's cause, by class name

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What distinguishes outcomes: numbers and quoted names blanked out."""
        template = re.sub(r"'[^']*'|\d+", "#", self.message)[:120]
        return (self.phase, self.error, self.cause, template)

    @property
    def suspicious(self) -> bool:
        return self.cause in {c.__name__ for c in SUSPICIOUS_CAUSES}


class _Timeout(BaseException):
    pass


class SlowCompile(Finding):
    """The block used less than its budget of running time when its wall-clock cap ran out:
    it was compiling (numba), or starved of the CPU by a loaded machine; told apart from a
    hang, which spends its budget running."""


class _CompileClock:
    """CPU seconds this process has spent in numba compilations, from numba's own events
    (a compilation and LLVM's work, which it may finish later: every compilation counts,
    whoever starts it)."""

    KINDS = ("numba:compile", "numba:llvm_lock")

    def __init__(self) -> None:
        self.depth = 0
        self.began = 0.0
        self.total = 0.0
        self.installed = False

    def install(self) -> None:
        if self.installed:
            return
        self.installed = True
        try:
            from numba.core import event  # noqa: PLC0415 - only where compiles are timed
        except ImportError:
            return
        clock = self

        class Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                if clock.depth == 0:
                    clock.began = time.process_time()
                clock.depth += 1

            def on_end(self, ev: Any) -> None:
                clock.depth -= 1
                if clock.depth == 0:
                    clock.total += time.process_time() - clock.began

        for kind in self.KINDS:
            event.register(kind, Listener())

    def seconds(self) -> float:
        running = time.process_time() - self.began if self.depth else 0.0
        return self.total + running


COMPILES = _CompileClock()


@contextmanager
def time_limit(seconds: float, cap: float | None = None) -> Iterator[None]:
    """Raise :class:`Finding` when the block runs longer than ``seconds`` (main thread).

    With ``cap``, ``seconds`` is a budget of the process's CPU time outside numba's
    compilations (a compiled tier's first load of a new program compiles its loops: that
    is slow, not a hang; and CPU time, not wall time, is what a loaded machine leaves a
    run), and the block may take up to ``cap`` seconds of wall time in all: past that,
    :class:`SlowCompile` when it had not spent its budget, else :class:`Finding` (a hang).
    """
    start, cpu = time.perf_counter(), time.process_time()
    if cap is not None:
        COMPILES.install()
    compiled_before = COMPILES.seconds()

    def running() -> float:
        return time.process_time() - cpu - (COMPILES.seconds() - compiled_before)

    def on_alarm(signum: int, frame: Any) -> None:
        elapsed = time.perf_counter() - start
        if cap is not None and elapsed < cap and running() < seconds:
            # the rest was compilation or waiting for the CPU: look again when the
            # budget's rest could have run
            left = min(max(seconds - running(), 0.5), cap - elapsed)
            signal.setitimer(signal.ITIMER_REAL, left + 0.01)
            return
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds if cap is None else min(seconds, cap))
    try:
        yield
    except _Timeout:
        elapsed = time.perf_counter() - start
        compiling = COMPILES.seconds() - compiled_before
        if cap is not None and running() < seconds:
            raise SlowCompile(
                f"not done after {elapsed:.0f} s ({compiling:.0f} s of CPU compiling, "
                f"{running():.0f} s running): slow, not a hang"
            ) from None
        raise Finding(
            f"no result after {seconds} s of running ({compiling:.0f} s of CPU compiling "
            "besides) (a hang?)"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def inputs_for(plan: Any, rng: np.random.Generator) -> list[Any] | None:
    """Inputs a method declares (tensors at their declared shapes), or None if it
    declares something too large or of a kind this harness cannot make."""
    out: list[Any] = []
    for i in plan.inputs:
        val = plan.values[i].val
        if isinstance(val, Tensor):
            try:
                dtype = SCALAR_TYPE_TO_DTYPE.get(ScalarType(val.scalar_type))
            except ValueError:
                return None
            shape = tuple(val.sizes)
            if dtype is None or math.prod(shape) > MAX_INPUT_ELEMENTS:
                return None
            if dtype.kind == "f":
                out.append(rng.standard_normal(shape).astype(dtype))
            elif dtype.kind == "b":
                out.append(rng.integers(0, 2, shape).astype(dtype))
            elif dtype.kind in "iu":  # 1 and 2: valid indices and divisors
                out.append(rng.integers(1, 3, shape).astype(dtype))
            else:
                out.append(np.zeros(shape, dtype))
        elif isinstance(val, (Int, Double, Bool)):
            out.append(getattr(val, type(val).__name__.lower() + "_val"))
        elif isinstance(val, String):
            out.append(val.string_val)
        elif val is None or isinstance(val, Null):
            out.append(None)
        else:
            return None
    return out


def _outcome(phase: str, e: BaseException) -> Outcome:
    cause = e.__cause__
    return Outcome(
        phase, type(e).__name__, str(e)[:300], type(cause).__name__ if cause is not None else ""
    )


def attempt(
    pte: bytes,
    data_files: tuple[bytes, ...] = (),
    *,
    verification: Verification = Verification.InternalConsistency,
    calls: int = 1,
) -> Outcome:
    """Load ``pte``, load every method, run each ``calls`` times; what happened."""
    rng = np.random.default_rng(0)
    phase = "load"
    try:
        program = Runtime.get().load_program(
            pte,
            verification=verification,
            data_files=list(data_files),
            max_arena_bytes=MAX_ARENA_BYTES,
            max_instructions=MAX_INSTRUCTIONS,
        )
        plans = {p.name: p for p in program.pte_file.program.execution_plan}
        for name in sorted(program.method_names):
            phase = "method"
            method = program.load_method(name)
            inputs = inputs_for(plans[name], rng)
            if inputs is None:
                continue
            phase = "execute"
            for _ in range(calls):
                method.execute(inputs)
    except ALLOWED as e:
        return _outcome(phase, e)
    except (ValueError, TypeError, RuntimeError) as e:
        # The input checks name the method and input: the harness's inputs came from a
        # corrupt declaration (a program that loads but that no input fits).
        if phase == "execute" and "input" in str(e):
            return _outcome(phase, e)
        raise Finding(f"{phase}: {type(e).__name__}: {e}") from e
    except Exception as e:  # noqa: BLE001 - everything else is a finding
        raise Finding(f"{phase}: {type(e).__name__}: {e}") from e
    return Outcome("ok")


def check(
    pte: bytes,
    data_files: tuple[bytes, ...] = (),
    *,
    verification: Verification = Verification.InternalConsistency,
) -> Outcome:
    """``attempt`` under the time limit; raises :class:`Finding` for a forbidden outcome."""
    with time_limit(TIME_LIMIT_S):
        return attempt(pte, data_files, verification=verification)


# ---------------------------------------------------------------- bundled programs, ETDumps


@dataclass(frozen=True)
class TraceSeed:
    name: str
    etdump: bytes
    debug_buffer: bytes | None


def _devtools_listing() -> dict[str, dict]:
    return json.loads((CORPUS / "devtools.json").read_text())


def bundled_seeds() -> dict[str, bytes]:
    """The bundled program seeds (``.bpte``), by name."""
    return {name: (CORPUS / name).read_bytes() for name in sorted(_devtools_listing()["bundled"])}


def etdump_seeds() -> list[TraceSeed]:
    """The ETDump seeds, with their debug buffers, in name order."""
    out = []
    for name, entry in sorted(_devtools_listing()["etdump"].items()):
        buffer = entry["debug_buffer"]
        out.append(
            TraceSeed(
                name,
                (CORPUS / name).read_bytes(),
                (CORPUS / buffer).read_bytes() if buffer else None,
            )
        )
    return out


def attempt_bundled(bpte: bytes) -> Outcome:
    """Load ``bpte`` with the bundled loader; run and verify each of its test cases."""
    phase = "load"
    try:
        portable_lib._load_bundled_program_from_buffer(bpte)
        # Again, under the harness's limits: a mutated program may declare huge arenas or
        # loop forever.
        bundled = BundledModule(
            bpte, max_arena_bytes=MAX_ARENA_BYTES, max_instructions=MAX_INSTRUCTIONS
        )
        for method in bundled.method_names:
            for index in range(bundled.num_test_cases(method)):
                phase = "verify"
                bundled.verify_result_with_bundled_expected_output(method, index)
    except (*ALLOWED, BundledVerificationError) as e:
        return _outcome(phase, e)
    except (ValueError, TypeError, RuntimeError) as e:
        # The loader's error wraps a FormatError; the input checks name the method and the
        # input (a test case whose inputs the method does not take).
        if phase == "load" and isinstance(e.__cause__, FormatError):
            return _outcome(phase, e.__cause__)
        if phase == "verify" and "input" in str(e).lower():
            return _outcome(phase, e)
        raise Finding(f"{phase}: {type(e).__name__}: {e}") from e
    except Exception as e:  # noqa: BLE001 - everything else is a finding
        raise Finding(f"{phase}: {type(e).__name__}: {e}") from e
    return Outcome("ok")


def attempt_etdump(etdump: bytes, debug_buffer: bytes | None = None) -> Outcome:
    """Read ``etdump`` (and its debug buffer) with the Inspector; build its tables."""
    phase = "load"
    try:
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            if debug_buffer is not None:
                f.write(debug_buffer)
                f.flush()
            inspector = Inspector(
                etdump_data=etdump, debug_buffer_path=f.name if debug_buffer is not None else None
            )
        phase = "tables"
        for block in inspector.event_blocks:
            block.to_dataframe()
        inspector.to_dataframe()
        inspector.print_data_tabular(file=io.StringIO())
        inspector.get_op_list()
    except FormatError as e:
        return _outcome(phase, e)
    except Exception as e:  # noqa: BLE001 - everything else is a finding
        raise Finding(f"{phase}: {type(e).__name__}: {e}") from e
    return Outcome("ok")


def check_bundled(bpte: bytes) -> Outcome:
    """``attempt_bundled`` under the time limit; raises :class:`Finding` for a forbidden one."""
    with time_limit(TIME_LIMIT_S):
        return attempt_bundled(bpte)


def check_etdump(etdump: bytes, debug_buffer: bytes | None = None) -> Outcome:
    """``attempt_etdump`` under the time limit; raises :class:`Finding` for a forbidden one."""
    with time_limit(TIME_LIMIT_S):
        return attempt_etdump(etdump, debug_buffer)
