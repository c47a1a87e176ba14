"""The ``pyexecutorch`` command line: export, run, inspect, bench, profile, demo."""
