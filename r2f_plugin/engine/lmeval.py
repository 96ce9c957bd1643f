"""lm-eval glue: the dataset loader and scorer the task YAMLs call, and the
in-process evaluation of a model on probe sets.

A probe set reaches lm-eval in one of two ways, both through the YAML's
``custom_dataset`` hook (:func:`load_probe_dataset`):

* in a run, :func:`evaluate_probes` writes the probes of one target to a JSONL file
  and passes its path as ``probes_file`` metadata;
* from the ``lm_eval`` command line, ``--metadata '{"data_dir": ..., "targets": [...]}'``
  makes the task's own loader read the official layout.
"""

from __future__ import annotations

import inspect
import json
import logging
import statistics
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import torch

from ..atomic import atomic_write_text
from ..data import Probe
from .metrics import ANSWERED_RECALL, rouge_l_recall
from ..plugins import registry
from ..progress import bar, quiet
from ..task import ANSWERED, METRIC_KEYS, SCORE

REPLY = "reply"  # the row field every generation YAML's gen_prefix reads: an attack's opening of the answer


def load_probe_dataset(task: str, probe_set: str, probes_file: str | None = None,
                       data_dir: str | None = None, targets: list[str] | str | None = None,
                       limit: int | None = None, **_: Any):
    """``custom_dataset`` for every r2f-bench YAML: a DatasetDict with a ``test`` split."""
    import datasets

    if probes_file is not None:
        rows = [json.loads(line) for line in Path(probes_file).read_text().splitlines() if line.strip()]
        rows = [r for r in rows if r["set"] == probe_set]
    else:
        if isinstance(targets, str):
            targets = [t for t in targets.split(",") if t]
        task_obj = registry().task(task)()
        bench = task_obj.load(task_obj.locate(data_dir), targets, limit, n_dev=0)
        probes = bench.utility if probe_set == bench_utility_set(task) else \
            [p for t in bench.targets for p in t.probes.get(probe_set, [])]
        rows = [p.to_row() for p in probes]
        if not rows:  # lm-eval cannot evaluate an empty task; say which and why
            raise ValueError(f"{task}_{probe_set}: the targets {[t.id for t in bench.targets]} have no {probe_set!r} "
                             f"probes; choose targets that do (e.g. one per WMDP domain) or leave this task out.")
    for i, r in enumerate(rows):
        r["doc_id"] = i
        r.setdefault("choices", [])
        r.setdefault("label", -1)
        r.setdefault(REPLY, "")
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def bench_utility_set(task: str) -> str:
    return registry().task(task).utility_set


def process_generation(doc: dict, results: list[str]) -> dict[str, float]:
    """Score one greedy answer: ROUGE-L recall of the reference, and whether it counts as answered."""
    recall = rouge_l_recall(doc["answer"], results[0])
    return {SCORE: recall, ANSWERED: float(recall >= ANSWERED_RECALL)}


def token_batches(lengths: list[int], most: int) -> list[list[int]]:
    """Indices of requests whose prompts are ``lengths`` tokens long, longest first (lm-eval's
    order), in batches of at most ``most`` requests that also hold at most as many padded
    prompt tokens (requests × the batch's longest prompt) as ``most`` prompts of the median
    length; a prompt longer than that goes alone.

    lm-eval batches a fixed number of requests, each padded to the batch's longest prompt, so
    a few long prompts among short ones pad a whole batch to their length (on an RWKU target
    asked of SmolLM2, a quarter of the prompt tokens were padding). Batches sized by tokens
    keep every batch near the cost of a typical one."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    budget = most * statistics.median(lengths) if lengths else 0
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < most and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


MIN_HEADER = 8  # tokens every prompt of a batch must share before their states are computed once


def shared_header(context: torch.Tensor, mask: torch.Tensor) -> int:
    """How many leading tokens every left-padded row of ``context`` shares (its real tokens:
    ``mask`` 1), leaving each row at least one token of its own; 0 when fewer than
    :data:`MIN_HEADER`, one row, or padding on the right."""
    lengths = mask.sum(1)
    shortest = int(lengths.min())
    if context.shape[0] < 2 or shortest <= MIN_HEADER or not bool(mask[:, -1].all()):
        return 0
    starts = context.shape[1] - lengths
    heads = torch.stack([row[int(s):int(s) + shortest - 1] for row, s in zip(context, starts)])
    n = int((heads == heads[:1]).all(0).long().cumprod(0).sum())
    return n if n >= MIN_HEADER else 0


def header_first(context: torch.Tensor, mask: torch.Tensor, header: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``context`` and ``mask`` with each row's padding moved from before its first ``header``
    real tokens to after them: the shared header at the same columns in every row, each
    token at the same position (positions count the mask) and the same length."""
    width = context.shape[1]
    order = []
    for pad in (width - mask.sum(1)).tolist():
        order.append(list(range(pad, pad + header)) + list(range(pad)) + list(range(pad + header, width)))
    index = torch.tensor(order, device=context.device)
    return context.gather(1, index), mask.gather(1, index)


