"""Every cache kind kvlab knows, once, without torch: the parser, `kvlab size` and the option checks read it
before any model loads. `kvlab.caches.kinds` resolves the class names to classes; the quantized kind's backends have
rows of their own (`kvlab.quantized_backends`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvlab.quantized_backends import (
    BACKEND_NAMES,
    BACKENDS_BY_NAME,
    DEFAULT_BACKEND,
    QUANTIZED_OPTIONS,
    QuantizedBackend,
)

# Token slots per block, the requests served, the pool's size in blocks (0: room for every request at its end).
PAGED_OPTIONS = ("page_size", "requests", "num_blocks")
PAGE_SIZES = (4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class CacheKind:
    name: str  # the `cache_implementation` name, and the trace's `cache_kind`
    help: str  # one line, for `kvlab run --help` and the explorer
    options: tuple[str, ...] = ()  # any other is refused (`kvlab.caches.options`)
    defaults: dict = field(default_factory=dict)  # what an option is when not given
    static: bool = False  # preallocates `max_cache_len` slots per layer
    offloads: bool = False  # offloading is a flag of DynamicCache/StaticCache, not a class of its own
    records_past: bool = False  # `activate_past_recording()`: sliding layers keep what a crop may bring back
    cache_class: str = ""  # transformers' class (`kvlab._compat`); "" where `generate` builds none
    batch: bool = False  # continuous batching: `model.generate_batch` builds it (inside its manager), `generate` cannot

    @property
    def twin(self) -> str:
        """kvlab's instrumented subclass of `cache_class`: "offloaded_static" -> "InstrumentedOffloadedStaticCache"."""
        return f"Instrumented{self.name.title().replace('_', '')}Cache" if self.cache_class else ""


_NO_SLIDING = "offload_only_non_sliding"
# fmt: off
KINDS = (
    CacheKind("none", "no cache (use_cache=False)"),
    CacheKind("dynamic", "grows a token at a time", records_past=True, cache_class="DynamicCache"),
    CacheKind("static", "max_cache_len slots per layer, allocated at once", ("max_cache_len",), static=True,
              cache_class="StaticCache"),
    CacheKind("offloaded", "dynamic, its layers kept in CPU memory", (_NO_SLIDING,), {_NO_SLIDING: False},
              offloads=True, records_past=True, cache_class="DynamicCache"),
    CacheKind("offloaded_static", "static, its layers kept in CPU memory", ("max_cache_len", _NO_SLIDING),
              {_NO_SLIDING: True}, static=True, offloads=True, cache_class="StaticCache"),
    CacheKind("quantized", f"older tokens quantized ({', '.join(BACKEND_NAMES)}), the newest in full precision",
              ("backend", *QUANTIZED_OPTIONS), {"backend": DEFAULT_BACKEND}, cache_class="QuantizedCache"),
    CacheKind("paged", "continuous batching: blocks of a shared pool (model.generate_batch)", PAGED_OPTIONS,
              {"page_size": 16, "requests": 4, "num_blocks": 0}, batch=True),
)
# fmt: on
BY_NAME = {kind.name: kind for kind in KINDS}

CACHE_KINDS = tuple(kind.name for kind in KINDS if not kind.batch)  # what `generate` builds
BATCH_KINDS = tuple(kind.name for kind in KINDS if kind.batch)
PAGED = "paged"
KIND_OPTIONS = {kind.name: kind.options for kind in KINDS}
STATIC_KINDS = tuple(kind.name for kind in KINDS if kind.static)
PAST_RECORDING_KINDS = tuple(kind.name for kind in KINDS if kind.records_past)
# Every option name of the kinds `generate` builds, in the order the command line and the explorer show them.
OPTION_NAMES = ("backend", *QUANTIZED_OPTIONS, "max_cache_len", _NO_SLIDING)
PAGED_DEFAULTS = BY_NAME[PAGED].defaults


def is_strategy_spec(text) -> bool:
    """ "FILE.py:ClassName" names a strategy (a layer class of the user's, `kvlab.strategies`), not a kind."""
    return isinstance(text, str) and text.rpartition(":")[0].endswith(".py")


def quantized_backend(cache_kind: str, options: dict) -> QuantizedBackend | None:
    """The row of the backend a cache of `cache_kind` with `options` quantizes with: None for a kind that takes no
    backend (a strategy's spec included) or a name no row has (the option check refuses it)."""
    kind = BY_NAME.get(cache_kind)
    if kind is None or "backend" not in kind.options:
        return None
    return BACKENDS_BY_NAME.get(options.get("backend") or kind.defaults["backend"])


def offloaded_variant(cache_kind: str) -> str | None:
    """The kind that offloads the same transformers class as `cache_kind` (None where none does)."""
    cls = BY_NAME[cache_kind].cache_class
    return next((kind.name for kind in KINDS if kind.offloads and kind.cache_class == cls), None)
