"""transformers' paged cache (`model.generate_batch(...)`, continuous batching), instrumented.

`generate_batch` builds a `PagedAttentionCache`: one flat tensor cut into blocks of `page_size` token slots, handed
to requests as they grow and returned when they finish. Inside `kvlab.watch(model)` the manager builds
`InstrumentedPagedAttentionCache`, which calls transformers' own methods untouched and only reads the block tables
afterwards (tokens identical to plain `generate_batch`); a cache already built is switched in place on first forward.

Events, through `Recorder.record_state` (one schema for every cache):
- `update`, one per layer per forward (`op` "kv") and after a request's blocks are released (`op` "free").
  `bytes_held`/`cache_bytes` are the whole pool's storage (allocated up front); `slots_allocated` the slots of
  blocks handed to requests, `slots_live` the token slots written in them (a shared block counts once),
  `slots_masked` the rest: each request's last block's fragmentation. Extra fields: `slots_free`, `slots_cached`
  (complete blocks kept for prefix reuse), `slots_trash` (transformers' trash sectors), `blocks_in_use`,
  `blocks_free`, `blocks_cached`, `requests`.
- the first update of each forward (layer 0, "kv") also carries `block_tables`, `request_tokens`, `scheduled`
  (request -> tokens computed now), `cached_block_ids`, `admitted`, `refused` (no blocks: they wait), `new_blocks`,
  `prefix_hits` (request -> prompt tokens reused from cached blocks), `cached_evicted`.
- the first "free" event of a release carries `request_id`, `reason` ("finished", or "preempted" when transformers
  evicted the request to re-queue it), `blocks_released`, `blocks_to_pool`, `blocks_kept_cached`,
  `blocks_still_shared` (held by another request).

Only paged caches whose layers are all full attention (one allocator) are instrumented (`PagedLayoutError`).
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.cache_kinds import PAGED
from kvlab.caches.options import check_paged_layers
from kvlab.model_facts import model_facts
from kvlab.names import dtype_name, model_name
from kvlab.recording.layer_kinds import layer_kinds
from kvlab.recording.layer_state import LayerState
from kvlab.recording.recorder import Recorder, now
from kvlab.recording.storage import storage_bytes
from kvlab.recording.trace import Trace
from kvlab.recording.work import attention_work, layer_heads, no_work


class InstrumentedPagedAttentionCache(_compat.PagedAttentionCache):
    """`PagedAttentionCache` that records its blocks into `self.trace`."""

    _kvlab_pending: dict  # what the scheduler did since the last forward (`_fresh_pending`), set by `_setup`

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _setup(self)

    @property
    def trace(self) -> Trace:
        return self._kvlab_recorder.trace

    # -- scheduling: which requests get blocks ----------------------------------------------------------------------
    def can_store_request_tokens(self, state, request_len, *args, **kwargs):
        dry_run = kwargs.get("dry_run", args[0] if args else False)
        before = len(_compat.paged_full_allocator(self).block_table.get(state.request_id, []))
        out = super().can_store_request_tokens(state, request_len, *args, **kwargs)
        if not dry_run:
            pending = self._kvlab_pending
            if out:
                after = len(_compat.paged_full_allocator(self).block_table.get(state.request_id, []))
                if after > before:
                    pending["new_blocks"][state.request_id] = (
                        pending["new_blocks"].get(state.request_id, 0) + after - before
                    )
            else:
                pending["refused"][state.request_id] = int(request_len)
        return out

    def search_prefix_match(self, request_id, *args, **kwargs):
        matched = super().search_prefix_match(request_id, *args, **kwargs)
        if matched:
            self._kvlab_pending["prefix_hits"][request_id] = int(matched)
        return matched

    def extend_read_and_write_indices(self, request_id, past_length, query_length, *args, **kwargs):
        out = super().extend_read_and_write_indices(request_id, past_length, query_length, *args, **kwargs)
        self._kvlab_scheduled(request_id, past_length, query_length)
        return out

    def fill_block_table(self, request_id, past_length, query_length, *args, **kwargs):
        out = super().fill_block_table(request_id, past_length, query_length, *args, **kwargs)
        self._kvlab_scheduled(request_id, past_length, query_length)
        return out

    def _kvlab_scheduled(self, request_id, past_length, query_length) -> None:
        if request_id not in self._kvlab_tokens:
            self._kvlab_pending["admitted"].append(request_id)
        self._kvlab_tokens[request_id] = int(past_length) + int(query_length)
        self._kvlab_pending["scheduled"][request_id] = int(query_length)
        self._kvlab_new_batch = True

    # -- the forward: one update per layer ------------------------------------------------------------------------
    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if self._kvlab_new_batch or self._kvlab_step < 0:
            self._kvlab_new_batch = False
            self._kvlab_step += 1
            self._kvlab_recorder.step = self._kvlab_step
            self._kvlab_step_fields = self._kvlab_take_pending()
            self._kvlab_state, self._kvlab_pool = _read_blocks(self, self._kvlab_tokens)
        started = now()
        out = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        seconds = now() - started
        # key_states: (1, kv_heads, tokens of every scheduled request, head_dim); the requests are packed into one
        # row, and attention scores each query against the keys handed back (its own request's, by the mask)
        work = attention_work(key_states, out, layer_heads(self._kvlab_query_heads, layer_idx))
        step_fields, self._kvlab_step_fields = self._kvlab_step_fields, {}
        self._kvlab_record(layer_idx, "kv", int(key_states.shape[-2]), seconds, work, step_fields)
        return out

    # -- blocks coming back ---------------------------------------------------------------------------------------
    def free_blocks(self, request_id, *args, **kwargs):
        no_cache = bool(kwargs.get("no_cache", args[0] if args else False))
        blocks = list(_compat.paged_full_allocator(self).block_table.get(request_id, []))
        _, cached_before = _compat.paged_block_counts(self)
        out = super().free_blocks(request_id, *args, **kwargs)
        self._kvlab_tokens.pop(request_id, None)
        if blocks and self._kvlab_step >= 0:
            kept = _compat.paged_block_counts(self)[1] - cached_before
            in_use = set().union(*_compat.paged_block_tables(self).values())
            shared = sum(1 for b in blocks if b in in_use)  # still held by a request that shares the prefix
            self._kvlab_state, self._kvlab_pool = _read_blocks(self, self._kvlab_tokens)
            detail = {
                "request_id": str(request_id),
                "reason": "preempted" if no_cache else "finished",
                "blocks_released": len(blocks),
                "blocks_to_pool": len(blocks) - shared - kept,
                "blocks_kept_cached": kept,
                "blocks_still_shared": shared,
            }
            for position, layer_idx in enumerate(self._kvlab_layers):
                self._kvlab_record(layer_idx, "free", 0, 0.0, no_work(), detail if position == 0 else {})
        return out

    def evict_cached_blocks(self, *args, **kwargs):
        evicted = super().evict_cached_blocks(*args, **kwargs)
        if evicted:
            self._kvlab_pending["cached_evicted"] = True
        return evicted

    # -- recording ---------------------------------------------------------------------------------------------------
    def _kvlab_take_pending(self) -> dict:
        pending, self._kvlab_pending = self._kvlab_pending, _fresh_pending()
        return {
            "block_tables": _compat.paged_block_tables(self),
            "cached_block_ids": _compat.paged_cached_block_ids(self),
            "request_tokens": dict(self._kvlab_tokens),
            **pending,  # scheduled, admitted, refused, new_blocks, prefix_hits, cached_evicted
        }

    def _kvlab_record(
        self, layer_idx: int, op: str, tokens_added: int, seconds: float, work: dict, extra: dict
    ) -> None:
        """One update event: every layer holds one page of each block, so the pool's state is each layer's."""
        self._kvlab_recorder.record_state(
            "self",
            int(layer_idx),
            self._kvlab_state,
            op,
            tokens_added,
            seconds,
            work,
            {**self._kvlab_pool, **extra},
        )


def _fresh_pending() -> dict:
    return {
        "scheduled": {},
        "admitted": [],
        "refused": {},
        "new_blocks": {},
        "prefix_hits": {},
        "cached_evicted": False,
    }


def _read_blocks(cache, tokens: dict[str, int]) -> tuple[LayerState, dict]:
    """What every layer holds, read from the allocator: the slots of the blocks in use and the token slots written
    in them (a `LayerState`), and the pool's own fields (blocks in use / free / cached, their slots, requests)."""
    page = cache._kvlab_geometry["page_size"]
    tables = _compat.paged_full_allocator(cache).block_table
    fill: dict[int, int] = {}
    for request_id, blocks in tables.items():
        length = tokens.get(request_id, 0)
        for position, block in enumerate(blocks):
            held = min(max(length - position * page, 0), page)
            fill[block] = max(fill.get(block, 0), held)  # a shared block counts once
    free, cached = _compat.paged_block_counts(cache)
    allocated, live = len(fill) * page, sum(fill.values())
    state = LayerState(
        "full",
        sum(tokens.get(r, 0) for r in tables),  # logical_length: the tokens of every request holding blocks
        allocated,
        live,
        allocated - live,  # slots_masked: the empty slots of each request's last block
        0,
        cache._kvlab_layer_bytes,
        cache._kvlab_device,
    )
    pool = {
        "slots_free": free * page,
        "slots_cached": cached * page,
        "slots_trash": cache._kvlab_geometry["trash_blocks"] * page,
        "blocks_in_use": len(fill),
        "blocks_free": free,
        "blocks_cached": cached,
        "requests": len(tables),
    }
    return state, pool


