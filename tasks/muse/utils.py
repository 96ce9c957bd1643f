"""lm-eval helpers for the MUSE YAMLs beside this file."""

from r2f_bench.engine.lmeval import load_probe_dataset as load_probes  # noqa: F401
from r2f_bench.engine.lmeval import process_generation
from r2f_bench.engine.metrics import rouge_l_f1


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """R2F's ROUGE-L recall and "answered", plus MUSE's ROUGE-L F1 of the same output."""
    return {**process_generation(doc, results), "rouge_l_f1": rouge_l_f1(doc["answer"], results[0])}
