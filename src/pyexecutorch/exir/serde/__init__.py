"""Programs as the official exporter's serializer writes them (``executorch.exir.serde``):
edge and executorch-dialect programs, planned ones included, in torch's export schema 5.4."""
