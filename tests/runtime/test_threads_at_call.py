"""The threads in force at each call, not those at load, pick a compiled form's variant.

Above the parallel threshold a convolution's step runs the parallel variant on the threads
in force at each call, its jobs split as planned for one thread or for several, picked by
reading numba's thread count when it runs (kernels/conv/compiled_nhwc.py, jit/variants.py):
a method loaded at one thread runs correctly at two and the reverse, and what loading
decides (the whole method's source) does not depend on the count at load.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from pyexecutorch.exir import to_edge
from pyexecutorch.runtime import Runtime
from pyexecutorch.runtime.threads import set_threads

numba = pytest.importorskip("numba", reason="the compiled tier needs numba (the jit extra)")

from pyexecutorch.jit import variants  # noqa: E402

pytestmark = pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2, reason="numba runs one thread here: every step is serial"
)


class Net(nn.Module):
    """Two depthwise 3x3 convolutions of 590K multiply-adds each (above the parallel
    threshold), the activation between them channels-last. (The dense kernel's split at
    each call is tested on its own in tests/kernels/test_conv_nhwc_compiled.py: a whole
    method linking both kernels compiles for a minute in a cold cache.)"""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(64, 64, 3, padding=1, groups=64)
        self.second = nn.Conv2d(64, 64, 3, padding=1, groups=64)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.second(torch.clamp(self.first(x), 0.0, 6.0))


@pytest.fixture
def restore_threads():  # noqa: ANN201
    before = numba.get_num_threads()
    yield
    set_threads(before)


def test_compiled_code_reads_the_thread_count_when_it_runs(restore_threads):  # noqa: ANN001
    reader = variants.threads_reader()

    @numba.njit
    def now():  # noqa: ANN202
        return reader()

    for n in (1, 2, 1):
        set_threads(n)
        assert now() == n


def test_a_method_loaded_at_one_thread_count_runs_correctly_at_another(restore_threads):  # noqa: ANN001
    torch.manual_seed(0)
    model = Net().eval()
    pte = to_edge(torch.export.export(model, (torch.randn(1, 64, 32, 32),))).to_executorch().buffer
    sources = {}
    for load_threads, run_threads in ((1, 2), (2, 1)):
        set_threads(load_threads)
        method = Runtime.get().load_program(pte, jit=True).load_method("forward")
        source = method.plan.whole_source
        assert source is not None
        assert "nhwc_depthwise_at_threads" in source
        sources[load_threads] = source
        set_threads(run_threads)
        for seed in (1, 2, 3):
            x = torch.randn(1, 64, 32, 32, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                want = model(x).numpy()
            (got,) = method.execute([x.numpy()])
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
    assert sources[1] == sources[2]  # nothing decided at load depends on the count then


def _in_new_thread(fn):  # noqa: ANN001, ANN202
    """``fn()`` run on a fresh thread (numba's count is per thread), and its result."""
    import threading

    box = {}
    worker = threading.Thread(target=lambda: box.update(result=fn()))
    worker.start()
    worker.join()
    return box["result"]


class _Add(nn.Module):
    def forward(self, x):  # noqa: ANN001, ANN201
        return x + 1.0


def test_the_thread_count_set_at_load_reaches_threads_that_run_the_method(restore_threads):  # noqa: ANN001
    # A Ray actor or a server loads a program on one thread and runs it on others: the
    # setting (process-wide, as documented) must reach those, and follow later settings.
    from pyexecutorch.portable_lib import _load_for_executorch_from_buffer

    pte = to_edge(torch.export.export(_Add(), (torch.randn(4),))).to_executorch().buffer
    set_threads(2)
    method = Runtime.get().load_program(pte, threads=1).load_method("forward")
    module = _load_for_executorch_from_buffer(pte)

    def run_and_count(call):  # noqa: ANN001, ANN202
        def run():  # noqa: ANN202
            x = np.arange(4, dtype=np.float32)
            np.testing.assert_array_equal(np.asarray(call(x)), x + 1.0)
            return numba.get_num_threads()

        return run

    by_runtime = run_and_count(lambda x: method.execute([x])[0])
    by_bindings = run_and_count(lambda x: module.forward([torch.from_numpy(x)])[0])
    assert _in_new_thread(by_runtime) == 1
    assert _in_new_thread(by_bindings) == 1
    set_threads(2)
    assert _in_new_thread(by_runtime) == 2
    assert _in_new_thread(by_bindings) == 2
