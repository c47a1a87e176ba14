"""Normalizations, softmax and dropout (norm.py) and their fast paths (fast.py)."""
