"""Module swaps of the official Llama example: :mod:`.custom_kv_cache`."""
