"""``aten_lib`` is deliberately not provided: the official ATen-mode bindings run
programs through libtorch's kernels, which a torch-free runtime does not have."""

raise ImportError(
    "pyexecutorch.extension.pybindings.aten_lib is not provided: pyexecutorch's runtime "
    "has no ATen mode (its kernels are numpy, not libtorch); use "
    "pyexecutorch.extension.pybindings.portable_lib (the same names) instead",
    name=__name__,
)
