"""The emitter's output format, on programs compiled by our pipeline.

What is checked here is the program table itself (values, operator table,
instruction layout, constant and mutable data, debugging maps, external data),
plus a run in the official runtime where behaviour matters.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

from pyexecutorch.exir import ExecutorchBackendConfig, to_edge
from pyexecutorch.exir.emit import EmitError, emit_program
from pyexecutorch.exir.emit._method import MethodEmitter
from pyexecutorch.exir.emit._program_state import ProgramState
from pyexecutorch.schema import decode_pte, encode_pte
from pyexecutorch.schema.flat_tensor import decode_ptd, encode_ptd
from pyexecutorch.schema.program import (
    AllocationDetails,
    Bool,
    BoolList,
    Double,
    DoubleList,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Null,
    Tensor,
    TensorDataLocation,
    TensorList,
)
from pyexecutorch.schema.scalar_type import ScalarType
from tests import models, official


def _compile(programs, constant_methods=None, **config):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge(programs, constant_methods=constant_methods)
        return edge.to_executorch(ExecutorchBackendConfig(**config))


def _export(module, *inputs, **kw):
    with torch.no_grad():
        return torch.export.export(module, inputs, **kw)


def _plan(et, method="forward"):
    return next(p for p in et.executorch_program.execution_plan if p.name == method)


def _kernels(plan):
    """(qualified operator name, args) of every KernelCall, in order."""
    out = []
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        if isinstance(a, KernelCall):
            out.append((plan.operators[a.op_index].qualified_name, a.args))
    return out


def _run_official(et_or_pte, inputs, method="forward", ptd=None):
    pte = et_or_pte if isinstance(et_or_pte, bytes) else et_or_pte.buffer
    if ptd is None:
        return official.OfficialRunner(pte).run(inputs, method)
    official.silence_noise()
    from executorch.extension.pybindings import portable_lib

    module = portable_lib._load_for_executorch_from_buffer(pte, ptd)
    return [o.numpy().copy() for o in module.run_method(method, tuple(inputs))]


# ---------------------------------------------------------------------------
# Operator table and kernel-call arguments


class _Ops(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)

    def forward(self, x):
        y = self.fc(x)
        values, indices = torch.topk(y, 2)
        a, b = torch.split(x, [2, 4], dim=1)
        return values, indices, a * 2, b + 1


def test_operator_table_and_kernel_call_arguments():
    m, x = _Ops().eval(), torch.randn(3, 6)
    et = _compile(_export(m, x))
    plan = _plan(et)
    names = [(op.name, op.overload) for op in plan.operators]
    assert ("aten::addmm", "out") in names and ("aten::topk", "values") in names
    assert len(set(names)) == len(names)
    calls = dict(_kernels(plan))
    # addmm.out(self, mat1, mat2, *, beta, alpha, out) + return slot == out.
    addmm = calls["aten::addmm.out"]
    assert len(addmm) == 7 and addmm[-1] == addmm[-2]
    # Two out arguments: one return slot, a TensorList of both (as the official emitter).
    topk = calls["aten::topk.values"]
    ret = plan.values[topk[-1]].val
    assert isinstance(ret, TensorList) and ret.items == topk[-3:-1]
    # A Tensor[] out argument: the return slot is the same list.
    split = calls["aten::split_with_sizes_copy.out"]
    assert isinstance(plan.values[split[-2]].val, TensorList) and split[-1] == split[-2]
    sizes = plan.values[split[1]].val
    assert isinstance(sizes, IntList)
    assert [plan.values[i].val.int_val for i in sizes.items] == [2, 4]
    for got, expected in zip(_run_official(et, (x,)), m(x), strict=True):
        np.testing.assert_allclose(got, expected.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_scalar_and_list_values_are_deduplicated():
    case = models.get_case("gpt_block_manual")
    plan = _plan(_compile(models.export(case)))
    written = set()  # values that instructions write (symbolic results): never shared
    for _, args in _kernels(plan):
        written.add(args[-1])
    seen = {}
    for i, v in enumerate(plan.values):
        val = v.val
        if i in written or isinstance(val, Tensor):
            continue
        if isinstance(val, Double):
            key = ("d", repr(val.double_val))
        elif isinstance(val, (Int, Bool)):
            key = (type(val).__name__, getattr(val, "int_val", getattr(val, "bool_val", None)))
        elif isinstance(val, (IntList, BoolList, TensorList)):
            key = (type(val).__name__, tuple(val.items))
        elif isinstance(val, DoubleList):
            key = ("dl", tuple(map(repr, val.items)))
        elif isinstance(val, Null):
            key = ("n",)
        else:
            continue
        assert key not in seen, f"value {i} duplicates value {seen[key]}: {val}"
        seen[key] = i


class _TwoEqualWeights(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.b.load_state_dict(self.a.state_dict())

    def forward(self, x):
        return self.a(x) + self.b(x)


def test_constants_are_deduplicated_across_tensors_and_methods():
    m = _TwoEqualWeights().eval()
    x = torch.randn(2, 4)
    et = _compile({"forward": _export(m, x), "other": _export(m, x * 2)})
    program = et.executorch_program
    assert len(program.constant_buffer[0].storage) == 0  # the placeholder for non-constants
    blobs = [bytes(b.storage) for b in program.constant_buffer[1:]]
    assert len(blobs) == len(set(blobs))
    for plan in program.execution_plan:
        indices = [v.val.data_buffer_idx for v in plan.values if isinstance(v.val, Tensor)]
        assert all(0 <= i < len(program.constant_buffer) for i in indices)
    expected = m(x).detach().numpy()
    np.testing.assert_allclose(_run_official(et, (x,))[0], expected, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# Control flow layouts


def test_cond_layout_matches_the_official_emitter():
    case = models.get_case("cond")
    plan = _plan(_compile(models.export(case)))
    instrs = [i.instr_args for i in plan.chains[0].instructions]
    jumps = [(k, a) for k, a in enumerate(instrs) if isinstance(a, JumpFalseCall)]
    assert len(jumps) == 2
    (k0, to_else), (k1, to_end) = jumps
    # JumpFalse(pred -> else) ... then-branch, moves ... JumpFalse(False -> end) else-branch, moves.
    assert to_else.destination_instruction == k1 + 1
    assert to_end.destination_instruction == len(instrs)
    assert plan.values[to_end.cond_value_index].val == Bool(False)
    moves = [k for k, a in enumerate(instrs) if isinstance(a, MoveCall)]
    assert moves and moves[0] < k1 < moves[-1]
    result = plan.outputs[0]
    assert all(instrs[k].move_to == result for k in moves)


class _Counter(torch.nn.Module):
    def forward(self, x, y, n):
        def cond_fn(i, acc):
            return i < n

        def body_fn(i, acc):
            return i + 1, acc * 0.5 + y

        return while_loop(cond_fn, body_fn, (torch.zeros_like(n), x))


def test_while_loop_is_refused_unless_asked():
    from pyexecutorch.exir.error import InternalError

    # The official exporter's error type and message, then the opt-in.
    program = _export(_Counter(), torch.randn(2, 3), torch.randn(2, 3), torch.tensor(3))
    with pytest.raises(InternalError) as refused:
        _compile(program)
    assert str(refused.value) == (
        "Failed with error: Unsupported control flow operator: while_loop (node while_loop "
        "of method 'forward'). The official exporter refuses it; pyexecutorch emits it as a "
        "loop (a program both runtimes run) with ExecutorchBackendConfig(emit_while_loop=True)"
    )


@pytest.mark.parametrize("n", [0, 1, 4])
def test_while_loop_layout_and_run(n):
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    et = _compile(_export(_Counter(), x, y, torch.tensor(3)), emit_while_loop=True)
    plan = _plan(et)
    instrs = [i.instr_args for i in plan.chains[0].instructions]
    jumps = [(k, a) for k, a in enumerate(instrs) if isinstance(a, JumpFalseCall)]
    assert len(jumps) == 2
    (k_exit, exit_jump), (k_back, back) = jumps
    assert k_back == len(instrs) - 1
    assert exit_jump.destination_instruction == len(instrs)
    assert plan.values[back.cond_value_index].val == Bool(False)
    assert back.destination_instruction < k_exit
    # State is copied (not rebound) into the carried values before and after the body.
    clones = [k for k, (name, _) in enumerate(_kernels(plan)) if name == "aten::clone.out"]
    assert len(clones) >= 4
    got = _run_official(et, (x, y, torch.tensor(n)))
    expected = _Counter()(x, y, torch.tensor(n))
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-6, atol=1e-6)


def _simulate_moves(emitter, start, data):
    """Run the MoveCall / clone.out instructions emitted after ``start``:
    MoveCall rebinds a value to another's buffer, clone.out copies data."""
    binding = {i: i for i in data}
    for ins in emitter.instructions[start:]:
        a = ins.instr_args
        if isinstance(a, MoveCall):
            binding[a.move_to] = binding[a.move_from]
        else:
            src, _, dst, _ = a.args
            data[binding[dst]] = data[binding[src]]
    return {v: data[binding[v]] for v in binding}


