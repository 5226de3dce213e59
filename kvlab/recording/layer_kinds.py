"""Each layer's kind ("full", "sliding", "chunked", "linear", "dummy"): a config fact, so no torch here."""

from __future__ import annotations

from kvlab import _compat

KIND_BY_LAYER_TYPE = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "conv": "linear",
    "hybrid": "full",
    "hybrid_sliding": "sliding",
    "dummy": "dummy",
}


def layer_kinds(config, num_layers: int | None = None) -> list[str]:
    """kvlab's layer kind for each layer of a model config."""
    kinds = [KIND_BY_LAYER_TYPE.get(t, "full") for t in _compat.layer_types(config)]
    return kinds if num_layers is None else (kinds + ["full"] * num_layers)[:num_layers]


def layer_kind_at(kinds, layer_idx: int, layer=None) -> str:
    """Layer `layer_idx`'s kind: the config's (`kinds`), else (a layer past them, a cache built without a config)
    what the `layer` itself says: "sliding" if it slides, else "full"."""
    if layer_idx < len(kinds):
        return kinds[layer_idx]
    return "sliding" if getattr(layer, "is_sliding", False) else "full"
