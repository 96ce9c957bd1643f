"""Per-deletion wall time and peak memory of every method at two model sizes, in one
run, as ratios against FullGrad (the paper's Table 5, on this machine).

    python benchmarks/cost.py                       # embedded size and a ~25x larger one
    python benchmarks/cost.py --sizes embedded:mistral-h256-l4 --methods r2f,fullgrad,lora_multi

Each size is built from config with a fixed seed and *not* taught: what a deletion
costs does not depend on what the model knows. The deletion request is the first
target of RWKU's bundled sample with 5 template views, the same for every method;
one-time set-up (R2F's decoder fit on a proxy built the same way, ECO's threshold
and noise search) is excluded, as in the runner. Each method runs ``--repeats``
times on a fresh copy of the model; the table reports the median seconds and the
median peak memory above the level at entry (CUDA: ``max_memory_allocated``; CPU:
glibc's malloc counters, see :mod:`r2f_bench.cost`).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from r2f_bench.data import ForgetRequest
from r2f_bench.cost import measure
from r2f_bench.models import EmbeddedSpec, build_model, build_tokenizer, teaching_texts
from r2f_bench.plugins import registry
from r2f_bench.tasks.rwku import RWKU
from r2f_bench.unlearner import Context, Proxy
from r2f_bench.views import Paraphraser, build_views

DEFAULT_SIZES = "embedded:mistral-h128-l4,embedded:mistral-h512-l8"
PROXY = "embedded:mistral-h64-l2"
REFERENCE = "fullgrad"


def measure_method(name: str, model: torch.nn.Module, request: ForgetRequest, ctx: Context,
                   repeats: int) -> tuple[float, float]:
    """Median (seconds, peak MB) of ``repeats`` deletions, each on a fresh copy."""
    cls = registry().method(name)
    method = cls(cls.parse_params())
    method.setup(model, ctx)
    seconds, peaks = [], []
    for _ in range(repeats):
        fresh = copy.deepcopy(model)
        with measure(next(model.parameters()).device) as cost:
            method.unlearn(fresh, request, ctx)
        seconds.append(cost.seconds)
        peaks.append(cost.peak_mem_mb)
        del fresh
    return statistics.median(seconds), statistics.median(peaks)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="embedded model specs, comma-separated")
    parser.add_argument("--methods", default="all", help="methods, comma-separated, or all")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads, the same for every method (default 1: stable timings on a shared machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    task = RWKU()
    bench = task.load(None, None, 1, n_dev=2)
    tok = build_tokenizer(teaching_texts(bench.teaching_set(), bench.general_prompts))
    views = lambda facts: build_views(facts, 5, Paraphraser())
    target = bench.targets[0]
    request = ForgetRequest(target=target.id, views=views(target.request), retain=bench.retain_pool())
    names = [i.name for i in registry().listing("method")] if args.methods == "all" else args.methods.split(",")
    names = [REFERENCE] + [n for n in names if n != REFERENCE]
    proxy = build_model(EmbeddedSpec.parse(PROXY), tok).to(args.device)

    print(f"deletion: {target.id}, {len(request.facts)} facts x {len(request.views)} views; device {args.device}; "
          f"median of {args.repeats}; models built from config, untaught")
    for spec in args.sizes.split(","):
        torch.manual_seed(0)
        model = build_model(EmbeddedSpec.parse(spec), tok).to(args.device).eval()
        n = sum(p.numel() for p in model.parameters())
        with tempfile.TemporaryDirectory() as cache:
            ctx = Context(tokenizer=tok, dev_targets=bench.dev_targets, retain_pool=bench.retain_pool(), seed=0,
                          cache_dir=Path(cache), make_views=views,
                          probe_roles=task.roles_of(bench, bench.dev_targets),
                          proxy=Proxy(PROXY, PROXY, lambda: (proxy, tok)), progress=lambda m: None)
            rows = {name: measure_method(name, model, request, ctx, args.repeats) for name in names}
        ref_s, ref_mb = rows[REFERENCE]
        print(f"\n{spec}: {n / 1e6:.1f}M parameters ({4 * n / 2**20:.0f} MB of float32 weights)")
        print(f"{'method':<14}{'seconds':>10}{'peak MB':>10}{'time / FullGrad':>17}{'memory / FullGrad':>19}")
        for name, (s, mb) in rows.items():
            print(f"{name:<14}{s:>10.3f}{mb:>10.1f}{s / ref_s:>17.2f}{mb / max(ref_mb, 1e-9):>19.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
