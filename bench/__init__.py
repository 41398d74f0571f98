"""Benchmarks: attograd next to NumPy and PyTorch. Run with `python -m bench` (see bench/run.py)."""
