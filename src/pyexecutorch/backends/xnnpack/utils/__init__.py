"""Helpers for XNNPACK export scripts (the official ``backends.xnnpack.utils``)."""
