"""Real English text that every Python install carries offline: the pydoc topics (`pydoc_data.topics`).

Windows of token ids are cut from it at seeded offsets, so every run of the bench reads the same text.
"""

from __future__ import annotations

import random

import torch


def pydoc_text() -> str:
    """The help text of Python's language topics, in a fixed (sorted) order, ~1 MB of English prose and code."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def token_windows(tokenizer, length: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """`count` windows of `length` token ids, each (1, length), at seeded non-overlapping offsets."""
    if length < 2 or count < 1:
        raise ValueError(f"need length >= 2 and count >= 1; got length={length}, count={count}")
    ids = tokenizer(pydoc_text(), return_tensors="pt", add_special_tokens=False).input_ids[0]
    slots = len(ids) // length
    if slots < count:
        raise ValueError(f"the pydoc text holds {slots} windows of {length} tokens; asked for {count}")
    starts = sorted(random.Random(seed).sample(range(slots), count))
    return [ids[s * length : (s + 1) * length].unsqueeze(0) for s in starts]
