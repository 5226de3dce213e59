"""The Cache Explorer: an ipywidgets app to run a model with a chosen cache and watch the cache live.

import kvlab
kvlab.explorer.explore()          # in a notebook; `kvlab explore` serves it with Voila
"""

from kvlab.explorer.app import Explorer, explore

__all__ = ["Explorer", "explore"]
