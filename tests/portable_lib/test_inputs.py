"""Inputs: every accepted kind, its conversion, and each refusal with its exact type and message."""

from __future__ import annotations

import array
import ctypes
import gc
import re
import weakref

import numpy as np
import pytest
import torch

from pyexecutorch import portable_lib as pl
from pyexecutorch.runtime.io import InputDecl, read_input
from pyexecutorch.runtime.meta import Tag
from pyexecutorch.schema.scalar_type import ScalarType as ST
from tests import models, official
from tests.portable_lib.conftest import Conv

M = "forward"


def decl(st: ST = ST.FLOAT, sizes=(2, 3), order=None, tag=Tag.Tensor, exported=None) -> InputDecl:
    if tag != Tag.Tensor:
        return InputDecl(0, tag, exported=exported)
    return InputDecl(0, tag, int(st), tuple(sizes), tuple(order or range(len(sizes))))


def to_numpy(x):
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def raises(cls, message):
    return pytest.raises(cls, match="^" + re.escape(message) + "$")


# ------------------------------------------------------------------- buffers

NUMPY_TYPES = [
    (np.bool_, ST.BOOL),
    (np.int8, ST.CHAR),
    (np.int16, ST.SHORT),
    (np.int32, ST.INT),
    (np.int64, ST.LONG),
    (np.uint8, ST.BYTE),
    (np.uint16, ST.UINT16),
    (np.uint32, ST.UINT32),
    (np.uint64, ST.UINT64),
    (np.float16, ST.HALF),
    (np.float32, ST.FLOAT),
    (np.float64, ST.DOUBLE),
    (np.complex64, ST.COMPLEX64),
    (np.complex128, ST.COMPLEX128),
]


@pytest.mark.parametrize(
    ("dtype", "st"), NUMPY_TYPES, ids=[np.dtype(d).name for d, _ in NUMPY_TYPES]
)
def test_numpy_and_memoryview_dtypes(dtype, st):
    a = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    for value in (a, memoryview(a)):
        inp = read_input(value, decl(st), M)
        assert inp.scalar_type == st
        assert inp.value.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(inp.value, a)
        assert np.shares_memory(inp.value, a)  # borrowed, not copied


@pytest.mark.parametrize(
    ("code", "st"),
    [
        ("b", ST.CHAR),
        ("h", ST.SHORT),
        ("i", ST.INT),
        ("q", ST.LONG),
        ("B", ST.BYTE),
        ("H", ST.UINT16),
    ]
    + [("I", ST.UINT32), ("Q", ST.UINT64), ("f", ST.FLOAT), ("d", ST.DOUBLE)],
)
def test_struct_code_formats(code, st):
    buf = array.array(code, range(6))
    inp = read_input(buf, decl(st, (6,)), M)
    assert inp.scalar_type == st
    np.testing.assert_array_equal(inp.value, np.arange(6))


def test_platform_sized_and_ctypes_formats():
    # 'l' is 8 bytes here; its width comes from the item size.
    assert read_input(array.array("l", [1, 2]), decl(ST.LONG, (2,)), M).scalar_type == ST.LONG
    # ctypes spells the native byte order out ('<i').
    arr = (ctypes.c_int32 * 3)(1, 2, 3)
    assert memoryview(arr).format in ("<i", ">i")
    inp = read_input(arr, decl(ST.INT, (3,)), M)
    assert inp.scalar_type == ST.INT and inp.value.tolist() == [1, 2, 3]


def test_byte_swapped_buffer_refused():
    x = np.zeros((2, 3), dtype=">f4" if np.little_endian else "<f4")
    fmt = ">f" if np.little_endian else "<f"
    with raises(
        BufferError,
        f"Input 0 of method 'forward': Buffer format '{fmt}' is not in this machine's byte order. "
        "Convert the data to the native byte order before passing it.",
    ):
        read_input(x, decl(), M)


def test_unsupported_format_refused():
    with raises(
        BufferError,
        "Input 0 of method 'forward': Unsupported buffer format '1w' with item size 4. "
        "Use a buffer of booleans, integers, floats, or complex numbers.",
    ):
        read_input(np.array([["a", "b", "c"]] * 2), decl(), M)


