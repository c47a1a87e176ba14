"""The two-tier campaign's findings of its 20,000-mutant run at 39e818a (``open_*`` files
until fixed, now ``tests/data/fuzz_regressions/tiers_*`` and ``imprecise_*``), each run on
both tiers over several calls with changing inputs, asserting the outcome itself."""

from __future__ import annotations

import numpy as np
import pytest

from pyexecutorch.backends.xnnpack.schema import XnnpackError
from pyexecutorch.runtime import ExecutionError, InvalidProgramError, Runtime
from pyexecutorch.runtime.io import OUTPUT_ENV

from .campaign import _same_value
from .harness import CORPUS, inputs_for

REGRESSIONS = CORPUS.parent / "fuzz_regressions"


@pytest.fixture(autouse=True)
def numpy_outputs(monkeypatch):
    monkeypatch.setenv(OUTPUT_ENV, "numpy")


def _both_tiers(name: str) -> tuple[list, object]:
    data = (REGRESSIONS / name).read_bytes()
    plan = Runtime.get().load_program(data).pte_file.program.execution_plan[0]
    methods = [
        Runtime.get().load_program(data, jit=jit).load_method("forward") for jit in (False, True)
    ]
    return methods, plan


def _run_alike(methods: list, plan: object, calls: int = 3) -> list[np.ndarray]:
    """Each call's outputs on both tiers, asserted equal (float rounding aside)."""
    outputs = []
    for seed in range(calls):
        x = inputs_for(plan, np.random.default_rng(seed))
        got = [[np.array(o) for o in m.execute(x)] for m in methods]
        assert not _same_value(*got), _same_value(*got)
        outputs.append(got[0])
    return outputs


@pytest.mark.parametrize(
    "name", ["tiers_conv_relu_float8_weight.pte", "tiers_conv_relu_float8_bias.pte"]
)
def test_a_low_precision_convolution_keeps_its_widened_call(name):
    """A convolution and its ReLU, the convolution's weight (or bias) retyped float8 (the
    campaign's 4101 and 5269 did that to a quantized CNN; these are their minimal form):
    both tiers call the convolution widened to float32 (runtime.low_precision), but the
    compiled tier folded the ReLU into the convolution as an epilogue, which called the
    unwidened kernel, and it refused the float8 operand at execute. A convolution whose
    call widens takes no epilogue; the tiers agree call after call."""
    methods, plan = _both_tiers(name)
    assert methods[1].plan.conv_epilogues == ()
    outputs = _run_alike(methods, plan)
    assert all((o[0] >= 0).all() for o in outputs)  # (the ReLU ran)
    assert not np.array_equal(outputs[0][0], outputs[1][0])  # the inputs reach the output


def test_a_quantized_fully_connected_names_a_scalar_input():
    """A quantized XNNPACK MLP whose delegate input reaches its fully connected node 0-d:
    the node read the input's last dimension and raised a bare IndexError. It is an
    XnnpackError naming the node, on both tiers, call after call."""
    methods, plan = _both_tiers("imprecise_xnnpack_fc_scalar_input.pte")
    for method in methods:
        for seed in range(2):
            with pytest.raises(ExecutionError) as e:
                method.execute(inputs_for(plan, np.random.default_rng(seed)))
            assert isinstance(e.value.__cause__, XnnpackError)
            assert str(e.value.__cause__) == (
                "node 1 (XNNFullyConnected): input () and filter (96, 64) (2-d) do not fit"
            )


@pytest.mark.parametrize(
    "name, value, offset",
    [
        ("tiers_mutable_buffer_misaligned_output.pte", 13, 2),
        ("tiers_mlp_addmm_misaligned_output.pte", 12, 514),
    ],
)
def test_a_misaligned_planned_tensor_is_refused_at_load(name, value, offset):
    """Two programs with a float32 tensor planned off its 4-byte alignment. A mutable-buffer
    program's div output at byte 2, over the method's output: the two tiers' sums differ
    in their last bit (summation order), and the misaligned store moved that bit into
    another float's exponent (1 of 12 values off by 64). An MLP's last addmm output at byte
    514: numpy's matmul refused it as out= (a ValueError), the compiled tier wrote it. No
    exporter plans a tensor off its alignment, and reading one is undefined behaviour in
    the official runtime: both tiers refuse it when the method loads."""
    data = (REGRESSIONS / name).read_bytes()
    for jit in (False, True):
        program = Runtime.get().load_program(data, jit=jit)
        for _ in range(2):
            with pytest.raises(InvalidProgramError) as e:
                program.load_method("forward")
            assert str(e.value) == (
                f"method 'forward': value {value}: float32 tensor at offset {offset} of "
                "buffer 1 is not aligned to 4 bytes"
            )


def test_a_bool_loop_storing_float16_imports_its_encoder():
    """bool_ops with a bitwise_and's output retyped float16: the compiled tier's loop for it
    is a bool loop that stores float16 bits, but only a float16 loop's module imported the
    encoder, and numba's typing raised a NameError (a TypingError from load_method). A loop
    of any dtype that reads or stores float16 imports it; the method compiles whole, and
    the tiers agree call after call."""
    methods, plan = _both_tiers("imprecise_bool_ops_float16_out_of_bool_loop.pte")
    assert methods[1].plan.whole
    _run_alike(methods, plan)


def test_a_quantized_fully_connected_wraps_its_int32_sum_as_xnnpack():
    """A quantized XNNPACK MLP whose first fully connected node has a bias of int32's
    minimum (campaign 20217, a raw word mutation of the weights): XNNPACK's int32
    accumulator wraps around, as the compiled tier's does; the numpy tier summed exactly
    in float64 (and read the bias's magnitude through numpy's abs, which leaves int32's
    minimum negative), so 63 of 128 outputs differed. It wraps its sums to int32: both
    tiers give the official runtime's outputs, call after call."""
    from tests.official import official_run  # noqa: PLC0415 - torch, for this test only

    name = "tiers_quant_xnnpack_fc_bias_int32_min.pte"
    methods, plan = _both_tiers(name)
    outputs = _run_alike(methods, plan)
    data = (REGRESSIONS / name).read_bytes()
    for seed, out in enumerate(outputs):
        x = inputs_for(plan, np.random.default_rng(seed))
        np.testing.assert_array_equal(out[0], official_run(data, x)[0])


def test_a_quantized_convolution_wraps_its_int32_sum_as_xnnpack():
    """The same wrap-around in a quantized XNNPACK convolution (our quantized CNN, its first
    convolution's first bias set to int32's minimum): the numpy interpreter gives the
    official runtime's outputs, call after call. (The compiled tier's int32 loops wrap
    already; its CNN forms take minutes to build in a cold cache.)"""
    from tests.official import official_run  # noqa: PLC0415 - torch, for this test only

    data = (REGRESSIONS / "quant_xnnpack_conv_bias_int32_min.pte").read_bytes()
    plan = Runtime.get().load_program(data).pte_file.program.execution_plan[0]
    method = Runtime.get().load_program(data, jit=False).load_method("forward")
    for seed in range(2):
        x = inputs_for(plan, np.random.default_rng(seed))
        got = np.array(method.execute(x)[0])
        np.testing.assert_array_equal(got, official_run(data, x)[0])
