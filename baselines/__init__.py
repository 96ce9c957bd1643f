"""Baseline unlearning methods, each an ordinary r2f-bench plugin."""
