"""Reductions (reduce.py) and their fast paths (fast.py)."""
