"""numba's disk cache of a compiled function is stamped with the helper files it inlines
(pyexecutorch.jit.source_stamps): editing a helper makes the cached machine code stale,
and it is compiled again instead of read back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

from pyexecutorch.jit import source_stamps  # noqa: E402

_KERNEL = """\
import numba

from . import helper

_value = numba.njit(inline="always")(helper.value)


@numba.njit(cache=True)
def run(x):
    return _value(x)
"""

# A fresh process, as a later session would be: registers the helper as inlined, imports
# the kernel (which imports numba after pyexecutorch.jit, as the compiled forms do) and
# reports its result and what numba's cache did.
_RUN = """\
import sys
from pathlib import Path

from pyexecutorch.jit import source_stamps

source_stamps.inlined_sources(Path(sys.argv[1]) / "pkg", "helper.py")
sys.path.insert(0, sys.argv[1])
from pkg import kern

result = kern.run(1)
print(result, sum(kern.run.stats.cache_hits.values()), sum(kern.run.stats.cache_misses.values()))
"""


def _package(root: Path, step: int) -> None:
    pkg = root / "pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text(f"def value(x):\n    return x + {step}\n")
    (pkg / "kern.py").write_text(_KERNEL)


def _run(root: Path) -> tuple[int, int, int]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(root / "cache")}
    env.pop("NUMBA_CACHE_LOCATOR_CLASSES", None)
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(root)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    result, hits, misses = (int(v) for v in done.stdout.split())
    return result, hits, misses


def test_editing_an_inlined_helper_recompiles_the_kernel(tmp_path):
    _package(tmp_path, 1)
    assert _run(tmp_path) == (2, 0, 1)  # compiled and cached
    assert _run(tmp_path) == (2, 1, 0)  # read back
    _package(tmp_path, 2)  # the kernel's own file unchanged: numba's stamp alone matches
    assert _run(tmp_path) == (3, 0, 1)  # compiled again, not the stale machine code


def test_a_module_is_stamped_with_the_inlined_sources_it_imports(tmp_path, monkeypatch):
    _package(tmp_path, 1)
    (tmp_path / "pkg" / "other.py").write_text("from . import kern\n")
    monkeypatch.setattr(source_stamps, "_inlined", set(source_stamps._inlined))
    source_stamps.inlined_sources(tmp_path / "pkg", "helper.py")
    try:
        kern, other = (str(tmp_path / "pkg" / f) for f in ("kern.py", "other.py"))
        first = source_stamps.dependency_stamp(kern)
        assert first is not None
        # (through a module that is not an inlined source: not followed)
        assert source_stamps.dependency_stamp(other) is None
        assert source_stamps.dependency_stamp(str(tmp_path / "pkg" / "helper.py")) is None
        (tmp_path / "pkg" / "helper.py").write_text("def value(x):\n    return x + 5\n")
        source_stamps.dependency_stamp.cache_clear()
        assert source_stamps.dependency_stamp(kern) not in (None, first)
    finally:  # (the package's own registrations back, their caches read afresh)
        monkeypatch.undo()
        for cached in ("dependency_stamp", "_inlined_files", "_dependencies", "_imports"):
            getattr(source_stamps, cached).cache_clear()


def test_a_stamp_is_worked_out_when_numba_uses_it_as_the_plain_value(tmp_path, monkeypatch):
    # numba makes a stamp for every cached function as it is decorated; the dependency part
    # is read when numba compares or writes the stamp, and is then what it would have been
    import pickle  # noqa: PLC0415

    _package(tmp_path, 1)
    monkeypatch.setattr(source_stamps, "_inlined", set(source_stamps._inlined))
    source_stamps.inlined_sources(tmp_path / "pkg", "helper.py")
    try:
        kern = os.path.realpath(tmp_path / "pkg" / "kern.py")
        plain = (b"own", source_stamps.dependency_stamp(kern))
        stamp = source_stamps.DeferredStamp(b"own", kern)
        assert stamp == plain and plain == stamp and not plain != stamp  # (either side)
        assert pickle.loads(pickle.dumps(stamp)) == plain  # written as the value itself
        assert type(pickle.loads(pickle.dumps(stamp))) is tuple
        assert stamp != (b"own", "another helper") and stamp != b"own"
        # a helper edited after the process's first stamp: the stamp matches nothing
        later = source_stamps.DeferredStamp(b"own", kern)
        (tmp_path / "pkg" / "helper.py").write_text("def value(x):\n    return x + 5\n")
        os.utime(tmp_path / "pkg" / "helper.py", ns=(1, 1))  # (a stamp surely not the first)
        source_stamps.dependency_stamp.cache_clear()
        assert later != plain and later != (b"own", source_stamps.dependency_stamp(kern))
        assert stamp == plain  # (one worked out before the edit keeps its value)
    finally:  # (the package's own registrations back, their caches read afresh)
        monkeypatch.undo()
        for cached in ("dependency_stamp", "_inlined_files", "_dependencies", "_imports"):
            getattr(source_stamps, cached).cache_clear()
        source_stamps._first_seen.cache_clear()


def test_the_package_s_kernels_are_stamped_with_their_helpers():
    import pyexecutorch.kernels as kernels  # noqa: PLC0415

    root = Path(kernels.__file__).parent
    dense = source_stamps._dependencies(os.path.realpath(root / "conv" / "compiled_nhwc_dense.py"))
    names = {Path(p).name for p in dense}
    assert {"geometry.py", "simd.py", "compiled_nhwc_common.py"} <= names
    assert "registry.py" not in names and "numba_env.py" not in names  # (not inlined)


def test_whole_method_functions_are_keyed_by_the_code_rebuilding_their_arrays(monkeypatch):
    # bound_array's code is inlined into every whole-method function: a new stamp of its
    # file (as an edit gives it) is a new build key, so their records are compiled afresh
    from pyexecutorch.jit import generated  # noqa: PLC0415
    from pyexecutorch.runtime import whole_arguments  # noqa: PLC0415

    source = Path(whole_arguments.__file__).parent / "bound_arrays.py"
    real_stat = Path.stat

    def edited(path: Path, *args, **kwargs):  # noqa: ANN202
        st = real_stat(path, *args, **kwargs)
        if path.name != source.name:
            return st
        return SimpleNamespace(st_size=st.st_size, st_mtime_ns=st.st_mtime_ns + 1)

    generated.build_key.cache_clear()
    before = generated.build_key()
    monkeypatch.setattr(Path, "stat", edited)
    try:
        generated.build_key.cache_clear()
        assert generated.build_key() != before
    finally:
        monkeypatch.undo()
        generated.build_key.cache_clear()
        generated._source_key.cache_clear()
    assert generated.build_key() == before


# jit modules compiled kernels import but do not inline: they run at load or compile time.
NOT_INLINED = {
    "numba_env",
    "entry_points",
    "deferral",
    "symbol_calls",
    "function_records",
    "generated",
}


def test_every_jit_helper_a_compiled_kernel_imports_is_an_inlined_source():
    """A jit helper that compiled kernels import must stamp their cache: spin.py (the
    one-row linears' atomics) and xnnpack_math.py (the fused SiLU's sigmoid) were missing,
    so edits to them left stale machine code in every cache."""
    import pyexecutorch  # noqa: PLC0415

    package = Path(pyexecutorch.__file__).parent
    jit = package / "jit"
    kernels = [*package.glob("kernels/**/compiled*.py"), *package.glob("backends/**/compiled*.py")]
    imported = {
        Path(f).stem
        for kernel in kernels
        for f in source_stamps._imports(str(kernel))
        if Path(f).parent == jit
    }
    inlined = {Path(f).stem for f in source_stamps._inlined_files() if Path(f).parent == jit}
    assert {"spin", "xnnpack_math", "simd"} <= imported
    assert imported - inlined - NOT_INLINED == set()
