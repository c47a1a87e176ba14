"""Compiling suite models with pyexecutorch.exir, once per test session."""

from __future__ import annotations

import functools
import warnings

import numpy as np

from tests import models, official


@functools.cache
def compile_case(name: str):
    """``(ExecutorchProgramManager, .pte bytes)`` for the suite case ``name``."""
    from pyexecutorch.exir import ExecutorchBackendConfig, to_edge

    case = models.get_case(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge(models.export(case), constant_methods=case.constant_methods or None)
        et = edge.to_executorch(ExecutorchBackendConfig(**case.backend_options))
    return et, et.buffer


@functools.cache
def official_pte(name: str) -> bytes | None:
    case = models.get_case(name)
    if not case.official_exportable:
        return None
    return official.official_export(case)


def close(case, got, expected, what: str) -> str | None:
    try:
        official.assert_close(case, got, expected, what=what)
    except AssertionError as e:
        return str(e)
    return None


def assert_matches(case, pte: bytes, got, expected, inputs, method: str, what: str) -> None:
    """``got`` must match eager; where the official runtime itself cannot match
    eager on the official program (a known kernel difference), matching the
    official program's outputs is accepted instead."""
    err = close(case, got, expected, what)
    if err is None:
        return
    ref = official_pte(case.name)
    if ref is not None:
        theirs = official.OfficialRunner(ref).run(inputs, method)
        if (
            close(case, theirs, expected, what) is not None
            and close(case, got, theirs, what) is None
        ):
            return
    raise AssertionError(err)


def arrays(xs):
    return [np.asarray(x) for x in xs]
