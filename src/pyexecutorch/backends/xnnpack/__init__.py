"""The XNNPACK backend: runs delegates that the official XNNPACK partitioner wrote.

Only the runtime half lives here: :mod:`.schema` describes the payload
(``XH00`` header, ``XNNGraph`` flatbuffer, constant data), :mod:`.interpreter`
resolves a graph and plans it for given input shapes, :mod:`.nodes` turns each
node type into numpy steps, and :mod:`.runtime` registers ``"XnnpackBackend"``.
"""
