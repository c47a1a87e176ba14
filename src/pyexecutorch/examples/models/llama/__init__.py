"""Pieces of the official Llama example (see :mod:`.source_transformation`)."""