def _setup(cache, first_seen: bool = False) -> None:
    geometry = _compat.paged_geometry(cache)
    total = storage_bytes(cache.cache_tensor)
    layers = list(_compat.paged_full_allocator(cache).layer_indices)
    cache._kvlab_geometry = geometry
    cache._kvlab_layers = layers
    cache._kvlab_layer_bytes = total // len(layers)  # every block holds one page per layer: equal shares
    cache._kvlab_device = str(cache.cache_tensor.device)
    config = getattr(cache, "config", None)
    cache._kvlab_query_heads = 0 if config is None else model_facts(config).query_heads
    cache._kvlab_step = -1
    cache._kvlab_new_batch = False
    cache._kvlab_pending = _fresh_pending()
    cache._kvlab_step_fields = {}
    cache._kvlab_tokens = {}
    cache._kvlab_recorder = Recorder(
        Trace(
            meta={
                "cache_kind": PAGED,
                "cache_class": _compat.PAGED_CACHE_NAME,
                "dtype": dtype_name(cache.dtype),
                "layer_kinds": ["full"] * len(layers),
                "paged": {**geometry, "storage_bytes": total},
            }
        )
    )
    cache._kvlab_recorder.cache_bytes = total  # the pool, allocated up front
    if first_seen:
        cache.trace.meta["first_seen_requests"] = len(_compat.paged_block_tables(cache))
    cache._kvlab_state, cache._kvlab_pool = _read_blocks(cache, cache._kvlab_tokens)


