"""The ahead-of-time delegation API: partitioners, to_backend in its three forms,
lowered modules, preserved operators, named data, and their errors."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from pyexecutorch.backends.example.aot import ExampleBackend, ExamplePartitioner
from pyexecutorch.backends.example.runtime import ExampleBackend as ExampleRuntime
from pyexecutorch.exir import EdgeProgramManager, to_edge, to_edge_transform_and_lower
from pyexecutorch.exir.backend import (
    DELEGATION_TAG,
    BackendDetails,
    CompileSpec,
    DelegationError,
    DelegationSpec,
    LoweredBackendModule,
    MethodProgramsPartitionerSpec,
    NamedDataStore,
    Partitioner,
    PartitionResult,
    PreprocessError,
    PreservedOpError,
    UnknownBackendError,
    check_preserved_ops_consumed,
    executorch_call_delegate,
    get_backend_details,
    get_delegation_info,
    get_lowered_backend_modules,
    prepare_preserved_ops,
    registered_backend_details,
    tag_constant_data,
    to_backend,
)
from pyexecutorch.exir.error import op_name
from pyexecutorch.exir.graph_utils import graph_modules
from pyexecutorch.exir.passes.decompose import decompose
from pyexecutorch.runtime import MissingBackendError, Runtime, register_backend
from tests import models, official
from tests.exir._delegation_support import check_runs_like_eager, lower

aten = torch.ops.aten
MLP = models.get_case("mlp")


def _edge(case: models.ModelCase = MLP):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_edge(models.export(case), constant_methods=case.constant_methods or None)


def _ops(gm: torch.fx.GraphModule) -> list[str]:
    return [
        op_name(n.target)
        for g in graph_modules(gm)
        for n in g.graph.nodes
        if n.op == "call_function"
    ]


class TagAll(Partitioner):
    """Tags every operator node of the top-level graph with one tag for ``backend_id``."""

    def __init__(self, backend_id: str = "ExampleBackend", compile_specs=()):  # noqa: ANN001
        super().__init__()
        self.delegation = DelegationSpec(backend_id, list(compile_specs))

    def partition(self, exported_program):  # noqa: ANN001, ANN201
        for node in exported_program.graph.nodes:
            if node.op == "call_function":
                node.meta[DELEGATION_TAG] = "all"
        tag_constant_data(exported_program)
        return PartitionResult(exported_program, {"all": self.delegation})


# --------------------------------------------------------------------------------------
# Partial and whole lowering


def test_partial_lowering_moves_weights_into_delegates():
    edge = _edge()
    original = edge.exported_program()
    n_original_nodes = len(original.graph.nodes)
    lowered = edge.to_backend(ExamplePartitioner(ops={"addmm", "permute"}))
    ep = lowered.exported_program()
    assert _ops(ep.graph_module) == [
        "executorch_call_delegate",
        "getitem",
        "aten.relu.default",
        "executorch_call_delegate",
        "getitem",
        "aten.relu.default",
        "executorch_call_delegate",
        "getitem",
    ]
    # Each delegate owns its weight and bias: only x is left as an input.
    assert [s.arg.name for s in ep.graph_signature.input_specs] == ["x"]
    assert dict(ep.state_dict) == {}
    # The program given to to_backend is unchanged.
    assert len(original.graph.nodes) == n_original_nodes
    assert set(original.state_dict) == {f"fc{i}.{w}" for i in (1, 2, 3) for w in ("weight", "bias")}

    modules = get_lowered_backend_modules(ep.graph_module)
    assert len(modules) == 3
    for i, m in enumerate(modules, 1):
        assert isinstance(m, LoweredBackendModule)
        assert m.backend_id == "ExampleBackend"
        assert m.compile_specs == []
        assert m.processed_bytes[:4] == b"EXB1"
        sub = m.original_module
        kinds = [(s.kind.name, s.target) for s in sub.graph_signature.input_specs]
        assert kinds[:2] == [("PARAMETER", f"fc{i}.weight"), ("PARAMETER", f"fc{i}.bias")]
        assert kinds[2][0] == "USER_INPUT"
        assert set(sub.state_dict) == {f"fc{i}.weight", f"fc{i}.bias"}
        assert m.meta["debug_handle_map"]  # the example backend maps its ops to handles
    # Delegate calls get debug handles of their own, after the graph's.
    handles = [
        n.meta.get("debug_handle") for n in ep.graph.nodes if n.target is executorch_call_delegate
    ]
    assert len(set(handles)) == 3 and min(handles) > 5
    info = get_delegation_info(ep.graph_module)
    assert (info.num_delegated_subgraphs, info.num_non_delegated_nodes) == (3, 2)
    assert "ExampleBackend: 3" in info.summary()

    et = lowered.to_executorch()
    check_runs_like_eager(MLP, et.buffer)
    delegate_map = et.delegate_map["forward"]
    assert [v["name"] for v in delegate_map.values()] == ["ExampleBackend"] * 3
    for index in delegate_map:
        assert et.debug_handle_map["forward"][index]  # the handles the delegate covers


def test_whole_program_lowering():
    edge = _edge()
    lowered = to_backend(
        "ExampleBackend", edge.exported_program(), [CompileSpec("weights", b"named")]
    )
    assert isinstance(lowered, LoweredBackendModule)
    assert lowered.named_data_store_output is not None
    assert len(lowered.named_data_store_output.pte_data) == 6
    (x,) = MLP.inputs()
    want = official.eager_outputs(MLP, (x,))
    # Eagerly, through executorch_call_delegate, it runs the edge program it came from.
    np.testing.assert_allclose(lowered(x).detach().numpy(), want[0], rtol=1e-5, atol=1e-6)
    # A program of the delegate alone.
    (got,) = Runtime.get().load_program(lowered.buffer()).load_method("forward").execute([x])
    official.assert_close(MLP, [got], want)

    # Inside another module, exported and compiled again.
    class Composite(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lowered = lowered

        def forward(self, x):
            return torch.tanh(self.lowered(x)) * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        et = to_edge(torch.export.export(Composite(), (x,))).to_executorch()
    (got,) = Runtime.get().load_program(et.buffer).load_method("forward").execute([x])
    np.testing.assert_allclose(got, np.tanh(want[0]) * 2, rtol=1e-5, atol=1e-6)
    copied = copy.deepcopy(lowered)
    assert copied.processed_bytes is lowered.processed_bytes
    assert copied.original_module.graph_module is not lowered.original_module.graph_module


def test_several_partitioners_apply_in_order():
    relu_only = ExamplePartitioner(ops={"relu"}, keep_linear=False)
    edge = lower(MLP, "to_edge_transform_and_lower", [relu_only, ExamplePartitioner()])
    modules = get_lowered_backend_modules(edge.exported_program().graph_module)
    ops = [
        [op_name(n.target) for n in m.original_module.graph.nodes if n.op == "call_function"]
        for m in modules
    ]
    assert sorted(map(tuple, ops)) == sorted(
        [("aten.relu.default",)] * 2 + [("aten.linear.default",)] * 3
    )
    check_runs_like_eager(MLP, edge.to_executorch().buffer)


class _Renamed(ExamplePartitioner):
    """The example partitioner sending its partitions to another backend id."""

    def __init__(self, backend_id: str, **kw):  # noqa: ANN003
        super().__init__(**kw)
        self.backend_id = backend_id

    def partition(self, exported_program):  # noqa: ANN001, ANN201
        result = super().partition(exported_program)
        spec = DelegationSpec(self.backend_id, self.compile_specs)
        return PartitionResult(
            result.tagged_exported_program, dict.fromkeys(result.partition_tags, spec)
        )


class CountingBackend(BackendDetails):
    """The example backend's preprocess, recording how it was called."""

    calls: list[dict[str, int]] = []

    @staticmethod
    def preprocess(edge_program, compile_specs):  # noqa: ANN001, ANN205
        return ExampleBackend.preprocess(edge_program, compile_specs)

    @classmethod
    def preprocess_multimethod(cls, edge_programs, compile_specs):  # noqa: ANN001, ANN206
        cls.calls.append({m: len(ps) for m, ps in edge_programs.items()})
        return super().preprocess_multimethod(edge_programs, compile_specs)


