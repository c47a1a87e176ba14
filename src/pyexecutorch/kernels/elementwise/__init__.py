"""Elementwise kernels: unary math, binary arithmetic and comparisons, activations, and their fast paths."""
