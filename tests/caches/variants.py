"""The cache variants the tests in tests/caches run through the same checks (kvpress's style): one list of named
(kind, options), each with the transformers cache it must match. A test picks the variants it needs by name, never
by position, so adding one here cannot shift what another test runs.

The quantized variants differ where the code paths do: the backend, the bits, the group size (what a packed tensor
holds) and the residual length (how often a short generation flushes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from transformers import DynamicCache, QuantizedCache, StaticCache

from kvlab import make_cache
from kvlab.cache_kinds import STATIC_KINDS


@dataclass(frozen=True)
class Variant:
    name: str  # the test id
    kind: str  # the cache kind `make_cache` builds
    options: dict = field(default_factory=dict)
    models: tuple[str, ...] = ("tiny-llama",)  # the tiny models test_drop_in.py checks it on, token for token

    def build(self, config):
        """kvlab's instrumented cache of this variant for `config`."""
        return make_cache(self.kind, config, **self.options)

    def reference(self, config):
        """The transformers cache it must match: the same class and options. transformers' offloading needs CUDA,
        so an offloaded variant's reference is the same cache without it (moving tensors changes no number)."""
        if self.kind == "quantized":
            backend, rest = self.options["backend"], {k: v for k, v in self.options.items() if k != "backend"}
            return QuantizedCache(backend, config, **rest)
        if self.kind in STATIC_KINDS:
            return StaticCache(config=config, max_cache_len=self.options["max_cache_len"])
        return DynamicCache(config=config)


VARIANTS = [
    Variant("dynamic", "dynamic", models=("tiny-llama", "tiny-gemma3", "tiny-mamba", "tiny-jamba")),
    Variant("static", "static", {"max_cache_len": 32}, models=("tiny-llama", "tiny-gemma3", "tiny-jamba")),
    Variant("offloaded", "offloaded", models=("tiny-llama", "tiny-gemma3")),
    Variant("offloaded-sliding-resident", "offloaded", {"offload_only_non_sliding": True}, models=("tiny-gemma3",)),
    Variant("offloaded_static", "offloaded_static", {"max_cache_len": 32}, models=("tiny-llama", "tiny-gemma3")),
    Variant("q-quanto-int4", "quantized", {"backend": "quanto", "nbits": 4, "residual_length": 4}),
    Variant(
        "q-quanto-int4-g16", "quantized", {"backend": "quanto", "nbits": 4, "q_group_size": 16, "residual_length": 4}
    ),
    Variant(
        "q-quanto-int4-r2", "quantized", {"backend": "quanto", "nbits": 4, "q_group_size": 32, "residual_length": 2}
    ),
    Variant("q-quanto-int2", "quantized", {"backend": "quanto", "nbits": 2, "q_group_size": 16, "residual_length": 4}),
    Variant("q-hqq-int4-axis0", "quantized", {"backend": "hqq", "nbits": 4, "q_group_size": 16, "residual_length": 4}),
    Variant("q-fp8", "quantized", {"backend": "fp8"}),
]
BY_NAME = {variant.name: variant for variant in VARIANTS}


def variants(*names: str, where: Callable[[Variant], bool] = lambda variant: True) -> list:
    """The variants named (every one when none is), in that order, those `where` holds for, as pytest params whose
    ids are their names. An unknown name is a KeyError at collection, not a variant silently skipped."""
    chosen = [BY_NAME[name] for name in names] if names else VARIANTS
    return [pytest.param(variant, id=variant.name) for variant in chosen if where(variant)]
