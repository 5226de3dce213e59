"""A pretend accelerator of a given memory, to try the cache guide's `resilient_generate` recipe on a CPU.

The guide's recipe: call `generate`; if the accelerator runs out of memory, retry with the offloaded cache,
which keeps only about one layer's keys and values on the accelerator at a time. On a GPU the error is a real
`torch.OutOfMemoryError`. On a CPU nothing runs out, so `simulated_device(model, budget_bytes)` plays the
accelerator: inside `kvlab.watch`, after every decoder layer, it reads the bytes the watched cache would hold on
the device (`kvlab.measure.residency`, the one count of device-resident bytes: every layer of an ordinary cache,
for an offloaded one only the layers between their prefetch and their offload) and raises
`SimulatedOutOfMemoryError`, a subclass of `torch.OutOfMemoryError`, once they exceed the budget. The guide's own
`generate` calls, `cache_implementation="offloaded"` included, meet it, and the same `except` catches both errors.
The recipe itself stays in the learner's hands (notebook 03 writes it out around `generate`).
"""

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
    """A pretend accelerator with `budget_bytes` for the KV cache, for `generate` calls inside `kvlab.watch`.

        with kvlab.watch(model) as watch, resilient.simulated_device(model, budget_bytes=1_000_000) as device:
            model.generate(**inputs, max_new_tokens=8)      # raises SimulatedOutOfMemoryError past the budget

    After every decoder layer it reads from the watched cache's trace the bytes it would hold on an accelerator now
    (`kvlab.measure.residency.device_bytes_at_last_update`: all layers of an ordinary cache; for an offloaded one
    the layer that just computed plus the ones prefetched or never offloaded) and raises
    `SimulatedOutOfMemoryError`, a `torch.OutOfMemoryError`, once they exceed the budget; `out_of_memory` lists
    where (step, layer, bytes) each time. Only the KV cache is counted: weights and activations are not. Enter it
    after `kvlab.watch` (the watch must adopt the cache first); its hooks are removed on exit, also after an error.
    """

    def __init__(self, model, budget_bytes: int):
        self.model = model
        self.budget_bytes = budget_bytes
        self.peak_bytes = 0  # largest device-resident cache bytes seen, across every generate in the block
        # Each time it ran out: {"step", "layer_idx", "bytes"}, so a notebook can print (and score) where.
        self.out_of_memory: list[dict] = []
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
            raise RuntimeError("simulated_device reads the cache kvlab.watch records: enter kvlab.watch(model) first")
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


def simulated_device(model, budget_bytes: int) -> SimulatedDevice:
    """A context manager: `model`'s KV cache may hold at most `budget_bytes` on a pretend accelerator."""
    return SimulatedDevice(model, budget_bytes)


def decoder_layers(model) -> list:
    """The model's decoder layers, in order (their index is the cache's `layer_idx`)."""
    n = len(model_facts(model.config).layer_kinds)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return list(module)
    raise ValueError(f"no list of {n} decoder layers found in {type(model).__name__}")
