"""Attention sinks + a recent window (Xiao et al., "Efficient Streaming Language Models with Attention Sinks",
ICLR 2024): keep the first `sinks` tokens and the last `window` ones, drop the middle. A worked example of a strategy.

    from transformers import Cache
    model.generate(**inputs, past_key_values=Cache(layer_class_to_replicate=SinkWindowLayer))

Positions. Keys are cached after RoPE has rotated them, so a kept key keeps the position it was seen at. With
`inv_freq=None` (the default) that is all: the query is ~N positions past a sink, a distance the model may never
have seen in training. Give the model's RoPE frequencies (`inv_freq`) and the sinks are re-rotated each step to sit
right before the window, as StreamingLLM does: RoPE scores depend only on the query-key distance, so this is the
paper's "positions within the cache" (sinks at 0..s-1, window at s.., query next) with generate's own positions.
"""

import torch
from transformers.cache_utils import DynamicLayer


class SinkWindowLayer(DynamicLayer):
    """Keeps `sinks` + `window` tokens; defaults are class attributes, as `Cache` builds each layer with no argument
    (subclass, or `functools.partial(SinkWindowLayer, sinks=4, window=60)`)."""

    sinks, window = 4, 124
    is_croppable = False  # a dropped middle cannot be given back

    def __init__(self, sinks: int | None = None, window: int | None = None, inv_freq: torch.Tensor | None = None):
        super().__init__()
        self.sinks = self.sinks if sinks is None else sinks
        self.window = self.window if window is None else window
        self.inv_freq = inv_freq  # (head_dim // 2,) the layer's RoPE frequencies; None: keys keep their positions
        self.cumulative_length = 0  # tokens given so far: the next token's position (transformers' own name)

    def update(self, key_states, value_states, *args, **kwargs):
        # key_states, value_states: (batch, kv_heads, new, head_dim), keys rotated at their own positions
        keys, values = super().update(key_states, value_states)  # everything so far: the query attends to it all
        self.cumulative_length += key_states.shape[-2]
        recent = keys.shape[-2] - self.window  # the window's first slot
        dropped = recent - self.sinks
        if dropped > 0:  # keep the first `sinks` and the last `window` slots, drop the middle
            self.keys = torch.cat([keys[..., : self.sinks, :], keys[..., recent:, :]], dim=-2)
            self.values = torch.cat([values[..., : self.sinks, :], values[..., recent:, :]], dim=-2)
            if self.inv_freq is not None:  # the sinks move up by `dropped` positions: right before the window again
                self.keys[..., : self.sinks, :] = rotate(self.keys[..., : self.sinks, :], dropped, self.inv_freq)
        return keys, values

    def get_seq_length(self) -> int:
        return self.cumulative_length  # the next token's position (generate and the mask's query offset read it)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # every kept slot is visible; the new tokens are causal among themselves
        kept = self.keys.shape[-2] if self.is_initialized else 0
        return kept + query_length, self.cumulative_length - kept  # (slots attended, position of the first)


def rotate(keys: torch.Tensor, positions: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """`keys` rotated by RoPE `positions` further on: RoPE at p then at d is RoPE at p + d (transformers' half-split
    layout, `rotate_half`)."""
    # keys: (batch, kv_heads, seq, head_dim); inv_freq: (head_dim // 2,)
    angles = (positions * inv_freq.float()).repeat(2).to(keys.device)  # (head_dim,)
    first, second = keys.float().chunk(2, dim=-1)
    rotated_half = torch.cat([-second, first], dim=-1)
    return (keys.float() * angles.cos() + rotated_half * angles.sin()).to(keys.dtype)
