"""Start-up: a load on the numpy tier imports only what it needs (issue 28).

numba, llvmlite and scipy are the compiled tier's; ml_dtypes (about 0.7 s of CPU to
import) only a program with a bfloat16 or float8 tensor needs; devtools only bundled
programs and ETDump. Each check runs in a fresh interpreter, since this one has them all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests import models, official

# What a numpy-tier load and execute of a float program must not import.
NOT_NEEDED = ("numba", "llvmlite", "scipy", "torch", "ml_dtypes", "pyexecutorch.devtools")


def _run(script: str, **env: str) -> dict:
    import os  # noqa: PLC0415

    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_numpy_tier_load_and_execute_import_no_compiler_stack(tmp_path):
    case = models.CASES_BY_NAME["small_cnn"]
    pte = tmp_path / "small_cnn.pte"
    pte.write_bytes(official.official_export(case))
    inputs = [x.numpy() for x in case.inputs()]
    np.save(tmp_path / "x.npy", inputs[0])
    expected = official.eager_outputs(case, case.inputs())[0]
    script = f"""
        import json, sys
        import numpy as np
        from pyexecutorch.portable_lib import _load_for_executorch
        module = _load_for_executorch({str(pte)!r})
        x = np.load({str(tmp_path / "x.npy")!r})
        outs = [np.asarray(module.forward((x,))[0]) for _ in range(3)]
        # (a second input: what the load decided holds for it too)
        outs.append(np.asarray(module.forward((x * 0.5,))[0]))
        loaded = sorted(
            name for name in {NOT_NEEDED!r}
            if any(m == name or m.startswith(name + ".") for m in sys.modules)
        )
        print(json.dumps({{"loaded": loaded, "outs": [o.tolist() for o in outs]}}))
    """
    report = _run(script, PYEXECUTORCH_JIT="0")
    assert report["loaded"] == []
    for out in report["outs"][:3]:
        np.testing.assert_allclose(np.array(out), expected, rtol=1e-4, atol=1e-5)
    half = official.eager_outputs(case, tuple(x * 0.5 for x in case.inputs()))[0]
    np.testing.assert_allclose(np.array(report["outs"][3]), half, rtol=1e-4, atol=1e-5)


def test_low_precision_dtypes_are_there_when_asked_for():
    # first the tables alone, then ml_dtypes imported by the caller before a lookup
    script = """
        import json, sys
        from pyexecutorch.schema import scalar_type as st
        before = "ml_dtypes" in sys.modules
        facts = {
            "before": before,
            "float": str(st.dtype_of(st.ScalarType.FLOAT)),
            "still_not": "ml_dtypes" in sys.modules,
            "qint8": str(st.SCALAR_TYPE_TO_DTYPE.get(st.ScalarType.QINT8)),
            "bf16": str(st.dtype_of(st.ScalarType.BFLOAT16)),
            "f8_in": st.ScalarType.FLOAT8E4M3FN in st.SCALAR_TYPE_TO_DTYPE,
            "types": sorted(int(k) for k in st.SCALAR_TYPE_TO_DTYPE),
        }
        import ml_dtypes, numpy as np
        facts["back"] = int(st.scalar_type_of(np.dtype(ml_dtypes.float8_e5m2)))
        facts["size"] = st.SCALAR_TYPE_ITEMSIZE[st.ScalarType.BFLOAT16]
        print(json.dumps(facts))
    """
    facts = _run(script)
    assert facts["before"] is False and facts["still_not"] is False
    assert facts["float"] == "float32" and facts["qint8"] == "None"
    assert facts["bf16"] == "bfloat16" and facts["f8_in"] is True
    assert facts["types"] == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 15, 22, 23, 24, 25, 26, 27, 28, 29]
    assert facts["back"] == 23 and facts["size"] == 2
    script = """
        import json
        import ml_dtypes, numpy as np
        from pyexecutorch.schema import scalar_type as st
        print(json.dumps({
            "bf16": int(st.scalar_type_of(np.dtype(ml_dtypes.bfloat16))),
            "in": np.dtype(ml_dtypes.float8_e4m3fnuz) in st.DTYPE_TO_SCALAR_TYPE,
            "get": st.DTYPE_TO_SCALAR_TYPE.get(np.dtype(np.int16)),
        }))
    """
    assert _run(script) == {"bf16": 15, "in": True, "get": 2}


# A whole-method-like function (a plain function of a generated module, compiled by
# plain_entry_point) read back from its record, then another compiled in the same process.
# argv: the scales of the function read and of the one compiled.
_WARM_CHILD = """
import json, sys
import numpy as np
import pytest
from pyexecutorch.jit import entry_points, generated
from pyexecutorch.runtime import tiers
tiers.enabled(True)
source = '''
def whole(a0, a1):
    for i in range(a0.size):
        a1[i] = a0[i] * SCALE + 1.0
    return -1
'''
x = np.linspace(-2, 2, 7, dtype=np.float32)
outs, seen = [], []
for scale in sys.argv[1:]:
    function = generated.GeneratedFunction(source.replace("SCALE", scale), "startup", "whole")
    entry = entry_points.plain_entry_point(function, (x, np.zeros(7, np.float32)))
    for k in range(3):  # (changing inputs: nothing the read decided depends on them)
        out = np.zeros(7, np.float32)
        assert entry(x + k, out) == -1
        outs.append(out.tolist())
    seen.append(sorted(m for m in ("scipy.linalg", "numba.np.linalg") if m in sys.modules))
