"""A model's state on disk, to put it back bit-exactly without a second copy in memory.

A run (:class:`r2f_bench.engine.run.Run`) edits one model in place, target after
target: before the first deletion it writes the weights (and the non-persistent buffers,
such as rotary frequencies) to a safetensors file, tensor by tensor (never more than one
tensor's bytes in memory at once), and after each target it copies them back from the
memory-mapped file, in their own dtype if a method cast the model. Besides the weights a
snapshot puts back what a method may change around them: forward hooks it registered
(ECO's input corruption), parameters' ``requires_grad`` flags and the train/eval mode;
it leaves no gradient behind (RAP's attack ends with one on every parameter, and a
method that accumulates into ``.grad`` would add it to its own).
transformers installs hooks of its own, lazily, the first time a forward asks for hidden
states, and marks the model so it never installs them again: a restore that removes
those hooks clears that mark too, or every later forward would return no hidden states.
A method that leaves the module tree changed (an adapter still attached) cannot be
undone this way and fails loudly.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import torch
from safetensors import safe_open

from ..atomic import as_user_error
from ..errors import UserError

# safetensors' dtype names
_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL"}
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
# tables keyed by the same hook ids, which a hook's removal clears too
_HOOK_EXTRAS = ("_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs")
# transformers' mark on a model whose output-capturing hooks (``output_hidden_states``) are installed
_CAPTURE_MARK = "_output_capturing_hooks_installed"


def _captures(hook: object) -> bool:
    """Whether ``hook`` is one of transformers' own output-capturing hooks (see the module's docstring)."""
    return getattr(hook, "__module__", "") == "transformers.utils.output_capturing"


def _storage_key(t: torch.Tensor) -> tuple:
    """What makes two state-dict entries one tensor (tied weights)."""
    return (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())


def _tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor the model computes with: its state dict and its non-persistent buffers
    (rotary frequencies, which a method can change as well as any weight)."""
    out = dict(model.state_dict())
    out.update({name: b for name, b in model.named_buffers() if name not in out})
    return out


