"""Checks of exported graphs (the official ``exir.verification`` path)."""
