"""What the runtime's compiled lowering may rely on about matrix products (see
:class:`pyexecutorch.kernels.registry.OperatorFacts`)."""

from pyexecutorch.kernels.registry import Product, declare

# Their whole-method forms sum differently from their per-instruction ones: a traced
# method takes the whole-method form, so that tracing does not change its numbers.
declare("aten::bmm.out", traced_as_whole=True)
declare("aten::mm.out", traced_as_whole=True, product=Product(a=0, b=1))
# addmm(bias, a, b, beta, alpha): one BLAS call when beta and alpha are 1.
declare(
    "aten::addmm.out",
    traced_as_whole=True,
    product=Product(a=1, b=2, bias=0, unit_scales=(3, 4)),
)
