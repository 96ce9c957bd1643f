"""The R2F gradient decoder: LoRA gradients of a layer → that layer's full gradient.

The paper trains "a decoder f_φ on a proxy model with MSE" and says nothing of its
form. A network from LoRA-gradient space to full-gradient space cannot transfer to
a target of another width, so (following our measurements, summarised in
docs/r2f.md) the decoder is a closed-form reconstruction applied to the *target's
own* LoRA factors and gradients, with a few scalars per layer role fitted on the
proxy:

``two_sided`` (default; uses ∇A, ∇B, A, B + proxy-fitted scalars)
    Ĝ = α · ∇B · inv_ρ(Bᵀ∇B) · ∇A / s, a two-sided sketch (generalised Nyström)
    reconstruction; exact when rank(G) ≤ r. inv_ρ is a Tikhonov-regularised inverse
    of the r × r core with λ = ρ · σ_max.
``projection`` (the paper-faithful floor; uses ∇B and A only)
    Ĝ = α · ∇B (AAᵀ)⁻¹ A / s, the back-projection of the right sketch.

Fitted parameters: ρ (two_sided) and α per role (attn_in, attn_out, mlp_in, mlp_out),
chosen on the proxy to minimise the relative squared reconstruction error
E‖Ĝ − G‖² / ‖G‖² (the paper's MSE objective on normalised pairs). Because they are
dimensionless scalars applied to the target's own sketches, they transfer across
width and depth; across families they are matched by role.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from .. import __version__
from ..atomic import atomic_path
from ..errors import UserError
from ..lora import LoraGrad, role_of
from ..lowrank import LowRank

KINDS = ("two_sided", "projection")
USES = {
    "two_sided": "LoRA gradients (both factors) + proxy-fitted scalars",
    "projection": "LoRA gradients (B factor only) + proxy-fitted scalars",
}
RHO_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.2, 0.3, 0.5, 1.0)


def factors(g: LoraGrad, kind: str, rho: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The unscaled reconstruction of one layer's full gradient as two thin factors,
    ``Ĝ = left @ right`` (d_out × r, r × d_in); only the r × r (or r × d_in) solve runs
    in float64."""
    if kind == "projection":
        A = g.A.double()
        return g.gB / g.scale, torch.linalg.solve(A @ A.T, A).to(g.gB.dtype)
    core = g.B.double().T @ g.gB.double()  # r × r, = s · Bᵀ G Aᵀ
    lam = rho * torch.linalg.matrix_norm(core, ord=2)
    eye = torch.eye(core.shape[0], dtype=core.dtype, device=core.device)
    inv = torch.linalg.solve(core.T @ core + lam ** 2 * eye, core.T)
    return (g.gB @ inv.to(g.gB.dtype)).div_(g.scale), g.gA


def reconstruct(g: LoraGrad, kind: str, rho: float) -> torch.Tensor:
    """The unscaled reconstruction of one layer's full gradient (d_out × d_in), formed."""
    left, right = factors(g, kind, rho)
    return left @ right


