"""The R2F gradient decoder: LoRA gradients of a layer → that layer's full gradient.

The paper trains "a decoder f_φ on a proxy model with MSE" and says nothing of its
form. A network from LoRA-gradient space to full-gradient space cannot transfer to
a model of another width, so (following our measurements, summarised in
docs/r2f.md) the decoder is a closed-form reconstruction applied to the *model's
own* LoRA factors and gradients, with a few scalars per layer role fitted on the
proxy:

``two_sided`` (default; uses ∇A, ∇B, A, B + proxy-fitted scalars)
    Ĝ = α · ∇B · inv_ρ(Bᵀ∇B) · ∇A / s, a two-sided sketch (generalised Nyström)
    reconstruction; exact when rank(G) ≤ r. inv_ρ is a Tikhonov-regularised inverse
    of the r × r core with λ = ρ · σ_max.
``projection`` (the paper-faithful floor; uses ∇B and A only)
    Ĝ = α · ∇B (AAᵀ)⁻¹ A / s, the back-projection of the right sketch.
``learned`` (the paper's decoder: a map fitted by MSE; uses ∇A, ∇B, A, B)
    Ĝ = ∇B · W_B · (AAᵀ)⁻¹A + B(BᵀB)⁻¹ · W_A · ∇A with two r × r matrices per role
    fitted on the proxy's pairs by least squares: a map linear in the LoRA gradients,
    between the back-projections of the two sketches, so its parameters do not depend
    on the layer's width (W_B = I, W_A = 0 is ``projection``). A map coordinate by
    coordinate could not be applied to a model of another width.

Fitted parameters: ρ (two_sided) and α per role (attn_in, attn_out, mlp_in, mlp_out),
or W_B and W_A per role (learned), chosen on the proxy to minimise the relative squared
reconstruction error E‖Ĝ − G‖² / ‖G‖² (the paper's MSE objective on normalised pairs).
They are applied to the model's own factors and sketches, so they carry across width
and depth; across families they are matched by role.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import torch

from .. import __version__
from ..atomic import write_safetensors
from ..errors import UserError
from ..training.lora import LoraGrad, role_of
from ..training.lowrank import LowRank

KINDS = ("two_sided", "projection", "learned")
USES = {
    "two_sided": "LoRA gradients (both factors) + proxy-fitted scalars",
    "projection": "LoRA gradients (B factor only) + proxy-fitted scalars",
    "learned": "LoRA gradients (both factors) + proxy-fitted r x r maps (MSE)",
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
    """Per-role scalars (or maps) plus what they were fitted on."""

    kind: str
    rank: int
    roles: dict[str, dict[str, float]]  # role -> {"rho": .., "alpha": ..}
    meta: dict[str, str] = field(default_factory=dict)
    maps: dict[str, torch.Tensor] = field(default_factory=dict)  # learned: role -> (W_B, W_A) stacked, 2 × r × r

    @property
    def uses(self) -> str:
        return USES[self.kind]

    def decode(self, layer: str, g: LoraGrad) -> LowRank:
        """The decoded full gradient of ``layer``, as factors (never formed here)."""
        role = role_of(layer)
        if role not in self.roles:
            raise UserError(f"decoder fitted on {self.meta.get('proxy', 'its proxy')} has no parameters for layer role {role!r} ({layer}); refit with `r2f-bench decoder fit` on matching target modules.")
        if self.kind == "learned":
            W_B, W_A = self.maps[role].to(g.gB.device, g.gB.dtype)
            P_A, Q_B = (t.to(g.gB.dtype) for t in back_projections(g))
            return LowRank(torch.cat([g.gB @ W_B, Q_B @ W_A], 1), torch.cat([P_A, g.gA], 0), g.transposed)
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
        roles = sorted(self.roles)
        tensors = {"rho": torch.tensor([self.roles[r]["rho"] for r in roles]),
                   "alpha": torch.tensor([self.roles[r]["alpha"] for r in roles]),
                   **{f"map.{r}": m.float().contiguous() for r, m in self.maps.items()}}
        meta = {**self.meta, "kind": self.kind, "rank": str(self.rank), "roles": json.dumps(roles),
                "r2f_bench_version": __version__}
        write_safetensors(Path(path), tensors, meta)

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
                maps = {k.split(".", 1)[1]: f.get_tensor(k) for k in f.keys() if k.startswith("map.")}
            roles = json.loads(meta.pop("roles"))
            kind, rank = meta.pop("kind"), int(meta.pop("rank"))
            if kind == "learned" and (set(maps) != set(roles) or any(m.shape != (2, rank, rank) for m in maps.values())):
                raise ValueError("maps do not match the roles and rank")
            if not isinstance(roles, list) or rho.shape != (len(roles),) or alpha.shape != (len(roles),):
                raise ValueError("one rho and one alpha per role")  # an IndexError later, before
            if not (torch.isfinite(rho).all() and torch.isfinite(alpha).all()):
                raise ValueError("non-finite scalars")
            scalars = {str(r): {"rho": float(rho[i]), "alpha": float(alpha[i])} for i, r in enumerate(roles)}
        except Exception as exc:  # any corrupt or foreign file
            raise UserError(f"{path} is not an r2f-bench decoder ({type(exc).__name__}); refit it with `r2f-bench decoder fit`.") from None
        return cls(kind=kind, rank=rank, meta=meta, maps=maps, roles=scalars)


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
    if kind == "learned":
        maps = fit_maps(pairs, rank)
        return GradientDecoder(kind=kind, rank=rank, meta={**meta, "fit_examples": str(len(pairs))}, maps=maps,
                               roles={r: {"rho": 0.0, "alpha": 1.0} for r in maps})
    grid = RHO_GRID if kind == "two_sided" else (0.0,)
    # per role and rho: sums over examples of <Ĝ,G>/|G|², |Ĝ|²/|G|², count
    stats: dict[str, dict[float, list[float]]] = {}
    for layer, g, t, tt in _nonzero(pairs):
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
        roles[role] = {"rho": best[1], "alpha": best[2]}
    return GradientDecoder(kind=kind, rank=rank, meta={**meta, "fit_examples": str(len(pairs))}, roles=roles)


def _nonzero(pairs: Sequence[dict[str, tuple[LoraGrad, torch.Tensor]]]) -> Iterator[tuple[str, LoraGrad, torch.Tensor, float]]:
    """(layer, LoRA gradient, full gradient in float64, its squared norm) for every pair
    whose full gradient is not zero (a zero gradient says nothing about the decoder)."""
    for example in pairs:
        for layer, (g, full) in example.items():
            G = full.double()
            tt = float((G * G).sum())
            if tt > 0.0:
                yield layer, g, G, tt


def back_projections(g: LoraGrad) -> tuple[torch.Tensor, torch.Tensor]:
    """``(AAᵀ)⁻¹A`` (r × d_in) and ``B(BᵀB)⁻¹`` (d_out × r), in float64."""
    A, B = g.A.double(), g.B.double()
    return torch.linalg.solve(A @ A.T, A), torch.linalg.solve(B.T @ B, B.T).T


def fit_maps(pairs: Sequence[dict[str, tuple[LoraGrad, torch.Tensor]]], rank: int,
             ridge: float = 1e-8) -> dict[str, torch.Tensor]:
    """Least-squares W_B, W_A per role for ``Ĝ = ∇B W_B P + Q W_A ∇A`` (P = (AAᵀ)⁻¹A,
    Q = B(BᵀB)⁻¹), minimising the mean relative squared error over the pairs.

    Ĝ is linear in θ = (vec W_B, vec W_A), so the normal equations are exact and small
    (2r² unknowns): with row-major vec, ⟨∇B E_ij P, ∇B E_kl P⟩ = (∇Bᵀ∇B)_ik (PPᵀ)_jl, a
    Kronecker product of r × r Gram matrices, likewise for the other blocks; the
    right-hand side is (∇Bᵀ G Pᵀ, Qᵀ G ∇Aᵀ). The system is scaled to a unit diagonal
    before a ``ridge`` is added.
    """
    sums: dict[str, list[torch.Tensor]] = {}
    for layer, g, G, tt in _nonzero(pairs):
        gB, gA = g.gB.double(), g.gA.double()
        P, Q = back_projections(g)
        normal = torch.cat([torch.cat([torch.kron(gB.T @ gB, P @ P.T), torch.kron(gB.T @ Q, P @ gA.T)], 1),
                            torch.cat([torch.kron(Q.T @ gB, gA @ P.T), torch.kron(Q.T @ Q, gA @ gA.T)], 1)], 0)
        rhs = torch.cat([(gB.T @ G @ P.T).flatten(), (Q.T @ G @ gA.T).flatten()])
        s = sums.setdefault(role_of(layer), [torch.zeros_like(normal), torch.zeros_like(rhs)])
        s[0] += normal / tt
        s[1] += rhs / tt
    maps = {}
    for role, (normal, rhs) in sums.items():
        d = normal.diagonal().clamp(min=1e-300).rsqrt()
        scaled = normal * d[:, None] * d[None, :] + ridge * torch.eye(len(d), dtype=normal.dtype)
        theta = d * torch.linalg.solve(scaled, d * rhs)
        maps[role] = theta.view(2, rank, rank).float()
    return maps


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
