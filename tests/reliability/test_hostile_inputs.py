"""Hostile arguments at the public entry points of ``runtime`` and ``portable_lib``.

Each bad call raises a precise exception naming the input (or argument) at fault,
and a good call right after it still returns the right outputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch import portable_lib as pl
from pyexecutorch.runtime import Runtime
from pyexecutorch.schema import FormatError

from .harness import CORPUS

MLP = (CORPUS / "official_mlp.pte").read_bytes()
X = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
WHERE = "Input 0 of method 'forward'"


class _RaisingDLPack:
    def __dlpack__(self, **_):  # noqa: ANN003, ANN204
        raise RuntimeError("the producer failed")

    def __dlpack_device__(self):  # noqa: ANN204
        return (1, 0)


class _RaisingDevice(_RaisingDLPack):
    def __dlpack_device__(self):  # noqa: ANN204
        raise OSError("no device")


def _released() -> memoryview:
    view = memoryview(np.zeros((4, 16), np.float32))
    view.release()
    return view


def _huge() -> np.ndarray:
    # A (2**40, 16) view of one float: numpy allocates nothing, the runtime must not either.
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (1 << 40, 16), (0, 0))


BAD = [
    ("none", lambda: None, RuntimeError, "expected to have type Tensor but was None"),
    ("int", lambda: 3, RuntimeError, "expected to have type Tensor but was Int"),
    ("str", lambda: "abc", RuntimeError, "unsupported python type <class 'str'>"),
    ("dict", lambda: {"x": X}, RuntimeError, "unsupported python type <class 'dict'>"),
    ("nested list", lambda: X.tolist(), RuntimeError, "unsupported python type <class 'list'>"),
    (
        "float64",
        lambda: X.astype(np.float64),
        ValueError,
        "has dtype Double but the method expects Float",
    ),
    ("int32", lambda: X.astype(np.int32), ValueError, "has dtype Int but the method expects Float"),
    ("bool", lambda: X > 0, ValueError, "has dtype Bool but the method expects Float"),
    (
        "objects",
        lambda: np.full((4, 16), None, object),
        BufferError,
        "Unsupported buffer format 'O'",
    ),
    (
        "shape",
        lambda: X[:2],
        RuntimeError,
        r"has shape \[2, 16\], but the method expects \[4, 16\]",
    ),
    ("empty", lambda: X[:0], RuntimeError, r"has shape \[0, 16\], but the method expects"),
    ("rank", lambda: X[None], ValueError, "has rank 3, but the method expects rank 2"),
    ("0-d", lambda: np.float32(1), ValueError, "has rank 0, but the method expects rank 2"),
    ("huge", _huge, BufferError, "dense, non-overlapping layout"),
    ("byte-swapped", lambda: X.astype(">f4"), BufferError, "not in this machine's byte order"),
    ("raising __dlpack__", _RaisingDLPack, RuntimeError, "the producer failed"),
    ("raising __dlpack_device__", _RaisingDevice, OSError, "no device"),
    ("released buffer", _released, ValueError, "released memoryview"),
]


def _entry_points():  # noqa: ANN202
    method = Runtime.get().load_program(MLP).load_method("forward")
    module = pl._load_for_executorch_from_buffer(MLP)
    pl_method = pl._load_program_from_buffer(MLP).load_method("forward")
    return {
        "Method.execute": lambda xs: method.execute(xs)[0],
        "module.forward": lambda xs: np.asarray(module.forward(xs)[0]),
        "ExecuTorchMethod.execute": lambda xs: np.asarray(pl_method(xs)[0]),
    }


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    return Runtime.get().load_program(MLP).load_method("forward").execute([X])[0]


@pytest.mark.parametrize("entry", ["Method.execute", "module.forward", "ExecuTorchMethod.execute"])
def test_bad_inputs_then_a_good_call(entry, expected):
    call = _entry_points()[entry]
    for name, make, error, message in BAD:
        with pytest.raises(error, match=message) as info:
            call([make()])
        text = " ".join([str(info.value), *getattr(info.value, "__notes__", [])])
        assert "method 'forward'" in text or "method forward" in text, name
        np.testing.assert_array_equal(call([X]), expected, err_msg=f"after {name}")


@pytest.mark.parametrize("entry", ["Method.execute", "module.forward"])
def test_unusual_but_valid_arrays_give_the_dense_arrays_result(entry):
    call = _entry_points()[entry]
    reference = _entry_points()["Method.execute"]
    readonly = X.copy()
    readonly.flags.writeable = False
    wide = np.zeros((4, 32), np.float32)
    wide[:, ::2] = X
    for name, value in {
        "fortran order": np.asfortranarray(X),
        "read-only": readonly,
        "NaN": np.full_like(X, np.nan),
        "inf": np.full_like(X, np.inf),
    }.items():
        got = call([value])
        want = reference([np.ascontiguousarray(value)])
        np.testing.assert_array_equal(got, want, err_msg=name)
    strided = wide[:, ::2]
    if entry == "module.forward":  # the official bindings' rule: dense layouts only
        with pytest.raises(BufferError, match=f"{WHERE}: .*dense, non-overlapping layout"):
            call([strided])
    else:
        np.testing.assert_array_equal(call([strided]), reference([X]))


def test_negative_strides_are_read_or_refused_by_name():
    value = X[::-1]
    method = Runtime.get().load_program(MLP).load_method("forward")
    np.testing.assert_array_equal(
        method.execute([value])[0], method.execute([np.ascontiguousarray(value)])[0]
    )
    module = pl._load_for_executorch_from_buffer(MLP)
    with pytest.raises(BufferError, match=f"{WHERE}: .*non-negative, element-aligned strides"):
        module.forward([value])
    np.testing.assert_array_equal(np.asarray(module.forward([X])[0]), method.execute([X])[0])


def test_wrong_input_counts():
    method = Runtime.get().load_program(MLP).load_method("forward")
    for inputs in ([], [X, X]):
        with pytest.raises(
            ValueError, match=rf"method 'forward' takes 1 inputs, but got {len(inputs)}"
        ):
            method.execute(inputs)
    module = pl._load_for_executorch_from_buffer(MLP)
    with pytest.raises(RuntimeError, match="Method 'forward' takes 1 inputs, but got 2"):
        module.forward([X, X])
    assert method.execute([X])[0].shape == (4, 8)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"verification": "full"}, TypeError, "verification must be a Verification"),
        ({"verification": 7}, TypeError, "verification must be a Verification"),
        ({"data_files": [3]}, TypeError, "data must be a path, bytes"),
        ({"data_files": [b"junk"]}, FormatError, "too short to be a .ptd"),
        ({"max_arena_bytes": "1G"}, ValueError, "max_arena_bytes must be a positive int"),
        ({"max_instructions": 0}, ValueError, "max_instructions must be a positive int"),
        ({"backend_options": 3}, TypeError, "backend_options must map backend names"),
        ({"backend_options": {"Nope": {}}}, ValueError, "unknown backend 'Nope'"),
    ],
)
def test_load_program_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        Runtime.get().load_program(MLP, **kwargs)


@pytest.mark.parametrize("source", [None, 3, object(), [MLP], b"", b"ET12" * 3])
def test_load_sources(source):
    with pytest.raises((TypeError, FormatError)):
        Runtime.get().load_program(source)
    with pytest.raises((TypeError, RuntimeError)):
        pl._load_for_executorch_from_buffer(source)


def test_method_names():
    program = Runtime.get().load_program(MLP)
    with pytest.raises(TypeError, match="a method name is a str, got int"):
        program.load_method(3)
    with pytest.raises(KeyError, match=r"no method named 'nope'; the program has \['forward'\]"):
        program.load_method("nope")
    module = pl._load_for_executorch_from_buffer(MLP)
    with pytest.raises(RuntimeError, match="No method named 'nope'"):
        module.run_method("nope", [X])
    assert program.load_method("forward").execute([X])[0].shape == (4, 8)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="program file not found"):
        Runtime.get().load_program(str(CORPUS / "no_such.pte"))
