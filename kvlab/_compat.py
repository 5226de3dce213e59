"""Everything kvlab knows about one transformers release lives here.

kvlab extends transformers' cache classes instead of forking them. Their internals move between releases
(in 2026 `crop` switched to negative counts, and 5.24 renamed `generate(past_key_values=...)` to
`generate(cache=...)`), so every attribute name and behaviour that kvlab depends on is named once, in this module,
and checked by `tests/test_compat.py`. Supported range: `SUPPORTED_TRANSFORMERS` (pyproject.toml requires it);
`.ci/oldest-transformers` runs the cache tests against its floor.
"""

from __future__ import annotations

import contextlib
import importlib
from importlib import metadata
from typing import TYPE_CHECKING

from kvlab.extras import MissingExtraError

if TYPE_CHECKING:  # annotations only
    import torch
    from transformers.cache_utils import Cache, QuantizedCache, StaticSlidingWindowLayer

# Importing this module imports neither torch nor transformers: `kvlab size`, `kvlab --help` and the option checks
# read only the constants below. The transformers classes (`_compat.DynamicCache`, ...) are imported on first use,
# by the module-level `__getattr__` at the end of the file; functions here import what they need.
_LAZY = {
    **{
        name: "transformers.cache_utils"
        for name in (
            "BaseQuantizedLayer",
            "Cache",
            "CacheLayerMixin",
            "DummyLayer",
            "DynamicCache",
            "DynamicLayer",
            "DynamicSlidingWindowLayer",
            "EncoderDecoderCache",
            "Fp8QuantizedLayer",
            "HQQQuantizedLayer",
            "LinearAttentionCacheLayerMixin",
            "LinearAttentionLayer",
            "QuantizedCache",
            "QuantizedLayer",
            "QuantoQuantizedLayer",
            "StaticCache",
            "StaticLayer",
            "StaticSlidingWindowLayer",
        )
    },
    "PagedAttentionCache": "transformers.generation.continuous_batching.cache",
    # where 5.24 keeps the streamer base class and continuous batching's settings
    "BaseStreamer": "transformers.generation.streamers",
    "ContinuousBatchingConfig": "transformers",
    "FULL_ATTENTION": "transformers.generation.continuous_batching.cache_allocators",
}


def masked_lm_model_types() -> frozenset[str]:
    """Model types with a masked-LM head (transformers' own table): bidirectional encoders, unless their config
    makes them a decoder (`is_decoder`, XLM's `causal`). Used to refuse sizing a cache for a model that keeps none."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return frozenset(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def __getattr__(name: str):
    if name not in _LAZY and name not in ("cache_utils", "PAGED_CACHE_MODULE", "QUANTIZED_LAYER_BACKENDS"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    check_transformers()  # the first transformers class kvlab asks for: a release outside the range says so here
    if name == "DummyLayer" and not hasattr(_cu(), name):
        value = _NoDummyLayer
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name == "cache_utils":
        value = importlib.import_module("transformers.cache_utils")
    elif name == "PAGED_CACHE_MODULE":
        value = importlib.import_module("transformers.generation.continuous_batching.continuous_api")
    else:  # QUANTIZED_LAYER_BACKENDS
        value = {
            __getattr__("QuantoQuantizedLayer"): "quanto",
            __getattr__("HQQQuantizedLayer"): "hqq",
            __getattr__("Fp8QuantizedLayer"): "fp8",
        }
    globals()[name] = value  # later lookups are plain attribute reads
    return value


class _NoDummyLayer:
    """`_compat.DummyLayer` before 5.23, which has no DummyLayer: no layer is one (a layer without attention,
    "moe" or "mlp", is an empty LinearAttentionLayer there, which kvlab already reads as holding no tokens)."""


def _cu():
    """transformers.cache_utils (imported on first use)."""
    return __getattr__("cache_utils")


# The floor is the first release with every cache the guide teaches: QuantizedCache's "fp8" backend
# (`Fp8QuantizedLayer`) first ships in 5.21.0; the rest (crop by negative counts, activate_past_recording,
# offloaded_static, offload_only_non_sliding) is already in 5.20. Releases after 5.24 are untested.
SUPPORTED_TRANSFORMERS = ">=5.21,<5.25"
TRANSFORMERS_VERSION = metadata.version("transformers")


class UnsupportedTransformersError(MissingExtraError):
    """The installed transformers is outside `SUPPORTED_TRANSFORMERS`: kvlab reads cache internals that move
    between releases, so outside the range it would fail deep inside a generate (a kwarg transformers rejects, an
    attribute of None) instead of saying which release it needs."""


def transformers_release(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of a transformers version string (the installed one by default): what the switches below
    compare, since every difference kvlab handles came with a minor release."""
    from packaging.version import Version

    release = Version(version or TRANSFORMERS_VERSION).release
    return release[0], release[1]


