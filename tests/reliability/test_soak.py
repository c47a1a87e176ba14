"""A short soak (``benchmarks/soak.py``): memory, file descriptors and maps stay flat."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


def _soak():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_executions_stay_flat():
    report = _soak().executions(5000, 250)
    assert report["fds"]["growth_after_warmup"] == 0
    assert report["ok"], report


def test_load_run_unload_cycles_stay_flat():
    soak = _soak()
    report = soak.cycles(4 * 27, 27)  # every corpus program four times
    assert report["fds"]["growth_after_warmup"] == 0
    assert report["ok"], report
