"""The compiler's official shapes: configs with every field of executorch 1.5.1 (each
with its effect, or NotImplementedError naming it), PassManager, the pass lists, the
manager's extra members, custom mutating operators and the legacy wrappers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch.fx.passes.infra.pass_base import PassResult

import pyexecutorch.exir as ours
from pyexecutorch.exir import (
    DynamicMemoryPlanningMode,
    EdgeCompileConfig,
    ExecutorchBackendConfig,
    ToOutVarPass,
    edge_to_executorch_passes,
    pre_memory_planning_passes,
    to_edge,
)
from pyexecutorch.runtime import Runtime
from tests import official


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.l(x).relu() + x[:, :3].contiguous(memory_format=torch.contiguous_format)


def _ep():
    torch.manual_seed(0)
    return torch.export.export(_Net().eval(), (torch.randn(2, 4),))


def _run(pte: bytes, x: torch.Tensor) -> np.ndarray:
    return np.asarray(
        Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])[0]
    )


def test_every_official_field_exists_with_the_official_default():
    official.silence_noise()
    from executorch.exir.capture import _config as capture

    for theirs, mine in (
        (capture.ExecutorchBackendConfig, ExecutorchBackendConfig),
        (capture.EdgeCompileConfig, EdgeCompileConfig),
    ):
        missing = {f.name for f in dataclasses.fields(theirs)} - {
            f.name for f in dataclasses.fields(mine)
        }
        assert not missing, (mine.__name__, missing)
    # The reference _program.py also reads these.
    assert EdgeCompileConfig()._use_edge_ops and not EdgeCompileConfig()._skip_type_promotion
    default, theirs = ExecutorchBackendConfig(), capture.ExecutorchBackendConfig()
    for name in (
        "emit_stacktrace",
        "extract_delegate_segments",
        "segment_alignment",
        "constant_tensor_alignment",
        "delegate_alignment",
        "remove_view_copy",
        "external_constants",
        "external_mutable_weights",
        "emit_mutable_buffer_names",
        "do_quant_fusion_and_const_prop",
        "run_reinplace_pass",
        "enable_non_cpu_memory_planning",
        "reinplace_extra_ops",
    ):
        assert getattr(default, name) == getattr(theirs, name), name
    assert int(default.dynamic_memory_planning_mode) == int(theirs.dynamic_memory_planning_mode)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dynamic_memory_planning_mode", DynamicMemoryPlanningMode.SYMBOLIC),
    ],
)
def test_unimplemented_fields_are_refused_by_name(field, value):
    edge = to_edge(_ep())
    with pytest.raises(NotImplementedError, match=f"ExecutorchBackendConfig: {field} is not"):
        edge.to_executorch(ExecutorchBackendConfig(**{field: value}))


def test_refused_out_var_option():
    with pytest.raises(NotImplementedError, match="ignore_to_out_var_failure=True"):
        ToOutVarPass(ignore_to_out_var_failure=True)


def test_fields_with_effects():
    x = torch.randn(2, 4)
    expected = _Net.forward(_restore(), x).detach().numpy()
    base = to_edge(_ep()).to_executorch().buffer
    # Host-only programs plan alike with and without per-device planning.
    same = to_edge(_ep()).to_executorch(
        ExecutorchBackendConfig(enable_non_cpu_memory_planning=False)
    )
    assert same.buffer == base
    # No trained weights in an inference program: nothing moves.
    assert (
        to_edge(_ep()).to_executorch(ExecutorchBackendConfig(external_mutable_weights=True)).buffer
        == base
    )

    calls = []

    class CountingOutVars(ToOutVarPass):
        def call(self, graph_module):
            calls.append(graph_module)
            return super().call(graph_module)

    et = to_edge(_ep()).to_executorch(ExecutorchBackendConfig(to_out_var_pass=CountingOutVars()))
    assert len(calls) == 1 and et.buffer == base
    np.testing.assert_allclose(_run(base, x), expected, rtol=1e-5, atol=1e-6)

    # Without edge ops there are no dim_order_ops (as with _skip_dim_order).
    def targets(cfg):
        gm = to_edge(_ep(), compile_config=cfg).exported_program().graph_module
        return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}

    assert any("dim_order" in t for t in targets(EdgeCompileConfig()))
    no_edge_ops = targets(EdgeCompileConfig(_use_edge_ops=False))
    assert not any("dim_order" in t for t in no_edge_ops)
    assert no_edge_ops == targets(EdgeCompileConfig(_skip_dim_order=True))


def _restore() -> _Net:
    torch.manual_seed(0)
    return _Net().eval()


def _relu_to_abs(exir_ops):
    def run(gm: torch.fx.GraphModule) -> PassResult:
        changed = False
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.relu.default:
                node.target = exir_ops.edge.aten.abs.default
                changed = True
        gm.recompile()
        return PassResult(gm, changed)

    return run


@pytest.mark.parametrize("package", ["ours", "official"])
def test_transform_accepts_a_pass_manager(package):
    """The same script with either package's PassManager and to_edge."""
    if package == "ours":
        from pyexecutorch.exir import exir_ops
        from pyexecutorch.exir import to_edge as edge_of
        from pyexecutorch.exir.pass_manager import PassManager
    else:
        official.silence_noise()
        from executorch.exir import to_edge as edge_of
        from executorch.exir.dialects._ops import ops as exir_ops
        from executorch.exir.pass_manager import PassManager
    edge = edge_of(_ep()).transform(PassManager(passes=[[_relu_to_abs(exir_ops)]]))
    pte = edge.to_executorch().buffer
    x = torch.randn(2, 4)
    m = _restore()
    expected = (m.l(x).abs() + x[:, :3]).detach().numpy()
    np.testing.assert_allclose(_run(pte, x), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(official.official_run(pte, (x,))[0], expected, rtol=1e-5, atol=1e-6)


def test_pass_lists():
    cfg = ExecutorchBackendConfig()
    names = [type(p).__name__ for p in edge_to_executorch_passes(cfg, "forward")]
    assert names == [
        "SpecPropPass",
        "RemoveGraphAssertsPass",
        "ReplaceViewCopyWithViewPass",
        "ConstraintBasedSymShapeEvalPass",
        "ToOutVarPass",
    ]
    hint = ours.HintBasedSymShapeEvalPass()
    cfg = ExecutorchBackendConfig(remove_view_copy=False, sym_shape_eval_pass={"forward": hint})
    assert pre_memory_planning_passes(cfg, "forward")[:1] == [hint]
    assert type(pre_memory_planning_passes(cfg, "other")[0]).__name__ == (
        "ConstraintBasedSymShapeEvalPass"
    )
    with pytest.raises(TypeError, match="must be a pyexecutorch sym-shape pass"):
        pre_memory_planning_passes(ExecutorchBackendConfig(sym_shape_eval_pass=object()))


def test_manager_save_tensor_data_and_num_outs(tmp_path):
    et = to_edge(_ep()).to_executorch(ExecutorchBackendConfig(external_constants=True))
    path = tmp_path / "m.pte"
    et.save(str(path))
    assert path.read_bytes() == et.buffer
    with pytest.raises(ValueError, match="does not end with .pte"):
        et.save(str(tmp_path / "m.bin"))
    ((tag, ptd),) = et._tensor_data.items()
    assert tag == "_default_external_constant" and ptd[4:8] == b"FT01"
    x = torch.randn(2, 4)
    program = Runtime.get().load_program(et.buffer, data_files=[ptd])
    got = program.load_method("forward").execute([x.numpy()])[0]
    np.testing.assert_allclose(np.asarray(got), _restore()(x).detach().numpy(), rtol=1e-5)
    assert et.instruction_id_to_num_outs_map == {"forward": {}}

    from pyexecutorch.backends.example.aot import ExamplePartitioner

    delegated = to_edge(_ep()).to_backend(ExamplePartitioner()).to_executorch()
    (counts,) = delegated.instruction_id_to_num_outs_map.values()
    assert counts and all(n >= 1 for n in counts.values())


def test_custom_operator_mutating_its_input():
    from pyexecutorch.kernels.registry import get_kernel, kernel

    @torch.library.custom_op("pyxt_test::scale_", mutates_args=("x",))
    def scale_(x: torch.Tensor, k: float) -> None:
        x.mul_(k)

    @scale_.register_fake
    def _(x, k):
        return None

    if get_kernel("pyxt_test::scale_") is None:

        @kernel("pyxt_test::scale_", n_outs=0)
        def _scale(x, k):
            np.multiply(x, k, out=x, casting="unsafe")

    class M(torch.nn.Module):
        def forward(self, x):
            y = x + 1
            torch.ops.pyxt_test.scale_(y, 3.0)
            return y * 2

    x = torch.randn(5)
    edge = to_edge(torch.export.export(M(), (x,)))
    graph = edge.exported_program().graph
    assert any("auto_functionalized" in str(n.target) for n in graph.nodes)
    pte = edge.to_executorch().buffer
    np.testing.assert_allclose(_run(pte, x), M()(x.clone()).numpy(), rtol=1e-6)


def test_transform_exported_program_and_lift_constants():
    edge = to_edge(_ep()).exported_program()

    def add_constant(gm):
        gm.register_buffer("_bias2", torch.full((3,), 0.5))
        out = next(n for n in gm.graph.nodes if n.op == "output")
        res = out.args[0][0]
        with gm.graph.inserting_before(out):
            c = gm.graph.get_attr("_bias2")
            c.meta["val"] = torch.full((3,), 0.5)
            new = gm.graph.call_function(torch.ops.aten.add.Tensor, (res, c))
            new.meta["val"] = res.meta["val"]
        out.args = ((new,),)
        gm.recompile()
        return PassResult(gm, True)

    changed = ours.transform_exported_program(edge, add_constant)
    assert any(n.op == "get_attr" for n in changed.graph.nodes)
    lifted = ours.lift_constant_tensor_pass(changed)
    assert not any(n.op == "get_attr" for n in lifted.graph.nodes)
    assert "_lifted_tensor_constant" in str(list(lifted.constants))
    pte = ours.EdgeProgramManager(lifted).to_executorch().buffer
    x = torch.randn(2, 4)
    np.testing.assert_allclose(_run(pte, x), _restore()(x).detach().numpy() + 0.5, rtol=1e-5)


def test_legacy_wrappers():
    with pytest.warns(DeprecationWarning, match="ExirExportedProgram is deprecated"):
        aten = ours.ExirExportedProgram(_ep(), after_to_edge_passes=False)
    with pytest.raises(RuntimeError, match="Must run to_edge before to_executorch"):
        aten.to_executorch()
    prog = aten.to_edge().to_executorch()
    assert isinstance(prog, ours.ExecutorchProgram)
    x = torch.randn(2, 4)
    np.testing.assert_allclose(_run(prog.buffer, x), _restore()(x).detach().numpy(), rtol=1e-5)
    assert prog.program.execution_plan[0].name == "forward"


def test_sym_shape_passes_bound_dynamic_sizes():
    class Grow(torch.nn.Module):
        def forward(self, x):
            return torch.cat([x, x * 2], 0).relu()

    batch = torch.export.Dim("batch", min=1, max=32)
    ep = torch.export.export(Grow(), (torch.randn(4, 8),), dynamic_shapes=({0: batch},))

    def arena(sym_pass):
        et = to_edge(ep).to_executorch(ExecutorchBackendConfig(sym_shape_eval_pass=sym_pass))
        return et.executorch_program.execution_plan[0].non_const_buffer_sizes[1], et.buffer

    bound, constrained = arena(ours.ConstraintBasedSymShapeEvalPass())
    hinted, by_hint = arena(ours.HintBasedSymShapeEvalPass())
    # Upper bounds 32 (and 64 for the cat) against the example's 4 (and 8).
    assert bound == 8 * hinted
    x = torch.randn(32, 8)
    got = Runtime.get().load_program(constrained).load_method("forward").execute([x.numpy()])
    np.testing.assert_array_equal(np.asarray(got[0]), Grow()(x).numpy())


def test_out_variants_and_debug_log_on_an_unplanned_edge_graph(tmp_path):
    from pyexecutorch.exir.passes import DebugPass

    class TopK(torch.nn.Module):
        def forward(self, x):
            return torch.topk(x, 5)

    edge = to_edge(torch.export.export(TopK(), (torch.randn(10),)))
    gm = edge.exported_program().graph_module
    log = tmp_path / "debug.log"
    DebugPass(log_filename=str(log))(gm)
    # the generated code names the edge operator, as the official log does
    assert "pyexecutorch_exir_dialects_edge__ops_aten_topk_default(" in log.read_text()
    # specs are made from the example values when no pass propagated them
    out = ToOutVarPass()(gm).graph_module
    (topk,) = [n for n in out.graph.nodes if n.target == torch.ops.aten.topk.values]
    allocs = [topk.kwargs["values"], topk.kwargs["indices"]]
    assert [tuple(a.meta["spec"].shape) for a in allocs] == [(5,), (5,)]
    assert [a.meta["spec"].dtype for a in allocs] == [torch.float32, torch.int64]