def test_non_dense_refused():
    x = np.zeros((2, 6), np.float32)[:, ::2]
    with raises(
        BufferError,
        "Input 0 of method 'forward': ExecuTorch inputs must have a dense, non-overlapping layout",
    ):
        read_input(x, decl(), M)
    with raises(
        BufferError,
        "Input 0 of method 'forward': ExecuTorch inputs require non-negative, element-aligned strides",
    ):
        read_input(np.zeros((2, 3), np.float32)[::-1], decl(), M)


def test_rank_too_large_refused():
    x = np.zeros((1,) * 17, np.float32)
    with raises(
        BufferError, "Input 0 of method 'forward': Buffer rank is too large for ExecuTorch"
    ):
        read_input(memoryview(x), decl(sizes=(1,) * 17), M)


def test_readonly_buffer_is_copied_writable_is_borrowed():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ro = x.view()
    ro.flags.writeable = False
    inp = read_input(ro, decl(), M)
    assert not np.shares_memory(inp.value, x)
    np.testing.assert_array_equal(inp.value, x)
    data = bytes(x.tobytes())  # bytes are read-only too
    assert not np.shares_memory(
        read_input(data, decl(ST.BYTE, (24,)), M).value, np.frombuffer(data, np.uint8)
    )
    borrowed = read_input(x, decl(), M)
    assert borrowed.value is x


def test_dense_other_dim_order_is_converted():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)  # dense, order (0, 2, 1)
    inp = read_input(nhwc, decl(sizes=(2, 3, 4)), M)
    assert inp.value.flags.c_contiguous and not np.shares_memory(inp.value, nhwc)  # a copy
    np.testing.assert_array_equal(inp.value, x)
    inp = read_input(x, decl(sizes=(2, 3, 4), order=(0, 2, 1)), M)
    assert inp.value.strides == nhwc.strides
    np.testing.assert_array_equal(inp.value, x)
    same = read_input(nhwc, decl(sizes=(2, 3, 4), order=(0, 2, 1)), M)
    assert same.value is nhwc  # already in the method's order: borrowed


def test_raw_bfloat16_bytes():
    bits = np.arange(6, dtype=np.uint16)
    raw = bytearray(bits.tobytes())
    inp = read_input(raw, decl(ST.BFLOAT16), M)
    assert inp.scalar_type == ST.BFLOAT16 and inp.value.shape == (2, 3)
    # Read as ml_dtypes' bfloat16, bit for bit.
    np.testing.assert_array_equal(inp.value.reshape(-1).view(np.uint16), bits)
    raw[0] = 99  # the bytes were copied
    assert inp.value[0, 0] == 0
    cl = read_input(bytes(bits.tobytes()), decl(ST.BFLOAT16, (1, 2, 1, 3), (0, 2, 3, 1)), M)
    assert cl.value.shape == (1, 2, 1, 3) and cl.value.strides == (12, 2, 12, 4)
    with raises(
        ValueError,
        "Input 0 of method 'forward': raw bfloat16 input has 10 bytes, but the method expects 12",
    ):
        read_input(bytes(10), decl(ST.BFLOAT16), M)
    with raises(
        BufferError,
        "Input 0 of method 'forward': Raw bfloat16 inputs require contiguous byte buffers",
    ):
        read_input(np.zeros(24, np.uint8)[::2], decl(ST.BFLOAT16), M)


def test_dtype_and_rank_errors():
    with raises(
        ValueError, "Input 0 of method 'forward' has dtype Int but the method expects Float"
    ):
        read_input(np.zeros((2, 3), np.int32), decl(), M)
    with raises(
        ValueError, "Input 0 of method 'forward' has rank 3, but the method expects rank 2"
    ):
        read_input(np.zeros((2, 3, 1), np.float32), decl(), M)
    with raises(
        RuntimeError, "Input 0 of method 'forward': not a tensor input: the method expects None"
    ):
        read_input(np.zeros(3, np.float32), decl(tag=Tag.None_), M)


# -------------------------------------------------------------- torch, DLPack


