"""``r2f-bench decoder fit`` and ``r2f-bench decoder eval``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub) -> None:
    from r2f_plugin.cli import add_run_options

    dec = sub.add_parser("decoder", help="fit or evaluate R2F's gradient decoder")
    dsub = dec.add_subparsers(dest="decoder_command", required=True)
    fit = dsub.add_parser("fit", help="fit the decoder on the proxy and save it (safetensors)")
    add_run_options(fit)
    fit.add_argument("--task", default="rwku")
    fit.add_argument("--out", help="where to write the decoder (default: the cache)")
    fit.set_defaults(func=cmd_fit)
    ev = dsub.add_parser("eval", help="cosine and relative error of decoded vs exact gradients on held-out facts")
    add_run_options(ev)
    ev.add_argument("--task", default="rwku")
    ev.add_argument("--decoder", help="a fitted decoder file (default: fit on --proxy)")
    ev.add_argument("--compare", default="projection,proxy,target",
                    help="rows to report: projection (plain back-projection), proxy (proxy-fitted), target (fitted on the target itself)")
    ev.add_argument("--facts", type=int, default=30, help="held-out facts to evaluate on")
    ev.set_defaults(func=cmd_eval)


def _run(args, method_params: dict[str, str] | None = None):
    from r2f_plugin.cli import run_config
    from r2f_plugin.runner import Run

    config = run_config(args, "r2f", args.task)
    config.params = {**config.params, **(method_params or {})}
    return Run(config, progress=lambda m: print(m, file=sys.stderr, flush=True))


def cmd_fit(args: argparse.Namespace) -> None:
    run = _run(args)
    decoder = run.method.decoder
    if args.out:
        decoder.save(Path(args.out))
        print(f"decoder written to {args.out}")
    print(json.dumps({"kind": decoder.kind, "rank": decoder.rank, "roles": decoder.roles, "meta": decoder.meta}, indent=2))


def cmd_eval(args: argparse.Namespace) -> None:
    """Decoded-vs-exact gradient quality on held-out facts (the evaluation targets' requests)."""
    from r2f_plugin.decoder import GradientDecoder, fit
    from r2f_plugin.r2f import decoder_cosines, fit_decoder

    run = _run(args, {"decoder_path": args.decoder} if args.decoder else None)
    p = run.method.params
    facts = [f for t in run.targets for f in t.request][: args.facts]
    views = run.ctx.make_views(facts)
    per_fact = [list(col) for col in zip(*views)]
    rows = {}
    candidates = {"proxy": run.method.decoder}
    if "projection" in args.compare:
        candidates["projection"] = GradientDecoder(kind="projection", rank=p.rank, meta={"proxy": "none"},
                                                   roles={r: {"rho": 0.0, "alpha": 1.0} for r in run.method.decoder.roles})
    if "target" in args.compare:
        dev = run.bench.retain_pool()
        candidates["target"] = fit_decoder(run.model, run.tokenizer, run.ctx.make_views(dev), p.rank, p.decoder,
                                           p.aggregate, p.loss, run.config.seed, {"proxy": run.model_label},
                                           run.progress)
    for label, decoder in candidates.items():
        for n_views in sorted({1, len(views)}):
            cos, rel = [], []
            for fact_views in per_fact:
                meter = decoder_cosines(decoder, run.model, run.tokenizer, [[v] for v in fact_views[:n_views]],
                                        p.rank, p.aggregate, p.loss, run.config.seed)
                cos.append(meter.cosines())
                rel.append(meter.relative_errors())
            keys = cos[0].keys()
            rows[f"{label} ({n_views} view{'s' if n_views > 1 else ''})"] = {
                "cosine": {k: sum(c[k] for c in cos) / len(cos) for k in keys},
                "relative_error": {k: sum(r[k] for r in rel) / len(rel) for k in keys}}
    print(f"decoder eval: target {run.model_label}, proxy {run.ctx.proxy_id}, rank {p.rank}, "
          f"aggregate {p.aggregate}, {len(per_fact)} held-out facts")
    roles = sorted(next(iter(rows.values()))["cosine"])
    print(f"{'decoder':<28}" + "".join(f"{r:>10}" for r in roles) + f"{'rel.err':>10}")
    for label, row in rows.items():
        print(f"{label:<28}" + "".join(f"{row['cosine'][r]:>10.3f}" for r in roles)
              + f"{row['relative_error']['overall']:>10.3f}")
