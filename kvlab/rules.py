"""The one pass over a request, before any work: the option rules (`kvlab.caches.options`), then the request's
own (`kvlab.size.request_rules`: files, memory, positions), each reading the facts the `Request` read once.

Every entry point that generates calls `check` and hands what it returns (the options that are set) to the cache
it builds, so nothing downstream checks again.
"""

from __future__ import annotations

from kvlab.caches.options import check_request_options
from kvlab.request import Request
from kvlab.size.request_rules import check_request
from kvlab.strategies.load import check_strategy, is_strategy


def check(request: Request) -> dict:
    """The option rules, then the request's; returns the options that are set.

    A strategy (`cache_kind` a layer class or "FILE.py:ClassName") is checked as a dynamic cache, the most it could
    hold, and its layer class is loaded and checked with its options (the layer's keyword arguments)."""
    strategy = is_strategy(request.cache_kind)
    checked = request.as_kind("dynamic") if strategy else request
    given = check_request_options(checked)
    if strategy:
        _layer_class, given = check_strategy(request.cache_kind, request.options, request.facts)
    check_request(checked)
    return given
