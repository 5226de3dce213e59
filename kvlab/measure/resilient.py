"""`resilient_generate` from transformers' cache guide, and a memory budget to try it on a CPU.

The guide's recipe: call `generate`; if the accelerator runs out of memory, retry with the offloaded cache,
which keeps only about one layer's keys and values on the accelerator at a time. On a GPU the error is a real
`torch.OutOfMemoryError`. On a CPU nothing runs out, so `BudgetedCache` plays the accelerator: it tracks the
bytes that would be resident on the compute device (every layer for an ordinary cache; for an offloaded one
only the layers between their prefetch and their offload) and raises `SimulatedOutOfMemoryError`, a subclass
of `torch.OutOfMemoryError`, once they exceed the budget. The same `except` catches both.

`simulated_device(model, budget_bytes)` does the same for code that is not kvlab's: inside `kvlab.watch`, it
checks the cache `generate` (or the user) made after every decoder layer, so the guide's own `generate` calls,
`cache_implementation="offloaded"` included, meet a pretend accelerator of that size.
"""

from __future__ import annotations

import functools

import torch

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.caches.factory import CACHE_CLASSES
from kvlab.measure.residency import effective_moves
from kvlab.recording.trace import Trace


class SimulatedOutOfMemoryError(torch.OutOfMemoryError):
    """The device bytes of a `BudgetedCache` went over its budget."""


class BudgetMixin:
    """Raises `SimulatedOutOfMemoryError` when the cache's device-resident bytes exceed `self.budget_bytes`."""

    budget_bytes: int | None = None
    peak_device_bytes: int = 0

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        out = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        # The layer just updated was on the device while it ran, even if it has been offloaded since.
        held = self.device_bytes(also_resident=layer_idx)
        self.peak_device_bytes = max(self.peak_device_bytes, held)
        if self.budget_bytes is not None and held > self.budget_bytes:
            raise SimulatedOutOfMemoryError(
                f"simulated out of memory: the cache needs {held:,} bytes on the device at layer {layer_idx}, "
                f"step {self.kvlab_recorder.step}; the budget is {self.budget_bytes:,} bytes"
            )
        return out

    def device_bytes(self, also_resident: int | None = None) -> int:
        """Bytes the cache would hold on the compute device now."""
        return device_bytes(self, also_resident)


def device_bytes(cache, also_resident: int | None = None) -> int:
    """Bytes an instrumented cache (kvlab's own, or one `kvlab.watch` adopted) would hold on the compute device
    now: every layer for an ordinary cache; for an offloaded one, the layers not offloaded since their last use,
    plus `also_resident` (the layer that just computed: offloaded already, but its tensors were still in use)."""
    states = {idx: cache.kvlab_recorder.state(cache.kvlab_role, idx) for idx in range(len(cache.layers))}
    if not getattr(cache, "offloading", False):
        return sum(s.bytes_held for s in states.values() if s is not None)
    resident = resident_layers(cache.trace, len(cache.layers))
    if also_resident is not None:
        resident.add(also_resident)
    return sum(states[i].bytes_held for i in resident if states.get(i) is not None)


def resident_layers(trace: Trace, num_layers: int) -> set[int]:
    """Layers on the compute device according to the trace: never offloaded, or prefetched since last offload."""
    last: dict[int, str] = {}
    for e in trace.transfers:
        last[e["layer_idx"]] = e["direction"]
    return {i for i in range(num_layers) if last.get(i, "prefetch") == "prefetch"}


@functools.cache
def _budgeted_class(cls: type) -> type:
    return type(f"Budgeted{cls.__name__.removeprefix('Instrumented')}", (BudgetMixin, cls), {})


def budgeted_cache(cache_kind: str, config, budget_bytes: int | None, trace: Trace | None = None, **options):
    """An instrumented cache of `cache_kind` ("dynamic", "offloaded", ...) that enforces a device-memory budget."""
    cache = make_cache(cache_kind, config, trace=trace, **options)
    if cache is None:
        raise ValueError("a budget needs a cache; cache kind 'none' has none")
    cache.__class__ = _budgeted_class(type(cache))
    cache.budget_bytes = budget_bytes
    cache.peak_device_bytes = 0
    return cache


