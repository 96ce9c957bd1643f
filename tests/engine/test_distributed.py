"""single_process_eval: lm-eval under an ``accelerate launch`` worker's environment."""

import json
import os

import pytest

from r2f_bench.engine.distributed import LAUNCH_VARIABLES, single_process_eval

WORKER_ENV = {"LOCAL_RANK": "1", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


@pytest.fixture
def worker_env(monkeypatch):
    for k, v in WORKER_ENV.items():
        monkeypatch.setenv(k, v)


def test_hides_and_restores_launch_variables(worker_env):
    with single_process_eval():
        assert not any(k in os.environ for k in LAUNCH_VARIABLES)
    assert {k: os.environ[k] for k in WORKER_ENV} == WORKER_ENV
    with pytest.raises(RuntimeError), single_process_eval():
        with single_process_eval():  # nesting is harmless
            raise RuntimeError()
    assert os.environ["LOCAL_RANK"] == "1"


def _rwku_eval(tmp_path):
    """simple_evaluate of an in-memory LM (empty answers) on two RWKU probes, as the runner does."""
    from lm_eval import simple_evaluate
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    from r2f_bench.tasks.rwku import RWKU

    class Silent(LM):  # an in-memory model: rank 0 of 1, like HFLM(pretrained=<module>)
        def generate_until(self, requests, disable_tqdm=False):
            return ["" for _ in requests]

        def loglikelihood(self, requests, disable_tqdm=False):
            return [(0.0, False) for _ in requests]

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            return [0.0 for _ in requests]

    rows = [{"prompt": "Question: Who?\nAnswer:", "answer": "Orla", "set": "forget_fb", "target": "t",
             "question": "Who?"}] * 2
    path = tmp_path / "probes.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    manager = TaskManager(include_path=str(RWKU.yaml_dir()), include_defaults=False,
                          metadata={"probes_file": str(path)})
    return simple_evaluate(Silent(), tasks=["rwku_forget_fb"], task_manager=manager, log_samples=True,
                           bootstrap_iters=0, verbosity="ERROR")


def test_lm_eval_results_survive_a_worker_environment(worker_env, tmp_path):
    assert _rwku_eval(tmp_path) is None  # lm-eval keeps results only where LOCAL_RANK == 0
    with single_process_eval():
        out = _rwku_eval(tmp_path)
    assert len(out["samples"]["rwku_forget_fb"]) == 2


@pytest.mark.slow
def test_hflm_in_memory_model_under_worker_environment(worker_env, tmp_path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from r2f_bench.engine.lmeval import evaluate_probes
    from r2f_bench.engine.embedded import build_tokenizer
    from r2f_bench.tasks.rwku import RWKU, SAMPLE_DIR

    task = RWKU()
    probes = {"forget_fb": task.load(SAMPLE_DIR, None, 1, n_dev=0).targets[0].probes["forget_fb"][:2]}
    tok = build_tokenizer([f"{p.prompt} {p.answer}" for p in probes["forget_fb"]] * 3)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=128,
                                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                       pad_token_id=tok.pad_token_id)).eval()
    with pytest.raises(TypeError):  # simple_evaluate returned None
        evaluate_probes(model, tok, task, probes, tmp_path)
    with single_process_eval():
        scores = evaluate_probes(model, tok, task, probes, tmp_path)
    assert len(scores["forget_fb"]) == 2
