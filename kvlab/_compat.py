"""Everything kvlab knows about one transformers release: the cache internals it reads move between releases (2026:
`crop` by negative counts; 5.24: `generate(past_key_values=...)` renamed `generate(cache=...)`), so each is named
here once and checked by `tests/test_compat.py`; `.ci/oldest-transformers` tests the floor of the range. Importing
it imports neither torch nor transformers (`kvlab size` and `--help` read only constants): `__getattr__` imports
the transformers classes on first use.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from importlib import metadata
from typing import TYPE_CHECKING

from kvlab.extras import MissingExtraError
from kvlab.i18n import _
from kvlab.log import get_logger
from kvlab.quantized_backends import BACKENDS, DEFAULT_BACKEND

if TYPE_CHECKING:
    import torch
    from transformers.cache_utils import Cache, QuantizedCache, StaticSlidingWindowLayer

_CACHE_UTILS = """
BaseQuantizedLayer Cache CacheLayerMixin DummyLayer DynamicCache DynamicLayer
DynamicSlidingWindowLayer EncoderDecoderCache Fp8QuantizedLayer HQQQuantizedLayer
LinearAttentionCacheLayerMixin LinearAttentionLayer QuantizedCache QuantizedLayer
QuantoQuantizedLayer StaticCache StaticLayer StaticSlidingWindowLayer
"""
_LAZY = {
    **dict.fromkeys(_CACHE_UTILS.split(), "transformers.cache_utils"),
    "PagedAttentionCache": "transformers.generation.continuous_batching.cache",
    "BaseStreamer": "transformers.generation.streamers",  # where 5.24 keeps the streamer base class
    "ContinuousBatchingConfig": "transformers",
    "FULL_ATTENTION": "transformers.generation.continuous_batching.cache_allocators",
}
_MODULES = {
    "cache_utils": "transformers.cache_utils",
    "PAGED_CACHE_MODULE": "transformers.generation.continuous_batching.continuous_api",
}

# The floor is the first release with every cache the guide teaches: QuantizedCache's "fp8" backend
# (`Fp8QuantizedLayer`) first ships in 5.21.0; the rest (crop by negative counts, activate_past_recording,
# offloaded_static, offload_only_non_sliding) is already in 5.20. Releases after 5.25 are untested: kvlab refuses
# them in one line, unless `KVLAB_UNTESTED_TRANSFORMERS=1` asks to try one (`.ci/newest-transformers` does, to find
# what the next release breaks before a user does).
SUPPORTED_TRANSFORMERS = ">=5.21,<5.26"
TRANSFORMERS_VERSION = metadata.version("transformers")
logger = get_logger(__name__)
UNTESTED_OPT_IN = "KVLAB_UNTESTED_TRANSFORMERS"  # =1: try a release newer than the range
_WARNED_UNTESTED: set[str] = set()


class UnsupportedTransformersError(MissingExtraError):
    """Outside `SUPPORTED_TRANSFORMERS`: one line, not a failure deep in a generate (a kwarg rejected, a None)."""


class _NoDummyLayer:
    """`DummyLayer` before 5.23, which has none: no layer is one (a "moe" or "mlp" layer is an empty
    LinearAttentionLayer there, which kvlab already reads as holding no tokens)."""


def __getattr__(name: str):
    if name not in _LAZY and name not in _MODULES and name != "QUANTIZED_LAYER_BACKENDS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    check_transformers()  # the first transformers class kvlab asks for: a release outside the range says so here
    if name == "DummyLayer":
        value = getattr(_cu(), name, _NoDummyLayer)
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    else:  # layer class -> the backend name; 5.24 keeps only the class
        value = {getattr(_cu(), row.layer_class): row.name for row in BACKENDS}
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def _cu():
    return __getattr__("cache_utils")


def transformers_release(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of a version (the installed one by default): every difference kvlab handles came with one."""
    from packaging.version import Version

    release = Version(version or TRANSFORMERS_VERSION).release
    return release[0], release[1]


