"""Key-norm eviction (Devoto et al., "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression",
EMNLP 2024; kvpress's `KnormPress`): keys with a LOW L2 norm draw high attention, so when the cache is over budget
each head keeps the `budget` keys of lowest norm. A worked example of a strategy.

    from transformers import Cache
    model.generate(**inputs, past_key_values=Cache(layer_class_to_replicate=KeyNormLayer))

The paper and kvpress compress a prompt once; a streamed text has no prompt, so this layer scores at every step, and
keeps the last `recent` tokens whatever their norm (the next query's neighbours: without them a token could be dropped
the step it was written). Each head keeps its own tokens, in their original order and at their original positions.
"""

import torch
from transformers.cache_utils import DynamicLayer


class KeyNormLayer(DynamicLayer):
    """Keeps `budget` tokens per head: the last `recent`, and the older ones whose keys have the lowest L2 norm."""

    budget, recent = 128, 8
    is_croppable = False  # an evicted token cannot be given back

    def __init__(self, budget: int | None = None, recent: int | None = None):
        super().__init__()
        self.budget = self.budget if budget is None else budget
        self.recent = self.recent if recent is None else recent
        self.cumulative_length = 0  # tokens given so far: the next token's position (transformers' own name)

    def update(self, key_states, value_states, *args, **kwargs):
        # key_states, value_states: (batch, kv_heads, new, head_dim)
        keys, values = super().update(key_states, value_states)  # everything so far: the query attends to it all
        self.cumulative_length += key_states.shape[-2]
        older = keys.shape[-2] - self.recent  # slots before the protected recent ones
        keep = self.budget - self.recent  # how many of those survive, per head
        if older > keep:
            norms = keys[..., :older, :].float().norm(dim=-1)  # (batch, kv_heads, older)
            chosen = norms.topk(keep, dim=-1, largest=False).indices.sort(dim=-1).values  # lowest norms, in order
            self.keys = torch.cat([pick(keys, chosen), keys[..., older:, :]], dim=-2)
            self.values = torch.cat([pick(values, chosen), values[..., older:, :]], dim=-2)
        return keys, values

    def get_seq_length(self) -> int:
        return self.cumulative_length  # the next token's position (generate and the mask's query offset read it)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # every kept slot is visible; the new tokens are causal among themselves
        kept = self.keys.shape[-2] if self.is_initialized else 0
        return kept + query_length, self.cumulative_length - kept  # (slots attended, position of the first)


def pick(states: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """`states` (batch, kv_heads, seq, head_dim) at each head's own `slots` (batch, kv_heads, kept)."""
    return states.gather(2, slots.unsqueeze(-1).expand(-1, -1, -1, states.shape[-1]))
