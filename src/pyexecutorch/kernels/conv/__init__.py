"""Convolutions: the reference kernel (conv.py) and its load-time fast paths (fast.py)."""
