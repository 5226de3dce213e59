"""Why a configuration cannot run here, in transformers' own words where transformers has them.

kvlab refuses some combinations before any work (quantized caches on models with sliding layers); the bench
also asks transformers' own class, so the "unsupported" row carries transformers' reason beside kvlab's.
"""

from __future__ import annotations

from kvlab import _compat
from kvlab.bench.configs import BenchConfig
from kvlab.cache_kinds import DEFAULT_QUANTIZED_BACKEND
from kvlab.caches.options import CacheOptionError, check_options


def transformers_reason(model, config: BenchConfig) -> str | None:
    """The error transformers' own cache class raises for this configuration at construction, if any."""
    if config.cache_kind != "quantized":
        return None
    options = {k: v for k, v in config.options.items() if k != "backend"}
    try:
        _compat.QuantizedCache(config.options.get("backend", DEFAULT_QUANTIZED_BACKEND), model.config, **options)
    except (ValueError, ImportError) as err:
        return str(err)
    return None


def unsupported_reason(model, config: BenchConfig, prompt_tokens: int, new_tokens: int) -> str | None:
    """None when the configuration can run; otherwise kvlab's reason and, if it has one, transformers'."""
    if config.plain:
        return None  # plain configurations report the error of their first run
    try:  # the option rules of kvlab.run (kvlab.caches.options), on this model, prompt and new tokens
        check_options(
            config.cache_kind,
            dict(config.options),
            model.config,
            prompt_tokens=prompt_tokens,
            max_new_tokens=new_tokens,
            require_length=False,
        )
    except CacheOptionError as err:
        theirs = transformers_reason(model, config)
        return f"transformers: {theirs} (kvlab: {err})" if theirs else f"kvlab: {err}"
    return None
