"""Cache strategies: a strategy is a transformers cache-layer class (a `DynamicLayer` subclass that decides what to
keep); `load` imports and checks one, and this package ships worked examples beside it.

    from transformers import Cache
    with kvlab.watch(model) as watch:
        model.generate(**inputs, past_key_values=Cache(layer_class_to_replicate=MyLayer))
    kvlab.run(model, tokenizer, "The KV cache", cache=MyLayer)      # or cache="my_layer.py:MyLayer"
"""

from typing import TYPE_CHECKING

from kvlab import lazy

if TYPE_CHECKING:  # the exports (kvlab.lazy reads them)
    from kvlab.strategies.load import StrategyError, is_strategy, load_strategy, strategy_name  # noqa: F401

__getattr__, __dir__ = lazy.exports(__name__, submodules=True)