def check_transformers(version: str | None = None) -> None:
    """Raise UnsupportedTransformersError, in one line, unless `version` (the installed one by default) is in
    the supported range (pre-releases of a supported minor release count as in it)."""
    from packaging.specifiers import SpecifierSet

    version = version or TRANSFORMERS_VERSION
    if not SpecifierSet(SUPPORTED_TRANSFORMERS).contains(version, prereleases=True):
        raise UnsupportedTransformersError(
            f"kvlab supports transformers {SUPPORTED_TRANSFORMERS}, but {version} is installed: "
            f"pip install 'transformers{SUPPORTED_TRANSFORMERS}'"
        )


# `generate`/`forward` take the cache under this keyword: 5.24 renamed `past_key_values` to `cache` (the old name
# still works there, deprecated). Passing `cache=` to 5.21-5.23 fails ("model_kwargs are not used: ['cache']").
CACHE_KWARG = "cache" if transformers_release() >= (5, 24) else "past_key_values"

# QuantizedCache's backends and what each accepts (the cache kinds themselves: `kvlab.cache_kinds`).
QUANTIZED_BACKENDS = ("hqq", "quanto", "fp8")
HQQ_NBITS = (1, 2, 3, 4, 8)
QUANTO_NBITS = (2, 4)
HQQ_AXES = (0, 1)
QUANTO_AXES = (0, -1)
# Defaults of `QuantizedLayer.__init__` in this release.
QUANTIZED_DEFAULTS = {"nbits": 4, "axis_key": 0, "axis_value": 0, "q_group_size": 64, "residual_length": 128}
# How many rows hqq's bitpack packs into one word: a uint8 at 1, 2, 4 and 8 bits, an int32 at 3 bits, which pads
# its rows itself; elsewhere the packed dimension must divide by it. At axis 0 hqq packs along each group (the
# `q_group_size` rows of its reshaped tensor), so a group must hold a whole number of words, else generate fails
# ("The size of tensor a (3) must match the size of tensor b (4)"; measured on 5.24, hqq 0.2.8, groups 1..1000).
HQQ_PACK_FACTOR = {1: 8, 2: 4, 3: 10, 4: 2, 8: 1}
HQQ_SELF_PADDING_NBITS = 3


def hqq_axis0_group_multiple(nbits: int) -> int:
    """What an hqq group size at axis 0 must be a multiple of (see `HQQ_PACK_FACTOR`)."""
    return 1 if nbits == HQQ_SELF_PADDING_NBITS else HQQ_PACK_FACTOR[nbits]


def layer_types(config) -> list[str]:
    """The per-layer type names transformers derives from a config ("full_attention", "sliding_attention", ...)."""
    types, _ = _cu().get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return list(types)


def is_linear_layer(layer) -> bool:
    """A pure linear-attention (Mamba/SSM/conv) layer: a recurrent state, no per-token keys and values."""
    cu = _cu()
    return isinstance(layer, cu.LinearAttentionCacheLayerMixin) and not isinstance(layer, cu.CacheLayerMixin)


def linear_states(layer) -> list[torch.Tensor]:
    """The conv and recurrent state tensors a linear-attention layer holds (empty before its first update)."""
    import torch

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
    import torch

    torch.cuda.default_stream(device).wait_stream(cache.prefetch_stream)
    cache.prefetch_stream.wait_stream(torch.cuda.default_stream(device))


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
# Every keyword a model's forward may get its cache under, in this range: `cache` (5.24's name; continuous batching
# passes its paged cache as `cache=` in every release), `past_key_values` (the only name before 5.24, deprecated
# after, and the spelling of the cache guide's samples) and `cache_params` (the Mamba family's before 5.24).
FORWARD_CACHE_KWARGS = ("cache", "past_key_values", "cache_params")
# The field of a model output that holds the cache the forward used (or created, with use_cache=True): renamed
# with the keyword in 5.24.
OUTPUT_CACHE_FIELDS = ("cache",) if CACHE_KWARG == "cache" else ("past_key_values", "cache_params")
# QUANTIZED_LAYER_BACKENDS (layer class -> backend name) is built on first use by `__getattr__`.


