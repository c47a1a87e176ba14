"""The backend dialect: the ``executorch_prim`` symbolic-scalar operators (``_ops``)."""
