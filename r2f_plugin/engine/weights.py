"""The run's one model and the snapshots on disk it is put back from: each target edits
the model in place (a deletion, an attack) and :meth:`Weights.at` restores it, so a run
holds one copy of the weights in memory."""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import torch

from ..errors import UserError
from .snapshot import Snapshot

UNTOUCHED, CURRENT = "untouched", "current"


class Weights:
    """``model`` and its snapshots (in a hidden folder of ``out_dir``, removed with this
    object): ``untouched``, and in sequential mode ``current`` (the last deletion's result)."""

    def __init__(self, model: torch.nn.Module, out_dir: Path, method: str) -> None:
        self.model, self._method = model, method
        folder = Path(tempfile.mkdtemp(prefix=".weights-", dir=out_dir))
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        self._snapshots = {UNTOUCHED: Snapshot(model, folder / f"{UNTOUCHED}.safetensors")}
        self._state: str | None = UNTOUCHED  # the snapshot the model equals (None: neither)

    def at(self, state: str) -> torch.nn.Module:
        """The model, put back to the snapshot ``state`` unless it is there already."""
        if self._state != state:
            try:
                self._snapshots[state].restore(self.model)
            except ValueError as exc:
                raise UserError(f"method {self._method!r} left the model's structure changed ({exc}), so its "
                                f"untouched weights cannot be put back for the next target; remove what the "
                                f"deletion attached (e.g. PEFT's unload() or merge_and_unload()).") from None
            self._state = state
        return self.model

    def _start(self) -> Snapshot:
        """The snapshot a deletion starts from: the untouched weights, or in sequential mode the last result."""
        return self._snapshots[CURRENT if CURRENT in self._snapshots else UNTOUCHED]

    def to_start(self) -> torch.nn.Module:
        """The model, put back where a deletion starts: the untouched weights, or in
        sequential mode the last deletion's result."""
        return self.at(CURRENT if CURRENT in self._snapshots else UNTOUCHED)

    def changed_share(self, result: torch.nn.Module) -> float | None:
        """% of the weights a deletion changed, against the state it started from (``None``: it
        returned another model object than the one it was given)."""
        if result is not self.model:
            return None
        return self._start().changed_share(result)

    def randomize_step(self, result: torch.nn.Module, seed: int) -> None:
        """``--control random_step``: the deletion's step, from where it started to ``result``,
        replaced by a random one of the same norm, tensor by tensor, in place."""
        if result is not self.model:
            raise UserError(f"--control random_step needs a method that edits the model it is given in place; "
                            f"method {self._method!r} returned another model object. Use --control other_request.")
        start = self._start()
        if (why := start.beyond_parameters(result)) is not None:  # a random step would keep that part of the edit
            raise UserError(f"--control random_step replaces a deletion's weight step, but method {self._method!r} also "
                            f"{why}, which a random step would keep; use --control other_request.")
        start.randomize_step(result, seed)

    def edited(self) -> torch.nn.Module:
        """The model, about to be changed in place (a deletion or an attack)."""
        self._state = None
        return self.model

    def hold(self, model: torch.nn.Module) -> Snapshot:
        """A snapshot of ``model`` as it is now (a deletion's result, before its attacks), in
        this object's folder, for :meth:`Snapshot.restore` to put back."""
        return Snapshot(model, self._snapshots[UNTOUCHED].path.parent / "held.safetensors")

    def keep(self, result: torch.nn.Module) -> None:
        """Sequential mode: snapshot a deletion's ``result`` as the state the next one starts from."""
        if result is not self.model:
            raise UserError(f"--sequential needs a method that edits the model it is given in place; method "
                            f"{self._method!r} returned another model object. Drop --sequential.")
        folder = self._snapshots[UNTOUCHED].path.parent
        self._snapshots[CURRENT] = Snapshot(self.model, folder / f"{CURRENT}.safetensors")
        self._state = CURRENT