def _distinct(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors (:func:`_tensors`), one name per tensor (a tied weight under its first name)."""
    seen: set[tuple] = set()
    out = {}
    for name, t in _tensors(model).items():
        key = _storage_key(t)
        if key not in seen:
            seen.add(key)
            out[name] = t
    return out


def _owner(model: torch.nn.Module, name: str) -> torch.Tensor:
    """The parameter or buffer ``name`` itself (a state-dict entry is a detached alias)."""
    try:
        return model.get_parameter(name)
    except AttributeError:
        return model.get_buffer(name)


def write_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write ``tensors`` as one safetensors file, streaming (one tensor in host memory at a
    time) and atomically (a partial file never takes ``path``'s name)."""
    header, offset = {}, 0
    for name, t in tensors.items():
        if t.dtype not in _DTYPES:
            raise UserError(f"cannot snapshot tensor {name!r} of dtype {t.dtype}; supported: "
                            f"{', '.join(map(str, _DTYPES))}.")
        size = t.numel() * t.element_size()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    partial = path.with_name(path.name + ".partial")
    try:
        with open(partial, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for t in tensors.values():
                host = t.detach().to("cpu").contiguous().reshape(-1)
                if host.numel():
                    f.write(memoryview(host.view(torch.uint8).numpy()))
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except OSError as exc:  # a full disk: the documented line, and no partial file left behind
        partial.unlink(missing_ok=True)
        raise as_user_error(exc, path) from None


class Snapshot:
    """The weights, hooks, ``requires_grad`` flags and mode of ``model`` as they are now,
    kept in ``path`` (a safetensors file) until :meth:`restore` puts them back."""

    def __init__(self, model: torch.nn.Module, path: Path) -> None:
        self.path = Path(path)
        tensors = _distinct(model)
        self.names = list(tensors)
        self.state_names = set(model.state_dict())
        self.modules = [name for name, _ in model.named_modules()]
        self.hooks = {name: {h: set(getattr(m, h)) for h in _HOOKS} for name, m in model.named_modules()}
        self.capturing = {name for name, m in model.named_modules() if m.__dict__.get(_CAPTURE_MARK)}
        self.requires_grad = {name: p.requires_grad for name, p in model.named_parameters()}
        self.training = {name: m.training for name, m in model.named_modules()}
        write_safetensors(tensors, self.path)

    def changes(self, model: torch.nn.Module) -> str | None:
        """How ``model``'s structure differs from the snapshot's (``None``: it does not)."""
        modules = [name for name, _ in model.named_modules()]
        if modules != self.modules:
            added = sorted(set(modules) - set(self.modules))[:3]
            gone = sorted(set(self.modules) - set(modules))[:3]
            return f"its modules changed (added {added or 'none'}, removed {gone or 'none'})"
        if set(model.state_dict()) != self.state_names:
            return "its state-dict entries changed"
        return None

    @torch.no_grad()
    def changed_share(self, model: torch.nn.Module) -> float | None:
        """% of ``model``'s parameter elements that differ from the snapshot's, read one tensor
        at a time (``None``: its structure changed, so there is nothing to compare with)."""
        if self.changes(model) is not None:
            return None
        changed = total = 0
        with safe_open(str(self.path), framework="pt", device="cpu") as f:
            for name, p in model.named_parameters():
                if name in self.names:
                    saved = f.get_tensor(name)
                    total += p.numel()
                    same_kind = saved.shape == p.shape and saved.dtype == p.dtype
                    changed += int((p.detach().cpu() != saved).sum()) if same_kind else p.numel()
        return 100.0 * changed / max(total, 1)

    @torch.no_grad()
    def beyond_parameters(self, model: torch.nn.Module) -> str | None:
        """What ``model`` changed since the snapshot besides its parameters: a hook registered or
        a floating-point buffer written (``None``: nothing; transformers' own capturing hooks,
        installed lazily by a forward that asks for hidden states, are not a change)."""
        if (why := self.changes(model)) is not None:
            return f"changed the model's structure: {why}"
        for name, m in model.named_modules():
            for h, kept in self.hooks[name].items():
                if any(k not in kept and not _captures(fn) for k, fn in getattr(m, h).items()):
                    return f"registered a hook on module {name or '(the model)'!r}"
        parameters = {name for name, _ in model.named_parameters()}
        with safe_open(str(self.path), framework="pt", device="cpu") as f:
            for name, t in _tensors(model).items():
                if name in self.names and name not in parameters and t.is_floating_point():
                    saved = f.get_tensor(name)
                    if saved.shape != t.shape or not torch.equal(t.detach().cpu().to(saved.dtype), saved):
                        return f"wrote the buffer {name!r}"
        return None

    @torch.no_grad()
    def randomize_step(self, model: torch.nn.Module, seed: int) -> None:
        """Replace the step from the snapshot to ``model`` by a random direction of the same
        norm, parameter by parameter, in place (``--control random_step``)."""
        from .controls import same_norm_noise

        gen = torch.Generator().manual_seed(seed)
        with safe_open(str(self.path), framework="pt", device="cpu") as f:
            for name, p in model.named_parameters():
                if name in self.names:
                    saved = f.get_tensor(name)
                    if (noise := same_norm_noise(p.detach().cpu().float() - saved.float(), gen)) is not None:
                        p.copy_((saved.float() + noise).to(p))

    @torch.no_grad()
    def restore(self, model: torch.nn.Module) -> None:
        """Put the snapshot's state back into ``model``, in place and bit-exactly."""
        why = self.changes(model)
        if why is not None:
            raise ValueError(why)
        state = _tensors(model)
        with safe_open(str(self.path), framework="pt", device="cpu") as f:
            for name in self.names:
                saved = f.get_tensor(name)
                if state[name].dtype == saved.dtype:
                    state[name].copy_(saved)
                else:  # the method cast the model (to bfloat16, say): the saved tensor back, dtype and all
                    owner = _owner(model, name)
                    owner.data = saved.to(owner.device)
        for name, m in model.named_modules():
            for h, kept in self.hooks[name].items():
                table = getattr(m, h)
                for handle in [k for k in table if k not in kept]:
                    del table[handle]
                    for extra in _HOOK_EXTRAS:
                        getattr(m, extra, {}).pop(handle, None)
            if name not in self.capturing:  # its capturing hooks, if any, were just removed
                m.__dict__.pop(_CAPTURE_MARK, None)
            m.training = self.training[name]
        for name, p in model.named_parameters():
            p.grad = None
            p.requires_grad_(self.requires_grad[name])
