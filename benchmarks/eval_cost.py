"""What one target's evaluation costs on a real LM, phase by phase, beside this machine's
compute floor (measure first; issue: evaluation that keeps up with a real model).

    python benchmarks/eval_cost.py --model SmolLM2-135M-Instruct.Q4_1.gguf --data-dir ../shared/data/rwku
    python benchmarks/eval_cost.py --json                 # SmolLM2-135M's shape, random weights

A run of the harness evaluates a target's model several times: the untouched model on
every probe set (cached afterwards), identity alignment's reference and its comparison,
the edited model, and RAP's relearning attack and control. Each phase here runs once, as
the run runs it (:class:`~r2f_bench.engine.evaluate.Evaluator`), with an empty cache, and
reports wall seconds, requests, the tokens the model's forward passes processed (padding
included) and the peak resident memory; then the identity alignment measured and the size of
its reference on disk.

The floor: a token through a causal LM costs about 2 FLOPs per parameter, so a phase's
tokens × 2 × parameters at this machine's float32 GEMM rate (a ``torch.matmul`` of the
model's own MLP shape, timed in the same process on the same threads) is the least time
the phase could take; ``x floor`` is the measured time over it. Without ``--model`` the
model is SmolLM2-135M's shape with random weights (``shaped_model.py``): it answers
nothing, so every answer runs to the length limit (the slowest case).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shaped_model import build as build_shaped  # noqa: E402  (beside this file)

from r2f_bench.cli.main import script  # noqa: E402
from r2f_bench.engine.config import RunConfig  # noqa: E402
from r2f_bench.engine.run import Run  # noqa: E402


def gemm_rate(hidden: int, intermediate: int, threads: int, seconds: float = 2.0) -> float:
    """float32 FLOP/s of a (512 tokens × hidden) @ (hidden × intermediate) matmul on ``threads``."""
    torch.set_num_threads(threads)
    a, b = torch.randn(512, hidden), torch.randn(hidden, intermediate)
    for _ in range(3):
        a @ b
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        n += 1
    return 2 * 512 * hidden * intermediate * n / (time.perf_counter() - start)


class Tokens:
    """Counts the tokens every forward pass of ``model`` processes (padding included)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.count, self.calls = 0, 0
        self.handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        embeds = kwargs.get("inputs_embeds")
        shape = ids.shape if ids is not None else embeds.shape[:2]
        self.count += int(shape[0] * shape[1])
        self.calls += 1


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def disk_mb(path: Path) -> float:
    """MB a cache entry takes on disk (a file, or a folder's files)."""
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return sum(f.stat().st_size for f in files) / 2**20


def phase(name: str, tokens: Tokens, flops_per_token: float, rate: float, requests: int,
          work: Callable[[], Any]) -> dict[str, Any]:
    """Run ``work`` once: its seconds, forward passes, tokens and ratio to the floor."""
    count, calls, start = tokens.count, tokens.calls, time.perf_counter()
    work()
    seconds = time.perf_counter() - start
    processed = tokens.count - count
    floor = processed * flops_per_token / rate
    row = {"phase": name, "seconds": seconds, "requests": requests, "forward_calls": tokens.calls - calls,
           "tokens": processed, "floor_seconds": floor, "x_floor": seconds / floor if floor else None,
           "peak_rss_mb": peak_rss_mb()}
    print(f"  {name:<22} {seconds:8.1f} s  {requests:5d} requests  {processed:9d} tokens  "
          f"floor {floor:7.1f} s  x{row['x_floor'] or 0:6.1f}  peak RSS {row['peak_rss_mb']:7.0f} MB",
          file=sys.stderr, flush=True)
    return row