def test_multimethod_lowering_preprocesses_all_methods_at_once():
    register_backend("CountingBackend", ExampleRuntime())
    case = models.get_case("multi_method")
    edge = _edge(case)
    programs = {m: edge.exported_program(m) for m in edge.methods}
    partitioner = _Renamed("CountingBackend", keep_linear=False)
    CountingBackend.calls.clear()
    lowered = to_backend(
        MethodProgramsPartitionerSpec(programs, dict.fromkeys(programs, partitioner))
    )
    assert CountingBackend.calls == [{"forward": 1, "decode": 1}]
    for ep in lowered.values():
        assert {m.backend_id for m in get_lowered_backend_modules(ep.graph_module)} == {
            "CountingBackend"
        }
    manager = EdgeProgramManager(lowered, case.constant_methods)
    check_runs_like_eager(case, manager.to_executorch().buffer)

    # A partitioner for one method only leaves the other alone.
    only_decode = _edge(case).to_backend({"decode": ExamplePartitioner()})
    assert (
        get_delegation_info(
            only_decode.exported_program("forward").graph_module
        ).num_delegated_subgraphs
        == 0
    )
    assert (
        get_delegation_info(
            only_decode.exported_program("decode").graph_module
        ).num_delegated_subgraphs
        == 1
    )


