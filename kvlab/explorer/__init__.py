"""The Cache Explorer: an ipywidgets app to run a model with a chosen cache and watch the cache live.

import kvlab
kvlab.explorer.explore()          # in a notebook; `kvlab explore` serves it with Voila

`Explorer` and `explore` are imported on first use, so `kvlab explore` can read `kvlab.explorer.models`' model
names without importing the app (ipywidgets) first.
"""

import importlib

__all__ = ["Explorer", "explore"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("kvlab.explorer.app"), name)
    raise AttributeError(f"module 'kvlab.explorer' has no attribute {name!r}")
