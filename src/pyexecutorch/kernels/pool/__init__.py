"""Pooling, resampling and constant padding, and their fast paths (fast.py)."""
