"""The XNNPACK backend: runs delegates that the official XNNPACK partitioner wrote.

Only the runtime half lives here (:mod:`.runtime`, registered as
``"XnnpackBackend"``); the payload format is described in :mod:`.schema` and
run by :mod:`.interpreter`.
"""