def adopt_paged(cache) -> InstrumentedPagedAttentionCache:
    """Switch an existing PagedAttentionCache to the instrumented class, in place (recorded from now on)."""
    if not isinstance(cache, InstrumentedPagedAttentionCache):
        cache.__class__ = InstrumentedPagedAttentionCache
        _setup(cache, first_seen=True)
    return cache


def release_paged(cache) -> None:
    """Give an instrumented paged cache its own transformers class back (its trace stays readable via the watch)."""
    if isinstance(cache, InstrumentedPagedAttentionCache):
        cache.__class__ = _compat.PagedAttentionCache


def check_paged_model(model) -> None:
    """Refuse, in kvlab's words and before anything runs, a model whose paged cache kvlab cannot instrument."""
    check_paged_layers(layer_kinds(model.config), model_name(model))


class building_instrumented:  # lower case: used as a function, `with building_instrumented(on_build):`
    """While the block runs, the continuous-batching manager builds `InstrumentedPagedAttentionCache` and
    `on_build(cache)` is told of each; the manager looks the class up as a module global, switched for the block."""

    def __init__(self, on_build):
        self.on_build = on_build

    def _build(self, *args, **kwargs):
        cache = InstrumentedPagedAttentionCache(*args, **kwargs)
        self.on_build(cache)
        return cache

    def __enter__(self):
        self.original = getattr(_compat.PAGED_CACHE_MODULE, _compat.PAGED_CACHE_NAME)
        setattr(_compat.PAGED_CACHE_MODULE, _compat.PAGED_CACHE_NAME, self._build)
        return self

    def __exit__(self, *exc_info) -> None:
        setattr(_compat.PAGED_CACHE_MODULE, _compat.PAGED_CACHE_NAME, self.original)
