"""Why a configuration cannot run here, in transformers' own words where transformers has them.

kvlab refuses some combinations before any work (quantized caches on models with sliding layers); the bench
also asks transformers' own class, so the "unsupported" row carries transformers' reason beside kvlab's.
"""

from __future__ import annotations

from kvlab.bench.configs import BenchConfig
from kvlab.caches.options import CacheOptionError


def transformers_reason(model, config: BenchConfig) -> str | None:
    """The error transformers' own cache class raises for this configuration at construction, if any."""
    import transformers

    if config.kind != "quantized":
        return None
    options = {k: v for k, v in config.options.items() if k != "backend"}
    try:
        transformers.QuantizedCache(config.options.get("backend", "quanto"), model.config, **options)
    except (ValueError, ImportError) as err:
        return str(err)
    return None


def unsupported_reason(model, config: BenchConfig, prompt_tokens: int, new_tokens: int) -> str | None:
    """None when the configuration can run; otherwise kvlab's reason and, if it has one, transformers'."""
    from kvlab.run import validate

    if config.plain:
        return None  # plain configurations report the error of their first run
    try:
        validate(model.config, config.kind, dict(config.options), prompt_tokens, new_tokens)
    except CacheOptionError as err:
        theirs = transformers_reason(model, config)
        return f"transformers: {theirs} (kvlab: {err})" if theirs else f"kvlab: {err}"
    return None