# --------------------------------------------------------------------------------------
# Operators kept from decomposition


class _LinearFc3Only(ExamplePartitioner):
    """Keeps aten.linear only where it has 8 outputs (fc3 of the MLP)."""

    def ops_to_not_decompose(self, ep):  # noqa: ANN001, ANN201
        return [aten.linear.default], lambda node: node.args[1].meta["val"].shape[0] == 8


class _KeepsLinearTagsNothing(ExamplePartitioner):
    def partition(self, exported_program):  # noqa: ANN001, ANN201
        return PartitionResult(exported_program, {})


def _delegated_ops(edge) -> list[str]:  # noqa: ANN001
    modules = get_lowered_backend_modules(edge.exported_program().graph_module)
    return sorted(op for m in modules for op in _ops(m.original_module.graph_module))


def test_kept_operator_reaches_the_backend_whole():
    edge = lower(MLP, "to_edge_transform_and_lower")
    assert _delegated_ops(edge).count("aten.linear.default") == 3
    assert "aten.addmm.default" not in _delegated_ops(edge)


def test_kept_operator_survives_transform_passes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge_transform_and_lower(
            models.export(MLP),
            transform_passes=[lambda gm: None],
            partitioner=[ExamplePartitioner()],
        )
    assert _delegated_ops(edge).count("aten.linear.default") == 3


def test_check_op_support_decomposes_the_nodes_it_rejects():
    edge = lower(MLP, "to_edge_transform_and_lower", [_LinearFc3Only()])
    ops = _delegated_ops(edge)
    assert ops.count("aten.linear.default") == 1
    assert ops.count("aten.addmm.default") == 2
    check_runs_like_eager(MLP, edge.to_executorch().buffer)


def test_kept_operator_not_delegated_names_the_partitioner():
    with pytest.raises(
        PreservedOpError, match=r"partitioner _KeepsLinearTagsNothing.*aten\.linear\.default"
    ):
        lower(MLP, "to_edge_transform_and_lower", [_KeepsLinearTagsNothing()])


