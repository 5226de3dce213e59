"""A user's strategy file, as the README teaches: keep the first tokens and the most recent ones (the tests' own,
loaded by `kvlab.strategies.load` as "tests/strategies/keep_ends.py:KeepEnds")."""

import torch
from transformers.cache_utils import DynamicLayer


class KeepEnds(DynamicLayer):
    """Attends to everything it holds plus the new tokens, then keeps the first `first` and the last `last`."""

    def __init__(self, first: int = 2, last: int = 4):
        super().__init__()
        self.first, self.last = first, last

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        keys = torch.cat([self.keys, key_states], dim=-2)  # (batch, kv_heads, seq, head_dim)
        values = torch.cat([self.values, value_states], dim=-2)
        self.keys, self.values = keys, values
        if keys.shape[-2] > self.first + self.last:
            self.keys = torch.cat([keys[..., : self.first, :], keys[..., -self.last :, :]], dim=-2)
            self.values = torch.cat([values[..., : self.first, :], values[..., -self.last :, :]], dim=-2)
        return keys, values  # this step attends to all of them

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        held = self.keys.shape[-2] if self.is_initialized and self.keys.dim() == 4 else 0
        return held + query_length, 0


class NotALayer:
    """Something that is not a transformers layer class."""