@lru_cache(maxsize=1)
def quiet_hflm() -> type:
    """lm-eval's ``HFLM``, its request bars following ``--quiet`` (:mod:`r2f_bench.progress`),
    its generation batched by tokens (:func:`token_batches`)."""
    from lm_eval.models.huggingface import HFLM

    class QuietHFLM(HFLM):
        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return super().loglikelihood(requests, disable_tqdm=quiet())

        def generate_until(self, requests, disable_tqdm: bool = False):
            """lm-eval's own generation, one call per token-sized batch (its batch size set to
            the batch's requests for the call); the answers in the requests' order."""
            most = self.batch_size_per_gpu
            if not isinstance(most, int) or len(requests) <= 1:  # "auto": lm-eval sizes its own batches
                return super().generate_until(requests, disable_tqdm=quiet())
            answers: list[str] = [""] * len(requests)
            with bar(desc="generating", total=len(requests), unit="request") as progress:
                try:
                    for batch in token_batches([len(self.tok_encode(r.args[0])) for r in requests], most):
                        self.batch_size_per_gpu = len(batch)
                        generated = super().generate_until([requests[i] for i in batch], True)
                        for i, answer in zip(batch, generated, strict=True):
                            answers[i] = answer
                        progress.update(len(batch))
                finally:
                    self.batch_size_per_gpu = most
            return answers

        def _model_generate(self, context, max_length, stop, **generation_kwargs):
            """lm-eval's generation, with the tokens every prompt of the batch opens with (a chat
            template's system prompt and turn opening) computed once: their cached states,
            repeated over the batch, stand for them in every row."""
            mask = generation_kwargs.get("attention_mask")
            header = 0 if mask is None or self.backend != "causal" else shared_header(context, mask)
            if not header:
                return super()._model_generate(context, max_length, stop, **generation_kwargs)
            context, generation_kwargs["attention_mask"] = header_first(context, mask, header)
            base = getattr(self.model, "get_base_model", lambda: self.model)()  # a PEFT wrapper's model
            name = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
            precision = getattr(self, "mixed_precision_dtype", None)
            with torch.no_grad(), torch.autocast(self.device.type, dtype=precision, enabled=precision is not None):
                cache = getattr(self.model(input_ids=context[:1, :header], use_cache=True), name)
            cache.batch_repeat_interleave(context.shape[0])
            return super()._model_generate(context, max_length, stop, **generation_kwargs, **{name: cache})

    return QuietHFLM


@contextmanager
def unstamped() -> Iterator[None]:
    """Within the block, lm-eval's ``simple_evaluate`` skips its provenance stamps: no git
    hash (``None``) and no environment report.

    ``simple_evaluate`` always stamps its results with the working directory's hash from
    ``git describe`` (which prints "fatal: not a git repository" outside a checkout) and
    with torch's environment report, which runs ``pip list`` and other commands in
    subprocesses: about 0.5 s of every evaluation, a quarter of one at the demo's size,
    repeated for every model a run scores. For an in-memory model neither means anything
    (a record carries its own provenance). lm-eval (0.4) has no option to skip them, and
    its lower-level ``evaluate`` (which does) would mean repeating ``simple_evaluate``'s
    seeding and task set-up, so the two names ``simple_evaluate`` calls are replaced for
    the block and restored after it.
    """
    import lm_eval.evaluator as evaluator

    saved = evaluator.get_git_commit_hash, evaluator.add_env_info
    evaluator.get_git_commit_hash, evaluator.add_env_info = (lambda: None), (lambda results: None)
    try:
        yield
    finally:
        evaluator.get_git_commit_hash, evaluator.add_env_info = saved


def evaluate_probes(model: torch.nn.Module, tokenizer: Any, task: Any, probes: dict[str, list[Probe]],
                    workdir: Path, batch_size: int = 32, chat_template: bool = False,
                    sampling: tuple[int, float, int] | None = None,
                    reply: str = "") -> dict[str, list[dict[str, float]]]:
    """Evaluate ``model`` on each probe set through lm-eval; per-probe metric dicts, in probe order.
    ``chat_template``: each prompt goes through the tokenizer's chat template as a user turn
    (lm-eval's ``apply_chat_template``), as an instruct model is asked. ``sampling`` (k,
    temperature, seed): k sampled answers per generation probe in place of the greedy one,
    each metric its best over the k (a probe is answered when any sample answers it;
    multiple-choice sets are scored by likelihood, which sampling does not change). ``reply``:
    the opening every generated answer starts from (lm-eval's ``gen_prefix``: after the
    prompt, or opening the assistant's turn of the chat template; empty: none)."""
    if sampling is not None and sampling[0] > 1:  # k draws of one sample each, with seeds of their own
        k, temperature, seed = sampling
        draws = [evaluate_probes(model, tokenizer, task, probes, workdir, batch_size, chat_template,
                                 (1, temperature, seed + i), reply=reply) for i in range(k)]
        return {s: [{m: max(d[s][i][m] for d in draws) for m in rows[i]} for i in range(len(rows))]
                for s, rows in draws[0].items()}
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    probes = {s: ps for s, ps in probes.items() if ps}
    path = workdir / "probes.jsonl"
    rows = ({**p.to_row(), REPLY: reply} for ps in probes.values() for p in ps)
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    names = {task.lm_eval_name(s): s for s in probes}
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its in-memory-model notices are expected here
    manager = TaskManager(include_path=str(task.yaml_dir()), include_defaults=False,
                          metadata={"probes_file": str(path)})
    lm = quiet_hflm()(pretrained=model, tokenizer=tokenizer, batch_size=batch_size,
                      device=str(next(model.parameters()).device))
    was_training = model.training
    drawn = {} if sampling is None else {"gen_kwargs": f"do_sample=True,temperature={sampling[1]}",
                                          "random_seed": sampling[2], "torch_random_seed": sampling[2]}
    with unstamped():
        out = simple_evaluate(lm, tasks=list(names), task_manager=manager, log_samples=True,
                              bootstrap_iters=0, verbosity="ERROR", apply_chat_template=chat_template, **drawn)
    model.train(was_training)
    scores: dict[str, list[dict[str, float]]] = {}
    for name, set_name in names.items():
        samples = sorted(out["samples"][name], key=lambda s: s["doc_id"])
        scores[set_name] = [{k: float(s[k]) for k in METRIC_KEYS if k in s}
                            for s in samples]
    return scores
