"""`kvlab.watch(model)`: record every cache a model uses while a block of unchanged transformers code runs.

    with kvlab.watch(model) as watch:
        model.generate(**inputs, max_new_tokens=20, cache_implementation="static")
    watch.trace.summary()

The guide's code stays the guide's code. On entry, a forward pre-hook and a forward hook are attached to the
model (kvpress's shape: attach, run, detach in `finally`). Each forward's cache, whether `generate` built it, the
user built it (`DynamicCache(config=...)`, `StaticCache(...)`), or the model created it for a bare forward, is
switched in place to its instrumented twin (`kvlab.caches.adopt`): the same object, layers and tensors, with
recording added. Deep copies of a watched cache are watched too. On exit every hook is removed and every cache
goes back to its own transformers class, also when the block raised.

`model.generate_batch(...)` (continuous batching) builds a `PagedAttentionCache` inside its manager: for the
block, transformers' manager builds kvlab's instrumented paged cache instead (`kvlab.caches.paged`), for models
whose layers are all full attention (others run unrecorded, with a warning). That switch is a module global, so a
paged cache any model builds inside the block is recorded here.

Nesting and several models are defined: a cache belongs to the first watch that meets it (an outer watch on the
same model attaches its hooks first); any other watch that sees it lists the same trace. Caches that are already
kvlab's (`kvlab.make_cache`) are listed, never switched back.

One difference from plain transformers, on purpose: an offloaded cache's instrumented twin runs transformers'
offloading schedule without the CUDA stream handshake, so `cache_implementation="offloaded"` also runs on a
CPU-only torch inside a watch (it raises outside one). Everything else behaves as the class it instruments,
token for token, plus kvlab's crop guards, which refuse a crop that would corrupt the cache before any layer
changes.
"""

from __future__ import annotations

import warnings

from kvlab import _compat
from kvlab.caches.adopt import adopt, cache_kind, is_instrumented, release
from kvlab.caches.options import PagedLayoutError
from kvlab.caches.paged import adopt_paged, building_instrumented, check_paged_model, release_paged
from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.names import dtype_name, model_name
from kvlab.recording.layer_state import layer_kinds
from kvlab.recording.trace import Trace


class NoCacheSeenError(KvlabUserError, RuntimeError):
    """`watch.trace` was asked for, but the model used no cache inside the block."""


class Watch:
    """The record of one `with kvlab.watch(model)` block: `traces` (one per cache, in the order first seen)."""

    def __init__(self, model):
        self.model = model
        self.caches: list = []  # every cache seen, in order; kept alive so the id-keyed index stays valid
        self.traces: list[Trace] = []
        self._index: dict[int, int] = {}  # id(cache) -> position in self.caches
        self._adopted: list = []  # (cache, how to switch it back) for each cache this watch switched, undone on exit
        self._handles: list = []
        self._paged_builder = None
        self._paged_refused: str | None = None
        self._last: int | None = None  # position of the cache the model used last

    # -- the block ----------------------------------------------------------------------------------------------
    def __enter__(self) -> Watch:
        self._handles = [
            self.model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
            self.model.register_forward_hook(self._after_forward, with_kwargs=True),
        ]
        try:  # `generate_batch` builds its paged cache inside its manager: have it build the instrumented one
            check_paged_model(self.model)
        except PagedLayoutError as err:
            self._paged_refused = str(err)  # generate_batch still runs, unrecorded (a warning says so)
        else:
            self._paged_builder = building_instrumented(self._built_paged).__enter__()
        return self

    def __exit__(self, *exc_info) -> bool:
        self.close()
        return False

    def close(self) -> None:
        """Detach from the model and give every adopted cache back its own class (idempotent)."""
        try:
            for handle in self._handles:
                handle.remove()
            if self._paged_builder is not None:
                self._paged_builder.__exit__(None, None, None)
        finally:
            self._handles, self._paged_builder = [], None
            while self._adopted:
                cache, give_back = self._adopted.pop()
                give_back(cache)

    # -- what the hooks see -------------------------------------------------------------------------------------
    def _before_forward(self, module, args, kwargs):
        cache = _compat.forward_cache(kwargs)
        if cache is not None:
            self._see(cache)

    def _after_forward(self, module, args, kwargs, output):
        cache = _compat.output_cache(output)
        if cache is not None:  # a bare forward with use_cache=True creates its cache inside
            self._see(cache)

    def _built_paged(self, cache) -> None:
        self._adopted.append((cache, release_paged))
        # its own setup recorded its kind, class, dtype, layer kinds and block geometry
        cache.trace.meta.update(self._watched())
        self._list(cache)

    def _see(self, cache) -> None:
        if isinstance(cache, _compat.PagedAttentionCache):  # not a `Cache`: continuous batching's block pool
            if self._paged_refused is not None:
                warnings.warn(f"kvlab.watch does not record this paged cache: {self._paged_refused}", stacklevel=2)
                self._paged_refused = None  # once per block
                return
            if self._paged_builder is None:
                return
            if id(cache) not in self._index:
                self._built_paged(adopt_paged(cache))  # a persistent manager's cache, first met filled
            self._last = self._index[id(cache)]
            return
        if not isinstance(cache, _compat.Cache):
            return
        if not is_instrumented(cache):
            adopt(cache, self.model.config, owner=self)
            self._adopted.append((cache, release))
            self._describe(cache)
        self._last = self._list(cache)

    def _list(self, cache) -> int:
        if id(cache) not in self._index:
            self._index[id(cache)] = len(self.caches)
            self.caches.append(cache)
            self.traces.append(cache.trace)
        return self._index[id(cache)]

    def _copied(self, original, copy) -> None:
        """Called by a watched cache's `__deepcopy__`: the copy is watched too, its trace starts as a copy."""
        self._adopted.append((copy, release))
        self._list(copy)
        copy.trace.meta["copied_from"] = self._index.get(id(original))
        copy.trace.meta["copied_at_event"] = len(copy.trace.events)

    def _watched(self) -> dict:
        return {"model": model_name(self.model), "watched": True}

    def _describe(self, cache) -> None:
        config = self.model.config
        meta = cache.trace.meta
        meta.update(self._watched())
        meta.update(
            {
                "cache_kind": cache_kind(cache),
                "cache_class": cache._kvlab_original_class.__name__,
                "dtype": dtype_name(self.model.dtype),
                "layer_kinds": layer_kinds(config),
            }
        )
        if meta["cache_kind"] == "quantized":
            meta["options"] = {"backend": cache.backend}

    # -- results ------------------------------------------------------------------------------------------------
    @property
    def trace(self) -> Trace:
        """The trace of the cache the model used last (`traces` has one per cache)."""
        if self._last is None:
            raise NoCacheSeenError(
                _(
                    "the model used no cache inside this kvlab.watch block (use_cache=False, or no forward ran); "
                    "watch.traces is empty."
                )
            )
        return self.traces[self._last]

    def __repr__(self) -> str:
        state = "watching" if self._handles else "closed"
        return f"Watch({type(self.model).__name__}, {len(self.traces)} caches seen, {state})"


def watch(model) -> Watch:
    """A context manager recording every cache `model` uses inside the block (see the module docstring)."""
    return Watch(model)
