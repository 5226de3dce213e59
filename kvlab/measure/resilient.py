"""A pretend accelerator of a given memory, to try the cache guide's `resilient_generate` recipe on a CPU: its
`SimulatedOutOfMemoryError` is a `torch.OutOfMemoryError`, so the recipe's own `except` catches it."""

from __future__ import annotations

import functools

import torch

from kvlab import _compat
from kvlab.errors import KvlabEnvironmentError
from kvlab.i18n import _, number
from kvlab.measure.residency import device_bytes_at_last_update
from kvlab.model_facts import model_facts


class SimulatedOutOfMemoryError(KvlabEnvironmentError, torch.OutOfMemoryError):
    """The KV cache's bytes on a `SimulatedDevice` went over its budget."""


class SimulatedDevice:
    """A pretend accelerator with `budget_bytes` for the KV cache alone, checked after every decoder layer. Enter
    it after `kvlab.watch`, which must adopt the cache first."""

    def __init__(self, model, budget_bytes: int):
        self.model = model
        self.budget_bytes = budget_bytes
        self.peak_bytes = 0  # across every generate in the block
        self.out_of_memory: list[dict] = []  # each time it ran out: {"step", "layer_idx", "bytes"}
        self._cache = None
        self._handles: list = []

    def __enter__(self) -> SimulatedDevice:
        self._handles = [self.model.register_forward_pre_hook(self._see_cache, with_kwargs=True)]
        for idx, layer in enumerate(decoder_layers(self.model)):
            self._handles.append(layer.register_forward_hook(functools.partial(self._check, idx)))
        return self

    def __exit__(self, *exc_info) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return False

    def _see_cache(self, module, args, kwargs):
        self._cache = _compat.forward_cache(kwargs)

    def _check(self, layer_idx: int, module, args, output) -> None:
        cache = self._cache
        if cache is None:
            return
        if not hasattr(cache, "kvlab_recorder"):
            raise RuntimeError(
                _("simulated_device reads the cache kvlab.watch records: enter kvlab.watch(model) first")
            )
        held = device_bytes_at_last_update(cache.trace)
        self.peak_bytes = max(self.peak_bytes, held)
        if held > self.budget_bytes:
            step = cache.kvlab_recorder.step
            self.out_of_memory.append({"step": step, "layer_idx": layer_idx, "bytes": held})
            raise SimulatedOutOfMemoryError(
                _(
                    "simulated out of memory: the KV cache needs {held} bytes on the device at layer {layer}, "
                    "step {step}; the simulated device has {budget} bytes for it"
                ).format(held=number(held), layer=layer_idx, step=step, budget=number(self.budget_bytes))
            )


simulated_device = SimulatedDevice  # `with simulated_device(model, budget_bytes): model.generate(...)`


def decoder_layers(model) -> list:
    """The model's decoder layers, in order (their index is the cache's `layer_idx`)."""
    n = len(model_facts(model.config).layer_kinds)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return list(module)
    raise ValueError(_("no list of {n} decoder layers found in {model}").format(n=n, model=type(model).__name__))
