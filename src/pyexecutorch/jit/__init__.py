"""The compiled tier's machinery, below every kernel family.

numba's import and threads (:mod:`.numba_env`), generated modules and the cache key
(:mod:`.generated`), numba's disk cache read lazily (:mod:`.disk_cache`) and the
per-function records (:mod:`.function_records`), entry points (:mod:`.entry`) and
their deferral while a method may compile whole (:mod:`.deferral`), serial and parallel
variants (:mod:`.variants`), and the helpers compiled forms inline: explicit SIMD
vectors (:mod:`.simd`), BLAS calls (:mod:`.blas`), vectorizable exp/erf/tanh
(:mod:`.math_functions`), float16 rounding (:mod:`.half`) and array predicates
(:mod:`.arrays`).

This package imports only numpy, numba (only when the compiled tier is used) and
the schema: kernels import it, the runtime decides whether the tier is on
(:mod:`pyexecutorch.runtime.tiers`). Importing it imports no numba; the helper
modules that need numba at import are imported only by compiled forms.
"""

from pyexecutorch.jit import source_stamps

# Before numba caches any of this package's functions: their stamps cover the helper
# files they inline (numba stamps a function by its own file only).
source_stamps.watch()
