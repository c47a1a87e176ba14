"""``pyexecutorch eval``: a program's metrics over a dataset, on this machine or on Ray."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pyexecutorch.cli import common

HELP = "evaluate a .pte over a dataset: top-1/top-k, agreement, SNR, perplexity"
DESCRIPTION = """\
Run a method of a .pte over every row of a dataset and print its metrics. The data: a
folder of images (DIR/<class>/<file> gives labels; Pillow decodes, torchvision-style
resize, center crop and normalisation), an .npz, a Parquet/Arrow file, or a text file
with --tokenizer (perplexity of an LLM program over sliding windows). Rows are grouped
by the program's batch (a static batch pads the short last batch and drops the padding;
a dynamic batch takes --batch-size up to its bound). A row that fails (an unreadable
file) is counted and reported; the run goes on. --workers spreads the rows over local
processes; --ray runs them on Ray Data (one program per actor)."""
EXAMPLES = """\
examples:
  pyexecutorch eval model.pte --data images/                     # top-1 from the folders
  pyexecutorch eval int8.pte --data images/ --reference float.pte --metric top1,agreement,snr
  pyexecutorch eval model.pte --data val.parquet --inputs pixels --labels label --workers 2
  pyexecutorch eval model.pte --data x.npz --reference my_model.py:Net --metric max_error,snr
  pyexecutorch eval llm.pte --data corpus.txt --tokenizer tokenizer.json --metric perplexity
  pyexecutorch eval model.pte --data images/ --ray auto --workers 8 --json out.json