def test_torch_tensors():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    inp = read_input(t, decl(), M)
    assert inp.scalar_type == ST.FLOAT and inp.value.ctypes.data == t.data_ptr()
    for dtype, st in [
        (torch.int64, ST.LONG),
        (torch.bool, ST.BOOL),
        (torch.float16, ST.HALF),
        (torch.uint8, ST.BYTE),
    ]:
        assert read_input(t.to(dtype), decl(st), M).scalar_type == st
    bf = t.to(torch.bfloat16)
    inp = read_input(bf, decl(ST.BFLOAT16), M)
    assert inp.scalar_type == ST.BFLOAT16
    assert inp.value.dtype.name == "bfloat16"  # ml_dtypes, the same bits
    np.testing.assert_array_equal(
        inp.value.view(np.uint16), bf.view(torch.int16).numpy().view(np.uint16)
    )
    with raises(
        ValueError, "Input 0 of method 'forward' has dtype BFloat16 but the method expects Float"
    ):
        read_input(bf, decl(), M)


def test_torch_refusals():
    with raises(
        ValueError,
        "Input 0 of method 'forward': Lazy conjugate and negative torch tensor views must be resolved before execution",
    ):
        read_input(torch.rand(2, 3, dtype=torch.complex64).conj(), decl(ST.COMPLEX64), M)
    with raises(
        RuntimeError,
        "Input 0 of method 'forward': Torch tensor is on device meta, and only CPU and CUDA tensors can be "
        "passed to portable bindings.",
    ):
        read_input(torch.empty(2, 3, device="meta"), decl(), M)
    with raises(
        ValueError,
        "Input 0 of method 'forward': ExecuTorch inputs must have a dense, non-overlapping layout",
    ):
        read_input(torch.rand(2, 6)[:, ::2], decl(), M)


class Producer:
    """A DLPack producer without the buffer protocol."""

    def __init__(self, array, device=(1, 0), legacy=False):
        self.array, self.device, self.legacy, self.requests = array, device, legacy, []

    def __dlpack__(self, stream=None, max_version=None, **kw):
        if self.legacy and max_version is not None:
            raise TypeError("unexpected keyword argument 'max_version'")
        self.requests.append(max_version)
        return self.array.__dlpack__(**({"max_version": max_version} if max_version else {}))

    def __dlpack_device__(self):
        return self.device


def test_dlpack_producer_versioned_and_legacy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = Producer(x)
    inp = read_input(p, decl(), M)
    assert p.requests == [(1, 0)] and np.shares_memory(inp.value, x)
    legacy = Producer(x, legacy=True)
    inp = read_input(legacy, decl(), M)
    assert legacy.requests == [None] and np.shares_memory(inp.value, x)


def test_dlpack_capsules():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for capsule in (x.__dlpack__(), x.__dlpack__(max_version=(1, 0))):
        inp = read_input(capsule, decl(), M)
        np.testing.assert_array_equal(inp.value, x)
        with raises(
            ValueError, "Input 0 of method 'forward': This DLPack capsule was already consumed"
        ):
            read_input(capsule, decl(), M)


def test_dlpack_readonly_is_copied():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ro = x.view()
    ro.flags.writeable = False
    inp = read_input(Producer(ro), decl(), M)
    assert not np.shares_memory(inp.value, x)
    np.testing.assert_array_equal(inp.value, x)


def test_dlpack_refusals():
    x = np.zeros((2, 3), np.float32)
    with raises(
        ValueError, "Input 0 of method 'forward': Only CPU and CUDA DLPack tensors are supported"
    ):
        read_input(Producer(x, device=(4, 0)), decl(), M)
    with raises(
        ValueError,
        "Input 0 of method 'forward': DLPack capsule device disagrees with __dlpack_device__()",
    ):
        read_input(Producer(x, device=(2, 0)), decl(), M)
    with raises(
        ValueError,
        "Input 0 of method 'forward': ExecuTorch inputs require dense DLPack tensor storage",
    ):
        read_input(Producer(np.zeros((2, 6), np.float32)[:, ::2]), decl(), M)
    with raises(
        ValueError, "Input 0 of method 'forward' has dtype Long but the method expects Float"
    ):
        read_input(Producer(np.zeros((2, 3), np.int64)), decl(), M)