def cache_kwarg(model) -> str:
    """The keyword `model.generate(...)` and `model(...)` take a cache object under. 5.24: `cache` for every model.
    Before: `past_key_values`, except the Mamba family's `cache_params` (transformers tells them apart by class
    name, as below); `CACHE_KWARG` is the common one."""
    if CACHE_KWARG == "cache" or "mamba" not in type(model).__name__.lower():
        return CACHE_KWARG
    return "cache_params"


def forward_cache(kwargs: dict):
    """The cache object passed to a model's forward, under any spelling (None when there is none)."""
    for name in FORWARD_CACHE_KWARGS:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def output_cache(output):
    """The cache a forward returned (None for outputs without one, e.g. use_cache=False)."""
    for name in OUTPUT_CACHE_FIELDS:
        cache = getattr(output, name, None)
        if cache is not None:
            return cache
    return None


def is_offloading(cache: Cache) -> bool:
    """Whether a Dynamic/StaticCache was built with `offloading=True` (an attribute, not a class, in 5.24)."""
    return bool(getattr(cache, "offloading", False))


def quantized_backend(cache: QuantizedCache) -> str:
    """The backend name a QuantizedCache was built with; 5.24 keeps only its layer class, not the name."""
    for layer_class, name in __getattr__("QUANTIZED_LAYER_BACKENDS").items():
        if cache.layers and isinstance(cache.layers[0], layer_class):
            return name
    raise TypeError(f"unknown quantized layer class {type(cache.layers[0]).__name__}")


def is_stream(value) -> bool:
    import torch

    return isinstance(value, torch.Stream)


def new_stream_like(stream: torch.Stream) -> torch.Stream:
    """A fresh stream on `stream`'s device: offloaded caches hold one for prefetching, and streams cannot be copied."""
    import torch

    return torch.Stream(device=stream.device)


# -- what `kvlab.generate` relies on ------------------------------------------------------------------------------
class generate_cache_hook:  # lower case: used as a function, `with generate_cache_hook(model, before, after):`
    """While the block runs, `model.generate` calls `before(generation_config, batch_size, max_cache_length)` just
    before it builds its own cache, and `after(cache)` on the cache it built (the return value replaces it).

    5.24 builds the cache in `_prepare_cache_for_generation(generation_config, model_kwargs, generation_mode,
    batch_size, max_cache_length)`, after `max_length` is final: `max_cache_length` is `max_length - 1` (what a
    static cache is sized for, before `max_cache_len` and the model's `_previous_max_cache_length`), and
    `batch_size` is before beams. An instance attribute shadows the method for the block only.
    """

    name = "_prepare_cache_for_generation"

    def __init__(self, model, before, after):
        self.model, self.before, self.after = model, before, after

    def _hooked(self, generation_config, model_kwargs, generation_mode, batch_size, max_cache_length):
        self.before(generation_config, batch_size, max_cache_length)
        out = self.original(generation_config, model_kwargs, generation_mode, batch_size, max_cache_length)
        name = cache_kwarg(self.model)  # where generate put the cache it built
        cache = model_kwargs.get(name)
        if cache is not None and not getattr(cache, "_is_user_defined", False):
            model_kwargs[name] = self.after(cache)
        return out

    def __enter__(self):
        self.shadowed = self.name in vars(self.model)
        self.original = getattr(self.model, self.name)
        setattr(self.model, self.name, self._hooked)
        return self

    def __exit__(self, *exc_info) -> bool:
        if self.shadowed:
            setattr(self.model, self.name, self.original)
        else:
            delattr(self.model, self.name)
        return False


def static_cache_length(cache) -> int:
    """The slots a StaticCache allocates per full-attention layer (its sliding layers hold min(window, that))."""
    cache = getattr(cache, "self_attention_cache", cache)
    return max(int(layer.max_cache_len) for layer in cache.layers if isinstance(layer, _cu().StaticLayer))


