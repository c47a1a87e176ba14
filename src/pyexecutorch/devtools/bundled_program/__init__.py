"""Bundled programs: a ``.pte`` with test cases (inputs and expected outputs) per method.

:mod:`.config` and :mod:`.core` build one (``core`` imports torch only to
compute expected outputs from an eager model), :mod:`.serialize` writes and
reads the official ``BP08`` format, and :mod:`.runtime` loads and verifies
one without torch (``pyexecutorch.portable_lib`` names it as the official
bindings do).
"""
