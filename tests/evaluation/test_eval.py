"""``pyexecutorch.data`` and ``pyexecutorch eval``: a small CNN over a generated image
folder and a tiny LLM over a generated text, evaluated in this process, over a local
process pool and on a real local Ray instance (started once for the module), against a
plain loop over the rows and torch eager."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from pyexecutorch import data
from pyexecutorch.cli.main import main
from pyexecutorch.data.batching import split_outputs
from pyexecutorch.runtime import Runtime
from tests.evaluation import _programs as P
from tests.llm import _programs as llm

# Ray Data reads its own deprecated settings when it copies its context.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")

PER_CLASS = 5  # 15 images and a broken one: 16 rows, 4 batches of 4, the last padded


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """The model, its static-batch and dynamic-batch programs, a second model's program
    (the reference), and the image folder with one unreadable file."""
    root = tmp_path_factory.mktemp("images")
    P.write_images(root, PER_CLASS)
    (root / "c1" / "9_broken.png").write_bytes(b"\x89PNG not really")
    model = P.make_cnn(0)
    return {
        "model": model,
        "static": P.export_cnn(model),
        "dynamic": P.export_cnn(model, dynamic_batch=8),
        "other": P.export_cnn(P.make_cnn(1)),
        "root": root,
        "broken": str(root / "c1" / "9_broken.png"),
    }


@pytest.fixture(scope="module")
def ray_local():
    import ray

    with P.ray_at_normal_priority():
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=80 * 2**20,
            log_to_driver=False,
        )
        yield ray
        ray.shutdown()


def _images(cnn) -> data.Dataset:
    return data.image_folder(cnn["root"])


def _plain_loop(pte: bytes, ds: data.Dataset) -> dict[int, np.ndarray]:
    """Every readable row alone through the runtime (its batch padded with copies)."""
    method = Runtime.get().load_program(pte).load_method("forward")
    features = ds.features.bind(data.plan_batches(method._program, "forward"))
    out = {}
    for i, path in enumerate(ds.columns["path"]):
        try:
            (x,) = features({"path": path})
        except Exception:  # noqa: BLE001 - the broken file
            continue
        out[i] = np.asarray(method.execute([np.stack([x] * P.BATCH)])[0])[0]
    return out


# --------------------------------------------------------------------------------------
# Readers and batching


def test_image_preprocessing_is_torchvisions(cnn):
    """Resize(27) (24 / 0.875), CenterCrop(24), ToTensor, Normalize on a PIL image."""
    ds = _images(cnn)
    assert ds.info["classes"] == ["c0", "c1", "c2"]
    assert ds.columns["label"].tolist() == [0] * 5 + [1] * 6 + [2] * 5
    plan = data.plan_batches(Runtime.get().load_program(cnn["static"]), "forward")
    features = ds.features.bind(plan)
    for path in ds.columns["path"][:3]:
        (x,) = features({"path": path})
        with Image.open(path) as img:
            w, h = img.size
            size = (27, int(27 * h / w)) if w <= h else (int(27 * w / h), 27)
            img = img.convert("RGB").resize(size, Image.Resampling.BILINEAR)
            left, top = round((size[0] - 24) / 2), round((size[1] - 24) / 2)
            want = np.asarray(img, dtype=np.float32)[top : top + 24, left : left + 24] / 255
        want = (want - np.float32(data.readers.IMAGENET_MEAN)) / np.float32(
            data.readers.IMAGENET_STD
        )
        assert x.shape == (3, 24, 24) and x.dtype == np.float32
        np.testing.assert_allclose(x, want.transpose(2, 0, 1), rtol=1e-6, atol=1e-6)


def test_batch_plans_pad_static_batches_only(cnn):
    static = data.plan_batches(Runtime.get().load_program(cnn["static"]), "forward")
    assert (static.size, static.padded) == (4, True)
    rows = [[np.full((3, 24, 24), float(i), np.float32)] for i in range(3)]
    (batch,) = static.stack(rows)
    assert batch.shape == (4, 3, 24, 24)
    assert batch[:, 0, 0, 0].tolist() == [0.0, 1.0, 2.0, 2.0]  # the padding repeats row 2
    (kept,) = split_outputs([np.arange(8.0).reshape(4, 2)], 3, 4, "forward")
    assert kept.tolist() == [[0, 1], [2, 3], [4, 5]]
    dynamic_program = Runtime.get().load_program(cnn["dynamic"])
    assert data.plan_batches(dynamic_program, "forward").size == 8
    dynamic = data.plan_batches(dynamic_program, "forward", 5)
    assert (dynamic.size, dynamic.padded) == (5, False)
    assert dynamic.stack(rows)[0].shape == (3, 3, 24, 24)
    with pytest.raises(ValueError, match="static batch of 4; a batch size of 3 needs"):
        data.plan_batches(Runtime.get().load_program(cnn["static"]), "forward", 3)
    with pytest.raises(
        ValueError, match=r"row 7: input 0 of 'forward' takes rows of shape \[3, 24, 24\]"
    ):
        static.row_inputs([np.zeros((3, 24, 23), np.float32)], "row 7")
    with pytest.raises(
        TypeError, match="input 0 of 'forward' is float32, but the row holds complex64"
    ):
        static.row_inputs([np.zeros((3, 24, 24), np.complex64)], "row 7")


# --------------------------------------------------------------------------------------
# The CNN: embedded, process pool, Ray


@pytest.fixture(scope="module")
def embedded(cnn):
    """In this process, against the eager module as the reference."""
    return data.evaluate(
        cnn["static"],
        _images(cnn),
        metrics="top1,top2,agreement,max_error,snr",
        reference=cnn["model"],
        keep_outputs=True,
    )


def test_embedded_matches_a_plain_loop_and_eager(cnn, embedded):
    ds = _images(cnn)
    plain = _plain_loop(cnn["static"], ds)
    broken = list(ds.columns["path"]).index(cnn["broken"])
    assert sorted(plain) == [i for i in range(16) if i != broken]
    assert (embedded.rows, embedded.failed, embedded.batch_size) == (16, 1, 4)
    ((row, message),) = embedded.errors
    assert row == broken
    assert message.startswith("UnidentifiedImageError: cannot identify image file")
    outputs = embedded.per_row["output_0"]
    for i, want in plain.items():
        np.testing.assert_allclose(outputs[i], want, rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        eager = cnn["model"](torch.from_numpy(np.stack([x for x in _features(cnn, ds)]))).numpy()
    good = sorted(plain)
    np.testing.assert_allclose(outputs[good], eager, rtol=1e-4, atol=1e-5)
    labels = ds.columns["label"][good]
    top1 = np.mean(eager.argmax(1) == labels)
    rank = (eager > eager[np.arange(len(good)), labels][:, None]).sum(1)
    assert embedded.metrics["top1"] == pytest.approx(top1)
    assert embedded.metrics["reference_top1"] == pytest.approx(top1)
    assert embedded.metrics["top2"] == pytest.approx(np.mean(rank < 2))
    assert embedded.metrics["agreement"] == 1.0
    assert embedded.metrics["max_error"] < 1e-5
    assert embedded.metrics["snr_db"] > 80
    assert embedded.per_row["prediction"][broken] == -1
    assert embedded.per_row["prediction"][good].tolist() == eager.argmax(1).tolist()


def _features(cnn, ds: data.Dataset) -> list[np.ndarray]:
    plan = data.plan_batches(Runtime.get().load_program(cnn["static"]), "forward")
    features = ds.features.bind(plan)
    return [features({"path": p})[0] for p in ds.columns["path"] if p != cnn["broken"]]


def _same_rows(a: data.EvalResult, b: data.EvalResult, same_batches: bool = True) -> None:
    """The same rows failed and the same outputs and metrics; with ``same_batches`` (the
    same rows in each call) the same floats too, else within float32 rounding."""
    assert b.errors == a.errors
    np.testing.assert_array_equal(b.per_row["prediction"], a.per_row["prediction"])
    if same_batches:
        np.testing.assert_array_equal(b.per_row["output_0"], a.per_row["output_0"])
        assert b.metrics == a.metrics
        return
    np.testing.assert_allclose(b.per_row["output_0"], a.per_row["output_0"], rtol=1e-6, atol=1e-7)
    assert b.metrics.keys() == a.metrics.keys()
    for k in a.metrics:
        approx = pytest.approx(a.metrics[k], rel=1e-6, abs={"max_error": 1e-7}.get(k, 0.0))
        assert b.metrics[k] == (approx if k != "snr_db" else pytest.approx(a.metrics[k], abs=3)), k


def test_dynamic_batch_gives_the_same_rows(cnn, embedded):
    result = data.evaluate(
        cnn["dynamic"],
        _images(cnn),
        metrics="top1,top2,agreement,max_error,snr",
        reference=cnn["model"],
        batch_size=5,
        keep_outputs=True,
    )
    assert result.batch_size == 5
    _same_rows(embedded, result, same_batches=False)


def test_process_pool_matches_in_process(cnn):
    ds = _images(cnn)
    kw = {"metrics": "top1,agreement,snr", "reference": cnn["other"], "keep_outputs": True}
    alone = data.evaluate(cnn["static"], ds, **kw, chunk_rows=4)
    pool = data.evaluate(cnn["static"], ds, **kw, workers=2, chunk_rows=4)
    assert pool.workers == 2 and pool.failed == 1
    assert alone.metrics["snr_db"] < 20  # a different model: a real comparison
    _same_rows(alone, pool)
    # Each row's share of its chunk's CPU in the worker: the same within a chunk of 4.
    for result in (alone, pool):
        cpu = result.per_row["cpu_ms"].reshape(-1, 4)
        assert np.all(cpu > 0) and np.all(cpu == cpu[:, :1])
        assert result.worker_cpu_ms == pytest.approx(cpu.mean())


def test_ray_matches_embedded(cnn, ray_local, tmp_path, capsys):
    """``pyexecutorch eval --ray auto`` (the running local instance) against the API's
    embedded engine: the same failed row, per-row outputs and metrics."""
    import pyarrow.parquet as pq

    ds = _images(cnn)
    metrics = "top1,agreement,max_error,snr"
    embedded = data.evaluate(
        cnn["static"], ds, metrics=metrics, reference=cnn["other"], keep_outputs=True, chunk_rows=8
    )
    pte, other = tmp_path / "cnn.pte", tmp_path / "other.pte"
    pte.write_bytes(cnn["static"])
    other.write_bytes(cnn["other"])
    out_json, out_pq = tmp_path / "r.json", tmp_path / "rows.parquet"
    rc = main(
        ["eval", str(pte), "--data", str(cnn["root"]), "--reference", str(other),
         "--metric", metrics, "--ray", "auto", "--workers", "2", "--chunk-rows", "8",
         "--json", str(out_json), "--parquet", str(out_pq), "--no-progress"]
    )  # fmt: skip
    assert rc == 0, capsys.readouterr()
    summary = json.loads(out_json.read_text())
    assert (summary["engine"], summary["workers"], summary["failed"]) == ("ray", 2, 1)
    assert summary["errors"] == [{"row": r, "error": e} for r, e in embedded.errors]
    assert summary["metrics"] == embedded.metrics
    rows = pq.read_table(out_pq).to_pydict()
    np.testing.assert_array_equal(
        np.asarray(rows["output_0"], np.float32), embedded.per_row["output_0"]
    )
    assert rows["prediction"] == embedded.per_row["prediction"].tolist()


def test_npz_and_parquet_rows_give_the_same_outputs(cnn, embedded, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ds = _images(cnn)
    good = [i for i, p in enumerate(ds.columns["path"]) if p != cnn["broken"]]
    pixels, labels = np.stack(_features(cnn, ds)), ds.columns["label"][good]
    np.savez(tmp_path / "rows.npz", label=labels, pixels=pixels)
    table = pa.table({"pixels": pixels.tolist(), "label": labels})
    pq.write_table(table, tmp_path / "rows.parquet")
    for name in ("rows.npz", "rows.parquet"):
        rows = data.read(tmp_path / name, labels="label")
        result = data.evaluate(cnn["static"], rows, metrics="top1", keep_outputs=True)
        assert (result.rows, result.failed) == (15, 0)
        np.testing.assert_array_equal(
            result.per_row["output_0"], embedded.per_row["output_0"][good]
        )
        assert result.metrics["top1"] == embedded.metrics["top1"]


def test_importing_data_loads_no_optional_package():
    code = (
        "import sys, pyexecutorch.data; "
        "print(sorted(m for m in ('torch', 'ray', 'PIL', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"


# --------------------------------------------------------------------------------------
# The LLM: perplexity


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """The tokenizer, the corpus in windows, both layouts' models and programs, and the
    plain loop's ``(nll, count)`` per window from the eager modules."""
    root = tmp_path_factory.mktemp("text")
    tokenizer = llm.make_tokenizer(root / "tokenizer.json")
    corpus = P.write_corpus(root / "corpus.txt", 20)
    windows = data.text_windows(corpus, tokenizer, window=12, stride=5)
    models = {name: llm.make_model(name, seed=3) for name in ("llama", "optimum")}
    eager = {}
    for layout, model in models.items():
        eager[layout] = [
            P.eager_window_nll(model, layout, tokens[:n].tolist(), int(start))
            for tokens, n, start in zip(
                windows.columns["tokens"],
                windows.columns["length"],
                windows.columns["score_from"],
                strict=True,
            )
        ]
    return {
        "windows": windows,
        "eager": eager,
        "llama": llm.export(models["llama"], "llama", False),
        "optimum": llm.export(models["optimum"], "optimum", True),
    }