# -- continuous batching (issue 12): transformers' paged cache, `model.generate_batch(...)` --------------------------
# 5.24's ContinuousBatchingManager builds its cache as `continuous_api.PagedAttentionCache(...)` (a module global,
# looked up when the batch processor is created), and passes it to each forward as `cache=`. One flat uint8 tensor
# (`cache_tensor`) holds every block; its first two sectors are trash (padding reads and writes), never allocated.
# Each attention type has one allocator; its `block_table` maps a request id to its block ids, its `ledger` keeps the
# complete blocks cached for prefix sharing, and the shared `pool` holds free sectors and free blocks. A finished
# request's blocks go back through `free_blocks(request_id)`; a preempted one (cache full) through
# `free_blocks(request_id, no_cache=True)` (OffloadingManager.offload_requests), then it is re-queued.
# PAGED_CACHE_MODULE (continuous_api), PagedAttentionCache and FULL_ATTENTION are imported on first use.
PAGED_CACHE_NAME = "PagedAttentionCache"
# The attention implementation that runs continuous batching without flash attention (CPU): paged cache + eager.
PAGED_ATTN_IMPLEMENTATION = "paged|eager"


@contextlib.contextmanager
def paged_attention(model):
    """Run `model` with the attention implementation continuous batching needs (`generate_batch` without flash
    attention, e.g. on a CPU), and give it back its own afterwards, also after an exception."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(PAGED_ATTN_IMPLEMENTATION)
    try:
        yield model
    finally:
        model.set_attn_implementation(previous)


PAGED_TRASH_SECTORS = 2


def paged_full_allocator(cache):
    """The full-attention allocator of a PagedAttentionCache whose layers are all full attention (else TypeError)."""
    allocators = cache.cache_allocators
    full = __getattr__("FULL_ATTENTION")
    if list(allocators) != [full]:
        raise TypeError(f"paged cache with allocators {list(allocators)}: kvlab instruments full attention only")
    return allocators[full]


def paged_geometry(cache) -> dict:
    """Block geometry of a full-attention PagedAttentionCache: tokens per block, blocks, bytes."""
    allocator = paged_full_allocator(cache)
    return {
        "page_size": int(allocator.tokens_per_page),
        "num_layers": len(allocator.layer_indices),
        "num_blocks": int(allocator.num_blocks),  # allocatable blocks (trash excluded)
        "trash_blocks": PAGED_TRASH_SECTORS * int(allocator.blocks_per_sector),
        "bytes_per_block": int(allocator.bytes_per_block),  # page_size tokens of K and V, every layer
        "bytes_per_sector": int(cache.bytes_per_sector),
        "max_batch_tokens": int(cache.max_batch_tokens),
        "prefix_sharing": bool(cache.use_prefix_sharing),
    }


def paged_block_tables(cache) -> dict[str, list[int]]:
    """request id -> its block ids, in order (a copy)."""
    return {rid: list(blocks) for rid, blocks in paged_full_allocator(cache).block_table.items()}


def paged_block_counts(cache) -> tuple[int, int]:
    """(free, cached): blocks free in the pool (free sectors included) and complete blocks kept for prefix reuse."""
    allocator = paged_full_allocator(cache)
    pool = cache.pool
    free = pool.count_free_blocks(allocator.index) + pool.num_free_sectors * allocator.blocks_per_sector
    return int(free), len(allocator.ledger.cached_blocks)


def paged_cached_block_ids(cache) -> list[int]:
    """Ids of the complete blocks no request holds, kept (ledger.cached_blocks) for prefix reuse."""
    return sorted(paged_full_allocator(cache).ledger.cached_blocks)


# -- what kvlab's option and crop rules read from layers and configs (issue 11) ------------------------------------
def layer_flags(config) -> list[tuple[bool, bool]]:
    """(attention, sliding) per layer of a decoder config, as this release's DynamicCache lays them out (layers are
    lazy: nothing is allocated). Linear-attention and dummy layers are not attention; offloading skips them (before
    5.23 there are no dummy layers: "moe"/"mlp" layers are linear-attention ones, skipped the same way)."""
    empty = __getattr__("DynamicCache")(config=config.get_text_config(decoder=True))
    dummies = getattr(empty, "is_dummy", [False] * len(empty.layers))
    attention = [not (linear or dummy) for linear, dummy in zip(empty.is_linear, dummies)]
    return list(zip(attention, empty.is_sliding))


def dynamic_sliding_state(layer) -> tuple[int, int, bool] | None:
    """(tokens seen, sliding window, records the past) of a DynamicCache sliding/chunked layer; None for others.

    5.24's DynamicSlidingWindowLayer keeps the last `sliding_window - 1` tokens unless `record_past` is set."""
    if not isinstance(layer, __getattr__("DynamicSlidingWindowLayer")):
        return None
    return int(layer.get_seq_length()), int(layer.sliding_window), bool(layer.record_past)


