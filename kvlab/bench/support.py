"""Why a configuration cannot run here: kvlab's request rules, and transformers' own words where it has them."""

from __future__ import annotations

from kvlab import _compat
from kvlab.bench.configs import BenchConfig
from kvlab.errors import KvlabUserError
from kvlab.quantized_backends import DEFAULT_BACKEND
from kvlab.request import Request
from kvlab.rules import check


def transformers_reason(model, config: BenchConfig) -> str | None:
    """The error transformers' own cache class raises for this configuration at construction, if any."""
    if config.cache_kind != "quantized":
        return None
    options = {k: v for k, v in config.options.items() if k != "backend"}
    try:
        _compat.QuantizedCache(config.options.get("backend", DEFAULT_BACKEND), model.config, **options)
    except (ValueError, ImportError) as err:
        return str(err)
    return None


def unsupported_reason(model, config: BenchConfig, prompt_tokens: int, new_tokens: int) -> str | None:
    """None when the configuration can run; otherwise kvlab's reason and, if it has one, transformers'."""
    if config.plain:
        return None  # plain configurations report the error of their first run
    request = Request(
        config.cache_kind,
        dict(config.options),
        model.config,
        prompt_tokens=prompt_tokens,
        new_tokens=new_tokens,
        dtype=model.dtype,
        device=model.device,
        generate_sizes=True,
    )
    try:
        check(request)
    except KvlabUserError as err:  # an option, or the memory or positions this request needs
        theirs = transformers_reason(model, config)
        return f"transformers: {theirs} (kvlab: {err})" if theirs else f"kvlab: {err}"
    return None