# -------------------------------------------------------------- scalars, None


def test_scalars_for_declared_numbers():
    d = decl(tag=Tag.Double, exported=2.0)
    for v in (2, 2.0, np.float32(2), np.int64(2), np.array(2.0)):
        value = read_input(v, d, M).value
        assert value == 2.0 and type(value) is float
    assert type(read_input(np.int32(3), decl(tag=Tag.Int), M).value) is int
    assert read_input(np.bool_(True), decl(tag=Tag.Bool), M).value is True
    with raises(
        RuntimeError,
        "Input 0 of method 'forward': the method expects Double, but got <class 'bool'>",
    ):
        read_input(True, d, M)
    with raises(
        RuntimeError, "Input 0 of method 'forward': the method expects Int, but got <class 'float'>"
    ):
        read_input(3.0, decl(tag=Tag.Int), M)
    with raises(
        RuntimeError, "Input 0 of method 'forward': the method expects Bool, but got <class 'int'>"
    ):
        read_input(1, decl(tag=Tag.Bool), M)
    with raises(
        RuntimeError,
        "Input 0 of method 'forward': the method expects Double, but got <class 'torch.Tensor'>",
    ):
        read_input(torch.tensor(2.0), d, M)


def test_none_and_unsupported_types():
    assert read_input(None, decl(tag=Tag.None_), M).value is None
    for value, name in ((object(), "object"), ("abc", "str")):
        with raises(
            RuntimeError,
            f"Input 0 of method 'forward': unsupported python type <class '{name}'>. "
            "Ensure that inputs are passed as a flat list of tensors.",
        ):
            read_input(value, decl(), M)


def test_foreign_errors_keep_their_type_and_get_a_note():
    class Broken:
        def __dlpack__(self, **kw):
            raise KeyError("producer failed")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(KeyError) as info:
        read_input(Broken(), decl(), M)
    assert info.value.__notes__ == ["Input 0 of method 'forward'"]


# -------------------------------------------------------------------- programs


def test_single_tensor_and_sequences(mlp, mlp_input, mlp_expected):
    for inputs in (mlp_input, [mlp_input], (mlp_input,), torch.from_numpy(mlp_input)):
        np.testing.assert_allclose(
            to_numpy(mlp.forward(inputs)[0]), mlp_expected, rtol=1e-5, atol=1e-6
        )
    for bad in ({"x": mlp_input}, None, 3.0, (x for x in [mlp_input])):
        with raises(TypeError, "Inputs must be a tensor buffer or a flat sequence"):
            mlp.forward(bad)


def test_input_count_errors(mlp, mlp_input):
    with raises(RuntimeError, "Method 'forward' takes 1 inputs, but got 2"):
        mlp.forward([mlp_input, mlp_input])
    with raises(
        RuntimeError,
        "Method 'forward' takes 1 inputs, but only 0 were ever passed. Pass every input.",
    ):
        mlp.forward([])


def test_fewer_inputs_reuse_the_previous_call(mlp, mlp_input, mlp_expected):
    x = mlp_input.copy()
    mlp.forward([x])
    np.testing.assert_allclose(to_numpy(mlp.forward([])[0]), mlp_expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        to_numpy(mlp.plan_execute("forward")[0]), mlp_expected, rtol=1e-5, atol=1e-6
    )
    # The reused input is the caller's array, read again at each run.
    x *= 2
    case = models.CASES_BY_NAME["mlp"]
    doubled = official.eager_outputs(case, (torch.from_numpy(x.copy()),))[0]
    np.testing.assert_allclose(to_numpy(mlp.forward([])[0]), doubled, rtol=1e-5, atol=1e-6)


