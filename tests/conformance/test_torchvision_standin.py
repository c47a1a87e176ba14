"""The conformance harness's torchvision stand-in (scripts/conformance_torchvision/),
put on both sides' path where torchvision cannot be imported, so that the official
``backends/xnnpack/test/models/resnet.py`` is collected: ``models.resnet18()`` has
torchvision's ResNet-18 (its parameter count and state-dict names) and default
initialization, and the official outcomes of that file are cached under a key that
names the stand-in's sources."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import conformance  # noqa: E402

# Run apart: importing the stand-in here would hand "torchvision" to every later test.
_PROBE = """
import json, math, torch, torchvision
torch.manual_seed(0)
m = torchvision.models.resnet18()
sd = m.state_dict()
conv = m.layer2[0].conv1.weight
try:
    torchvision.models.resnet18(weights="IMAGENET1K_V1")
    refused = ""
except ValueError as e:
    refused = str(e)
print(json.dumps({
    "params": sum(p.numel() for p in m.parameters()),
    "keys": len(sd),
    "names": [k for k in sd if k.startswith("layer2.0.")],
    "children": [n for n, _ in m.named_children()],
    "conv_std_ratio": float(conv.std()) / math.sqrt(2 / (conv.shape[0] * 9)),
    "bn": [float(m.bn1.weight.min()), float(m.bn1.bias.abs().max())],
    "out": list(m.eval()(torch.randn(1, 3, 64, 64)).shape),
    "refused": refused,
}))
"""


def test_standin_resnet18_is_torchvisions_layout_and_init() -> None:
    env = {"PYTHONPATH": str(conformance.TORCHVISION_STANDIN), "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, check=True
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["params"] == 11_689_512  # torchvision's resnet18
    assert got["keys"] == 122
    assert got["children"] == [
        "conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
        "avgpool", "fc",
    ]  # fmt: skip
    assert got["names"] == [
        f"layer2.0.{k}"
        for k in (
            "conv1.weight",
            *(f"bn1.{s}" for s in ("weight", "bias", "running_mean", "running_var")),
            "bn1.num_batches_tracked",
            "conv2.weight",
            *(f"bn2.{s}" for s in ("weight", "bias", "running_mean", "running_var")),
            "bn2.num_batches_tracked",
            "downsample.0.weight",
            *(f"downsample.1.{s}" for s in ("weight", "bias", "running_mean", "running_var")),
            "downsample.1.num_batches_tracked",
        )
    ]
    # He-normal in fan-out mode: std sqrt(2 / (out * k * k)); BatchNorm 1 and 0
    assert 0.95 < got["conv_std_ratio"] < 1.05
    assert got["bn"] == [1.0, 0.0]
    assert got["out"] == [1, 1000]
    assert "weights=None" in got["refused"]


def test_resnet_file_official_outcomes_are_keyed_by_the_standin() -> None:
    wheel = conformance.wheel_root()
    resnet = conformance.official_cache_key(wheel, "backends/xnnpack/test/models/resnet.py")
    add = conformance.official_cache_key(wheel, "backends/xnnpack/test/ops/test_add.py")
    assert "+torchvision-standin:" not in add
    if conformance.torchvision_standin() is None:  # a venv whose torchvision imports
        assert "+torchvision-standin:" not in resnet
    else:
        assert resnet.split("+torchvision-standin:")[1].isalnum()
