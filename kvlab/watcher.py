"""`kvlab.watch(model)`: record every cache a model uses while a block of unchanged transformers code runs.

    with kvlab.watch(model) as watch:
        model.generate(**inputs, max_new_tokens=20, cache_implementation="static")
    watch.trace.summary()

Forward hooks switch each cache the model meets, in place, to its instrumented twin (`kvlab.caches.adopt`: same
object, layers and tensors); on exit, even after an error, every hook is removed and every cache gets its own class
back. `generate_batch`'s paged cache is built instrumented for the block (a module-global switch, so any model's).
A plain `DynamicCache`, the default, runs each forward with transformers' own `update` and is read once the forward
ended (`kvlab.caches.forward_read`: the same events, each update's own seconds null), so watching it costs a read
per layer per step and no call per update. A cache belongs to the first watch that meets it; other watches list
the same trace. A model that keeps no transformers `Cache` leaves no trace and one logged line says so.
One difference on purpose: the offloaded twin skips transformers' CUDA stream handshake, so
`cache_implementation="offloaded"` also runs on a CPU-only torch inside a watch.
"""

from __future__ import annotations

import warnings

from kvlab import _compat
from kvlab.caches.adopt import CannotInstrumentError, adopt, cache_kind, is_instrumented, release
from kvlab.caches.forward_read import read_after_forward
from kvlab.caches.options import PagedLayoutError
from kvlab.caches.paged import adopt_paged, building_instrumented, check_paged_model, release_paged
from kvlab.errors import KvlabUserError
from kvlab.i18n import N_, _
from kvlab.log import get_logger
from kvlab.names import dtype_name, model_name
from kvlab.recording.layer_state import reads_every_change
from kvlab.recording.recorder import now
from kvlab.recording.trace import Trace