def resilient_generate(model, input_ids: torch.Tensor, budget_bytes: int | None = None, log=print, **generate_kwargs):
    """The guide's `resilient_generate`: try a DynamicCache, fall back to the offloaded cache on out-of-memory.

    With `budget_bytes`, both attempts run a `BudgetedCache` (a simulated device of that size); without it the
    caches are plain instrumented ones and only a real `torch.OutOfMemoryError` triggers the fallback.
    Returns (output ids, the cache that finished, [attempt records]).
    """
    attempts = []
    input_ids = input_ids.to(model.device)
    for cache_kind in ("dynamic", "offloaded"):
        if cache_kind not in CACHE_CLASSES:  # pragma: no cover - both are always registered
            raise ValueError(cache_kind)
        cache = budgeted_cache(cache_kind, model.config, budget_bytes)
        try:
            with torch.inference_mode():
                output = model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    do_sample=False,
                    **{_compat.CACHE_KWARG: cache},
                    **generate_kwargs,
                )
        except torch.OutOfMemoryError as err:
            attempts.append(
                {"cache": cache_kind, "ok": False, "error": str(err), "peak_device_bytes": cache.peak_device_bytes}
            )
            log(f"{cache_kind}: {err}")
            log("retrying with the offloaded cache")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            continue
        attempts.append({"cache": cache_kind, "ok": True, "error": None, "peak_device_bytes": cache.peak_device_bytes})
        return output, cache, attempts
    raise torch.OutOfMemoryError(f"out of memory even with the offloaded cache: {attempts[-1]['error']}")


def device_peak(model, input_ids: torch.Tensor, cache_kind: str, max_new_tokens: int = 16, **options) -> dict:
    """Greedy-generate with an unlimited `BudgetedCache` of `cache_kind` and report what the device would have held.

    Returns {"cache_kind", "token_ids" (new tokens), "peak_device_bytes", "peak_cache_bytes", "transfers",
    "transfer_bytes", "trace"}: the peak on the compute device next to the peak of the whole cache, and the
    moves that change where a layer lives (`kvlab.measure.residency.effective_moves`; no-op prefetches left out).
    """
    trace = Trace()
    cache = budgeted_cache(cache_kind, model.config, None, trace=trace, **options)
    input_ids = input_ids.to(model.device)
    with torch.inference_mode():
        output = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            **{_compat.CACHE_KWARG: cache},
        )
    moves = effective_moves(trace)
    return {
        "cache_kind": cache_kind,
        "token_ids": output[0, input_ids.shape[-1] :].tolist(),
        "peak_device_bytes": cache.peak_device_bytes,
        "peak_cache_bytes": trace.summary()["peak_bytes"],
        "transfers": len(moves),
        "transfer_bytes": sum(e["bytes"] for e in moves),
        "trace": trace,
    }


class SimulatedDevice:
    """A pretend accelerator with `budget_bytes` for the KV cache, for `generate` calls inside `kvlab.watch`.

        with kvlab.watch(model) as watch, resilient.simulated_device(model, budget_bytes=1_000_000) as device:
            model.generate(**inputs, max_new_tokens=8)      # raises SimulatedOutOfMemoryError past the budget

    After every decoder layer it adds up the bytes the watched cache would hold on an accelerator now
    (`device_bytes`: all layers of an ordinary cache; for an offloaded one the layer that just computed plus the
    ones prefetched or never offloaded) and raises `SimulatedOutOfMemoryError`, a `torch.OutOfMemoryError`,
    once they exceed the budget; `out_of_memory` lists where (step, layer, bytes) each time. Only the KV cache
    is counted: weights and activations are not. Enter it after `kvlab.watch` (the watch must adopt the cache
    first); its hooks are removed on exit, also after an error.
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
        held = device_bytes(cache, also_resident=layer_idx)
        self.peak_bytes = max(self.peak_bytes, held)
        if held > self.budget_bytes:
            step = cache.kvlab_recorder.step
            self.out_of_memory.append({"step": step, "layer_idx": layer_idx, "bytes": held})
            raise SimulatedOutOfMemoryError(
                f"simulated out of memory: the KV cache needs {held:,} bytes on the device at layer {layer_idx}, "
                f"step {step}; the simulated device has {self.budget_bytes:,} bytes for it"
            )


def simulated_device(model, budget_bytes: int) -> SimulatedDevice:
    """A context manager: `model`'s KV cache may hold at most `budget_bytes` on a pretend accelerator."""
    return SimulatedDevice(model, budget_bytes)


def decoder_layers(model) -> list:
    """The model's decoder layers, in order (their index is the cache's `layer_idx`)."""
    n = model.config.get_text_config(decoder=True).num_hidden_layers
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return list(module)
    raise ValueError(f"no list of {n} decoder layers found in {type(model).__name__}")
