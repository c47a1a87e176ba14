"""No string from a program file becomes source code: names reach the generated code as values.

Each program here carries Python in one of its strings (method names, operator names,
backend ids, tensor names, compile specs, string values, named-data keys). Each loads
and runs, or fails with the runtime's exception; none of the code ever runs, and none
of it appears in the generated source.
"""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from pyexecutorch.runtime import (
    MissingBackendError,
    MissingOperatorError,
    Runtime,
)
from pyexecutorch.runtime.codegen import Namespace, literal
from pyexecutorch.schema import FormatError, decode_pte, encode_pte
from pyexecutorch.schema.program import (
    CompileSpec,
    EValue,
    ExtraTensorInfo,
    String,
    Tensor,
)

from .harness import CORPUS, inputs_for

SENTINEL = "pyexecutorch_was_injected"


def payloads() -> list[str]:
    code = f"__import__('builtins').__setattr__({SENTINEL!r}, 1)"
    return [
        f"x'); {code}; ('",
        f'x"); {code}; ("',
        f"x\n{code}\n",
        f"x}}; {code}; {{",
        f"x]; {code}; [",
        f"x' + {code} + '",
        f"\\\n{code}",
        f"x#\n    {code}",
        f"{{{code}}}",
    ]


def _edited(name: str, edit) -> bytes:  # noqa: ANN001
    f = decode_pte((CORPUS / name).read_bytes())
    edit(f)
    return encode_pte(f)


def _rename_method(text: str):  # noqa: ANN202
    def edit(f):  # noqa: ANN001
        f.program.execution_plan[0].name = text

    return edit


def _operator_name(text: str):  # noqa: ANN202
    def edit(f):  # noqa: ANN001
        f.program.execution_plan[0].operators[0].name = text

    return edit


def _operator_overload(text: str):  # noqa: ANN202
    def edit(f):  # noqa: ANN001
        f.program.execution_plan[0].operators[0].overload = text

    return edit


def _backend_id(text: str):  # noqa: ANN202
    def edit(f):  # noqa: ANN001
        f.program.execution_plan[0].delegates[0].id = text

    return edit


def _compile_spec(text: str):  # noqa: ANN202
    def edit(f):  # noqa: ANN001
        f.program.execution_plan[0].delegates[0].compile_specs.append(
            CompileSpec(text, text.encode())
        )

    return edit


def _tensor_name(text: str):  # noqa: ANN202
    def edit(f):  # noqa: ANN001
        for ev in f.program.execution_plan[0].values:
            if isinstance(ev.val, Tensor):
                ev.val.extra_tensor_info = ev.val.extra_tensor_info or ExtraTensorInfo()
                ev.val.extra_tensor_info.fully_qualified_name = text

    return edit


def _string_value(text: str):  # noqa: ANN202
    def edit(f):  # noqa: ANN001
        f.program.execution_plan[0].values.append(EValue(String(text)))

    return edit


def _named_key(text: str):  # noqa: ANN202
    def edit(f):  # noqa: ANN001
        f.named_data = {text + str(n): blob for n, blob in enumerate(f.named_data.values())}

    return edit


CASES = [
    ("official_mlp.pte", _rename_method),
    ("ours_cond.pte", _rename_method),  # a chain with jumps: the dispatcher's source too
    ("official_mlp.pte", _operator_name),
    ("official_mlp.pte", _operator_overload),
    ("official_mlp.pte", _string_value),
    ("official_mlp.pte", _tensor_name),
    ("official_external.pte", _tensor_name),
    ("ours_example_mlp.pte", _backend_id),
    ("ours_example_mlp.pte", _compile_spec),
    ("official_xnnpack_mlp.pte", _compile_spec),
    ("official_xnnpack_mlp.pte", _named_key),
]


@pytest.mark.parametrize(("seed", "edit"), CASES, ids=[f"{s}-{e.__name__}" for s, e in CASES])
def test_strings_in_a_program_are_never_code(seed, edit):
    data_files = [
        (CORPUS / f"{seed[:-4]}.0.ptd").read_bytes()
        for _ in range(1)
        if (CORPUS / f"{seed[:-4]}.0.ptd").exists()
    ]
    for text in payloads():
        data = _edited(seed, edit(text))
        try:
            program = Runtime.get().load_program(data, data_files=data_files)
            for name in program.method_names:
                method = program.load_method(name)
                plan = next(p for p in program.pte_file.program.execution_plan if p.name == name)
                method.execute(inputs_for(plan, np.random.default_rng(0)))
                for source in method.plan.sources:
                    assert SENTINEL not in source
        except (FormatError, MissingOperatorError, MissingBackendError):
            pass
        assert not hasattr(builtins, SENTINEL), f"{edit.__name__} executed {text!r}"


def test_method_name_with_code_runs_under_that_name():
    text = payloads()[0]
    data = _edited("official_mlp.pte", _rename_method(text))
    program = Runtime.get().load_program(data)
    assert program.method_names == {text}
    plan = program.pte_file.program.execution_plan[0]
    (out,) = program.load_method(text).execute(inputs_for(plan, np.random.default_rng(0)))
    assert out.shape == (4, 8)


def test_operator_name_with_code_is_a_missing_operator():
    text = payloads()[2]
    with pytest.raises(MissingOperatorError) as info:
        Runtime.get().load_program(_edited("official_mlp.pte", _operator_name(text))).load_method(
            "forward"
        )
    assert info.value.missing[0].startswith(text)


class _Loud(int):
    def __repr__(self) -> str:
        return f"__import__('builtins').__setattr__({SENTINEL!r}, 1)"


@pytest.mark.parametrize("value", ["a'b", "x\ny", _Loud(3), np.float64(1.5), np.int64(2), b"q"])
def test_literal_binds_anything_but_exact_numbers(value):
    ns = Namespace()
    text = literal(value, ns)
    assert text in ns.names and ns.names[text] is value
    assert literal(7, ns) == "7" and literal(-2.5, ns) == "-2.5" and literal(None, ns) == "None"
