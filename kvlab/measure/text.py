"""Real English text that needs no download: the reference-manual text shipped with Python (pydoc_data). It belongs
to the Python release, so notebooks print the Python version next to numbers that depend on it."""

from __future__ import annotations

import random
import sys

import torch

from kvlab.i18n import _

PROSE_TOPICS = ("objects", "naming", "execmodel", "exceptions")


def english_text() -> str:
    """Prose topics (not grammar listings) of Python's reference manual in a fixed order: the notebooks' prompts."""
    from pydoc_data.topics import topics

    missing = [t for t in PROSE_TOPICS if t not in topics]
    if missing:
        raise RuntimeError(
            _("pydoc_data.topics of Python {version} lacks {missing}").format(
                version=sys.version.split()[0], missing=missing
            )
        )
    return "\n\n".join(topics[t] for t in PROSE_TOPICS)


def prompt_ids(tokenizer, n_tokens: int) -> torch.Tensor:
    """The first `n_tokens` tokens of `english_text()`, shape (1, n_tokens), special tokens included."""
    ids = tokenizer(english_text(), return_tensors="pt").input_ids  # (1, total_tokens)
    if ids.shape[-1] < n_tokens:
        raise ValueError(
            _("the reference text has only {available} tokens; asked for {n_tokens}").format(
                available=ids.shape[-1], n_tokens=n_tokens
            )
        )
    return ids[:, :n_tokens]


def pydoc_text() -> str:
    """Every language topic, sorted: ~1 MB of English prose and code, for the bench's windows."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def token_windows(tokenizer, length: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """`count` windows of `length` token ids of `pydoc_text()`, each (1, length), at seeded non-overlapping
    offsets (no special tokens)."""
    if length < 2 or count < 1:
        raise ValueError(
            _("need length >= 2 and count >= 1; got length={length}, count={count}").format(length=length, count=count)
        )
    ids = tokenizer(pydoc_text(), return_tensors="pt", add_special_tokens=False).input_ids[0]
    slots = len(ids) // length
    if slots < count:
        raise ValueError(
            _("the pydoc text holds {slots} windows of {length} tokens; asked for {count}").format(
                slots=slots, length=length, count=count
            )
        )
    starts = sorted(random.Random(seed).sample(range(slots), count))
    return [ids[s * length : (s + 1) * length].unsqueeze(0) for s in starts]
