"""Readers: what users hold, as a :class:`Dataset`.

* a folder of images (``root/<class>/<file>``, labels from the sorted class names as
  torchvision's ``ImageFolder`` numbers them; or images directly in ``root``, without
  labels), decoded with Pillow and preprocessed as torchvision's ``Resize(r)``,
  ``CenterCrop(c)``, ``ToTensor()``, ``Normalize(mean, std)`` do on a PIL image;
* ``.npz`` (one array per column, rows along dimension 0);
* Parquet or Arrow IPC files (one column per input; list columns become tensors);
* a text file, tokenized by the LLM runner's tokenizer into sliding windows.

Pillow and pyarrow are imported when a reader needs them (the ``scale`` extra).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyexecutorch.data.dataset import ColumnFeatures, Dataset

IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp", ".gif"}
)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CROP_FRACTION = 0.875  # torchvision's ImageNet evaluation: Resize(256) then CenterCrop(224)


def _need(module: str, extra: str = "scale") -> Any:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        raise ImportError(
            f"this reader needs the '{module}' package: pip install 'pyexecutorch[{extra}]'"
        ) from e


# --------------------------------------------------------------------------------------
# Images


@dataclass(frozen=True)
class Preprocess:
    """torchvision-style preprocessing. ``crop``: the output's (height, width), by
    default the method input's; ``resize``: the shorter side before the crop, by
    default ``crop / 0.875``; ``mean``/``std`` per channel, on values in [0, 1]."""

    resize: int | None = None
    crop: tuple[int, int] | None = None
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD


@dataclass(frozen=True)
class _BoundImages:
    column: str
    resize: int
    crop: tuple[int, int]
    channels: int
    channels_last: bool
    mean: np.ndarray
    std: np.ndarray

    def __call__(self, row: dict[str, Any]) -> list[np.ndarray]:
        return [self.load(str(row[self.column]))]

    def load(self, path: str) -> np.ndarray:
        image = _need("PIL.Image")
        with image.open(path) as img:
            img = img.convert("L" if self.channels == 1 else "RGB")
            # Resize(int): the shorter side to `resize`, the longer scaled and truncated.
            w, h = img.size
            short, long = (w, h) if w <= h else (h, w)
            new_long = int(self.resize * long / short)
            size = (self.resize, new_long) if w <= h else (new_long, self.resize)
            if size != (w, h):
                img = img.resize(size, image.Resampling.BILINEAR)
            ch, cw = self.crop
            w, h = img.size
            if ch > h or cw > w:
                raise ValueError(
                    f"{path}: a {w}x{h} image after resizing is smaller than the {cw}x{ch} crop"
                )
            top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
            pixels = np.asarray(img.crop((left, top, left + cw, top + ch)), dtype=np.float32)
        pixels = pixels.reshape(ch, cw, self.channels) / np.float32(255.0)
        pixels = (pixels - self.mean) / self.std
        return np.ascontiguousarray(pixels if self.channels_last else pixels.transpose(2, 0, 1))


@dataclass(frozen=True)
class ImageFeatures:
    """A row's input is the image file in ``column``, preprocessed."""

    column: str
    preprocess: Preprocess

    def bind(self, plan: Any) -> _BoundImages:
        if len(plan.inputs) != 1:
            raise ValueError(
                f"method '{plan.method}' takes {len(plan.inputs)} inputs; an image folder feeds one"
            )
        shape = plan.inputs[0].row_shape
        if len(shape) != 3:
            raise ValueError(
                f"method '{plan.method}' takes rows of shape {list(shape)}; images are "
                "[channels, height, width] (or [height, width, channels])"
            )
        channels_last = shape[0] not in (1, 3) and shape[2] in (1, 3)
        channels, hw = (shape[2], shape[:2]) if channels_last else (shape[0], shape[1:])
        p = self.preprocess
        crop = tuple(p.crop) if p.crop else tuple(hw)
        if crop != tuple(hw):
            raise ValueError(
                f"the crop {crop[1]}x{crop[0]} does not match the {hw[1]}x{hw[0]} images "
                f"method '{plan.method}' takes"
            )
        resize = p.resize or int(round(min(crop) / CROP_FRACTION))
        mean = np.asarray(p.mean, dtype=np.float32)
        std = np.asarray(p.std, dtype=np.float32)
        if channels == 1 and mean.size > 1:
            mean, std = mean[:1], std[:1]
        if mean.size != channels or std.size != channels or np.any(std == 0):
            raise ValueError(
                f"mean {list(p.mean)} and std {list(p.std)} should hold {channels} values "
                "(std non-zero)"
            )
        return _BoundImages(self.column, resize, crop, channels, channels_last, mean, std)