def _perplexity(rows: list[tuple[float, int]]) -> float:
    return math.exp(sum(r[0] for r in rows) / sum(r[1] for r in rows))


@pytest.mark.parametrize("layout", ["llama", "optimum"])
def test_perplexity_matches_eager(text, layout):
    ds, eager = text["windows"], text["eager"][layout]
    total = ds.info["tokens"]
    assert len(ds) >= 4 and ds.columns["length"].max() == 12
    assert sum(count for _, count in eager) == total - 1  # every token after the first, once
    result = data.evaluate(text[layout], ds, metrics="perplexity")
    assert result.failed == 0
    assert result.metrics["tokens"] == total - 1
    assert result.metrics["perplexity"] == pytest.approx(_perplexity(eager), rel=1e-5)
    np.testing.assert_allclose(result.per_row["nll"], [nll for nll, _ in eager], rtol=1e-5)


def test_a_failing_window_fails_alone(text):
    """A window the program cannot take (a token outside the vocabulary) is reported and
    the perplexity is over the others (the two-node test runs the same on Ray)."""
    ds = text["windows"]
    tokens = ds.columns["tokens"].copy()
    tokens[1, 3] = 10**6
    ds = data.Dataset({**ds.columns, "tokens": tokens}, None, task="text")
    result = data.evaluate(text["llama"], ds, metrics="perplexity")
    assert result.failed == 1
    ((row, message),) = result.errors
    assert row == 1 and "1000000" in message, message
    assert math.isnan(result.per_row["nll"][1])
    rest = [r for i, r in enumerate(text["eager"]["llama"]) if i != 1]
    assert result.metrics["tokens"] == sum(count for _, count in rest)
    assert result.metrics["perplexity"] == pytest.approx(_perplexity(rest), rel=1e-5)


