"""The meta method beside a live run: a config's cache sized by transformers on the meta device, next to the bytes
a watched generation of a real (tiny) model of that config held, per layer kind.

`kvlab.size.meta` never runs a weight: it trusts that transformers' cache classes, filled with meta tensors of the
true shapes, keep what a real run keeps. This is the check of that trust for one config, in one line of rows:

    with kvlab.watch(model) as watch:
        out = model.generate(prompt, do_sample=False, max_new_tokens=4, min_new_tokens=4)
    beside_live(model.config, watch.trace, prompt_tokens=prompt.shape[-1], sequence_tokens=out.shape[-1])

The trace is read as data (its last update per layer), so this module needs no model and no watcher.
"""

from __future__ import annotations

from typing import NamedTuple

from kvlab.model_facts import tokens_held
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
    """{layer kind: (layers, bytes held)} at the end of a trace: each layer's last update, as `final_layers` gives
    it. A cross-attention layer counts as kind "cross", as the meta cache names it."""
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
    """One row per layer kind: the meta run of `config` (a prefill of `prompt_tokens`, then one-token steps up to
    the tokens held) beside the `trace` of the live generation that ended with `sequence_tokens` tokens. `dtype`
    is the live model's (a torch dtype or its name): the meta bytes are counted in it. Kinds holding no bytes on
    either side (a placeholder layer) are left out; a kind only one side has shows 0 on the other."""
    dtype_name = str(dtype).removeprefix("torch.")
    meta = meta_cache_bytes(config, held_tokens(sequence_tokens), prefill=prompt_tokens, dtype=dtype_name)
    meta_layers: dict[str, int] = {}
    for layer in meta.per_layer:
        meta_layers[layer.layer_kind] = meta_layers.get(layer.layer_kind, 0) + 1
    live = live_by_kind(trace)
    rows = []
    for kind in dict.fromkeys([*meta.by_layer_kind, *live]):  # meta's order, then any kind only the trace has
        meta_bytes, (live_layers, live_bytes) = meta.by_layer_kind.get(kind, 0), live.get(kind, (0, 0))
        if meta_bytes or live_bytes:
            rows.append(KindRow(kind, meta_layers.get(kind, live_layers), meta_bytes, live_bytes))
    return rows
