"""The meta method beside a live run: a config's cache sized on the meta device next to the bytes a watched
generation of a real (tiny) model of that config held, per layer kind; the check that meta tensors keep what a
real run keeps. The trace is read as data, so this needs no model and no watcher:

    with kvlab.watch(model) as watch:
        out = model.generate(prompt, do_sample=False, max_new_tokens=4, min_new_tokens=4)
    beside_live(model.config, watch.trace, prompt_tokens=prompt.shape[-1], sequence_tokens=out.shape[-1])
"""

from __future__ import annotations

from typing import NamedTuple

from kvlab.model_facts import tokens_held
from kvlab.names import dtype_name
from kvlab.size.layers import bytes_by_kind
from kvlab.size.meta import meta_cache_bytes


class KindRow(NamedTuple):
    kind: str  # kvlab's layer kind ("full", "sliding", "chunked", "linear", ...), "cross" for cross-attention
    layers: int  # layers of this kind in the meta cache
    meta_bytes: int  # what transformers' cache holds on meta after the same tokens
    live_bytes: int  # what the watched generation's cache held at the end

    @property
    def exact(self) -> bool:
        return self.meta_bytes == self.live_bytes


def live_by_kind(trace) -> dict[str, tuple[int, int]]:
    """{layer kind: (layers, bytes held)} at each layer's last update (cross-attention as kind "cross")."""
    kinds: dict[str, tuple[int, int]] = {}
    for event in trace.final_layers():
        kind = "cross" if event["role"] == "cross" else event["layer_kind"]
        layers, held = kinds.get(kind, (0, 0))
        kinds[kind] = (layers + 1, held + event["bytes_held"])
    return kinds


def held_tokens(sequence_tokens: int) -> int:
    """Tokens a generation's cache holds after a sequence of N tokens (prompt and new ones): N - 1."""
    return tokens_held(sequence_tokens - 1, 1)


def beside_live(config, trace, *, prompt_tokens: int, sequence_tokens: int, dtype="float32") -> list[KindRow]:
    """One row per layer kind: the meta run of `config` (a prefill of `prompt_tokens`, then one-token steps) beside
    the `trace` of the live generation that ended with `sequence_tokens` tokens, in the live model's `dtype`. Kinds
    holding no bytes on either side are left out; a kind only one side has shows 0 on the other."""
    meta = meta_cache_bytes(config, held_tokens(sequence_tokens), prefill=prompt_tokens, dtype=dtype_name(dtype))
    meta_layers = bytes_by_kind((layer.layer_kind, 1) for layer in meta.per_layer)  # layers, not bytes
    live = live_by_kind(trace)
    rows = []
    for kind in dict.fromkeys([*meta.by_layer_kind, *live]):  # meta's order, then any kind only the trace has
        meta_bytes, (live_layers, live_bytes) = meta.by_layer_kind.get(kind, 0), live.get(kind, (0, 0))
        if meta_bytes or live_bytes:
            rows.append(KindRow(kind, meta_layers.get(kind, live_layers), meta_bytes, live_bytes))
    return rows
