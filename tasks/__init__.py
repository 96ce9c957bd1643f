"""Benchmarks for r2f-bench, each an ordinary plugin with its lm-eval task YAMLs beside it."""
