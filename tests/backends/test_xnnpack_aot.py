"""The XNNPACK backend ahead of time: ``XnnpackPartitioner`` and ``XnnpackBackend.preprocess``.

For focused models, one per operator or pattern: our XNNPACK ``.pte`` runs in the
official runtime and in ours, both matching torch eager, and it holds as many
delegates and delegated operators as the official partitioner makes of the same
``ExportedProgram``. Also: the three lowering paths, the payload's layout
(header, constants in named data stored once, no transposes inside a run of
convolutions), ``debug_handle_map``, and the bad cases with their messages.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pyexecutorch.backends.xnnpack import schema as S
from pyexecutorch.backends.xnnpack.partition.config import ConfigPrecisionType
from pyexecutorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from pyexecutorch.exir import to_edge, to_edge_transform_and_lower
from pyexecutorch.exir.backend import get_delegation_info, get_lowered_backend_modules, to_backend
from pyexecutorch.portable_lib import _load_for_executorch_from_buffer
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema import decode_pte
from tests import official

official.silence_noise()
warnings.filterwarnings("ignore", category=UserWarning)


def _seeded(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for p in module.parameters():
        with torch.no_grad():
            p.copy_(torch.randn_like(p) * 0.5)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d | nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return module.eval()


class Lambda(nn.Module):
    def __init__(self, fn, *mods: nn.Module) -> None:
        super().__init__()
        self.fn = fn
        self.mods = nn.ModuleList(mods)

    def forward(self, *xs):
        return self.fn(self.mods, *xs)


def conv_chain():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8),
        nn.Hardswish(),
        nn.Conv2d(8, 4, 1),
        nn.ReLU6(),
    )


def residual():
    def fn(m, x):
        y = F.relu(m[1](m[0](x)))
        return F.max_pool2d(y + x, 3, 2, ceil_mode=True), F.avg_pool2d(y, 2)

    return Lambda(fn, nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4))


R = torch.randn
# name -> (module factory, inputs, dynamic shapes or None)
CASES = {
    "conv_chain": (conv_chain, lambda: (R(1, 3, 8, 8),), None),
    "residual": (residual, lambda: (R(1, 4, 9, 9),), None),
    "mlp": (
        lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Softmax(-1)),
        lambda: (R(3, 8),),
        None,
    ),
    "linear_3d_gelu": (
        lambda: nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.LayerNorm(8)),
        lambda: (R(2, 3, 8),),
        None,
    ),
    "conv1d": (
        lambda: nn.Sequential(nn.Conv1d(4, 6, 3, padding=1), nn.ReLU(), nn.Conv1d(6, 2, 1)),
        lambda: (R(2, 4, 10),),
        None,
    ),
    "conv_transpose": (
        lambda: nn.Sequential(nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)),
        lambda: (R(1, 4, 5, 5),),
        None,
    ),
    # lowered as a 2-D transposed convolution of height 1: no adjustment along the height
    # (one there made the official runtime refuse the file, issue 29)
    "conv_transpose1d": (
        lambda: nn.Sequential(nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1)),
        lambda: (R(2, 4, 7),),
        None,
    ),
    "elementwise": (
        lambda: Lambda(
            lambda m, x, y: (
                torch.maximum(x, y) - torch.minimum(x, y) * 2,
                torch.sigmoid(x) * torch.tanh(y) / (y.abs() + 1),
                torch.sqrt(x.abs() + 1).rsqrt() + torch.exp(-x.abs()).log(),
                x.pow(2) + x.pow(3),
                torch.floor(x) + torch.ceil(y) - x.neg().sin() * y.cos(),
                F.leaky_relu(x, 0.2) + F.hardtanh(y, -0.5, 0.5) + x.clamp(-0.2, 0.3),
                x.softmax(0),
                torch.add(x, y, alpha=2),
            )
        ),
        lambda: (R(4, 6), R(4, 6)),
        None,
    ),
    "shapes": (
        lambda: Lambda(
            lambda m, x: (
                torch.cat([x[:, :2], x[:, 1:3], x, x[:, 3:], x * 2, x + 1, x[:, :1]], 1),
                F.pad(x, (1, 2, 0, 1), value=0.5).permute(0, 2, 3, 1).reshape(2, -1),
                x.mean((2, 3), keepdim=True),
                x.unsqueeze(-1).view(2, 4, 25),
            )
        ),
        lambda: (R(2, 4, 5, 5),),
        None,
    ),
    "nhwc_ops": (
        lambda: Lambda(
            lambda m, x: (
                F.interpolate(m[0](x), scale_factor=2, mode="bilinear"),
                m[1](m[0](x)),
                torch.cat([m[0](x), x], 1)[:, 1:5],
                F.pad(m[0](x), (1, 1, 1, 1)),
            ),
            nn.Conv2d(3, 3, 1),
            nn.PReLU(3),
        ),
        lambda: (R(1, 3, 6, 6),),
        None,
    ),
    "unfused_norm_max": (
        lambda: Lambda(
            lambda m, x: (
                m[1](m[0](x) * 2),
                m[2](x),
                torch.max(m[0](x), dim=3, keepdim=True)[0],
                torch.max(x, dim=2, keepdim=True).values,
            ),
            nn.Conv2d(3, 3, 1),
            nn.BatchNorm2d(3),
            nn.BatchNorm2d(3),
        ),
        lambda: (R(1, 3, 4, 5),),
        None,
    ),
    "bmm_attention": (
        lambda: Lambda(lambda m, q, k: torch.bmm(q, k.transpose(1, 2)).softmax(-1)),
        lambda: (R(2, 5, 8), R(2, 5, 8)),
        None,
    ),
    "fp16_linear": (
        lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4)).half(),
        lambda: (R(2, 8).half(),),
        None,
    ),
    "dynamic_batch": (
        lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)),
        lambda: (R(3, 8),),
        ({0: torch.export.Dim("batch", min=1, max=8)},),
    ),
}
TOLERANCE = {"fp16_linear": (1e-2, 1e-2)}


def _export(name: str):
    make, inputs, dynamic = CASES[name]
    module = make()
    if not name.startswith("fp16"):
        module = _seeded(module)
    else:
        torch.manual_seed(0)
        module = module.eval()
    torch.manual_seed(1)
    args = inputs()
    ep = torch.export.export(module, args, dynamic_shapes=dynamic)
    return module, args, ep


def _official_counts(ep) -> tuple[int, int]:
    """The official partitioner's delegates and delegated operators (getitems not
    counted), cached on disk by the program's graph (counts do not depend on weights).
    Lowers a copy: the official pipeline rewrites the program it is given."""
    import hashlib
    import json

    key = hashlib.sha256(
        f"{ep.graph}{official.executorch_version()}{torch.__version__}".encode()
    ).hexdigest()[:20]
    path = official.cache_dir() / f"xnnpack_counts.{key}.json"
    if path.exists():
        return tuple(json.loads(path.read_text()))
    counts = _official_counts_uncached(copy.deepcopy(ep))
    path.write_text(json.dumps(counts))
    return counts


def _official_counts_uncached(ep) -> tuple[int, int]:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackPartitioner as OfficialPartitioner,
    )
    from executorch.devtools.backend_debug import get_delegation_info as official_info
    from executorch.exir import to_edge_transform_and_lower as official_lower

    lowered = official_lower(ep, partitioner=[OfficialPartitioner()])
    info = official_info(lowered.exported_program().graph_module)
    getitems = info.delegation_by_operator.get("getitem")
    return info.num_delegated_subgraphs, info.num_delegated_nodes - (
        getitems.delegated if getitems else 0
    )


def _check_outputs(name, pte, module, args):
    rtol, atol = TOLERANCE.get(name, (1e-4, 1e-5))
    with torch.no_grad():
        expected = official.flatten_outputs(module(*args))
    got = official.official_run(pte, args)
    official.assert_close(name, got, expected, rtol=rtol, atol=atol, what="official runtime")
    ours = _load_for_executorch_from_buffer(pte).run_method("forward", tuple(args))
    ours = [np.asarray(o) for o in ours]
    official.assert_close(name, ours, expected, rtol=rtol, atol=atol, what="our runtime")


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_matches_eager_and_official_partition(name):
    module, args, ep = _export(name)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    info = get_delegation_info(edge.exported_program().graph_module)
    assert (info.num_delegated_subgraphs, info.num_delegated_nodes) == _official_counts(ep)
    pte = edge.to_executorch().buffer
    _check_outputs(name, pte, module, args)


def test_official_conv_transpose1d_runs_in_our_runtime():
    """The official exporter's file for the model above runs in ours, as ours in its runtime
    (test_model_matches_eager_and_official_partition); ours is one XNNConvTranspose2d with
    no adjustment along its height of 1 (the official one lays the rows out as a column)."""
    module, args, ep = _export("conv_transpose1d")
    key = hashlib.sha256(f"{ep.graph}{official.versions()}".encode()).hexdigest()[:16]

    def build() -> bytes:
        lowered = official._exir().to_edge_transform_and_lower(
            copy.deepcopy(ep), partitioner=official._xnnpack_partitioner()
        )
        return lowered.to_executorch().buffer

    theirs = official.cached_file(official.cache_dir() / f"convtranspose1d.{key}.pte", build)
    with torch.no_grad():
        expected = official.flatten_outputs(module(*args))
    got = [
        np.asarray(o) for o in _load_for_executorch_from_buffer(theirs).run_method("forward", args)
    ]
    official.assert_close("conv_transpose1d", got, expected, rtol=1e-4, atol=1e-5)
    ours = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    convs = [
        n.xnode_union
        for seg in decode_pte(ours.to_executorch().buffer).delegate_segments
        for n in S.decode_payload(seg).graph.xnodes
        if type(n.xnode_union).__name__ == "XNNConvTranspose2d"
    ]
    assert [(c.adjustment_height, c.adjustment_width) for c in convs] == [(0, 1)]


def _payloads(edge_ep) -> list[S.Payload]:
    return [
        S.decode_payload(m.processed_bytes)
        for m in get_lowered_backend_modules(edge_ep.graph_module)
    ]


def _node_types(payload: S.Payload) -> list[str]:
    return [type(n.xnode_union).__name__ for n in payload.graph.xnodes]


def test_convolutions_stay_channels_last_and_fuse():
    """A run of conv -> bn -> relu -> depthwise -> hardswish -> conv -> relu6: one
    transpose in, one out; batch norm and the clamps folded into the convolutions."""
    _, _, ep = _export("conv_chain")
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    (payload,) = _payloads(edge.exported_program())
    assert _node_types(payload) == [
        "XNNStaticTranspose",
        "XNNConv2d",
        "XNNDepthwiseConv2d",
        "XNNHardswish",
        "XNNConv2d",
        "XNNStaticTranspose",
    ]
    conv = payload.graph.xnodes[1]
    assert (conv.output_min_max.output_min, conv.output_min_max.output_max) == (0.0, np.inf)
    last = payload.graph.xnodes[4]
    assert (last.output_min_max.output_min, last.output_min_max.output_max) == (0.0, 6.0)
    # the constants are named by the SHA-256 of their bytes, with no inline data
    assert payload.graph.constant_data[0].size == 0
    keys = [c.named_key for c in payload.graph.constant_data[1:]]
    assert all(k is not None and len(k) == 64 for k in keys) and len(set(keys)) == 6
    assert payload.graph.num_externs == 2
    assert payload.graph.version == "0"


def test_debug_handle_map_names_every_node():
    _, _, ep = _export("conv_chain")
    aten_edge = to_edge(ep)
    handles = {
        n.meta["debug_handle"]
        for n in aten_edge.exported_program().graph.nodes
        if n.op == "call_function"
    }
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    (lowered,) = get_lowered_backend_modules(edge.exported_program().graph_module)
    payload = S.decode_payload(lowered.processed_bytes)
    mapping = lowered.meta["debug_handle_map"]
    assert sorted(mapping) == list(range(len(payload.graph.xnodes)))
    assert [n.debug_handle for n in payload.graph.xnodes] == sorted(mapping)
    covered = {h for hs in mapping.values() for h in hs}
    delegated = {
        n.meta["debug_handle"]
        for n in lowered.original_module.graph.nodes
        if n.op == "call_function"
    }
    assert covered == delegated and covered <= handles
    # the batch norm and relu folded into the first convolution are named by it
    assert len(mapping[1]) == 3


def _small():
    module = _seeded(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(36, 2)))
    torch.manual_seed(1)
    args = (R(1, 3, 5, 5),)
    return module, args, torch.export.export(module, args)


def test_to_edge_then_to_backend():
    module, args, ep = _small()
    edge = to_edge(ep).to_backend(XnnpackPartitioner())
    info = get_delegation_info(edge.exported_program().graph_module)
    assert (info.num_delegated_subgraphs, info.num_delegated_nodes) == (1, 5)
    _check_outputs("to_backend", edge.to_executorch().buffer, module, args)


def test_to_backend_whole_program():
    module, args, ep = _small()
    edge = to_edge(ep)
    lowered = to_backend("XnnpackBackend", edge.exported_program(), [])
    assert lowered.backend_id == "XnnpackBackend"
    payload = S.decode_payload(lowered.processed_bytes)
    assert "XNNFullyConnected" in _node_types(payload)
    assert payload.graph.num_externs == 2


def test_shared_weights_are_stored_once():
    """Two delegates (split by a portable op) with the same weights: one named entry."""

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)
            self.b.load_state_dict(self.a.state_dict())

        def forward(self, x):
            return self.b(torch.cumsum(self.a(x), 1))

    module = Twice().eval()
    args = (R(2, 8),)
    ep = torch.export.export(module, args)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    assert get_delegation_info(edge.exported_program().graph_module).num_delegated_subgraphs == 2
    et = edge.to_executorch()
    from pyexecutorch.schema import decode_pte

    assert len(decode_pte(et.buffer).named_data) == 2  # one weight, one bias
    _check_outputs("shared", et.buffer, module, args)


# ------------------------------------------------------------------ bad cases


def test_unknown_precision_is_refused():
    from pyexecutorch.backends.xnnpack.partition.config import FLOAT_CONFIGS

    with pytest.raises(ValueError) as err:
        XnnpackPartitioner(
            configs=FLOAT_CONFIGS, config_precisions=ConfigPrecisionType.STATIC_QUANT
        )
    assert str(err.value) == (
        "XnnpackPartitioner: no op config handles precision STATIC_QUANT "
        "(configs given cover ['FP32'])"
    )
    with pytest.raises(TypeError, match="config_precisions must be ConfigPrecisionType"):
        XnnpackPartitioner(config_precisions=["FP32"])


def test_nothing_to_delegate_still_exports(caplog):
    module = Lambda(lambda m, x: torch.cumsum(x, 0)).eval()
    args = (R(3, 4),)
    ep = torch.export.export(module, args)
    with caplog.at_level(logging.DEBUG, logger="pyexecutorch.backends.xnnpack"):
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    assert (
        "XnnpackPartitioner: nothing in this program can be delegated to XNNPACK; it runs on "
        "the portable kernels (verbose=True says why, node by node)"
    ) in caplog.text
    assert get_delegation_info(edge.exported_program().graph_module).num_delegated_subgraphs == 0
    pte = edge.to_executorch().buffer
    np.testing.assert_allclose(official.official_run(pte, args)[0], torch.cumsum(args[0], 0))


def test_unsupported_forms_are_logged_one_line_per_node(caplog):
    module = Lambda(
        lambda m, x: (
            x.softmax(0),
            torch.add(x, x, alpha=2),
            x.pow(3),
            F.gelu(x, approximate="tanh"),
        )
    ).eval()
    ep = torch.export.export(module, (R(3, 4),))
    with caplog.at_level(logging.DEBUG, logger="pyexecutorch.backends.xnnpack"):
        to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    lines = [r.getMessage() for r in caplog.records if "to portable" in r.getMessage()]
    assert lines == [
        "XNNPACK leaves aten__softmax_default (aten::_softmax.default) to portable: "
        "SoftmaxConfig: softmax over dim 0 of a rank-2 tensor (last dim only)",
        "XNNPACK leaves aten_add_tensor (aten::add.Tensor) to portable: AddConfig: alpha=2 (XNNPACK takes "
        "alpha=1 only)",
        "XNNPACK leaves aten_pow_tensor_scalar (aten::pow.Tensor_Scalar) to portable: PowConfig: power 3 (2 only)",
        "XNNPACK leaves aten_gelu_default (aten::gelu.default) to portable: GeluConfig: GELU "
        "approximate='tanh' (XNNPACK has the erf form only)",
    ]


def test_verbose_turns_debug_on():
    logger = logging.getLogger("pyexecutorch.backends.xnnpack")
    old = logger.level
    try:
        logger.setLevel(logging.WARNING)
        XnnpackPartitioner(verbose=True)
        assert logger.level == logging.DEBUG
    finally:
        logger.setLevel(old)


def test_configs_by_name_and_per_op_mode():
    module, args, ep = _export("mlp")
    only_linear = XnnpackPartitioner(configs=["LinearConfig"])
    edge = to_edge_transform_and_lower(ep, partitioner=[only_linear])
    info = get_delegation_info(edge.exported_program().graph_module)
    # the linears and the relu fused into the first one; the softmax left out
    assert (info.num_delegated_subgraphs, info.num_delegated_nodes) == (1, 3)
    assert dict(info.non_delegated_ops) == {"aten._softmax.default": 1}
    _, _, ep = _export("mlp")
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner(per_op_mode=True)])
    info = get_delegation_info(edge.exported_program().graph_module)
    assert (info.num_delegated_subgraphs, info.num_delegated_nodes) == (3, 4)
    _check_outputs("per_op", edge.to_executorch().buffer, module, args)
    with pytest.raises(ValueError, match="no op config named 'NoSuchConfig'"):
        XnnpackPartitioner(configs=["NoSuchConfig"])


def test_float16_convolution_runs_in_the_official_runtime():
    """float16 convolutions keep float32 filters and biases, as the official exporter
    writes them; convolution, clamp and max pooling run in both runtimes alike (ours in
    float32 between a widening and one rounding per node), over calls with other inputs."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)).half()
    args = (R(1, 3, 6, 6).half(),)
    ep = torch.export.export(module.eval(), args)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    (payload,) = _payloads(edge.exported_program())
    datatypes = [v.tensor.datatype for v in payload.graph.xvalues]
    assert datatypes.count(S.XNNDatatype.fp32) == 2  # filter and bias
    pte = edge.to_executorch().buffer
    methods = [
        Runtime.get().load_program(pte, jit=jit).load_method("forward") for jit in (False, True)
    ]
    for scale in (1.0, 4.0, 0.5):
        call = (args[0] * scale,)
        with torch.no_grad():
            expected = official.flatten_outputs(module(*call))
        got = official.official_run(pte, call)
        official.assert_close("fp16_conv", got, expected, rtol=1e-2, atol=1e-2)
        for method in methods:
            (ours,) = method.execute([call[0].numpy()])
            ours = np.asarray(ours)
            assert ours.dtype == np.float16
            np.testing.assert_allclose(
                ours.astype(np.float32), np.asarray(got[0], np.float32), rtol=4e-3, atol=4e-3
            )