def test_partial_call_refused_after_failed_install(mlp, mlp_input):
    mlp.forward([mlp_input])
    with raises(
        RuntimeError,
        "Failed to set input 0 of method forward, error: 0x10: "
        "Input 0 of method 'forward' has shape [5, 16], but the method expects [4, 16]",
    ):
        mlp.forward([np.zeros((5, 16), np.float32)])
    refused = (
        "The last call to method 'forward' failed while setting its inputs, so the inputs it would reuse "
        "may be a mix of two calls. Pass every input on the next call."
    )
    with raises(RuntimeError, refused):
        mlp.forward([])
    mlp.forward([mlp_input])
    mlp.forward([])  # a full call lifts the refusal
    # A conversion error happens before anything is installed and does not block reuse.
    with pytest.raises(ValueError):
        mlp.forward([mlp_input.astype(np.float64)])
    mlp.forward([])


def test_changed_storage_refused(mlp, mlp_input):
    t = torch.from_numpy(mlp_input.copy()).clone()
    mlp.forward([t])
    t.set_(torch.rand(4, 16))
    message = (
        "Input 0 of method 'forward': its storage changed after it was passed in; pass it again"
    )
    with raises(ValueError, message):
        mlp.forward([])
    mlp.forward([t])  # passing it again is fine
    method = pl._load_program_from_buffer(
        official.official_export(models.CASES_BY_NAME["mlp"])
    ).load_method("forward")
    method.set_inputs([t])
    t.set_(torch.rand(8, 16))
    with raises(ValueError, message):
        method.execute()


def test_readonly_input_is_a_copy_at_call_time(mlp, mlp_input, mlp_expected):
    base = mlp_input.copy()
    ro = base.view()
    ro.flags.writeable = False
    mlp.forward([ro])
    base[...] = 0  # the method kept its own copy
    np.testing.assert_allclose(to_numpy(mlp.forward([])[0]), mlp_expected, rtol=1e-5, atol=1e-6)


def test_scalar_inputs(case_pte):
    m = pl._load_for_executorch_from_buffer(case_pte("scalar_input"))
    x = torch.rand(2, 3)
    expected = to_numpy(m.forward([x, 2.5, 3])[0])
    got = m.forward([x.numpy(), np.float64(2.5), np.int64(3)])
    np.testing.assert_array_equal(to_numpy(got[0]), expected)
    with raises(
        RuntimeError,
        "Failed to set input 1 of method forward, error: 0x12: "
        "Input 1 of method 'forward' must be 2.5, the value the method was exported with, but got 3.5",
    ):
        m.forward([x, 3.5, 3])
    with raises(
        RuntimeError, "Input 2 of method 'forward': the method expects Int, but got <class 'float'>"
    ):
        m.forward([x, 2.5, 3.0])
    with raises(
        RuntimeError,
        "Failed to set input 0 of method forward, error: 0x12: "
        "Input 0 of method 'forward' was expected to have type Tensor but was None",
    ):
        m.forward([None, 2.5, 3])
    with raises(
        RuntimeError,
        "Failed to set input 0 of method forward, error: 0x12: "
        "Input 0 of method 'forward' was expected to have type Tensor but was Double",
    ):
        m.forward([1.0, 2.5, 3])


def test_dynamic_bounds_per_dimension(case_pte):
    case = models.CASES_BY_NAME["dynamic_batch"]
    m = pl._load_for_executorch_from_buffer(case_pte("dynamic_batch"))
    for (x,) in case.all_inputs():
        np.testing.assert_allclose(
            to_numpy(m.forward([x])[0]), official.eager_outputs(case, (x,))[0], rtol=1e-5, atol=1e-6
        )
    with raises(
        RuntimeError,
        "Failed to set input 0 of method forward, error: 0x10: Input 0 of method 'forward' has size 9 in "
        "dimension 0, above its upper bound 8 (the method takes sizes up to [8, 16])",
    ):
        m.forward([torch.rand(9, 16)])
    # 2 x 17 has fewer elements than the bound holds, but dimension 1 is over its bound.
    with raises(
        RuntimeError,
        "Failed to set input 0 of method forward, error: 0x10: Input 0 of method 'forward' has size 17 in "
        "dimension 1, above its upper bound 16 (the method takes sizes up to [8, 16])",
    ):
        m.forward([torch.rand(2, 17)])