print(json.dumps({"outs": outs, "seen": seen, "stats": dict(entry_points.plain_stats)}))
"""


def test_a_warm_read_refreshes_no_numba_registry(tmp_path):
    # numba's registry refresh imports numba.np.linalg and through it scipy.linalg (0.37 s
    # of CPU of a 1.1 s warm start); installing recorded machine code needs neither
    pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")
    env = {"PYEXECUTORCH_CACHE_DIR": str(tmp_path), "PYEXECUTORCH_JIT": "1"}
    cold = _run(_WARM_CHILD.replace("sys.argv[1:]", "['3.0']"), **env)
    assert cold["stats"] == {"compilations": 1}
    warm = _run(_WARM_CHILD.replace("sys.argv[1:]", "['3.0', '-2.0']"), **env)
    # read back without the refresh; the compilation after it refreshes the registries
    assert warm["stats"] == {"cache_hits": 1, "compilations": 1}
    assert warm["seen"] == [[], ["numba.np.linalg", "scipy.linalg"]]
    x = np.linspace(-2, 2, 7, dtype=np.float32)
    expected = [(x + k) * np.float32(s) + np.float32(1) for s in (3.0, -2.0) for k in range(3)]
    assert np.array_equal(np.array(warm["outs"]), np.array(expected))
    assert cold["outs"] == warm["outs"][:3]


def test_every_compiled_registration_is_found_through_its_kernels_family():
    # A load imports the compiled modules of the families of the kernels it asks for
    # (registry.use_compiled_forms): every compiled form and cell step must live in its
    # kernel's family or in one that COMPILED_ELSEWHERE names for that family.
    pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")
    from pyexecutorch.kernels import registry  # noqa: PLC0415
    from pyexecutorch.runtime import tiers  # noqa: PLC0415

    tiers.load_compiled_forms()
    registrations = [*registry._COMPILED_FORMS.items(), *registry._CELL_STEPS.items()]
    assert len(registrations) > 50  # (they were loaded)
    misplaced = []
    for name, maker in registrations:
        family = registry.family_of(name)
        holders = (family, *registry.COMPILED_ELSEWHERE.get(family, ()))
        if family is None or maker.__module__.split(".")[2] not in holders:
            misplaced.append((name, family, maker.__module__))
    assert misplaced == []


def test_a_compiled_load_imports_the_compiled_forms_of_its_kernels_families_only(tmp_path):
    # small_cnn (convolutions, pooling, linear, relu) needs none of the LLM, quantized or
    # index families' compiled modules (each makes numba dispatchers as it imports)
    pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")
    case = models.CASES_BY_NAME["small_cnn"]
    pte = tmp_path / "small_cnn.pte"
    pte.write_bytes(official.official_export(case))
    x = case.inputs()[0].numpy()
    np.save(tmp_path / "x.npy", x)
    script = f"""
        import json, sys
        import numpy as np
        from pyexecutorch.portable_lib import _load_for_executorch
        module = _load_for_executorch({str(pte)!r})
        x = np.load({str(tmp_path / "x.npy")!r})
        outs = [np.asarray(module.forward((x * s,))[0]).tolist() for s in (1.0, 0.5, 1.0)]
        families = sorted(
            {{m.split(".")[2] for m in sys.modules
             if m.startswith("pyexecutorch.kernels.") and m.split(".")[-1].startswith("compiled")}}
        )
        print(json.dumps({{"outs": outs, "families": families}}))
    """
    report = _run(script, PYEXECUTORCH_JIT="1")
    assert "conv" in report["families"]
    assert not {"llm", "quantized", "index"} & set(report["families"])
    for scale, out in zip((1.0, 0.5, 1.0), report["outs"], strict=True):
        scaled = tuple(t * scale for t in case.inputs())
        expected = official.eager_outputs(case, scaled)[0]
        np.testing.assert_allclose(np.array(out), expected, rtol=1e-4, atol=1e-5)


# numba's runtime started with its library from the record (jit/runtime_library.py), then a
# function compiled in the same process that allocates, so links and calls that library.
_RUNTIME_CHILD = """
import json
import numpy as np
from pyexecutorch.jit import numba_env, runtime_library
numba = numba_env.numba_module()
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target
from numba.core.runtime import nrt
had = runtime_library.record_path().read_bytes() if runtime_library.record_path().exists() else b""
with global_compiler_lock:
    runtime_library.start(cpu_target.target_context)
outs = []
if COMPILE:
    @numba.njit
    def ramp_sum(n, scale):
        a = np.empty(n)
        for i in range(n):
            a[i] = i * scale
        return a.sum()
    outs = [ramp_sum(n, s) for n, s in ((10, 1.0), (100, 0.5), (7, -2.0))]
print(json.dumps({
    "had": had.hex(),
    "outs": outs,
    "abort": bool(nrt.rtsys.library.get_pointer_to_function("nrt_unresolved_abort")),
}))
"""


def test_numbas_runtime_library_is_read_back_from_its_record(tmp_path):
    pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")
    env = {"PYEXECUTORCH_CACHE_DIR": str(tmp_path)}
    want = [45.0, 2475.0, -42.0]
    start_only = _RUNTIME_CHILD.replace("COMPILE", "False")
    first = _run(start_only, **env)
    assert first["had"] == "" and first["abort"]
    (record,) = (tmp_path / "functions").glob("numba-runtime.*.record")
    written = record.read_bytes()
    # read back: the runtime of a function compiled after it (one compile: seconds)
    again = _run(_RUNTIME_CHILD.replace("COMPILE", "True"), **env)
    assert bytes.fromhex(again["had"]) == written and again["outs"] == want and again["abort"]
    record.write_bytes(b"not a record")  # an unreadable one is compiled and written again
    assert _run(start_only, **env)["abort"] and record.read_bytes() == written
