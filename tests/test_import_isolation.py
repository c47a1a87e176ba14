"""The suite's folders never stand in for installed packages, nor the other way round.

Once ``tests/`` itself was on ``sys.path``: ``tests/kernels`` answered ``import kernels``,
and transformers, which imports Hugging Face's ``kernels`` package when it is installed,
failed inside the suite with ``cannot import name 'CUDAProperties' from 'kernels'``.
Now ``tests`` is a package and its folders import only as ``tests.<name>``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# Every folder of the suite that holds Python files, and every helper module at its top.
FOLDER_NAMES = sorted(
    p.name for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").exists()
)
MODULE_NAMES = sorted(p.stem for p in TESTS.glob("*.py") if p.stem not in ("__init__", "conftest"))


def _is_inside_tests(path: str | None) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(TESTS)


def test_the_suite_has_folders_named_like_packages():
    # Guards the two tests below against passing because nothing was looked at.
    assert {"kernels", "runtime", "backends", "exir", "cli"} <= set(FOLDER_NAMES)
    assert {"models", "official", "architectures"} <= set(MODULE_NAMES)


def test_tests_folder_is_not_on_sys_path():
    assert str(TESTS) not in [str(Path(p).resolve()) for p in sys.path if p]


@pytest.mark.parametrize("name", FOLDER_NAMES + MODULE_NAMES)
def test_top_level_name_does_not_reach_the_suite(name):
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    places = [spec.origin, *(spec.submodule_search_locations or [])]
    assert not any(_is_inside_tests(p) for p in places), (name, places)


@pytest.mark.parametrize("name", FOLDER_NAMES + MODULE_NAMES)
def test_suite_modules_import_under_the_tests_package(name):
    module = importlib.import_module(f"tests.{name}")
    assert _is_inside_tests(module.__file__)


def test_hub_kernels_integration_imports_the_installed_kernels_package():
    """What broke every Hugging Face architecture in the suite with transformers 5.25."""
    hub_kernels = importlib.import_module("transformers.integrations.hub_kernels")
    assert hub_kernels.__name__ == "transformers.integrations.hub_kernels"
    if importlib.util.find_spec("kernels") is not None:
        kernels = importlib.import_module("kernels")
        assert not _is_inside_tests(kernels.__file__)
        assert hasattr(kernels, "CUDAProperties")