# --------------------------------------------------------------------------------------
# The command line and errors


def test_cli_eval_writes_json_and_parquet(cnn, tmp_path, capsys, embedded):
    import pyarrow.parquet as pq

    pte = tmp_path / "cnn.pte"
    pte.write_bytes(cnn["static"])
    out_json, out_pq = tmp_path / "r.json", tmp_path / "rows.parquet"
    rc = main(
        ["eval", str(pte), "--data", str(cnn["root"]), "--metric", "top1,top2",
         "--json", str(out_json), "--parquet", str(out_pq), "--no-progress"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "failed rows  1" in out and "UnidentifiedImageError" in out
    summary = json.loads(out_json.read_text())
    assert summary["metrics"]["top1"] == pytest.approx(embedded.metrics["top1"])
    assert summary["metrics"]["top2"] == pytest.approx(embedded.metrics["top2"])
    assert (summary["rows"], summary["failed"], summary["batch_size"]) == (16, 1, 4)
    rows = pq.read_table(out_pq).to_pydict()
    assert rows["row"] == list(range(16))
    np.testing.assert_allclose(
        np.asarray(rows["output_0"]), embedded.per_row["output_0"], rtol=1e-6
    )


def test_cli_progress_bar(cnn, tmp_path, capsys):
    pte = tmp_path / "cnn.pte"
    pte.write_bytes(cnn["static"])
    assert main(["eval", str(pte), "--data", str(cnn["root"])]) == 0
    err = capsys.readouterr().err
    last = err.rstrip("\n").split("\r")[-1]
    assert last.startswith("eval [########################] 16/16 rows")
    assert "rows/s" in last and "ETA" in last and last.endswith("failed 1")


def test_errors_name_what_is_missing(cnn, tmp_path, capsys):
    ds = _images(cnn)
    with pytest.raises(data.MetricError, match="metric 'agreement' needs a reference"):
        data.evaluate(cnn["static"], ds, metrics="agreement")
    with pytest.raises(data.MetricError, match="unknown metric 'top0'"):
        data.evaluate(cnn["static"], ds, metrics="top0")
    unlabelled = data.Dataset({"path": ds.columns["path"]}, ds.features)
    with pytest.raises(data.MetricError, match="metric 'top1' needs labels"):
        data.evaluate(cnn["static"], unlabelled, metrics="top1")
    with pytest.raises(ValueError, match="unknown engine 'spark'"):
        data.evaluate(cnn["static"], ds, engine="spark")
    with pytest.raises(ValueError, match="workers must be a positive integer, got 0"):
        data.evaluate(cnn["static"], ds, workers=0)
    with pytest.raises(ValueError, match=r"0 < stride < window"):
        data.text_windows(tmp_path, "unused", window=8, stride=8)
    pte = tmp_path / "cnn.pte"
    pte.write_bytes(cnn["static"])
    assert main(["eval", str(pte), "--data", str(tmp_path / "nope")]) == 1
    assert (
        capsys.readouterr().err
        == f"pyexecutorch eval: error: dataset not found: {tmp_path / 'nope'}\n"
    )
