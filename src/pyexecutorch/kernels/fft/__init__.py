"""Fourier transforms."""
