"""Everything kvlab knows about one transformers release lives here.

kvlab extends transformers' cache classes instead of forking them. Their internals move between releases
(in 2026 `crop` switched to negative counts and `generate(past_key_values=...)` became `generate(cache=...)`),
so every attribute name and behaviour that kvlab depends on is named once, in this module, and checked by
`tests/test_compat.py`. Tested range: see `SUPPORTED_TRANSFORMERS` (pinned in pyproject.toml).
"""

from __future__ import annotations

import torch
import transformers
from transformers import cache_utils
from transformers.cache_utils import (
    BaseQuantizedLayer,
    Cache,
    CacheLayerMixin,
    DummyLayer,
    DynamicCache,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    EncoderDecoderCache,
    Fp8QuantizedLayer,
    HQQQuantizedLayer,
    LinearAttentionCacheLayerMixin,
    LinearAttentionLayer,
    QuantizedCache,
    QuantizedLayer,
    QuantoQuantizedLayer,
    StaticCache,
    StaticLayer,
    StaticSlidingWindowLayer,
)

SUPPORTED_TRANSFORMERS = ">=5.24,<5.25"
TRANSFORMERS_VERSION = transformers.__version__

# `generate`/`forward` take the cache under this keyword (it was `past_key_values` before 2026).
CACHE_KWARG = "cache"

# Names accepted by `GenerationConfig.cache_implementation` that kvlab mirrors.
CACHE_IMPLEMENTATIONS = ("dynamic", "static", "offloaded", "offloaded_static", "quantized")
QUANTIZED_BACKENDS = ("hqq", "quanto", "fp8")
HQQ_NBITS = (1, 2, 3, 4, 8)
QUANTO_NBITS = (2, 4)
HQQ_AXES = (0, 1)
QUANTO_AXES = (0, -1)
# Defaults of `QuantizedLayer.__init__` in this release.
QUANTIZED_DEFAULTS = {"nbits": 4, "axis_key": 0, "axis_value": 0, "q_group_size": 64, "residual_length": 128}
# How many rows hqq's bitpack packs into one word: the packed dimension must be divisible by this.
HQQ_PACK_FACTOR = {1: 8, 2: 4, 3: 10, 4: 2, 8: 1}


def layer_types(config) -> list[str]:
    """The per-layer type names transformers derives from a config ("full_attention", "sliding_attention", ...)."""
    types, _ = cache_utils.get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return list(types)


def is_linear_layer(layer) -> bool:
    """A pure linear-attention (Mamba/SSM/conv) layer: a recurrent state, no per-token keys and values."""
    return isinstance(layer, LinearAttentionCacheLayerMixin) and not isinstance(layer, CacheLayerMixin)


def linear_states(layer) -> list[torch.Tensor]:
    """The conv and recurrent state tensors a linear-attention layer holds (empty before its first update)."""
    states = []
    for name in ("conv_states", "recurrent_states"):
        value = getattr(layer, name, None)
        if isinstance(value, dict):  # {state_idx: tensor | None}
            states.extend(v for v in value.values() if isinstance(v, torch.Tensor))
    return states


def static_sliding_length(layer: StaticSlidingWindowLayer) -> int:
    """Tokens seen by a static sliding layer; it keeps a python int beside the tensor to stay compile-friendly."""
    return int(layer.cumulative_length_int)


def quantized_payload(layer):
    """The quantized keys and values of a quantized layer: backend objects (tuples, QTensors) or None."""
    return layer._quantized_keys, layer._quantized_values


def sync_offload_streams(cache: Cache, device: torch.device) -> None:
    """The stream handshake `Cache.update` does before prefetching (transformers 5.24).

    Transformers calls `torch.cuda.default_stream` unconditionally, which raises
    "Torch not compiled with CUDA enabled" on a CPU-only build; kvlab only synchronises on an accelerator.
    """
    if device.type != "cuda":
        return
    torch.cuda.default_stream(device).wait_stream(cache.prefetch_stream)
    cache.prefetch_stream.wait_stream(torch.cuda.default_stream(device))


__all__ = [
    "BaseQuantizedLayer",
    "CACHE_IMPLEMENTATIONS",
    "CACHE_KWARG",
    "Cache",
    "CacheLayerMixin",
    "DummyLayer",
    "DynamicCache",
    "DynamicLayer",
    "DynamicSlidingWindowLayer",
    "EncoderDecoderCache",
    "Fp8QuantizedLayer",
    "HQQQuantizedLayer",
    "HQQ_AXES",
    "HQQ_NBITS",
    "HQQ_PACK_FACTOR",
    "LinearAttentionLayer",
    "QUANTIZED_BACKENDS",
    "QUANTIZED_DEFAULTS",
    "QUANTO_AXES",
    "QUANTO_NBITS",
    "QuantizedCache",
    "QuantizedLayer",
    "QuantoQuantizedLayer",
    "StaticCache",
    "StaticLayer",
    "StaticSlidingWindowLayer",
]


def offloaded_update(cache: Cache, key_states, value_states, layer_idx: int, *args, **kwargs):
    """`Cache.update`'s offloading schedule (transformers 5.24), runnable on a CPU-only build.

    Same order as transformers: wait for the previous prefetch, prefetch the next offloaded layer, update this
    layer, offload it. Only the CUDA stream handshake is skipped when the states are not on CUDA.
    """
    if cache.layer_class_to_replicate is not None:
        while len(cache.layers) <= layer_idx:
            cache.layers.append(cache.layer_class_to_replicate())
    sync_offload_streams(cache, key_states.device)
    cache.prefetch(layer_idx + 1, cache.only_non_sliding)
    keys, values = cache.layers[layer_idx].update(key_states, value_states, *args, **kwargs)
    cache.offload(layer_idx, cache.only_non_sliding)
    return keys, values


# -- what `kvlab.watch` relies on ---------------------------------------------------------------------------------
# A model's forward takes its cache as `cache`; `past_key_values` still works (deprecated until 5.40, with a warning),
# and is the spelling of the cache guide's samples.
FORWARD_CACHE_KWARGS = ("cache", "past_key_values")
# The field of a model output that holds the cache the forward used (or created, with use_cache=True).
OUTPUT_CACHE_FIELD = "cache"
QUANTIZED_LAYER_BACKENDS = {QuantoQuantizedLayer: "quanto", HQQQuantizedLayer: "hqq", Fp8QuantizedLayer: "fp8"}


def forward_cache(kwargs: dict):
    """The cache object passed to a model's forward, under either spelling (None when there is none)."""
    for name in FORWARD_CACHE_KWARGS:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def output_cache(output):
    """The cache a forward returned (None for outputs without one, e.g. use_cache=False)."""
    return getattr(output, OUTPUT_CACHE_FIELD, None)


def is_offloading(cache: Cache) -> bool:
    """Whether a Dynamic/StaticCache was built with `offloading=True` (an attribute, not a class, in 5.24)."""
    return bool(getattr(cache, "offloading", False))


def quantized_backend(cache: QuantizedCache) -> str:
    """The backend name a QuantizedCache was built with; 5.24 keeps only its layer class, not the name."""
    for layer_class, name in QUANTIZED_LAYER_BACKENDS.items():
        if cache.layers and isinstance(cache.layers[0], layer_class):
            return name
    raise TypeError(f"unknown quantized layer class {type(cache.layers[0]).__name__}")


def is_stream(value) -> bool:
    return isinstance(value, torch.Stream)


def new_stream_like(stream: torch.Stream) -> torch.Stream:
    """A fresh stream on `stream`'s device: offloaded caches hold one for prefetching, and streams cannot be copied."""
    return torch.Stream(device=stream.device)
