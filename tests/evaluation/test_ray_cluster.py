"""The multi-node path: a two-node Ray cluster on this machine (``ray.cluster_utils``,
one CPU per node, so the two actors run on different nodes), giving the same rows and
metrics as the embedded engine for the CNN and the LLM, a failing row of each included."""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch import data
from tests.evaluation import _programs as P
from tests.llm import _programs as llm

# Ray Data reads its own deprecated settings when it copies its context.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")

MB = 2**20


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    with P.ray_at_normal_priority():
        nodes = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1, "object_store_memory": 80 * MB, "include_dashboard": False
            },
        )  # fmt: skip
        nodes.add_node(num_cpus=1, object_store_memory=80 * MB)
        ray.init(address=nodes.address, log_to_driver=False)
        nodes.wait_for_nodes()
        yield ray
        ray.shutdown()
        nodes.shutdown()


def test_two_nodes_give_the_embedded_numbers(cluster, tmp_path):
    alive = [n for n in cluster.nodes() if n["Alive"]]
    assert len(alive) == 2 and all(n["Resources"]["CPU"] == 1 for n in alive)
    # The CNN over an image folder with one unreadable file.
    P.write_images(tmp_path / "images", 3)
    (tmp_path / "images" / "c2" / "broken.png").write_bytes(b"GIF89a")
    images = data.image_folder(tmp_path / "images")
    cnn = P.export_cnn(P.make_cnn(0))
    other = P.export_cnn(P.make_cnn(1))
    kw = {
        "metrics": "top1,agreement,snr",
        "reference": other,
        "keep_outputs": True,
        "chunk_rows": 4,
    }
    embedded = data.evaluate(cnn, images, **kw)
    on_cluster = data.evaluate(cnn, images, **kw, engine="ray", workers=2)
    assert on_cluster.failed == embedded.failed == 1
    assert on_cluster.errors == embedded.errors
    assert on_cluster.errors[0][1].startswith("UnidentifiedImageError")
    np.testing.assert_array_equal(on_cluster.per_row["output_0"], embedded.per_row["output_0"])
    assert on_cluster.metrics == embedded.metrics
    # The LLM over a text, in windows.
    tokenizer = llm.make_tokenizer(tmp_path / "tokenizer.json")
    corpus = P.write_corpus(tmp_path / "corpus.txt", 16)
    windows = data.text_windows(corpus, tokenizer, window=12, stride=6)
    windows.columns["tokens"][2, 4] = 10**6  # outside the vocabulary: that window fails
    program = llm.export(llm.make_model("llama", seed=3), "llama", False)
    embedded = data.evaluate(program, windows, metrics="perplexity")
    on_cluster = data.evaluate(program, windows, metrics="perplexity", engine="ray", workers=2)
    assert embedded.failed == on_cluster.failed == 1
    assert on_cluster.errors == embedded.errors and on_cluster.errors[0][0] == 2
    np.testing.assert_array_equal(on_cluster.per_row["nll"], embedded.per_row["nll"])
    assert on_cluster.metrics == embedded.metrics
    assert 1 < embedded.metrics["perplexity"] < llm.Config().vocab * 10