def test_dynamic_batch_runs_at_other_sizes():
    """Values carry the upper bounds; both runtimes resize to the batch given."""
    module, _, ep = _export("dynamic_batch")
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    (payload,) = _payloads(edge.exported_program())
    assert payload.graph.xvalues[payload.graph.input_ids[0]].tensor.dims == [8, 8]
    pte = edge.to_executorch().buffer
    for batch in (1, 5, 8):
        args = (R(batch, 8),)
        _check_outputs("dynamic_batch", pte, module, args)


def test_to_backend_whole_program_refuses_what_xnnpack_lacks():
    from pyexecutorch.exir.backend import PreprocessError

    ep = torch.export.export(Lambda(lambda m, x: torch.cumsum(x, 0) + 1).eval(), (R(3, 4),))
    with pytest.raises(PreprocessError) as err:
        to_backend("XnnpackBackend", to_edge(ep).exported_program(), [])
    assert str(err.value) == (
        "XnnpackBackend cannot serialize node aten_cumsum_default (aten::cumsum.default): no XNNPACK visitor"
    )


def test_convolution_weight_read_elsewhere_stays_portable(caplog):
    """A conv weight that a portable node reads too cannot be the delegate's static
    filter: that convolution stays portable (the rest is delegated), with the reason."""
    module = _seeded(
        Lambda(lambda m, x: (m[0](x).relu(), m[0].weight.cumsum(0)), nn.Conv2d(3, 3, 1))
    )
    args = (R(1, 3, 4, 4),)
    ep = torch.export.export(module, args)
    with caplog.at_level(logging.DEBUG, logger="pyexecutorch.backends.xnnpack"):
        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    assert (
        "XNNPACK leaves aten_convolution_default (aten::convolution.default) to portable: its "
        "constant p_mods_0_weight is also read outside this delegate"
    ) in caplog.text
    info = get_delegation_info(edge.exported_program().graph_module)
    assert (info.num_delegated_subgraphs, info.num_delegated_nodes) == (1, 1)  # the relu
    _check_outputs("shared_conv_weight", edge.to_executorch().buffer, module, args)
