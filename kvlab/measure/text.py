"""Real English text that needs no download: the reference-manual prose shipped with Python (pydoc_data).

Used for long prompts (a Gemma 3 prompt longer than its 512-token window) and perplexity. The topics below are
prose, not grammar listings. The text belongs to the Python release: a different Python may tokenize to
different prompts, so notebooks print the Python version next to numbers that depend on it.
"""

from __future__ import annotations

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
