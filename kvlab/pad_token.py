"""The pad token of every greedy `generate`: the tokenizer's, else the model's end-of-sequence token (transformers
falls back to the same id itself, but warns on every call that it did)."""

from __future__ import annotations


def pad_token_id(tokenizer, model) -> int | None:
    pad = getattr(tokenizer, "pad_token_id", None)
    return pad if pad is not None else model.config.eos_token_id
