"""pyexecutorch.exir: the ahead-of-time compiler (torch.export programs to .pte)."""