def shaped_folder(tmp: Path) -> str:
    """SmolLM2-135M's shape with random weights, saved with the world's tokenizer."""
    from r2f_bench.engine.embedded import build_tokenizer, teaching_texts
    from r2f_bench.tasks.rwku import RWKU

    bench = RWKU().load(None, None, None, n_dev=2)
    tok = build_tokenizer(teaching_texts(bench.teaching_set(), bench.general_prompts) + list(bench.world.texts))
    model = build_shaped("smollm2-135m", tok, torch.float32)
    model.config.vocab_size = len(tok)  # ids past the tokenizer's vocabulary cannot be decoded
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(tmp / "model")
    tok.save_pretrained(tmp / "model")
    return str(tmp / "model")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a GGUF file, model folder or hub name (default: SmolLM2-135M's shape, random)")
    parser.add_argument("--data-dir", help="RWKU in its official layout (default: the knowledge world)")
    parser.add_argument("--target", help="the target to evaluate (default: the first)")
    parser.add_argument("--method", default="fullgrad", help="the deletion between the two evaluations")
    parser.add_argument("--set", action="append", help="a parameter of the method, NAME=VALUE (default: step=1e-4, "
                                                      "a step that keeps a real LM's utility)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the phases as JSON, alone on stdout")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="r2f-eval-cost-") as tmp:
        os.environ["R2F_BENCH_CACHE"] = str(Path(tmp) / "cache")  # nothing cached: every phase is computed
        model = args.model or shaped_folder(Path(tmp))
        config = RunConfig(method=args.method, task="rwku", model=model, data_dir=args.data_dir, limit=1,
                           targets=[args.target] if args.target else None, threads=args.threads,
                           output=str(Path(tmp) / "out"), params=dict(a.split("=", 1) for a in args.set or ["step=1e-4"]))
        run = Run(config, progress=lambda m: print(m, file=sys.stderr, flush=True))
        load = time.perf_counter()
        run.prepare()
        load = time.perf_counter() - load
        target, ev, m = run.targets[0], run.evaluator, run.model
        cfg = m.config
        rate = gemm_rate(cfg.hidden_size, cfg.intermediate_size, args.threads)
        params = sum(p.numel() for p in m.parameters())
        flops = 2.0 * params
        print(f"{run.model_label}: {params / 1e6:.1f}M parameters, loaded in {load:.1f} s; float32 GEMM "
              f"{rate / 1e9:.1f} GFLOP/s on {args.threads} threads; target {target.id}", file=sys.stderr)
        tokens = Tokens(m)
        sets = run.scope.probe_sets(target)
        probes = sum(len(v) for v in sets.values())
        forget = sum(len(v) for v in run.scope.probe_sets(target, forget_only=True).values())
        prompts = len(run.bench.general_prompts)
        request = run.request(target)
        planned = run.attacks.prepare(target, request)  # the run's attacks (default: RAP alone)
        score: dict[str, float] = {}
        rows = [phase("untouched evaluation", tokens, flops, rate, probes, lambda: ev.scores(m, target)),
                phase("alignment reference", tokens, flops, rate, prompts, ev.reference)]
        model = run.weights.edited()
        edit = run.method.unlearn(model, request, run.ctx)
        rows += [phase("edited evaluation", tokens, flops, rate, probes, lambda: ev.scores(edit.model, target)),
                 phase("identity alignment", tokens, flops, rate, prompts,
                       lambda: score.setdefault("identity_alignment", ev.alignment(edit.model))),
                 phase("attacks + re-test", tokens, flops, rate, forget * len(planned),
                       lambda: run.attacks.after(edit.model, target, planned))]
        run.weights.to_start()
        reference_mb = disk_mb(ev.reference().path)
    total = {k: sum(r[k] for r in rows) for k in ("seconds", "tokens", "floor_seconds")}
    result = {"model": run.model_label, "parameters": params, "gemm_gflops": rate / 1e9, "threads": args.threads,
              "target": target.id, "load_seconds": load, "phases": rows, **score, "reference_mb": reference_mb,
              "total": {**total, "x_floor": total["seconds"] / total["floor_seconds"], "peak_rss_mb": peak_rss_mb()}}
    print(f"  {'all phases':<22} {total['seconds']:8.1f} s  floor {total['floor_seconds']:.1f} s  "
          f"x{result['total']['x_floor']:.1f}; identity alignment {score['identity_alignment']:.6f}, its reference "
          f"{reference_mb:.0f} MB on disk", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