log = get_logger(__name__)
NOTHING_RAN = N_(
    "the model used no cache inside this kvlab.watch block (use_cache=False, or no forward ran); watch.traces is empty."
)


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
        self._unwatched: dict[int, object] = {}  # id -> a cache kvlab cannot instrument (kept alive: ids stay valid)
        self._handles: list = []
        self._paged_builder = None
        self._paged_refused: str | None = None
        self._last_cache = None  # the cache the model used last: met again (every forward of a generate), nothing new
        self._read_after = None  # the cache the running forward updates unrecorded until it ends (`read_after_forward`)
        self._forwards = 0  # forwards of the model inside the block
        self._uncached = 0  # of which called with use_cache=False
        self.meta: dict = {}  # what the block saw beyond its traces, set on exit (`no_cache`, `forwards`)

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

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Detach from the model and give every adopted cache back its own class (idempotent)."""
        self._read_forward()  # a forward that raised: what it did to the cache before
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

    def _before_forward(self, module, args, kwargs):
        started = now()
        self._read_forward()  # an earlier forward that raised
        if kwargs.get("use_cache") is False:
            self._uncached += 1
        cache = _compat.forward_cache(kwargs)
        if cache is not None:
            self._see(cache)
            if cache is self._last_cache and read_after_forward(cache, started):
                self._read_after = cache

    def _read_forward(self):
        """Log what the forward did to the cache read after it (the flush reads it and gives back its class); that
        cache, or None."""
        cache = self._read_after
        if cache is not None:
            self._read_after = None
            cache.kvlab_recorder.flush()
        return cache

    def _after_forward(self, module, args, kwargs, output):
        read = self._read_forward()
        self._forwards += 1
        cache = _compat.output_cache(output)
        if cache is not None:  # a bare forward with use_cache=True creates its cache inside
            self._see(cache)
        else:
            cache = _compat.forward_cache(kwargs)
        # a cache read after its forward has only plain dynamic layers, which `_settle` never re-reads: just read
        if cache is not None and cache is self._last_cache and cache is not read:
            _settle(cache)

    def _built_paged(self, cache) -> None:
        self._adopted.append((cache, release_paged))
        # its own setup recorded its kind, class, dtype, layer kinds and block geometry
        cache.trace.meta.update(self._watched())
        self._list(cache)

    def _see(self, cache) -> None:
        if cache is self._last_cache:
            return
        if isinstance(cache, _compat.PagedAttentionCache):  # not a `Cache`: continuous batching's block pool
            if self._paged_refused is not None:
                warnings.warn(f"kvlab.watch does not record this paged cache: {self._paged_refused}", stacklevel=2)
                self._paged_refused = None  # once per block
            elif self._paged_builder is not None:
                if id(cache) not in self._index:
                    self._built_paged(adopt_paged(cache))  # a persistent manager's cache, first met filled
                self._last_cache = cache
        elif isinstance(cache, _compat.Cache) and id(cache) not in self._unwatched:
            if not is_instrumented(cache):
                try:
                    adopt(cache, self.model.config, owner=self)
                except CannotInstrumentError as err:  # watch nothing there, say so once, and let the model run
                    self._unwatched[id(cache)] = cache
                    log.warning("%s", _("kvlab.watch does not record this cache: {reason}").format(reason=err))
                    return
                self._adopted.append((cache, release))
                self._describe(cache)
            self._list(cache)
            self._last_cache = cache

    def _list(self, cache) -> None:
        """Add `cache` and its trace to `caches` and `traces`, once (`_index` keeps its position)."""
        if id(cache) not in self._index:
            self._index[id(cache)] = len(self.caches)
            self.caches.append(cache)
            self.traces.append(cache.trace)

    def _copied(self, original, copy) -> None:
        """Called by a watched cache's `__deepcopy__`: the copy is watched too, its trace starts as a copy."""
        self._adopted.append((copy, release))
        self._list(copy)
        copy.trace.meta["copied_from"] = self._index.get(id(original))
        copy.trace.meta["copied_at_event"] = len(copy.trace.events)

    def _tell_no_cache(self) -> None:
        """One line when the model ran but used no transformers `Cache` (none passed, or one never updated, as GPT-1
        ignores the cache `generate` hands it): an empty record is not a silent one."""
        unused = self._forwards > 0 and all(trace.is_empty for trace in self.traces)
        self.meta.update(forwards=self._forwards, no_cache=unused)
        if unused:
            self.meta["model_type"] = _model_type(self.model)
            for trace in self.traces:  # caches handed to the model and never used
                trace.meta.update(no_cache=True, model_type=self.meta["model_type"])
            # every forward with use_cache=False though the model (and transformers) caches by default: the caller
            # asked, and knows (info level)
            configs = (self.model.config, getattr(self.model, "generation_config", None))
            asked = self._uncached == self._forwards and all(
                getattr(c, "use_cache", True) is not False for c in configs
            )
            (log.info if asked else log.warning)("%s", self._no_cache_line())

    def _no_cache_line(self) -> str:
        return _(
            "kvlab.watch saw {forwards} forwards of {model_type} and no transformers Cache in use (the model keeps "
            "its own past, or none, or ran with use_cache=False): nothing was traced."
        ).format(forwards=self._forwards, model_type=_model_type(self.model))

    def _watched(self) -> dict:
        return {"model": model_name(self.model), "watched": True}

    def _describe(self, cache) -> None:
        meta = cache.trace.meta
        meta.update(
            self._watched(),
            cache_kind=cache_kind(cache),
            cache_class=cache._kvlab_original_class.__name__,
            dtype=dtype_name(self.model.dtype),
            layer_kinds=list(_recording_part(cache)._kvlab_layer_kinds),  # the config's, as `adopt` read them
        )
        if meta["cache_kind"] == "quantized":
            meta["options"] = {"backend": cache.backend}

    @property
    def trace(self) -> Trace:
        """The trace of the cache the model used last (`traces` has one per cache)."""
        if self._last_cache is None:
            raise NoCacheSeenError(self._no_cache_line() if self._forwards else _(NOTHING_RAN))
        return self.traces[self._index[id(self._last_cache)]]

    def __repr__(self) -> str:
        state = "watching" if self._handles else "closed"
        return f"Watch({type(self.model).__name__}, {len(self.traces)} caches seen, {state})"


def _model_type(model) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__)


def _recording_part(cache):
    """The cache that holds kvlab's reading of the config: `cache`, or an encoder-decoder pair's decoder half."""
    return cache.self_attention_cache if isinstance(cache, _compat.EncoderDecoderCache) else cache


def _settle(cache) -> None:
    """Read again, at the end of a forward, the layers of `cache` that may change outside the methods kvlab records
    (an indexer, a compressor's buffers), and log those that did. Plain layers cost one class lookup each."""
    pair = isinstance(cache, _compat.EncoderDecoderCache)
    for part in (cache.self_attention_cache, cache.cross_attention_cache) if pair else (cache,):
        refresh = getattr(part, "_kvlab_refresh", None)  # kvlab's caches (not continuous batching's block pool)
        if refresh is None:
            continue
        part.kvlab_recorder.flush()  # the forward's deferred updates, read while its layers hold what it left
        layer_types = tuple(map(type, part.layers))  # unchanged since the last forward: known to need no re-read
        if part.__dict__.get("_kvlab_plain_types") == layer_types:
            continue
        if all(reads_every_change(layer) for layer in part.layers):
            part.__dict__["_kvlab_plain_types"] = layer_types
        else:
            refresh("forward")


def watch(model) -> Watch:
    """A context manager recording every cache `model` uses inside the block."""
    return Watch(model)
