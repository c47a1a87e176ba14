"""Helpers shared by the commands: errors, input specs, loading programs and inputs,
formatting. Nothing here imports torch; numpy and the runtime are imported lazily."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class CLIError(Exception):
    """An error reported as one line on stderr; ``code`` is the exit status."""

    code = 1

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class UsageError(CLIError):
    """Bad arguments (exit status 2, like argparse's own errors)."""

    code = 2


# --------------------------------------------------------------------------------------
# Formatting


def first_line(e: BaseException) -> str:
    """An exception's message as one line (its first line, noting that there is more)."""
    text = str(e).strip()
    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        text = e.args[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    return lines[0] + (" (more with --debug)" if len(lines) > 1 else "")


def human_bytes(n: int) -> str:
    """``812 B``, ``7.1 KB``, ``19.2 MB`` (powers of 1024)."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def human_seconds(s: float) -> str:
    """``812 us``, ``3.40 ms``, ``1.25 s``."""
    if s < 1e-3:
        return f"{s * 1e6:.0f} us" if s >= 1e-4 else f"{s * 1e6:.1f} us"
    if s < 1:
        ms = s * 1e3
        return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"
    return f"{s:.2f} s"


def as_numpy(value: Any) -> Any:
    """Tensor outputs as numpy arrays (the runtime returns torch tensors when torch is
    loaded in the process); lists element-wise; anything else unchanged."""
    if isinstance(value, (list, tuple)):
        return type(value)(as_numpy(v) for v in value)
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


def describe_value(value: Any) -> str:
    """``float32[1, 10]  min -1.2 max 3.4 mean 0.05`` for an array; ``int 3`` for a scalar."""
    import numpy as np  # noqa: PLC0415

    if not isinstance(value, np.ndarray):
        if isinstance(value, (list, tuple)):
            return f"{type(value).__name__} of {len(value)}: {_short(list(value))}"
        return f"{type(value).__name__} {value!r}"
    shape = ", ".join(str(s) for s in value.shape)
    head = f"{value.dtype.name}[{shape}]"
    if value.size == 0:
        return f"{head}  (empty)"
    flat = value.reshape(-1)
    if value.dtype.kind == "f" or value.dtype.kind == "c":
        data = flat.astype(np.float64) if value.dtype.kind == "f" else np.abs(flat)
        finite = data[np.isfinite(data)]
        if finite.size == 0:
            return f"{head}  (no finite values)"
        stats = f"min {finite.min():.4g}  max {finite.max():.4g}  mean {finite.mean():.4g}"
        if finite.size != data.size:
            stats += f"  ({data.size - finite.size} non-finite)"
        return f"{head}  {stats}"
    if value.dtype.kind == "b":
        return f"{head}  {int(flat.sum())} true of {flat.size}"
    return f"{head}  {_short(flat.tolist())}  (min {flat.min()}, max {flat.max()})"


def _short(items: list[Any], limit: int = 8) -> str:
    shown = ", ".join(str(x) for x in items[:limit])
    return f"[{shown}{', ...' if len(items) > limit else ''}]"


# --------------------------------------------------------------------------------------
# Input specs: "1x3x224x224:float32,8:int64"

DTYPE_ALIASES = {
    "float32": "float32",
    "float": "float32",
    "f32": "float32",
    "float16": "float16",
    "half": "float16",
    "f16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float64": "float64",
    "double": "float64",
    "f64": "float64",
    "int64": "int64",
    "long": "int64",
    "i64": "int64",
    "int32": "int32",
    "int": "int32",
    "i32": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
}

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class TensorSpec:
    """One input of a spec: sizes (an int, or the name of a dynamic dimension) and a dtype."""

    shape: tuple[int | str, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{'x'.join(str(s) for s in self.shape) or 'scalar'}:{self.dtype}"


def parse_spec(spec: str) -> list[TensorSpec]:
    """Parse ``"1x3x224x224:float32,8:int64"``: comma-separated inputs, each
    ``DIMxDIMx...[:DTYPE]`` (float32 by default; ``DIM*DIM`` where a dimension's name
    holds an ``x``). A dimension is a size or the name of a dynamic dimension (bounded
    with ``--dynamic NAME=MIN:MAX``); ``scalar`` is a 0-d tensor."""
    if not spec.strip():
        raise UsageError(f"bad --inputs spec {spec!r}: it is empty")
    out = []
    for k, item in enumerate(spec.split(",")):
        item = item.strip()
        where = f"bad --inputs spec {spec!r}: input {k} ({item!r})"
        shape_part, _, dtype_part = item.partition(":")
        dtype_key = dtype_part.strip().lower() or "float32"
        dtype = DTYPE_ALIASES.get(dtype_key)
        if dtype is None:
            raise UsageError(
                f"{where}: unknown dtype {dtype_part!r}; use one of {', '.join(sorted(set(DTYPE_ALIASES.values())))}"
            )
        shape_part = shape_part.strip()
        if shape_part in ("", "scalar", "()"):
            out.append(TensorSpec((), dtype))
            continue
        dims: list[int | str] = []
        for d in shape_part.split("*" if "*" in shape_part else "x"):
            d = d.strip()
            if d.isdigit():
                dims.append(int(d))
            elif _NAME.match(d):
                dims.append(d)
            else:
                raise UsageError(f"{where}: dimension {d!r} is neither a size nor a name")
        out.append(TensorSpec(tuple(dims), dtype))
    return out


@dataclass(frozen=True)
class DynamicDim:
    """``--dynamic NAME=MIN:MAX`` (a named dimension of the spec) or ``I.D=MIN:MAX``
    (dimension D of input I)."""

    key: str
    low: int
    high: int
    input_index: int | None = None
    dim: int | None = None


def parse_dynamic(text: str) -> DynamicDim:
    key, eq, bounds = text.partition("=")
    low, colon, high = bounds.partition(":")
    key = key.strip()
    where = f"bad --dynamic {text!r}"
    if not eq or not colon:
        raise UsageError(
            f"{where}: expected NAME=MIN:MAX or INPUT.DIM=MIN:MAX (e.g. seq=1:128 or 0.1=1:128)"
        )
    try:
        lo, hi = int(low), int(high)
    except ValueError:
        raise UsageError(f"{where}: MIN and MAX must be integers") from None
    if lo < 0 or hi < lo:
        raise UsageError(f"{where}: need 0 <= MIN <= MAX")
    m = re.fullmatch(r"(\d+)\.(\d+)", key)
    if m:
        return DynamicDim(key, lo, hi, int(m.group(1)), int(m.group(2)))
    if not _NAME.match(key):
        raise UsageError(f"{where}: {key!r} is neither a dimension name nor INPUT.DIM")
    return DynamicDim(key, lo, hi)


# --------------------------------------------------------------------------------------
# Programs and inputs (runtime side: numpy only)


def load_program(path: str, data_files: Sequence[str] = (), **options: Any) -> Any:
    """Load ``path`` in our runtime, turning the loader's failures into one-line errors.

    ``options`` go to ``Runtime.load_program`` (``enable_etdump=True``, ...)."""
    from pyexecutorch.runtime import Runtime  # noqa: PLC0415
    from pyexecutorch.schema.errors import FormatError  # noqa: PLC0415

    p = Path(path)
    if not p.exists():
        raise CLIError(f"program file not found: {path}")
    if p.is_dir():
        raise CLIError(f"{path} is a directory, not a program file")
    if p.stat().st_size == 0:
        raise CLIError(f"{path} is not a valid program: the file is empty")
    for d in data_files:
        if not Path(d).is_file():
            raise CLIError(f"data file not found: {d}")
    try:
        return Runtime.get().load_program(str(p), data_files=list(data_files), **options)
    except FormatError as e:
        raise CLIError(f"{path} is not a valid program: {e}") from e


def resolve_method(program: Any, name: str | None, path: str) -> str:
    names = sorted(program.method_names)
    if name is None:
        if "forward" in names or not names:
            return "forward"
        return names[0]
    if name not in names:
        raise CLIError(f"{path} has no method {name!r}; its methods: {', '.join(names)}")
    return name


def input_values(program: Any, method: str) -> list[Any]:
    """The example values the program stores for each input (shape, dtype, or scalar)."""
    plan = next(p for p in program.pte_file.program.execution_plan if p.name == method)
    return [plan.values[i].val for i in plan.inputs]


def random_inputs(program: Any, method: str, seed: int = 0) -> list[Any]:
    """Inputs built from the method's metadata: floats from a standard normal, integers
    in [0, 4) (valid indices for most index inputs), booleans at random; non-tensor
    inputs take the values the program stores. Dynamic dimensions take their upper
    bounds."""
    import numpy as np  # noqa: PLC0415

    from pyexecutorch.schema.program import Bool, Double, Int, Null, Tensor  # noqa: PLC0415
    from pyexecutorch.schema.scalar_type import SCALAR_TYPE_TO_DTYPE, ScalarType  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for i, val in enumerate(input_values(program, method)):
        if isinstance(val, Tensor):
            dtype = SCALAR_TYPE_TO_DTYPE.get(ScalarType(val.scalar_type))
            if dtype is None:
                raise CLIError(
                    f"input {i} of {method!r} has dtype {ScalarType(val.scalar_type).name}, which --random cannot make; pass --inputs"
                )
            shape = tuple(val.sizes)
            if dtype.kind == "f":
                out.append(rng.standard_normal(shape).astype(dtype))
            elif dtype.kind == "b":
                out.append(rng.integers(0, 2, shape).astype(bool))
            elif dtype.kind in "iu":
                out.append(rng.integers(0, 4, shape).astype(dtype))
            elif dtype.kind == "c":
                out.append(
                    (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
                )
            else:
                raise CLIError(
                    f"input {i} of {method!r}: --random cannot make {dtype}; pass --inputs"
                )
        elif isinstance(val, Int):
            out.append(val.int_val)
        elif isinstance(val, Double):
            out.append(val.double_val)
        elif isinstance(val, Bool):
            out.append(val.bool_val)
        elif val is None or isinstance(val, Null):
            out.append(None)
        else:
            raise CLIError(
                f"input {i} of {method!r} is a {type(val).__name__}, which --random cannot make; pass --inputs"
            )
    return out


def read_inputs(paths: Sequence[str], program: Any, method: str) -> list[Any]:
    """Inputs from ``.npy`` files (one per input) or one ``.npz`` (arrays in file order).
    0-d arrays become Python scalars where the method takes a scalar."""
    import numpy as np  # noqa: PLC0415

    from pyexecutorch.schema.program import Bool, Double, Int  # noqa: PLC0415

    arrays: list[Any] = []
    for p in paths:
        if not Path(p).is_file():
            raise CLIError(f"input file not found: {p}")
        try:
            loaded = np.load(p, allow_pickle=False)
        except Exception as e:  # noqa: BLE001 - numpy raises several types for bad files
            raise CLIError(f"cannot read {p}: {e}") from e
        if isinstance(loaded, np.lib.npyio.NpzFile):
            if len(paths) > 1:
                raise UsageError("give either one .npz file or one .npy file per input, not both")
            with loaded:
                arrays.extend(loaded[k] for k in loaded.files)
        else:
            arrays.append(loaded)
    stored = input_values(program, method)
    if len(arrays) != len(stored):
        raise CLIError(
            f"method {method!r} takes {len(stored)} inputs, but {len(arrays)} were given"
        )
    out = []
    for a, val in zip(arrays, stored, strict=True):
        if isinstance(val, Int):
            out.append(int(a))
        elif isinstance(val, Double):
            out.append(float(a))
        elif isinstance(val, Bool):
            out.append(bool(a))
        else:
            out.append(a)
    return out


def add_seed_and_data_options(p: Any) -> None:
    """``--seed`` (of the random inputs :func:`method_inputs` makes) and ``--data`` (.ptd files)."""
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument(
        "--data",
        nargs="+",
        default=[],
        metavar="PTD",
        help="external data files (.ptd) the program needs",
    )


def method_inputs(args: Any, program: Any, method: str) -> tuple[list[Any], str]:
    """``--inputs`` files, or random inputs; returns the inputs and where they came from."""
    if getattr(args, "inputs", None):
        return read_inputs(args.inputs, program, method), "from " + ", ".join(args.inputs)
    seed = getattr(args, "seed", 0)
    return random_inputs(program, method, seed), f"random (seed {seed})"


def _ours(e: BaseException) -> bool:
    """An error the runtime raised on purpose (its own types, or a bad-input ValueError /
    TypeError), as opposed to a bug, which keeps its type name in the message."""
    return type(e).__module__.startswith("pyexecutorch.") or isinstance(e, (ValueError, TypeError))


@contextlib.contextmanager
def compile_progress() -> Iterator[None]:
    """Within it, the compiled tier's compilations are announced on stderr: a method's
    first load may compile for up to a minute, which must not look like a hang."""
    logger = logging.getLogger("pyexecutorch.compiled")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("pyexecutorch: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def load_method(program: Any, name: str) -> Any:
    """``program.load_method(name)``, with the runtime's errors as one-line CLI errors and
    its compilations announced (see :func:`compile_progress`)."""
    try:
        with compile_progress():
            return program.load_method(name)
    except Exception as e:
        if not _ours(e):
            raise
        raise CLIError(f"cannot load method {name!r}: {first_line(e)}") from e


def execute(method: Any, inputs: list[Any], **kwargs: Any) -> list[Any]:
    """``method.execute``, with bad inputs and kernel failures as one-line CLI errors."""
    try:
        return method.execute(inputs, **kwargs)
    except Exception as e:
        if not _ours(e):
            raise
        raise CLIError(first_line(e)) from e


def arena_sizes(program: Any, method: str) -> list[int]:
    meta = program.metadata(method)
    return [meta.memory_planned_buffer_size(i) for i in range(meta.num_memory_planned_buffers())]