def test_while_loop_state_permutation_is_resolved():
    emitter = MethodEmitter("m", ProgramState(), None)
    values = [
        emitter._new(
            Tensor(
                ScalarType.FLOAT,
                sizes=[2],
                dim_order=[0],
                allocation_info=AllocationDetails.at(1, 16 * i),
            )
        )
        for i in range(5)
    ]
    a, b, c, d, fresh = values
    # New state: a <- b, b <- c, c <- a (a cycle), d <- fresh (a computed value).
    emitter._parallel_copy([(b, a), (c, b), (a, c), (fresh, d)], node=None)
    result = _simulate_moves(emitter, 0, {v: f"data{v}" for v in values})
    assert result[a] == f"data{b}" and result[b] == f"data{c}" and result[c] == f"data{a}"
    assert result[d] == f"data{fresh}"


def test_map_lowers_to_a_counted_loop():
    from torch._higher_order_ops.map import map as torch_map

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, xs, y):
            return torch_map(lambda x, y, w: (x @ w).relu() + y, xs, y, self.w)

    m = M()
    xs, y = torch.randn(3, 2, 4), torch.randn(2, 4)
    et = _compile(_export(m, xs, y))
    plan = _plan(et)
    names = [n for n, _ in _kernels(plan)]
    assert names[0] == "aten::sym_size.int" and names[1] == "aten::select_copy.int_out"
    assert names[-4:] == [
        "executorch_prim::et_copy_index.tensor",
        "executorch_prim::add.Scalar",
        "executorch_prim::eq.Scalar",
        "executorch_prim::sub.Scalar",
    ]
    out = plan.values[plan.outputs[0]].val
    assert int(out.shape_dynamism) == 1  # grows row by row: DYNAMIC_BOUND
    np.testing.assert_allclose(
        _run_official(et, (xs, y))[0], m(xs, y).detach().numpy(), rtol=1e-5, atol=1e-5
    )


