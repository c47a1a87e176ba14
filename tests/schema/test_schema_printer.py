"""The program listing: names and facts a person looks for, for official files."""

from __future__ import annotations

import pytest

from pyexecutorch.schema import decode_ptd, decode_pte, format_program, format_ptd
from pyexecutorch.schema.printer import dtype_name


def _listing(official, name, **kw):
    if name not in official:
        pytest.fail(f"{name} could not be exported")
    return format_program(decode_pte(official[name].data), **kw)


def test_summary_of_a_conv(official):
    text = _listing(official, "conv")
    assert "program (version 0): 1 method: 'forward'" in text
    assert "method 'forward':" in text
    assert "aten::convolution.out  (2 calls)" in text
    assert "aten::relu.out  (1 call)" in text
    # The input: value index, dtype, shape, dim order, its place in the arena.
    assert "float32[1, 3, 8, 8] arena 1 +" in text and "dim_order (0, 1, 2, 3)" in text
    assert "arenas (non_const_buffer_sizes): [0, " in text
    assert "weights: 4 constant tensors (488 bytes)" in text
    assert "constant buffers: 5 (" in text
    assert "extended header: program " in text
    # The summary lists no instructions.
    assert "chain 0" not in text


def test_verbose_lists_values_and_instructions(official):
    text = _listing(official, "conv", verbose=True)
    assert "values:" in text and "chain 0 (inputs [], outputs []):" in text
    # Instructions with operator names; tensors summarized, int lists inline.
    assert "aten::convolution.out(%" in text
    assert ":float32[1, 3, 8, 8]" in text
    assert "[1, 1]" in text and "False" in text
    assert "constant #1 (432 bytes)" in text


def test_two_methods_and_mutable_data(official):
    text = _listing(official, "two_methods")
    assert "2 methods: 'forward', 'other'" in text
    assert "method 'other':" in text and "aten::cat.out" in text
    text = _listing(official, "mutable", verbose=True)
    assert "mutable data: 2 buffers (12 bytes)" in text
    assert "initial value mutable #1" in text
    assert "aten::copy_" in text


def test_delegate_listing(official):
    text = _listing(official, "xnnpack", verbose=True)
    assert "0: XnnpackBackend  (segment 0, " in text
    assert "compile specs: none" in text
    assert "delegate 0 (XnnpackBackend)(%0:float32[2, 8], %1:float32[2, 4])" in text
    assert "named data: 2 (" in text and "delegate segments: 1 (" in text


def test_external_tensors_and_ptd(official):
    text = _listing(official, "external", verbose=True)
    assert "external 'weight'" in text and "external 'bias'" in text
    assert "extended header: none" in text
    ptd = format_ptd(decode_ptd(official["external"].ptd.read_bytes()))
    assert "2 entries, 84 bytes" in ptd
    assert "'weight': float32[3, 6]  (72 bytes)" in ptd
    assert "'bias': float32[3]  (12 bytes)" in ptd
    summary = _listing(official, "external")
    assert "weights: 2 external ('weight', 'bias')" in summary


def test_transformer_listing_is_complete(official):
    text = _listing(official, "transformer", verbose=True)
    for op in ["aten::native_layer_norm.out", "aten::_softmax.out", "aten::bmm.out"]:
        assert op in text
    # Every instruction has a line.
    pte = decode_pte(official["transformer"].data)
    n = sum(len(c.instructions) for c in pte.program.execution_plan[0].chains)
    assert f"{n} instructions" in text
    assert f"    {n - 1}: " in text.split("chain 0")[1]


def test_program_without_file_and_type_errors():
    from pyexecutorch.schema import Program

    assert "0 methods" in format_program(Program())
    with pytest.raises(TypeError, match="PteFile or a Program"):
        format_program(b"not a program")


def test_dtype_names():
    assert [dtype_name(c) for c in (6, 4, 11, 15, 5, 0)] == [
        "float32",
        "int64",
        "bool",
        "bfloat16",
        "float16",
        "uint8",
    ]
    assert dtype_name(99) == "scalar_type(99)"
