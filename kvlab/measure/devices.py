"""Where the tensors of a generate() call live: a log of every input the model's forward receives (`generate`
moves only what one forward consumes onto the model's device), and its distinct (shape, dtype, device) signatures,
each a separate trace for a compiler to compile."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from kvlab import _compat
from kvlab.names import dtype_name


@dataclass(frozen=True)
class ForwardInput:
    call: int  # 0 = the prefill forward, then one per decoding step
    name: str
    device: str
    dtype: str
    shape: tuple[int, ...]


class ForwardLog(list):
    @property
    def calls(self) -> int:
        return 1 + max((r.call for r in self), default=-1)

    def names(self) -> list[str]:
        return sorted({r.name for r in self})

    def of(self, name: str) -> list[ForwardInput]:
        return [r for r in self if r.name == name]

    def devices(self) -> dict[str, list[str]]:
        """For each input name, the distinct devices it arrived on."""
        return {name: sorted({r.device for r in self.of(name)}) for name in self.names()}

    def signatures(self) -> list[tuple]:
        """One hashable signature per call: what a compiler that specialises on shapes, dtypes and devices keys on."""
        by_call: dict[int, list] = {}
        for r in self:
            by_call.setdefault(r.call, []).append((r.name, r.shape, r.dtype, r.device))
        return [tuple(sorted(by_call[c])) for c in sorted(by_call)]

    def distinct_signatures(self) -> int:
        return len(set(self.signatures()))

    def decoding_signatures(self) -> tuple[int, int]:
        """(distinct signatures, calls) over the decoding calls: call 0, the prefill, is left out."""
        decoding = self.signatures()[1:]
        return len(set(decoding)), len(decoding)

    def lengths(self, name: str, first_call: int = 1) -> list[int]:
        """The sequence length (dim -2 for cache keys, else the last dim) of input `name` at every call from
        `first_call` on; 0 where that call received no such tensor (e.g. an empty quantized residual)."""
        by_call = {r.call: (r.shape[-2] if name.endswith("keys") else r.shape[-1]) for r in self.of(name)}
        return [by_call.get(call, 0) for call in range(first_call, self.calls)]

    def table(self) -> list[dict]:
        return [{"call": r.call, "name": r.name, "device": r.device, "dtype": r.dtype, "shape": r.shape} for r in self]


def _records(call: int, name: str, value) -> list[ForwardInput]:
    if isinstance(value, torch.Tensor):
        return [ForwardInput(call, name, str(value.device), dtype_name(value.dtype), tuple(value.shape))]
    if isinstance(value, _compat.Cache):
        # the cache's stored keys: (batch, kv_heads, seq, head_dim) per layer; log the first initialised layer
        for layer in value.layers:
            keys = getattr(layer, "keys", None)
            if getattr(layer, "is_initialized", False) and isinstance(keys, torch.Tensor) and keys.numel():
                return _records(call, f"{name}.layers[0].keys", keys)
        return []
    if isinstance(value, dict):  # e.g. a mask per layer type
        return [r for key, v in value.items() for r in _records(call, f"{name}[{key}]", v)]
    return []


@contextmanager
def log_forward_inputs(model: torch.nn.Module):
    """`with log_forward_inputs(model) as log: model.generate(...)` fills `log` with a ForwardInput per tensor
    argument of every forward call."""
    log = ForwardLog()
    calls = [0]

    def hook(module, args, kwargs):
        # input_ids may come positionally (model(ids)) or by keyword (generate)
        for i, value in enumerate(args):
            log.extend(_records(calls[0], "input_ids" if i == 0 else f"arg{i}", value))
        for name, value in kwargs.items():
            log.extend(_records(calls[0], name, value))
        calls[0] += 1

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield log
    finally:
        handle.remove()
