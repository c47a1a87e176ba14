"""``pyexecutorch export``: a PyTorch module to a ``.pte``, stage by stage."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyexecutorch.cli import common
from pyexecutorch.cli.common import CLIError, DynamicDim, TensorSpec, UsageError

HELP = "export a PyTorch module to a .pte program"
DESCRIPTION = """\
Export a torch.nn.Module with torch.export and the pyexecutorch compiler:
export -> to_edge -> lowering (with --backend) -> to_executorch -> write.

TARGET names the module: MODULE:NAME (an importable module; the current directory
is on the path) or FILE.py:NAME. NAME is an nn.Module class (built with no
arguments), an nn.Module instance, or a function returning a module or a
(module, example_inputs) pair.

--inputs SPEC gives the example inputs: comma-separated tensors DIMxDIM...:DTYPE,
e.g. "1x3x224x224:float32,8:int64" (dtype float32 when left out; "scalar:int64" is
a 0-d tensor). Float inputs are random, integer and bool inputs are zeros. Without
--inputs, the inputs returned by the factory or the module's example_inputs() are
used.

--dynamic makes dimensions dynamic with bounds: NAME=MIN:MAX for a dimension named
in the spec ("1xseq:int64" with --dynamic seq=1:128), or INPUT.DIM=MIN:MAX.

--method NAME exports forward under another name; NAME=ATTR exports the module's
method ATTR as NAME (repeat for several methods; then --inputs NAME=SPEC gives
each method its inputs)."""
EXAMPLES = """\
examples:
  pyexecutorch export pyexecutorch.examples.gpt:make_model --inputs 1x1:int64,1:int64 -o gpt.pte
  pyexecutorch export torchvision.models:mobilenet_v2 --inputs 1x3x224x224 -o mv2.pte
  pyexecutorch export my_model.py:Net --inputs "batchx16:float32" --dynamic batch=1:64 -o net.pte
  pyexecutorch export my_model.py:make --method encode=encode --method decode=decode \\
      --inputs encode=1x8:int64 --inputs decode=1x8x32 -o seq2seq.pte
  pyexecutorch export my_model.py:Net --inputs 1x16 --external-constants -o net.pte  # + .ptd
"""

STAGES = ("export", "to_edge", "lowering", "to_executorch", "write")

# --backend NAME -> (module, partitioner class) in pyexecutorch.backends
BACKENDS = {
    "xnnpack": (
        "pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner",
        "XnnpackPartitioner",
    ),
    "example": ("pyexecutorch.backends.example.aot", "ExamplePartitioner"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="TARGET", help="MODULE:NAME or FILE.py:NAME")
    p.add_argument(
        "--inputs",
        action="append",
        default=[],
        metavar="SPEC",
        help='example inputs, e.g. "1x3x224x224:float32,8:int64"',
    )
    p.add_argument(
        "--dynamic",
        action="append",
        default=[],
        metavar="DIM=MIN:MAX",
        help="a dynamic dimension and its bounds",
    )
    p.add_argument(
        "--method",
        action="append",
        default=[],
        metavar="NAME[=ATTR]",
        help="method name (and module method) to export",
    )
    p.add_argument("--backend", choices=sorted(BACKENDS), help="delegate what the backend supports")
    p.add_argument(
        "--external-constants",
        action="store_true",
        help="store the weights in a .ptd file next to the .pte",
    )
    p.add_argument(
        "--emit-while-loop",
        action="store_true",
        help="emit torch.while_loop as a loop (the official exporter refuses it)",
    )
    p.add_argument("-o", "--output", required=True, metavar="PTE", help="the .pte to write")


# --------------------------------------------------------------------------------------
# Arguments


def parse_methods(items: list[str]) -> dict[str, str]:
    """``--method`` values as ``{program method name: module attribute}``."""
    if not items:
        return {"forward": "forward"}
    out: dict[str, str] = {}
    for item in items:
        name, eq, attr = item.partition("=")
        name, attr = name.strip(), (attr.strip() if eq else "forward")
        if not name.isidentifier() or not attr.isidentifier():
            raise UsageError(
                f"bad --method {item!r}: expected NAME or NAME=ATTR (Python identifiers)"
            )
        if name in out:
            raise UsageError(f"--method {name!r} is given twice")
        out[name] = attr
    return out


def parse_inputs(items: list[str], methods: dict[str, str]) -> dict[str, list[TensorSpec] | None]:
    """``--inputs`` values per method (``NAME=SPEC`` for one method, ``SPEC`` for the rest)."""
    default: list[TensorSpec] | None = None
    per_method: dict[str, list[TensorSpec]] = {}
    for item in items:
        name, eq, rest = item.partition("=")
        if eq and name.strip() in methods:
            if name.strip() in per_method:
                raise UsageError(f"--inputs for method {name.strip()!r} is given twice")
            per_method[name.strip()] = common.parse_spec(rest)
        else:
            if default is not None:
                raise UsageError("--inputs is given twice; use --inputs NAME=SPEC for each method")
            default = common.parse_spec(item)
    return {m: per_method.get(m, default) for m in methods}


# --------------------------------------------------------------------------------------
# The module


def resolve_target(target: str) -> Any:
    """The object named by ``MODULE:NAME`` or ``FILE.py:NAME``."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise UsageError(f"bad TARGET {target!r}: expected MODULE:NAME or FILE.py:NAME")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise CLIError(f"model file not found: {where}")
        mod_name = f"_pyexecutorch_target_{path.stem}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise CLIError(f"cannot load {where} as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        sys.path.insert(0, str(path.resolve().parent))
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise CLIError(
                f"running {where} failed: {type(e).__name__}: {common.first_line(e)}"
            ) from e
    else:
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as e:
            raise CLIError(f"cannot import {where!r}: {e}") from e
        except Exception as e:
            raise CLIError(
                f"importing {where!r} failed: {type(e).__name__}: {common.first_line(e)}"
            ) from e
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise CLIError(f"{where} has no attribute {name!r}")
        obj = getattr(obj, part)
    return obj


