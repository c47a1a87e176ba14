"""Scalar (executorch_prim) kernels and tensor-to-scalar queries."""
