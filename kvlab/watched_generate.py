"""`kvlab.generate`: `model.generate` with `cache_implementation=` / `cache_config=`, recorded by kvlab.

transformers builds the cache exactly as its `generate` does for the same arguments (max_length, beams, the
largest static size used before), and kvlab instruments that very object in place (`kvlab.caches.adopt`): sizing
it here once allocated one slot more than transformers. The request is checked (`kvlab.request`) from inside
`generate`, after it has fixed `max_length` and before it builds the cache. Two kvlab options go beyond
transformers' names: `max_cache_len` (also in `cache_config`) is passed on as generate's own, and
`offload_only_non_sliding` (in `cache_config`) is applied to the offloaded cache transformers built.
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches.adopt import adopt
from kvlab.caches.options import check_cache_kind, check_prompt_length
from kvlab.i18n import _
from kvlab.model_facts import model_facts
from kvlab.recording.recorder import Recorder
from kvlab.recording.trace import Trace
from kvlab.request import Request
from kvlab.rules import check

INPUT_TENSORS = ("attention_mask", "inputs_embeds", "token_type_ids", "position_ids")


def on_model_device(model, input_ids, generate_kwargs: dict):
    """`input_ids` and the input tensors among `generate_kwargs`, moved to `model.device` (a no-op where they are)."""
    device = model.device
    for name in INPUT_TENSORS:
        if hasattr(generate_kwargs.get(name), "to"):
            generate_kwargs[name] = generate_kwargs[name].to(device)
    return input_ids.to(device) if hasattr(input_ids, "to") else input_ids


def cache_device(model):
    """Where the model's cache will live: `model.device`, or None for a model `device_map` spread over several
    devices (each layer caches where it runs: no memory to check against)."""
    placed = set((getattr(model, "hf_device_map", None) or {}).values())
    return None if len(placed) > 1 else model.device


def check_prompt(inputs) -> int | None:
    """The prompt length of (batch, tokens) ids or (batch, tokens, hidden) embeddings; an empty one is refused."""
    length = int(inputs.shape[1]) if getattr(inputs, "ndim", 0) >= 2 else None
    check_prompt_length(length)
    return length


def generate(
    model,
    input_ids,
    *,
    cache_implementation: str | None = None,
    cache_config: dict | None = None,
    max_cache_len: int | None = None,
    trace: Trace | None = None,
    allow_past_positions: bool = False,
    **generate_kwargs,
):
    """(generate's output, the instrumented cache it used; None with `use_cache=False`). `cache_implementation=None`
    is transformers' pick; `allow_past_positions` generates past max_position_embeddings (refused by default)."""
    if any(name in generate_kwargs for name in _compat.FORWARD_CACHE_KWARGS):
        raise ValueError(
            _(
                "kvlab.generate builds its cache from cache_implementation; to pass a cache object, call "
                "model.generate(..., {keyword}=kvlab.make_cache(...)) or wrap it in kvlab.watch(model)"
            ).format(keyword=_compat.cache_kwarg(model))
        )
    input_ids = on_model_device(model, input_ids, generate_kwargs)
    prompt_tokens = check_prompt(input_ids if input_ids is not None else generate_kwargs.get("inputs_embeds"))
    if cache_implementation is not None:
        check_cache_kind(cache_implementation)
        generate_kwargs["cache_implementation"] = cache_implementation
    options = dict(cache_config or {})
    length = options.pop("max_cache_len", None) if max_cache_len is None else max_cache_len
    offload = options.pop("offload_only_non_sliding", None)
    if length is not None:
        generate_kwargs["max_cache_len"] = length
    if options:
        generate_kwargs["cache_config"] = options
    built: dict = {}
    facts = model_facts(model.config)  # read once: the option, memory and position checks all take it

    def before(generation_config, batch_size: int, max_cache_length: int) -> None:
        # max_cache_length is max_length - 1: the tokens the cache will hold, and the positions the model is fed
        cache_kind = "none" if generation_config.use_cache is False else generation_config.cache_implementation
        cache_kind = cache_kind or "dynamic"
        config = dict(generation_config.cache_config or {}) if cache_kind == "quantized" else {}
        # what this call set (a generation config's own max_cache_len is transformers' business, as in generate)
        extra = {"max_cache_len": length, "offload_only_non_sliding": offload} if cache_kind != "none" else {}
        beams = max(generation_config.num_beams or 1, generation_config.num_return_sequences or 1)
        check(
            Request(
                cache_kind,
                {**config, **extra},
                facts,
                prompt_tokens=prompt_tokens,
                cached_tokens=max_cache_length,
                batch=batch_size * beams,
                dtype=model.dtype,
                device=cache_device(model),
                allow_past_positions=allow_past_positions,
                generate_sizes=True,
                length_is_minimum=True,  # generate sizes a static cache at max(max_length - 1, max_cache_len)
            )
        )
        built["cache_kind"] = cache_kind

    def after(cache):
        adopt(cache, model.config, recorder=Recorder(trace))
        if offload is not None:
            _compat.set_offload_only_non_sliding(cache, offload)
        cache.trace.meta.setdefault("cache_kind", built["cache_kind"])
        built["cache"] = cache
        return cache

    with _compat.generate_cache_hook(model, before, after):
        output = model.generate(input_ids, **generate_kwargs)
    return output, built.get("cache")
