"""View copies, joins and splits, copies and conversions, tensor creation, and their fast paths (fast.py)."""