def test_channels_last_inputs_are_not_misread(case_pte, program, inputs_of):
    case = models.CASES_BY_NAME["conv_bn"]
    m = pl._load_for_executorch_from_buffer(case_pte("conv_bn"))  # a contiguous program
    (x,) = case.inputs()
    expected = official.eager_outputs(case, (x,))[0]
    nhwc = x.to(memory_format=torch.channels_last)
    dense_numpy = np.ascontiguousarray(x.numpy().transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for value in (nhwc, dense_numpy, Producer(dense_numpy)):
        np.testing.assert_allclose(to_numpy(m.forward([value])[0]), expected, rtol=1e-4, atol=1e-5)
    cl = pl._load_for_executorch_from_buffer(
        program("conv_channels_last")
    )  # a channels-last program
    assert cl.method_meta("forward").input_tensor_meta(0).dim_order() == (0, 2, 3, 1)
    (y,) = inputs_of("conv_channels_last")
    module = Conv().eval()
    with torch.no_grad():
        want = module(y.contiguous()).numpy()
    for value in (y.contiguous(), y, y.contiguous().numpy()):
        np.testing.assert_allclose(to_numpy(cl.forward([value])[0]), want, rtol=1e-4, atol=1e-5)


def test_zero_dim_inputs(program):
    m = pl._load_for_executorch_from_buffer(program("zero_dim"))
    v = np.array([1.0, 2.0, 3.0], np.float32)
    for s in (torch.tensor(2.0), np.float32(2.0), np.array(2.0, np.float32)):
        w, total = m.forward([s, v])
        np.testing.assert_allclose(to_numpy(w), v * 2)
        assert to_numpy(total).shape == () and float(total) == pytest.approx(12.0)
    with raises(
        ValueError, "Input 0 of method 'forward' has rank 1, but the method expects rank 0"
    ):
        m.forward([np.array([2.0], np.float32), v])


def test_buffer_kinds_in_a_program(program, inputs_of):
    m = pl._load_for_executorch_from_buffer(program("dtypes"))
    inputs = inputs_of("dtypes")
    expected = [to_numpy(o) for o in m.forward(list(inputs))]
    u8, i8, i16, f64, f16, b = (t.numpy() for t in inputs)
    as_buffers = [
        np.frombuffer(bytearray(u8.tobytes()), np.uint8).reshape(2, 3),
        memoryview(i8),
        array_2d(i16),
        f64,
        f16,
        b,
    ]
    got = m.forward(as_buffers)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(to_numpy(g), e)
    np.testing.assert_array_equal(expected[0], u8 + 1)
    np.testing.assert_array_equal(expected[5], ~b)


def array_2d(a: np.ndarray) -> memoryview:
    """A 2-d buffer of ``array.array`` memory."""
    return memoryview(array.array("h", a.reshape(-1).tolist())).cast("B").cast("h", a.shape)


def test_buffer_kept_alive(mlp_pte, mlp_input, mlp_expected):
    def load():
        data = np.frombuffer(bytes(mlp_pte), dtype=np.uint8)  # read-only: kept, not copied
        return pl._load_for_executorch_from_buffer(data), weakref.ref(data)

    module, ref = load()
    gc.collect()
    assert ref() is not None  # held by the module
    junk = [bytearray(len(mlp_pte)) for _ in range(8)]  # reuse freed memory, if any were freed
    del junk
    np.testing.assert_allclose(
        to_numpy(module.forward([mlp_input])[0]), mlp_expected, rtol=1e-5, atol=1e-6
    )
    meta = module.method_meta("forward")
    del module
    gc.collect()
    assert repr(meta).startswith("MethodMeta(name='forward'")
    del meta
    gc.collect()
    assert ref() is None


def test_writable_buffer_is_copied(mlp_pte, mlp_input, mlp_expected):
    data = bytearray(mlp_pte)
    module = pl._load_for_executorch_from_buffer(data)
    data[:] = bytes(len(data))  # the caller reuses its buffer
    np.testing.assert_allclose(
        to_numpy(module.forward([mlp_input])[0]), mlp_expected, rtol=1e-5, atol=1e-6
    )
