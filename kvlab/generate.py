"""`kvlab.generate`: `model.generate` with `cache_implementation=` / `cache_config=` answered by kvlab.

The guide picks caches two ways: a cache object passed to `generate`, or a name
(`cache_implementation="static"`, `cache_config={"backend": "hqq", "nbits": 4}`). This takes the second form
with transformers' names and defaults, builds the instrumented equivalent and passes it as the first form.
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.caches import make_cache
from kvlab.trace import Trace


def generate(model, input_ids, *, cache_implementation: str | None = "dynamic", cache_config: dict | None = None,
             max_cache_len: int | None = None, trace: Trace | None = None, **generate_kwargs):  # fmt: skip
    """Returns (generate's output, the instrumented cache). `cache_implementation=None` means "dynamic"."""
    kind = cache_implementation or "dynamic"
    options = dict(cache_config or {})
    if kind in ("static", "offloaded_static"):
        # transformers sizes a static cache for this call's max_length unless told otherwise
        new_tokens = generate_kwargs.get("max_new_tokens", model.generation_config.max_new_tokens or 0)
        options.setdefault("max_cache_len", max_cache_len or input_ids.shape[-1] + new_tokens)
    cache = make_cache(kind, model.config, trace=trace, **options)
    output = model.generate(input_ids, **{_compat.CACHE_KWARG: cache}, **generate_kwargs)
    return output, cache