# ---------------------------------------------------------------------------
# Buffers, constants, external data


def test_mutable_buffer_initial_values_go_to_the_mutable_segment():
    case = models.get_case("mutable_buffer")
    et = _compile(models.export(case))
    pte = decode_pte(et.buffer)
    plan = pte.program.execution_plan[0]
    acc = case.make().acc
    mutable = [
        v.val
        for v in plan.values
        if isinstance(v.val, Tensor) and v.val.data_buffer_idx and v.val.allocation_info
    ]
    assert len(mutable) == 1  # acc; count starts at zero and needs no data
    stored = np.frombuffer(
        bytes(pte.mutable_data[mutable[0].data_buffer_idx].storage), dtype=np.float32
    )
    np.testing.assert_array_equal(stored, acc.numpy().ravel())


def test_emit_mutable_buffer_names():
    case = models.get_case("kv_cache")
    plan = _plan(_compile(models.export(case), emit_mutable_buffer_names=True))
    names = {
        v.val.extra_tensor_info.fully_qualified_name
        for v in plan.values
        if isinstance(v.val, Tensor) and v.val.extra_tensor_info is not None
    }
    assert names == {"k_cache", "v_cache"}


class _Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.b = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("scale", torch.tensor([2.0, 3.0, 4.0, 5.0]))

    def forward(self, x):
        return (x @ self.w + self.b) * self.scale


