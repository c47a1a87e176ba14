"""Model building blocks under the official ``executorch.examples.models`` paths, for
scripts and tests that import them from there (only what is listed here is provided)."""