def test_prepare_and_check_preserved_ops_directly():
    (program,) = models.export(MLP).values()
    prepared, keep = prepare_preserved_ops(program, [_LinearFc3Only()])
    assert keep == [aten.linear.default]
    ops = [
        op_name(n.target) for n in decompose(prepared, keep).graph.nodes if n.op == "call_function"
    ]
    assert ops.count("aten.linear.default") == 1
    assert ops.count("aten.addmm.default") == 2
    # The program handed in is not changed.
    assert _ops(program.graph_module).count("aten.linear.default") == 3
    # Without a filter nothing needs preparing.
    same, keep = prepare_preserved_ops(
        program, [ExamplePartitioner(keep_linear=True, ops={"linear"})]
    )
    assert same is not None and keep == [aten.linear.default]
    with pytest.raises(PreservedOpError, match="_KeepsLinearTagsNothing"):
        check_preserved_ops_consumed(
            "forward", decompose(program, keep), [_KeepsLinearTagsNothing()]
        )


# --------------------------------------------------------------------------------------
# Errors


def test_unknown_backend_id():
    assert "ExampleBackend" in registered_backend_details()
    assert get_backend_details("ExampleBackend") is ExampleBackend
    edge = _edge()
    with pytest.raises(UnknownBackendError, match=r"'NoSuchBackend'.*registered:.*ExampleBackend"):
        edge.to_backend(TagAll("NoSuchBackend"))
    with pytest.raises(UnknownBackendError, match="'NoSuchBackend'"):
        to_backend("NoSuchBackend", edge.exported_program(), [])
    assert isinstance(UnknownBackendError("x"), NotImplementedError)  # as the official API


class NoRuntimeBackend(BackendDetails):
    """An ahead-of-time half with no runtime half registered."""

    @staticmethod
    def preprocess(edge_program, compile_specs):  # noqa: ANN001, ANN205
        return ExampleBackend.preprocess(edge_program, compile_specs)


def test_program_with_a_backend_the_runtime_lacks_fails_at_load_method():
    et = _edge().to_backend(TagAll("NoRuntimeBackend")).to_executorch()
    program = Runtime.get().load_program(et.buffer)
    with pytest.raises(
        MissingBackendError, match=r"method 'forward': delegate 0 needs backend 'NoRuntimeBackend'"
    ):
        program.load_method("forward")


class FailingBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program, compile_specs):  # noqa: ANN001, ANN205
        raise ValueError("cannot compile this")


class WrongResultBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program, compile_specs):  # noqa: ANN001, ANN205
        return "not a result"


def test_preprocess_errors_name_the_backend():
    edge = _edge()
    with pytest.raises(
        PreprocessError, match=r"'FailingBackend' failed to preprocess.*'all'.*cannot compile this"
    ):
        edge.to_backend(TagAll("FailingBackend"))
    with pytest.raises(
        PreprocessError, match=r"'WrongResultBackend'.*returned str, expected a PreprocessResult"
    ):
        edge.to_backend(TagAll("WrongResultBackend"))
    with pytest.raises(PreprocessError, match="'weights' must be b'inline' or b'named'"):
        edge.to_backend(TagAll(compile_specs=[CompileSpec("weights", b"other")]))


def test_partitioner_must_only_tag():
    class Rewriter(Partitioner):
        def partition(self, exported_program):  # noqa: ANN001, ANN201
            for node in exported_program.graph.nodes:
                if node.target == aten.relu.default:
                    node.target = aten.sigmoid.default
            return PartitionResult(exported_program, {})

    with pytest.raises(
        DelegationError, match="partitioner Rewriter changed the graph of method 'forward'"
    ):
        _edge().to_backend(Rewriter())

    class NoResult(Partitioner):
        def partition(self, exported_program):  # noqa: ANN001, ANN201
            return None

    with pytest.raises(
        DelegationError, match="partitioner NoResult: partition.. must return a PartitionResult"
    ):
        _edge().to_backend(NoResult())