def check_transformers(version: str | None = None) -> None:
    """Refuse a `version` (default: the installed one) outside the range; pre-releases of one in it are in it.
    A release newer than the range runs, with one warning, where `KVLAB_UNTESTED_TRANSFORMERS=1` opts in: kvlab's
    reads of a newer cache API may be wrong there, but a user (and CI's newest-release step) may try. An older
    release lacks classes kvlab instruments: no opt-in."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    version = version or TRANSFORMERS_VERSION
    supported = SpecifierSet(SUPPORTED_TRANSFORMERS)
    if supported.contains(version, prereleases=True):
        return
    newer = all(Version(version) >= Version(spec.version) for spec in supported if spec.operator == ">=")
    if newer and os.environ.get(UNTESTED_OPT_IN) == "1":
        if version not in _WARNED_UNTESTED:
            _WARNED_UNTESTED.add(version)
            logger.warning(
                _(
                    "untested on transformers {version} (kvlab supports {supported}): trying it, as {name}=1 asks"
                ).format(version=version, supported=SUPPORTED_TRANSFORMERS, name=UNTESTED_OPT_IN)
            )
        return
    raise UnsupportedTransformersError(
        _(
            "kvlab supports transformers {supported}, but {version} is installed: pip install 'transformers{supported}'"
        ).format(supported=SUPPORTED_TRANSFORMERS, version=version)
    )


# `generate`/`forward` take the cache under this keyword: 5.24 renamed `past_key_values` to `cache` (the old name
# still works there, deprecated). Passing `cache=` to 5.21-5.23 fails ("model_kwargs are not used: ['cache']").
CACHE_KWARG = "cache" if transformers_release() >= (5, 24) else "past_key_values"
# Every keyword a forward may get its cache under: `cache` (5.24; continuous batching passes its paged cache as
# `cache=` in every release), `past_key_values` (before 5.24, and the cache guide's samples), `cache_params` (the
# Mamba family before 5.24).
FORWARD_CACHE_KWARGS = ("cache", "past_key_values", "cache_params")
# The model-output field holding the cache the forward used or created: renamed with the keyword in 5.24.
OUTPUT_CACHE_FIELDS = ("cache",) if CACHE_KWARG == "cache" else ("past_key_values", "cache_params")


def masked_lm_model_types() -> frozenset[str]:
    """Model types with a masked-LM head: bidirectional encoders (no cache to size), unless their config makes them
    a decoder (`is_decoder`, XLM's `causal`)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return frozenset(MODEL_FOR_MASKED_LM_MAPPING_NAMES)


def layer_types(config) -> list[str]:
    types, _ = _cu().get_layer_types_and_kwargs(config.get_text_config(decoder=True))
    return list(types)


def is_linear_layer(layer) -> bool:
    """A pure linear-attention (Mamba/SSM/conv) layer: a recurrent state, no per-token keys and values."""
    cu = _cu()
    return isinstance(layer, cu.LinearAttentionCacheLayerMixin) and not isinstance(layer, cu.CacheLayerMixin)


def linear_states(layer) -> list[torch.Tensor]:
    """The conv and recurrent state tensors (none before the first update), and the recurrent states a layer records
    to roll back (`recorded_states`): every one of them is memory the layer holds."""
    import torch

    states = [getattr(layer, name, None) for name in ("conv_states", "recurrent_states")]  # {state_idx: tensor | None}
    current = [v for each in states if isinstance(each, dict) for v in each.values() if isinstance(v, torch.Tensor)]
    return current + recorded_states(layer)


# -- 5.25: a linear-attention layer rolls back. `activate_past_recording(recurrent_states_to_keep=N)` makes it keep
# a copy of its recurrent state before every token (`recurrent_states_history`, {state_idx: [tensor, ...]}: one per
# decoded token, and the last N of a multi-token forward) and counts its own tokens (`cumulative_length_linear`, a
# 0-d tensor); `crop(-n)` puts back the state n tokens earlier and empties the history. Before 5.25 the layer's
# `activate_past_recording()` takes no argument and its `crop` trims the conv states but keeps the newest recurrent
# state. Both are read from the layer, never from the version.
ROLLBACK_RELEASE = "5.25"  # named in the refusal on an older release only


def is_linear_state_layer(layer) -> bool:
    """A layer with linear-attention states, alone or beside keys and values (a hybrid layer)."""
    return isinstance(layer, _cu().LinearAttentionCacheLayerMixin)


def keeps_recurrent_states(layer) -> bool:
    """Whether the layer can record recurrent states to roll back (its `activate_past_recording` takes
    `recurrent_states_to_keep`)."""
    import inspect

    record = getattr(layer, "activate_past_recording", None)
    return record is not None and "recurrent_states_to_keep" in inspect.signature(record).parameters


def recorded_states(layer) -> list[torch.Tensor]:
    """The recurrent states the layer keeps to roll back (none unless it records the past)."""
    import torch

    history = getattr(layer, "recurrent_states_history", None)
    if not isinstance(history, dict):
        return []
    lists = {id(each): each for each in history.values() if isinstance(each, list)}  # 5.25 shares one list
    return [t for each in lists.values() for t in each if isinstance(t, torch.Tensor)]


def linear_tokens_seen(layer) -> int | None:
    """The tokens a linear-attention layer counted (`cumulative_length_linear`); None where it counts none."""
    count = getattr(layer, "cumulative_length_linear", None)
    return None if count is None else int(count)


def recording_linear(layer) -> bool:
    return bool(getattr(layer, "record_past", False))


def restored_states(layer) -> int:
    """The recurrent states a crop of this layer puts back from its history (0 where it restores none)."""
    if not (recording_linear(layer) and keeps_recurrent_states(layer)):
        return 0
    return sum(bool(done) for done in getattr(layer, "is_recurrent_states_initialized", {}).values())


def tokens_recorded(layer) -> int | None:
    """Tokens a recording linear-attention layer saw since its recording began or since its last crop, read from
    its conv states (None where it has none): they keep every input since then, after the conv window they held
    when the recording began (none if it began before the first token). Where both readings fit (a window's worth
    of tokens before the recording), or where the layer counts no tokens (before 5.25), the smaller reading of the
    tokens the history covers: the crop rules then allow a token less, never a wrong state."""
    import torch

    seen = linear_tokens_seen(layer)
    conv, window = getattr(layer, "conv_states", {}).get(0), getattr(layer, "conv_kernel_size", {}).get(0)
    if not isinstance(conv, torch.Tensor) or window is None:
        return None
    held = int(conv.shape[-1])  # (batch, channels, inputs kept)
    return seen if held == seen else max(held - int(window), 0)


def restorable_tokens(layer) -> int | None:
    """How many tokens `crop` can take back from a recording linear-attention layer and restore it exactly; None
    where its release cannot restore its recurrent state (`is_croppable` False, or no `recurrent_states_to_keep`).

    A layer with a conv state only rolls back by its conv states, which keep every token recorded. The recurrent
    history holds one state per token only when each forward kept all of its tokens' states: a forward longer than
    `recurrent_states_to_keep` adds the state from before it, then its last N-1, so the history's oldest entry is
    not the state from that many tokens back (transformers would restore it all the same), and the history is
    shorter than the tokens recorded."""
    recorded = tokens_recorded(layer)
    initialized = [i for i, done in getattr(layer, "is_recurrent_states_initialized", {}).items() if done]
    if not initialized:
        return recorded or 0
    if not (keeps_recurrent_states(layer) and getattr(layer, "is_croppable", True)):
        return None
    kept = min(len(layer.recurrent_states_history[i]) for i in initialized)
    if recorded is None or kept >= recorded:
        return kept if recorded is None else recorded
    return max(kept - 1, 0)


def static_sliding_length(layer: StaticSlidingWindowLayer) -> int:
    """Tokens seen: a python int kept beside the tensor, to stay compile-friendly."""
    return int(layer.cumulative_length_int)


def quantized_payload(layer):
    """The quantized keys and values: backend objects (tuples, QTensors) or None."""
    return layer._quantized_keys, layer._quantized_values


def offloaded_update(cache: Cache, key_states, value_states, layer_idx: int, *args, **kwargs):
    """`Cache.update`'s offloading schedule (5.24) in its order (wait for the previous prefetch, prefetch the next
    layer, update, offload), with the CUDA stream handshake only on CUDA: transformers calls
    `torch.cuda.default_stream` unconditionally ("Torch not compiled with CUDA enabled" on a CPU-only build)."""
    if cache.layer_class_to_replicate is not None:
        while len(cache.layers) <= layer_idx:
            cache.layers.append(cache.layer_class_to_replicate())
    if key_states.device.type == "cuda":
        import torch

        torch.cuda.default_stream(key_states.device).wait_stream(cache.prefetch_stream)
        cache.prefetch_stream.wait_stream(torch.cuda.default_stream(key_states.device))
    cache.prefetch(layer_idx + 1, cache.only_non_sliding)
    keys, values = cache.layers[layer_idx].update(key_states, value_states, *args, **kwargs)
    cache.offload(layer_idx, cache.only_non_sliding)
    return keys, values


def cache_kwarg(model) -> str:
    """The keyword `model.generate` and `model(...)` take a cache under: `cache` for every model in 5.24; before,
    `past_key_values`, except the Mamba family's `cache_params` (transformers tells them apart by class name)."""
    mamba_before_5_24 = CACHE_KWARG != "cache" and "mamba" in type(model).__name__.lower()
    return "cache_params" if mamba_before_5_24 else CACHE_KWARG


def forward_cache(kwargs: dict):
    """The cache a forward was called with, or None (plain loops: this runs twice per forward under a watch)."""
    for name in FORWARD_CACHE_KWARGS:
        cache = kwargs.get(name)
        if cache is not None:
            return cache
    return None


def output_cache(output):
    """The cache a forward's output holds, or None."""
    for name in OUTPUT_CACHE_FIELDS:
        cache = getattr(output, name, None)
        if cache is not None:
            return cache
    return None


def is_offloading(cache: Cache) -> bool:
    """A Dynamic/StaticCache built with `offloading=True` (an attribute, not a class, in 5.24)."""
    return bool(getattr(cache, "offloading", False))


def quantized_backend(cache: QuantizedCache) -> str:
    """The backend name a QuantizedCache was built with (5.24 keeps only its layer class)."""
    for layer_class, name in __getattr__("QUANTIZED_LAYER_BACKENDS").items():
        if cache.layers and isinstance(cache.layers[0], layer_class):
            return name
    raise TypeError(_("unknown quantized layer class {layer_class}").format(layer_class=type(cache.layers[0]).__name__))


def quantized_cache_refusal(config, backend: str = DEFAULT_BACKEND, **options) -> str | None:
    """The ValueError transformers' own QuantizedCache raises when built for `config` with `backend` and the
    group-wise `options` (a sliding or linear-attention layer, an unknown backend, options the backend refuses), as
    text; None where it builds. It checks the layer types before it makes any quantizer, so that refusal needs no
    backend installed; any other failure (ImportError: a backend's package missing) is the caller's to judge."""
    try:
        __getattr__("QuantizedCache")(backend, config, **options)
    except ValueError as err:
        return str(err)
    return None


def is_stream(value) -> bool:
    import torch

    return isinstance(value, torch.Stream)


def new_stream_like(stream: torch.Stream) -> torch.Stream:
    """A fresh stream on `stream`'s device: offloaded caches hold one for prefetching, and streams cannot be copied."""
    import torch

    return torch.Stream(device=stream.device)


@contextlib.contextmanager
def generate_cache_hook(model, before, after):
    """While the block runs, `model.generate` calls `before(generation_config, batch_size, max_cache_length)` just
    before it builds its own cache, and `after(cache)` on it (the return value replaces it). 5.24 builds it in
    `_prepare_cache_for_generation(generation_config, model_kwargs, generation_mode, batch_size, max_cache_length)`
    once `max_length` is final: `max_cache_length` is `max_length - 1` (what a static cache is sized for, before
    `max_cache_len` and the model's `_previous_max_cache_length`), `batch_size` is before beams. An instance
    attribute shadows the method for the block only."""
    name = "_prepare_cache_for_generation"
    shadowed, original = name in vars(model), getattr(model, name)

    def hooked(generation_config, model_kwargs, generation_mode, batch_size, max_cache_length):
        before(generation_config, batch_size, max_cache_length)
        out = original(generation_config, model_kwargs, generation_mode, batch_size, max_cache_length)
        kwarg = cache_kwarg(model)  # where generate put the cache it built
        cache = model_kwargs.get(kwarg)
        if cache is not None and not getattr(cache, "_is_user_defined", False):
            model_kwargs[kwarg] = after(cache)
        return out

    setattr(model, name, hooked)
    try:
        yield
    finally:
        if shadowed:
            setattr(model, name, original)
        else:
            delattr(model, name)


def static_cache_length(cache) -> int:
    """The slots a StaticCache allocates per full-attention layer (its sliding layers hold min(window, that))."""
    cache = getattr(cache, "self_attention_cache", cache)
    return max(int(layer.max_cache_len) for layer in cache.layers if isinstance(layer, _cu().StaticLayer))


# -- continuous batching (`model.generate_batch`): 5.24's ContinuousBatchingManager builds its cache as
# `continuous_api.PagedAttentionCache(...)` (a module global, looked up when the batch processor is created), passed
# to each forward as `cache=`. One flat uint8 tensor (`cache_tensor`) holds every block; its first two sectors are
# trash (padding reads and writes), never allocated. Each attention type has one allocator: `block_table` maps a
# request id to its block ids, `ledger` keeps complete blocks cached for prefix sharing; the shared `pool` holds free
# sectors and blocks. Blocks go back through `free_blocks(request_id)`, a preempted request's (cache full) through
# `free_blocks(request_id, no_cache=True)` (OffloadingManager.offload_requests), then it is re-queued.
PAGED_CACHE_NAME = "PagedAttentionCache"
PAGED_ATTN_IMPLEMENTATION = "paged|eager"  # continuous batching without flash attention (CPU)
PAGED_TRASH_SECTORS = 2


def default_page_size() -> int:
    """Tokens per block when `generate_batch` is given no `page_size`: `ContinuousBatchingConfig`'s default (256
    in 5.25; a dataclass keeps a field's plain default as its class attribute)."""
    return int(__getattr__("ContinuousBatchingConfig").page_size)


@contextlib.contextmanager
def paged_attention(model):
    """`model` on the attention continuous batching needs without flash attention; its own back after, even on error."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(PAGED_ATTN_IMPLEMENTATION)
    try:
        yield model
    finally:
        model.set_attn_implementation(previous)


def paged_full_allocator(cache):
    """The allocator of a PagedAttentionCache whose layers are all full attention (else TypeError)."""
    allocators, full = cache.cache_allocators, __getattr__("FULL_ATTENTION")
    if list(allocators) != [full]:
        raise TypeError(
            _("paged cache with allocators {allocators}: kvlab instruments full attention only").format(
                allocators=list(allocators)
            )
        )
    return allocators[full]


def paged_geometry(cache) -> dict:
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
    allocator, pool = paged_full_allocator(cache), cache.pool
    free = pool.count_free_blocks(allocator.index) + pool.num_free_sectors * allocator.blocks_per_sector
    return int(free), len(allocator.ledger.cached_blocks)


def paged_cached_block_ids(cache) -> list[int]:
    return sorted(paged_full_allocator(cache).ledger.cached_blocks)


# -- what kvlab's option and crop rules read from layers and configs -----------------------------------------------
def layer_flags(config) -> list[tuple[bool, bool]]:
    """(attention, sliding) per layer of a decoder config, as this release's DynamicCache lays them out (lazily:
    nothing is allocated). Linear-attention and dummy layers are not attention; offloading skips them (before
    5.23 there are no dummy layers: "moe"/"mlp" layers are linear-attention ones, skipped the same way)."""
    empty = __getattr__("DynamicCache")(config=config.get_text_config(decoder=True))
    dummies = getattr(empty, "is_dummy", [False] * len(empty.layers))
    attention = [not (linear or dummy) for linear, dummy in zip(empty.is_linear, dummies)]
    return list(zip(attention, empty.is_sliding))


def dynamic_sliding_state(layer) -> tuple[int, int, bool] | None:
    """(tokens seen, sliding window, records the past) of a DynamicCache sliding/chunked layer, else None. 5.24's
    DynamicSlidingWindowLayer keeps the last `sliding_window - 1` tokens unless `record_past` is set."""
    if not isinstance(layer, __getattr__("DynamicSlidingWindowLayer")):
        return None
    return int(layer.get_seq_length()), int(layer.sliding_window), bool(layer.record_past)


def static_sliding_state(layer) -> tuple[int, int] | None:
    """(tokens seen, slots of its window) of a StaticCache sliding layer that holds tokens, else None."""
    if not isinstance(layer, __getattr__("StaticSlidingWindowLayer")) or not layer.is_initialized:
        return None
    return static_sliding_length(layer), int(layer.max_cache_len)


def crop_static_layer(layer, tokens_to_remove: int) -> None:
    """`layer.crop(tokens_to_remove)` for a StaticCache layer (kvlab's crop rules refuse positive counts). 5.24's
    static layers crop by rewinding their token count (the next update overwrites the slots past it; a sliding one
    only while it has not wrapped, which kvlab's rules check). Before 5.24 they have no `crop`, so kvlab does the
    same ("'StaticLayer' object has no attribute 'crop'")."""
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
    """Tokens in a quantized layer's full-precision residual (its `keys` are empty before the first update)."""
    return layer.keys.shape[-2] if layer.keys.dim() == 4 else 0


def crop_quantized_length(layer, tokens_to_remove: int) -> None:
    """5.24's QuantizedLayer.crop shortens the residual but not `cumulative_length`: shift the count as well."""
    layer.cumulative_length += tokens_to_remove


def set_offload_only_non_sliding(cache, value: bool) -> None:
    """Which layers an offloaded Dynamic/StaticCache offloads (5.24 keeps it as `only_non_sliding`)."""
    getattr(cache, "self_attention_cache", cache).only_non_sliding = value


def drop_quantizer(model) -> None:
    """Forget how the weights were quantized (a GGUF load): 5.24 refuses `save_pretrained` while the model keeps its
    `hf_quantizer` and its config a `quantization_config`, even once every tensor is dequantized."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def compile_config_all_devices(**options):
    """A `CompileConfig(**options)` that `generate` honours on every device: transformers compiles the decoding
    forward only on accelerators unless the private `_compile_all_devices` is set (for testing on e.g. a CPU)."""
    from transformers import CompileConfig

    config = CompileConfig(**options)
    config._compile_all_devices = True
    return config


def cache_layer_class(name: str) -> type | None:
    """transformers' cache layer class `name`, None where this release has none (DummyLayer came with 5.23, the
    indexed layers and the hybrid linear-attention ones later)."""
    return getattr(_cu(), name, None)


def storage_identity(tensor: torch.Tensor) -> int:
    """One number per storage, equal for every view of it, on any device: a meta tensor's `data_ptr()` is 0, so the
    storage object's own handle (`_cdata`, torch 2.x) tells them apart."""
    return tensor.untyped_storage()._cdata


def query_heads(text) -> int | tuple[int, ...]:
    """Query heads of a decoder config: one count, or one per layer for a heterogeneous config (one whose layers
    differ, whose global per-layer attributes transformers refuses to read; releases before `per_layer_config` have
    none); 0 where it names none."""
    if getattr(text, "is_heterogeneous", False):
        return tuple(int(getattr(layer, "num_attention_heads", 0) or 0) for layer in text.per_layer_config)
    return int(getattr(text, "num_attention_heads", 0) or 0)