def image_folder(root: str | os.PathLike[str], preprocess: Preprocess | None = None) -> Dataset:
    """The images under ``root``: ``root/<class>/*`` labelled by class (sorted names,
    numbered from 0), or ``root/*`` without labels."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder not found: {root}")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    paths: list[str] = []
    labels: list[int] = []
    if classes:
        for label, name in enumerate(classes):
            files = sorted(
                f for f in (root / name).rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES
            )
            paths += [str(f) for f in files]
            labels += [label] * len(files)
    else:
        paths = [str(f) for f in sorted(root.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not paths:
        raise ValueError(f"{root}: no image files ({', '.join(sorted(IMAGE_SUFFIXES))})")
    columns: dict[str, np.ndarray] = {"path": np.asarray(paths, dtype=object)}
    if classes:
        columns["label"] = np.asarray(labels, dtype=np.int64)
    features = ImageFeatures("path", preprocess or Preprocess())
    info = {"classes": classes}
    return Dataset(columns, features, "label" if classes else None, source=str(root), info=info)


# --------------------------------------------------------------------------------------
# Arrays: .npz, Parquet, Arrow


def _tensor_dataset(
    columns: dict[str, np.ndarray], inputs: list[str] | None, labels: str | None, source: str
) -> Dataset:
    if labels is not None and labels not in columns:
        raise ValueError(f"{source}: no label column '{labels}' (columns: {', '.join(columns)})")
    names = inputs if inputs else [n for n in columns if n != labels]
    missing = [n for n in names if n not in columns]
    if missing or not names:
        raise ValueError(
            f"{source}: no input column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing) or '(none left besides the labels)'} "
            f"(columns: {', '.join(columns)})"
        )
    return Dataset(columns, ColumnFeatures(tuple(names)), labels, source=source)


def npz(
    path: str | os.PathLike[str], inputs: list[str] | None = None, labels: str | None = None
) -> Dataset:
    """An ``.npz``: each array a column (rows along dimension 0); ``inputs`` names the
    method's input columns in order (default: every array but ``labels``, in file order)."""
    with np.load(path, allow_pickle=False) as f:
        columns = {name: f[name] for name in f.files}
    if any(a.ndim == 0 for a in columns.values()):
        raise ValueError(f"{path}: every array should hold rows (a 0-d array has none)")
    return _tensor_dataset(columns, inputs, labels, str(path))


def _arrow_column(column: Any, name: str, source: str) -> np.ndarray:
    pa = _need("pyarrow")
    kind = column.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        rows = column.to_pylist()
        try:
            return np.asarray(rows)
        except ValueError as e:
            raise ValueError(f"{source}: column '{name}' holds rows of different shapes") from e
    return column.to_numpy(zero_copy_only=False)


def parquet(
    path: str | os.PathLike[str], inputs: list[str] | None = None, labels: str | None = None
) -> Dataset:
    """A Parquet file (``.parquet``) or an Arrow IPC file (``.arrow``, ``.feather``); list
    columns become tensors with one more dimension per nesting level."""
    path = Path(path)
    if path.suffix in (".arrow", ".feather", ".ipc"):
        table = _need("pyarrow.feather").read_table(path)
    else:
        table = _need("pyarrow.parquet").read_table(path)
    columns = {
        name: _arrow_column(table.column(name), name, str(path)) for name in table.column_names
    }
    return _tensor_dataset(columns, inputs, labels, str(path))


# --------------------------------------------------------------------------------------
# Text


def text_windows(
    path: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str] | Any,
    window: int,
    stride: int | None = None,
    *,
    bos: bool = True,
) -> Dataset:
    """A text file as overlapping windows of at most ``window`` tokens, ``stride`` apart
    (default ``window // 2``, less than ``window``). Each token after the first is scored once: in the first
    window that holds it after a context of the tokens before it in that window, as
    the usual sliding-window perplexity does. ``bos``: the tokenizer's BOS first."""
    from pyexecutorch.extension.llm.runner.tokenizer import load_tokenizer  # noqa: PLC0415

    stride = stride or max(1, window // 2)
    if window < 2 or not 0 < stride < window:
        # stride < window: each window's first scored token has a token of context.
        raise ValueError(
            f"a window of {window} tokens with stride {stride}: need 2 <= window and "
            "0 < stride < window"
        )
    tok = load_tokenizer(tokenizer) if isinstance(tokenizer, (str, os.PathLike)) else tokenizer
    text = Path(path).read_text(encoding="utf-8")
    ids = tok.encode(text, 1 if bos else 0)
    if len(ids) < 2:
        raise ValueError(f"{path}: {len(ids)} token(s); perplexity needs at least 2")
    rows, lengths, starts = [], [], []
    scored_to = 1  # the first token is context only
    begin = 0
    while scored_to < len(ids):
        end = min(begin + window, len(ids))
        rows.append(ids[begin:end] + [0] * (window - (end - begin)))
        lengths.append(end - begin)
        starts.append(scored_to - begin)
        scored_to = end
        begin += stride
    columns = {
        "tokens": np.asarray(rows, dtype=np.int64),
        "length": np.asarray(lengths, dtype=np.int64),
        "score_from": np.asarray(starts, dtype=np.int64),
    }
    info = {"tokens": len(ids), "window": window, "stride": stride}
    return Dataset(columns, None, None, task="text", source=str(path), info=info)


# --------------------------------------------------------------------------------------


def read(
    path: str | os.PathLike[str],
    *,
    inputs: list[str] | None = None,
    labels: str | None = None,
    preprocess: Preprocess | None = None,
) -> Dataset:
    """The dataset at ``path``, by its kind: a folder of images, ``.npz``, Parquet/Arrow."""
    p = Path(path)
    if p.is_dir():
        return image_folder(p, preprocess)
    if not p.is_file():
        raise FileNotFoundError(f"dataset not found: {p}")
    suffix = p.suffix.lower()
    if suffix == ".npz":
        return npz(p, inputs, labels)
    if suffix in (".parquet", ".pq", ".arrow", ".feather", ".ipc"):
        return parquet(p, inputs, labels)
    raise ValueError(
        f"{p}: unknown dataset kind '{suffix}' (a folder of images, .npz, .parquet, .arrow; "
        "a text file with a tokenizer for perplexity)"
    )