def static_sliding_state(layer) -> tuple[int, int] | None:
    """(tokens seen, slots of its window) of a StaticCache sliding layer that holds tokens; None for others."""
    if not isinstance(layer, __getattr__("StaticSlidingWindowLayer")) or not layer.is_initialized:
        return None
    return static_sliding_length(layer), int(layer.max_cache_len)


def crop_static_layer(layer, tokens_to_remove: int) -> None:
    """`layer.crop(tokens_to_remove)` for a StaticCache layer (kvlab's crop rules have refused positive counts).

    5.24's static layers crop by rewinding their token count (the next update overwrites the slots past it; a
    sliding one only while it has not wrapped, which kvlab's rules check). Before 5.24 they have no `crop` at all
    ("'StaticLayer' object has no attribute 'crop'"), so kvlab does exactly what 5.24 does."""
    if hasattr(layer, "crop"):  # 5.24, and every non-static layer (linear attention) of a StaticCache
        layer.crop(tokens_to_remove)
        return
    removed = abs(tokens_to_remove)
    layer.cumulative_length.sub_(removed)  # in place: the tensor's address stays static
    if hasattr(layer, "cumulative_length_int"):  # StaticSlidingWindowLayer
        layer.cumulative_length_int -= removed
    if getattr(layer, "is_indexer_initialized", False):  # StaticIndexedLayer
        layer.indexer_cumulative_length.sub_(removed)


def quantized_residual_length(layer) -> int:
    """Tokens in a quantized layer's full-precision residual (its `keys` before the first update are empty)."""
    return layer.keys.shape[-2] if layer.keys.dim() == 4 else 0


def crop_quantized_length(layer, tokens_to_remove: int) -> None:
    """5.24's QuantizedLayer.crop shortens the residual but not `cumulative_length`: shift the count as well."""
    layer.cumulative_length += tokens_to_remove


def set_offload_only_non_sliding(cache, value: bool) -> None:
    """Which layers an offloaded Dynamic/StaticCache offloads (5.24 keeps it as `only_non_sliding`)."""
    getattr(cache, "self_attention_cache", cache).only_non_sliding = value


def drop_quantizer(model) -> None:
    """Forget how the weights were quantized (a GGUF load): 5.24 refuses `save_pretrained` while the model keeps its
    quantizer (`hf_quantizer`) and its config a `quantization_config`, even once every tensor is dequantized."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


# -- compiling with generate (issue 11) ------------------------------------------------------------------------------
def compile_config_all_devices(**options):
    """A `CompileConfig(**options)` that `generate` honours on every device. transformers compiles the decoding
    forward only on accelerators unless the private flag `_compile_all_devices` is set (its own comment: for
    testing on e.g. a CPU, "often not optimal")."""
    from transformers import CompileConfig

    config = CompileConfig(**options)
    config._compile_all_devices = True
    return config


# -- what kvlab's layer reader looks up (issue 28) ---------------------------------------------------------------------
def cache_layer_class(name: str) -> type | None:
    """transformers' cache layer class `name`, None where this release has none (DummyLayer came with 5.23, the
    indexed layers and the hybrid linear-attention ones with later releases)."""
    return getattr(_cu(), name, None)


# -- `kvlab size` on the meta device (issue 28) ----------------------------------------------------------------------
def storage_identity(tensor: torch.Tensor) -> int:
    """One number per storage, equal for every view of it, on any device. A meta tensor's storage has no address
    (`data_ptr()` is 0 for all of them), so the storage object's own handle (`_cdata`, torch 2.x) tells them apart."""
    return tensor.untyped_storage()._cdata


def query_heads(text) -> int | tuple[int, ...]:
    """Attention heads of the queries of a decoder config `text`: one count, or one per layer for a heterogeneous
    config (transformers refuses the global read there); 0 where it names none."""
    layers = per_layer_configs(text)
    if layers is not None:
        return tuple(int(getattr(layer, "num_attention_heads", 0) or 0) for layer in layers)
    return int(getattr(text, "num_attention_heads", 0) or 0)


def per_layer_configs(config) -> list | None:
    """The config of each layer of a heterogeneous config (one whose layers differ, e.g. in query heads), whose
    global per-layer attributes transformers refuses to read; None for a uniform config (and before releases that
    have `per_layer_config`)."""
    if not getattr(config, "is_heterogeneous", False):
        return None
    return list(config.per_layer_config)