def test_tags_must_form_one_piece():
    class Gappy(Partitioner):
        """Tags the first two addmm nodes but not the relu between them."""

        def partition(self, exported_program):  # noqa: ANN001, ANN201
            mms = [n for n in exported_program.graph.nodes if n.target == aten.addmm.default]
            for node in mms[:2]:
                node.meta[DELEGATION_TAG] = "gap"
            return PartitionResult(exported_program, {"gap": DelegationSpec("ExampleBackend", [])})

    with pytest.raises(
        DelegationError,
        match=r"tag 'gap' does not form one piece: aten_addmm_default_1 .*aten_relu_default",
    ):
        _edge().to_backend(Gappy())


class _SharedConstant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("const", torch.arange(4.0).reshape(2, 2))

    def forward(self, x):
        return x + self.const, x - self.const


class _TagAddWithItsConstant(Partitioner):
    """Tags the addition and the constant it shares with the subtraction."""

    def __init__(self, no_copy: bool) -> None:
        super().__init__()
        self.no_copy = no_copy

    def partition(self, exported_program):  # noqa: ANN001, ANN201
        for node in exported_program.graph.nodes:
            if node.target == aten.add.Tensor or node.name == "b_const":
                node.meta[DELEGATION_TAG] = "tag0"
                if node.op == "placeholder" and self.no_copy:
                    node.meta["no_copy"] = True
        return PartitionResult(exported_program, {"tag0": DelegationSpec("ExampleBackend", [])})


def test_no_copy_constant_shared_outside_its_delegate_is_refused():
    edge = to_edge(torch.export.export(_SharedConstant(), (torch.ones(2, 2),)))
    with pytest.raises(RuntimeError) as info:
        edge.to_backend(_TagAddWithItsConstant(no_copy=True))
    assert isinstance(info.value, DelegationError)
    # the official check's words, with the official node names
    assert "is tagged with (tag0) but has user (aten_sub_tensor) which has tag (None)" in str(
        info.value
    )
    # without no_copy the constant serves both: the delegate and the method each read it
    lowered = edge.to_backend(_TagAddWithItsConstant(no_copy=False)).to_executorch()
    for x in (torch.randn(2, 2), torch.ones(2, 2), torch.zeros(2, 2)):
        got = Runtime().load_program(lowered.buffer).load_method("forward").execute([x.numpy()])
        for a, b in zip(got, _SharedConstant()(x), strict=True):
            np.testing.assert_array_equal(a, b.numpy())


def test_compile_spec_values_are_bytes_or_str():
    assert CompileSpec("k", bytearray(b"v")).value == b"v"
    assert CompileSpec("k", "v").value == "v"  # official scripts pass str (stored as UTF-8)
    with pytest.raises(TypeError, match="CompileSpec 'k': value must be bytes or str, got int"):
        CompileSpec("k", 1)


def test_backends_are_direct_subclasses():
    with pytest.raises(TypeError, match="a backend is a direct subclass of BackendDetails"):

        class Derived(NoRuntimeBackend):
            pass


# --------------------------------------------------------------------------------------
# Named data


def test_named_data_store():
    store = NamedDataStore()
    store.add_named_data("a", b"12345678", alignment=8)
    store.add_named_data("b", b"12345678", alignment=16)  # same bytes: one buffer
    store.add_named_data("a", b"12345678", alignment=4)  # same key, same bytes: fine
    store.add_named_data("t", torch.arange(4, dtype=torch.float32), external_tag="weights")
    with pytest.raises(ValueError, match="named data 'a' is already stored with other contents"):
        store.add_named_data("a", b"other")
    with pytest.raises(ValueError, match="alignment must be a positive int"):
        store.add_named_data("c", b"x", alignment=0)
    out = store.get_named_data_store_output()
    assert len(out.buffers) == 2
    assert out.pte_data["a"].buffer_index == out.pte_data["b"].buffer_index == 0
    assert out.pte_data["a"].alignment == 8  # lcm(8, 4)
    entry = out.external_data["weights"]["t"]
    assert out.buffers[entry.buffer_index] == np.arange(4, dtype=np.float32).tobytes()
    assert list(entry.tensor_layout.sizes) == [4]
