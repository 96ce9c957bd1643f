"""lm-eval helpers for the WaterDrum YAMLs beside this file."""

from r2f_bench.engine.lmeval import load_probe_dataset as load_probes  # noqa: F401
from r2f_bench.engine.lmeval import process_generation as process_results  # noqa: F401
