"""Indexing, gather/scatter and masking kernels (index.py) and their fast paths (fast.py)."""