@dataclass
class GradientDecoder:
    """Per-role scalars plus what they were fitted on."""

    kind: str
    rank: int
    roles: dict[str, dict[str, float]]  # role -> {"rho": .., "alpha": ..}
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def uses(self) -> str:
        return USES[self.kind]

    def decode(self, layer: str, g: LoraGrad) -> LowRank:
        """The decoded full gradient of ``layer``, as factors (never formed here)."""
        role = role_of(layer)
        if role not in self.roles:
            raise UserError(f"decoder fitted on {self.meta.get('proxy', 'its proxy')} has no parameters for layer role {role!r} ({layer}); refit with `r2f-bench decoder fit` on matching target modules.")
        p = self.roles[role]
        left, right = factors(g, self.kind, p["rho"])
        return LowRank(left * p["alpha"], right, g.transposed)

    def check_fits(self, rank: int, layers: Sequence[str]) -> None:
        """One-line error if this decoder cannot serve LoRA of ``rank`` on ``layers``."""
        if rank != self.rank:
            raise UserError(f"decoder was fitted for LoRA rank {self.rank} but the target uses rank {rank}; refit it (`r2f-bench decoder fit --set rank={rank}`) or set rank={self.rank}.")
        missing = sorted({role_of(n) for n in layers} - set(self.roles))
        if missing:
            raise UserError(f"decoder fitted on {self.meta.get('proxy', '?')} lacks layer roles {', '.join(missing)} of the target; refit it on a proxy with the same target modules.")

    # -- persistence (safetensors: tensors plus string metadata, no pickle) ---
    def save(self, path: Path) -> None:
        from safetensors.torch import save_file

        roles = sorted(self.roles)
        tensors = {"rho": torch.tensor([self.roles[r]["rho"] for r in roles]),
                   "alpha": torch.tensor([self.roles[r]["alpha"] for r in roles])}
        meta = {**self.meta, "kind": self.kind, "rank": str(self.rank), "roles": json.dumps(roles),
                "r2f_bench_version": __version__}
        with atomic_path(Path(path)) as tmp:
            save_file(tensors, str(tmp), metadata=meta)

    @classmethod
    def load(cls, path: Path) -> "GradientDecoder":
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise UserError(f"decoder file {path} not found; fit one with `r2f-bench decoder fit`.")
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = dict(f.metadata() or {})
                rho, alpha = f.get_tensor("rho"), f.get_tensor("alpha")
            roles = json.loads(meta.pop("roles"))
            kind, rank = meta.pop("kind"), int(meta.pop("rank"))
        except Exception as exc:  # any corrupt or foreign file
            raise UserError(f"{path} is not an r2f-bench decoder ({type(exc).__name__}); refit it with `r2f-bench decoder fit`.") from None
        return cls(kind=kind, rank=rank, meta=meta,
                   roles={r: {"rho": float(rho[i]), "alpha": float(alpha[i])} for i, r in enumerate(roles)})


def fit(pairs: Sequence[dict[str, tuple[LoraGrad, torch.Tensor]]], kind: str, rank: int,
        meta: dict[str, str]) -> GradientDecoder:
    """Fit ρ and α per role on (LoRA gradient, full gradient) pairs from the proxy.

    ``pairs[i][layer] = (lora_grad, full_grad)`` for one training example. For each ρ
    the optimal α has a closed form; ρ minimises the mean relative squared error.
    """
    if kind not in KINDS:
        raise UserError(f"unknown decoder kind {kind!r}; choose one of {', '.join(KINDS)}.")
    if not pairs:
        raise UserError("no (LoRA gradient, full gradient) pairs to fit the decoder on; the proxy's fitting set is empty.")
    grid = RHO_GRID if kind == "two_sided" else (0.0,)
    # per role and rho: sums over examples of <Ĝ,G>/|G|², |Ĝ|²/|G|², count
    stats: dict[str, dict[float, list[float]]] = {}
    for example in pairs:
        for layer, (g, full) in example.items():
            t = full.double()
            tt = float((t * t).sum())
            if tt == 0.0:
                continue
            for rho in grid:
                e = reconstruct(g, kind, rho).double()
                s = stats.setdefault(role_of(layer), {}).setdefault(rho, [0.0, 0.0, 0])
                s[0] += float((e * t).sum()) / tt
                s[1] += float((e * e).sum()) / tt
                s[2] += 1
    roles = {}
    for role, by_rho in stats.items():
        best = None
        for rho, (et, ee, n) in by_rho.items():
            alpha = et / ee if ee > 0 else 0.0
            err = 1.0 - (et * et / ee) / n if ee > 0 else 1.0  # mean relative error at optimal alpha
            if best is None or err < best[0]:
                best = (err, rho, alpha)
        roles[role] = {"rho": best[1], "alpha": best[2], "fit_relative_error": best[0]}
    return GradientDecoder(kind=kind, rank=rank, meta={**meta, "fit_examples": str(len(pairs))},
                           roles={r: {"rho": v["rho"], "alpha": v["alpha"]} for r, v in roles.items()})


class CosineMeter:
    """Cosine between two gradients accumulated matrix by matrix, overall and per group."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}

    def add(self, group: str, estimate: torch.Tensor, truth: torch.Tensor) -> None:
        e, t = estimate.double().flatten(), truth.double().flatten()
        for key in (group, "overall"):
            s = self.sums.setdefault(key, [0.0, 0.0, 0.0, 0.0])
            s[0] += float(e @ t)
            s[1] += float(e @ e)
            s[2] += float(t @ t)
            s[3] += float((e - t) @ (e - t))

    def cosines(self) -> dict[str, float]:
        return {k: s[0] / max((s[1] * s[2]) ** 0.5, 1e-30) for k, s in self.sums.items()}

    def relative_errors(self) -> dict[str, float]:
        return {k: (s[3] / max(s[2], 1e-30)) ** 0.5 for k, s in self.sums.items()}