"""


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="the .pte file")
    p.add_argument("--data", required=True, metavar="DIR|FILE", help="the dataset")
    p.add_argument("--method", help="the method to run (default: forward)")
    p.add_argument(
        "--labels",
        metavar="COLUMN|FILE",
        help="the label column (.npz/Parquet), or a .npy/.txt of one integer per row",
    )
    p.add_argument("--inputs", metavar="COL,COL", help="the input columns in order (.npz/Parquet)")
    p.add_argument(
        "--reference",
        metavar="PTE|FILE.py:NAME",
        help="another .pte, or an eager module (MODULE:NAME or FILE.py:NAME; torch)",
    )
    p.add_argument(
        "--metric",
        metavar="NAMES",
        help="comma-separated: top1, top5, topK, agreement, max_error, snr, perplexity "
        "(default: top1 with labels, else agreement,snr with a reference; perplexity for text)",
    )
    p.add_argument("--batch-size", type=int, help="rows per call for a dynamic batch")
    p.add_argument("--workers", type=int, default=1, help="worker processes or Ray actors")
    p.add_argument(
        "--ray",
        metavar="ADDRESS|auto|local",
        help="run on Ray Data: a cluster's address, 'auto' (the running cluster) or 'local'",
    )
    p.add_argument(
        "--chunk-rows",
        type=int,
        help="rows a worker takes at a time (default: up to 32, 128 on Ray; whole batches)",
    )
    p.add_argument("--threads", type=int, help="BLAS/compiled threads per worker (default 1)")
    p.add_argument("--no-jit", action="store_true", help="numpy kernels only")
    text = p.add_argument_group("text (perplexity)")
    text.add_argument("--tokenizer", help="the tokenizer file (tokenizer.json, tiktoken, .model)")
    text.add_argument("--window", type=int, help="tokens per window (default: the context)")
    text.add_argument("--stride", type=int, help="tokens between windows (default: window/2)")
    images = p.add_argument_group("images")
    images.add_argument("--resize", type=int, help="the shorter side before the crop")
    images.add_argument("--mean", type=_floats, help="per-channel means (default ImageNet's)")
    images.add_argument("--std", type=_floats, help="per-channel std (default ImageNet's)")
    out = p.add_argument_group("results")
    out.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    out.add_argument("--parquet", metavar="FILE", help="write every row's outputs as Parquet")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")


def _read_labels(spec: str) -> Any:
    import numpy as np  # noqa: PLC0415

    path = Path(spec)
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    try:
        return np.asarray([int(line) for line in path.read_text().split()], dtype=np.int64)
    except ValueError as e:
        raise common.CLIError(f"{spec}: labels should be one integer per line ({e})") from e


def _dataset(args: argparse.Namespace, program_bytes: bytes) -> Any:
    from pyexecutorch import data  # noqa: PLC0415

    source = Path(args.data)
    if not source.exists():
        raise common.CLIError(f"dataset not found: {args.data}")
    if args.tokenizer or source.suffix in (".txt", ".text"):
        if not args.tokenizer:
            raise common.UsageError("a text dataset needs --tokenizer")
        window = args.window
        if window is None:
            program = data.worker.load_program(program_bytes, {"jit": False})
            window = data.TextScorer(program).context
        return data.text_windows(source, args.tokenizer, window, args.stride)
    labels_file = args.labels and Path(args.labels).suffix in (".npy", ".txt")
    inputs = args.inputs.split(",") if args.inputs else None
    preprocess = None
    if source.is_dir():
        kw = {"resize": args.resize, "mean": args.mean, "std": args.std}
        preprocess = data.Preprocess(**{k: v for k, v in kw.items() if v is not None})
    ds = data.read(
        source,
        inputs=inputs,
        labels=None if labels_file else args.labels,
        preprocess=preprocess,
    )
    if labels_file:
        ds = ds.with_labels(_read_labels(args.labels))
    return ds


def _reference(spec: str | None, in_process: bool) -> Any:
    if spec is None:
        return None
    if spec.endswith((".pte", ".bin")) or Path(spec).is_file():
        return spec
    if not in_process:
        raise common.UsageError(
            "an eager --reference runs in this process only; export it to a .pte "
            "(pyexecutorch export) to compare with --workers or --ray"
        )
    from pyexecutorch.cli.export import build_module, resolve_target  # noqa: PLC0415

    module, _ = build_module(resolve_target(spec), spec)
    return module


def _default_metrics(ds: Any, reference: Any) -> str:
    if ds.task == "text":
        return "perplexity"
    if ds.labels is not None:
        return "top1,agreement" if reference is not None else "top1"
    if reference is not None:
        return "agreement,max_error,snr"
    raise common.UsageError("nothing to measure: give labels (--labels), a --reference or --metric")


def run(args: argparse.Namespace) -> int:
    from pyexecutorch import data  # noqa: PLC0415

    model = Path(args.model)
    if not model.is_file():
        raise common.CLIError(f"program file not found: {args.model}")
    if args.workers < 1:
        raise common.UsageError(f"--workers must be at least 1, got {args.workers}")
    program_bytes = model.read_bytes()
    ds = _dataset(args, program_bytes)
    engine = "ray" if args.ray else "embedded"
    reference = _reference(args.reference, engine == "embedded" and args.workers == 1)
    metrics = args.metric or _default_metrics(ds, reference)
    address = None if args.ray in (None, "local") else args.ray
    if args.ray:
        import logging  # noqa: PLC0415

        # Ray Data logs each dataset's start and end; the progress bar says as much.
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    try:
        result = data.evaluate(
            program_bytes,
            ds,
            method=args.method or "forward",
            metrics=metrics,
            reference=reference,
            batch_size=args.batch_size,
            engine=engine,
            workers=args.workers,
            ray_address=address,
            chunk_rows=args.chunk_rows,
            keep_outputs=bool(args.parquet),
            progress=not args.no_progress,
            jit=False if args.no_jit else None,
            threads=args.threads,
        )
    except data.MetricError as e:
        raise common.CLIError(str(e)) from e
    print(f"{args.model} on {args.data}: {len(ds)} rows")
    print(result.table())
    if args.json:
        result.write_json(args.json)
        print(f"wrote {args.json}")
    if args.parquet:
        result.write_parquet(args.parquet)
        print(f"wrote {args.parquet}")
    return 0
