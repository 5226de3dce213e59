"""The Cache Explorer: an ipywidgets app to run a model with a chosen cache and watch the cache live
(`kvlab.explorer.explore()` in a notebook; `kvlab explore` serves it with Voila).

`Explorer` and `explore` are imported on first use: `kvlab explore` reads the model names without ipywidgets.
"""

from typing import TYPE_CHECKING

from kvlab import lazy

if TYPE_CHECKING:  # the exports, once (kvlab.lazy reads them; ruff: nothing uses them here)
    from kvlab.explorer.app import Explorer, explore  # noqa: F401

__getattr__, __dir__ = lazy.exports(__name__)
