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

A layer that keeps more than transformers' plain layers (an indexer written by `update_indexer`, a compressor's
buffers the attention writes directly) may change outside the cache methods kvlab records, so each such cache is read
again at the end of every forward (an update event of op "forward" where something changed): the trace ends with
what the cache holds. A model that keeps no transformers `Cache` (its own past tuples or state, as GPT-1, MPT or RWKV
do, or `use_cache=False`) leaves no trace: the block says so in one logged line naming the model type (a warning,
or only an info line when every forward ran with `use_cache=False` though the model caches by default: the caller
asked for it), and
`watch.meta["no_cache"]` is True (so is the `meta` of a trace of a cache the model was handed and never used;
with no cache at all, `watch.trace` raises `NoCacheSeenError` with the same line).

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
from kvlab.log import get_logger
from kvlab.names import dtype_name, model_name
from kvlab.recording.layer_state import layer_kinds, reads_every_change
from kvlab.recording.trace import Trace

log = get_logger(__name__)


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
        self._forwards = 0  # forwards of the model inside the block
        self._uncached = 0  # of which called with use_cache=False
        self.meta: dict = {}  # what the block saw beyond its traces, set on exit (`no_cache`, `forwards`)

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
        if self._handles:  # the first close: say what the block saw
            self._tell_no_cache()
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
        if kwargs.get("use_cache") is False:
            self._uncached += 1
        cache = _compat.forward_cache(kwargs)
        if cache is not None:
            self._see(cache)

    def _after_forward(self, module, args, kwargs, output):
        self._forwards += 1
        cache = _compat.output_cache(output)
        if cache is not None:  # a bare forward with use_cache=True creates its cache inside
            self._see(cache)
        else:
            cache = _compat.forward_cache(kwargs)
        if cache is not None and self._last is not None and self.caches[self._last] is cache:
            _settle(cache)

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

    def _tell_no_cache(self) -> None:
        """One line when the model ran but used no transformers `Cache` (none passed, or one passed and never
        updated, as GPT-1 ignores the cache `generate` hands it): an empty record is not a silent one."""
        unused = self._forwards > 0 and not any(trace.events for trace in self.traces)
        self.meta.update(forwards=self._forwards, no_cache=unused)
        if unused:
            self.meta["model_type"] = _model_type(self.model)
            for trace in self.traces:  # caches handed to the model and never used
                trace.meta.update(no_cache=True, model_type=self.meta["model_type"])
            # every forward ran with use_cache=False though the model caches by default: the caller asked for it
            # (said at info level, they know already); a model whose own default is no cache (MPT) is warned about
            asked = self._uncached == self._forwards and _caches_by_default(self.model)
            (log.info if asked else log.warning)("%s", self._no_cache_line())

    def _no_cache_line(self) -> str:
        return _(
            "kvlab.watch saw {forwards} forwards of {model_type} and no transformers Cache in use (the model keeps "
            "its own past, or none, or ran with use_cache=False): nothing was traced."
        ).format(forwards=self._forwards, model_type=_model_type(self.model))

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
            if self._forwards:
                raise NoCacheSeenError(self._no_cache_line())
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


def _caches_by_default(model) -> bool:
    """The model's config and generation config both leave `use_cache` on (transformers' default)."""
    configs = (model.config, getattr(model, "generation_config", None))
    return all(getattr(config, "use_cache", True) is not False for config in configs)


def _model_type(model) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__)


def _settle(cache) -> None:
    """Read again, at the end of a forward, the layers of `cache` that may change outside the methods kvlab records,
    and log those that did (so the trace ends with what they hold). Plain layers cost one class lookup each."""
    pair = isinstance(cache, _compat.EncoderDecoderCache)
    for part in (cache.self_attention_cache, cache.cross_attention_cache) if pair else (cache,):
        refresh = getattr(part, "_kvlab_refresh", None)  # kvlab's caches (not continuous batching's block pool)
        if refresh is not None and not all(reads_every_change(layer) for layer in part.layers):
            refresh("forward")


def watch(model) -> Watch:
    """A context manager recording every cache `model` uses inside the block (see the module docstring)."""
    return Watch(model)