def test_external_constants_go_to_a_ptd_file():
    m, x = _Affine().eval(), torch.randn(2, 3)
    et = _compile(_export(m, x), external_constants=True)
    out = et._emitter_output
    assert list(out.ptd_files) == ["_default_external_constant"]
    ptd = out.ptd_files["_default_external_constant"]
    weights = m.state_dict()
    assert set(ptd.entries) == set(weights)
    plan = out.program.execution_plan[0]
    external = [
        v.val
        for v in plan.values
        if isinstance(v.val, Tensor) and v.val.extra_tensor_info is not None
    ]
    assert {t.extra_tensor_info.fully_qualified_name for t in external} == set(weights)
    assert all(
        t.extra_tensor_info.location == TensorDataLocation.EXTERNAL and t.data_buffer_idx == 0
        for t in external
    )
    data = encode_ptd(ptd)
    np.testing.assert_array_equal(decode_ptd(data).array("w"), weights["w"].numpy())
    got = _run_official(et, (x,), ptd=data)
    np.testing.assert_allclose(got[0], m(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_external_constants_by_tag_function():
    m, x = _Affine().eval(), torch.randn(2, 3)
    et = _compile(
        _export(m, x), external_constants=lambda node: "weights" if "w" in node.name else None
    )
    out = et._emitter_output
    assert list(out.ptd_files) == ["weights"] and set(out.ptd_files["weights"].entries) == {"w"}


# ---------------------------------------------------------------------------
# Constant methods, debugging output


def test_constant_methods_return_their_values():
    case = models.get_case("multi_method")
    et = _compile(models.export(case), case.constant_methods)
    program = et.executorch_program
    assert [p.name for p in program.execution_plan] == [
        "decode",
        "forward",
        "vocab_size",
        "scale",
        "use_cache",
    ]
    scale = program.execution_plan[3]
    assert scale.inputs == [] and scale.outputs == [0] and scale.values[0].val == Double(0.5)
    assert scale.container_meta_type.encoded_inp_str == ""
    assert scale.chains[0].instructions == []


def test_tensor_and_nested_constant_methods():
    ep = _compile(models.export(models.get_case("mlp"))).exported_program()
    out = emit_program({"forward": ep}, {"table": torch.arange(3), "pair": (1, [2.5, True])}, None)
    plans = {p.name: p for p in out.program.execution_plan}
    table = plans["table"].values[0].val
    assert isinstance(table, Tensor) and table.sizes == [3] and table.data_buffer_idx > 0
    assert [v.val for v in plans["pair"].values] == [Int(1), Double(2.5), Bool(True)]
    runner = official.OfficialRunner(encode_pte(out.pte_file))
    assert runner.module.run_method("table", ())[0].tolist() == [0, 1, 2]
    assert list(runner.module.run_method("pair", ())) == [1, 2.5, True]


def test_emit_stacktrace():
    case = models.get_case("cond")
    plan = _plan(_compile(models.export(case), emit_stacktrace=True))
    chain = plan.chains[0]
    assert chain.stacktrace is not None and len(chain.stacktrace) == len(chain.instructions)
    files = {f.filename for frames in chain.stacktrace for f in frames.items}
    assert any(name.endswith("models.py") for name in files)


def test_debug_handle_map_points_at_kernel_calls():
    case = models.get_case("mlp")
    et = _compile(models.export(case))
    handles = et.debug_handle_map["forward"]
    instrs = _plan(et).chains[0].instructions
    assert handles and all(isinstance(instrs[k].instr_args, KernelCall) for k in handles)


def test_unsupported_node_error_names_node_and_source_line():
    case = models.get_case("mlp")
    et = _compile(models.export(case))
    ep = et.exported_program()
    graph = ep.graph_module.graph
    first = next(n for n in graph.nodes if n.op == "call_function")

    def mystery(x):
        return x

    with graph.inserting_after(first):
        bad = graph.call_function(mystery, (first,))
    bad.meta["stack_trace"] = '  File "/src/model.py", line 42, in forward\n    y = mystery(x)\n'
    with pytest.raises(EmitError) as info:
        emit_program({"forward": ep})
    message = str(info.value)
    assert bad.name in message and "mystery" in message and "/src/model.py:42" in message


def test_python_symbolic_ops_become_prim_kernels():
    class View(torch.nn.Module):
        def forward(self, x):
            b = x.shape[0]
            return x.reshape(b * 2, -1) + 1

    batch = torch.export.Dim("batch", min=1, max=6)
    et = _compile(_export(View(), torch.randn(4, 6), dynamic_shapes=({0: batch},)))
    plan = _plan(et)
    names = [n for n, _ in _kernels(plan)]
    assert "aten::sym_size.int" in names
    assert (
        any(n.startswith("executorch_prim::") for n in names)
        or "executorch_prim::et_view.default" in names
    )
    for b in (1, 4, 6):
        x = torch.randn(b, 6)
        np.testing.assert_allclose(_run_official(et, (x,))[0], View()(x).numpy())


def test_extract_delegate_segments_false_keeps_data_inline():
    from pyexecutorch.exir.emit._program_state import ProgramState as State
    from pyexecutorch.schema.program import DataLocation

    inline = State(extract_delegate_segments=False)
    ref = inline.add_delegate_data(b"abc")
    assert ref.location == DataLocation.INLINE and inline.inline_delegate_data[0].data == b"abc"
    assert inline.add_delegate_data(b"abc").index == ref.index
    seg = State(extract_delegate_segments=True)
    assert seg.add_delegate_data(b"abc").location == DataLocation.SEGMENT
    assert seg.add_delegate_data(b"").location == DataLocation.INLINE  # empty blobs stay inline