def build_module(obj: Any, target: str) -> tuple[Any, tuple | None]:
    """``(module in eval mode, example inputs or None)`` from a class, instance or factory."""
    import torch  # noqa: PLC0415

    inputs = None
    if isinstance(obj, torch.nn.Module):
        module = obj
    elif callable(obj):
        kind = "class" if isinstance(obj, type) else "factory"
        try:
            made = obj()
        except Exception as e:
            raise CLIError(
                f"calling {target}() failed: {type(e).__name__}: {common.first_line(e)}"
            ) from e
        if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module):
            module, inputs = made
            inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
        elif isinstance(made, torch.nn.Module):
            module = made
        else:
            raise CLIError(
                f"{target} ({kind}) returned a {type(made).__name__}, not a torch.nn.Module or (module, inputs)"
            )
    else:
        raise CLIError(
            f"{target} is a {type(obj).__name__}, not a torch.nn.Module, a class or a factory"
        )
    if inputs is None and hasattr(module, "example_inputs"):
        ex = module.example_inputs
        ex = ex() if callable(ex) else ex
        inputs = tuple(ex) if isinstance(ex, (list, tuple)) else (ex,)
    return module.eval(), inputs


def _example_size(d: DynamicDim) -> int:
    # torch.export specializes sizes 0 and 1; the middle of the range avoids them.
    if d.high < 2:
        return d.high
    return max(2, d.low, (d.low + d.high) // 2)


def example_inputs(
    specs: list[TensorSpec], dims: list[DynamicDim], method: str
) -> tuple[tuple, Any]:
    """Example tensors for ``specs`` and torch.export ``dynamic_shapes`` (or None)."""
    import torch  # noqa: PLC0415
    from torch.export import Dim  # noqa: PLC0415

    named = {d.key: d for d in dims if d.input_index is None}
    by_position = {(d.input_index, d.dim): d for d in dims if d.input_index is not None}
    torch_dims: dict[str, Any] = {}

    def dim_object(d: DynamicDim) -> Any:
        if d.key not in torch_dims:
            name = d.key if d.input_index is None else f"dim{d.input_index}_{d.dim}"
            torch_dims[d.key] = Dim(name, min=d.low, max=d.high)
        return torch_dims[d.key]

    gen = torch.Generator().manual_seed(0)
    tensors, shapes = [], []
    for i, spec in enumerate(specs):
        sizes, dyn = [], {}
        for j, s in enumerate(spec.shape):
            if isinstance(s, str):
                d = named.get(s)
                if d is None:
                    raise UsageError(
                        f"dimension {s!r} of input {i} of {method!r} has no bounds: add --dynamic {s}=MIN:MAX"
                    )
                sizes.append(_example_size(d))
                dyn[j] = dim_object(d)
            else:
                d = by_position.get((i, j))
                if d is not None:
                    if not d.low <= s <= d.high:
                        raise UsageError(
                            f"--dynamic {d.key}={d.low}:{d.high}: input {i} has size {s} there, outside the bounds"
                        )
                    dyn[j] = dim_object(d)
                sizes.append(s)
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point:
            t = torch.randn(sizes, generator=gen).to(dtype)
        else:
            t = torch.zeros(sizes, dtype=dtype)
        tensors.append(t)
        shapes.append(dyn or None)
    for (i, j), d in by_position.items():
        if i >= len(specs) or j >= len(specs[i].shape):
            raise UsageError(
                f"--dynamic {d.key}: method {method!r} has no input {i} with a dimension {j}"
            )
    used = {s for spec in specs for s in spec.shape if isinstance(s, str)}
    for name in named:
        if name not in used:
            raise UsageError(
                f"--dynamic {name}: no dimension of the inputs of {method!r} is named {name!r}"
            )
    dynamic = tuple(shapes) if any(x is not None for x in shapes) else None
    return tuple(tensors), dynamic


def _method_module(module: Any, attr: str) -> Any:
    import torch  # noqa: PLC0415

    if attr == "forward":
        return module
    if not callable(getattr(module, attr, None)):
        raise CLIError(f"{type(module).__name__} has no method {attr!r}")

    class MethodAsForward(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = module

        def forward(self, *args: Any) -> Any:
            return getattr(self.module, attr)(*args)

    return MethodAsForward()


# --------------------------------------------------------------------------------------
# Stages


class Progress:
    """Prints one line per stage: its name, then its time (or "failed")."""

    def __init__(self, out: Any = None) -> None:
        self.out = out or sys.stdout
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        n = STAGES.index(name) + 1
        print(
            f"[{n}/{len(STAGES)}] {name:<14}{detail + '  ' if detail else ''}",
            end="",
            file=self.out,
            flush=True,
        )
        start = time.perf_counter()
        try:
            yield
        except BaseException as e:
            print("failed", file=self.out, flush=True)
            if isinstance(e, CLIError) or not isinstance(e, Exception):
                raise
            raise CLIError(f"{name} failed: {type(e).__name__}: {common.first_line(e)}") from e
        took = time.perf_counter() - start
        self.times[name] = took
        print(common.human_seconds(took), file=self.out, flush=True)

    def skip(self, name: str, why: str) -> None:
        n = STAGES.index(name) + 1
        print(f"[{n}/{len(STAGES)}] {name:<14}skipped ({why})", file=self.out, flush=True)


def _op_counts(ep: Any) -> tuple[int, int]:
    """(operator calls outside delegates, delegate calls) in an exported program."""
    ops = delegates = 0
    for node in ep.graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "__name__", str(node.target))
        if "executorch_call_delegate" in name:
            delegates += 1
        elif name != "getitem":
            ops += 1
    return ops, delegates


def _partitioner(name: str) -> Any:
    module_name, cls = BACKENDS[name]
    try:
        mod = importlib.import_module(module_name)
    except ImportError:
        raise CLIError(f"backend {name!r} is not available yet: {module_name} is missing") from None
    if not hasattr(mod, cls):
        raise CLIError(f"backend {name!r} is not available yet: {module_name} has no {cls}")
    return getattr(mod, cls)()


def run(args: argparse.Namespace) -> int:
    methods = parse_methods(args.method)
    specs = parse_inputs(args.inputs, methods)
    dims = [common.parse_dynamic(d) for d in args.dynamic]
    out = Path(args.output)
    if out.is_dir():
        raise UsageError(f"-o {args.output} is a directory; give a file name like model.pte")
    with warnings.catch_warnings():
        if not getattr(args, "debug", False):
            warnings.simplefilter("ignore")
        return _export(args, methods, specs, dims, out)


def _export(
    args: argparse.Namespace,
    methods: dict[str, str],
    specs: dict,
    dims: list[DynamicDim],
    out: Path,
) -> int:
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        raise CLIError(
            "export needs torch; install it with: pip install 'pyexecutorch[export]'"
        ) from None
    obj = resolve_target(args.target)

    module, default_inputs = build_module(obj, args.target)
    calls: dict[str, tuple[Any, tuple, Any]] = {}
    for name, attr in methods.items():
        spec = specs[name]
        if spec is not None:
            inputs, dynamic = example_inputs(spec, dims, name)
        elif default_inputs is not None and attr == "forward":
            if dims:
                raise UsageError("--dynamic needs --inputs (the dimensions are named in the spec)")
            inputs, dynamic = default_inputs, None
        else:
            raise UsageError(
                f"method {name!r} needs example inputs: pass --inputs SPEC (e.g. --inputs 1x16:float32)"
            )
        if attr != "forward" and dynamic is not None:
            dynamic = (dynamic,)  # the wrapper's forward takes *args
        calls[name] = (_method_module(module, attr), inputs, dynamic)
    progress = Progress()
    described = ", ".join(f"{n}({', '.join(_describe(x) for x in c[1])})" for n, c in calls.items())
    with progress.stage("export", described):
        programs = {}
        for name, (mod, inputs, dynamic) in calls.items():
            with torch.no_grad():
                programs[name] = torch.export.export(mod, inputs, dynamic_shapes=dynamic)
    from pyexecutorch.exir import ExecutorchBackendConfig, to_edge  # noqa: PLC0415

    with progress.stage("to_edge"):
        edge = to_edge(programs)
    before = sum(_op_counts(edge.exported_program(n))[0] for n in programs)
    remaining = before
    if args.backend:
        with progress.stage("lowering", args.backend):
            edge = edge.to_backend(_partitioner(args.backend))
        remaining = sum(_op_counts(edge.exported_program(n))[0] for n in programs)
    else:
        progress.skip("lowering", "no --backend")
    with progress.stage("to_executorch"):
        config = ExecutorchBackendConfig(
            external_constants=args.external_constants, emit_while_loop=args.emit_while_loop
        )
        et = edge.to_executorch(config)
        data = et.buffer
    written = [out]
    with progress.stage("write", str(out)):
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            if args.external_constants:
                names = sorted(et.data_files)
                et.write_tensor_data_to_file(str(out.parent))
                written += [out.parent / (n if n.endswith(".ptd") else f"{n}.ptd") for n in names]
            out.write_bytes(data)
        except BaseException:
            for p in written:  # no half-written output
                p.unlink(missing_ok=True)
            raise
    share = 0.0 if before == 0 else max(0.0, (before - remaining) / before)
    print(summary_line(out, data, share, written[1:]))
    return 0


def _describe(x: Any) -> str:
    shape = getattr(x, "shape", None)
    if shape is None:
        return type(x).__name__
    dtype = str(getattr(x, "dtype", "")).replace("torch.", "")
    return f"{'x'.join(str(s) for s in shape) or 'scalar'}:{dtype}"


def summary_line(out: Path, data: bytes, delegated_share: float, data_files: list[Path]) -> str:
    """``gpt.pte: 812.3 KB, 1 method (forward), arenas forward=[12.1 KB], delegated 0%``."""
    from pyexecutorch.schema.pte import decode_pte  # noqa: PLC0415

    program = decode_pte(data).program
    names = [p.name for p in program.execution_plan]
    arenas = "; ".join(
        f"{p.name}=[{', '.join(common.human_bytes(int(s)) for s in p.non_const_buffer_sizes[1:])}]"
        for p in program.execution_plan
    )
    line = (
        f"{out}: {common.human_bytes(len(data))}, {len(names)} method{'s' if len(names) != 1 else ''} "
        f"({', '.join(names)}), arenas {arenas}, delegated {delegated_share:.0%}"
    )
    if data_files:
        total = sum(p.stat().st_size for p in data_files if p.exists())
        line += (
            f", external data {', '.join(str(p) for p in data_files)} ({common.human_bytes(total)})"
        )
    return line
