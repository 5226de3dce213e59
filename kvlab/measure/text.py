"""Real English text that needs no download: the reference-manual text shipped with Python (pydoc_data).

Two sources from the same topics, each kept exactly as the numbers measured with it were:

- `english_text` / `prompt_ids`: four prose topics in a fixed order, for the notebooks' long prompts (a Gemma 3
  prompt longer than its 512-token window) and perplexity. The topics are prose, not grammar listings.
- `pydoc_text` / `token_windows`: every topic, sorted (~1 MB of prose and code), cut into windows of token ids at
  seeded offsets, so every run of `kvlab bench` reads the same text.

The text belongs to the Python release: a different Python may tokenize to different prompts, so notebooks print
the Python version next to numbers that depend on it.
"""

from __future__ import annotations

import random
import sys

import torch

PROSE_TOPICS = ("objects", "naming", "execmodel", "exceptions")


def english_text() -> str:
    """The prose topics of Python's reference manual, joined in a fixed order."""
    from pydoc_data.topics import topics

    missing = [t for t in PROSE_TOPICS if t not in topics]
    if missing:
        raise RuntimeError(f"pydoc_data.topics of Python {sys.version.split()[0]} lacks {missing}")
    return "\n\n".join(topics[t] for t in PROSE_TOPICS)


def prompt_ids(tokenizer, n_tokens: int) -> torch.Tensor:
    """The first `n_tokens` tokens of `english_text()`, shape (1, n_tokens), special tokens included."""
    ids = tokenizer(english_text(), return_tensors="pt").input_ids  # (1, total_tokens)
    if ids.shape[-1] < n_tokens:
        raise ValueError(f"the reference text has only {ids.shape[-1]} tokens; asked for {n_tokens}")
    return ids[:, :n_tokens]


def pydoc_text() -> str:
    """The help text of Python's language topics, in a fixed (sorted) order, ~1 MB of English prose and code."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def token_windows(tokenizer, length: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """`count` windows of `length` token ids of `pydoc_text()`, each (1, length), at seeded non-overlapping
    offsets (no special tokens)."""
    if length < 2 or count < 1:
        raise ValueError(f"need length >= 2 and count >= 1; got length={length}, count={count}")
    ids = tokenizer(pydoc_text(), return_tensors="pt", add_special_tokens=False).input_ids[0]
    slots = len(ids) // length
    if slots < count:
        raise ValueError(f"the pydoc text holds {slots} windows of {length} tokens; asked for {count}")
    starts = sorted(random.Random(seed).sample(range(slots), count))
    return [ids[s * length : (s + 1) * length].unsqueeze(0) for s in starts]
