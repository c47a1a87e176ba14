"""Graph transforms shared by backends' ahead-of-time halves (the official
``executorch.backends.transforms`` path). Needs torch."""
