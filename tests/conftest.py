"""Shared test setup: the suite's defaults (numpy tier, cache folder) and the official
package's import-time noise muted.

``tests`` is a package: its helpers import as ``tests.models``, ``tests.official``,
``tests.runtime._suite``, never as top-level names, so a test folder such as
``tests/kernels`` can neither shadow an installed package called ``kernels`` nor be
shadowed by one (tests/test_import_isolation.py checks it)."""

import logging
import os
import tempfile
import time

# The suite runs on the numpy tier; the compiled tier's tests ask for it with
# jit=True (tests/runtime/test_compiled_*.py, test_fusion.py). Its generated
# code is cached across local runs (CI starts cold).
os.environ.setdefault("PYEXECUTORCH_JIT", "0")
os.environ.setdefault(
    "PYEXECUTORCH_CACHE_DIR", os.path.join(tempfile.gettempdir(), "pyexecutorch-test-cache")
)


_SESSION_START = time.time()


def pytest_terminal_summary(terminalreporter):
    # What this run spent building official programs (a cold run's cost): workers
    # append to the cache's build log, and the controller reports it here.
    from tests.build_log import summary_lines

    for line in summary_lines(_SESSION_START):
        terminalreporter.write_line(line)


def pytest_configure(config):
    # (official.silence_noise without importing torch here)
    logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    for line in (
        "ignore:.*LeafSpec.*:FutureWarning",
        "ignore:.*is an Enum subclass.*",
        "ignore:Mutation on a buffer in the model:UserWarning",
        "ignore:The tensor attributes .*_flat_weights:UserWarning",
        # importlib.resources legacy calls, torch.jit and pybindings notices inside
        # the official package
        "ignore:.* is deprecated. Use files\\(\\) instead:DeprecationWarning",
        "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning",
        "ignore:This API is experimental",
    ):
        config.addinivalue_line("filterwarnings", line)


# CI runs the property tests with a fixed seed so a landing never hangs on a
# rare draw; local runs keep exploring new examples.
if os.environ.get("CI"):
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("ci", derandomize=True, deadline=None)
    _hypothesis_settings.load_profile("ci")
